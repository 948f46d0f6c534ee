//! One viewer's connection: the handshake, then a writer (this task) that sends the records
//! past the viewer's position in the hub's shared ring, heartbeats and drift replies, and a
//! reader task that answers what the viewer sends. Whatever the viewer does, only this
//! connection pays for it. A plain-TCP connection that has sent every record parks its
//! writer for the fan-out to write the next ones directly ([`crate::direct`]).

use crate::direct::{Direct, Handed};
use crate::fan_out::FanOut;
use crate::framing::{encode, with_host_step, write_frames, Writer, BATCH};
use crate::hub::{Hub, Joined, Take};
use crate::pending::{Admitted, HELLO_TIMEOUT};
use futures::StreamExt;
use ostm_protocol::wire::{
    EncodedFrame, End, EndReason, PeerRole, SnapshotKind, ToHost, ToViewer, Welcome, VERSION,
};
use ostm_protocol::FormatError;
use ostm_runtime::{HostFrameCodec, WireError};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout, Instant};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

/// What every connection is configured with.
pub struct ConnConfig {
    /// The shared secret a viewer must send; never logged.
    pub token: Option<String>,
    /// TLS, when the host serves it.
    pub tls: Option<crate::tls::HostTls>,
    /// A write that makes no progress for this long drops the viewer.
    pub stall: Duration,
    /// Nothing received for this long drops the viewer.
    pub silence: Duration,
    /// Send a heartbeat after this long with nothing else sent.
    pub heartbeat: Duration,
    /// The welcome every viewer gets.
    pub welcome: Welcome,
    /// Cancelled once the stream has ended and the connections' time to deliver what they
    /// owe has passed: a connection still writing records or its end then stops writing
    /// (one that has sent its end lingers on, see [`LINGER`]).
    pub delivery_over: CancellationToken,
}

type Reader = FramedRead<Box<dyn AsyncRead + Unpin + Send>, HostFrameCodec>;

/// What the reader task tells the writer.
enum Control {
    /// A frame to send (a drift reply).
    Send(EncodedFrame),
    Close(Box<End>),
    Gone,
}

/// The read buffer a connection starts with, in bytes: a viewer sends its hello (at most
/// 271 bytes with a 255-byte token), then 13-byte heartbeats and drift requests; the
/// buffer grows if a frame needs more.
const READ_BUFFER: usize = 320;
/// How long a refused or ended viewer is given to close its side before the socket drops:
/// once it has taken everything sent (an ended viewer: and for as long as it goes on
/// taking it, [`LINGER_MAX`] at most).
const LINGER: Duration = Duration::from_secs(2);
/// The longest an ended viewer that is still taking what it was sent is waited for.
pub const LINGER_MAX: Duration = Duration::from_secs(10);
/// How often a lingering connection looks at what the viewer has taken.
const LINGER_POLL: Duration = Duration::from_millis(50);

