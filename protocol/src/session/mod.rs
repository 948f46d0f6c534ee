//! The viewer's session, sans-IO: the world at the attach step, records verified by step
//! number, resyncs and reconnections as one restart, the gaps between them, the drift
//! evidence and the end of the stream.
//!
//! [`Verifier`] is a deterministic state machine in the shape of quinn-proto's
//! `Connection`: it holds no thread, clock, channel, file or socket. A driver feeds it what
//! arrived ([`Verifier::handle`], [`Verifier::handle_record`]), the host's answers
//! ([`Verifier::handle_drift_reply`], [`Verifier::handle_drift_unanswered`]) and the time
//! when it asks for one ([`Verifier::poll_timeout`], [`Verifier::handle_timeout`]); it
//! yields what happened ([`Verifier::poll_event`]), what to send to the host
//! ([`Verifier::poll_transmit`]) and, at the end, a [`Summary`].
//!
//! The viewer's TCP/TLS and NATS readers, the seeded simulation of whole sessions, the
//! live bench and the fuzz target all drive this one type (docs/protocol.md, "The
//! viewer's reader and verifier").
//!
//! ```text
//!   driver ── handle(Input) / handle_record(r, ops) ──▶ Verifier ── poll_event() ──▶ views,
//!          ◀── poll_transmit() (drift request) ───────          ── verified hash ──▶ recorder
//! ```
//!
//! # Layout
//! - [`drift`]: the drift evidence and its report (the one place drift is explained).
//! - [`trail`]: the world before the step being verified, without a copy per step.

pub mod drift;
pub mod tally;
pub mod trail;

pub use drift::{on_drift, sample_evidence, DriftReport, Evidence, Stages};
pub use tally::Tally;
pub use trail::Trail;

use crate::format::trace::setup_line;
use crate::wire::{DriftReply, End, EndReason, RecordRef};
use crate::{Op, World};
use std::collections::VecDeque;
use std::fmt;

/// Whether two worlds are of one world, at any step: the same setup and link (the one
/// rule a resync snapshot, a reconnection and a NATS keyframe are judged by).
pub fn same_world(a: &World, b: &World) -> bool {
    a.setup() == b.setup() && a.link() == b.link()
}

/// A time in milliseconds, from any origin the driver chooses, that never goes back.
pub type Millis = u64;

/// The verifier's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long to wait for the host's answer to a drift request, in milliseconds, counted
    /// from the first [`Verifier::handle_timeout`] after the request was polled.
    pub drift_reply_ms: u64,
    /// Verified steps between two checkpoints of the [`Trail`]: a drift costs at most this
    /// many steps to rebuild the world before it.
    pub checkpoint_every: usize,
}

/// How long to wait for the host's answer to a drift request (5 s).
pub const DRIFT_REPLY_MS: u64 = 5_000;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            drift_reply_ms: DRIFT_REPLY_MS,
            checkpoint_every: trail::CHECKPOINT_EVERY,
        }
    }
}

/// When the session has done what it was asked: `--steps N` verified, or the viewer's
/// world at `--until S`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Goal {
    /// Stop after verifying this many steps.
    pub steps: Option<u64>,
    /// Stop once the viewer's world reaches this step.
    pub until: Option<u64>,
}

impl Goal {
    fn reached(&self, verified: u64, step: u64) -> bool {
        self.steps.is_some_and(|n| verified >= n) || self.until.is_some_and(|u| step >= u)
    }
}

/// What a reader hands the verifier, in the order it arrived (records go through
/// [`Verifier::handle_record`]).
#[derive(Debug, Clone)]
pub enum Input {
    /// A connection's handshake is done: its attach snapshot. `connection` numbers the
    /// reader's connections (the drift request goes only to the one that sent the step).
    Attached { world: World, connection: u64 },
    /// A resync snapshot on the current connection: the host dropped records the viewer
    /// could not take in time and restarts it here; it must be of the attached world.
    Resync(World),
    /// The connection was lost (`last`: no reconnection follows): the viewer's world waits
    /// at its step until a reconnection's snapshot restarts it (a gap).
    Lost { why: String, last: bool },
    /// Records are missing from a stream that goes on (a NATS message the stream no longer
    /// holds, a feed the host dropped): the world waits at its step until a keyframe
    /// restarts it (a gap); if the session ends first, the gap is reported open.
    Missing { why: String },
    /// The stream restarts at a snapshot after records were lost on a transport that
    /// cannot resend them (a NATS keyframe): like a reconnection, a gap is reported.
    Rejoined { world: World, why: String },
    /// The host's end message.
    End(End),
}

