//! The state the stepping loop shares with the connections, around the fan-out's sans-IO
//! rules ([`ostm_protocol::serve::ring`]): the world as of the host's step, the ring of
//! recent worlds for drift requests ([`Worlds`]), one shared ring of recent records that
//! every viewer's connection reads at its own position ([`Records`]), and the counters the
//! status line prints. This module holds the locks, atomics and wakes; the ring decides.
//!
//! Publishing a step does the same work whatever the number of viewers: the stepping loop
//! appends the step's world and record (encoded once) under the hub's lock and wakes the
//! [`FAN_OUTS`] fan-out tasks ([`crate::fan_out`]), a fixed number whatever the viewers.
//! A connection that is behind takes the records past its position itself ([`Hub::take`]);
//! one that finds the host more than `queue` records ahead of it is resynced. A viewer
//! joins (takes its probe snapshot and its position) under the hub's lock, so it joins
//! *at* a step, never between one step's world and its record.

use crate::unpoisoned::unpoisoned;
use bytes::Bytes;
use ostm_protocol::serve::ring::{Records, Taken, Worlds};
use ostm_protocol::wire::{DriftReply, EncodedFrame, End};
use ostm_protocol::World;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock};
use tokio::sync::Notify;

/// Fan-out tasks: each writes to its share of the connections (they are dealt out in
/// turn as they attach), so that the runtime's two worker threads write at once.
pub const FAN_OUTS: usize = 2;

/// Limits fixed when the host starts.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Records a viewer may be behind the host before it is resynced (the shared ring
    /// holds this many).
    pub queue: usize,
    /// Recent worlds held for drift requests.
    pub ring: usize,
}

struct Inner {
    /// The recent worlds for drift requests; the latest is the world at the host's step.
    ring: Worlds,
    /// Records published so far: the position of the next one.
    published: u64,
    next_id: u64,
}

/// Counters for the status line and the metrics (monotonic unless noted).
#[derive(Debug, Default)]
pub struct Counters {
    pub steps: AtomicU64,
    /// Viewers attached now (goes down).
    pub viewers: AtomicU64,
    pub viewers_total: AtomicU64,
    pub resyncs: AtomicU64,
    /// Records handed to viewers' connections to write (added once a batch).
    pub records_sent: AtomicU64,
    pub refused: AtomicU64,
    pub stalled: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub drift_requests: AtomicU64,
    /// The most records any viewer has been behind the host when its connection took
    /// records (at most the queue limit: a viewer further behind is resynced).
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
    records: RwLock<Records>,
    /// The host's step, readable without a lock.
    step: AtomicU64,
    /// The world's step when the hub was made (the host's first step is numbered so).
    start_step: u64,
    /// Records published so far (the ring's head), readable without a lock.
    head: AtomicU64,
    /// The fan-out tasks that have had connections (the first always counts).
    busy: AtomicUsize,
    /// How the stream ended, once it has; set after the last record was published.
    ended: OnceLock<End>,
    /// Told by the stepping loop that records were published (one per fan-out task).
    stepped: [Notify; FAN_OUTS],
    /// Wakes every connection waiting for records.
    published: Notify,
    pub limits: Limits,
    pub counters: Counters,
}

pub use ostm_protocol::serve::{Joined, Take};

