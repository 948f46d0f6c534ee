//! One viewer's connection on the host, sans-IO (docs/protocol.md: "Handshake",
//! "Connections before their hello", "Heartbeats and timeouts", "Lag", "Slow viewers and
//! resync", "Drift", "End reasons").
//!
//! [`Conn`] decides everything a connection does; its driver moves bytes and time:
//!
//! ```text
//!   socket ── handle_bytes / handle_eof / handle_read_failed ──▶ Conn ── poll_event ──▶ log, counters
//!   clock  ── handle_timeout(now) at poll_timeout() ──────────▶      ── poll_request ──▶ the host's ring (take, join, drift)
//!   ring   ── handle_take / handle_join / handle_drift_reply ─▶      ── poll_transmit ─▶ socket (handle_sent, handle_write_failed)
//! ```
//!
//! The host's ring of records is shared by every connection and lives with the driver
//! (the fan-out); a connection asks for the records past its [`Conn::position`]
//! ([`Request::Take`]) and is handed what was found ([`Take`]). A plain-TCP driver may
//! let the fan-out write a caught-up connection's records itself and hand back what it
//! did ([`Conn::handle_unparked`]).

use crate::wire::{
    DriftReply, EncodedFrame, End, EndReason, HostCodec, PeerRole, SnapshotKind, ToHost, ToViewer,
    Welcome, VERSION,
};
use crate::{FormatError, World};
use bytes::BytesMut;
use std::collections::VecDeque;
use std::fmt;
use subtle::ConstantTimeEq;

/// A time in milliseconds from any origin the driver chooses, that never goes back.
pub type Millis = u64;

/// A connection must send a whole hello within this long of being accepted (2 s).
pub const HELLO_MS: u64 = 2_000;
/// How long a refused or ended viewer is given to close its side before the socket drops
/// (2 s): once it has taken everything sent (an ended viewer: and for as long as it goes on
/// taking it, [`LINGER_MAX_MS`] at most).
pub const LINGER_MS: u64 = 2_000;
/// The longest an ended viewer that is still taking what it was sent is waited for (10 s).
pub const LINGER_MAX_MS: u64 = 10_000;
/// How often a lingering connection looks at what the viewer has taken (50 ms).
pub const LINGER_LOOK_MS: u64 = 50;

/// What every connection is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The shared secret a viewer must send; never logged.
    pub token: Option<Vec<u8>>,
    /// The welcome every viewer gets.
    pub welcome: Welcome,
    /// A connection's hello must be whole within this long ([`HELLO_MS`]).
    pub hello_ms: u64,
    /// A write that makes no progress for this long drops the viewer.
    pub stall_ms: u64,
    /// Nothing received for this long closes the viewer (`silent`).
    pub silence_ms: u64,
    /// A heartbeat after this long with nothing else sent.
    pub heartbeat_ms: u64,
    /// How long a refused or ended viewer is given to close its side ([`LINGER_MS`]).
    pub linger_ms: u64,
    /// The longest an ended viewer still taking what it was sent is waited for
    /// ([`LINGER_MAX_MS`]).
    pub linger_max_ms: u64,
}

/// A viewer's place on the host: its id, the world it starts from, and its position in
/// the records (the number of the first record it takes).
#[derive(Debug, Clone)]
pub struct Joined {
    pub id: u64,
    pub world: World,
    pub position: u64,
}

/// What the host's ring held at a connection's position ([`Request::Take`]).
#[derive(Debug, Clone)]
pub enum Take {
    /// Records were taken: `after` is the step the last of them brings the viewer to,
    /// `more` whether records were left past them.
    Records { after: u64, more: bool },
    /// Nothing yet.
    Nothing,
    /// The host is more than `queue` records ahead: the viewer must be resynced.
    Behind,
    /// Every record was taken and the stream has ended.
    Ended(End),
}

/// Why a fan-out that wrote a caught-up connection's records itself handed its writer
/// back (see [`Conn::handle_unparked`]).
#[derive(Debug)]
pub enum Handed {
    /// The socket took only part of a write: these frames are what is left, the first
    /// one cut at the byte the socket stopped at; `after` is the step the whole write
    /// brings the viewer to.
    Rest {
        frames: Vec<EncodedFrame>,
        after: u64,
    },
    /// The viewer is more than one write behind the host: the connection takes its
    /// records itself.
    Behind,
    /// The write failed.
    Failed(std::io::Error),
}

