//! The TCP/TLS reader's rules, sans-IO (docs/protocol.md, "What the viewer says about a
//! stranger", "Reconnecting", "The viewer's reader and verifier"): the handshake and its
//! three deadlines, the silence rule, the heartbeats, the reconnection schedule and its
//! budget, and the runs of whole records taken from a read.
//!
//! [`Reader`] holds no socket, thread, clock or channel. Its driver opens a connection
//! when it yields [`Event::Connect`], closes it on [`Event::Close`], hands it every byte
//! read ([`Reader::handle_data`]) and the time when [`Reader::poll_timeout`] says
//! ([`Reader::handle_timeout`]), and writes what [`Reader::poll_transmit`] gives.

use super::Arrival;
use crate::error::FormatError;
use crate::session::{same_world, Millis};
use crate::wire::{
    DriftReply, End, EndReason, Hello, PeerRole, SnapshotKind, ToHost, ToViewer, ViewerCodec,
    Welcome, HEARTBEAT_MS, SILENCE_TIMEOUT_MS, VERSION,
};
use crate::World;
use bytes::BytesMut;
use std::collections::VecDeque;

/// How long to wait for the TCP connection.
pub const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// How long to wait, once connected, for the first byte from the host (its TLS handshake's
/// or its welcome's): an ostm host answers a hello at once, so a peer that sends nothing
/// this long is not one, or is not answering. Once bytes come, the whole welcome has the
/// silence timeout ([`SILENCE_MS`]) from the connection.
pub const WELCOME_TIMEOUT_MS: u64 = 2_000;
/// How long the viewer waits for anything from the host.
pub const SILENCE_MS: u64 = SILENCE_TIMEOUT_MS as u64;
/// The first wait before reconnecting; each failed attempt doubles it up to
/// [`RECONNECT_MAX_WAIT_MS`].
pub const RECONNECT_FIRST_WAIT_MS: u64 = 250;
/// The longest wait between two reconnection attempts.
pub const RECONNECT_MAX_WAIT_MS: u64 = 5_000;

/// Why a drift request on TCP gets no answer once its connection's stream has ended
/// ([`Event::StreamEnded`]).
pub const HOST_CLOSED: &str = "the host has closed the connection; it cannot be asked any more";

/// What the reader is told of its task.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The host's address, as errors name it.
    pub addr: String,
    /// The token the hello carries.
    pub token: Option<String>,
    /// Reconnect after a lost connection, for at most this many milliseconds without
    /// success.
    pub reconnect_ms: Option<u64>,
    /// The connection is TLS (the refusals' hints about `--tls` then say nothing).
    pub tls: bool,
    /// Take records one message at a time rather than in runs (a test's read throttle).
    pub one_at_a_time: bool,
}

/// What the driver does next, in order.
#[derive(Debug)]
pub enum Event {
    /// Open a connection to the host (TCP, then TLS when configured) and say how it went
    /// ([`Reader::handle_connected`], [`Reader::handle_connect_failed`],
    /// [`Reader::handle_tls_failed`]).
    Connect,
    /// Close the current connection or attempt.
    Close,
    /// Hand this to the verifier, in order.
    Deliver(Arrival),
    /// The host's answer to a drift request.
    DriftReply(DriftReply),
    /// The current connection's stream is over: a drift request can no longer be answered
    /// on it.
    StreamEnded,
    /// The spool reached its bound: wait until the verifier has taken what it holds on
    /// disk, then say so ([`Reader::handle_spool_drained`]).
    AwaitDrain,
    /// A connection attempt failed; the next is in `wait_ms` (for the log).
    Reconnecting { wait_ms: u64, why: String },
    /// The reader has stopped: nothing follows.
    Done,
}

