//! One live session: the reader ([`network`]) fills the [`Spool`] with what the host sends,
//! as fast as it arrives; the verifier here takes those messages in order, rebuilds the
//! world from each snapshot, verifies every record by step number, records, and explains
//! the first drift. The verifier does not know where its messages came from: it is fed
//! [`Item`]s (docs/protocol.md, "The viewer's reader and verifier").

use super::drift::{on_drift, DriftReport, Evidence};
use super::network::{self, Dial, Network};
use super::record::{Recording, Unfinished, Written};
pub use super::shared::Interrupt;
use super::shared::{Shared, DRIFT_REPLY_TIMEOUT};
use super::spool::{Backlog, Item, Spool};
use super::trail::Trail;
use ostm_protocol::format::recording::{check_target, Durability};
use ostm_protocol::format::trace::setup_line;
use ostm_protocol::sim::fields::{self, Fields};
use ostm_protocol::sim::op::for_each_op;
use ostm_protocol::wire::{End, RecordRef, ToHost, Welcome};
use ostm_protocol::{Op, World};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::debug;

/// How often the status is reported (and the recording flushed when no step comes).
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Items the verifier takes from the spool at once, at most.
const TAKE: usize = 4096;
/// Items or records between two readings of the clock for the status tick, at most (a
/// few milliseconds of steps at full speed).
const CLOCK_EVERY: u32 = 256;

/// What the session is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `HOST:PORT`.
    pub addr: String,
    pub token: Option<String>,
    /// TLS, when asked for.
    pub tls: Option<super::tls::Tls>,
    /// NATS's authentication, for a `nats://HOST:PORT/NAME` address.
    pub nats_auth: ostm_runtime::cli::NatsAuthArgs,
    /// On NATS: start from the keyframe at or before this step.
    pub from_step: Option<u64>,
    /// Stop after verifying this many steps.
    pub steps: Option<u64>,
    /// Stop once the viewer's world reaches this step.
    pub until: Option<u64>,
    /// Record to this file.
    pub record: Option<PathBuf>,
    /// Overwrite an existing recording.
    pub force: bool,
    /// How the recording reaches the disk.
    pub durability: Durability,
    /// Reconnect after a lost connection, trying for at most this long.
    pub reconnect: Option<Duration>,
    /// Test only: verify at most this many steps per second.
    pub throttle: Option<u32>,
    /// Test only: read at most this many records per second, with a small receive buffer,
    /// so that the viewer falls behind a fast host and is resynced.
    pub throttle_read: Option<u32>,
    /// Compute both fields ([`fields::compute`]) of every world the viewer reaches.
    pub fields: bool,
    /// Nice steps the verifier runs below the reader ([`VERIFIER_NICENESS`] by default).
    pub verifier_nice: i32,
    /// Report the fields ([`Event::Fields`]) when the viewer's world is at these steps.
    /// Implies `fields`.
    pub fields_at: BTreeSet<u64>,
    /// A view of the world (terminal or web) asks for frames with this ([`Event::Frame`]).
    pub frames: Option<FrameRequest>,
    /// Stops the session as Ctrl-C does (a view's quit key).
    pub interrupt: Interrupt,
}

/// How a view of the world (the terminal view, the web page) takes frames from the
/// verifier without slowing it: the view calls [`FrameRequest::ask`] when it can draw (once
/// per display refresh, say), and the verifier reports the next world it reaches as one
/// [`Event::Frame`] and clears the request. The verifier never waits for a view: between
/// two asks it only loads one flag per step, and the latest world wins.
#[derive(Debug, Clone, Default)]
pub struct FrameRequest(Arc<AtomicBool>);