/// Serves one connection until it ends. `waiting` is its place among the connections that
/// have not sent their hello yet (given up once the hello is read); `slots` the viewer
/// slots, one of which it takes once its hello is accepted.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    hub: Arc<Hub>,
    fan_out: Arc<FanOut>,
    cfg: Arc<ConnConfig>,
    waiting: Admitted,
    slots: Arc<Semaphore>,
) {
    let span = tracing::info_span!("viewer", %peer);
    async move {
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let evicted = waiting.evicted.clone();
        let name = peer.to_string();
        let before_hello = async {
            let (r, w): (Box<dyn AsyncRead + Unpin + Send>, Writer) = match &cfg.tls {
                Some(tls) => match tls.acceptor.accept(stream).await {
                    Ok(s) => {
                        let (r, w) = tokio::io::split(s);
                        (Box::new(r), Writer::Tls(w))
                    }
                    Err(e) => {
                        hub.counters.refused.fetch_add(1, Ordering::Relaxed);
                        tls.identity.refused(&e);
                        return None;
                    }
                },
                None => {
                    let (r, w) = stream.into_split();
                    (Box::new(r), Writer::Tcp(w))
                }
            };
            let mut reader =
                FramedRead::with_capacity(r, HostFrameCodec::new(name.clone()), READ_BUFFER);
            let hello = handshake(&mut reader, &hub, &cfg, &name).await;
            Some((reader, w, hello))
        };
        let got = tokio::select! {
            got = timeout(HELLO_TIMEOUT, before_hello) => got,
            _ = evicted.cancelled() => {
                debug!("closed to make room for newer connections");
                return;
            }
        };
        let (reader, mut writer, hello) = match got {
            Err(_) => {
                // No whole hello in time: closed at once, no end message, no linger (a
                // silent peer reads nothing anyway).
                hub.counters.refused.fetch_add(1, Ordering::Relaxed);
                info!("refused: no hello within {} ms", HELLO_TIMEOUT.as_millis());
                return;
            }
            Ok(None) => return,
            Ok(Some(got)) => got,
        };
        // A refused hello keeps its place among the waiting connections until its end is
        // sent; an accepted one gives it up before it takes a viewer slot.
        let admitted = match hello {
            Err(refusal) => Err((refusal, Some(waiting))),
            Ok(()) => {
                drop(waiting);
                admit(&hub, &slots).map_err(|refusal| (refusal, None))
            }
        };
        let (_permit, joined) = match admitted {
            Ok(admitted) => admitted,
            Err((refusal, waiting)) => {
                refusal.note(&hub);
                refuse(&mut writer, reader, refusal, cfg.stall).await;
                drop(waiting);
                return;
            }
        };
        hub.counters.viewers.fetch_add(1, Ordering::Relaxed);
        hub.counters.viewers_total.fetch_add(1, Ordering::Relaxed);
        let (id, step) = (joined.id, joined.world.step);
        info!(id, step, "viewer {peer} attached at step {step}");
        let left = stream_to(writer, reader, joined, (peer, fd), &hub, &fan_out, &cfg).await;
        hub.counters.viewers.fetch_sub(1, Ordering::Relaxed);
        left.log(peer, id, hub.step());
    }
    .instrument(span)
    .await
}

/// A viewer whose hello was accepted takes a viewer slot and joins the hub at its step;
/// `Err` is the refusal to send when the host is full or the stream has ended.
fn admit(hub: &Hub, slots: &Arc<Semaphore>) -> Result<(OwnedSemaphorePermit, Joined), Refusal> {
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        return Err(Refusal::new(
            EndReason::Full,
            "the host serves its maximum number of viewers".into(),
            hub,
            true,
        )
        .logged_as("the host is full"));
    };
    match hub.join(None) {
        Some(joined) => Ok((permit, joined)),
        // Not counted as a refusal: the stream is over for everyone.
        None => Err(Refusal {
            end: hub.ended().unwrap_or_else(|| End {
                reason: EndReason::Shutdown,
                text: "the stream has ended".into(),
                host_step: hub.step(),
            }),
            linger: true,
            log: None,
        }),
    }
}

/// How an attached viewer's stream stopped, for the operator's line when it leaves.
struct Left {
    /// The step the records sent bring the viewer to (its attach step if none were sent).
    step: u64,
    /// Times the viewer fell more than the queue behind and was resynced.
    resyncs: u64,
    why: Why,
}

/// Why an attached viewer left: displayed as the end of the operator's line.
#[derive(Debug, thiserror::Error)]
enum Why {
    /// The host sent an end: the stream ended (finished, shutdown, host error), or the
    /// host closed it for what the viewer did (silent, protocol error).
    #[error("ended {}: {}", .0.reason.name(), .0.text)]
    Ended(End),
    /// The viewer closed its side (or its connection failed) first.
    #[error("closed by the viewer")]
    Closed,
    /// A write to the viewer made no progress for the stall timeout.
    #[error("dropped: stalled: no write progress for {} ms", .0.as_millis())]
    Stalled(Duration),
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
    fn bad(&self) -> bool {
        match self {
            Why::Ended(end) => matches!(end.reason, EndReason::Silent | EndReason::ProtocolError),
            Why::Closed => false,
            Why::Stalled(_) | Why::Undelivered | Why::WriteFailed(_) | Why::WriterLost => true,
        }
    }
}

