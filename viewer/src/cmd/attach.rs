//! `ostm-viewer attach ADDR`: attach to a live host at any step, verify every record by
//! step number, optionally record, and explain the first drift.

use crate::exit::Exit;
use crate::live::session::{self, Event, Options, Outcome, Status, Stop};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `attach`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer attach 127.0.0.1:7878
  ostm-viewer attach 127.0.0.1:7878 --record session.ostm --steps 6000
  ostm-viewer attach 127.0.0.1:7878 --until 20000 --json
  ostm-viewer attach 10.0.0.5:7878 --token \"$OSTM_TOKEN\"

Exit codes: 0 stopped as asked (--steps, --until, Ctrl-C) or the host ended the stream
cleanly; 1 drift (the report names the step, body, field and stage); 2 a connection or
protocol failure, or a refusal.
A recording continues in SESSION.1.ostm, SESSION.2.ostm, ... after each resync.")]
pub struct Args {
    /// The host's address, HOST:PORT.
    pub addr: String,
    /// Stop after verifying this many steps.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Stop once the viewer's world reaches this step.
    #[arg(long)]
    pub until: Option<u64>,
    /// Record the session to this .ostm file (start snapshot and hash rows).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// The host's shared secret, if it requires one.
    #[arg(long)]
    pub token: Option<String>,
    /// Print events and the result as JSON objects, one per line, for scripts.
    #[arg(long)]
    pub json: bool,
    /// Test only: verify at most this many steps per second (with a small receive buffer).
    #[arg(long, hide = true)]
    pub throttle: Option<u32>,
}

/// Resolves on Ctrl-C (never, if the signal cannot be watched).
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A current-thread runtime for one session.
pub fn runtime() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::exit::fail(format!("cannot start the runtime: {e}")))
}

fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn status_line(s: &Status) -> String {
    format!(
        "host step {} | verified {} | lag {} | {:.1} steps/s",
        s.host_step,
        s.verified,
        s.lag(),
        s.rate
    )
}

/// Runs `attach`.
pub fn run(args: Args) -> Exit {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    let opts = Options {
        addr: args.addr.clone(),
        token: args.token.clone(),
        steps: args.steps,
        until: args.until,
        record: args.record.clone(),
        throttle: args.throttle,
    };
    let json = args.json;
    let terminal = !json && std::io::stderr().is_terminal();
    let mut last_plain = Instant::now();
    let outcome = rt.block_on(session::run(
        &opts,
        |ev| match ev {
            Event::Attached { welcome, world } => {
                let s = world.setup();
                if json {
                    out(&serde_json::json!({"event": "attached", "addr": opts.addr, "step": world.step, "dims": s.dims as u8,
                        "slots": world.bodies.len(), "alive": world.alive_count(), "seed": s.seed, "host_rate": welcome.rate}).to_string());
                } else {
                    let rate = if welcome.rate == 0 { "as fast as it can".to_string() } else { format!("{}/s", welcome.rate) };
                    out(&format!("attached to {} at step {} ({}D, seed {}, {} live bodies in {} slots; host rate {rate})", opts.addr, world.step, s.dims as u8, s.seed, world.alive_count(), world.bodies.len()));
                }
            }
            Event::Resync { from, to, file } => {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                if json {
                    out(&serde_json::json!({"event": "resync", "from": from, "to": to, "file": file.map(|f| f.display().to_string())}).to_string());
                } else {
                    let cont = file.map(|f| format!("; recording continues in {}", f.display())).unwrap_or_default();
                    out(&format!("resync: fell behind at step {from}, continuing from the host's snapshot at step {to}{cont}"));
                }
            }
            Event::Status(s) => {
                if terminal {
                    eprint!("\r\x1b[2K{}", status_line(&s));
                } else if last_plain.elapsed() >= Duration::from_secs(1) {
                    last_plain = Instant::now();
                    if json {
                        out(&serde_json::json!({"event": "status", "host_step": s.host_step, "step": s.step, "verified": s.verified,
                            "lag": s.lag(), "rate": (s.rate * 10.0).round() / 10.0}).to_string());
                    } else {
                        out(&status_line(&s));
                    }
                }
            }
        },
        ctrl_c(),
    ));
    if terminal {
        eprintln!();
    }
    let (exit, plain, obj) = verdict(&outcome);
    if json {
        let mut obj = obj;
        obj["event"] = "end".into();
        out(&obj.to_string());
    } else {
        for w in &outcome.files {
            out(&format!(
                "recorded {} ({} steps from step {})",
                w.path.display(),
                w.steps,
                w.start_step
            ));
        }
        if exit == Exit::Failure {
            eprintln!("error: {plain}");
        } else {
            out(&plain);
        }
    }
    exit
}

/// The verdict of a session: its exit code, one human line (a drift report is several),
/// and the same as a JSON object.
pub fn verdict(o: &Outcome) -> (Exit, String, serde_json::Value) {
    let span = match o.attached_at {
        Some(a) => format!("verified {} steps (step {a} to {})", o.verified, o.step),
        None => "verified 0 steps".into(),
    };
    let (mut exit, stop, mut line, reason) = match &o.stop {
        Stop::Asked => (Exit::Ok, "asked", format!("ok: {span}"), None),
        Stop::Interrupted => (Exit::Ok, "interrupted", format!("stopped: {span}"), None),
        Stop::HostEnded(e) if e.reason.is_clean() => (
            Exit::Ok,
            "host-ended",
            format!(
                "ok: the host ended the stream ({}: {}); {span}",
                e.reason.name(),
                e.text
            ),
            Some(e.reason.name()),
        ),
        Stop::HostEnded(e) => (
            Exit::Failure,
            "host-ended",
            format!(
                "the host ended the stream ({}: {}); {span}",
                e.reason.name(),
                e.text
            ),
            Some(e.reason.name()),
        ),
        Stop::Drift(r) => (Exit::Different, "drift", r.to_string(), None),
        Stop::Failed(m) => (Exit::Failure, "failed", format!("{m}; {span}"), None),
    };
    if let Some(e) = &o.record_error {
        exit = Exit::Failure;
        line = format!("{e}; {line}");
    }
    let verdict = match exit {
        Exit::Ok => "ok",
        Exit::Different => "drift",
        Exit::Failure => "error",
    };
    let obj = serde_json::json!({
        "verdict": verdict,
        "stop": stop,
        "reason": reason,
        "attached_at": o.attached_at,
        "step": o.step,
        "verified": o.verified,
        "resyncs": o.resyncs,
        "files": o.files.iter().map(|w| serde_json::json!({"path": w.path.display().to_string(), "steps": w.steps, "start_step": w.start_step})).collect::<Vec<_>>(),
        "drift": match &o.stop { Stop::Drift(r) => r.to_json(), _ => serde_json::Value::Null },
        "message": line,
    });
    (exit, line, obj)
}
