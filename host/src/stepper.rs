//! The stepping loop: runs on its own thread, steps the world at the asked rate, and
//! publishes each step to the hub without ever waiting on a viewer.

use crate::hub::Hub;
use crate::publish::{Feed, Records};
use crate::source::Source;
use bytes::BytesMut;
use ostm_protocol::format::recording::{Durability, Recorder};
use ostm_protocol::wire::{
    EncodedFrame, End, EndReason, FrameTooLong, HostCodec, Record, ToViewer,
};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// What the stepping loop is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Steps per second; `None` runs as fast as it can.
    pub rate: Option<u32>,
    /// Stop after this many steps.
    pub steps: Option<u64>,
    /// A drift caused on purpose (`--drift-at`).
    pub drift_at: Option<DriftAt>,
    /// Record the host's own session here.
    pub record: Option<PathBuf>,
    /// How that recording reaches the disk.
    pub durability: Durability,
    /// Take no step until this many viewers have attached (0: start at once).
    pub wait_for_viewers: u64,
    /// Benchmark only: append `step unix-nanoseconds` for every step whose resulting world
    /// step is a multiple of `stamp_every`, taken just before the step is published.
    pub stamps: Option<PathBuf>,
    /// Steps between two timestamps written for `stamps` (at least 1).
    pub stamp_every: u64,
}

/// A drift caused on purpose (`--drift-at STEP[:BODY]`): after the step that brings the
/// world to `step`, 1 is added to a live body's velocity.y before hashing, with no record
/// saying so: `body` when it is alive then, else the first live body after it (from 0
/// without `body`, wrapping around).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriftAt {
    pub step: u64,
    pub body: Option<u8>,
}

/// Longest single sleep, so a stop request is seen quickly even at a slow rate.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// Bytes of record frames are taken from chunks of this size: the hub's ring holds its
/// records (65 536 by default) as slices of shared chunks, not one allocation each. Small,
/// because a connection stuck writing an old batch keeps that batch's chunks alive: at
/// most two per viewer.
const FRAME_CHUNK: usize = 8 * 1024;
/// A new chunk is begun when less than this is left in the current one (a frame larger
/// than what is left is still encoded whole, into a chunk of its own).
const FRAME_ROOM: usize = 256;

/// Encodes the stepping loop's record frames into shared chunks ([`FRAME_CHUNK`]).
///
/// One allocation per small frame, each kept for as long as it stays in the ring, cost the
/// host an order of magnitude more memory than the frames' bytes (allocator overhead and
/// fragmentation between the long-lived frames and everything short-lived): about 130 MiB
/// for a full ring of 65 536 records at `--rate max`.
struct Frames {
    buf: BytesMut,
    codec: HostCodec,
}

impl Frames {
    fn new() -> Frames {
        Frames {
            buf: BytesMut::with_capacity(FRAME_CHUNK),
            codec: HostCodec::new("the host's records"),
        }
    }

    fn encode(&mut self, msg: ToViewer) -> Result<EncodedFrame, FrameTooLong> {
        if self.buf.capacity() < FRAME_ROOM {
            self.buf.reserve(FRAME_CHUNK);
        }
        self.codec.encode(&msg, &mut self.buf)?;
        Ok(EncodedFrame(self.buf.split().freeze()))
    }
}

/// Why the stepping loop stopped: the end's reason ([`Stopped::reason`]) and its text.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    #[error("the host was stopped")]
    Shutdown,
    #[error("the host ran its {0} steps")]
    RanSteps(u64),
    #[error("the replay's last step was served")]
    ReplayServed,
    #[error("cannot record to {}: {err}", .path.display())]
    CannotRecord { path: PathBuf, err: io::Error },
    #[error("cannot write the recording: {0}")]
    CannotFlush(io::Error),
    #[error("cannot encode step {step}: {err}")]
    CannotEncode { step: u64, err: FrameTooLong },
    #[error("cannot record step {step}: {err}")]
    CannotRecordStep { step: u64, err: io::Error },
    /// The recording could not be assembled; its in-progress file `part` is kept with all
    /// its `steps`.
    #[error(
        "cannot finish the recording {}: {err}; {} is kept with all its {steps} steps: `ostm-viewer recover {}` turns it into {}",
        .path.display(), .part.display(), .part.display(), .path.display()
    )]
    CannotFinish {
        path: PathBuf,
        part: PathBuf,
        steps: u32,
        err: io::Error,
    },
    /// The stepping thread itself failed (it panicked).
    #[error("the stepping loop failed")]
    Failed,
}