/// Why the TCP reader stopped reading a host (a connection attempt or a stream); the
/// text the verdict gives ([`Arrival::Lost`]'s `why`).
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    #[error("cannot connect to {addr}: timed out")]
    ConnectTimedOut { addr: String },
    #[error("cannot connect to {addr}: {err}")]
    Connect { addr: String, err: String },
    /// Not a byte within [`WELCOME_TIMEOUT_MS`] of the hello.
    #[error(
        "{addr} sent nothing within {WELCOME_TIMEOUT_MS} ms of the hello: it is not an ostm \
         host, or not answering{}",
        if *.tls { "" } else { " (a host that serves TLS waits for a TLS client: try --tls)" }
    )]
    NothingSent { addr: String, tls: bool },
    #[error(
        "{addr} sent no whole welcome within {SILENCE_TIMEOUT_MS} ms of the hello ({bytes} \
         bytes arrived): the link is too slow, or the host has stalled"
    )]
    NoWholeWelcome { addr: String, bytes: u64 },
    #[error(
        "{addr} sent its welcome but no attach snapshot within {SILENCE_TIMEOUT_MS} ms: the \
         link is too slow, or the host has stalled"
    )]
    NoAttachSnapshot { addr: String },
    #[error("the host ended the stream before its snapshot ({}): {}", .0.reason.name(), .0.text)]
    EndedBeforeSnapshot(End),
    #[error(
        "{addr}: at offset {at}: expected the host's attach snapshot (0x82, kind 0), found {found}"
    )]
    NotAttachSnapshot {
        addr: String,
        at: u64,
        found: &'static str,
    },
    /// The TLS handshake failed: the driver's sentence.
    #[error("{0}")]
    Tls(String),
    #[error("cannot send the hello to {addr}: {err}")]
    SendHello { addr: String, err: String },
    #[error("the host refused the viewer ({}): {}", .0.reason.name(), .0.text)]
    RefusedByHost(End),
    #[error("{addr}: at offset {at}: expected the host's welcome (0x81), found {found}")]
    NotWelcome {
        addr: String,
        at: u64,
        found: &'static str,
    },
    #[error("the host speaks protocol version {0}, this viewer speaks {VERSION}")]
    Version(u16),
    #[error(
        "{addr} closed the connection during the handshake{}",
        if *.tls { "" } else { " (a host that serves TLS closes a plaintext connection: try --tls)" }
    )]
    ClosedInHandshake { addr: String, tls: bool },
    /// A first frame that is a TLS record: a host that serves TLS, dialled without
    /// `--tls` ([`tls_record`] gives its first bytes).
    #[error(
        "{addr} serves TLS (it answered with a TLS record: {record}): connect with --tls, \
         and with --tls-ca CA.pem too when a private CA signed its certificate (as \
         `ostm-host cert` makes)"
    )]
    ServesTls { addr: String, record: String },
    /// A first frame that does not decode: what the peer sent, as [`describe`] reads it.
    #[error("{addr} is not an ostm host: it sent {seen} ({err})")]
    NotOstm {
        addr: String,
        seen: String,
        err: FormatError,
    },
    #[error("protocol error: {0}")]
    Protocol(FormatError),
    /// The connection failed: the system's sentence.
    #[error("connection lost: {0}")]
    Connection(String),
    #[error("gave up reconnecting after {secs} s: {why}")]
    GaveUp { secs: u64, why: Box<Lost> },
    /// The driver could not keep what was read: its sentence.
    #[error("cannot spool the host's records to disk: {0}")]
    Spool(String),
    /// The spool's bound (`--spool-max`) reached: the spool's sentence.
    #[error("{0}")]
    SpoolBound(String),
    #[error("cannot spool the host's end message")]
    SpoolEnd,
    #[error("the host closed the connection without an end message")]
    ClosedWithoutEnd,
    #[error("{addr}: at offset {at}: expected a record for step {expected}, found a record for step {found}")]
    OutOfStep {
        addr: String,
        at: u64,
        expected: u64,
        found: u64,
    },
    /// A resync snapshot of another world than the one attached to (each as
    /// [`world_name`] gives it).
    #[error(
        "{addr}: at offset {at}: expected a resync snapshot of the attached world \
         ({attached}), found one of another world ({found})"
    )]
    ResyncOfAnotherWorld {
        addr: String,
        at: u64,
        attached: String,
        found: String,
    },
    #[error(
        "{addr}: at offset {at}: expected a record, heartbeat, resync snapshot, end or drift \
         reply, found {found}"
    )]
    Unexpected {
        addr: String,
        at: u64,
        found: &'static str,
    },
    #[error("the host sent nothing for {SILENCE_TIMEOUT_MS} ms")]
    Silent,
}

