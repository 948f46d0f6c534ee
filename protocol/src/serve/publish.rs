//! The host's NATS publisher, sans-IO (docs/fan-out.md, "Messages", "Batching",
//! "Keyframes", "Failed publishes are not repeated", "Order"): the feed the stepping loop
//! hands each step to without waiting, and its bound; the keyframe cadence and the
//! keyframes that close a gap (after a step dropped at a full feed, a failed publish, a
//! lost connection); the batching of consecutive records into one message; the message
//! ids; the acknowledgements awaited, each with its timeout, and the accounting of steps
//! published, dropped and failed; the end.
//!
//! [`Publisher`] holds no client, clock, channel or thread. Its driver moves steps, messages,
//! acknowledgements and time between the host (or a simulation) and the machine:
//!
//! ```text
//!   stepping loop ── handle_before_step(world) / handle_record(step, frame) / handle_end ──▶ Publisher
//!   client        ◀── poll_transmit(now): a Publish (subject, Nats-Msg-Id, headers, payload, token) ──
//!                 ── handle_acked(token) / handle_ack_failed(token, why) / handle_disconnected ──▶
//!   clock         ── handle_timeout(now) at poll_timeout() (an acknowledgement's 5 s) ──────────────▶
//!                                       poll_event() ── Failed ──▶ log;  counts() ──▶ status line
//! ```
//!
//! # How a driver uses it
//! - For each step the host takes from world `W` (at step `K`): [`Publisher::handle_before_step`]
//!   with `W` before stepping it (a keyframe of `W` goes into the feed when one is due),
//!   then [`Publisher::handle_record`] with step `K`'s record frame. Neither waits: a full
//!   feed drops the record (counted) and asks for the keyframe that closes the gap. When the
//!   stepping stops, [`Publisher::handle_end`] (false while the feed is full: the driver may
//!   try again a little later) and then [`Publisher::handle_feed_closed`]: nothing more
//!   comes.
//! - While the client can take messages: [`Publisher::poll_transmit`] with the time, and
//!   publish each [`Publish`] with its subject, headers and `Nats-Msg-Id`; tell the machine
//!   what became of it by its token: [`Publisher::handle_acked`], or
//!   [`Publisher::handle_ack_failed`] (the client could not send it, or the stream
//!   answered with an error). A token the machine no longer awaits (timed out, answered
//!   already, never sent) is ignored. `poll_transmit` gives nothing while
//!   [`Config::in_flight`] acknowledgements are awaited.
//! - At [`Publisher::poll_timeout`], [`Publisher::handle_timeout`]: a message not
//!   acknowledged within [`ACK_TIMEOUT_MS`] of its publish has failed.
//! - On [`Event::MoveServer`] (the server the client is connected to takes publishes
//!   and stores none: publishes failing, none acknowledged, for [`MOVE_AFTER_MS`] while
//!   the connection is up, as from a server cut off from its cluster): connect to
//!   another server, the one it was on tried last.
//!   [`Publisher::handle_disconnected`] and [`Publisher::handle_connected`] as the
//!   client's connection goes and comes.
//! - When the client's connection to the server drops (it fails over to another server of
//!   the list, or waits for the one it had): [`Publisher::handle_disconnected`]. What was
//!   in flight may not be stored, so the next step gets a keyframe. Nothing is published
//!   again when it comes back: a failed publish is never repeated (sent later it would be
//!   stored after the messages that followed it, out of step order), but for the end.
//! - The end, last, is published again under its id [`END_AGAIN_MS`] after an attempt
//!   failed, until it is acknowledged, while less than [`END_WAIT_MS`] have passed since
//!   its first publish; [`Publisher::poll_timeout`] names when.
//!   [`Publisher::is_repeating_end`] while it is.
//! - [`Publisher::poll_event`] for the log; [`Publisher::counts`] for the status line;
//!   [`Publisher::is_done`] once the feed is closed, everything in it published, every
//!   acknowledgement answered or timed out, and the end acknowledged or given up.
//!
//! The host shares one machine between its stepping thread and its publisher task behind
//! a lock held for one call at a time.

use super::conn::Millis;
use crate::wire::nats::{
    MessageIds, Session, COUNT_HEADER, MAX_BATCH_BYTES, MAX_BATCH_RECORDS, RATE_HEADER, STEP_HEADER,
};
use crate::wire::{End, HostCodec, SnapshotKind, ToViewer};
use crate::World;
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, VecDeque};