/// What the connection asks of the host's ring; answer with the matching `handle_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The records past [`Conn::position`], at most [`super::BATCH`] (answer with
    /// [`Conn::handle_take`]). `wait`: the last take found nothing, so the driver first
    /// arranges to be told of new records (or lets the fan-out write them), then takes,
    /// and when it finds nothing again waits for records, bytes or [`Conn::poll_timeout`]
    /// before it asks again.
    Take { wait: bool },
    /// The viewer fell more than the queue behind: join it again at the host's step
    /// (answer with [`Conn::handle_join`], keeping [`Conn::id`]).
    Join,
    /// A drift request for this step (answer with [`Conn::handle_drift_reply`]).
    Drift(u64),
    /// An ended viewer lingers: how many bytes sent to it has it not acknowledged yet
    /// (answer with [`Conn::handle_unacknowledged`]).
    Unacknowledged,
}

/// Frames to write, in order, as one write (within the stall timeout). Hand the vector
/// back with [`Conn::handle_sent`] once every byte is written.
#[derive(Debug)]
pub struct Transmit {
    pub frames: Vec<EncodedFrame>,
    /// After the frames, shut down the write side (the end was sent).
    pub shutdown: bool,
}

/// What happened, for the driver's log and counters.
#[derive(Debug)]
pub enum Event {
    /// The hello was accepted: take a viewer slot and join the hub
    /// ([`Conn::handle_join`], [`Conn::handle_full`] or [`Conn::handle_stream_over`]).
    Accepted,
    /// The connection was refused before attaching (count it, log `refused: {log}`):
    /// `reason` is the end sent, `None` when none is (no hello in time).
    Refused {
        reason: Option<EndReason>,
        log: String,
    },
    /// The viewer broke the protocol (counted among the protocol errors).
    ProtocolError,
    /// The viewer attached at this step.
    Attached { id: u64, step: u64 },
    /// The viewer fell more than the queue behind at step `from` and was resynced from the
    /// host's snapshot at step `to`; `count` resyncs so far.
    Resynced { from: u64, to: u64, count: u64 },
    /// A write to the viewer made no progress for the stall timeout (counted).
    Stalled,
    /// An attached viewer left: the operator's line.
    Left(Left),
}

/// How an attached viewer's stream stopped, for the operator's line when it leaves.
#[derive(Debug)]
pub struct Left {
    pub id: u64,
    /// The step the records sent bring the viewer to (its attach step if none were sent).
    pub step: u64,
    /// Times the viewer fell more than the queue behind and was resynced.
    pub resyncs: u64,
    pub why: Why,
}

/// Why an attached viewer left: displayed as the end of the operator's line.
#[derive(Debug, thiserror::Error)]
pub enum Why {
    /// The host sent an end: the stream ended (finished, shutdown, host error), or the
    /// host closed it for what the viewer did (silent, protocol error).
    #[error("ended {}: {}", .0.reason.name(), .0.text)]
    Ended(End),
    /// The viewer closed its side (or its connection failed) first.
    #[error("closed by the viewer")]
    Closed,
    /// A write to the viewer made no progress for the stall timeout (in ms).
    #[error("dropped: stalled: no write progress for {0} ms")]
    Stalled(u64),
    /// The stream ended and the viewer did not take what it was owed in the time given.
    #[error("dropped: the stream ended and the viewer did not take its records and end in time")]
    Undelivered,
    /// A write to the viewer failed otherwise.
    #[error("dropped: write failed: {0}")]
    WriteFailed(std::io::Error),
    /// The fan-out did not give the writer back (not reached: only the connection's own
    /// task takes it back).
    #[error("dropped: the connection lost its writer")]
    WriterLost,
}

impl Why {
    /// Whether the viewer was dropped or closed for misbehaving (logged at `warn`).
    pub fn bad(&self) -> bool {
        match self {
            Why::Ended(end) => matches!(end.reason, EndReason::Silent | EndReason::ProtocolError),
            Why::Closed => false,
            Why::Stalled(_) | Why::Undelivered | Why::WriteFailed(_) | Why::WriterLost => true,
        }
    }

    /// Why the viewer is gone after a write failed with `e`.
    pub fn failed(e: std::io::Error) -> Why {
        match e.kind() {
            // The viewer closed its side (a reset when it left unread records behind).
            std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted => Why::Closed,
            _ => Why::WriteFailed(e),
        }
    }
}

impl fmt::Display for Left {
    /// `left at step S: WHY[ (resynced …)]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "left at step {}: {}", self.step, self.why)?;
        match self.resyncs {
            0 => Ok(()),
            1 => write!(f, " (resynced once)"),
            n => write!(f, " (resynced {n} times)"),
        }
    }
}

/// The offset of the role byte in a hello frame: length 4, type 1, magic 8, version 2.
const HELLO_ROLE_AT: u64 = 15;
/// The offset of the version in a hello frame.
const HELLO_VERSION_AT: u64 = 13;

