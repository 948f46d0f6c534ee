//! One live session's driver: the reader ([`network`]) fills the [`Spool`] with what the
//! host sends, as fast as it arrives; this loop takes those messages in order and feeds
//! them to the sans-IO core ([`Verifier`]), which rebuilds the world from each snapshot,
//! verifies every record by step number and explains the first drift. Around it the
//! driver keeps what touches the world outside: the recording, the status ticker and its
//! clock, the drift request's round trip, the fields and frames the views ask for
//! (docs/protocol.md, "The viewer's reader and verifier").

use super::network::{Dial, Network};
use super::record::{Recording, Unfinished, Written};
pub use super::shared::Interrupt;
use super::shared::Shared;
use super::spool::{self as spooling, Backlog, Item, Spool};
use ostm_protocol::format::recording::{check_target, Durability};
use ostm_protocol::session::{self, Goal, Limits, Restart, Transmit, Verifier};
pub use ostm_protocol::session::{Failure, Gap, Stop};
use ostm_protocol::sim::fields::{self, Fields};
use ostm_protocol::sim::op::for_each_op;
use ostm_protocol::wire::{RecordRef, ToHost, Welcome};
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
    /// Which host and how the TCP/TLS reader reaches it (its token, TLS, `--reconnect`).
    pub dial: Dial,
    /// On NATS (`nats://HOST:PORT/NAME`): its authentication and where to start.
    pub nats: NatsOptions,
    /// When the session has done what it was asked (`--steps`, `--until`).
    pub goal: Goal,
    /// Record the verified steps, when asked.
    pub record: Option<RecordTo>,
    /// What the verifier does besides verifying.
    pub verifier: VerifierOptions,
    /// A view of the world (terminal or web) asks for frames with this ([`Event::Frame`]).
    pub frames: Option<FrameRequest>,
    /// Stops the session as Ctrl-C does (a view's quit key).
    pub interrupt: Interrupt,
    /// Where the spool's file goes (`--spool-dir`), and its bounds (`--spool-max`).
    pub spool: SpoolOptions,
}

/// Where the spool's file goes and how much it may hold.
#[derive(Debug, Clone, Default)]
pub struct SpoolOptions {
    /// `--spool-dir`: else beside the recording, else the system's temporary directory.
    pub dir: Option<PathBuf>,
    pub limits: spooling::Limits,
}

/// How the session reads a session on NATS.
#[derive(Debug, Clone, Default)]
pub struct NatsOptions {
    /// NATS's authentication.
    pub auth: ostm_runtime::cli::NatsAuthArgs,
    /// Start from the keyframe at or before this step, not the latest.
    pub from_step: Option<u64>,
}

/// Where and how the session is recorded (`--record FILE`, `--force`, `--sync`).
#[derive(Debug, Clone)]
pub struct RecordTo {
    /// The file (its in-progress `FILE.part` beside it).
    pub path: PathBuf,
    /// Overwrite an existing recording.
    pub force: bool,
    /// How the recording reaches the disk.
    pub durability: Durability,
}

/// What the verifier does besides verifying.
#[derive(Debug, Clone, Default)]
pub struct VerifierOptions {
    /// Nice steps the verifier runs below the reader ([`VERIFIER_NICENESS`] by default).
    pub nice: i32,
    /// Test only: verify at most this many steps per second.
    pub throttle: Option<u32>,
    /// Compute both fields ([`fields::compute`]) of every world the viewer reaches.
    pub fields: bool,
    /// Report the fields ([`Event::Fields`]) when the viewer's world is at these steps.
    /// Implies `fields`.
    pub fields_at: BTreeSet<u64>,
}

