//! The live session's log (docs/protocol.md, "The viewer's log"): one `tracing` event per
//! session event, all with the target [`TARGET`] and the field `session` (the address as
//! given), so that a log shipper reading stderr (`--log-format json`) sees the attach,
//! every resync, loss, reconnection and gap, the drift, each recording file finished and
//! the end with its verdict, as stdout shows them to a person. Each is logged once, here:
//! [`session`] runs a session and logs its events, [`end`] logs how it ended.

use super::lines::{gap_text, lost_line, missing_line, reconnected_line};
use crate::live::session::{self, Event, Options, Outcome};
use serde_json::Value;
use tracing::{error, info, warn};

/// The target of every session event, which the viewer's default log filter lets through
/// at `info` (`RUST_LOG=ostm_viewer::session=warn` keeps only the losses, gaps, drifts and
/// failures).
pub const TARGET: &str = "ostm_viewer::session";

/// Runs a live session as [`session::run`] does, logging each of its events after `events`
/// has seen it (so a status line rewritten in place on a terminal is cleared first).
pub fn session(opts: &Options, mut events: impl FnMut(Event<'_>)) -> Outcome {
    let addr = opts.dial.addr.clone();
    session::run(opts, |ev| {
        let logged = log_fields(&ev);
        events(ev);
        if let Some(e) = logged {
            e.emit(&addr);
        }
    })
}

/// One event's log line, taken before the event goes on.
struct Logged {
    /// The event's name, as `--json` names it on stdout.
    event: &'static str,
    warn: bool,
    message: String,
    step: u64,
    from: Option<u64>,
    to: Option<u64>,
    steps: Option<u64>,
    reason: Option<String>,
    file: Option<String>,
}

impl Logged {
    fn at(event: &'static str, step: u64, message: String) -> Logged {
        Logged {
            event,
            warn: false,
            message,
            step,
            from: None,
            to: None,
            steps: None,
            reason: None,
            file: None,
        }
    }

    fn emit(self, session: &str) {
        let Logged {
            event,
            warn,
            message,
            step,
            from,
            to,
            steps,
            reason,
            file,
        } = self;
        if warn {
            warn!(target: TARGET, event, session, step, from, to, steps, reason, file, "{message}");
        } else {
            info!(target: TARGET, event, session, step, from, to, steps, reason, file, "{message}");
        }
    }
}

/// What `ev` logs: the attach, a resync, a loss, records missing (NATS), a reconnection, a
/// gap (not the status, fields or frames, which are progress, not events).
fn log_fields(ev: &Event<'_>) -> Option<Logged> {
    let file = |f: Option<&std::path::PathBuf>| f.map(|f| f.display().to_string());
    Some(match *ev {
        Event::Attached { welcome, world } => {
            let s = world.setup();
            Logged::at(
                "attached",
                world.step,
                format!(
                    "attached at step {} ({}D, seed {}, {} live bodies, host rate {})",
                    world.step,
                    s.dims as u8,
                    s.seed,
                    world.alive_count(),
                    welcome.rate
                ),
            )
        }
        Event::Resync { from, to, file: f } => Logged {
            from: Some(from),
            to: Some(to),
            steps: Some(to.saturating_sub(from)),
            file: file(f),
            ..Logged::at(
                "resync",
                to,
                format!(
                    "resync: fell behind at step {from}, continuing from the host's snapshot at step {to}"
                ),
            )
        },
        Event::Lost { step, why } => Logged {
            warn: true,
            reason: Some(why.to_string()),
            ..Logged::at(
                "lost",
                step,
                lost_line(step, why),
            )
        },
        Event::Missing { step, why } => Logged {
            warn: true,
            reason: Some(why.to_string()),
            ..Logged::at("missing", step, missing_line(why))
        },
        Event::Reconnected { gap, file: f } => Logged {
            warn: true,
            from: Some(gap.from),
            to: Some(gap.to),
            steps: gap.steps(),
            reason: Some(gap.why.clone()),
            file: file(f),
            ..Logged::at("reconnected", gap.to, reconnected_line(gap, None))
        },
        Event::Gap { gap, file: f } => Logged {
            warn: true,
            from: Some(gap.from),
            to: Some(gap.to),
            steps: gap.steps(),
            reason: Some(gap.why.clone()),
            file: file(f),
            ..Logged::at("gap", gap.to, format!("gap: {}", gap_text(gap)))
        },
        Event::Status(_) | Event::Fields { .. } | Event::Frame { .. } => return None,
    })
}

/// Logs how the session ended, from its verdict object (`attach`'s `end` object, `check`'s
/// line): each recording file finished or left unfinished, the drift (at `error`), then
/// the end itself with its `verdict` (`info` when ok, `error` otherwise).
pub fn end(session: &str, end: &Value) {
    let s = |v: &Value| v.as_str().map(str::to_string);
    for f in end["files"].as_array().into_iter().flatten() {
        let (path, steps, start) = (s(&f["path"]), f["steps"].as_u64(), f["start_step"].as_u64());
        info!(
            target: TARGET,
            event = "recording_finished",
            session,
            file = path,
            steps,
            start_step = start,
            "recording finished: {} ({} steps from step {})",
            path.as_deref().unwrap_or_default(),
            steps.unwrap_or_default(),
            start.unwrap_or_default()
        );
    }
    for u in end["unfinished"].as_array().into_iter().flatten() {
        let (part, steps, start) = (s(&u["part"]), u["steps"].as_u64(), u["start_step"].as_u64());
        let part_name = part.as_deref().unwrap_or_default();
        warn!(
            target: TARGET,
            event = "recording_unfinished",
            session,
            file = part,
            steps,
            start_step = start,
            "recording left unfinished: {part_name} ({} steps from step {}): ostm-viewer recover {part_name}",
            steps.unwrap_or_default(),
            start.unwrap_or_default()
        );
    }
    let d = &end["drift"];
    if d.is_object() {
        error!(
            target: TARGET,
            event = "drift",
            session,
            step = d["step"].as_u64(),
            body = d["body"].as_u64(),
            field = s(&d["field"]),
            host = d["host"].as_i64(),
            viewer = d["viewer"].as_i64(),
            host_hash = s(&d["host_hash"]),
            viewer_hash = s(&d["viewer_hash"]),
            bundle = s(&end["bundle"]),
            "{}",
            d["summary"].as_str().unwrap_or("drift")
        );
    }
    let verdict = end["verdict"].as_str().unwrap_or("error");
    let message = end["message"]
        .as_str()
        .unwrap_or_default()
        .replace('\n', "; ");
    let (stop, reason) = (s(&end["stop"]), s(&end["reason"]));
    let (step, verified) = (end["step"].as_u64(), end["verified"].as_u64());
    let (attached_at, host_step) = (end["attached_at"].as_u64(), end["host_step"].as_u64());
    let gaps = end["gaps"].as_array().map(Vec::len);
    macro_rules! ended {
        ($level:ident) => {
            $level!(
                target: TARGET,
                event = "end",
                session,
                verdict,
                stop,
                reason,
                step,
                verified,
                attached_at,
                host_step,
                resyncs = end["resyncs"].as_u64(),
                gaps,
                "end: {message}"
            )
        };
    }
    if verdict == "ok" {
        ended!(info);
    } else {
        ended!(error);
    }
}