/// Why a hello is refused; displayed as the refusal's text after the peer and offset it
/// is about, where it has one ([`HelloRefused::offset`]).
#[derive(Debug, thiserror::Error)]
pub enum HelloRefused {
    #[error("closed before its hello")]
    Closed,
    #[error("failed before its hello: {0}")]
    Failed(std::io::Error),
    /// A malformed first frame: the codec's error names the peer and offset itself.
    #[error("not an ostm viewer: {0}")]
    NotOstm(FormatError),
    #[error("expected a hello (0x01) first, found {0}")]
    NotHello(&'static str),
    #[error("the host speaks protocol version {VERSION}, the viewer sent version {0}")]
    Version(u16),
    #[error("expected role 1 (viewer), found role {0}")]
    Role(u8),
    #[error("this host requires a token; none was sent")]
    NoToken,
    #[error("the token does not match")]
    BadToken,
}

impl HelloRefused {
    fn reason(&self) -> EndReason {
        match self {
            HelloRefused::Version(_) => EndReason::VersionMismatch,
            HelloRefused::NoToken | HelloRefused::BadToken => EndReason::BadToken,
            _ => EndReason::NotAViewer,
        }
    }

    /// The offset the text names, for a hello frame starting at `hello_at`; `None` when
    /// the text names none (the codec's own error has its offset, a token has none).
    fn offset(&self, hello_at: u64) -> Option<u64> {
        match self {
            HelloRefused::Closed | HelloRefused::Failed(_) | HelloRefused::NotHello(_) => {
                Some(hello_at)
            }
            HelloRefused::Version(_) => Some(hello_at + HELLO_VERSION_AT),
            HelloRefused::Role(_) => Some(hello_at + HELLO_ROLE_AT),
            HelloRefused::NotOstm(_) | HelloRefused::NoToken | HelloRefused::BadToken => None,
        }
    }

    /// Whether the peer spoke the protocol far enough to read an end (then it is given
    /// time to close its side).
    fn linger(&self) -> bool {
        matches!(
            self,
            HelloRefused::Version(_)
                | HelloRefused::Role(_)
                | HelloRefused::NoToken
                | HelloRefused::BadToken
        )
    }

    /// Whether the peer broke the protocol (counted among the protocol errors).
    fn protocol_error(&self) -> bool {
        matches!(self, HelloRefused::NotOstm(_) | HelloRefused::NotHello(_))
    }

    /// The refusal's text for `peer`, whose hello started at `hello_at`.
    pub fn text(&self, peer: &str, hello_at: u64) -> String {
        match self.offset(hello_at) {
            Some(at) => format!("{peer}: at offset {at}: {self}"),
            None => self.to_string(),
        }
    }
}

/// The hello's checks, in order: a hello first, its version, its role, the token.
fn check_hello(msg: ToHost, token: Option<&[u8]>) -> Result<(), HelloRefused> {
    let hello = match msg {
        ToHost::Hello(h) => h,
        other => return Err(HelloRefused::NotHello(name(&other))),
    };
    if hello.version != VERSION {
        return Err(HelloRefused::Version(hello.version));
    }
    if hello.role != PeerRole::Viewer as u8 {
        return Err(HelloRefused::Role(hello.role));
    }
    if let Some(token) = token {
        // Constant time in the token's bytes, so timing does not reveal a matching prefix.
        let matches: bool = hello.token.as_slice().ct_eq(token).into();
        if !matches {
            return Err(if hello.token.is_empty() {
                HelloRefused::NoToken
            } else {
                HelloRefused::BadToken
            });
        }
    }
    Ok(())
}

fn name(m: &ToHost) -> &'static str {
    match m {
        ToHost::Hello(_) => "a hello (0x01)",
        ToHost::DriftRequest { .. } => "a drift request (0x02)",
        ToHost::Heartbeat { .. } => "a heartbeat (0x03)",
    }
}

/// Why the host closes an attached viewer's connection for what it did (the end's text).
#[derive(Debug, thiserror::Error)]
pub enum Misbehaved {
    #[error("nothing received for {0} ms")]
    Silent(u64),
    /// A malformed frame: the codec's error names the peer and offset.
    #[error(transparent)]
    Malformed(FormatError),
    #[error(
        "{peer}: at offset {at}: expected a drift request (0x02) or heartbeat (0x03), \
         found a second hello (0x01)"
    )]
    SecondHello { peer: String, at: u64 },
}

impl Misbehaved {
    fn reason(&self) -> EndReason {
        match self {
            Misbehaved::Silent(_) => EndReason::Silent,
            Misbehaved::Malformed(_) | Misbehaved::SecondHello { .. } => EndReason::ProtocolError,
        }
    }
}

/// A message's frame (none in the case no message the host builds reaches: one too long
/// for a frame).
pub fn encode(msg: &ToViewer) -> Option<EncodedFrame> {
    HostCodec::encode_frame(msg).ok()
}