impl Input {
    /// What the input is, for a message about one that came out of order.
    fn name(&self) -> String {
        match self {
            Input::Attached { world, .. } => format!("an attach snapshot at step {}", world.step),
            Input::Resync(w) => format!("a resync snapshot at step {}", w.step),
            Input::Lost { why, .. } => format!("a lost connection ({why})"),
            Input::Missing { why } => format!("missing records ({why})"),
            Input::Rejoined { world, .. } => format!("a keyframe at step {}", world.step),
            Input::End(e) => format!("the host's end message ({}: {})", e.reason.name(), e.text),
        }
    }
}

/// A stretch of steps the viewer never verified: from the step its world was at to the
/// step a snapshot took it to, or, for a gap still open when the stream ended, to the
/// latest host step heard of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The viewer's step when the records stopped.
    pub from: u64,
    /// The step it joined at again.
    pub to: u64,
    /// Why.
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
    /// A gap of the same world from `from` to `to`.
    pub fn new(from: u64, to: u64, why: impl Into<String>) -> Gap {
        Gap {
            from,
            to,
            why: why.into(),
            behind: false,
            world: None,
        }
    }

    /// The steps never seen, when that is known: `to - from`; `None` for a host that came
    /// back behind the viewer or with another world.
    pub fn steps(&self) -> Option<u64> {
        (!self.behind && self.world.is_none()).then(|| self.to.saturating_sub(self.from))
    }
}

/// How the world restarted from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// A resync on the same connection.
    Resync,
    /// A new connection after a lost one: the gap.
    Reconnect(Gap),
    /// A keyframe after missing records: the gap.
    Rejoin(Gap),
}

/// What happened, for the driver and its views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The first snapshot: the world ([`Verifier::world`]) is at `step`.
    Attached { step: u64 },
    /// The world restarted from a snapshot at `to` (it was at `from`): the driver starts a
    /// new recording file at [`Verifier::world`].
    Restarted { from: u64, to: u64, cause: Restart },
    /// The records stopped at `step` (a lost connection, an end the reader rides out): the
    /// reader connects again, and a [`Event::Restarted`] follows when it has.
    /// (Records missing from a stream that goes on, [`Input::Missing`], are no event:
    /// nothing reconnects; the gap is reported when a keyframe closes it, or at the end.)
    Lost { step: u64, why: String },
    /// The session stopped: [`Verifier::stop`] says why.
    Stopped,
}

/// A message to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmit {
    /// Ask for the host's snapshot at `step` and its stage hashes, on `connection` (the
    /// one that sent the step). When the reader is on another connection by now, answer
    /// with [`Verifier::handle_drift_unanswered`] and [`REPLACED`].
    DriftRequest { step: u64, connection: u64 },
}

/// The note of a drift whose connection was replaced before the request could go.
pub const REPLACED: &str = "the connection that sent the step has since been replaced";

/// Why the session stopped.
#[derive(Debug)]
pub enum Stop {
    /// `--steps` or `--until` was reached.
    Asked,
    /// The driver was told to stop (Ctrl-C, a view's quit key).
    Interrupted,
    /// The host ended the stream.
    HostEnded(End),
    /// The first mismatch, explained.
    Drift(Box<DriftReport>),
    /// A connection, protocol or driver failure.
    Failed(Failure),
}

