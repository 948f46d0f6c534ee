//! The lines of a live session's events that both stdout ([`super::session`]) and the
//! log ([`super::log`]) give.

use crate::live::session::Gap;
use std::path::Path;

/// The line records missing from a NATS stream print (the viewer waits for the next
/// keyframe; nothing reconnects).
pub fn missing_line(why: &str) -> String {
    format!("missing: {why}")
}

/// The line a lost connection prints (the reader is connecting again).
pub fn lost_line(step: u64, why: &str) -> String {
    format!("lost: {why}; at step {step}, connecting again")
}

/// What a gap's line says (`gap: …`): its why, which names its steps (a NATS gap's), or
/// `steps F..T not verified: WHY` (one left open when the session ended).
pub fn gap_text(g: &Gap) -> String {
    if g.why.starts_with("steps ") {
        g.why.clone()
    } else {
        format!("steps {}..{} not verified: {}", g.from, g.to, g.why)
    }
}

/// The line a reconnection prints: the steps not seen, or how the host came back (behind
/// the viewer, or with another world), and where the recording continues.
pub fn reconnected_line(g: &Gap, file: Option<&Path>) -> String {
    let (from, to, why) = (g.from, g.to, &g.why);
    match (&g.world, g.behind) {
        (Some((world, was)), _) => {
            let cont = file
                .map(|f| {
                    format!(
                        "; recording continues in {}, the first file of that world (verify it apart from the files before)",
                        f.display()
                    )
                })
                .unwrap_or_default();
            format!(
                "gap: {why}; reconnected at step {to} to another world ({world}; it was {was}): the host was restarted with it, and what the old stream held after step {from} was not seen{cont}"
            )
        }
        (None, behind) => {
            let cont = file
                .map(|f| format!("; recording continues in {}", f.display()))
                .unwrap_or_default();
            if behind {
                format!(
                    "gap: {why}; reconnected at step {to}, behind the viewer's step {from}: the host was restarted (what its old stream held after step {from} was not seen; steps {to}..{from} are verified again){cont}"
                )
            } else {
                format!("gap: {why}; reconnected at step {to} (steps {from}..{to} not seen){cont}")
            }
        }
    }
}