impl Left {
    /// Logs `viewer ADDR left at step S: WHY`, one line, at `info` when the stream ended or
    /// the viewer closed, at `warn` when the viewer was dropped or closed for misbehaving.
    fn log(&self, peer: SocketAddr, id: u64, host_step: u64) {
        let (step, resyncs, why) = (self.step, self.resyncs, &self.why);
        let tail = match resyncs {
            0 => String::new(),
            1 => " (resynced once)".to_string(),
            n => format!(" (resynced {n} times)"),
        };
        if why.bad() {
            warn!(
                id,
                step, host_step, resyncs, "viewer {peer} left at step {step}: {why}{tail}"
            );
        } else {
            info!(
                id,
                step, host_step, resyncs, "viewer {peer} left at step {step}: {why}{tail}"
            );
        }
    }
}

/// A refusal: the end message, and whether to wait for the peer to close (a peer that
/// spoke the protocol reads the end; one that did not is closed at once).
struct Refusal {
    end: End,
    linger: bool,
    /// What the operator's line says after `refused: ` (the refusal is then counted);
    /// `None` when the stream has simply ended.
    log: Option<String>,
}

impl Refusal {
    /// A refusal with `reason` and `text` at the host's step, logged as its text.
    fn new(reason: EndReason, text: String, hub: &Hub, linger: bool) -> Refusal {
        Refusal {
            log: Some(text.clone()),
            end: End {
                reason,
                text,
                host_step: hub.step(),
            },
            linger,
        }
    }

    /// The same refusal, logged as `log`.
    fn logged_as(self, log: &str) -> Refusal {
        Refusal {
            log: Some(log.into()),
            ..self
        }
    }