/// Puts a heartbeat carrying the host's step ahead of a write of records when the host's
/// step is past `after`, the step the last of them brings the viewer to, so the viewer
/// learns how far behind it is from the host, not from the records it has.
pub fn with_host_step(frames: &mut Vec<EncodedFrame>, after: u64, host_step: u64) {
    if host_step > after {
        if let Some(beat) = encode(&ToViewer::Heartbeat { host_step }) {
            frames.insert(0, beat);
        }
    }
}

/// The connection's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the hello (until the hello deadline).
    Hello,
    /// The hello was accepted: the driver admits the viewer.
    Admit,
    /// Attached: streaming records.
    Stream,
    /// Sending the end (or a refusal's end).
    Ending,
    /// The end was sent: waiting for the peer to close its side.
    Linger,
    /// Nothing more to do: close the socket.
    Closed,
}

/// Where the next records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Take the records past the position.
    Take,
    /// The last take found nothing: arrange to be told of new records, then take.
    Wait,
    /// Fell behind: join again.
    Join,
}

/// What closes the stream once the write in progress is done.
#[derive(Debug)]
enum Close {
    /// The stream ended: this end.
    End(End),
    /// The viewer misbehaved: an end with the host's step when it is sent.
    Misbehaved(Misbehaved),
    /// The viewer is gone: close without an end.
    Gone,
}

/// The write handed to the driver, and what it brings.
#[derive(Debug, Clone, Copy, Default)]
struct Writing {
    /// The step the frames bring the viewer to, when they carry records or a snapshot.
    reaches: Option<u64>,
    /// A heartbeat written for the timer: set the timer again once it is written.
    rearm: bool,
    /// The welcome and attach snapshot.
    first: bool,
}

/// An ended attached viewer's linger.
#[derive(Debug, Clone, Copy)]
struct Lingering {
    started: Millis,
    taken_at: Millis,
    left: Option<u64>,
    look_at: Millis,
    look_due: bool,
}

/// One viewer's connection: see the module docs.
pub struct Conn {
    cfg: Config,
    /// The peer's name in texts (its address).
    peer: String,
    codec: HostCodec,
    input: BytesMut,
    phase: Phase,
    /// The frames of the next write, or the vector lent to the driver while it writes.
    out: Vec<EncodedFrame>,
    /// The write in progress: what it brings, and when it stalls.
    writing: Option<(Writing, Millis)>,
    /// What the next write brings (set with `out`).
    next: Writing,
    shutdown: bool,
    /// The hello's deadline, then the linger's.
    deadline: Millis,
    /// The refusal's or end's write is given this long (the stall timeout, or less).
    write_limit: u64,
    linger: bool,
    // Attached.
    id: u64,
    position: u64,
    step: u64,
    resyncs: u64,
    last_sent: Millis,
    heartbeat_at: Option<Millis>,
    beat_due: bool,
    silence_at: Option<Millis>,
    want: Want,
    drift: VecDeque<u64>,
    replies: VecDeque<EncodedFrame>,
    close: Option<Close>,
    /// The end being sent, for the leave line.
    ending: Option<End>,
    /// Refusal: the end's reason and text, sent with the host's step.
    refusal: Option<(EndReason, String)>,
    why: Option<Why>,
    attached: bool,
    /// The stream's time to deliver is over: no more writes.
    delivery_over: bool,
    /// An ended attached viewer's linger: when it started, when the viewer last took
    /// some of what was sent, the bytes it had not acknowledged at the last look, and
    /// whether a look is due.
    lingering: Option<Lingering>,
    /// The peer closed its side, or reading failed: nothing more will be read.
    read_done: bool,
    events: VecDeque<Event>,
    plant: crate::plant::Planted<crate::session::Plant>,
}

impl Conn {
    /// A connection accepted at `now` from `peer` (its address, named in refusals).
    pub fn new(cfg: Config, peer: impl Into<String>, now: Millis) -> Conn {
        let peer = peer.into();
        Conn {
            deadline: now.saturating_add(cfg.hello_ms),
            write_limit: cfg.stall_ms,
            codec: HostCodec::new(peer.clone()),
            peer,
            cfg,
            input: BytesMut::new(),
            phase: Phase::Hello,
            out: Vec::new(),
            writing: None,
            next: Writing::default(),
            shutdown: false,
            linger: false,
            id: 0,
            position: 0,
            step: 0,
            resyncs: 0,
            last_sent: now,
            heartbeat_at: None,
            beat_due: false,
            silence_at: None,
            want: Want::Take,
            drift: VecDeque::new(),
            replies: VecDeque::new(),
            close: None,
            ending: None,
            refusal: None,
            why: None,
            attached: false,
            delivery_over: false,
            lingering: None,
            read_done: false,
            events: VecDeque::new(),
            plant: Default::default(),
        }
    }