/// A fault planted in the reader on purpose, for the seeded simulation's `--plant`: only
/// a build with the `plants` feature (the simulation's) can set one, and only there is it
/// looked at.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// The reconnection budget counts from the first failure ever, never from the end of
    /// the latest connection.
    BudgetNeverReset,
    /// A reconnection's attach keeps the old connection's number.
    KeepConnectionNumber,
    /// A run of records taken from a read is counted one record short.
    RunCutWrong,
}

impl Plant {
    /// Every plant, with its name on the command line.
    pub const ALL: [(Plant, &'static str); 3] = [
        (Plant::BudgetNeverReset, "reconnect-budget-never-reset"),
        (
            Plant::KeepConnectionNumber,
            "reconnect-keeps-connection-number",
        ),
        (Plant::RunCutWrong, "record-run-cut-wrong"),
    ];
}

/// Where the reader is.
#[derive(Debug)]
enum State {
    /// Waiting to connect again at `at`.
    Waiting { at: Millis },
    /// The driver is opening the connection.
    Connecting { deadline: Millis },
    /// Connected (`since`), the hello sent: waiting for the welcome. The first deadline
    /// is for any byte; once bytes came, for the whole welcome.
    Greeting {
        since: Millis,
        deadline: Millis,
        bytes_seen: bool,
    },
    /// The welcome came: waiting for the attach snapshot.
    Welcomed { welcome: Welcome, deadline: Millis },
    /// Reading the stream.
    Streaming { silence: Millis, beat: Millis },
    /// The spool reached its bound: waiting for the verifier to take what it holds.
    Draining,
    /// Stopped.
    Done,
}

/// How a connection's stream ended.
enum Ended {
    End(End),
    Lost(Lost),
    Broken(Lost),
}

/// The TCP/TLS reader: see the module's documentation.
#[derive(Debug)]
pub struct Reader {
    cfg: Config,
    state: State,
    codec: ViewerCodec,
    /// Bytes the peer sent on the current connection (a TLS handshake's included), as the
    /// driver counted them.
    received: u64,
    /// Connections attached so far (the current one's number).
    connection: u64,
    attached_once: bool,
    /// When the reconnection budget started to run.
    failing_since: Option<Millis>,
    wait: u64,
    /// The latest host step heard of.
    host_step: u64,
    /// The step the next record must carry.
    next_step: u64,
    /// The attached world (for resyncs).
    world: Option<World>,
    /// The viewer's verified step, for the heartbeats.
    viewer_step: u64,
    transmits: VecDeque<ToHost>,
    events: VecDeque<Event>,
    plant: crate::plant::Planted<Plant>,
}

impl Reader {
    /// A reader about to connect, at `now`.
    pub fn new(cfg: Config, now: Millis) -> Reader {
        let codec = ViewerCodec::new(cfg.addr.clone());
        let mut r = Reader {
            cfg,
            state: State::Done,
            codec,
            received: 0,
            connection: 0,
            attached_once: false,
            failing_since: None,
            wait: RECONNECT_FIRST_WAIT_MS,
            host_step: 0,
            next_step: 0,
            world: None,
            viewer_step: 0,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            plant: Default::default(),
        };
        r.connect(now);
        r
    }

    /// Plants a fault (the simulation's `--plant`).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: Plant) {
        self.plant.set(plant);
    }

    /// The latest host step heard of: the attach snapshot's on each connection (a host
    /// restarted behind the old one's step must not leave the lag counted from it), then
    /// the furthest a record, resync or heartbeat told.
    pub fn host_step(&self) -> u64 {
        self.host_step
    }