    /// Counts the refusal and logs it for the operator.
    fn note(&self, hub: &Hub) {
        if let Some(log) = &self.log {
            hub.counters.refused.fetch_add(1, Ordering::Relaxed);
            info!(reason = self.end.reason.name(), "refused: {log}");
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
enum HelloRefused {
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
    fn text(&self, peer: &str, hello_at: u64) -> String {
        match self.offset(hello_at) {
            Some(at) => format!("{peer}: at offset {at}: {self}"),
            None => self.to_string(),
        }
    }

    /// The refusal to send `peer`, whose hello started at `hello_at`.
    fn refusal(self, peer: &str, hello_at: u64, hub: &Hub) -> Refusal {
        let text = self.text(peer, hello_at);
        Refusal::new(self.reason(), text, hub, self.linger())
    }
}

/// Reads the hello and checks version, role and token; `Err` is the refusal to send.
/// Every refusal's text names the peer and the offset it is about, as docs/protocol.md
/// ("Errors") gives them.
async fn handshake(
    reader: &mut Reader,
    hub: &Hub,
    cfg: &ConnConfig,
    peer: &str,
) -> Result<(), Refusal> {
    let at = reader.decoder().consumed();
    check_hello(reader, cfg).await.map_err(|why| {
        if why.protocol_error() {
            hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
        }
        why.refusal(peer, at, hub)
    })
}

/// The hello's checks, in order: a hello first, its version, its role, the token.
async fn check_hello(reader: &mut Reader, cfg: &ConnConfig) -> Result<(), HelloRefused> {
    let hello = match reader.next().await {
        None => return Err(HelloRefused::Closed),
        Some(Err(WireError::Io(e))) => return Err(HelloRefused::Failed(e)),
        Some(Err(WireError::Format(e))) => return Err(HelloRefused::NotOstm(e)),
        Some(Ok(ToHost::Hello(h))) => h,
        Some(Ok(other)) => return Err(HelloRefused::NotHello(name(&other))),
    };
    if hello.version != VERSION {
        return Err(HelloRefused::Version(hello.version));
    }
    if hello.role != PeerRole::Viewer as u8 {
        return Err(HelloRefused::Role(hello.role));
    }
    if let Some(token) = &cfg.token {
        // Constant time in the token's bytes, so timing does not reveal a matching prefix.
        let matches: bool = hello.token.as_slice().ct_eq(token.as_bytes()).into();
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

/// Sends the refusal's end, closes our side, and, when the peer spoke the protocol, gives
/// it a moment to close its own, so the end message is read rather than lost to a reset.
async fn refuse(writer: &mut Writer, mut reader: Reader, refusal: Refusal, stall: Duration) {
    let sent = timeout(stall.min(HELLO_TIMEOUT), async {
        write_frames(writer, &encode(&ToViewer::End(refusal.end))).await?;
        writer.shutdown().await
    })
    .await;
    if refusal.linger && matches!(sent, Ok(Ok(()))) {
        let _ = timeout(LINGER, async {
            while let Some(Ok(_)) = reader.next().await {}
        })
        .await;
    }
}

/// Writes the frames within the stall timeout; on failure, why the viewer is gone.
async fn send_frames(
    writer: &mut Writer,
    frames: &[EncodedFrame],
    stall: Duration,
) -> Result<(), Why> {
    match timeout(stall, write_frames(writer, frames)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(failed(e)),
        Err(_) => Err(Why::Stalled(stall)),
    }
}

/// [`send_frames`] until the stream's time to deliver is over (`over` cancelled).
async fn deliver(
    writer: &mut Writer,
    frames: &[EncodedFrame],
    cfg: &ConnConfig,
) -> Result<(), Why> {
    tokio::select! {
        sent = send_frames(writer, frames, cfg.stall) => sent,
        () = cfg.delivery_over.cancelled() => Err(Why::Undelivered),
    }
}

/// The bytes in the socket `fd` that the peer has not acknowledged yet (sent or not);
/// `None` if the kernel does not say.
fn unacknowledged(fd: RawFd) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is the connection's socket, open while its writer is (the caller holds
    // it); TIOCOUTQ (SIOCOUTQ) only writes the count into `n`.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(u64::try_from(n).unwrap_or(0))
}

/// Why the viewer is gone after a write failed with `e`.
fn failed(e: std::io::Error) -> Why {
    match e.kind() {
        // The viewer closed its side (a reset when it left unread records behind).
        std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted => Why::Closed,
        _ => Why::WriteFailed(e),
    }
}

/// What woke a connection that waited.
enum Woken {
    /// The reader's message (`None`: the reader is gone).
    Control(Option<Control>),
    /// Records may have come (or the fan-out handed the writer back).
    Records,
    /// The heartbeat's timer fired.
    Beat,
}

/// Where the writer goes once it has seen to what woke it.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// Take the records past the viewer's position.
    Take,
    /// The last take left nothing past the viewer's position: wait before looking again.
    Wait,
}

impl Then {
    fn turn(self) -> Turn {
        match self {
            Then::Take => Turn::Take,
            Then::Wait => Turn::Wait,
        }
    }
}

/// The attached writer's states: each turn goes from one to the next. No timer is set
/// per record: the heartbeat's is moved only when it fires.
enum Turn {
    /// See to what woke the writer (else to a message of the reader's that waits), then
    /// go on as `Then` says. What the reader sends is rare: looked at only when there is
    /// something.
    Look(Option<Woken>, Then),
    /// Take the records past the viewer's position from the hub's shared ring.
    Take,
    /// Caught up: wait for records, the reader or the heartbeat's timer (a plain-TCP
    /// writer parked for the fan-out, which writes the next records itself).
    Wait,
    /// Write the frame list.
    Write(Write),
    /// Send this end (or, `None`, only close) and leave.
    Stop(Option<End>),
    /// The viewer is gone.
    Gone(Why),
}

/// A write of the frame list, and what follows it.
struct Write {
    /// The step the frames bring the viewer to, when they carry records or a snapshot.
    reaches: Option<u64>,
    /// The heartbeat's timer fired: set it again once this write is made.
    rearm: bool,
    /// What woke the writer while it waited, seen to after the write.
    woken: Option<Woken>,
    then: Then,
}

impl Write {
    /// A write that brings the viewer to no new step.
    fn plain(then: Then) -> Turn {
        Turn::Write(Write {
            reaches: None,
            rearm: false,
            woken: None,
            then,
        })
    }
}

/// An attached viewer's writer, between turns.
struct Attached<'a> {
    id: u64,
    peer: SocketAddr,
    hub: &'a Hub,
    cfg: &'a ConnConfig,
    /// The number of the next record to send.
    position: u64,
    /// The frames of the next write.
    frames: Vec<EncodedFrame>,
    /// When the last write that completed was made.
    last_sent: Instant,
    heartbeat: Pin<Box<tokio::time::Sleep>>,
    ctl: mpsc::Receiver<Control>,
    /// Plain TCP: the slot where the writer parks for the fan-out.
    direct: Option<Arc<Direct>>,
    /// The socket (for what the viewer has taken while the connection lingers).
    fd: RawFd,
    left: Left,
}

/// Streams to an attached viewer until the stream ends, the viewer goes, or it stalls;
/// returns how it left. The welcome and the attach snapshot first; then, turn by turn
/// ([`Turn`]): what the viewer's reader asks for first, then the records past the viewer's
/// position in the hub's shared ring; with nothing to send, it waits for the fan-out, the
/// reader or the heartbeat interval.
async fn stream_to(
    mut writer: Writer,
    reader: Reader,
    joined: Joined,
    (peer, fd): (SocketAddr, RawFd),
    hub: &Arc<Hub>,
    fan_out: &FanOut,
    cfg: &ConnConfig,
) -> Left {
    let Joined {
        id,
        world,
        position,
    } = joined;
    let mut left = Left {
        step: world.step,
        resyncs: 0,
        why: Why::Closed,
    };
    let hello = [
        ToViewer::Welcome(cfg.welcome),
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world,
        },
    ];
    let first: Vec<EncodedFrame> = hello.iter().flat_map(encode).collect();
    if let Err(why) = send_frames(&mut writer, &first, cfg.stall).await {
        note_stall(hub, &why);
        left.why = why;
        return left;
    }
    let (ctl_tx, ctl) = mpsc::channel::<Control>(8);
    let read_task =
        tokio::spawn(read_loop(reader, ctl_tx, hub.clone(), cfg.silence).in_current_span());
    // Plain TCP: the fan-out writes to it directly whenever it is caught up.
    let direct = matches!(writer, Writer::Tcp(_)).then(|| {
        let direct = Arc::new(Direct::new());
        fan_out.register(hub, &direct);
        direct
    });
    let mut a = Attached {
        id,
        peer,
        hub,
        cfg,
        position,
        frames: Vec::new(),
        last_sent: Instant::now(),
        heartbeat: Box::pin(tokio::time::sleep(cfg.heartbeat)),
        ctl,
        direct,
        fd,
        left,
    };
    let mut turn = Turn::Look(None, Then::Take);
    loop {
        turn = match turn {
            Turn::Look(woken, then) => a.look(woken, then),
            Turn::Take => {
                let taken = a.hub.take(&mut a.position, BATCH, &mut a.frames);
                a.taken(taken)
            }
            Turn::Wait => match a.direct.clone() {
                Some(direct) => match a.wait_parked(&direct, writer).await {
                    Ok((back, next)) => {
                        writer = back;
                        next
                    }
                    Err(why) => {
                        a.left.why = why;
                        break;
                    }
                },
                None => a.wait_woken().await,
            },
            Turn::Write(w) => a.write(&mut writer, w).await,
            Turn::Stop(end) => {
                a.stop(&mut writer, end).await;
                break;
            }
            Turn::Gone(why) => {
                a.left.why = why;
                break;
            }
        }
    }
    read_task.abort();
    a.left
}

impl Attached<'_> {
    fn look(&mut self, woken: Option<Woken>, then: Then) -> Turn {
        match woken {
            Some(Woken::Control(c)) => self.control(c, then),
            Some(Woken::Beat) => self.beat(then),
            Some(Woken::Records) | None if self.ctl.is_empty() => then.turn(),
            _ => {
                let c = self.ctl.try_recv().ok();
                self.control(c, then)
            }
        }
    }