/// Steps (and keyframes, and the end) the feed holds while NATS is slow or away.
pub const FEED_CAPACITY: usize = 65_536;
/// Publish acknowledgements awaited at once at most.
pub const IN_FLIGHT: usize = 1024;
/// A publish not acknowledged within this long has failed (5 s, the client's own wait).
pub const ACK_TIMEOUT_MS: u64 = 5_000;
/// The end is published again this long after an attempt failed.
pub const END_AGAIN_MS: u64 = 1_000;
/// The end is published again until it is acknowledged, while less than this has passed
/// since its first publish (the last attempt still has its [`ACK_TIMEOUT_MS`]).
pub const END_WAIT_MS: u64 = 30_000;
/// Publishes unacknowledged for this long, some of them failed, while the connection is
/// up: the server the client is on takes them and stores none (cut off from its cluster,
/// say, its clients still connected), and the driver moves to another
/// ([`Event::MoveServer`]). Measured from the first publish after the latest
/// acknowledgement (or connection); twice [`ACK_TIMEOUT_MS`], so that at least one
/// publish has timed out, and longer than a stream's leader election.
pub const MOVE_AFTER_MS: u64 = 10_000;

/// What the publisher is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The session, whose subjects the messages go to.
    pub session: Session,
    /// The run's token in the message ids ([`MessageIds`]): `A-Z a-z 0-9`, picked by the
    /// host when it starts.
    pub run: String,
    /// A keyframe before every step that is a multiple of this (0 counts as 1).
    pub keyframe_every: u64,
    /// The host's rate (0: as fast as it can), for the keyframes' `Ostm-Rate`.
    pub rate: u32,
    /// Items the feed holds at most ([`FEED_CAPACITY`]).
    pub feed: usize,
    /// Acknowledgements awaited at once at most ([`IN_FLIGHT`]).
    pub in_flight: usize,
}