    /// The current connection's number (connections attached so far).
    pub fn connection(&self) -> u64 {
        self.connection
    }

    /// Whether the reader reads a connection's stream (past its handshake).
    pub fn is_streaming(&self) -> bool {
        matches!(self.state, State::Streaming { .. })
    }

    /// Whether the reader has stopped.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Whether the silence deadline has passed at `now` (the driver looks at its socket
    /// once more before it gives the time: see [`Reader::handle_timeout`]).
    pub fn silent(&self, now: Millis) -> bool {
        matches!(self.state, State::Streaming { silence, .. } if now >= silence)
    }

    /// The viewer's verified step, for the next heartbeats.
    pub fn handle_viewer_step(&mut self, step: u64) {
        self.viewer_step = step;
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next message to write on the current connection, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<ToHost> {
        self.transmits.pop_front()
    }

    /// The verifier's message to the host (a drift request): sent on the current
    /// connection, dropped when there is none.
    pub fn send(&mut self, m: ToHost) {
        if self.is_streaming() {
            self.transmits.push_back(m);
        }
    }

    /// When [`Reader::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        match self.state {
            State::Waiting { at } => Some(at),
            State::Connecting { deadline }
            | State::Greeting { deadline, .. }
            | State::Welcomed { deadline, .. } => Some(deadline),
            State::Streaming { silence, beat } => Some(silence.min(beat)),
            State::Draining | State::Done => None,
        }
    }

    /// The time is `now`: a deadline passed, a heartbeat is due, or the wait before
    /// connecting again is over.
    pub fn handle_timeout(&mut self, now: Millis) {
        match self.state {
            State::Waiting { at } if now >= at => self.connect(now),
            State::Connecting { deadline } if now >= deadline => {
                let addr = self.cfg.addr.clone();
                self.refused(now, Lost::ConnectTimedOut { addr }, true);
            }
            State::Greeting {
                since,
                deadline,
                bytes_seen,
            } if now >= deadline => {
                let addr = self.cfg.addr.clone();
                if self.received == 0 {
                    // Nothing at all from the peer: an ostm host answers a hello at once.
                    let tls = self.cfg.tls;
                    self.refused(now, Lost::NothingSent { addr, tls }, true);
                } else if !bytes_seen {
                    // Bytes are coming: a slow link, given the silence rule.
                    self.state = State::Greeting {
                        since,
                        deadline: since.saturating_add(SILENCE_MS),
                        bytes_seen: true,
                    };
                } else {
                    let bytes = self.received;
                    self.refused(now, Lost::NoWholeWelcome { addr, bytes }, true);
                }
            }
            State::Welcomed { deadline, .. } if now >= deadline => {
                let addr = self.cfg.addr.clone();
                self.refused(now, Lost::NoAttachSnapshot { addr }, true);
            }
            State::Streaming { silence, .. } if now >= silence => {
                self.ended(now, Ended::Lost(Lost::Silent));
            }
            State::Streaming { silence, beat } if now >= beat => {
                let viewer_step = self.viewer_step;
                self.transmits.push_back(ToHost::Heartbeat { viewer_step });
                let beat = now.saturating_add(u64::from(HEARTBEAT_MS));
                self.state = State::Streaming { silence, beat };
            }
            _ => {}
        }
    }

    /// The connection is open (TCP, and TLS when configured, whose handshake's bytes the
    /// driver counts with [`Reader::handle_received`]): the hello goes.
    pub fn handle_connected(&mut self, now: Millis) {
        if matches!(self.state, State::Connecting { .. }) {
            self.state = State::Greeting {
                since: now,
                deadline: now.saturating_add(WELCOME_TIMEOUT_MS),
                bytes_seen: false,
            };
            self.transmits.push_back(hello(self.cfg.token.as_deref()));
        }
    }

    /// The TCP connection could not be opened: `err`, the system's sentence.
    pub fn handle_connect_failed(&mut self, now: Millis, err: String) {
        if matches!(self.state, State::Connecting { .. }) {
            let addr = self.cfg.addr.clone();
            self.refused(now, Lost::Connect { addr, err }, true);
        }
    }

    /// The TLS handshake failed: `why`, the driver's sentence. Final.
    pub fn handle_tls_failed(&mut self, now: Millis, why: String) {
        if matches!(self.state, State::Greeting { .. }) {
            self.refused(now, Lost::Tls(why), false);
        }
    }

    /// The peer has sent `total` bytes on this connection so far (a TLS handshake's
    /// included).
    pub fn handle_received(&mut self, total: u64) {
        self.received = self.received.max(total);
    }

    /// A write failed: `err`, the system's sentence. During the handshake the attempt
    /// fails; on a stream, the reader finds out from the read side.
    pub fn handle_write_failed(&mut self, now: Millis, err: String) {
        if matches!(self.state, State::Greeting { .. }) {
            let addr = self.cfg.addr.clone();
            self.refused(now, Lost::SendHello { addr, err }, true);
        }
    }

    /// A read failed: `err`, the system's sentence.
    pub fn handle_read_failed(&mut self, now: Millis, err: String) {
        match self.state {
            State::Greeting { .. } | State::Welcomed { .. } => {
                self.refused(now, Lost::Connection(err), true)
            }
            State::Streaming { .. } => self.ended(now, Ended::Lost(Lost::Connection(err))),
            _ => {}
        }
    }

    /// The driver cannot keep what the reader gave it (its spool failed): the reader
    /// stops with `why`.
    pub fn handle_spool_failed(&mut self, why: Lost) {
        if !self.is_done() {
            self.finish(why);
        }
    }

    /// The spool refused a record: its bound (`--spool-max`) is reached (`why`, its
    /// sentence). The connection closes; once the verifier has taken what the spool holds
    /// the reader joins the host again at its step, as after a lost connection (a gap).
    pub fn handle_spool_full(&mut self, now: Millis, why: String) {
        if !self.is_streaming() {
            return self.handle_spool_failed(Lost::Spool(why));
        }
        let _ = now;
        self.transmits.clear();
        self.events.push_back(Event::StreamEnded);
        self.events.push_back(Event::Close);
        self.events.push_back(Event::Deliver(Arrival::Lost {
            why: Lost::SpoolBound(why).to_string(),
            last: false,
        }));
        self.events.push_back(Event::AwaitDrain);
        self.state = State::Draining;
    }

    /// The verifier has taken what the spool held on disk: the reader connects again.
    pub fn handle_spool_drained(&mut self, now: Millis) {
        if matches!(self.state, State::Draining) {
            self.failing_since = Some(now);
            self.connect(now);
        }
    }

    /// Takes what `buf` holds (bytes read from the connection, in order; `eof` once the
    /// peer closed it): at most one message, or one run of whole records, consumed from
    /// its front. Returns whether anything was taken (call again until it says no).
    pub fn handle_data(&mut self, now: Millis, buf: &mut BytesMut, eof: bool) -> bool {
        self.received = self.received.max(self.codec.consumed() + buf.len() as u64);
        match self.state {
            State::Greeting { .. } => self.greeting(now, buf, eof),
            State::Welcomed { .. } => self.welcomed(now, buf, eof),
            State::Streaming { .. } => self.streaming(now, buf, eof),
            _ => false,
        }
    }

    fn decode(
        &mut self,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<Option<(u64, ToViewer)>, FormatError> {
        let at = self.codec.consumed();
        let m = if eof {
            self.codec.decode_eof(buf)?
        } else {
            self.codec.decode(buf)?
        };
        Ok(m.map(|m| (at, m)))
    }

    fn greeting(&mut self, now: Millis, buf: &mut BytesMut, eof: bool) -> bool {
        let addr = self.cfg.addr.clone();
        let (at, m) = match self.decode(buf, eof) {
            Ok(Some(m)) => m,
            Ok(None) if eof => {
                let tls = self.cfg.tls;
                self.refused(now, Lost::ClosedInHandshake { addr, tls }, true);
                return true;
            }
            Ok(None) => return false,
            Err(err) => {
                // A first frame that does not decode is described by the bytes the peer
                // sent, so a viewer pointed at something else says what it is.
                let why = match tls_record(buf) {
                    Some(record) => Lost::ServesTls { addr, record },
                    None => Lost::NotOstm {
                        addr,
                        seen: describe(buf),
                        err,
                    },
                };
                self.refused(now, why, false);
                return true;
            }
        };
        match m {
            ToViewer::Welcome(w) if w.version != VERSION => {
                self.refused(now, Lost::Version(w.version), false)
            }
            ToViewer::Welcome(welcome) => {
                self.state = State::Welcomed {
                    welcome,
                    deadline: now.saturating_add(SILENCE_MS),
                }
            }
            ToViewer::End(e) => self.refused(now, Lost::RefusedByHost(e), false),
            other => {
                let found = name(&other);
                self.refused(now, Lost::NotWelcome { addr, at, found }, false)
            }
        }
        true
    }

    fn welcomed(&mut self, now: Millis, buf: &mut BytesMut, eof: bool) -> bool {
        let addr = self.cfg.addr.clone();
        let (at, m) = match self.decode(buf, eof) {
            Ok(Some(m)) => m,
            Ok(None) if eof => {
                let tls = self.cfg.tls;
                self.refused(now, Lost::ClosedInHandshake { addr, tls }, true);
                return true;
            }
            Ok(None) => return false,
            Err(e) => {
                self.refused(now, Lost::Protocol(e), false);
                return true;
            }
        };
        match m {
            ToViewer::Snapshot {
                kind: SnapshotKind::Attach,
                world,
            } => {
                let State::Welcomed { welcome, .. } =
                    std::mem::replace(&mut self.state, State::Done)
                else {
                    return true;
                };
                self.attached(now, welcome, world);
            }
            ToViewer::End(e) => self.refused(now, Lost::EndedBeforeSnapshot(e), false),
            other => {
                let found = name(&other);
                self.refused(now, Lost::NotAttachSnapshot { addr, at, found }, false)
            }
        }
        true
    }

    fn attached(&mut self, now: Millis, welcome: Welcome, world: World) {
        self.attached_once = true;
        self.wait = RECONNECT_FIRST_WAIT_MS;
        if !(self.plant.is(Plant::KeepConnectionNumber) && self.connection > 0) {
            self.connection += 1;
        }
        self.host_step = world.step;
        self.next_step = world.step;
        self.world = Some(world.clone());
        self.events.push_back(Event::Deliver(Arrival::Attached {
            welcome,
            world,
            connection: self.connection,
        }));
        self.state = State::Streaming {
            silence: now.saturating_add(SILENCE_MS),
            beat: now.saturating_add(u64::from(HEARTBEAT_MS)),
        };
    }

    fn streaming(&mut self, now: Millis, buf: &mut BytesMut, eof: bool) -> bool {
        if !self.cfg.one_at_a_time {
            if let Some(run) = self.codec.take_records(buf, self.next_step) {
                let count = run.count() - u64::from(self.plant.is(Plant::RunCutWrong));
                self.next_step = self.next_step.wrapping_add(count);
                self.host_step = self.host_step.max(self.next_step);
                self.heard(now);
                self.events.push_back(Event::Deliver(Arrival::Records(run)));
                return true;
            }
        }
        let addr = self.cfg.addr.clone();
        let (at, m) = match self.decode(buf, false) {
            Ok(Some(m)) => m,
            Ok(None) if eof && buf.is_empty() => {
                self.ended(now, Ended::Lost(Lost::ClosedWithoutEnd));
                return true;
            }
            Ok(None) if eof => {
                // Closed inside a frame: a host killed, or one that dropped the viewer, in
                // the middle of a write. The connection is lost, with the codec's sentence.
                let why = match self.codec.decode_eof(buf) {
                    Err(e) => Lost::Protocol(e),
                    Ok(_) => Lost::ClosedWithoutEnd,
                };
                buf.clear();
                self.ended(now, Ended::Lost(why));
                return true;
            }
            Ok(None) => return false,
            Err(e) => {
                self.ended(now, Ended::Broken(Lost::Protocol(e)));
                return true;
            }
        };
        self.heard(now);
        match m {
            ToViewer::Record(r) if r.step != self.next_step => {
                let (expected, found) = (self.next_step, r.step);
                let out_of_step = Lost::OutOfStep {
                    addr,
                    at,
                    expected,
                    found,
                };
                self.ended(now, Ended::Broken(out_of_step));
            }
            ToViewer::Record(r) => {
                self.next_step = r.step.wrapping_add(1);
                self.host_step = self.host_step.max(r.step.saturating_add(1));
                self.events.push_back(Event::Deliver(Arrival::Record(r)));
            }
            ToViewer::Snapshot {
                kind: SnapshotKind::Resync,
                world,
            } => {
                let attached = self.world.as_ref().unwrap_or(&world);
                if !same_world(attached, &world) {
                    let another = Lost::ResyncOfAnotherWorld {
                        addr,
                        at,
                        attached: world_name(attached),
                        found: world_name(&world),
                    };
                    self.ended(now, Ended::Broken(another));
                    return true;
                }
                self.next_step = world.step;
                self.host_step = self.host_step.max(world.step);
                self.events
                    .push_back(Event::Deliver(Arrival::Resync(world)));
            }
            ToViewer::Heartbeat { host_step } => self.host_step = self.host_step.max(host_step),
            ToViewer::DriftReply(d) => self.events.push_back(Event::DriftReply(d)),
            ToViewer::End(e) => {
                // The end carries the host's step: the step the viewer had to reach.
                self.host_step = self.host_step.max(e.host_step);
                self.events
                    .push_back(Event::Deliver(Arrival::End(e.clone())));
                self.ended(now, Ended::End(e));
            }
            other => {
                let found = name(&other);
                self.ended(now, Ended::Broken(Lost::Unexpected { addr, at, found }));
            }
        }
        true
    }

    fn heard(&mut self, now: Millis) {
        if let State::Streaming { silence, .. } = &mut self.state {
            *silence = now.saturating_add(SILENCE_MS);
        }
    }

    /// A new attempt, at once.
    fn connect(&mut self, now: Millis) {
        self.codec = ViewerCodec::new(self.cfg.addr.clone());
        self.received = 0;
        self.state = State::Connecting {
            deadline: now.saturating_add(CONNECT_TIMEOUT_MS),
        };
        self.events.push_back(Event::Connect);
    }

    /// An attempt failed: `unreachable` ones are tried again under the reconnection
    /// budget once the reader has attached; the others are final.
    fn refused(&mut self, now: Millis, why: Lost, unreachable: bool) {
        self.transmits.clear();
        self.events.push_back(Event::Close);
        if !unreachable {
            return self.finish(why);
        }
        let Some(budget) = self.cfg.reconnect_ms.filter(|_| self.attached_once) else {
            return self.finish(why);
        };
        let since = *self.failing_since.get_or_insert(now);
        let failing = now.saturating_sub(since);
        if failing >= budget {
            let why = Box::new(why);
            return self.finish(Lost::GaveUp {
                secs: failing / 1000,
                why,
            });
        }
        self.events.push_back(Event::Reconnecting {
            wait_ms: self.wait,
            why: why.to_string(),
        });
        self.state = State::Waiting {
            at: now.saturating_add(self.wait),
        };
        self.wait = (self.wait * 2).min(RECONNECT_MAX_WAIT_MS);
    }

    /// A connection's stream ended: the reader stops, or connects again at once with
    /// `--reconnect` (after a lost connection, or an end other than `finished`).
    fn ended(&mut self, now: Millis, ended: Ended) {
        self.transmits.clear();
        self.events.push_back(Event::StreamEnded);
        self.events.push_back(Event::Close);
        let again = self.cfg.reconnect_ms.is_some();
        match ended {
            Ended::Broken(why) => return self.finish(why),
            Ended::End(e) if !(again && reconnects_after(&e)) => {
                self.state = State::Done;
                self.events.push_back(Event::Done);
                return;
            }
            Ended::End(_) => {}
            Ended::Lost(why) if !again => return self.finish(why),
            Ended::Lost(why) => self.events.push_back(Event::Deliver(Arrival::Lost {
                why: why.to_string(),
                last: false,
            })),
        }
        // The budget runs from the end of the latest connection.
        if !(self.plant.is(Plant::BudgetNeverReset) && self.failing_since.is_some()) {
            self.failing_since = Some(now);
        }
        self.connect(now);
    }

    /// The reader stops: `why` is its last word to the verifier.
    fn finish(&mut self, why: Lost) {
        self.transmits.clear();
        self.state = State::Done;
        self.events.push_back(Event::Deliver(Arrival::Lost {
            why: why.to_string(),
            last: true,
        }));
        self.events.push_back(Event::Done);
    }
}