impl FrameRequest {
    /// Asks for the next world the verifier reaches (or holds, when it is idle).
    pub fn ask(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Takes the request, if there is one.
    fn take(&self) -> bool {
        self.0.load(Ordering::Relaxed) && self.0.swap(false, Ordering::Acquire)
    }
}

impl Options {
    fn computes_fields(&self) -> bool {
        self.fields || !self.fields_at.is_empty()
    }
}

/// Why the session stopped.
#[derive(Debug)]
pub enum Stop {
    /// `--steps` or `--until` was reached.
    Asked,
    /// Ctrl-C.
    Interrupted,
    /// The host sent an end message.
    HostEnded(End),
    /// The first mismatch, explained.
    Drift(Box<DriftReport>),
    /// A connection or protocol failure.
    Failed(String),
}

/// A stretch of steps the viewer never saw: its connection was lost, or (NATS) they were
/// not on the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The viewer's step when the connection was lost.
    pub from: u64,
    /// The step it joined at again.
    pub to: u64,
    pub why: String,
    /// A reconnection that joined the host at a step before `from`: a restarted host
    /// (steps `to..from` are verified again; how far the old stream went past `from` is
    /// not known).
    pub behind: bool,
    /// A reconnection that joined another world (a host restarted with one): its setup
    /// line (`setup dims=… bodies=… seed=… link=…`), and the one before.
    pub world: Option<(String, String)>,
}

impl Gap {
    /// The steps never seen, when that is known: `to - from`; `None` for a host that came
    /// back behind the viewer or with another world.
    pub fn steps(&self) -> Option<u64> {
        (!self.behind && self.world.is_none()).then(|| self.to.saturating_sub(self.from))
    }
}

/// What the session did.
#[derive(Debug)]
pub struct Outcome {
    pub stop: Stop,
    /// The step the viewer attached at (the first snapshot's), if it got that far.
    pub attached_at: Option<u64>,
    /// The step of the viewer's world at the end.
    pub step: u64,
    /// Steps verified.
    pub verified: u64,
    pub resyncs: u64,
    /// Reconnections, each with the steps it missed.
    pub gaps: Vec<Gap>,
    /// Recording files written, in order.
    pub files: Vec<Written>,
    /// A recording failure, if finishing the files failed.
    pub record_error: Option<String>,
    /// In-progress files a failed write left, for `ostm-viewer recover`.
    pub unfinished: Vec<Unfinished>,
    /// The latest host step the viewer heard of (see [`Status::host_step`]).
    pub host_step: u64,
    /// Steps of `fields_at` whose fields were not reported, with why.
    pub fields_missed: Vec<(u64, String)>,
    /// The most records that waited for the verifier at once, and on disk.
    pub backlog_peak: Backlog,
}

/// Progress, for the status line.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    /// The latest host step the viewer has heard of: from the heartbeat the host sends
    /// ahead of records when it is past them (its step at the moment it wrote them), from
    /// heartbeats, records and snapshots.
    pub host_step: u64,
    pub step: u64,
    pub verified: u64,
    /// Resyncs so far.
    pub resyncs: u64,
    /// Reconnections so far.
    pub gaps: u64,
    /// Records received and waiting for the verifier (in memory and spooled to disk).
    pub backlog: u64,
    /// Verified steps per second since attaching.
    pub rate: f64,
    /// With `fields`: the largest density (units of 1 / [`fields::DENSITY_ONE`] body) and
    /// the largest occupancy of the viewer's world now.
    pub fields: Option<(u32, u32)>,
}

impl Status {
    /// Steps the viewer is behind the host: the latest host step it has heard of minus
    /// the step of its own (verified) world.
    pub fn lag(&self) -> u64 {
        self.host_step.saturating_sub(self.step)
    }
}

/// What the session tells its caller as it goes.
pub enum Event<'a> {
    Attached {
        welcome: &'a Welcome,
        world: &'a World,
    },
    Resync {
        from: u64,
        to: u64,
        file: Option<&'a PathBuf>,
    },
    /// The connection was lost at the viewer's `step` and the reader is connecting again
    /// (`--reconnect`); `Reconnected` follows when it has.
    Lost {
        step: u64,
        why: &'a str,
    },
    /// The connection was lost and made again: the steps from `gap.from` to `gap.to`
    /// were not seen.
    Reconnected {
        gap: &'a Gap,
        file: Option<&'a PathBuf>,
    },
    /// Steps `gap.from` to `gap.to` never came on the connection (NATS: they are not on
    /// the stream); the viewer continues from the snapshot at `gap.to` when the gap
    /// closed, in `file` when recording.
    Gap {
        gap: &'a Gap,
        file: Option<&'a PathBuf>,
    },
    Status(Status),
    /// The fields of the viewer's world at a step asked for with `fields_at` (a world
    /// whose hash verified, or the attach or resync snapshot's world).
    Fields {
        world: &'a World,
        fields: &'a Fields,
    },
    /// The viewer's world, asked for with [`Options::frames`]: `verified` when its hash
    /// was reproduced by stepping, not when it is the host's snapshot (at the attach, a
    /// resync or a reconnection) and no step has been verified from it yet.
    Frame {
        world: &'a World,
        verified: bool,
    },
}

