//! The drift report: what the viewer says when a host's hash differs from its own.
//!
//! [`on_drift`] is the one place drift is explained: the [`Verifier`](super::Verifier)
//! gathers the evidence (both worlds, both hashes, the step's input, the host's reply to
//! the drift request) and calls it once, on the first mismatch. It also packs the
//! evidence as a failure bundle ([`DriftReport::bundle`]), which the viewer writes where
//! its `--bundle`/`--record` options say.

use crate::format::bundle::Bundle;
use crate::sim::world::{first_difference, FieldDiff};
use crate::wire::{DriftReply, DriftStatus};
use crate::{Dims, Op, Setup, Stage, World};
use std::fmt;

/// Everything known when the host's hash for step `step` differs from the viewer's.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// The step `S` whose world hashes differ (the record for step `S - 1` carried it).
    pub step: u64,
    pub host_hash: u64,
    pub viewer_hash: u64,
    /// The viewer's world at `S - 1`, which hashed the same as the host's.
    pub viewer_before: World,
    /// The viewer's world at `S`.
    pub viewer_after: World,
    /// The input of step `S - 1`, as the host sent it.
    pub input: Vec<u8>,
    /// The host's answer to the drift request, if one came.
    pub reply: Option<DriftReply>,
    /// Why no request could be answered, when the session knows (the host has gone).
    pub no_reply: Option<String>,
}

/// Where the four stages first part, according to the host's recomputation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stages {
    /// The host's recomputed hash after this stage differs from the viewer's.
    PartAt {
        stage: Stage,
        host: u64,
        viewer: u64,
    },
    /// Every stage's hash agrees, yet the world the host streamed differs.
    AllAgree,
    /// The host's stage hashes are not known: why (its snapshot before the step is no
    /// longer held, or no reply came).
    Unknown(String),
}

/// The report: the step, the first differing field, and the stage verdict.
#[derive(Debug, Clone)]
pub struct DriftReport {
    pub step: u64,
    pub host_hash: u64,
    pub viewer_hash: u64,
    /// The first differing field, host value first; `None` when the host's snapshot was
    /// not available or the two worlds are equal field by field.
    pub field: Option<FieldDiff>,
    pub stages: Stages,
    /// Why the field is missing, when it is.
    pub note: Option<String>,
    /// The evidence as a failure bundle (`Bundle::from_drift`): the viewer's world before
    /// the step, the step's input, both hashes, both worlds after it when the host sent
    /// its own. An error only if the step's input does not decode.
    pub bundle: Result<Box<Bundle>, String>,
}

/// Handles a drift: builds the report from the evidence. The single hook for drift.
pub fn on_drift(e: &Evidence) -> DriftReport {
    let mut note = None;
    let host_after = match &e.reply {
        Some(DriftReply {
            status: DriftStatus::Held,
            world: Some(host),
            ..
        }) => Some(host),
        _ => None,
    };
    let field = match (host_after, &e.reply) {
        (Some(host), _) => {
            let d = first_difference(host, &e.viewer_after);
            if d.is_none() {
                note = Some("the host's snapshot equals the viewer's world field by field; only the streamed hash differs".into());
            }
            d
        }
        (None, Some(DriftReply { status, .. })) => {
            note = Some(match status {
                DriftStatus::TooOld => "the host no longer holds its snapshot at that step".into(),
                _ => "the host has no snapshot at that step".into(),
            });
            None
        }
        (None, None) => {
            note = Some(
                e.no_reply
                    .clone()
                    .unwrap_or_else(|| "the host did not answer the drift request".into()),
            );
            None
        }
    };
    let stages = match e.reply.as_ref().and_then(|r| r.stages) {
        Some(host) => {
            let viewer = e
                .viewer_before
                .clone()
                .step_with_stage_hashes(&decode(&e.input));
            match Stage::ALL
                .iter()
                .zip(host.iter().zip(viewer.iter()))
                .find(|(_, (h, v))| h != v)
            {
                Some((stage, (h, v))) => Stages::PartAt {
                    stage: *stage,
                    host: *h,
                    viewer: *v,
                },
                None => Stages::AllAgree,
            }
        }
        None => Stages::Unknown(match &e.reply {
            Some(DriftReply {
                status: DriftStatus::TooOld,
                ..
            }) => {
                "the host could not recompute the step (it no longer holds its snapshot before it)"
                    .into()
            }
            Some(DriftReply {
                status: DriftStatus::NotReached,
                ..
            }) => "the host could not recompute the step (it has not reached it)".into(),
            Some(_) => "the host's reply carries no stage hashes".into(),
            None => "no reply came from the host, so its stage hashes are unknown".into(),
        }),
    };
    let mut report = DriftReport {
        step: e.step,
        host_hash: e.host_hash,
        viewer_hash: e.viewer_hash,
        field,
        stages,
        note,
        bundle: Err(String::new()),
    };
    let description = format!(
        "ostm-viewer {} live drift: {}; {}",
        env!("CARGO_PKG_VERSION"),
        report.headline(),
        report.stage_line()
    );
    report.bundle = Bundle::from_drift(
        &e.viewer_before,
        &e.input,
        e.host_hash,
        &e.viewer_after,
        host_after.cloned(),
        &description,
    )
    .map(Box::new)
    .map_err(|err| err.to_string());
    report
}

