//! The state the stepping loop shares with the connections: the world as of the host's
//! step, a bounded ring of recent worlds for drift requests, one bounded queue per viewer,
//! and the counters the status line prints.
//!
//! The stepping loop publishes each step under the hub's lock; a viewer joins (takes its
//! probe snapshot and its queue) under the same lock, so it joins *at* a step, never
//! between one step's world and its record.

use bytes::Bytes;
use ostm_protocol::op::for_each_op;
use ostm_protocol::wire::{DriftReply, DriftStatus, EncodedFrame, End};
use ostm_protocol::World;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// Limits fixed when the host starts.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Records queued for one viewer before it is resynced.
    pub queue: usize,
    /// Recent worlds held for drift requests.
    pub ring: usize,
}

/// One held world and, once the next step has run, that step's input.
struct Held {
    world: World,
    input: Option<Bytes>,
}

/// What a viewer's connection shares with the stepping loop.
#[derive(Debug, Default)]
pub struct ViewerFlags {
    /// Set when the viewer's queue overflowed and it was taken off the hub: the
    /// connection sends what is queued, then a fresh snapshot.
    pub resync: AtomicBool,
}

/// One record in a viewer's queue: its frame (encoded once, shared by every queue) and
/// the step the viewer's world reaches by running it (the record's step plus 1).
#[derive(Debug, Clone)]
pub struct Queued {
    pub after: u64,
    pub frame: EncodedFrame,
}

struct Slot {
    tx: mpsc::Sender<Queued>,
    flags: Arc<ViewerFlags>,
}

struct Inner {
    /// Oldest first; never empty: the back is the world at the host's step.
    ring: VecDeque<Held>,
    viewers: BTreeMap<u64, Slot>,
    ended: Option<End>,
    next_id: u64,
}

/// Counters for the status line (monotonic unless noted).
#[derive(Debug, Default)]
pub struct Counters {
    pub steps: AtomicU64,
    /// Viewers attached now (goes down).
    pub viewers: AtomicU64,
    pub viewers_total: AtomicU64,
    pub resyncs: AtomicU64,
    pub refused: AtomicU64,
    pub stalled: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub drift_requests: AtomicU64,
    /// The longest any viewer's queue has been, in records.
    pub queue_max: AtomicU64,
    /// Connections closed before their hello to make room for newer ones.
    pub shed: AtomicU64,
    /// With `--record`: the steps of the host's recording flushed to its file so far.
    pub recorded: AtomicU64,
    /// Whether the host records its session.
    pub recording: AtomicBool,
}

/// The hub: see the module docs.
pub struct Hub {
    inner: Mutex<Inner>,
    pub limits: Limits,
    pub counters: Counters,
}

/// A viewer's place on the hub: its id, its queue, its flags.
pub struct Joined {
    pub id: u64,
    pub world: World,
    pub rx: mpsc::Receiver<Queued>,
    pub flags: Arc<ViewerFlags>,
}