    /// The reader's message.
    fn control(&mut self, c: Option<Control>, then: Then) -> Turn {
        match c {
            Some(Control::Send(f)) => {
                self.frames.push(f);
                Write::plain(then)
            }
            Some(Control::Close(end)) => Turn::Stop(Some(*end)),
            Some(Control::Gone) | None => Turn::Stop(None),
        }
    }

    /// The heartbeat's timer fired: a heartbeat when nothing was sent for the interval
    /// (the timer is set again after the write), else the timer set to the interval after
    /// the last write.
    fn beat(&mut self, then: Then) -> Turn {
        let due = self.last_sent + self.cfg.heartbeat;
        if Instant::now() < due {
            self.heartbeat.as_mut().reset(due);
            return then.turn();
        }
        self.frames.extend(encode(&ToViewer::Heartbeat {
            host_step: self.hub.step(),
        }));
        Turn::Write(Write {
            reaches: None,
            rearm: true,
            woken: None,
            then,
        })
    }

    /// What a take from the hub's ring found at the viewer's position.
    fn taken(&mut self, taken: Take) -> Turn {
        match taken {
            Take::Nothing => Turn::Wait,
            Take::Records { after, more } => {
                with_host_step(&mut self.frames, after, self.hub.step());
                Turn::Write(Write {
                    reaches: Some(after),
                    rearm: false,
                    woken: None,
                    then: if more { Then::Take } else { Then::Wait },
                })
            }
            // The next take says so if the stream has ended meanwhile.
            Take::Behind => match self.hub.join(Some(self.id)) {
                Some(again) => self.resync(again),
                None => self.look(None, Then::Take),
            },
            Take::Ended(end) => Turn::Stop(Some(end)),
        }
    }