fn decode(input: &[u8]) -> Vec<crate::Op> {
    // The codec checked the input when the record arrived.
    crate::sim::op::decode_input("record", input, 0).unwrap_or_default()
}

impl DriftReport {
    /// The first line: `drift at step S: body B FIELD host=X viewer=Y`.
    pub fn headline(&self) -> String {
        match &self.field {
            Some(d) => format!(
                "drift at step {}: {d} host={} viewer={}",
                self.step, d.a, d.b
            ),
            None => format!(
                "drift at step {}: host hash {:016x}, viewer hash {:016x}",
                self.step, self.host_hash, self.viewer_hash
            ),
        }
    }

    /// The stage line.
    pub fn stage_line(&self) -> String {
        let s = self.step.saturating_sub(1);
        match &self.stages {
            Stages::PartAt { stage, host, viewer } => format!(
                "the worlds first part at stage {} of step {s} (host {host:016x}, viewer {viewer:016x})",
                stage.name()
            ),
            Stages::AllAgree => "every stage agrees: the host's world was changed outside the step".into(),
            Stages::Unknown(why) => format!("stages unknown: {why}"),
        }
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let stage = match &self.stages {
            Stages::PartAt { stage, .. } => serde_json::Value::from(stage.name()),
            _ => serde_json::Value::Null,
        };
        serde_json::json!({
            "step": self.step,
            "host_hash": format!("{:016x}", self.host_hash),
            "viewer_hash": format!("{:016x}", self.viewer_hash),
            "body": self.field.as_ref().and_then(|d| d.body),
            "field": self.field.as_ref().map(|d| d.field),
            "host": self.field.as_ref().map(|d| d.a),
            "viewer": self.field.as_ref().map(|d| d.b),
            "stage": stage,
            "every_stage_agrees": self.stages == Stages::AllAgree,
            "summary": self.headline(),
            "stages": self.stage_line(),
            "note": self.note,
        })
    }
}

impl fmt::Display for DriftReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.headline())?;
        write!(f, "{}", self.stage_line())?;
        if let Some(n) = &self.note {
            write!(f, "\nnote: {n}")?;
        }
        Ok(())
    }
}

