//! `ostm-viewer check ADDR --steps N`: attach, verify N steps, print a one-line verdict.
//! The command a monitoring script runs.

use crate::args::{BundleArgs, HostArgs, MetricsArgs};
use crate::exit::Exit;
use crate::live::session::{Options, Stop};
use crate::report::bundle::{add_bundle_json, written_line};
use crate::report::log;
use crate::report::session::{drift_bundle, verdict};
use ostm_protocol::session::Goal;

/// Arguments of `check`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  # Attach now (at whatever step the host is at) and verify the next 600 steps
  ostm-viewer check 127.0.0.1:7878 --steps 600
  # The verdict as one JSON object
  ostm-viewer check 127.0.0.1:7878 --steps 600 --json | jq -r .verdict
  # A session on a NATS cluster, through whichever of its servers answers
  ostm-viewer check nats://127.0.0.1:4222,127.0.0.1:4223/demo --steps 600
  # A host on a non-loopback address requires its token (here from OSTM_TOKEN) and TLS
  ostm-viewer check sim.example.org:7878 --steps 600 --tls
  # crontab: every 5 minutes; cron mails the line when the exit code is not 0
  */5 * * * *  ostm-viewer check 127.0.0.1:7878 --steps 600 >> $HOME/ostm-check.log || tail -n 1 $HOME/ostm-check.log
  # Prometheus metrics on http://127.0.0.1:9465/metrics while it runs (the address on stderr)
  ostm-viewer check 127.0.0.1:7878 --steps 100000 --metrics 9465

Prints exactly one line: `ok: verified N of the T steps from A to B on ADDR`, `drift: ...` or
`error: ...` (with --json, one object: verdict, message, verified, lag, ...). On drift
it writes a failure bundle (--bundle PATH, else drift-STEP.ostmb in the current directory,
or drift-STEP-2.ostmb, ... when that name is taken; --no-bundle for none) and the line ends with
`bundle written: PATH (reproduce: ostm-viewer replay PATH)`.

Exit codes:
  0  N steps verified (or stopped by Ctrl-C: the line starts with `stopped:`)
  1  drift: the line names the step, body and field
  2  a connection or protocol failure, a refusal (token, version, host full), or a stream
     that ended before N steps were verified")]
pub struct Args {
    /// The host's address, HOST[:PORT] (port 7878 when none is given), or
    /// nats://HOST:PORT/NAME for a session on NATS JetStream (several servers of a cluster
    /// joined by commas before /NAME: nats://HOST:PORT,HOST:PORT/NAME).
    pub addr: String,
    /// Steps to verify.
    #[arg(long)]
    pub steps: u64,
    #[command(flatten)]
    pub host: HostArgs,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub bundle: BundleArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// Runs `check`.
pub fn run(mut args: Args) -> Exit {
    let started = args.host.connect(&mut args.addr).and_then(|host| {
        let metrics = args.metrics.start(&args.addr, None)?;
        Ok((host, metrics))
    });
    let (opts, metrics) = match started {
        Ok((host, metrics)) => (
            Options {
                goal: Goal {
                    steps: Some(args.steps),
                    until: None,
                },
                ..host
            },
            metrics,
        ),
        Err(e) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"verdict": "error", "addr": args.addr, "message": e})
                );
            } else {
                println!("error: {e}");
            }
            return Exit::Failure;
        }
    };
    // The one line on stdout is the verdict: where the metrics are goes to stderr.
    if let Some(addr) = metrics.addr() {
        eprintln!("ostm-viewer metrics on http://{addr}/metrics");
    }
    let outcome = log::session(&opts, |ev| metrics.on(&ev));
    metrics.ended(&outcome);
    let (mut exit, line, mut obj) = verdict(&outcome);
    let mut line = line.replace('\n', "; ");
    // A stream that ended first (with its steps to the host's last left open, or not) is
    // a failure of `check`, whose verdict is about N steps.
    if exit != Exit::Failure
        && !matches!(outcome.stop, Stop::Drift(_) | Stop::Interrupted)
        && outcome.verified < args.steps
    {
        exit = Exit::Failure;
        line = format!(
            "the stream ended after {} of {} steps: {line}",
            outcome.verified, args.steps
        );
        obj["verdict"] = "error".into();
    }
    let bundle = drift_bundle(&outcome, &args.bundle, None);
    if let Some(w) = &bundle {
        line = format!("{line}; {}", written_line(w));
    }
    let line = match exit {
        Exit::Ok => format!("{line} on {}", args.addr),
        Exit::Different => format!("drift: {line}"),
        Exit::Failure if line.starts_with("error") => line,
        Exit::Failure => format!("error: {line}"),
    };
    add_bundle_json(&mut obj, bundle.as_ref());
    obj["addr"] = args.addr.clone().into();
    obj["message"] = line.clone().into();
    if args.json {
        println!("{obj}");
    } else {
        println!("{line}");
    }
    log::end(&args.addr, &obj);
    exit
}