    /// The viewer fell more than the queue behind: a snapshot of the host's step, and its
    /// records from there.
    fn resync(&mut self, again: Joined) -> Turn {
        let left = &mut self.left;
        left.resyncs += 1;
        if left.resyncs == 1 {
            info!(
                step = left.step,
                to = again.world.step,
                "viewer {} fell more than the queue behind at step {}: resynced from the host's snapshot at step {} (later resyncs are counted in its leave line)",
                self.peer,
                left.step,
                again.world.step
            );
        } else {
            debug!(step = again.world.step, "resync");
        }
        let reaches = Some(again.world.step);
        self.position = again.position;
        self.frames.extend(encode(&ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world: again.world,
        }));
        Turn::Write(Write {
            reaches,
            rearm: false,
            woken: None,
            then: Then::Take,
        })
    }

    /// Caught up on plain TCP: parks the writer for the fan-out, which writes the next
    /// records itself, and waits for what it cannot write, the reader or the heartbeat.
    /// Gives the writer back with the next turn; `Err` only if the writer was lost.
    async fn wait_parked(
        &mut self,
        direct: &Direct,
        writer: Writer,
    ) -> Result<(Writer, Turn), Why> {
        let woken = direct.woken();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let parked = direct.park(
            self.hub,
            writer,
            self.position,
            self.left.step,
            self.last_sent,
        );
        if let Err(back) = parked {
            // Records came since the take (or the end): take them.
            return Ok((back, self.look(None, Then::Take)));
        }
        let woken = tokio::select! {
            biased;
            c = self.ctl.recv() => Woken::Control(c),
            () = &mut woken => Woken::Records,
            () = &mut self.heartbeat => Woken::Beat,
        };
        let Some(back) = direct.unpark() else {
            // Not reached: only this task takes the writer back.
            return Err(Why::WriterLost);
        };
        self.position = back.position;
        self.left.step = back.step;
        self.last_sent = back.last_sent;
        let next = match back.handed {
            None | Some(Handed::Behind) => Turn::Look(Some(woken), Then::Take),
            Some(Handed::Failed(e)) => Turn::Gone(failed(e)),
            // The frame the fan-out's write stopped in is completed before anything else
            // is written.
            Some(Handed::Rest { frames, after }) => {
                self.frames.extend(frames);
                Turn::Write(Write {
                    reaches: Some(after),
                    rearm: false,
                    woken: Some(woken),
                    then: Then::Take,
                })
            }
        };
        Ok((back.writer, next))
    }

    /// Caught up on TLS: registers for the fan-out's wake before looking again, so that a
    /// record published in between is not missed, then waits for it, the reader or the
    /// heartbeat.
    async fn wait_woken(&mut self) -> Turn {
        let hub = self.hub;
        let notified = hub.published().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match hub.take(&mut self.position, BATCH, &mut self.frames) {
            Take::Nothing => {}
            taken => return self.taken(taken),
        }
        let woken = tokio::select! {
            biased;
            c = self.ctl.recv() => Woken::Control(c),
            () = &mut notified => Woken::Records,
            () = &mut self.heartbeat => Woken::Beat,
        };
        Turn::Look(Some(woken), Then::Wait)
    }

    /// Writes the frame list within the stall timeout.
    async fn write(&mut self, writer: &mut Writer, w: Write) -> Turn {
        if let Err(why) = deliver(writer, &self.frames, self.cfg).await {
            note_stall(self.hub, &why);
            return Turn::Gone(why);
        }
        self.frames.clear();
        self.last_sent = Instant::now();
        if let Some(step) = w.reaches {
            self.left.step = step;
        }
        if w.rearm {
            let next = self.last_sent + self.cfg.heartbeat;
            self.heartbeat.as_mut().reset(next);
        }
        Turn::Look(w.woken, w.then)
    }

    /// Sends the end, if any, closes the sending side and lingers: waits for the viewer
    /// to close its side, reading what it sends meanwhile (a socket closed with the
    /// viewer's bytes unread, or that receives some once closed, is reset, and a reset
    /// loses the viewer what it had still to read). It waits while the viewer goes on
    /// taking what was sent, and [`LINGER`] once it has taken all of it (or has taken
    /// none of it for that long), [`LINGER_MAX`] at most.
    async fn stop(&mut self, writer: &mut Writer, end: Option<End>) {
        let Some(end) = end else {
            return;
        };
        debug!(reason = end.reason.name(), "sending end");
        let sent = deliver(writer, &encode(&ToViewer::End(end.clone())), self.cfg).await;
        let closed = match sent {
            Ok(()) => writer.shutdown().await.is_ok(),
            Err(why) => {
                note_stall(self.hub, &why);
                self.left.why = why;
                return;
            }
        };
        if closed {
            self.linger().await;
        }
        self.left.why = Why::Ended(end);
    }

    /// Waits for the viewer to close its side (the reader then finishes), as
    /// [`Attached::stop`] says.
    async fn linger(&mut self) {
        let started = Instant::now();
        let mut left = unacknowledged(self.fd).unwrap_or(0);
        let mut taken_at = started;
        let mut look = tokio::time::interval(LINGER_POLL);
        loop {
            tokio::select! {
                c = self.ctl.recv() => if c.is_none() {
                    return;
                },
                _ = look.tick() => {
                    let now = unacknowledged(self.fd).unwrap_or(0);
                    if now < left {
                        taken_at = Instant::now();
                    }
                    left = now;
                    if taken_at.elapsed() >= LINGER || started.elapsed() >= LINGER_MAX {
                        return;
                    }
                }
            }
        }
    }
}