impl Config {
    /// The host's configuration: the bounds above, for `session` and `run`.
    pub fn new(session: Session, run: String, keyframe_every: u64, rate: u32) -> Config {
        Config {
            session,
            run,
            keyframe_every,
            rate,
            feed: FEED_CAPACITY,
            in_flight: IN_FLIGHT,
        }
    }
}

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ostm.NAME.rec`: record frames of consecutive steps.
    Records,
    /// `ostm.NAME.key`: a snapshot of the host's world.
    Keyframe,
    /// `ostm.NAME.end`: the end frame.
    End,
}

/// One message to publish.
#[derive(Debug, Clone)]
pub struct Publish {
    /// Names the message in [`Publisher::handle_acked`] and [`Publisher::handle_ack_failed`]:
    /// counts from 1, one per message.
    pub token: u64,
    pub kind: Kind,
    pub subject: String,
    /// The `Nats-Msg-Id`.
    pub id: String,
    /// The other headers, in order: `Ostm-Count` or `Ostm-Rate`, then `Ostm-Step`.
    pub headers: Vec<(&'static str, String)>,
    /// Whole frames, back to back.
    pub payload: Bytes,
    /// The `Ostm-Step`: the first record's step, the keyframe's, the end's host step.
    pub step: u64,
    /// The records it holds (0 for a keyframe or the end).
    pub steps: u64,
}

/// What happened, for the driver's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A message was not stored, or may not have been (`why`): its `steps` records
    /// (from `step`) count as failed, and the next step gets a keyframe.
    Failed { step: u64, steps: u64, why: String },
    /// A keyframe or the end could not be encoded (`why`): it is not published.
    Unencodable { step: u64, why: String },
    /// The end was acknowledged at its `attempts`-th publish (said only when an attempt
    /// before it failed).
    EndAcknowledged { attempts: u32 },
    /// The end was not acknowledged within [`END_WAIT_MS`] of its first publish and
    /// [`ACK_TIMEOUT_MS`] of its last (`attempts` in all, the last failing with `why`):
    /// it is not published again.
    EndLost { attempts: u32, why: String },
    /// No publish has been acknowledged for `unacknowledged_ms` (at least
    /// [`MOVE_AFTER_MS`]) and some failed, while the connection was up: the server the
    /// client is on stores nothing. The driver connects to another server, the one it is
    /// on tried last (a client left to pick may take the same one again); the lost
    /// connection and the new one are [`Publisher::handle_disconnected`] and
    /// [`Publisher::handle_connected`] as ever. Asked again after as long if the next
    /// server stores nothing either.
    MoveServer { unacknowledged_ms: u64 },
}

/// The publisher's counters (docs/fan-out.md, "Failed publishes are not repeated"): each
/// step handed over is in at most one of `published`, `dropped` and `failed`, so their
/// sum never exceeds `steps` (it is less by the steps in the feed or in flight).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Records handed to the feed ([`Publisher::handle_record`]) before the end.
    pub steps: u64,
    /// Steps in messages the stream acknowledged.
    pub published: u64,
    /// Steps the feed had no room for: never handed to the client.
    pub dropped: u64,
    /// Steps in messages that failed or were not acknowledged in time, each once. A
    /// keyframe or the end that fails holds no step and adds nothing.
    pub failed: u64,
}

/// A fault planted in the publisher on purpose, for the seeded simulation's `--plant`:
/// only a build with the `plants` feature (the simulation's) can set one, and only there
/// is it looked at.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// A keyframe is published under the id of the records message that starts at its
    /// step, so the stream's duplicate window keeps only the first of the two.
    KeyframeUnderRecordId,
    /// A step dropped at a full feed does not ask for the keyframe that closes the gap.
    DroppedKeyframeNeverAsked,
    /// A failed acknowledgement counts its steps as failed but asks for no keyframe.
    AckFailureNoKeyframe,
    /// The end is published once: an attempt that fails is not repeated.
    EndPublishedOnce,
}

impl Plant {
    /// Every plant, with its name on the command line.
    pub const ALL: [(Plant, &'static str); 4] = [
        (Plant::KeyframeUnderRecordId, "keyframe-under-record-id"),
        (
            Plant::DroppedKeyframeNeverAsked,
            "dropped-keyframe-never-asked",
        ),
        (Plant::AckFailureNoKeyframe, "ack-failure-no-keyframe"),
        (Plant::EndPublishedOnce, "end-published-once"),
    ];
}

/// One thing in the feed.
#[derive(Debug)]
enum Item {
    Record { step: u64, frame: Bytes },
    Key(Box<World>),
    End(End),
}

/// A message awaiting its acknowledgement.
#[derive(Debug)]
struct Flight {
    kind: Kind,
    step: u64,
    steps: u64,
    /// When it has failed, unacknowledged.
    deadline: Millis,
}

/// The end, from its first publish until it is acknowledged or given up.
#[derive(Debug)]
struct EndAgain {
    end: End,
    /// When it was first published.
    first: Millis,
    /// When it is published again (after an attempt failed); `None` while one is awaited.
    again: Option<Millis>,
    attempts: u32,
}

/// The publisher: see the module's documentation.
#[derive(Debug)]
pub struct Publisher {
    cfg: Config,
    ids: MessageIds,
    feed: VecDeque<Item>,
    /// The keyframe a dropped step needs did not fit yet: records are dropped until one
    /// does (a record is no use to a viewer without it).
    need_key: bool,
    /// Messages may have been lost (a failed publish, a lost connection): the next step
    /// gets a keyframe.
    want_key: bool,
    /// The end is in the feed (or published).
    ended: bool,
    /// The end published and not acknowledged yet: it is published again until it is.
    end_again: Option<EndAgain>,
    /// Nothing more comes from the stepping loop.
    closed: bool,
    /// Acknowledgements awaited, by token (tokens and deadlines grow together).
    flights: BTreeMap<u64, Flight>,
    next_token: u64,
    /// The latest time the driver gave.
    clock: Millis,
    /// Since the first publish after the latest acknowledgement (or connection): none
    /// acknowledged since.
    unacked_since: Option<Millis>,
    /// A publish has failed since `unacked_since`.
    failing: bool,
    /// The client is connected (as far as the driver said).
    connected: bool,
    counts: Counts,
    events: VecDeque<Event>,
    plant: crate::plant::Planted<Plant>,
}

impl Publisher {
    /// A publisher whose first step gets a keyframe.
    pub fn new(cfg: Config) -> Publisher {
        Publisher {
            ids: MessageIds::new(cfg.run.clone()),
            cfg,
            feed: VecDeque::new(),
            need_key: true,
            want_key: false,
            ended: false,
            end_again: None,
            closed: false,
            flights: BTreeMap::new(),
            next_token: 1,
            clock: 0,
            unacked_since: None,
            failing: false,
            connected: true,
            counts: Counts::default(),
            events: VecDeque::new(),
            plant: Default::default(),
        }
    }

    /// Plants a fault (the simulation's `--plant`).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: Plant) {
        self.plant.set(plant);
    }

    /// The run's message ids.
    pub fn ids(&self) -> &MessageIds {
        &self.ids
    }

    /// The counters.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Items in the feed, not yet handed to the client.
    pub fn queued(&self) -> usize {
        self.feed.len()
    }

    /// Messages awaiting their acknowledgement.
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The feed is closed, everything in it handed to the client, every
    /// acknowledgement answered or timed out and the end acknowledged or given up: the
    /// driver may stop.
    pub fn is_done(&self) -> bool {
        self.closed && self.feed.is_empty() && self.flights.is_empty() && self.end_again.is_none()
    }

    /// The end has been published and is neither acknowledged nor given up yet (it is
    /// published again after a failed attempt, for at most [`END_WAIT_MS`] from its
    /// first publish): the host waits for it at its stop.
    pub fn is_repeating_end(&self) -> bool {
        self.end_again.is_some()
    }

    fn room(&self) -> bool {
        self.feed.len() < self.cfg.feed
    }

    /// Before the step from `world`: a keyframe of it goes into the feed when one is due
    /// (every `keyframe_every` steps, at the first step, after a dropped step, after a
    /// failed publish or a lost connection). Never waits: a keyframe the feed has no room
    /// for is asked for again at the next step, and the records meanwhile are dropped.
    pub fn handle_before_step(&mut self, world: &World) {
        if self.ended || self.closed {
            return;
        }
        let every = self.cfg.keyframe_every.max(1);
        let lost = std::mem::take(&mut self.want_key);
        if self.need_key || lost || world.step.is_multiple_of(every) {
            self.need_key = !self.room();
            if !self.need_key {
                self.feed.push_back(Item::Key(Box::new(world.clone())));
            }
        }
    }

    /// The record frame of step `step`, after [`Publisher::handle_before_step`]. A full
    /// feed drops it (counted) and asks for a keyframe; so is every record after it until
    /// a keyframe fits.
    pub fn handle_record(&mut self, step: u64, frame: Bytes) {
        if self.ended || self.closed {
            return;
        }
        self.counts.steps += 1;
        if self.need_key {
            // The keyframe this record needs did not fit: the record is no use without it.
            self.counts.dropped += 1;
            return;
        }
        if self.room() {
            self.feed.push_back(Item::Record { step, frame });
        } else {
            self.counts.dropped += 1;
            self.need_key = !self.plant.is(Plant::DroppedKeyframeNeverAsked);
        }
    }

    /// The end, once the host stops stepping: false when the feed has no room (the driver
    /// may try again; an end never handed over holds no step and is counted nowhere).
    /// Steps handed over after the end are ignored.
    pub fn handle_end(&mut self, end: End) -> bool {
        if self.ended || self.closed {
            return self.ended;
        }
        if !self.room() {
            return false;
        }
        self.feed.push_back(Item::End(end));
        self.ended = true;
        true
    }

    /// Nothing more comes from the stepping loop (after the end, or after giving up on
    /// handing it over).
    pub fn handle_feed_closed(&mut self) {
        self.closed = true;
    }

    /// The next message to publish, at `now`; none while the feed is empty or
    /// [`Config::in_flight`] acknowledgements are awaited. Records waiting one after the
    /// other go in one message, up to [`MAX_BATCH_RECORDS`] records and
    /// [`MAX_BATCH_BYTES`] bytes of frames (a larger single record travels alone). The
    /// message awaits its acknowledgement until `now +` [`ACK_TIMEOUT_MS`].
    pub fn poll_transmit(&mut self, now: Millis) -> Option<Publish> {
        let now = self.now(now);
        self.check_move(now);
        if self.flights.len() < self.cfg.in_flight {
            if let Some(e) = self
                .end_again
                .as_mut()
                .filter(|e| e.again.is_some_and(|t| t <= now))
            {
                // The end again, under the same id: the stream stores it once.
                e.again = None;
                e.attempts += 1;
                let (step, end) = (e.end.host_step, e.end.clone());
                if let Ok(f) = HostCodec::encode_frame(&ToViewer::End(end)) {
                    return Some(self.send(Kind::End, step, 0, f.0, now));
                }
            }
        }
        while self.flights.len() < self.cfg.in_flight {
            let item = self.feed.pop_front()?;
            let (kind, step, steps, payload) = match item {
                Item::Record { step, frame } => {
                    let (steps, payload) = self.batch(step, frame);
                    (Kind::Records, step, steps, payload)
                }
                Item::Key(world) => {
                    let step = world.step;
                    match HostCodec::encode_frame(&ToViewer::Snapshot {
                        kind: SnapshotKind::Attach,
                        world: *world,
                    }) {
                        Ok(f) => (Kind::Keyframe, step, 0, f.0),
                        Err(e) => {
                            self.events.push_back(Event::Unencodable {
                                step,
                                why: format!("cannot encode the keyframe of step {step}: {e}"),
                            });
                            continue;
                        }
                    }
                }
                Item::End(end) => {
                    let step = end.host_step;
                    match HostCodec::encode_frame(&ToViewer::End(end.clone())) {
                        Ok(f) => {
                            self.end_again = Some(EndAgain {
                                end,
                                first: now,
                                again: None,
                                attempts: 1,
                            });
                            (Kind::End, step, 0, f.0)
                        }
                        Err(e) => {
                            self.events.push_back(Event::Unencodable {
                                step,
                                why: format!("cannot encode the end: {e}"),
                            });
                            continue;
                        }
                    }
                }
            };
            return Some(self.send(kind, step, steps, payload, now));
        }
        None
    }

    /// The records that follow the one of `step` in the feed, while they are of the next
    /// steps and fit: how many, and their frames back to back.
    fn batch(&mut self, step: u64, first: Bytes) -> (u64, Bytes) {
        let mut count = 1u64;
        let mut len = first.len();
        for item in self.feed.iter() {
            match item {
                Item::Record { step: s, frame }
                    if count < MAX_BATCH_RECORDS
                        && *s == step.wrapping_add(count)
                        && len + frame.len() <= MAX_BATCH_BYTES =>
                {
                    count += 1;
                    len += frame.len();
                }
                _ => break,
            }
        }
        if count == 1 {
            return (1, first);
        }
        let mut out = BytesMut::with_capacity(len);
        out.extend_from_slice(&first);
        for item in self.feed.drain(..(count - 1) as usize) {
            if let Item::Record { frame, .. } = item {
                out.extend_from_slice(&frame);
            }
        }
        (count, out.freeze())
    }

    /// The message of `kind` at `step`, awaiting its acknowledgement from `now`.
    fn send(&mut self, kind: Kind, step: u64, steps: u64, payload: Bytes, now: Millis) -> Publish {
        let s = &self.cfg.session;
        let (subject, id, mut headers) = match kind {
            Kind::Records => (
                s.records(),
                self.ids.records(step),
                vec![(COUNT_HEADER, steps.to_string())],
            ),
            Kind::Keyframe => (
                s.keyframes(),
                if self.plant.is(Plant::KeyframeUnderRecordId) {
                    self.ids.records(step)
                } else {
                    self.ids.keyframe(step)
                },
                vec![(RATE_HEADER, self.cfg.rate.to_string())],
            ),
            Kind::End => (s.end(), self.ids.end(), Vec::new()),
        };
        headers.push((STEP_HEADER, step.to_string()));
        self.unacked_since.get_or_insert(now);
        let token = self.next_token;
        self.next_token += 1;
        self.flights.insert(
            token,
            Flight {
                kind,
                step,
                steps,
                deadline: now.saturating_add(ACK_TIMEOUT_MS),
            },
        );
        Publish {
            token,
            kind,
            subject,
            id,
            headers,
            payload,
            step,
            steps,
        }
    }

    /// The stream acknowledged message `token` (stored, or a duplicate of one stored): its
    /// steps are published; the end is not published again.
    pub fn handle_acked(&mut self, token: u64) {
        if let Some(f) = self.flights.remove(&token) {
            self.counts.published += f.steps;
            if f.kind == Kind::End {
                if let Some(e) = self.end_again.take().filter(|e| e.attempts > 1) {
                    self.events.push_back(Event::EndAcknowledged {
                        attempts: e.attempts,
                    });
                }
            }
            self.unacked_since = None;
            self.failing = false;
        }
    }

    /// Message `token` was not stored, or may not have been (`why`): the client could not
    /// send it, or the stream refused it. Its steps are failed, and the next step gets a
    /// keyframe.
    pub fn handle_ack_failed(&mut self, token: u64, why: String) {
        if let Some(f) = self.flights.remove(&token) {
            self.fail(f, why);
        }
    }

    fn fail(&mut self, f: Flight, why: String) {
        self.counts.failed += f.steps;
        self.failing = true;
        if !self.plant.is(Plant::AckFailureNoKeyframe) {
            self.want_key = true;
        }
        if f.kind == Kind::End {
            self.end_failed(&why);
        }
        self.events.push_back(Event::Failed {
            step: f.step,
            steps: f.steps,
            why,
        });
    }

    /// An attempt at the end failed: it is published again [`END_AGAIN_MS`] later, unless
    /// that is [`END_WAIT_MS`] or more after its first publish.
    fn end_failed(&mut self, why: &str) {
        let now = self.clock;
        let Some(e) = self.end_again.as_mut() else {
            return;
        };
        let again = now.saturating_add(END_AGAIN_MS);
        if again < e.first.saturating_add(END_WAIT_MS) && !self.plant.is(Plant::EndPublishedOnce) {
            e.again = Some(again);
        } else if let Some(e) = self.end_again.take() {
            self.events.push_back(Event::EndLost {
                attempts: e.attempts,
                why: why.to_string(),
            });
        }
    }

    /// The client's connection to the server dropped: what was in flight may not be
    /// stored, so the next step gets a keyframe. (The acknowledgements awaited still come,
    /// or time out.)
    pub fn handle_disconnected(&mut self) {
        self.want_key = true;
        self.connected = false;
    }

    /// The client is connected again (to the server it had or another): publishes count
    /// as unacknowledged from the next one on ([`MOVE_AFTER_MS`]).
    pub fn handle_connected(&mut self) {
        self.connected = true;
        self.unacked_since = None;
        self.failing = false;
    }

    /// Asks the driver to move to another server ([`Event::MoveServer`]) when publishes
    /// have gone unacknowledged for [`MOVE_AFTER_MS`], some failed, while connected.
    /// Checked whenever the driver gives the time: a host that keeps stepping keeps
    /// publishing, and its messages' deadlines keep coming.
    fn check_move(&mut self, now: Millis) {
        let Some(since) = self.unacked_since else {
            return;
        };
        if self.connected && self.failing && now >= since.saturating_add(MOVE_AFTER_MS) {
            // Counted again from the next publish (on the next server, or on this one if
            // the client could reach no other).
            self.unacked_since = None;
            self.failing = false;
            self.events.push_back(Event::MoveServer {
                unacknowledged_ms: now - since,
            });
        }
    }

    /// When [`Publisher::handle_timeout`] (and then [`Publisher::poll_transmit`]) must be
    /// called next: the oldest awaited acknowledgement's deadline, or the time to publish
    /// the end again or to move to another server ([`MOVE_AFTER_MS`]) if that is sooner.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let ack = self.flights.first_key_value().map(|(_, f)| f.deadline);
        let end = self.end_again.as_ref().and_then(|e| e.again);
        let moving = match self.unacked_since {
            Some(since) if self.connected && self.failing => {
                Some(since.saturating_add(MOVE_AFTER_MS))
            }
            _ => None,
        };
        [ack, end, moving].into_iter().flatten().min()
    }

    /// The time is `now`: every message awaited past its deadline has failed.
    pub fn handle_timeout(&mut self, now: Millis) {
        let now = self.now(now);
        while let Some(entry) = self.flights.first_entry() {
            if entry.get().deadline > now {
                break;
            }
            let f = entry.remove();
            self.fail(f, format!("no acknowledgement within {ACK_TIMEOUT_MS} ms"));
        }
        self.check_move(now);
    }

    /// `now`, or the latest time seen if that is later (a driver's time never goes back;
    /// so deadlines grow with tokens).
    fn now(&mut self, now: Millis) -> Millis {
        self.clock = self.clock.max(now);
        self.clock
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests;