impl Stopped {
    /// The end message's reason.
    pub fn reason(&self) -> EndReason {
        match self {
            Stopped::Shutdown => EndReason::Shutdown,
            Stopped::RanSteps(_) | Stopped::ReplayServed => EndReason::Finished,
            _ => EndReason::HostError,
        }
    }

    /// The end message: this reason and text, at `host_step`.
    pub fn end(&self, host_step: u64) -> End {
        End {
            reason: self.reason(),
            text: self.to_string(),
            host_step,
        }
    }
}

/// Flushes the host's recording when a flush is due (docs/replay-format.md, "The
/// in-progress file": at least every 250 ms while the host runs, also when it waits).
fn flush_due(hub: &Hub, recorder: &mut Option<Recorder>) -> Result<(), Stopped> {
    let Some(r) = recorder.as_mut() else {
        return Ok(());
    };
    match r.flush_due(Instant::now()) {
        Err(e) => Err(Stopped::CannotFlush(e)),
        Ok(true) => {
            hub.counters
                .recorded
                .store(u64::from(r.steps()), std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
        Ok(false) => Ok(()),
    }
}

/// Hands step `step` (which brought the world to `world`) to the hub (its ring and
/// viewers), then its record frame to NATS: in that order, so that a viewer who reads the
/// record through NATS and asks the host about the step finds the host holding it.
fn hand_over<R: Records>(
    hub: &Hub,
    nats: Option<&mut R>,
    step: u64,
    world: &ostm_protocol::World,
    input: bytes::Bytes,
    frame: &EncodedFrame,
) {
    hub.publish(world, input, frame);
    if let Some(f) = nats {
        f.record(step, &frame.0);
    }
}

/// Runs until the plan is done, the replay runs out, or `cancel` fires; then ends the
/// hub's stream with the reason. Returns how the stream ended.
pub fn run(
    hub: Arc<Hub>,
    mut source: Source,
    plan: Plan,
    mut feed: Option<Feed>,
    cancel: CancellationToken,
) -> End {
    let opened = Outputs::open(&hub, &source, &plan)
        .and_then(|mut out| wait_for_viewers(&hub, &plan, &cancel, &mut out).map(|()| out));
    let mut out = match opened {
        Ok(out) => out,
        Err(why) => {
            let e = why.end(source.world().step);
            hub.end(e.clone());
            return e;
        }
    };
    let result = step_until_end(&hub, &mut source, &plan, feed.as_mut(), &cancel, &mut out);
    // Tell the viewers first: finishing a long recording must not delay their end message.
    hub.end(result.clone());
    if let Some(f) = feed {
        f.end(result.clone());
    }
    out.close(&hub, result)
}

/// What the stepping loop writes besides the hub: the host's recording and the
/// benchmark's timestamps.
struct Outputs {
    recorder: Option<Recorder>,
    stamps: Option<std::io::BufWriter<std::fs::File>>,
}

impl Outputs {
    /// Creates the recording (a failure stops the host) and the stamps file (a failure
    /// is only logged).
    fn open(hub: &Hub, source: &Source, plan: &Plan) -> Result<Outputs, Stopped> {
        let recorder = match &plan.record {
            Some(path) => Some(
                Recorder::create_with(
                    path,
                    source.world(),
                    source.needs_start_snapshot(),
                    plan.durability,
                )
                .map_err(|err| Stopped::CannotRecord {
                    path: path.clone(),
                    err,
                })?,
            ),
            None => None,
        };
        hub.counters
            .recording
            .store(recorder.is_some(), std::sync::atomic::Ordering::Relaxed);
        let stamps = match &plan.stamps {
            Some(p) => match std::fs::File::create(p) {
                Ok(f) => Some(std::io::BufWriter::new(f)),
                Err(e) => {
                    warn!(path = %p.display(), "cannot write stamps: {e}");
                    None
                }
            },
            None => None,
        };
        Ok(Outputs { recorder, stamps })
    }

    /// Writes the timestamp of the step that brought the world to `step`, when due.
    fn stamp(&mut self, plan: &Plan, step: u64) {
        if let Some(out) = self
            .stamps
            .as_mut()
            .filter(|_| step.is_multiple_of(plan.stamp_every.max(1)))
        {
            use std::io::Write;
            let ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let _ = writeln!(out, "{step} {ns}");
        }
    }

    /// Flushes the stamps and finishes the recording, whose steps then all count as
    /// recorded (`hub`'s counter, read by the last status line and the metrics); a
    /// recording that cannot be finished turns `result` into [`Stopped::CannotFinish`].
    fn close(self, hub: &Hub, result: End) -> End {
        if let Some(mut out) = self.stamps {
            use std::io::Write;
            let _ = out.flush();
        }
        let Some(r) = self.recorder else {
            return result;
        };
        let path = r.path().to_path_buf();
        let (part, steps) = (r.journal().to_path_buf(), r.steps());
        match r.finish() {
            Ok(n) => {
                hub.counters
                    .recorded
                    .store(u64::from(n), std::sync::atomic::Ordering::Relaxed);
                info!(steps = n, path = %path.display(), "host recording written");
                result
            }
            Err(err) => {
                warn!(path = %path.display(), "cannot finish the host recording: {err}");
                Stopped::CannotFinish {
                    path,
                    part,
                    steps,
                    err,
                }
                .end(result.host_step)
            }
        }
    }
}

/// Takes no step until `plan.wait_for_viewers` viewers have attached (or `cancel`),
/// flushing the recording meanwhile.
fn wait_for_viewers(
    hub: &Hub,
    plan: &Plan,
    cancel: &CancellationToken,
    out: &mut Outputs,
) -> Result<(), Stopped> {
    while hub
        .counters
        .viewers_total
        .load(std::sync::atomic::Ordering::Relaxed)
        < plan.wait_for_viewers
        && !cancel.is_cancelled()
    {
        std::thread::sleep(Duration::from_millis(5));
        flush_due(hub, &mut out.recorder)?;
    }
    Ok(())
}

/// Steps, at the plan's rate, until the plan is done, the replay runs out, `cancel`
/// fires or a step cannot be encoded or recorded; returns how the stream ended.
fn step_until_end(
    hub: &Hub,
    source: &mut Source,
    plan: &Plan,
    mut feed: Option<&mut Feed>,
    cancel: &CancellationToken,
    out: &mut Outputs,
) -> End {
    let mut frames = Frames::new();
    let started = Instant::now();
    let mut done: u64 = 0;
    loop {
        if cancel.is_cancelled() {
            return Stopped::Shutdown.end(source.world().step);
        }
        if plan.steps == Some(done) {
            return Stopped::RanSteps(done).end(source.world().step);
        }
        if let Some(rate) = plan.rate {
            let due = started + Duration::from_secs_f64(done as f64 / rate.max(1) as f64);
            wait_until(due, hub, cancel, &mut out.recorder);
            if cancel.is_cancelled() {
                continue;
            }
        }
        let Some(input) = source.next_input() else {
            return Stopped::ReplayServed.end(source.world().step);
        };
        if let Err(e) = step_one(
            hub,
            source.world_mut(),
            input,
            plan,
            feed.as_deref_mut(),
            &mut frames,
            out,
        ) {
            return e;
        }
        done += 1;
    }
}

/// Sleeps in slices until `due` or `cancel`, flushing the recording when due.
fn wait_until(
    due: Instant,
    hub: &Hub,
    cancel: &CancellationToken,
    recorder: &mut Option<Recorder>,
) {
    let mut now = Instant::now();
    while now < due && !cancel.is_cancelled() {
        std::thread::sleep((due - now).min(SLEEP_SLICE));
        now = Instant::now();
        // A failing disk is reported by the next step's own flush.
        let _ = flush_due(hub, recorder);
    }
}

/// One step: the world stepped (and perturbed, in tests), hashed, its record encoded,
/// stamped, handed to the hub and NATS, recorded and flushed when due.
fn step_one(
    hub: &Hub,
    world: &mut ostm_protocol::World,
    input: crate::source::StepInput,
    plan: &Plan,
    mut feed: Option<&mut Feed>,
    frames: &mut Frames,
    out: &mut Outputs,
) -> Result<(), End> {
    let step = world.step;
    if let Some(f) = feed.as_deref_mut() {
        f.before_step(world);
    }
    world.step(&input.ops);
    if let Some(d) = plan.drift_at {
        drift_at(world, d);
    }
    let hash = world.hash();
    if let Some(expected) = input.expected_hash {
        if expected != hash {
            warn!(
                step = world.step,
                expected, hash, "the replay's hash row differs from the host's world"
            );
        }
    }
    let record = ToViewer::Record(Record {
        step,
        hash,
        input: input.bytes.clone(),
    });
    let frame = frames
        .encode(record)
        .map_err(|err| Stopped::CannotEncode { step, err }.end(step))?;
    out.stamp(plan, world.step);
    hand_over(hub, feed, step, world, input.bytes.clone(), &frame);
    if let Some(r) = out.recorder.as_mut() {
        r.push(&input.bytes, hash)
            .map_err(|err| Stopped::CannotRecordStep { step, err }.end(step.wrapping_add(1)))?;
    }
    flush_due(hub, &mut out.recorder).map_err(|why| why.end(step.wrapping_add(1)))
}

/// `--drift-at`: once the world reaches `d.step`, adds 1 to a live body's velocity.y
/// ([`DriftAt`]) and says which in a warning.
fn drift_at(world: &mut ostm_protocol::World, d: DriftAt) {
    if world.step != d.step {
        return;
    }
    let n = world.bodies.len();
    // A body past the last slot starts the search at 0.
    let asked = d.body.map_or(0, usize::from).min(n);
    let Some(body) = (0..n)
        .map(|i| (asked + i) % n.max(1))
        .find(|&i| world.bodies[i].alive)
    else {
        warn!(
            step = d.step,
            "drift-at: no live body at step {}: nothing perturbed, no drift", d.step
        );
        return;
    };
    world.bodies[body].vel[1] = world.bodies[body].vel[1].wrapping_add(1);
    let instead = match d.body {
        Some(b) if usize::from(b) != body => format!(" (body {b} is not alive then)"),
        _ => String::new(),
    };
    warn!(
        step = d.step,
        body,
        "drift-at: perturbed body {body}'s velocity.y at step {}{instead}; viewers report a drift at step {}",
        d.step,
        d.step
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Limits;
    use ostm_protocol::wire::DriftStatus;
    use ostm_protocol::{Dims, Setup, World};

    /// `--drift-at` changes one live body, once, at its step: the one asked for when it
    /// is alive, else the next live one (from 0 without one, or past the last slot).
    #[test]
    fn drift_at_takes_a_live_body() {
        let setup = Setup {
            dims: Dims::Two,
            bodies: 4,
            seed: 3,
        };
        let at = |body: Option<u8>, dead: &[usize], step: u64| {
            let mut w = World::new(setup, None);
            for &d in dead {
                w.bodies[d].alive = false;
            }
            let before = w.clone();
            drift_at(&mut w, DriftAt { step, body });
            (0..w.bodies.len())
                .filter(|&i| w.bodies[i].vel != before.bodies[i].vel)
                .map(|i| (i, w.bodies[i].vel[1] - before.bodies[i].vel[1]))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(Some(2), &[], 0), [(2, 1)]);
        assert_eq!(at(Some(2), &[], 1), [], "not at another step");
        assert_eq!(at(Some(2), &[2], 0), [(3, 1)]);
        assert_eq!(at(Some(3), &[3], 0), [(0, 1)], "wrapping around");
        assert_eq!(at(None, &[0, 1], 0), [(2, 1)]);
        assert_eq!(at(Some(200), &[0], 0), [(1, 1)]);
        assert_eq!(at(None, &[0, 1, 2, 3], 0), [], "no live body");
    }

    /// The end texts viewers read, byte for byte as they were written by hand before
    /// [`Stopped`], with their reasons.
    #[test]
    fn stop_reasons_read_as_they_always_have() {
        let e = || io::Error::other("disk gone");
        let cases = [
            (
                Stopped::Shutdown,
                EndReason::Shutdown,
                "the host was stopped".to_string(),
            ),
            (
                Stopped::RanSteps(7),
                EndReason::Finished,
                "the host ran its 7 steps".into(),
            ),
            (
                Stopped::ReplayServed,
                EndReason::Finished,
                "the replay's last step was served".into(),
            ),
            (
                Stopped::CannotRecord {
                    path: "r/h.ostm".into(),
                    err: e(),
                },
                EndReason::HostError,
                "cannot record to r/h.ostm: disk gone".into(),
            ),
            (
                Stopped::CannotFlush(e()),
                EndReason::HostError,
                "cannot write the recording: disk gone".into(),
            ),
            (
                Stopped::CannotEncode {
                    step: 3,
                    err: FrameTooLong { len: 9 },
                },
                EndReason::HostError,
                format!("cannot encode step 3: {}", FrameTooLong { len: 9 }),
            ),
            (
                Stopped::CannotRecordStep { step: 4, err: e() },
                EndReason::HostError,
                "cannot record step 4: disk gone".into(),
            ),
            (
                Stopped::CannotFinish {
                    path: "h.ostm".into(),
                    part: "h.ostm.part".into(),
                    steps: 7,
                    err: e(),
                },
                EndReason::HostError,
                "cannot finish the recording h.ostm: disk gone; h.ostm.part is kept with all its 7 steps: `ostm-viewer recover h.ostm.part` turns it into h.ostm".into(),
            ),
            (
                Stopped::Failed,
                EndReason::HostError,
                "the stepping loop failed".into(),
            ),
        ];
        for (why, reason, text) in cases {
            let end = why.end(12);
            assert_eq!(
                (end.reason, end.text.as_str(), end.host_step),
                (reason, text.as_str(), 12)
            );
        }
    }

    /// Stands for the NATS feed: asks the hub, as a viewer's drift request would, about
    /// the step each record brings the world to, at the moment the record is handed over.
    struct Probe<'a> {
        hub: &'a Hub,
        seen: Vec<(u64, DriftStatus)>,
    }

    impl Records for Probe<'_> {
        fn record(&mut self, step: u64, _frame: &bytes::Bytes) {
            self.seen.push((step, self.hub.drift(step + 1).status));
        }
    }

    #[test]
    fn the_hub_holds_a_step_before_its_record_goes_to_nats() {
        let mut world = World::new(
            Setup {
                dims: Dims::Two,
                bodies: 4,
                seed: 7,
            },
            None,
        );
        let hub = Hub::new(world.clone(), Limits { queue: 64, ring: 8 });
        let mut probe = Probe {
            hub: &hub,
            seen: Vec::new(),
        };
        let mut frames = Frames::new();
        for _ in 0..3 {
            let step = world.step;
            world.step(&[]);
            let frame = frames
                .encode(ToViewer::Record(Record {
                    step,
                    hash: world.hash(),
                    input: bytes::Bytes::new(),
                }))
                .unwrap();
            hand_over(
                &hub,
                Some(&mut probe),
                step,
                &world,
                bytes::Bytes::new(),
                &frame,
            );
        }
        assert_eq!(
            probe.seen,
            [
                (0, DriftStatus::Held),
                (1, DriftStatus::Held),
                (2, DriftStatus::Held)
            ]
        );
    }
}