/// Counts a write that stalled.
fn note_stall(hub: &Hub, why: &Why) {
    if matches!(why, Why::Stalled(_) | Why::Undelivered) {
        hub.counters.stalled.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why the host closes an attached viewer's connection for what it did (the end's text).
#[derive(Debug, thiserror::Error)]
enum Misbehaved {
    #[error("nothing received for {} ms", .0.as_millis())]
    Silent(Duration),
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
    /// The end that closes the connection, at the host's step.
    fn end(self, hub: &Hub) -> End {
        let reason = match self {
            Misbehaved::Silent(_) => EndReason::Silent,
            Misbehaved::Malformed(_) | Misbehaved::SecondHello { .. } => {
                hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                EndReason::ProtocolError
            }
        };
        End {
            reason,
            text: self.to_string(),
            host_step: hub.step(),
        }
    }
}

async fn read_loop(
    mut reader: Reader,
    ctl: mpsc::Sender<Control>,
    hub: Arc<Hub>,
    silence: Duration,
) {
    loop {
        let at = reader.decoder().consumed();
        let msg = match timeout(silence, reader.next()).await {
            Err(_) => Err(Misbehaved::Silent(silence)),
            Ok(None) | Ok(Some(Err(WireError::Io(_)))) => {
                let _ = ctl.send(Control::Gone).await;
                return;
            }
            Ok(Some(Err(WireError::Format(e)))) => Err(Misbehaved::Malformed(e)),
            Ok(Some(Ok(ToHost::Hello(_)))) => Err(Misbehaved::SecondHello {
                peer: reader.decoder().name().to_string(),
                at,
            }),
            Ok(Some(Ok(m))) => Ok(m),
        };
        let msg = match msg {
            Ok(m) => m,
            Err(why) => {
                let end = why.end(&hub);
                let _ = ctl.send(Control::Close(Box::new(end))).await;
                return;
            }
        };
        match msg {
            ToHost::Heartbeat { viewer_step } => debug!(viewer_step, "heartbeat"),
            ToHost::DriftRequest { step } => {
                let reply = hub.drift(step);
                info!(step, status = ?reply.status, "drift request answered");
                let Some(frame) = encode(&ToViewer::DriftReply(reply)).pop() else {
                    continue;
                };
                if ctl.send(Control::Send(frame)).await.is_err() {
                    return;
                }
            }
            // Taken above.
            ToHost::Hello(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HelloRefused, Misbehaved, Why};
    use ostm_protocol::wire::{End, EndReason, VERSION};
    use ostm_protocol::FormatError;
    use std::time::Duration;

    /// The texts a viewer reads in its end message and an operator in the log, byte for
    /// byte as they were written by hand before these types.
    #[test]
    fn refusals_and_departures_read_as_they_always_have() {
        let p = "127.0.0.1:5000";
        let cases = [
            (HelloRefused::Closed, format!("{p}: at offset 0: closed before its hello")),
            (
                HelloRefused::Failed(std::io::Error::other("reset")),
                format!("{p}: at offset 0: failed before its hello: reset"),
            ),
            (
                HelloRefused::NotOstm(FormatError::new(p, 4, "expected magic")),
                format!("not an ostm viewer: {p}: at offset 4: expected magic"),
            ),
            (
                HelloRefused::NotHello("a heartbeat (0x03)"),
                format!("{p}: at offset 0: expected a hello (0x01) first, found a heartbeat (0x03)"),
            ),
            (
                HelloRefused::Version(9),
                format!(
                    "{p}: at offset 13: the host speaks protocol version {VERSION}, the viewer sent version 9"
                ),
            ),
            (
                HelloRefused::Role(2),
                format!("{p}: at offset 15: expected role 1 (viewer), found role 2"),
            ),
            (
                HelloRefused::NoToken,
                "this host requires a token; none was sent".to_string(),
            ),
            (HelloRefused::BadToken, "the token does not match".to_string()),
        ];
        for (why, text) in cases {
            assert_eq!(why.text(p, 0), text);
        }
        assert_eq!(
            HelloRefused::Role(2).text(p, 100),
            format!("{p}: at offset 115: expected role 1 (viewer), found role 2")
        );
        assert_eq!(
            Misbehaved::Silent(Duration::from_secs(10)).to_string(),
            "nothing received for 10000 ms"
        );
        let bad = FormatError::new(p, 40, "unknown message type 0x09");
        assert_eq!(
            Misbehaved::Malformed(bad.clone()).to_string(),
            bad.to_string()
        );
        assert_eq!(
            Misbehaved::SecondHello { peer: p.into(), at: 40 }.to_string(),
            format!(
                "{p}: at offset 40: expected a drift request (0x02) or heartbeat (0x03), found a second hello (0x01)"
            )
        );
        let end = End {
            reason: EndReason::Finished,
            text: "the host ran its 5 steps".into(),
            host_step: 5,
        };
        assert_eq!(
            Why::Ended(end).to_string(),
            format!(
                "ended {}: the host ran its 5 steps",
                EndReason::Finished.name()
            )
        );
        assert_eq!(Why::Closed.to_string(), "closed by the viewer");
        assert_eq!(
            Why::Stalled(Duration::from_millis(2500)).to_string(),
            "dropped: stalled: no write progress for 2500 ms"
        );
        assert_eq!(
            Why::WriteFailed(std::io::Error::other("broken")).to_string(),
            "dropped: write failed: broken"
        );
        assert_eq!(
            Why::WriterLost.to_string(),
            "dropped: the connection lost its writer"
        );
    }
}