/// A failure that stops the session; its text is what the user reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// A record for another step than the world's.
    #[error("protocol error: a record for step {got}, expected step {expected}")]
    OutOfStep { got: u64, expected: u64 },
    /// A record while no connection is current.
    #[error("protocol error: a record after the connection was lost")]
    RecordWhileLost,
    /// A resync snapshot of another setup or link.
    #[error("protocol error: a resync snapshot of another world")]
    ResyncOfAnotherWorld,
    /// A keyframe of another setup or link after missing records.
    #[error("protocol error: a keyframe of another world closes a gap")]
    KeyframeOfAnotherWorld,
    /// Something before the first snapshot.
    #[error("expected the host's snapshot first, found {0}")]
    BeforeAttach(String),
    /// `--until` at or below the attach step.
    #[error("--until {until} is at or below the step the viewer attached at ({step}): there is nothing to verify")]
    UntilBehind { until: u64, step: u64 },
    /// The reader's or the driver's own sentence (a refused connection, a disk error).
    #[error("{0}")]
    Other(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Other(s)
    }
}

/// A fault planted in the verifier, or in the host's connection and rings
/// (`serve::conn::Conn`, `serve::ring`), on purpose, so that the seeded simulation
/// (`scripts/simulate --plant NAME`) can show it catches each one. Never set outside that
/// simulation.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// A record for the step just verified is verified again.
    AcceptDuplicate,
    /// A record for another step is run anyway.
    SkipGapCheck,
    /// A record whose hash differs is handed to the recorder before the comparison.
    RecordBeforeVerify,
    /// A resync is counted but the old world kept.
    KeepWorldOnResync,
    /// A keyframe of another world is taken.
    AcceptForeignKeyframe,
    /// The summary leaves out a gap still open at the end.
    OkWithOpenGap,
    /// The host's end, sent in place of a resync to a viewer behind its step, is taken
    /// as if the viewer's world had reached the host's step (no open gap).
    OkAtEndBehind,
    /// The host's connection: a heartbeat it sends re-arms the viewer's silence timeout
    /// (a viewer that went silent is never judged so while the host sends heartbeats).
    HeartbeatRearmsSilence,
    /// The host's ring: once the stream has ended, the end is handed to a connection in
    /// place of the records it is still owed.
    EndBeforeOwed,
    /// The host's connection: its position is not advanced past the records it took (it
    /// takes them again).
    TakeNoAdvance,
    /// The host's drift ring: the reply for a step holds the world of the step before.
    DriftFromWrongStep,
}