/// A viewer's hello, with `token` (none: empty).
pub fn hello(token: Option<&str>) -> ToHost {
    ToHost::Hello(Hello {
        version: VERSION,
        role: PeerRole::Viewer as u8,
        token: token.unwrap_or_default().as_bytes().to_vec(),
    })
}

/// Whether `--reconnect` connects again after the host ended the stream with `e`: after
/// every end but `finished` (the host ran what it was asked to; nothing follows).
pub fn reconnects_after(e: &End) -> bool {
    e.reason != EndReason::Finished
}

/// A world's setup and link as a person reads them.
pub fn world_name(w: &World) -> String {
    let (s, l) = (w.setup(), w.link());
    let link = match l {
        Some(l) => format!(
            "link role {} body {} transfer step {}",
            l.role as u8, l.body, l.transfer_step
        ),
        None => "no link".into(),
    };
    format!(
        "{}D, {} bodies, seed {}, {link}",
        s.dims as u8, s.bodies, s.seed
    )
}

/// The first 48 bytes of `bytes`, and `…` when more arrived.
fn head(bytes: &[u8]) -> (&[u8], &'static str) {
    let head = &bytes[..bytes.len().min(48)];
    (head, if bytes.len() > head.len() { "…" } else { "" })
}

/// The first bytes a peer sent, in hex, when they start like a TLS record (content type
/// `14`..`17`, version `03 00`..`03 04`): a host that serves TLS answering a plaintext
/// hello.
pub fn tls_record(bytes: &[u8]) -> Option<String> {
    let (head, more) = head(bytes);
    (head.len() >= 3 && matches!(head[0], 0x14..=0x17) && head[1] == 3 && head[2] <= 4)
        .then(|| format!("{}{more}", hex(head)))
}

/// The first bytes a peer sent, as a person can read them: as text when they are
/// printable (an HTTP or SSH banner), in hex otherwise.
pub fn describe(bytes: &[u8]) -> String {
    let (head, more) = head(bytes);
    let printable = head
        .iter()
        .all(|&b| b == b'\r' || b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b));
    if printable && !head.is_empty() {
        let text: String = head.iter().map(|&b| b as char).collect();
        format!("\"{}{more}\"", text.escape_debug())
    } else {
        format!("the bytes {}{more}", hex(head))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A host message as errors name it.
pub fn name(m: &ToViewer) -> &'static str {
    match m {
        ToViewer::Welcome(_) => "a welcome (0x81)",
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            ..
        } => "an attach snapshot (0x82, kind 0)",
        ToViewer::Snapshot { .. } => "a resync snapshot (0x82, kind 1)",
        ToViewer::Record(_) => "a record (0x83)",
        ToViewer::Heartbeat { .. } => "a heartbeat (0x84)",
        ToViewer::End(_) => "an end message (0x85)",
        ToViewer::DriftReply(_) => "a drift reply (0x86)",
    }
}

#[cfg(test)]
mod tests;