impl Options {
    /// The recording's file, when the session records.
    pub fn record_path(&self) -> Option<&Path> {
        self.record.as_ref().map(|r| r.path.as_path())
    }
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

impl VerifierOptions {
    fn computes_fields(&self) -> bool {
        self.fields || !self.fields_at.is_empty()
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
    /// Stretches never verified, each with why: lost connections, records lost on NATS, and
    /// one still open when the session ended (the last, when `open_gap`).
    pub gaps: Vec<Gap>,
    /// The last of `gaps` was still open when the session ended: the viewer's world never
    /// reached the latest host step it heard of (the end's, after an end in place of a
    /// resync).
    pub open_gap: bool,
    /// The steps each resync went over.
    pub resynced: Vec<Gap>,
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

impl Outcome {
    /// What the verdict counts (docs/protocol.md, "The verdict's count").
    pub fn tally(&self) -> session::Tally {
        session::Tally::new(
            self.attached_at,
            (self.step, self.verified),
            &self.gaps,
            &self.resynced,
            self.open_gap,
        )
    }
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
    /// Records are missing from the NATS stream at the viewer's `step` (a record past it
    /// came): the viewer waits for the next keyframe; a `Gap` follows when one comes.
    Missing {
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

/// What the driver keeps beside the core: the recording, the fields and frames the views
/// ask for, the backlog's peak.
struct Around {
    recording: Option<Recording>,
    started: Instant,
    /// The fields of the core's world, when asked to compute them.
    fields: Option<Fields>,
    /// Steps of `fields_at` not reported yet.
    fields_due: BTreeSet<u64>,
    fields_missed: Vec<(u64, String)>,
    backlog_peak: Backlog,
    throttled: u64,
    throttle_start: Instant,
}

impl Around {
    /// Reports the world as a frame when a view asked for one.
    fn frame(&self, opts: &Options, core: &Verifier, events: &mut impl FnMut(Event<'_>)) {
        if let Some(f) = &opts.frames {
            if f.take() {
                events(Event::Frame {
                    world: core.world(),
                    verified: core.stepped(),
                });
            }
        }
    }

    /// The world changed (a verified step, or a snapshot): computes its fields when asked,
    /// reports them at a step asked for, and counts asked-for steps now behind the world
    /// as missed (`why`: what went past them; a verified step never does).
    fn reached(
        &mut self,
        opts: &Options,
        world: &World,
        why: &str,
        events: &mut impl FnMut(Event<'_>),
    ) {
        if !opts.verifier.computes_fields() {
            return;
        }
        let f = fields::compute(world);
        let step = world.step;
        while let Some(&due) = self.fields_due.first().filter(|&&d| d < step) {
            self.fields_due.remove(&due);
            self.fields_missed.push((due, why.to_string()));
        }
        if self.fields_due.remove(&step) {
            events(Event::Fields { world, fields: &f });
        }
        self.fields = Some(f);
    }

    /// `--throttle` (tests): at most that many verified steps per second.
    fn throttle(&mut self, opts: &Options) {
        if let Some(per_second) = opts.verifier.throttle {
            self.throttled += 1;
            let due = self.throttle_start
                + Duration::from_secs_f64(self.throttled as f64 / per_second.max(1) as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }
}

/// Where the spool's file goes: `--spool-dir`, else beside the recording, else the
/// temporary directory.
fn spool_dir(opts: &Options) -> PathBuf {
    if let Some(d) = &opts.spool.dir {
        return d.clone();
    }
    match opts.record_path().and_then(Path::parent) {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => std::env::temp_dir(),
    }
}

/// An outcome that stopped before the reader started.
fn failed_early(why: String) -> Outcome {
    Outcome {
        stop: Stop::Failed(Failure::Other(why)),
        attached_at: None,
        step: 0,
        verified: 0,
        resyncs: 0,
        gaps: Vec::new(),
        open_gap: false,
        resynced: Vec::new(),
        files: Vec::new(),
        record_error: None,
        unfinished: Vec::new(),
        host_step: 0,
        fields_missed: Vec::new(),
        backlog_peak: Backlog::default(),
    }
}

/// Runs a session to its end; `events` sees progress. Ctrl-C or SIGTERM stops it.
pub fn run(opts: &Options, mut events: impl FnMut(Event<'_>)) -> Outcome {
    if let Some(r) = &opts.record {
        if let Err(e) = check_target(&r.path, r.force) {
            return failed_early(e);
        }
    }
    let nats = match super::nats::parse(&opts.dial.addr) {
        None => None,
        Some(Ok(target)) => Some(super::nats::Dial {
            target,
            auth: opts.nats.auth.clone(),
            from_step: opts.nats.from_step,
        }),
        Some(Err(e)) => return failed_early(e),
    };
    if opts.nats.from_step.is_some() && nats.is_none() {
        return failed_early(
            "--from-step needs a session on NATS (nats://HOST:PORT/NAME): a TCP host streams from its current step".into(),
        );
    }
    let spool = Arc::new(Spool::new(&spool_dir(opts), opts.spool.limits));
    let shared = Arc::new(Shared {
        interrupted: opts.interrupt.clone(),
        ..Shared::default()
    });
    let net = match Network::start(opts.dial.clone(), nats, spool.clone(), shared.clone()) {
        Ok(n) => n,
        Err(e) => return failed_early(format!("cannot start the reader: {e}")),
    };
    let limits = Limits {
        drift_reply_ms: net.reply_wait.as_millis() as u64,
        ..Limits::default()
    };
    let mut driver = Driver {
        opts,
        spool: &spool,
        shared: &shared,
        net,
        core: Verifier::new(limits, opts.goal, opts.dial.reconnect.is_some()),
        around: Around {
            recording: None,
            started: Instant::now(),
            fields: None,
            fields_due: opts.verifier.fields_at.clone(),
            fields_missed: Vec::new(),
            backlog_peak: Backlog::default(),
            throttled: 0,
            throttle_start: Instant::now(),
        },
        ticker: Ticker {
            next_status: Instant::now() + STATUS_EVERY,
            clock_in: CLOCK_EVERY,
        },
        welcome: None,
        open_gap_to: 0,
        open_gap_said: false,
    };
    driver.attach(&mut events);
    if driver.core.attached_at().is_some() && !driver.core.is_stopped() {
        driver.verify_loop(&mut events);
    }
    driver.finish()
}

/// The loop around the core.
struct Driver<'a> {
    opts: &'a Options,
    spool: &'a Spool,
    shared: &'a Shared,
    net: Network,
    core: Verifier,
    around: Around,
    ticker: Ticker,
    /// The first connection's welcome, until the attach is reported.
    welcome: Option<Welcome>,
    /// Where a gap still open at the end runs to (the reader's last step of the stream).
    open_gap_to: u64,
    /// A gap still open has been reported (the NATS reader's, as it found it).
    open_gap_said: bool,
}

impl Driver<'_> {
    /// Waits for the first connection's attach snapshot, starts the recording at it (on
    /// disk before the attach is reported: a process killed right after its `attached`
    /// line leaves a recoverable file), and reports the attach.
    fn attach(&mut self, events: &mut impl FnMut(Event<'_>)) {
        while self.core.attached_at().is_none() && !self.core.is_stopped() {
            if self.shared.interrupted.is_set() {
                self.core.interrupt();
                return;
            }
            match self.spool.pop(STATUS_EVERY) {
                Err(e) => self.core.fail(format!("cannot read the spool: {e}")),
                Ok(Some(item)) => self.take(item, events),
                Ok(None) => {}
            }
        }
    }

    fn verify_loop(&mut self, events: &mut impl FnMut(Event<'_>)) {
        crate::priority::lower_thread_priority(self.opts.verifier.nice);
        let mut ops: Vec<Op> = Vec::new();
        // Items taken from the spool, many at a time.
        let mut pending: VecDeque<Item> = VecDeque::new();
        while !self.core.is_stopped() {
            if self.shared.interrupted.is_set() {
                self.core.interrupt();
                break;
            }
            if pending.is_empty() {
                if let Err(e) = self.spool.pop_into(STATUS_EVERY, &mut pending, TAKE) {
                    self.core.fail(format!("cannot read the spool: {e}"));
                    break;
                }
            }
            let item = pending.pop_front();
            self.tick(pending.is_empty(), events);
            match item {
                // Idle: a view that asked still gets the world it holds.
                None => self.around.frame(self.opts, &self.core, events),
                Some(Item::Record(r)) => {
                    ops.clear();
                    // The codec checked the input when it decoded the record.
                    let _ = for_each_op("record", &r.input, 0, |op| ops.push(op));
                    self.record(RecordRef::from(&r), &ops, events);
                }
                Some(Item::Records(run)) => {
                    // A run may hold thousands of records: the status keeps its pace within it.
                    let decoded = run.decode_each(&mut ops, |r, ops| {
                        self.tick(false, events);
                        if self.core.is_stopped() {
                            return false;
                        }
                        self.record(r, ops, events);
                        !self.core.is_stopped()
                    });
                    if let Err(e) = decoded {
                        self.core.fail(format!("protocol error: {e}"));
                    }
                }
                Some(item) => self.take(item, events),
            }
        }
    }

    /// One item other than records: into the core, then what it says.
    fn take(&mut self, item: Item, events: &mut impl FnMut(Event<'_>)) {
        match item {
            Item::Attached { ref welcome, .. } => {
                if self.welcome.is_none() && self.core.attached_at().is_none() {
                    self.welcome = Some(*welcome);
                }
            }
            Item::Resync(ref world) => {
                debug!(from = self.core.world().step, to = world.step, "resync");
            }
            Item::Missing { why } => {
                // A notice from the reader: the verifier waits as it is, for the keyframe
                // that closes the gap (or the end that leaves it open).
                events(Event::Missing {
                    step: self.core.world().step,
                    why: &why,
                });
                return;
            }
            Item::Gap { to, world, why } => {
                // The NATS reader's gap (docs/fan-out.md, "Gaps"), by the one mapping.
                let open = world.is_none();
                let _ = Item::Gap { to, world, why }.give(&mut self.core);
                if open {
                    // The stream ended (or was lost) inside the gap: it stays open.
                    self.open_gap_said = true;
                    self.open_gap_to = self.open_gap_to.max(to);
                    let gap = Gap::new(
                        self.core.world().step,
                        to,
                        self.core.summary(to).open_gap.unwrap_or_default(),
                    );
                    events(Event::Gap {
                        gap: &gap,
                        file: None,
                    });
                }
                self.after(events);
                return;
            }
            Item::Record(r) => {
                let mut ops = Vec::new();
                let _ = for_each_op("record", &r.input, 0, |op| ops.push(op));
                self.record(RecordRef::from(&r), &ops, events);
                return;
            }
            Item::Records(run) => {
                let mut ops = Vec::new();
                let _ = run.decode_each(&mut ops, |r, ops| {
                    self.record(r, ops, events);
                    !self.core.is_stopped()
                });
                return;
            }
            Item::End(_) | Item::Lost { .. } => {}
        }
        // The one mapping from what the reader delivered to the core's input.
        let _ = item.give(&mut self.core);
        self.after(events);
    }

    /// Verifies one record, records it, and answers a drift.
    fn record(&mut self, r: RecordRef<'_>, ops: &[Op], events: &mut impl FnMut(Event<'_>)) {
        match self.core.handle_record(r, ops) {
            Some(hash) => {
                let world = self.core.world();
                self.shared.viewer_step.store(world.step, Ordering::Relaxed);
                self.around.reached(self.opts, world, "", events);
                self.around.frame(self.opts, &self.core, events);
                self.around.throttle(self.opts);
                if let Some(rec) = self.around.recording.as_mut() {
                    if let Err(e) = rec.push(r.input, hash) {
                        self.core.fail(format!(
                            "cannot write the recording: {e}{}",
                            self.spool.disk_note(&e)
                        ));
                    }
                }
            }
            None => self.drift_round_trip(),
        }
        if self.core.is_stopped() {
            self.after(events);
        }
    }

    /// The drift request's round trip: sends it on the connection that sent the step (or
    /// says it was replaced), then gives the core the host's answer or the time until its
    /// deadline passes.
    fn drift_round_trip(&mut self) {
        let Some(Transmit::DriftRequest { step, connection }) = self.core.poll_transmit() else {
            return;
        };
        if connection != self.shared.connection.load(Ordering::SeqCst) {
            self.core.handle_drift_unanswered(session::REPLACED);
            return;
        }
        // Replies or connection ends left from before are not about this request.
        while self.net.replies.try_recv().is_ok() {}
        self.net.send(ToHost::DriftRequest { step });
        let start = Instant::now();
        let now = || start.elapsed().as_millis() as u64;
        self.core.handle_timeout(now());
        while let Some(deadline) = self.core.poll_timeout() {
            let left = Duration::from_millis(deadline.saturating_sub(now()));
            match self.net.replies.recv_timeout(left) {
                Ok(Ok(reply)) => self.core.handle_drift_reply(reply),
                Ok(Err(why)) => self.core.handle_drift_unanswered(why),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    self.core.handle_drift_unanswered(self.net.gone)
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => self.core.handle_timeout(now()),
            }
        }
    }

    /// What the core said: the attach, restarts (a new recording file), losses.
    fn after(&mut self, events: &mut impl FnMut(Event<'_>)) {
        while let Some(e) = self.core.poll_event() {
            match e {
                session::Event::Attached { step } => self.attached(step, events),
                session::Event::Restarted { from, to, cause } => {
                    self.restarted(from, to, cause, events)
                }
                session::Event::Lost { step, why } => events(Event::Lost { step, why: &why }),
                session::Event::Stopped => self.stopped_in_a_gap(events),
            }
        }
    }

    /// The session stopped with a gap still open that no line has named yet (an end in
    /// place of a resync, a connection lost for good): named now, as any gap is.
    fn stopped_in_a_gap(&mut self, events: &mut impl FnMut(Event<'_>)) {
        if self.open_gap_said {
            return;
        }
        let summary = self.core.summary(self.host_step());
        if summary.open_gap.is_some() {
            if let Some(gap) = summary.gaps.last() {
                self.open_gap_said = true;
                events(Event::Gap { gap, file: None });
            }
        }
    }

    /// The latest host step heard of (at least the viewer's own and where a gap still
    /// open runs to).
    fn host_step(&self) -> u64 {
        heard_of(self.shared, &self.core, self.open_gap_to)
    }

    fn attached(&mut self, step: u64, events: &mut impl FnMut(Event<'_>)) {
        if let Some(RecordTo {
            path,
            durability,
            force,
        }) = &self.opts.record
        {
            match Recording::start(path, self.core.world(), *durability, *force) {
                Ok(r) => self.around.recording = Some(r),
                Err(e) => {
                    self.core
                        .fail(format!("cannot record to {}: {e}", path.display()));
                    return;
                }
            }
        }
        if let Some(welcome) = &self.welcome {
            events(Event::Attached {
                welcome,
                world: self.core.world(),
            });
        }
        self.shared.viewer_step.store(step, Ordering::Relaxed);
        let why = format!("the viewer attached at step {step}, after it");
        self.around
            .reached(self.opts, self.core.world(), &why, events);
    }

    fn restarted(
        &mut self,
        from: u64,
        to: u64,
        cause: Restart,
        events: &mut impl FnMut(Event<'_>),
    ) {
        let world = self.core.world();
        // A recording that cannot go on stops the session, after the gap is told: the
        // steps it passed over are named whatever became of the file.
        let (file, broke) = match self.around.recording.as_mut().map(|r| r.resync(world)) {
            Some(Err(e)) => {
                let after = match cause {
                    Restart::Resync => "a resync",
                    Restart::Reconnect(_) => "reconnecting",
                    Restart::Rejoin(_) => "a gap",
                };
                let why = format!(
                    "cannot continue the recording after {after}: {e}{}",
                    self.spool.disk_note(&e)
                );
                (None, Some(why))
            }
            Some(Ok(p)) => (Some(p), None),
            None => (None, None),
        };
        self.shared.viewer_step.store(to, Ordering::Relaxed);
        let why = match &cause {
            Restart::Resync => {
                events(Event::Resync {
                    from,
                    to,
                    file: file.as_ref(),
                });
                format!("a resync took the viewer from step {from} to step {to} over it")
            }
            Restart::Reconnect(gap) => {
                events(Event::Reconnected {
                    gap,
                    file: file.as_ref(),
                });
                format!("the connection was lost at step {from} and made again at step {to}")
            }
            Restart::Rejoin(gap) => {
                events(Event::Gap {
                    gap,
                    file: file.as_ref(),
                });
                format!("steps {from} to {to} never came")
            }
        };
        if let Some(why) = broke {
            self.core.fail(why);
            return;
        }
        self.around
            .reached(self.opts, self.core.world(), &why, events);
    }

    /// The status tick: the clock is read once per [`CLOCK_EVERY`] items or records (and
    /// whenever the spool ran dry), not per record; when the status is due, the recording
    /// is flushed and the status reported.
    fn tick(&mut self, dry: bool, events: &mut impl FnMut(Event<'_>)) {
        if !self.ticker.due(dry) {
            return;
        }
        if self.shared.interrupted.is_set() {
            self.core.interrupt();
            return;
        }
        if Instant::now() < self.ticker.next_status {
            return;
        }
        self.ticker.next_status = Instant::now() + STATUS_EVERY;
        if let Some(rec) = self.around.recording.as_mut() {
            if let Err(e) = rec.tick() {
                self.core.fail(format!(
                    "cannot write the recording: {e}{}",
                    self.spool.disk_note(&e)
                ));
                return;
            }
        }
        let backlog = self.spool.backlog();
        let peak = &mut self.around.backlog_peak;
        peak.records = peak.records.max(backlog.records);
        peak.on_disk = peak.on_disk.max(backlog.on_disk);
        peak.peak_disk_bytes = backlog.peak_disk_bytes;
        events(Event::Status(self.status(backlog.records)));
    }

    /// The current progress.
    fn status(&self, backlog: u64) -> Status {
        let secs = self.around.started.elapsed().as_secs_f64();
        let step = self.core.world().step;
        Status {
            host_step: self.shared.host_step.load(Ordering::Relaxed).max(step),
            step,
            verified: self.core.verified(),
            resyncs: self.core.resyncs(),
            gaps: self.core.gaps().len() as u64,
            backlog,
            rate: if secs > 0.0 {
                self.core.verified() as f64 / secs
            } else {
                0.0
            },
            fields: self
                .around
                .fields
                .as_ref()
                .map(|f| (f.max_density(), f.max_occupancy())),
        }
    }

    /// The outcome: the reader stopped, the core's summary, the recording finished.
    fn finish(mut self) -> Outcome {
        self.net.stop();
        let host_step = heard_of(self.shared, &self.core, self.open_gap_to);
        let summary = self.core.summary(host_step);
        let stop = self.core.take_stop().unwrap_or(Stop::Failed(Failure::Other(
            "the session stopped without a reason".into(),
        )));
        let mut out = Outcome {
            stop,
            attached_at: summary.attached_at,
            step: summary.step,
            verified: summary.verified,
            resyncs: summary.resyncs,
            open_gap: summary.open_gap.is_some(),
            gaps: summary.gaps,
            resynced: summary.resynced,
            files: Vec::new(),
            record_error: None,
            unfinished: Vec::new(),
            host_step,
            fields_missed: std::mem::take(&mut self.around.fields_missed),
            backlog_peak: self.around.backlog_peak,
        };
        let end = summary.step;
        out.fields_missed.extend(
            self.around
                .fields_due
                .iter()
                .map(|&s| (s, format!("not reached: the viewer stopped at step {end}"))),
        );
        if let Some(r) = self.around.recording.take() {
            let done = r.finish();
            out.files = done.files;
            out.unfinished = done.unfinished;
            out.record_error = done.error.map(|e| {
                format!(
                    "cannot finish the recording: {e}{}",
                    self.spool.disk_note(&e)
                )
            });
        }
        out
    }
}

/// The latest host step heard of: at least the viewer's own, and where a gap still open
/// runs to.
fn heard_of(shared: &Shared, core: &Verifier, open_gap_to: u64) -> u64 {
    shared
        .host_step
        .load(Ordering::Relaxed)
        .max(core.world().step)
        .max(open_gap_to)
}

/// How much lower than the reader the verifier runs by default (Linux `nice` steps, per
/// thread, `--verifier-nice`): when both want the CPU, reading the socket comes first, so
/// a busy verifier never makes the host resync the viewer; the records wait in the spool.
pub const VERIFIER_NICENESS: i32 = 10;

/// When to read the clock: once per [`CLOCK_EVERY`] items or records, and whenever the
/// spool ran dry.
struct Ticker {
    next_status: Instant,
    clock_in: u32,
}

impl Ticker {
    fn due(&mut self, dry: bool) -> bool {
        self.clock_in = self.clock_in.saturating_sub(1);
        if !(self.clock_in == 0 || dry) {
            return false;
        }
        self.clock_in = CLOCK_EVERY;
        true
    }
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
