//! The host's fan-out, sans-IO (docs/protocol.md: "Slow viewers and resync", "Drift"):
//! which records each connection is owed, and the worlds drift requests are answered
//! from.
//!
//! - [`Records`]: the last `queue` records, encoded once and shared by every connection,
//!   which each connection reads at its own position ([`Records::take`]): the records past
//!   it, or, when the host is more than `queue` records ahead, a resync; once the stream
//!   has ended, the records still owed and then the end (in place of a resync for one too
//!   far behind).
//! - [`Worlds`]: the recent worlds and the input that followed each, and the drift reply
//!   for a step ([`Worlds::held`], [`DriftHeld::answer`]).
//!
//! The host's driver keeps them under its locks and wakes its tasks; nothing here waits.

use super::conn::Take;
use crate::sim::op::for_each_op;
use crate::wire::{DriftReply, DriftStatus, EncodedFrame, End};
use crate::World;
use bytes::Bytes;
use std::collections::VecDeque;

/// One record: its frame (encoded once, shared by every connection) and the step the
/// viewer's world reaches by running it (the record's step plus 1).
#[derive(Debug, Clone)]
pub struct Queued {
    pub after: u64,
    pub frame: EncodedFrame,
}

/// The last `queue` records, oldest first: `buf[i]` is record number `next - len + i`.
#[derive(Debug)]
pub struct Records {
    next: u64,
    buf: VecDeque<Queued>,
    queue: usize,
    plant: crate::plant::Planted<crate::session::Plant>,
}

/// What a take found, with how far behind the host the connection was (for the host's
/// `queue-max`: at most `queue`).
#[derive(Debug)]
pub struct Taken {
    pub take: Take,
    /// Records the connection was behind, when it took some or was resynced (`queue`
    /// then); `None` otherwise.
    pub behind: Option<u64>,
    /// Records taken.
    pub count: u64,
}

impl Records {
    /// An empty ring that holds `queue` records (at least one).
    pub fn new(queue: usize) -> Records {
        Records {
            next: 0,
            // Grown as records come (the test-only unbounded queue is 2^40).
            buf: VecDeque::new(),
            queue,
            plant: Default::default(),
        }
    }

    /// Plants a fault (the simulation's `--plant`; see [`crate::session::Plant`]).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: crate::session::Plant) {
        self.plant.set(plant);
    }

    /// Records published so far: the position of the next one.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Publishes one record.
    pub fn push(&mut self, after: u64, frame: EncodedFrame) {
        self.buf.push_back(Queued { after, frame });
        while self.buf.len() > self.queue.max(1) {
            self.buf.pop_front();
        }
        self.next += 1;
    }

    /// Appends to `out` the frames of at most `max` records from `position` on and moves
    /// `position` past them; `ended` is how the stream ended, once it has (read before
    /// this ring: once the end is set, every record is in it).
    pub fn take(
        &self,
        position: &mut u64,
        max: usize,
        ended: Option<&End>,
        out: &mut Vec<EncodedFrame>,
    ) -> Taken {
        let behind = self.next.saturating_sub(*position);
        let nothing = |take| Taken {
            take,
            behind: None,
            count: 0,
        };
        if behind as usize > self.queue {
            if let Some(end) = ended {
                return nothing(Take::Ended(end.clone()));
            }
            return Taken {
                take: Take::Behind,
                behind: Some(self.queue as u64),
                count: 0,
            };
        }
        if behind == 0 || (ended.is_some() && self.plant.is(crate::session::Plant::EndBeforeOwed)) {
            return nothing(match ended {
                Some(end) => Take::Ended(end.clone()),
                None => Take::Nothing,
            });
        }
        let first = (self.buf.len() as u64 - behind) as usize;
        let n = (behind as usize).min(max);
        let mut after = 0;
        for q in self.buf.range(first..first + n) {
            out.push(q.frame.clone());
            after = q.after;
        }
        *position += n as u64;
        Taken {
            take: Take::Records {
                after,
                more: n < behind as usize,
            },
            behind: Some(behind),
            count: n as u64,
        }
    }

    /// Appends to `out` the frames of every record from `position` on, when there are
    /// some and at most `within` (and at most `queue`): returns their number and the step
    /// the last brings the viewer to. `None` otherwise: a connection further behind takes
    /// its records itself ([`Records::take`]).
    pub fn take_all_within(
        &self,
        position: u64,
        within: usize,
        out: &mut Vec<EncodedFrame>,
    ) -> Option<(u64, u64)> {
        let behind = self.next.checked_sub(position)?;
        if behind == 0 || behind as usize > within.min(self.queue) {
            return None;
        }
        let first = (self.buf.len() as u64 - behind) as usize;
        let mut after = 0;
        for q in self.buf.range(first..) {
            out.push(q.frame.clone());
            after = q.after;
        }
        Some((behind, after))
    }
}