#[cfg(feature = "plants")]
impl Plant {
    /// Every plant, with its name on the command line.
    pub const ALL: [(Plant, &'static str); 11] = [
        (Plant::AcceptDuplicate, "accept-duplicate"),
        (Plant::SkipGapCheck, "skip-gap-check"),
        (Plant::RecordBeforeVerify, "record-before-verify"),
        (Plant::KeepWorldOnResync, "keep-world-on-resync"),
        (Plant::AcceptForeignKeyframe, "accept-foreign-keyframe"),
        (Plant::OkWithOpenGap, "ok-with-open-gap"),
        (Plant::OkAtEndBehind, "ok-at-end-behind"),
        (Plant::HeartbeatRearmsSilence, "heartbeat-rearms-silence"),
        (Plant::EndBeforeOwed, "end-before-owed"),
        (Plant::TakeNoAdvance, "take-no-advance"),
        (Plant::DriftFromWrongStep, "drift-from-wrong-step"),
    ];
}

/// Where the session is.
enum State {
    /// Before the first snapshot.
    Connecting,
    /// Verifying records from the world's snapshot on.
    Verifying,
    /// The records stopped (why); a snapshot restarts them.
    Lost(String),
    /// A step drifted: waiting for the host's answer to the drift request.
    Drifting {
        evidence: Box<Evidence>,
        /// When the wait ends, once the driver has said what time it is.
        deadline: Option<Millis>,
    },
    /// Done: see `Verifier::stop`.
    Stopped,
}

/// What the session did, at the end.
#[derive(Debug)]
pub struct Summary {
    /// The step the viewer attached at (the first snapshot's), if it got that far.
    pub attached_at: Option<u64>,
    /// The step of the viewer's world at the end.
    pub step: u64,
    /// Steps whose hash was compared and equal.
    pub verified: u64,
    /// Resyncs.
    pub resyncs: u64,
    /// The steps each resync went over, in order.
    pub resynced: Vec<Gap>,
    /// Every stretch never verified, in order; one still open at the end last, up to the
    /// latest host step heard of.
    pub gaps: Vec<Gap>,
    /// Why the records had stopped when the session ended inside a gap (the last of
    /// `gaps`).
    pub open_gap: Option<String>,
}

impl Summary {
    /// What the verdict counts: the steps from the attach to the end, verified or not.
    pub fn tally(&self) -> Tally {
        Tally::new(
            self.attached_at,
            (self.step, self.verified),
            &self.gaps,
            &self.resynced,
            self.open_gap.is_some(),
        )
    }
}

/// The viewer's verifier: see the module's documentation.
pub struct Verifier {
    limits: Limits,
    goal: Goal,
    /// Whether the reader connects again after a lost connection or an end other than
    /// `finished` (`--reconnect`).
    reconnects: bool,
    state: State,
    world: World,
    trail: Trail,
    attached_at: Option<u64>,
    verified: u64,
    resyncs: u64,
    gaps: Vec<Gap>,
    /// The connection the current world's records come from.
    connection: u64,
    /// A step has been verified since the current world's snapshot.
    stepped: bool,
    stop: Option<Stop>,
    /// Why the records had stopped when the session ended inside a gap.
    open_gap: Option<String>,
    /// The host step of the end message, once one came: the step the session had to reach.
    end_step: u64,
    /// The records stopped because they are missing from the stream (not a lost
    /// connection): a gap that stays open if the session ends.
    missing: bool,
    /// The steps each resync went over.
    resynced: Vec<Gap>,
    plant: crate::plant::Planted<Plant>,
    events: VecDeque<Event>,
    transmits: VecDeque<Transmit>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("step", &self.world.step)
            .field("verified", &self.verified)
            .field("resyncs", &self.resyncs)
            .field("gaps", &self.gaps)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier waiting for its first snapshot. `reconnects`: the reader connects again
    /// after a lost connection or an end other than `finished`.
    pub fn new(limits: Limits, goal: Goal, reconnects: bool) -> Verifier {
        let world = World::new(
            crate::Setup {
                dims: crate::Dims::Two,
                bodies: 0,
                seed: 0,
            },
            None,
        );
        Verifier {
            limits,
            goal,
            reconnects,
            state: State::Connecting,
            trail: Trail::with_checkpoints(&world, limits.checkpoint_every),
            world,
            attached_at: None,
            verified: 0,
            resyncs: 0,
            gaps: Vec::new(),
            connection: 0,
            stepped: false,
            stop: None,
            open_gap: None,
            end_step: 0,
            missing: false,
            resynced: Vec::new(),
            plant: Default::default(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
        }
    }

    /// The viewer's world: at its last verified step, or at the latest snapshot.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Steps verified so far.
    pub fn verified(&self) -> u64 {
        self.verified
    }

    /// Resyncs so far.
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }

    /// The gaps so far (closed ones).
    pub fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// The step the viewer attached at, once it has.
    pub fn attached_at(&self) -> Option<u64> {
        self.attached_at
    }

    /// Whether a step has been verified since the world's latest snapshot (a view labels
    /// the world "verified" only then).
    pub fn stepped(&self) -> bool {
        self.stepped
    }

