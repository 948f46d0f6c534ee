//! A session read from NATS JetStream (docs/fan-out.md, "Gaps"), turned into the
//! [`Verifier`]'s inputs by the one gap rule, [`Follow`]: the same rule the viewer's NATS
//! reader applies to the stream before its items reach the verifier.
//!
//! The stream is in step order and the host publishes the keyframe of step `K` before the
//! record of step `K`. A record of the step the viewer needs is verified; one below it is
//! a repeat (skipped, never verified twice); one above it is skipped. A keyframe past the
//! viewer's step closes a gap at once: the steps between never came, and the world
//! restarts at the keyframe ([`gap`]). The end with steps heard of past the viewer's
//! leaves a gap open, reported to the end.

use super::{Input, Verifier};
use crate::wire::nats::{Follow, Take};
use crate::wire::RecordRef;
use crate::{Op, World};

/// Steps that never came, in the verifier (`why`): with `world` (the keyframe that closed
/// the gap) the world restarts there; without one the records stopped at its step, the
/// gap stays open and the summary reports it to the end. The viewer's driver gives its
/// NATS reader's gaps the same way.
pub fn gap(v: &mut Verifier, world: Option<World>, why: String) {
    match world {
        Some(world) => v.handle(Input::Rejoined { world, why }),
        None => v.handle(Input::Missing { why }),
    }
}

/// The gap rule beside the verifier: where the viewer is on the stream.
#[derive(Debug, Default)]
pub struct Feed {
    follow: Option<Follow>,
}

impl Feed {
    /// A feed for a verifier about to attach at a keyframe.
    pub fn new() -> Feed {
        Feed::default()
    }

    /// The rule, from the verifier's world on (its attach keyframe).
    fn follow(&mut self, v: &Verifier) -> &mut Follow {
        self.follow
            .get_or_insert_with(|| Follow::new(v.world().step))
    }

    /// A keyframe, in stream order. One of another world is given to the verifier, which
    /// refuses it; one past the viewer's step closes the gap before it.
    pub fn keyframe(&mut self, v: &mut Verifier, world: World) {
        if !super::same_world(v.world(), &world) {
            v.handle(Input::Rejoined {
                world,
                why: "a keyframe of another world".into(),
            });
            return;
        }
        let step = world.step;
        if let Some(from) = self.follow(v).keyframe(step) {
            let why = format!(
                "steps {from}..{step} are not on the stream; continuing from its keyframe at step {step}"
            );
            gap(v, Some(world), why);
        }
    }

    /// A record, in stream order: `Some(hash)` when it verified (the driver records it);
    /// `None` when it was skipped, or did not verify ([`Verifier::is_stopped`] tells).
    pub fn record(&mut self, v: &mut Verifier, r: RecordRef<'_>, ops: &[Op]) -> Option<u64> {
        let next = self.follow(v).next();
        if planted!(v, AcceptDuplicate) && r.step.wrapping_add(1) == next
            || planted!(v, SkipGapCheck) && r.step > next
        {
            return v.handle_record(r, ops);
        }
        match self.follow(v).record(r.step) {
            Take::Verify => v.handle_record(r, ops),
            // The viewer's reader says it waits (a notice only: a record of the step needed
            // is still verified if it comes, and the keyframe's gap says the whole gap).
            Take::Missing | Take::Repeat | Take::Skip => None,
        }
    }

    /// The stream ended (at the host's step `host_step`) or was lost (0): the steps heard
    /// of past the viewer's that never came are a gap left open. Returns where it runs to:
    /// the step the driver gives [`Verifier::summary`].
    pub fn end(&mut self, v: &mut Verifier, host_step: u64) -> Option<u64> {
        let (from, to) = self.follow(v).open_gap(host_step)?;
        gap(
            v,
            None,
            format!("steps {from}..{to} are not on the stream before its end"),
        );
        Some(to)
    }
}