/// One held world and, once the next step has run, that step's input.
#[derive(Debug)]
struct Held {
    world: World,
    input: Option<Bytes>,
}

/// The recent worlds, oldest first, at most `ring` (at least one): the back is the world at
/// the host's step.
#[derive(Debug)]
pub struct Worlds {
    ring: VecDeque<Held>,
    cap: usize,
    plant: crate::plant::Planted<crate::session::Plant>,
}

/// What [`Worlds::held`] found for a drift request: copies made under the driver's lock,
/// the stages recomputed outside it ([`DriftHeld::answer`]).
#[derive(Debug)]
pub enum DriftHeld {
    /// The step is not held: the reply says why.
    Not(DriftReply),
    /// The world at the step, and the world before it with the input that led there.
    Held {
        step: u64,
        world: Option<World>,
        prev: Option<(World, Bytes)>,
    },
}

impl DriftHeld {
    /// The drift reply: the world held at the step and the stage hashes of recomputing
    /// the step before it from the world held there.
    pub fn answer(self) -> DriftReply {
        match self {
            DriftHeld::Not(reply) => reply,
            DriftHeld::Held { step, world, prev } => {
                let stages = prev.and_then(|(mut w, input)| {
                    let mut ops = Vec::new();
                    for_each_op("held input", &input, 0, |op| ops.push(op)).ok()?;
                    Some(w.step_with_stage_hashes(&ops))
                });
                DriftReply {
                    step,
                    status: DriftStatus::Held,
                    world,
                    stages,
                }
            }
        }
    }
}

impl Worlds {
    /// A ring of at most `cap` worlds holding `world`.
    pub fn new(world: World, cap: usize) -> Worlds {
        let mut ring = VecDeque::with_capacity(cap.max(1) + 1);
        ring.push_back(Held { world, input: None });
        Worlds {
            ring,
            cap,
            plant: Default::default(),
        }
    }

    /// Plants a fault (the simulation's `--plant`; see [`crate::session::Plant`]).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: crate::session::Plant) {
        self.plant.set(plant);
    }

    /// The world at the host's step.
    pub fn latest(&self) -> Option<&World> {
        self.ring.back().map(|h| &h.world)
    }

    /// One step: `input` led from the latest world to `world`.
    pub fn push(&mut self, world: &World, input: Bytes) {
        if let Some(back) = self.ring.back_mut() {
            back.input = Some(input);
        }
        self.ring.push_back(Held {
            world: world.clone(),
            input: None,
        });
        while self.ring.len() > self.cap.max(1) {
            self.ring.pop_front();
        }
    }

    /// What is held for a drift request for step `step`.
    pub fn held(&self, step: u64) -> DriftHeld {
        let first = self.ring.front().map_or(0, |h| h.world.step);
        let last = self.ring.back().map_or(0, |h| h.world.step);
        let status = if step > last {
            Some(DriftStatus::NotReached)
        } else if step < first {
            Some(DriftStatus::TooOld)
        } else {
            None
        };
        if let Some(status) = status {
            return DriftHeld::Not(DriftReply {
                step,
                status,
                world: None,
                stages: None,
            });
        }
        let at = |s: u64| self.ring.get((s - first) as usize);
        let from = if self.plant.is(crate::session::Plant::DriftFromWrongStep) && step > first {
            step - 1
        } else {
            step
        };
        let world = at(from).map(|h| h.world.clone());
        let prev = step
            .checked_sub(1)
            .filter(|&s| s >= first)
            .and_then(at)
            .and_then(|h| Some((h.world.clone(), h.input.clone()?)));
        DriftHeld::Held { step, world, prev }
    }
}