impl Hub {
    /// A hub whose world is `world`.
    pub fn new(world: World, limits: Limits) -> Hub {
        let mut ring = VecDeque::with_capacity(limits.ring.max(1) + 1);
        ring.push_back(Held { world, input: None });
        Hub {
            inner: Mutex::new(Inner {
                ring,
                viewers: BTreeMap::new(),
                ended: None,
                next_id: 0,
            }),
            limits,
            counters: Counters::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep serving it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The host's step now.
    pub fn step(&self) -> u64 {
        self.lock().ring.back().map_or(0, |h| h.world.step)
    }

    /// How the stream ended, once it has.
    pub fn ended(&self) -> Option<End> {
        self.lock().ended.clone()
    }

    /// Takes a viewer on at the host's current step: its probe world and its queue.
    /// `None` once the stream has ended.
    pub fn join(&self, id: Option<u64>, flags: Option<Arc<ViewerFlags>>) -> Option<Joined> {
        let mut inner = self.lock();
        if inner.ended.is_some() {
            return None;
        }
        let id = id.unwrap_or_else(|| {
            inner.next_id += 1;
            inner.next_id
        });
        let flags = flags.unwrap_or_default();
        flags.resync.store(false, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(self.limits.queue.max(1));
        inner.viewers.insert(
            id,
            Slot {
                tx,
                flags: flags.clone(),
            },
        );
        let world = inner.ring.back().map(|h| h.world.clone())?;
        Some(Joined {
            id,
            world,
            rx,
            flags,
        })
    }

    /// Takes a viewer off the hub (its queue closes once drained).
    pub fn leave(&self, id: u64) {
        self.lock().viewers.remove(&id);
    }

    /// Publishes one step: the world after it, the input that led there, and the
    /// record frame for the viewers. Never waits: a viewer whose queue is full is taken
    /// off the hub and flagged for a resync.
    pub fn publish(&self, world: &World, input: Bytes, frame: &EncodedFrame) {
        let mut inner = self.lock();
        if let Some(back) = inner.ring.back_mut() {
            back.input = Some(input);
        }
        inner.ring.push_back(Held {
            world: world.clone(),
            input: None,
        });
        while inner.ring.len() > self.limits.ring.max(1) {
            inner.ring.pop_front();
        }
        let mut gone = Vec::new();
        let mut longest = 0;
        for (id, slot) in &inner.viewers {
            let queued = Queued {
                after: world.step,
                frame: frame.clone(),
            };
            match slot.tx.try_send(queued) {
                Ok(()) => longest = longest.max(slot.tx.max_capacity() - slot.tx.capacity()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    slot.flags.resync.store(true, Ordering::SeqCst);
                    self.counters.resyncs.fetch_add(1, Ordering::Relaxed);
                    longest = longest.max(slot.tx.max_capacity());
                    gone.push(*id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => gone.push(*id),
            }
        }
        for id in gone {
            inner.viewers.remove(&id);
        }
        self.counters
            .queue_max
            .fetch_max(longest as u64, Ordering::Relaxed);
        self.counters.steps.store(world.step, Ordering::Relaxed);
    }

    /// Ends the stream: every queue closes once drained, then each connection sends `end`.
    pub fn end(&self, end: End) {
        let mut inner = self.lock();
        if inner.ended.is_none() {
            inner.ended = Some(end);
        }
        inner.viewers.clear();
    }

    /// Answers a drift request for step `step`: the world held at that step and the
    /// stage hashes of recomputing the step before it from the world held there. Only
    /// the copies are made under the lock; the recomputation runs outside it, so a viewer
    /// asking again and again does not hold up the stepping loop.
    pub fn drift(&self, step: u64) -> DriftReply {
        self.counters.drift_requests.fetch_add(1, Ordering::Relaxed);
        let (world, prev) = {
            let inner = self.lock();
            let first = inner.ring.front().map_or(0, |h| h.world.step);
            let last = inner.ring.back().map_or(0, |h| h.world.step);
            let status = if step > last {
                Some(DriftStatus::NotReached)
            } else if step < first {
                Some(DriftStatus::TooOld)
            } else {
                None
            };
            if let Some(status) = status {
                return DriftReply {
                    step,
                    status,
                    world: None,
                    stages: None,
                };
            }
            let at = |s: u64| inner.ring.get((s - first) as usize);
            let world = at(step).map(|h| h.world.clone());
            let prev = step
                .checked_sub(1)
                .filter(|&s| s >= first)
                .and_then(at)
                .and_then(|h| Some((h.world.clone(), h.input.clone()?)));
            (world, prev)
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use ostm_protocol::op::encode_input;
    use ostm_protocol::wire::{HostCodec, Record, ToViewer};
    use ostm_protocol::{Dims, Op, Setup};

    fn world() -> World {
        World::new(
            Setup {
                dims: Dims::Three,
                bodies: 3,
                seed: 5,
            },
            None,
        )
    }

    /// Runs `n` steps through the hub, each an impulse on body 0.
    fn run(hub: &Hub, w: &mut World, n: usize) {
        for _ in 0..n {
            let ops = [Op::Impulse {
                body: 0,
                d: [1, 2, 3],
            }];
            let step = w.step;
            w.step(&ops);
            let input = Bytes::from(encode_input(&ops));
            let rec = ToViewer::Record(Record {
                step,
                hash: w.hash(),
                input: input.clone(),
            });
            hub.publish(w, input, &HostCodec::encode_frame(&rec).unwrap());
        }
    }

    #[test]
    fn drift_answers_from_the_ring_and_recomputes_the_stages() {
        let hub = Hub::new(world(), Limits { queue: 4, ring: 8 });
        let mut w = world();
        run(&hub, &mut w, 20);
        // The ring holds the worlds at steps 13..=20.
        assert_eq!(hub.drift(21).status, DriftStatus::NotReached);
        assert_eq!(hub.drift(12).status, DriftStatus::TooOld);
        let r = hub.drift(13);
        assert_eq!(r.status, DriftStatus::Held);
        assert_eq!(r.stages, None, "the world before step 13 is no longer held");
        let r = hub.drift(20);
        let mut before = world();
        for _ in 0..19 {
            before.step(&[Op::Impulse {
                body: 0,
                d: [1, 2, 3],
            }]);
        }
        let mut after = before.clone();
        let stages = after.step_with_stage_hashes(&[Op::Impulse {
            body: 0,
            d: [1, 2, 3],
        }]);
        assert_eq!(r.world, Some(after));
        assert_eq!(r.stages, Some(stages));
    }

    #[test]
    fn a_full_queue_takes_the_viewer_off_and_flags_a_resync() {
        let hub = Hub::new(world(), Limits { queue: 4, ring: 8 });
        let joined = hub.join(None, None).unwrap();
        let mut w = world();
        run(&hub, &mut w, 4);
        assert!(!joined.flags.resync.load(Ordering::SeqCst));
        run(&hub, &mut w, 1);
        assert!(
            joined.flags.resync.load(Ordering::SeqCst),
            "the fifth record overflows a queue of 4"
        );
        assert_eq!(hub.counters.resyncs.load(Ordering::SeqCst), 1);
        assert_eq!(hub.counters.queue_max.load(Ordering::SeqCst), 4);
        // Taken off: further steps do not count it again; its queue still holds 4 records.
        run(&hub, &mut w, 10);
        assert_eq!(hub.counters.resyncs.load(Ordering::SeqCst), 1);
        let mut rx = joined.rx;
        let mut n = 0;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        assert_eq!(n, 4);
        // Rejoining gives the world at the host's step now.
        let again = hub
            .join(Some(joined.id), Some(joined.flags.clone()))
            .unwrap();
        assert_eq!(again.world.step, 15);
        assert!(!again.flags.resync.load(Ordering::SeqCst));
    }
}