/// Tests (here and in the views): the evidence of a drift at step 1 of a 3D world of 4 bodies (seed 9) whose step 0
/// gave body 1 an impulse: the host's world is the viewer's changed by `change_host`,
/// its stage hashes `host_stages_from` the world before.
#[doc(hidden)]
pub fn sample_evidence(
    change_host: impl Fn(&mut World),
    host_stages_from: impl Fn(&World) -> [u64; 4],
) -> Evidence {
    let before = World::new(
        Setup {
            dims: Dims::Three,
            bodies: 4,
            seed: 9,
        },
        None,
    );
    let ops = [Op::Impulse {
        body: 1,
        d: [5, 6, 7],
    }];
    let mut after = before.clone();
    after.step(&ops);
    let mut host = after.clone();
    change_host(&mut host);
    let input = crate::sim::op::encode_input(&ops);
    Evidence {
        step: after.step,
        host_hash: host.hash(),
        viewer_hash: after.hash(),
        reply: Some(DriftReply {
            step: after.step,
            status: DriftStatus::Held,
            world: Some(host),
            stages: Some(host_stages_from(&before)),
        }),
        viewer_before: before,
        viewer_after: after,
        input,
        no_reply: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;

    use super::sample_evidence as evidence;

    #[test]
    fn names_the_body_and_field_and_says_every_stage_agrees_when_changed_outside() {
        let e = evidence(
            |w| w.bodies[2].vel[1] += 1,
            |b| {
                b.clone().step_with_stage_hashes(&[Op::Impulse {
                    body: 1,
                    d: [5, 6, 7],
                }])
            },
        );
        let r = on_drift(&e);
        let v = e.viewer_after.bodies[2].vel[1];
        assert_eq!(
            r.headline(),
            format!(
                "drift at step 1: body 2 velocity.y host={} viewer={v}",
                v + 1
            )
        );
        assert_eq!(r.stages, Stages::AllAgree);
        // The bundle made on drift replays to the same body and field, host value as
        // the reference's.
        let b = r.bundle.as_ref().unwrap();
        assert_eq!(
            b.reference.as_ref(),
            e.reply.as_ref().unwrap().world.as_ref()
        );
        let d = b.check().difference.unwrap();
        assert_eq!((d.diff.body, d.diff.field), (Some(2), "velocity.y"));
        assert_eq!((d.diff.a, d.diff.b), (v as i64, v as i64 + 1));
    }

    #[test]
    fn names_the_first_stage_that_parts() {
        // The host's recomputation applied a different impulse: the first stage parts.
        let e = evidence(
            |w| w.bodies[1].vel[0] += 1,
            |b| {
                b.clone().step_with_stage_hashes(&[Op::Impulse {
                    body: 1,
                    d: [6, 6, 7],
                }])
            },
        );
        let r = on_drift(&e);
        assert!(
            matches!(
                r.stages,
                Stages::PartAt {
                    stage: Stage::ApplyInput,
                    ..
                }
            ),
            "{r}"
        );
        // A host whose gravity stage differs parts at gravity, not before.
        let e = evidence(
            |w| w.bodies[0].vel[1] -= 1,
            |b| {
                let mut w = b.clone();
                let ops = [Op::Impulse {
                    body: 1,
                    d: [5, 6, 7],
                }];
                let mut out = [0; 4];
                w.run_stage(Stage::ApplyInput, &ops);
                out[0] = w.hash();
                w.gravity += 1;
                for (i, s) in Stage::ALL.into_iter().enumerate().skip(1) {
                    w.run_stage(s, &ops);
                    out[i] = w.hash();
                }
                out
            },
        );
        assert!(matches!(
            on_drift(&e).stages,
            Stages::PartAt {
                stage: Stage::Gravity,
                ..
            }
        ));
    }

    #[test]
    fn without_a_reply_it_still_reports_the_step_and_both_hashes() {
        let mut e = evidence(|w| w.gravity = 7, |_| [0; 4]);
        e.reply = None;
        let r = on_drift(&e);
        assert!(
            r.headline().starts_with("drift at step 1: host hash "),
            "{r}"
        );
        assert!(r.note.is_some());
        // Still a bundle, without the host's world.
        let b = r.bundle.unwrap();
        assert!(b.reference.is_none() && b.writer.is_some());
        assert_eq!(b.check().mismatch.map(|m| m.step), Some(1));
    }

    /// Without the host's stage hashes the report says why, from what the host answered
    /// or from why it could not be asked; each case words it differently.
    #[test]
    fn says_why_the_stages_are_unknown() {
        let stages = |reply: Option<DriftReply>, no_reply: Option<&str>| {
            let mut e = evidence(|w| w.bodies[2].vel[1] += 1, |_| [0; 4]);
            e.reply = reply;
            e.no_reply = no_reply.map(str::to_string);
            let r = on_drift(&e);
            match r.stages {
                Stages::Unknown(why) => (why, r.note),
                other => panic!("stages should be unknown, found {other:?}"),
            }
        };
        let answer = |status| {
            Some(DriftReply {
                step: 1,
                status,
                world: None,
                stages: None,
            })
        };
        let (too_old, note) = stages(answer(DriftStatus::TooOld), None);
        assert!(
            too_old.contains("no longer holds its snapshot"),
            "{too_old}"
        );
        assert_eq!(
            note.as_deref(),
            Some("the host no longer holds its snapshot at that step")
        );
        let (not_reached, _) = stages(answer(DriftStatus::NotReached), None);
        assert!(not_reached.contains("has not reached it"), "{not_reached}");
        let (gone, note) = stages(None, Some("no host answers; the host has gone"));
        assert_eq!(
            gone,
            "no reply came from the host, so its stage hashes are unknown"
        );
        assert_eq!(note.as_deref(), Some("no host answers; the host has gone"));
        assert!(too_old != not_reached && not_reached != gone && gone != too_old);
    }
}