    /// Whether the session has stopped ([`Verifier::stop`] says why).
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, State::Stopped)
    }

    /// Why the session stopped, once it has.
    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }

    /// Plants a fault (the simulation's `--plant`; see [`Plant`]).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: Plant) {
        self.plant.set(plant);
    }

    /// Whether the records have stopped and a snapshot must restart them.
    pub fn is_waiting(&self) -> bool {
        matches!(self.state, State::Lost(_))
    }

    /// Takes why the session stopped, once it has (for the driver's outcome).
    pub fn take_stop(&mut self) -> Option<Stop> {
        self.stop.take()
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next message to send to the host, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// When [`Verifier::handle_timeout`] must be called next: `Some(0)` means at once (the
    /// verifier waits for a drift reply and needs the time to start its deadline).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        match &self.state {
            State::Drifting { deadline, .. } => Some(deadline.unwrap_or(0)),
            _ => None,
        }
    }

    /// The time is `now`: starts the drift reply's deadline, or ends the wait when it has
    /// passed.
    pub fn handle_timeout(&mut self, now: Millis) {
        let wait = self.limits.drift_reply_ms;
        if let State::Drifting { deadline, .. } = &mut self.state {
            match *deadline {
                None => *deadline = Some(now.saturating_add(wait)),
                Some(d) if now >= d => {
                    let why = format!(
                        "the host did not answer the drift request within {} s",
                        wait / 1000
                    );
                    self.explain_drift(None, Some(why));
                }
                Some(_) => {}
            }
        }
    }

    /// The driver stops the session (Ctrl-C): a drift being explained is explained with
    /// what is known.
    pub fn interrupt(&mut self) {
        if matches!(self.state, State::Drifting { .. }) {
            self.explain_drift(
                None,
                Some("the viewer was stopped before the host answered".into()),
            );
        } else if !self.is_stopped() {
            self.finish(Stop::Interrupted);
        }
    }

    /// The driver itself failed (the spool, the recording): the session stops with `why`.
    pub fn fail(&mut self, why: impl Into<String>) {
        if !self.is_stopped() {
            self.finish(Stop::Failed(Failure::Other(why.into())));
        }
    }

    /// Takes one input in the order the reader received it.
    pub fn handle(&mut self, input: Input) {
        match self.state {
            State::Stopped | State::Drifting { .. } => return,
            State::Connecting => {
                match input {
                    Input::Attached { world, connection } => self.attach(world, connection),
                    Input::Lost { why, .. } => self.finish(Stop::Failed(Failure::Other(why))),
                    other => self.finish(Stop::Failed(Failure::BeforeAttach(other.name()))),
                }
                return;
            }
            State::Verifying | State::Lost(_) => {}
        }
        let lost = match &self.state {
            State::Lost(why) => Some(why.clone()),
            _ => None,
        };
        match input {
            Input::Attached { world, connection } => {
                self.connection = connection;
                let why = lost.unwrap_or_else(|| "the connection was made again".into());
                self.rejoin(world, why, true);
            }
            Input::Rejoined { world, why } => {
                if !self.same_world(&world) && !self.plant.is(Plant::AcceptForeignKeyframe) {
                    self.finish(Stop::Failed(Failure::KeyframeOfAnotherWorld));
                    return;
                }
                let why = match lost {
                    Some(lost) if why.is_empty() => lost,
                    Some(lost) => format!("{lost}; {why}"),
                    None => why,
                };
                self.rejoin(world, why, false);
            }
            Input::Resync(world) => {
                if !self.same_world(&world) {
                    self.finish(Stop::Failed(Failure::ResyncOfAnotherWorld));
                    return;
                }
                if let Some(why) = lost {
                    // A snapshot after the records stopped restarts them: the gap.
                    self.rejoin(world, why, false);
                    return;
                }
                self.resyncs += 1;
                let from = self.world.step;
                if self.plant.is(Plant::KeepWorldOnResync) {
                    return;
                }
                self.restart(world);
                self.resynced.push(Gap::new(
                    from,
                    self.world.step,
                    "a resync: the viewer fell behind and the host skipped it ahead",
                ));
                self.events.push_back(Event::Restarted {
                    from,
                    to: self.world.step,
                    cause: Restart::Resync,
                });
                self.check_goal();
            }
            Input::End(e) => {
                self.end_step = self.end_step.max(e.host_step);
                if self.reconnects && e.reason != EndReason::Finished {
                    let why = format!(
                        "the host ended the stream ({}: {})",
                        e.reason.name(),
                        e.text
                    );
                    self.lose(why);
                } else {
                    if lost.is_none()
                        && e.host_step > self.world.step
                        && !self.plant.is(Plant::OkAtEndBehind)
                    {
                        // The end in place of a resync: the records stopped at the
                        // viewer's step, short of the host's (docs/protocol.md, "End").
                        let why = if e.reason.is_clean() {
                            "the viewer was more than the host's queue behind"
                        } else {
                            "the host closed the connection"
                        };
                        self.open_gap = Some(format!(
                            "the host ended the stream at step {} ({}: {}) without sending them: {why}",
                            e.host_step,
                            e.reason.name(),
                            e.text
                        ));
                    }
                    self.finish(Stop::HostEnded(e));
                }
            }
            Input::Lost { why, last: true } => {
                // The records stopped at the viewer's step: the steps to the latest the
                // host was heard at were never verified.
                if lost.is_none() {
                    self.open_gap = Some(why.clone());
                }
                self.finish(Stop::Failed(Failure::Other(why)));
            }
            Input::Lost { why, last: false } => self.lose(why),
            Input::Missing { why } => {
                // The world waits at its step for a keyframe; nothing reconnects, so no
                // `Lost` event: the gap is reported when it closes, or at the end.
                if lost.is_none() {
                    self.state = State::Lost(why);
                }
                self.missing = true;
            }
        }
    }

    /// Verifies one record: steps the world through `ops` (the record's input, decoded and
    /// checked by the reader's codec) and compares the hash for the record's step number.
    ///
    /// # Returns
    /// `Some(hash)` when the step verified: the driver records `r.input` with it. `None`
    /// when it did not: a drift (answer [`Verifier::poll_transmit`]'s request), a record
    /// out of order, or the session had stopped; [`Verifier::is_stopped`] tells.
    pub fn handle_record(&mut self, r: RecordRef<'_>, ops: &[Op]) -> Option<u64> {
        match self.state {
            State::Verifying => {}
            State::Lost(_) => {
                self.finish(Stop::Failed(Failure::RecordWhileLost));
                return None;
            }
            State::Connecting => {
                self.finish(Stop::Failed(Failure::BeforeAttach(format!(
                    "a record for step {}",
                    r.step
                ))));
                return None;
            }
            State::Drifting { .. } | State::Stopped => return None,
        }
        if self.plant.is(Plant::AcceptDuplicate) && r.step + 1 == self.world.step {
            self.verified += 1;
            return Some(r.hash);
        }
        if r.step != self.world.step && !self.plant.is(Plant::SkipGapCheck) {
            self.finish(Stop::Failed(Failure::OutOfStep {
                got: r.step,
                expected: self.world.step,
            }));
            return None;
        }
        self.world.step(ops);
        let hash = self.world.hash();
        if hash != r.hash {
            let evidence = Evidence {
                step: self.world.step,
                host_hash: r.hash,
                viewer_hash: hash,
                viewer_before: self.trail.world(),
                viewer_after: self.world.clone(),
                input: r.input.to_vec(),
                reply: None,
                no_reply: None,
            };
            self.state = State::Drifting {
                evidence: Box::new(evidence),
                deadline: None,
            };
            self.transmits.push_back(Transmit::DriftRequest {
                step: self.world.step,
                connection: self.connection,
            });
            if self.plant.is(Plant::RecordBeforeVerify) {
                return Some(r.hash);
            }
            return None;
        }
        self.trail.verified(r.input, &self.world);
        self.verified += 1;
        self.stepped = true;
        self.check_goal();
        Some(hash)
    }

    /// The host answered the drift request. A reply for another step is ignored.
    pub fn handle_drift_reply(&mut self, reply: DriftReply) {
        if let State::Drifting { evidence, .. } = &self.state {
            if reply.step == evidence.step {
                self.explain_drift(Some(reply), None);
            }
        }
    }

    /// No answer can come: `why` (the connection was replaced, the host has gone).
    pub fn handle_drift_unanswered(&mut self, why: impl Into<String>) {
        if matches!(self.state, State::Drifting { .. }) {
            self.explain_drift(None, Some(why.into()));
        }
    }

    /// What the session did. `host_step`: the latest host step the driver heard of, where
    /// a gap still open at the end closes (at the end message's host step at least).
    /// A connection lost for good leaves a gap open only when the host was heard of past
    /// the viewer's step.
    pub fn summary(&self, host_step: u64) -> Summary {
        let mut gaps = self.gaps.clone();
        let to = host_step.max(self.end_step).max(self.world.step);
        let lost_for_good = matches!(self.stop, Some(Stop::Failed(_)));
        let open_gap = match &self.state {
            State::Lost(why) if self.missing => Some(why.clone()),
            _ => self.open_gap.clone(),
        }
        .filter(|_| !self.plant.is(Plant::OkWithOpenGap))
        .filter(|_| !lost_for_good || to > self.world.step);
        if let Some(why) = &open_gap {
            gaps.push(Gap::new(self.world.step, to, why.clone()));
        }
        Summary {
            attached_at: self.attached_at,
            step: self.world.step,
            verified: self.verified,
            resyncs: self.resyncs,
            resynced: self.resynced.clone(),
            gaps,
            open_gap,
        }
    }

    fn attach(&mut self, world: World, connection: u64) {
        let step = world.step;
        self.attached_at = Some(step);
        self.connection = connection;
        self.restart(world);
        self.state = State::Verifying;
        if let Some(until) = self.goal.until.filter(|&u| u <= step) {
            self.finish(Stop::Failed(Failure::UntilBehind { until, step }));
            return;
        }
        self.events.push_back(Event::Attached { step });
        if self.goal.steps == Some(0) {
            self.finish(Stop::Asked);
        }
    }

    /// Whether `world` is of the attached world (its setup and link).
    fn same_world(&self, world: &World) -> bool {
        same_world(&self.world, world)
    }

    /// The world starts again at a snapshot: the trail, the verified flag.
    fn restart(&mut self, world: World) {
        self.world = world;
        self.stepped = false;
        self.trail.restart(&self.world);
    }

    /// The records stopped at the viewer's step.
    fn lose(&mut self, why: String) {
        self.missing = false;
        self.events.push_back(Event::Lost {
            step: self.world.step,
            why: why.clone(),
        });
        self.state = State::Lost(why);
    }

    /// A snapshot after a lost connection (`reconnect`) or missing records: the gap, then
    /// the new world. A reconnection may join a restarted host behind the viewer, or one
    /// with another world (docs/protocol.md, "Reconnecting"); the gap says so.
    fn rejoin(&mut self, world: World, why: String, reconnect: bool) {
        let mut gap = Gap::new(self.world.step, world.step, why);
        if reconnect {
            gap.behind = world.step < self.world.step;
            gap.world = (!self.same_world(&world)).then(|| {
                (
                    setup_line(&world.setup(), world.link()),
                    setup_line(&self.world.setup(), self.world.link()),
                )
            });
        }
        self.restart(world);
        self.state = State::Verifying;
        self.missing = false;
        self.gaps.push(gap.clone());
        self.events.push_back(Event::Restarted {
            from: gap.from,
            to: gap.to,
            cause: if reconnect {
                Restart::Reconnect(gap)
            } else {
                Restart::Rejoin(gap)
            },
        });
        self.check_goal();
    }

    fn check_goal(&mut self) {
        if matches!(self.state, State::Verifying)
            && self.goal.reached(self.verified, self.world.step)
        {
            self.finish(Stop::Asked);
        }
    }

    fn explain_drift(&mut self, reply: Option<DriftReply>, no_reply: Option<String>) {
        if let State::Drifting { evidence, .. } = std::mem::replace(&mut self.state, State::Stopped)
        {
            let mut evidence = *evidence;
            evidence.reply = reply;
            evidence.no_reply = no_reply;
            let report = on_drift(&evidence);
            self.state = State::Drifting {
                evidence: Box::new(evidence),
                deadline: None,
            };
            self.finish(Stop::Drift(Box::new(report)));
        }
    }

    /// The session ends; ended while the records had stopped, the gap stays open (to the
    /// latest host step heard of: [`Verifier::summary`]).
    fn finish(&mut self, stop: Stop) {
        if let State::Lost(why) = &self.state {
            // Records missing from a stream that ended, a connection the host ended, or
            // one lost for good while waiting for a reconnection: the gap stays open.
            if self.missing || matches!(stop, Stop::HostEnded(_) | Stop::Failed(_)) {
                self.open_gap = Some(why.clone());
            }
        }
        self.state = State::Stopped;
        self.stop = Some(stop);
        self.transmits.clear();
        self.events.push_back(Event::Stopped);
    }
}

#[cfg(test)]
mod tests;
