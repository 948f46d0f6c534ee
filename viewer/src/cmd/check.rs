//! `ostm-viewer check ADDR --steps N`: attach, verify N steps, print a one-line verdict.
//! The command a monitoring script runs.

use crate::cmd::attach::{ctrl_c, runtime, verdict};
use crate::exit::Exit;
use crate::live::session::{self, Options, Stop};

/// Arguments of `check`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer check 127.0.0.1:7878 --steps 600
  ostm-viewer check 127.0.0.1:7878 --steps 600 --json

Prints one line: `ok: ...`, `drift: ...` or `error: ...`.
Exit codes: 0 N steps verified; 1 drift; 2 a connection or protocol failure, a refusal,
or a stream that ended before N steps were verified.")]
pub struct Args {
    /// The host's address, HOST:PORT.
    pub addr: String,
    /// Steps to verify.
    #[arg(long)]
    pub steps: u64,
    /// The host's shared secret, if it requires one.
    #[arg(long)]
    pub token: Option<String>,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs `check`.
pub fn run(args: Args) -> Exit {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    let opts = Options {
        addr: args.addr.clone(),
        token: args.token.clone(),
        steps: Some(args.steps),
        until: None,
        record: None,
        throttle: None,
    };
    let outcome = rt.block_on(session::run(&opts, |_| {}, ctrl_c()));
    let (mut exit, line, mut obj) = verdict(&outcome);
    let mut line = line.replace('\n', "; ");
    if exit == Exit::Ok
        && outcome.verified < args.steps
        && !matches!(outcome.stop, Stop::Interrupted)
    {
        exit = Exit::Failure;
        line = format!(
            "the stream ended after {} of {} steps: {line}",
            outcome.verified, args.steps
        );
        obj["verdict"] = "error".into();
    }
    let line = match exit {
        Exit::Ok => format!("{line} on {}", args.addr),
        Exit::Different => format!("drift: {line}"),
        Exit::Failure if line.starts_with("error") => line,
        Exit::Failure => format!("error: {line}"),
    };
    if args.json {
        obj["addr"] = args.addr.into();
        obj["message"] = line.into();
        println!("{obj}");
    } else {
        println!("{line}");
    }
    exit
}