    /// Plants a fault (the simulation's `--plant`; see [`crate::session::Plant`]).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: crate::session::Plant) {
        self.plant.set(plant);
    }

    /// The viewer's id on the hub (once joined).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The number of the next record to send.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The step the records sent bring the viewer to.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// When the last write that completed was made.
    pub fn last_sent(&self) -> Millis {
        self.last_sent
    }

    /// Whether the hello is still awaited.
    pub fn before_hello(&self) -> bool {
        self.phase == Phase::Hello
    }

    /// Whether the connection is done: close the socket.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Whether a write is in progress (handed out by [`Conn::poll_transmit`]).
    pub fn is_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// What happened, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest time at which [`Conn::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let stall = self.writing.map(|(_, at)| at);
        let timers = match self.phase {
            Phase::Linger => match self.lingering {
                Some(l) => (!l.look_due).then_some(l.look_at),
                None => Some(self.deadline),
            },
            Phase::Hello => Some(self.deadline),
            Phase::Stream => min(
                self.silence_at.filter(|_| self.close.is_none()),
                self.heartbeat_at.filter(|_| !self.beat_due),
            ),
            Phase::Admit | Phase::Ending | Phase::Closed => None,
        };
        min(stall, timers)
    }

    /// The time is `now`: fires what is due.
    pub fn handle_timeout(&mut self, now: Millis) {
        if let Some((_, at)) = self.writing {
            if now >= at {
                self.stalled();
                return;
            }
        }
        match self.phase {
            Phase::Hello if now >= self.deadline => {
                // No whole hello in time: closed at once, no end message, no linger (a
                // silent peer reads nothing anyway).
                self.events.push_back(Event::Refused {
                    reason: None,
                    log: format!("no hello within {} ms", self.cfg.hello_ms),
                });
                self.finish();
            }
            Phase::Linger => match &mut self.lingering {
                Some(l) => l.look_due |= now >= l.look_at,
                None if now >= self.deadline => self.finish(),
                None => {}
            },
            Phase::Stream => {
                if self.close.is_none() && self.silence_at.is_some_and(|at| now >= at) {
                    self.close = Some(Close::Misbehaved(Misbehaved::Silent(self.cfg.silence_ms)));
                }
                if let Some(at) = self.heartbeat_at.filter(|&at| now >= at && !self.beat_due) {
                    // A heartbeat when nothing was sent for the interval (the timer is set
                    // again after the write), else the timer set to the interval after the
                    // last write.
                    let due = self.last_sent.saturating_add(self.cfg.heartbeat_ms);
                    if now >= due {
                        self.beat_due = true;
                    } else {
                        self.heartbeat_at = Some(due.max(at));
                    }
                }
            }
            _ => {}
        }
    }

    fn stalled(&mut self) {
        self.writing = None;
        self.out.clear();
        if self.attached {
            // Records or the end of an attached viewer's stream.
            self.events.push_back(Event::Stalled);
            self.leave(Why::Stalled(self.cfg.stall_ms));
        } else {
            // The end's or refusal's write: the connection is closed anyway.
            self.finish();
        }
    }

    /// Bytes read from the socket at `now`.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Millis) {
        self.input.extend_from_slice(bytes);
        self.decode(now, false);
    }

    /// The peer closed its side at `now` (the end of the stream).
    pub fn handle_eof(&mut self, now: Millis) {
        self.decode(now, true);
        self.read_done = true;
        match self.phase {
            Phase::Hello => self.refuse(HelloRefused::Closed, self.codec.consumed()),
            Phase::Stream if self.close.is_none() => self.close = Some(Close::Gone),
            Phase::Linger => self.finish(),
            _ => {}
        }
    }

    /// Reading from the socket failed.
    pub fn handle_read_failed(&mut self, e: std::io::Error) {
        self.read_done = true;
        match self.phase {
            Phase::Hello => self.refuse(HelloRefused::Failed(e), self.codec.consumed()),
            Phase::Stream if self.close.is_none() => self.close = Some(Close::Gone),
            Phase::Linger => self.finish(),
            _ => {}
        }
    }

    fn decode(&mut self, now: Millis, eof: bool) {
        loop {
            let decoding = match self.phase {
                Phase::Hello | Phase::Linger => true,
                Phase::Stream => self.close.is_none(),
                _ => false,
            };
            if !decoding {
                return;
            }
            let at = self.codec.consumed();
            let got = if eof {
                self.codec.decode_eof(&mut self.input)
            } else {
                self.codec.decode(&mut self.input)
            };
            match (self.phase, got) {
                (_, Ok(None)) => return,
                (Phase::Hello, Err(e)) => self.refuse(HelloRefused::NotOstm(e), at),
                (Phase::Hello, Ok(Some(msg))) => {
                    match check_hello(msg, self.cfg.token.as_deref()) {
                        Ok(()) => {
                            self.phase = Phase::Admit;
                            self.events.push_back(Event::Accepted);
                        }
                        Err(why) => self.refuse(why, at),
                    }
                }
                // Lingering: the peer's messages are read and dropped until it closes.
                (Phase::Linger, Ok(Some(_))) => {}
                (Phase::Linger, Err(_)) => {
                    self.read_done = true;
                    self.finish();
                }
                (_, Err(e)) => {
                    self.events.push_back(Event::ProtocolError);
                    self.close = Some(Close::Misbehaved(Misbehaved::Malformed(e)));
                }
                (_, Ok(Some(msg))) => {
                    self.silence_at = Some(now.saturating_add(self.cfg.silence_ms));
                    match msg {
                        ToHost::Heartbeat { .. } => {}
                        ToHost::DriftRequest { step } => self.drift.push_back(step),
                        ToHost::Hello(_) => {
                            self.events.push_back(Event::ProtocolError);
                            self.close = Some(Close::Misbehaved(Misbehaved::SecondHello {
                                peer: self.peer.clone(),
                                at,
                            }));
                        }
                    }
                }
            }
        }
    }

    /// Refuses the hello, which started at `at`.
    fn refuse(&mut self, why: HelloRefused, at: u64) {
        if why.protocol_error() {
            self.events.push_back(Event::ProtocolError);
        }
        let text = why.text(&self.peer, at);
        self.refuse_with(why.reason(), text.clone(), why.linger(), Some(text));
    }

    fn refuse_with(&mut self, reason: EndReason, text: String, linger: bool, log: Option<String>) {
        if let Some(log) = log {
            self.events.push_back(Event::Refused {
                reason: Some(reason),
                log,
            });
        }
        self.refusal = Some((reason, text));
        self.linger = linger;
        self.write_limit = self.cfg.stall_ms.min(self.cfg.hello_ms);
        self.phase = Phase::Ending;
    }

    /// The host is full: the accepted viewer is refused.
    pub fn handle_full(&mut self) {
        self.refuse_with(
            EndReason::Full,
            "the host serves its maximum number of viewers".into(),
            true,
            Some("the host is full".into()),
        );
    }

    /// The stream has ended before the accepted viewer could join: it is sent `end` (or
    /// `shutdown: the stream has ended`), not counted as a refusal.
    pub fn handle_stream_over(&mut self, end: Option<End>) {
        match end {
            Some(end) => {
                self.ending = Some(end);
                self.linger = true;
                self.write_limit = self.cfg.stall_ms.min(self.cfg.hello_ms);
                self.phase = Phase::Ending;
            }
            None => self.refuse_with(
                EndReason::Shutdown,
                "the stream has ended".into(),
                true,
                None,
            ),
        }
    }

    /// Answers [`Request::Join`], and the admission after [`Event::Accepted`]: the viewer
    /// joined the hub (`None`: the stream has ended meanwhile; the next take says so).
    pub fn handle_join(&mut self, joined: Option<Joined>) {
        let Some(Joined {
            id,
            world,
            position,
        }) = joined
        else {
            if self.phase == Phase::Stream {
                self.want = Want::Take;
            } else {
                self.handle_stream_over(None);
            }
            return;
        };
        self.position = position;
        let to = world.step;
        if self.phase == Phase::Admit {
            self.phase = Phase::Stream;
            self.attached = true;
            self.id = id;
            self.step = to;
            self.events.push_back(Event::Attached { id, step: to });
            self.out
                .extend(encode(&ToViewer::Welcome(self.cfg.welcome)));
            self.out.extend(encode(&ToViewer::Snapshot {
                kind: SnapshotKind::Attach,
                world,
            }));
            self.next = Writing {
                reaches: None,
                rearm: false,
                first: true,
            };
            self.want = Want::Take;
            return;
        }
        // The viewer fell more than the queue behind: a snapshot of the host's step, and
        // its records from there.
        self.resyncs += 1;
        self.events.push_back(Event::Resynced {
            from: self.step,
            to,
            count: self.resyncs,
        });
        self.out.extend(encode(&ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world,
        }));
        self.next = Writing {
            reaches: Some(to),
            ..Writing::default()
        };
        self.want = Want::Take;
    }

    /// Answers [`Request::Take`]: what the ring held at the position, the frames taken
    /// (appended to the vector [`Conn::take_buffer`] lent), the new position, and the
    /// host's step.
    pub fn handle_take(&mut self, take: Take, position: u64, host_step: u64) {
        if !self.plant.is(crate::session::Plant::TakeNoAdvance) {
            self.position = position;
        }
        match take {
            Take::Nothing => self.want = Want::Wait,
            Take::Records { after, more } => {
                with_host_step(&mut self.out, after, host_step);
                self.next = Writing {
                    reaches: Some(after),
                    ..Writing::default()
                };
                self.want = if more { Want::Take } else { Want::Wait };
            }
            Take::Behind => self.want = Want::Join,
            Take::Ended(end) => {
                if self.close.is_none() {
                    self.close = Some(Close::End(end));
                }
            }
        }
    }

    /// The vector a take appends its frames to (the next write's).
    pub fn take_buffer(&mut self) -> &mut Vec<EncodedFrame> {
        &mut self.out
    }

    /// The fan-out wrote this caught-up connection's records itself: the position, step
    /// and time of the last write it completed, and why it handed the writer back, if it
    /// did (`None`: it did not; something else woke the driver).
    pub fn handle_unparked(
        &mut self,
        position: u64,
        step: u64,
        last_sent: Millis,
        handed: Option<Handed>,
    ) {
        self.position = position;
        self.step = step;
        self.last_sent = last_sent;
        match handed {
            None | Some(Handed::Behind) => self.want = Want::Take,
            Some(Handed::Failed(e)) => self.leave(Why::failed(e)),
            // The frame the fan-out's write stopped in is completed before anything else
            // is written.
            Some(Handed::Rest { frames, after }) => {
                self.out.extend(frames);
                self.next = Writing {
                    reaches: Some(after),
                    ..Writing::default()
                };
                self.want = Want::Take;
            }
        }
    }

    /// The writer the fan-out held was not given back (not reached).
    pub fn handle_writer_lost(&mut self) {
        self.writing = None;
        self.leave(Why::WriterLost);
    }

    /// Answers [`Request::Drift`].
    pub fn handle_drift_reply(&mut self, reply: DriftReply) {
        self.replies.extend(encode(&ToViewer::DriftReply(reply)));
    }

    /// What to ask of the host's ring next, when nothing is to be written first.
    pub fn poll_request(&mut self) -> Option<Request> {
        if self.phase == Phase::Linger {
            return self
                .lingering
                .is_some_and(|l| l.look_due)
                .then_some(Request::Unacknowledged);
        }
        if self.phase != Phase::Stream
            || self.writing.is_some()
            || !self.out.is_empty()
            || self.close.is_some()
            || self.beat_due
            || !self.replies.is_empty()
        {
            return None;
        }
        if let Some(step) = self.drift.pop_front() {
            return Some(Request::Drift(step));
        }
        match self.want {
            Want::Take => Some(Request::Take { wait: false }),
            Want::Wait => Some(Request::Take { wait: true }),
            Want::Join => Some(Request::Join),
        }
    }

    /// The next write, at `now`, with the host's step `host_step` (carried by heartbeats
    /// and ends). `None` while a write is in progress or nothing is to be written.
    pub fn poll_transmit(&mut self, now: Millis, host_step: u64) -> Option<Transmit> {
        if self.writing.is_some() {
            return None;
        }
        if self.out.is_empty() {
            match self.phase {
                Phase::Stream => self.prepare_stream(host_step),
                Phase::Ending => {
                    let end = self.ending.take().or_else(|| {
                        self.refusal.take().map(|(reason, text)| End {
                            reason,
                            text,
                            host_step,
                        })
                    });
                    match end {
                        Some(end) => {
                            self.out.extend(encode(&ToViewer::End(end.clone())));
                            self.shutdown = true;
                            self.ending = Some(end);
                        }
                        None => self.finish(),
                    }
                }
                _ => {}
            }
        }
        if self.out.is_empty() {
            return None;
        }
        if self.delivery_over && self.attached {
            self.undelivered();
            return None;
        }
        let limit = if self.phase == Phase::Stream {
            self.cfg.stall_ms
        } else {
            self.write_limit
        };
        self.writing = Some((std::mem::take(&mut self.next), now.saturating_add(limit)));
        Some(Transmit {
            frames: std::mem::take(&mut self.out),
            shutdown: self.shutdown,
        })
    }

    /// What an attached connection writes when no records are prepared: the end that
    /// closes it, a drift reply, or the heartbeat.
    fn prepare_stream(&mut self, host_step: u64) {
        if let Some(close) = self.close.take() {
            let end = match close {
                Close::Gone => {
                    self.leave(Why::Closed);
                    return;
                }
                Close::End(end) => end,
                Close::Misbehaved(why) => End {
                    reason: why.reason(),
                    text: why.to_string(),
                    host_step,
                },
            };
            self.phase = Phase::Ending;
            // Nothing more is sent after the end.
            self.drift.clear();
            self.replies.clear();
            self.beat_due = false;
            self.linger = true;
            self.write_limit = self.cfg.stall_ms;
            self.out.extend(encode(&ToViewer::End(end.clone())));
            self.shutdown = true;
            self.ending = Some(end);
            return;
        }
        if let Some(reply) = self.replies.pop_front() {
            self.out.push(reply);
            return;
        }
        if self.beat_due {
            self.beat_due = false;
            self.out.extend(encode(&ToViewer::Heartbeat { host_step }));
            self.next = Writing {
                rearm: true,
                ..Writing::default()
            };
        }
    }

    /// The write handed out was written whole at `now` (and the write side shut down when
    /// it asked for that); `frames` is its vector, given back for reuse.
    pub fn handle_sent(&mut self, mut frames: Vec<EncodedFrame>, now: Millis) {
        let Some((w, _)) = self.writing.take() else {
            return;
        };
        frames.clear();
        if self.out.is_empty() {
            self.out = frames;
        }
        match self.phase {
            Phase::Stream => {
                self.last_sent = now;
                if let Some(step) = w.reaches {
                    self.step = step;
                }
                if w.first {
                    self.heartbeat_at = Some(now.saturating_add(self.cfg.heartbeat_ms));
                    self.silence_at = Some(now.saturating_add(self.cfg.silence_ms));
                    // What the viewer sent after its hello is read now.
                    self.decode(now, false);
                }
                if w.rearm {
                    self.heartbeat_at = Some(now.saturating_add(self.cfg.heartbeat_ms));
                    if self.plant.is(crate::session::Plant::HeartbeatRearmsSilence) {
                        self.silence_at = Some(now.saturating_add(self.cfg.silence_ms));
                    }
                }
            }
            Phase::Ending => {
                if self.linger && !self.read_done {
                    self.deadline = now.saturating_add(self.cfg.linger_ms);
                    self.phase = Phase::Linger;
                    if self.attached {
                        // Waits while the viewer goes on taking what was sent: looked at
                        // at once, then every LINGER_LOOK_MS.
                        self.lingering = Some(Lingering {
                            started: now,
                            taken_at: now,
                            left: None,
                            look_at: now,
                            look_due: true,
                        });
                    }
                    // What the peer sent meanwhile is read now.
                    self.decode(now, false);
                } else {
                    self.finish();
                }
            }
            _ => {}
        }
    }

    /// The write handed out failed (or the shutdown after it did).
    pub fn handle_write_failed(&mut self, e: std::io::Error) {
        self.writing = None;
        self.out.clear();
        if self.attached {
            self.leave(Why::failed(e));
        } else {
            self.finish();
        }
    }

    /// The end was written whole but shutting down the write side failed: the connection
    /// closes without lingering.
    pub fn handle_shutdown_failed(&mut self) {
        self.writing = None;
        self.out.clear();
        self.finish();
    }

    /// The stream has ended and the connections' time to deliver what they owe has
    /// passed: a connection still writing records or its end stops (counted as a stall);
    /// one that has sent its end lingers on.
    pub fn handle_delivery_over(&mut self) {
        self.delivery_over = true;
        if self.attached
            && self.writing.is_some()
            && matches!(self.phase, Phase::Stream | Phase::Ending)
        {
            self.undelivered();
        }
    }

    fn undelivered(&mut self) {
        self.writing = None;
        self.out.clear();
        self.events.push_back(Event::Stalled);
        self.leave(Why::Undelivered);
    }

    /// Answers [`Request::Unacknowledged`] at `now`: the bytes sent that the viewer has
    /// not acknowledged yet. The linger ends [`Config::linger_ms`] after the viewer last
    /// took some (or after it began), [`Config::linger_max_ms`] after it began at most.
    pub fn handle_unacknowledged(&mut self, bytes: u64, now: Millis) {
        let Some(l) = &mut self.lingering else {
            return;
        };
        if l.left.is_some_and(|left| bytes < left) {
            l.taken_at = now;
        }
        l.left = Some(bytes);
        l.look_due = false;
        l.look_at = now.saturating_add(LINGER_LOOK_MS);
        if now.saturating_sub(l.taken_at) >= self.cfg.linger_ms
            || now.saturating_sub(l.started) >= self.cfg.linger_max_ms
        {
            self.finish();
        }
    }

    /// An attached viewer leaves for `why`.
    fn leave(&mut self, why: Why) {
        self.why = Some(why);
        self.finish();
    }

    /// The connection is done.
    fn finish(&mut self) {
        self.phase = Phase::Closed;
        self.writing = None;
        if !self.attached {
            return;
        }
        self.attached = false;
        let why = match self.why.take() {
            Some(why) => why,
            None => self.ending.take().map_or(Why::Closed, Why::Ended),
        };
        self.events.push_back(Event::Left(Left {
            id: self.id,
            step: self.step,
            resyncs: self.resyncs,
            why,
        }));
    }
}

fn min(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