struct State {
    world: World,
    verified: u64,
    resyncs: u64,
    gaps: Vec<Gap>,
    /// Why the connection was lost, while waiting for the reconnection.
    lost: Option<String>,
    recording: Option<Recording>,
    started: Instant,
    /// The connection the current world's records come from.
    connection: u64,
    /// The fields of `world`, when asked to compute them.
    fields: Option<Fields>,
    /// Steps of `fields_at` not reported yet.
    fields_due: BTreeSet<u64>,
    fields_missed: Vec<(u64, String)>,
    backlog_peak: Backlog,
    /// A step has been verified since the current world's snapshot.
    stepped: bool,
}

impl State {
    /// Reports the world as a frame when a view asked for one.
    fn frame(&self, opts: &Options, events: &mut impl FnMut(Event<'_>)) {
        if let Some(f) = &opts.frames {
            if f.take() {
                events(Event::Frame {
                    world: &self.world,
                    verified: self.stepped,
                });
            }
        }
    }

    /// The world changed (a verified step, or a snapshot): computes its fields when asked,
    /// reports them at a step asked for, and counts asked-for steps now behind the world
    /// as missed (`why`: what went past them; a verified step never does).
    fn reached(&mut self, opts: &Options, why: &str, events: &mut impl FnMut(Event<'_>)) {
        if !opts.computes_fields() {
            return;
        }
        let f = fields::compute(&self.world);
        let step = self.world.step;
        while let Some(&due) = self.fields_due.first().filter(|&&d| d < step) {
            self.fields_due.remove(&due);
            self.fields_missed.push((due, why.to_string()));
        }
        if self.fields_due.remove(&step) {
            events(Event::Fields {
                world: &self.world,
                fields: &f,
            });
        }
        self.fields = Some(f);
    }
}

/// Where the spool's file goes: beside the recording, else the temporary directory.
fn spool_dir(record: Option<&Path>) -> PathBuf {
    match record.and_then(Path::parent) {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => std::env::temp_dir(),
    }
}

/// Runs a session to its end; `events` sees progress. Ctrl-C or SIGTERM stops it.
pub fn run(opts: &Options, mut events: impl FnMut(Event<'_>)) -> Outcome {
    let mut out = Outcome {
        stop: Stop::Asked,
        attached_at: None,
        step: 0,
        verified: 0,
        resyncs: 0,
        gaps: Vec::new(),
        files: Vec::new(),
        record_error: None,
        unfinished: Vec::new(),
        host_step: 0,
        fields_missed: Vec::new(),
        backlog_peak: Backlog::default(),
    };
    if let Some(path) = &opts.record {
        if let Err(e) = check_target(path, opts.force) {
            out.stop = Stop::Failed(e);
            return out;
        }
    }
    let spool = Arc::new(Spool::new(&spool_dir(opts.record.as_deref())));
    let shared = Arc::new(Shared {
        interrupted: opts.interrupt.clone(),
        ..Shared::default()
    });
    let dial = Dial {
        addr: opts.addr.clone(),
        token: opts.token.clone(),
        reconnect: opts.reconnect,
        throttle_read: opts.throttle_read,
        tls: opts.tls.clone(),
    };
    let nats = match super::nats::parse(&opts.addr) {
        None => None,
        Some(Ok(target)) => Some(super::nats::Dial {
            target,
            auth: opts.nats_auth.clone(),
            from_step: opts.from_step,
        }),
        Some(Err(e)) => {
            out.stop = Stop::Failed(e);
            return out;
        }
    };
    if opts.from_step.is_some() && nats.is_none() {
        out.stop = Stop::Failed(
            "--from-step needs a session on NATS (nats://HOST:PORT/NAME): a TCP host streams from its current step".into(),
        );
        return out;
    }
    let net = match Network::start(dial, nats, spool.clone(), shared.clone()) {
        Ok(n) => n,
        Err(e) => {
            out.stop = Stop::Failed(format!("cannot start the reader: {e}"));
            return out;
        }
    };
    let (welcome, world) = match first_attach(&spool, &shared) {
        Ok(a) => a,
        Err(stop) => {
            out.stop = stop;
            net.stop();
            return out;
        }
    };
    out.attached_at = Some(world.step);
    if let Some(u) = opts.until.filter(|&u| u <= world.step) {
        out.step = world.step;
        out.stop = Stop::Failed(format!(
            "--until {u} is at or below the step the viewer attached at ({}): there is nothing to verify",
            world.step
        ));
        net.stop();
        return out;
    }
    // The recording's header and start snapshot are on disk before the attach is
    // reported: a process killed right after its `attached` line leaves a recoverable file.
    let recording = match &opts.record {
        Some(path) => match Recording::start(path, &world, opts.durability) {
            Ok(r) => Some(r),
            Err(e) => {
                out.stop = Stop::Failed(format!("cannot record to {}: {e}", path.display()));
                net.stop();
                return out;
            }
        },
        None => None,
    };
    events(Event::Attached {
        welcome: &welcome,
        world: &world,
    });
    let mut st = State {
        world,
        verified: 0,
        resyncs: 0,
        gaps: Vec::new(),
        lost: None,
        recording,
        started: Instant::now(),
        connection: shared.connection.load(Ordering::SeqCst),
        fields: None,
        fields_due: opts.fields_at.clone(),
        fields_missed: Vec::new(),
        backlog_peak: Backlog::default(),
        stepped: false,
    };
    shared.viewer_step.store(st.world.step, Ordering::Relaxed);
    let why = format!("the viewer attached at step {}, after it", st.world.step);
    st.reached(opts, &why, &mut events);
    let stop = if opts.steps == Some(0) || opts.until.is_some_and(|u| st.world.step >= u) {
        Stop::Asked
    } else {
        verify_loop(opts, &spool, &shared, &net, &mut st, &mut events)
    };
    net.stop();
    out.stop = stop;
    out.step = st.world.step;
    out.verified = st.verified;
    out.resyncs = st.resyncs;
    out.gaps = std::mem::take(&mut st.gaps);
    out.host_step = shared.host_step.load(Ordering::Relaxed).max(st.world.step);
    out.backlog_peak = st.backlog_peak;
    out.fields_missed = std::mem::take(&mut st.fields_missed);
    let end = st.world.step;
    out.fields_missed.extend(
        st.fields_due
            .iter()
            .map(|&s| (s, format!("not reached: the viewer stopped at step {end}"))),
    );
    if let Some(r) = st.recording {
        let done = r.finish();
        out.files = done.files;
        out.unfinished = done.unfinished;
        out.record_error = done
            .error
            .map(|e| format!("cannot finish the recording: {e}"));
    }
    out
}

/// Waits for the first connection's attach snapshot.
fn first_attach(spool: &Spool, shared: &Shared) -> Result<(Welcome, World), Stop> {
    loop {
        if shared.interrupted.is_set() {
            return Err(Stop::Interrupted);
        }
        match spool.pop(STATUS_EVERY) {
            Err(e) => return Err(Stop::Failed(format!("cannot read the spool: {e}"))),
            Ok(Some(Item::Attached { welcome, world })) => return Ok((welcome, world)),
            Ok(Some(Item::Lost { why, .. })) => return Err(Stop::Failed(why)),
            Ok(Some(other)) => {
                return Err(Stop::Failed(format!(
                    "expected the host's snapshot first, found {other:?}"
                )))
            }
            Ok(None) if shared.interrupted.is_set() => return Err(Stop::Interrupted),
            Ok(None) => {}
        }
    }
}

/// How much lower than the reader the verifier runs by default (Linux `nice` steps, per
/// thread, `--verifier-nice`): when both want the CPU, reading the socket comes first, so
/// a busy verifier never makes the host resync the viewer; the records wait in the spool.
pub const VERIFIER_NICENESS: i32 = 10;

fn verify_loop(
    opts: &Options,
    spool: &Spool,
    shared: &Shared,
    net: &Network,
    st: &mut State,
    events: &mut impl FnMut(Event<'_>),
) -> Stop {
    crate::priority::lower_thread_priority(opts.verifier_nice);
    let mut ticker = Ticker {
        next_status: Instant::now() + STATUS_EVERY,
        clock_in: CLOCK_EVERY,
    };
    let mut ops: Vec<Op> = Vec::new();
    let mut one = OneRecord {
        opts,
        net,
        shared,
        trail: Trail::new(&st.world),
        throttled: 0,
        throttle_start: Instant::now(),
    };
    // Items taken from the spool, many at a time.
    let mut pending: VecDeque<Item> = VecDeque::new();
    loop {
        if shared.interrupted.is_set() {
            return Stop::Interrupted;
        }
        if pending.is_empty() {
            if let Err(e) = spool.pop_into(STATUS_EVERY, &mut pending, TAKE) {
                return Stop::Failed(format!("cannot read the spool: {e}"));
            }
        }
        let item = pending.pop_front();
        if let Err(stop) = ticker.count(pending.is_empty(), st, shared, spool, events) {
            return stop;
        }
        let Some(item) = item else {
            // Idle: a view that asked still gets the world it holds.
            st.frame(opts, events);
            continue;
        };
        match item {
            Item::Record(r) => {
                ops.clear();
                // The codec checked the input when it decoded the record.
                let _ = for_each_op("record", &r.input, 0, |op| ops.push(op));
                if let Err(stop) = one.verify(RecordRef::from(&r), &ops, st, events) {
                    return stop;
                }
            }
            Item::Records(run) => {
                let mut stop = None;
                // A run may hold thousands of records: the status keeps its pace within it.
                let decoded = run.decode_each(&mut ops, |r, ops| {
                    match ticker
                        .count(false, st, shared, spool, events)
                        .and_then(|()| one.verify(r, ops, st, events))
                    {
                        Ok(()) => true,
                        Err(s) => {
                            stop = Some(s);
                            false
                        }
                    }
                });
                if let Some(stop) = stop {
                    return stop;
                }
                if let Err(e) = decoded {
                    return Stop::Failed(format!("protocol error: {e}"));
                }
            }
            Item::Resync(world) => {
                let from = st.world.step;
                debug!(from, to = world.step, "resync");
                if world.setup() != st.world.setup() || world.link() != st.world.link() {
                    return Stop::Failed(
                        "protocol error: a resync snapshot of another world".into(),
                    );
                }
                st.resyncs += 1;
                st.world = world;
                st.stepped = false;
                one.trail.restart(&st.world);
                let file = match st.recording.as_mut().map(|r| r.resync(&st.world)) {
                    Some(Err(e)) => {
                        return Stop::Failed(format!(
                            "cannot continue the recording after a resync: {e}"
                        ))
                    }
                    Some(Ok(p)) => Some(p),
                    None => None,
                };
                shared.viewer_step.store(st.world.step, Ordering::Relaxed);
                events(Event::Resync {
                    from,
                    to: st.world.step,
                    file: file.as_ref(),
                });
                let why = format!(
                    "a resync took the viewer from step {from} to step {} over it",
                    st.world.step
                );
                st.reached(opts, &why, events);
                if opts.until.is_some_and(|u| st.world.step >= u) {
                    return Stop::Asked;
                }
            }
            Item::Gap { to, world, why } => {
                let gap = Gap {
                    from: st.world.step,
                    to,
                    why,
                    behind: false,
                    world: None,
                };
                let mut file = None;
                if let Some(world) = world {
                    if world.setup() != st.world.setup() || world.link() != st.world.link() {
                        return Stop::Failed(
                            "protocol error: a keyframe of another world closes a gap".into(),
                        );
                    }
                    st.world = world;
                    st.stepped = false;
                    one.trail.restart(&st.world);
                    file = match st.recording.as_mut().map(|r| r.resync(&st.world)) {
                        Some(Err(e)) => {
                            return Stop::Failed(format!(
                                "cannot continue the recording after a gap: {e}"
                            ))
                        }
                        Some(Ok(p)) => Some(p),
                        None => None,
                    };
                    shared.viewer_step.store(st.world.step, Ordering::Relaxed);
                }
                events(Event::Gap {
                    gap: &gap,
                    file: file.as_ref(),
                });
                let why = format!("steps {} to {} never came", gap.from, gap.to);
                st.gaps.push(gap);
                st.reached(opts, &why, events);
                if opts.until.is_some_and(|u| st.world.step >= u) {
                    return Stop::Asked;
                }
            }
            Item::End(e) => {
                if opts.reconnect.is_some() && network::reconnects_after(&e) {
                    let why = format!(
                        "the host ended the stream ({}: {})",
                        e.reason.name(),
                        e.text
                    );
                    events(Event::Lost {
                        step: st.world.step,
                        why: &why,
                    });
                    st.lost = Some(why);
                } else {
                    return Stop::HostEnded(e);
                }
            }
            Item::Lost { why, last } => {
                if last {
                    return Stop::Failed(why);
                }
                events(Event::Lost {
                    step: st.world.step,
                    why: &why,
                });
                st.lost = Some(why);
            }
            Item::Attached { world, .. } => {
                let why = st
                    .lost
                    .take()
                    .unwrap_or_else(|| "the connection was made again".into());
                // A restarted host may come back behind the viewer, or with another world
                // (docs/protocol.md, "Reconnecting").
                let other = (world.setup() != st.world.setup() || world.link() != st.world.link())
                    .then(|| {
                        (
                            setup_line(&world.setup(), world.link()),
                            setup_line(&st.world.setup(), st.world.link()),
                        )
                    });
                let gap = Gap {
                    from: st.world.step,
                    to: world.step,
                    why,
                    behind: world.step < st.world.step,
                    world: other,
                };
                st.connection = shared.connection.load(Ordering::SeqCst);
                st.world = world;
                st.stepped = false;
                one.trail.restart(&st.world);
                let file = match st.recording.as_mut().map(|r| r.resync(&st.world)) {
                    Some(Err(e)) => {
                        return Stop::Failed(format!(
                            "cannot continue the recording after reconnecting: {e}"
                        ))
                    }
                    Some(Ok(p)) => Some(p),
                    None => None,
                };
                shared.viewer_step.store(st.world.step, Ordering::Relaxed);
                events(Event::Reconnected {
                    gap: &gap,
                    file: file.as_ref(),
                });
                let why = format!(
                    "the connection was lost at step {} and made again at step {}",
                    gap.from, gap.to
                );
                st.gaps.push(gap);
                st.reached(opts, &why, events);
                if opts.until.is_some_and(|u| st.world.step >= u) {
                    return Stop::Asked;
                }
            }
        }
    }
}

/// The current progress.
fn status(st: &State, shared: &Shared, backlog: u64) -> Status {
    let secs = st.started.elapsed().as_secs_f64();
    Status {
        host_step: shared.host_step.load(Ordering::Relaxed).max(st.world.step),
        step: st.world.step,
        verified: st.verified,
        resyncs: st.resyncs,
        gaps: st.gaps.len() as u64,
        backlog,
        rate: if secs > 0.0 {
            st.verified as f64 / secs
        } else {
            0.0
        },
        fields: st
            .fields
            .as_ref()
            .map(|f| (f.max_density(), f.max_occupancy())),
    }
}

/// Asks the host for its snapshot at the drifting step (when the connection that sent the
/// step is still the current one), then hands the evidence to [`on_drift`].
/// The status tick: the clock is read once per [`CLOCK_EVERY`] items or records (and
/// whenever the spool ran dry), not per record; when the status is due, the recording is
/// flushed and the status reported.
struct Ticker {
    next_status: Instant,
    clock_in: u32,
}

impl Ticker {
    fn count(
        &mut self,
        dry: bool,
        st: &mut State,
        shared: &Shared,
        spool: &Spool,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<(), Stop> {
        self.clock_in = self.clock_in.saturating_sub(1);
        if !(self.clock_in == 0 || dry) {
            return Ok(());
        }
        self.clock_in = CLOCK_EVERY;
        if shared.interrupted.is_set() {
            return Err(Stop::Interrupted);
        }
        if Instant::now() < self.next_status {
            return Ok(());
        }
        self.next_status = Instant::now() + STATUS_EVERY;
        if let Some(rec) = st.recording.as_mut() {
            if let Err(e) = rec.tick() {
                return Err(Stop::Failed(format!("cannot write the recording: {e}")));
            }
        }
        let backlog = spool.backlog();
        st.backlog_peak.records = st.backlog_peak.records.max(backlog.records);
        st.backlog_peak.on_disk = st.backlog_peak.on_disk.max(backlog.on_disk);
        st.backlog_peak.peak_disk_bytes = backlog.peak_disk_bytes;
        events(Event::Status(status(st, shared, backlog.records)));
        Ok(())
    }
}

/// What verifying one record needs besides the session's state.
struct OneRecord<'a> {
    opts: &'a Options,
    net: &'a Network,
    shared: &'a Shared,
    /// The world before the step being verified, for a drift report.
    trail: Trail,
    throttled: u64,
    throttle_start: Instant,
}

impl OneRecord<'_> {
    /// Runs one record's step and compares its hash; records it. `Err(stop)` ends the
    /// session (drift, a protocol error, or the steps asked for are done).
    fn verify(
        &mut self,
        r: RecordRef<'_>,
        ops: &[Op],
        st: &mut State,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<(), Stop> {
        let opts = self.opts;
        if st.lost.is_some() {
            return Err(Stop::Failed(
                "protocol error: a record after the connection was lost".into(),
            ));
        }
        if r.step != st.world.step {
            return Err(Stop::Failed(format!(
                "protocol error: a record for step {}, expected step {}",
                r.step, st.world.step
            )));
        }
        st.world.step(ops);
        let hash = st.world.hash();
        if hash != r.hash {
            let before = self.trail.world();
            return Err(Stop::Drift(Box::new(drift(
                self.net,
                self.shared,
                st,
                before,
                r,
                hash,
            ))));
        }
        self.trail.verified(r.input, &st.world);
        st.verified += 1;
        st.stepped = true;
        self.shared
            .viewer_step
            .store(st.world.step, Ordering::Relaxed);
        st.reached(opts, "", events);
        st.frame(opts, events);
        if let Some(per_second) = opts.throttle {
            self.throttled += 1;
            let due = self.throttle_start
                + Duration::from_secs_f64(self.throttled as f64 / per_second.max(1) as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        if let Some(rec) = st.recording.as_mut() {
            if let Err(e) = rec.push(r.input, hash) {
                return Err(Stop::Failed(format!("cannot write the recording: {e}")));
            }
        }
        if opts.steps.is_some_and(|n| st.verified >= n)
            || opts.until.is_some_and(|u| st.world.step >= u)
        {
            return Err(Stop::Asked);
        }
        Ok(())
    }
}

fn drift(
    net: &Network,
    shared: &Shared,
    st: &State,
    before: World,
    r: RecordRef<'_>,
    hash: u64,
) -> DriftReport {
    let step = st.world.step;
    let mut reply = None;
    let mut no_reply = None;
    if st.connection != shared.connection.load(Ordering::SeqCst) {
        no_reply = Some("the connection that sent the step has since been replaced".into());
    } else {
        // Replies or connection ends left from before are not about this request.
        while net.replies.try_recv().is_ok() {}
        net.send(ToHost::DriftRequest { step });
        let deadline = Instant::now() + net.reply_wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match net.replies.recv_timeout(left) {
                Ok(Ok(d)) if d.step == step => {
                    reply = Some(d);
                    break;
                }
                Ok(Ok(_)) => continue,
                Ok(Err(why)) => {
                    no_reply = Some(why);
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    no_reply = Some(net.gone.into());
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    no_reply = Some(format!(
                        "the host did not answer the drift request within {} s",
                        DRIFT_REPLY_TIMEOUT.as_secs()
                    ));
                    break;
                }
            }
        }
    }
    on_drift(&Evidence {
        step,
        host_hash: r.hash,
        viewer_hash: hash,
        viewer_before: before,
        viewer_after: st.world.clone(),
        input: r.input.to_vec(),
        reply,
        no_reply,
    })
}

#[cfg(test)]
mod frame_tests {
    use super::FrameRequest;

    #[test]
    fn an_ask_is_taken_once() {
        let f = FrameRequest::default();
        assert!(!f.take(), "nothing asked yet");
        f.ask();
        f.ask();
        let view = f.clone();
        assert!(view.take(), "the ask is seen through a clone");
        assert!(!f.take(), "two asks before a take give one frame");
    }
}