impl Hub {
    /// A hub whose world is `world`.
    pub fn new(world: World, limits: Limits) -> Hub {
        let step = world.step;
        Hub {
            inner: Mutex::new(Inner {
                ring: Worlds::new(world, limits.ring),
                published: 0,
                next_id: 0,
            }),
            records: RwLock::new(Records::new(limits.queue)),
            step: AtomicU64::new(step),
            start_step: step,
            head: AtomicU64::new(0),
            busy: AtomicUsize::new(1),
            ended: OnceLock::new(),
            stepped: std::array::from_fn(|_| Notify::new()),
            published: Notify::new(),
            limits,
            counters: Counters::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        unpoisoned(self.inner.lock())
    }

    /// The host's step now.
    pub fn step(&self) -> u64 {
        self.step.load(Ordering::Acquire)
    }

    /// The world's step when the hub was made: [`Hub::step`] minus it is the steps taken.
    pub fn start_step(&self) -> u64 {
        self.start_step
    }

    /// The number of records published so far.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Fan-out task `part` has a connection from now on: publishing wakes it too.
    pub fn fan_out_busy(&self, part: usize) {
        self.busy.fetch_max(part + 1, Ordering::Relaxed);
    }

    /// The notification fan-out task `part` waits on: told once per publish (for any
    /// number of steps published meanwhile) and at the end.
    pub fn stepped(&self, part: usize) -> &Notify {
        &self.stepped[part]
    }

    /// How the stream ended, once it has.
    pub fn ended(&self) -> Option<End> {
        self.ended.get().cloned()
    }

    /// Whether the stream has ended.
    pub fn has_ended(&self) -> bool {
        self.ended.get().is_some()
    }

    /// Takes a viewer on at the host's current step: its probe world and its position in
    /// the records. `id` keeps a resynced viewer's id. `None` once the stream has ended.
    pub fn join(&self, id: Option<u64>) -> Option<Joined> {
        let mut inner = self.lock();
        if self.ended.get().is_some() {
            return None;
        }
        let id = id.unwrap_or_else(|| {
            inner.next_id += 1;
            inner.next_id
        });
        let world = inner.ring.latest()?.clone();
        Some(Joined {
            id,
            world,
            position: inner.published,
        })
    }

    /// The notification a connection waits on for records past its position. Create the
    /// [`tokio::sync::futures::Notified`] (and `enable` it) *before* calling [`Hub::take`],
    /// so that a record published in between is not missed.
    pub fn published(&self) -> &Notify {
        &self.published
    }

    /// Appends to `out` the frames of at most `max` records from `position` on and moves
    /// `position` past them ([`Records::take`]). Only clones of shared frames are made
    /// under the (read) lock.
    pub fn take(&self, position: &mut u64, max: usize, out: &mut Vec<EncodedFrame>) -> Take {
        // Read before the records: once the end is set, every record is in the ring.
        let ended = self.ended.get();
        let Taken {
            take,
            behind,
            count,
        } = unpoisoned(self.records.read()).take(position, max, ended, out);
        if matches!(take, Take::Behind) {
            self.counters.resyncs.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(behind) = behind {
            self.note_behind(behind);
        }
        if count > 0 {
            self.counters
                .records_sent
                .fetch_add(count, Ordering::Relaxed);
        }
        take
    }

    /// Appends to `out` the frames of every record from `position` on, when there are
    /// some and at most one write's worth ([`crate::framing::BATCH`], and at most `queue`);
    /// returns their number and the step the last brings the viewer to. `None` otherwise:
    /// a connection further behind takes its records itself ([`Hub::take`]).
    pub fn take_all_within(
        &self,
        position: u64,
        out: &mut Vec<EncodedFrame>,
    ) -> Option<(u64, u64)> {
        let (count, after) = unpoisoned(self.records.read()).take_all_within(
            position,
            crate::framing::BATCH,
            out,
        )?;
        self.note_behind(count);
        self.counters
            .records_sent
            .fetch_add(count, Ordering::Relaxed);
        Some((count, after))
    }

    fn note_behind(&self, behind: u64) {
        if behind > self.counters.queue_max.load(Ordering::Relaxed) {
            self.counters.queue_max.fetch_max(behind, Ordering::Relaxed);
        }
    }

    /// Publishes one step: the world after it, the input that led there, and the record
    /// frame for the viewers. Never waits on a viewer, and does the same work however many
    /// there are: one append to each ring, and one wake of each fan-out task.
    pub fn publish(&self, world: &World, input: Bytes, frame: &EncodedFrame) {
        {
            let mut inner = self.lock();
            inner.ring.push(world, input);
            let mut records = unpoisoned(self.records.write());
            records.push(world.step, frame.clone());
            inner.published = records.next();
            self.head.store(records.next(), Ordering::Release);
            self.step.store(world.step, Ordering::Release);
        }
        self.counters.steps.store(world.step, Ordering::Relaxed);
        // Only the fan-outs that have had connections: the first, which also wakes the
        // waiting ones, always.
        let busy = self.busy.load(Ordering::Relaxed).min(FAN_OUTS);
        for stepped in &self.stepped[..busy] {
            stepped.notify_one();
        }
    }

    /// Ends the stream: each connection sends what is left for it, then `end`.
    pub fn end(&self, end: End) {
        {
            let _inner = self.lock();
            let _ = self.ended.set(end);
        }
        for stepped in &self.stepped {
            stepped.notify_one();
        }
        self.published.notify_waiters();
    }

    /// Answers a drift request for step `step`: the world held at that step and the
    /// stage hashes of recomputing the step before it from the world held there. Only
    /// the copies are made under the lock; the recomputation runs outside it, so a viewer
    /// asking again and again does not hold up the stepping loop.
    pub fn drift(&self, step: u64) -> DriftReply {
        self.counters.drift_requests.fetch_add(1, Ordering::Relaxed);
        let held = self.lock().ring.held(step);
        held.answer()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ostm_protocol::sim::op::encode_input;
    use ostm_protocol::wire::{DriftStatus, HostCodec, Record, ToViewer};
    use ostm_protocol::{Dims, Op, Setup};

    pub(crate) fn world() -> World {
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
    pub(crate) fn run(hub: &Hub, w: &mut World, n: usize) {
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

    /// Takes everything at `position` in batches of `max`; the steps the batches end at.
    fn take_all(hub: &Hub, position: &mut u64, max: usize) -> (Vec<EncodedFrame>, Vec<u64>) {
        let (mut frames, mut ends) = (Vec::new(), Vec::new());
        while let Take::Records { after, .. } = hub.take(position, max, &mut frames) {
            ends.push(after);
        }
        (frames, ends)
    }

    #[test]
    fn a_viewer_takes_every_record_from_its_step_in_order() {
        let hub = Hub::new(world(), Limits { queue: 8, ring: 8 });
        let mut w = world();
        run(&hub, &mut w, 3);
        let joined = hub.join(None).unwrap();
        assert_eq!((joined.world.step, joined.position), (3, 3));
        let mut at = joined.position;
        assert!(matches!(
            hub.take(&mut at, 64, &mut Vec::new()),
            Take::Nothing
        ));
        run(&hub, &mut w, 5);
        let (frames, ends) = take_all(&hub, &mut at, 2);
        assert_eq!(
            ends,
            vec![5, 7, 8],
            "batches of at most 2 records, steps 3..8"
        );
        // Each frame is the record of the next step, from the viewer's world on.
        let mut expect = joined.world.clone();
        for f in &frames {
            let step = u64::from_le_bytes(f.0[5..13].try_into().unwrap());
            assert_eq!(step, expect.step);
            expect.step(&[Op::Impulse {
                body: 0,
                d: [1, 2, 3],
            }]);
        }
        assert_eq!(expect, w);
        assert_eq!(hub.counters.queue_max.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_viewer_more_than_queue_records_behind_is_resynced() {
        let hub = Hub::new(world(), Limits { queue: 4, ring: 8 });
        let joined = hub.join(None).unwrap();
        let mut w = world();
        run(&hub, &mut w, 4);
        // Exactly `queue` behind: still served.
        let mut at = joined.position;
        let (frames, _) = take_all(&hub, &mut at.clone(), 64);
        assert_eq!(frames.len(), 4);
        run(&hub, &mut w, 1);
        assert!(
            matches!(hub.take(&mut at, 64, &mut Vec::new()), Take::Behind),
            "five records behind a queue of 4"
        );
        assert_eq!(hub.counters.resyncs.load(Ordering::SeqCst), 1);
        assert_eq!(hub.counters.queue_max.load(Ordering::SeqCst), 4);
        // Rejoining gives the world at the host's step now and its position.
        let again = hub.join(Some(joined.id)).unwrap();
        assert_eq!(
            (again.id, again.world.step, again.position),
            (joined.id, 5, 5)
        );
        assert_eq!(again.world, w);
    }

    #[test]
    fn the_end_comes_after_the_records_left_and_instead_of_a_resync() {
        let hub = Hub::new(world(), Limits { queue: 4, ring: 8 });
        let (near, far) = (hub.join(None).unwrap(), hub.join(None).unwrap());
        let mut w = world();
        run(&hub, &mut w, 2);
        let mut at_far = far.position;
        run(&hub, &mut w, 4);
        let mut at_near = near.position + 3;
        let end = End {
            reason: ostm_protocol::wire::EndReason::Finished,
            text: "done".into(),
            host_step: 6,
        };
        hub.end(end.clone());
        assert!(hub.join(None).is_none(), "no joining an ended stream");
        let (frames, _) = take_all(&hub, &mut at_near, 64);
        assert_eq!(frames.len(), 3);
        assert!(matches!(hub.take(&mut at_near, 64, &mut Vec::new()), Take::Ended(e) if e == end));
        assert!(
            matches!(hub.take(&mut at_far, 64, &mut Vec::new()), Take::Ended(_)),
            "a viewer too far behind at the end gets the end, not a resync"
        );
    }
}
