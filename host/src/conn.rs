//! One viewer's connection: the handshake, then a writer (this task) that sends the records
//! past the viewer's position in the hub's shared ring, heartbeats and drift replies, and a
//! reader task that answers what the viewer sends. Whatever the viewer does, only this
//! connection pays for it. A plain-TCP connection that has sent every record parks its
//! writer for the fan-out to write the next ones directly ([`crate::direct`]).

use crate::direct::{Direct, Handed};
use crate::hub::{Hub, Joined, Take};
use crate::pending::{Admitted, HELLO_TIMEOUT};
use futures::StreamExt;
use ostm_protocol::wire::{
    EncodedFrame, End, EndReason, HostCodec, PeerRole, SnapshotKind, ToHost, ToViewer, Welcome,
    VERSION,
};
use ostm_runtime::{HostFrameCodec, WireError};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, WriteHalf};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{timeout, Instant};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::FramedRead;
use tracing::{debug, info, warn, Instrument};

/// What every connection is configured with.
pub struct ConnConfig {
    /// The shared secret a viewer must send; never logged.
    pub token: Option<String>,
    /// TLS, when the host serves it.
    pub tls: Option<TlsAcceptor>,
    /// A write that makes no progress for this long drops the viewer.
    pub stall: Duration,
    /// Nothing received for this long drops the viewer.
    pub silence: Duration,
    /// Send a heartbeat after this long with nothing else sent.
    pub heartbeat: Duration,
    /// The welcome every viewer gets.
    pub welcome: Welcome,
}

/// The write side: frames are written as they are, shared, with no buffer of its own.
/// A plain-TCP one can also be written without a task (`try_write_vectored`), which the
/// fan-out does while the connection is caught up ([`crate::direct`]).
pub enum Writer {
    Tcp(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Writer::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Writer::Tcp(w) => w.is_write_vectored(),
            Writer::Tls(w) => w.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_flush(cx),
            Writer::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

type Reader = FramedRead<Box<dyn AsyncRead + Unpin + Send>, HostFrameCodec>;

/// What the reader task tells the writer.
enum Control {
    /// A frame to send (a drift reply).
    Send(EncodedFrame),
    Close(Box<End>),
    Gone,
}

/// Records sent in one write at most.
pub const BATCH: usize = 64;
/// The read buffer a connection starts with, in bytes: a viewer sends its hello (at most
/// 271 bytes with a 255-byte token), then 13-byte heartbeats and drift requests; the
/// buffer grows if a frame needs more.
const READ_BUFFER: usize = 320;
/// How long a refused or ended viewer is given to close its side before the socket drops.
const LINGER: Duration = Duration::from_secs(2);

/// Serves one connection until it ends. `waiting` is its place among the connections that
/// have not sent their hello yet (given up once the hello is read); `slots` the viewer
/// slots, one of which it takes once its hello is accepted.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    hub: Arc<Hub>,
    cfg: Arc<ConnConfig>,
    waiting: Admitted,
    slots: Arc<Semaphore>,
) {
    let span = tracing::info_span!("viewer", %peer);
    async move {
        let _ = stream.set_nodelay(true);
        let evicted = waiting.evicted.clone();
        let name = peer.to_string();
        let before_hello = async {
            let (r, w): (Box<dyn AsyncRead + Unpin + Send>, Writer) = match &cfg.tls {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(s) => {
                        let (r, w) = tokio::io::split(s);
                        (Box::new(r), Writer::Tls(w))
                    }
                    Err(e) => {
                        hub.counters.refused.fetch_add(1, Ordering::Relaxed);
                        info!("refused: TLS handshake failed: {e}");
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
        if let Err(refusal) = hello {
            hub.counters.refused.fetch_add(1, Ordering::Relaxed);
            info!(
                reason = refusal.end.reason.name(),
                "refused: {}", refusal.end.text
            );
            refuse(&mut writer, reader, refusal, cfg.stall).await;
            drop(waiting);
            return;
        }
        drop(waiting);
        let Ok(_permit) = slots.try_acquire_owned() else {
            hub.counters.refused.fetch_add(1, Ordering::Relaxed);
            info!("refused: the host is full");
            let end = End {
                reason: EndReason::Full,
                text: "the host serves its maximum number of viewers".into(),
                host_step: hub.step(),
            };
            refuse(
                &mut writer,
                reader,
                Refusal { end, linger: true },
                cfg.stall,
            )
            .await;
            return;
        };
        let Some(joined) = hub.join(None) else {
            let end = hub.ended().unwrap_or_else(|| End {
                reason: EndReason::Shutdown,
                text: "the stream has ended".into(),
                host_step: hub.step(),
            });
            refuse(
                &mut writer,
                reader,
                Refusal { end, linger: true },
                cfg.stall,
            )
            .await;
            return;
        };
        hub.counters.viewers.fetch_add(1, Ordering::Relaxed);
        hub.counters.viewers_total.fetch_add(1, Ordering::Relaxed);
        let (id, step) = (joined.id, joined.world.step);
        info!(id, step, "viewer {peer} attached at step {step}");
        let left = stream_to(writer, reader, joined, peer, &hub, &cfg).await;
        hub.counters.viewers.fetch_sub(1, Ordering::Relaxed);
        left.log(peer, id, hub.step());
    }
    .instrument(span)
    .await
}

/// How an attached viewer's stream stopped, for the operator's line when it leaves.
struct Left {
    /// The step the records sent bring the viewer to (its attach step if none were sent).
    step: u64,
    /// Times the viewer fell more than the queue behind and was resynced.
    resyncs: u64,
    why: Why,
}

/// Why an attached viewer left.
enum Why {
    /// The host sent an end: the stream ended (finished, shutdown, host error), or the
    /// host closed it for what the viewer did (silent, protocol error).
    Ended(End),
    /// The viewer closed its side (or its connection failed) first.
    Closed,
    /// A write to the viewer made no progress for the stall timeout.
    Stalled(Duration),
    /// A write to the viewer failed otherwise.
    Dropped(String),
}

impl Left {
    /// Logs `viewer ADDR left at step S: WHY`, one line, at `info` when the stream ended or
    /// the viewer closed, at `warn` when the viewer was dropped or closed for misbehaving.
    fn log(&self, peer: SocketAddr, id: u64, host_step: u64) {
        let (step, resyncs) = (self.step, self.resyncs);
        let (why, bad) = match &self.why {
            Why::Ended(end) => (
                format!("ended {}: {}", end.reason.name(), end.text),
                matches!(end.reason, EndReason::Silent | EndReason::ProtocolError),
            ),
            Why::Closed => ("closed by the viewer".to_string(), false),
            Why::Stalled(t) => (
                format!(
                    "dropped: stalled: no write progress for {} ms",
                    t.as_millis()
                ),
                true,
            ),
            Why::Dropped(e) => (format!("dropped: {e}"), true),
        };
        let tail = match resyncs {
            0 => String::new(),
            1 => " (resynced once)".to_string(),
            n => format!(" (resynced {n} times)"),
        };
        if bad {
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
}

/// The offset of the role byte in a hello frame: length 4, type 1, magic 8, version 2.
const HELLO_ROLE_AT: u64 = 15;
/// The offset of the version in a hello frame.
const HELLO_VERSION_AT: u64 = 13;

/// Reads the hello and checks version, role and token; `Err` is the refusal to send.
/// Every refusal's text names the peer and the offset it is about, as docs/protocol.md
/// ("Errors") gives them.
async fn handshake(
    reader: &mut Reader,
    hub: &Hub,
    cfg: &ConnConfig,
    peer: &str,
) -> Result<(), Refusal> {
    let refuse = |reason, at: u64, text: String, linger: bool| Refusal {
        end: End {
            reason,
            text: format!("{peer}: at offset {at}: {text}"),
            host_step: hub.step(),
        },
        linger,
    };
    let at = reader.decoder().consumed();
    let hello = match reader.next().await {
        None => {
            return Err(refuse(
                EndReason::NotAViewer,
                at,
                "closed before its hello".into(),
                false,
            ))
        }
        Some(Err(WireError::Io(e))) => {
            return Err(refuse(
                EndReason::NotAViewer,
                at,
                format!("failed before its hello: {e}"),
                false,
            ))
        }
        Some(Err(WireError::Format(e))) => {
            hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal {
                end: End {
                    reason: EndReason::NotAViewer,
                    text: format!("not an ostm viewer: {e}"),
                    host_step: hub.step(),
                },
                linger: false,
            });
        }
        Some(Ok(ToHost::Hello(h))) => h,
        Some(Ok(other)) => {
            hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
            return Err(refuse(
                EndReason::NotAViewer,
                at,
                format!("expected a hello (0x01) first, found {}", name(&other)),
                false,
            ));
        }
    };
    if hello.version != VERSION {
        return Err(refuse(
            EndReason::VersionMismatch,
            at + HELLO_VERSION_AT,
            format!(
                "the host speaks protocol version {VERSION}, the viewer sent version {}",
                hello.version
            ),
            true,
        ));
    }
    if hello.role != PeerRole::Viewer as u8 {
        return Err(refuse(
            EndReason::NotAViewer,
            at + HELLO_ROLE_AT,
            format!("expected role 1 (viewer), found role {}", hello.role),
            true,
        ));
    }
    if let Some(token) = &cfg.token {
        // Constant time in the token's bytes, so timing does not reveal a matching prefix.
        let matches: bool = hello.token.as_slice().ct_eq(token.as_bytes()).into();
        if !matches {
            let why = if hello.token.is_empty() {
                "this host requires a token; none was sent"
            } else {
                "the token does not match"
            };
            return Err(Refusal {
                end: End {
                    reason: EndReason::BadToken,
                    text: why.into(),
                    host_step: hub.step(),
                },
                linger: true,
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

/// Slices in one vectored write at most: a batch of records and the heartbeat ahead of it.
pub const MAX_SLICES: usize = BATCH + 1;

/// Writes the frames as they are (shared, not copied), in vectored writes, then flushes
/// (which TLS needs).
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frames: &[EncodedFrame],
) -> std::io::Result<()> {
    for chunk in frames.chunks(MAX_SLICES) {
        let mut slices = [IoSlice::new(&[]); MAX_SLICES];
        for (s, f) in slices.iter_mut().zip(chunk) {
            *s = IoSlice::new(&f.0);
        }
        let mut left = &mut slices[..chunk.len()];
        while !left.is_empty() {
            let n = writer.write_vectored(left).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut left, n);
        }
    }
    writer.flush().await
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

/// Why the viewer is gone after a write failed with `e`.
fn failed(e: std::io::Error) -> Why {
    match e.kind() {
        // The viewer closed its side (a reset when it left unread records behind).
        std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted => Why::Closed,
        _ => Why::Dropped(format!("write failed: {e}")),
    }
}

fn encode(msg: &ToViewer) -> Vec<EncodedFrame> {
    // Every message the host builds fits a frame; a failure here is logged and skipped.
    match HostCodec::encode_frame(msg) {
        Ok(f) => vec![f],
        Err(e) => {
            warn!("cannot encode a message: {e}");
            Vec::new()
        }
    }
}

/// Puts a heartbeat carrying the host's step ahead of a write of records when the host's
/// step is past `after`, the step the last of them brings the viewer to, so the viewer
/// learns how far behind it is from the host, not from the records it has.
pub fn with_host_step(frames: &mut Vec<EncodedFrame>, after: u64, host_step: u64) {
    if host_step > after {
        if let Some(beat) = encode(&ToViewer::Heartbeat { host_step }).pop() {
            frames.insert(0, beat);
        }
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

/// The heartbeat's timer fired: a heartbeat when nothing was sent for the interval
/// (`fired` stays set: the timer is set again after the write), else the timer set to the
/// interval after the last write.
fn beat(
    heartbeat: Pin<&mut tokio::time::Sleep>,
    fired: &mut bool,
    last_sent: Instant,
    hub: &Hub,
    cfg: &ConnConfig,
    frames: &mut Vec<EncodedFrame>,
) -> Next {
    let due = last_sent + cfg.heartbeat;
    if Instant::now() < due {
        heartbeat.reset(due);
        *fired = false;
        Next::Again
    } else {
        frames.extend(encode(&ToViewer::Heartbeat {
            host_step: hub.step(),
        }));
        Next::Write
    }
}

/// What the writer does next.
enum Next {
    /// Write what is in the frame list.
    Write,
    /// Look again (records or a control message may have come).
    Again,
    /// Stop: send this end, or (`None`) just close.
    Stop(Option<End>),
}

/// Streams to an attached viewer until the stream ends, the viewer goes, or it stalls;
/// returns how it left.
/// Each turn: what the viewer's reader asks for first, then the records past the viewer's
/// position in the hub's shared ring; with nothing to send, it waits for the fan-out, the
/// reader or the heartbeat interval. No timer is set per record: the heartbeat's is moved
/// only when it fires.
async fn stream_to(
    mut writer: Writer,
    reader: Reader,
    joined: Joined,
    peer: SocketAddr,
    hub: &Arc<Hub>,
    cfg: &ConnConfig,
) -> Left {
    let Joined {
        id,
        world,
        mut position,
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
        if matches!(why, Why::Stalled(_)) {
            hub.counters.stalled.fetch_add(1, Ordering::Relaxed);
        }
        left.why = why;
        return left;
    }
    let (ctl_tx, mut ctl_rx) = mpsc::channel::<Control>(8);
    let read_task =
        tokio::spawn(read_loop(reader, ctl_tx, hub.clone(), cfg.silence).in_current_span());
    let mut frames: Vec<EncodedFrame> = Vec::new();
    let mut last_sent = Instant::now();
    // Plain TCP: the fan-out writes to it directly whenever it is caught up.
    let direct = matches!(writer, Writer::Tcp(_)).then(|| {
        let direct = Arc::new(Direct::new());
        hub.register(&direct);
        direct
    });
    let heartbeat = tokio::time::sleep(cfg.heartbeat);
    tokio::pin!(heartbeat);
    let control = |c: Option<Control>, frames: &mut Vec<EncodedFrame>| match c {
        Some(Control::Send(f)) => {
            frames.push(f);
            Next::Write
        }
        Some(Control::Close(end)) => Next::Stop(Some(*end)),
        Some(Control::Gone) | None => Next::Stop(None),
    };
    // The last take left nothing past the viewer's position: wait before looking again.
    let mut caught_up = false;
    // The heartbeat's timer fired: set it again after the next write.
    let mut beat_fired = false;
    // What woke the writer while it waited, seen to at the top of the next turn.
    let mut held: Option<Woken> = None;
    // The step the frames being written bring the viewer to, when they carry records.
    let stop = loop {
        frames.clear();
        let mut writing: Option<u64> = None;
        // What the reader sends is rare: looked at only when there is something.
        let mut next = match held.take() {
            Some(Woken::Control(c)) => control(c, &mut frames),
            Some(Woken::Beat) => {
                beat_fired = true;
                beat(
                    heartbeat.as_mut(),
                    &mut beat_fired,
                    last_sent,
                    hub,
                    cfg,
                    &mut frames,
                )
            }
            Some(Woken::Records) | None if ctl_rx.is_empty() => Next::Again,
            _ => control(ctl_rx.try_recv().ok(), &mut frames),
        };
        if matches!(next, Next::Again) {
            let mut taken = if caught_up {
                Take::Nothing
            } else {
                hub.take(&mut position, BATCH, &mut frames)
            };
            if matches!(taken, Take::Nothing) {
                // Wait for records, the reader or the heartbeat interval; what woke the
                // writer is seen to at the top of the next turn.
                if let Some(direct) = &direct {
                    // Caught up: park the writer for the fan-out, which writes the next
                    // records itself, and wait for what it cannot write.
                    let woken = direct.woken();
                    tokio::pin!(woken);
                    woken.as_mut().enable();
                    match direct.park(hub, writer, position, left.step, last_sent) {
                        Err(back) => {
                            // Records came since the take (or the end): take them.
                            writer = back;
                            caught_up = false;
                        }
                        Ok(()) => {
                            held = Some(tokio::select! {
                                biased;
                                c = ctl_rx.recv() => Woken::Control(c),
                                () = &mut woken => Woken::Records,
                                () = &mut heartbeat => Woken::Beat,
                            });
                            let Some(back) = direct.unpark() else {
                                // Not reached: only this task takes the writer back.
                                left.why = Why::Dropped("the connection lost its writer".into());
                                read_task.abort();
                                return left;
                            };
                            writer = back.writer;
                            position = back.position;
                            left.step = back.step;
                            last_sent = back.last_sent;
                            caught_up = false;
                            match back.handed {
                                None | Some(Handed::Behind) => {}
                                Some(Handed::Failed(e)) => {
                                    left.why = failed(e);
                                    read_task.abort();
                                    return left;
                                }
                                // The frame the fan-out's write stopped in is completed
                                // before anything else is written.
                                Some(Handed::Rest {
                                    frames: rest,
                                    after,
                                }) => {
                                    frames.extend(rest);
                                    writing = Some(after);
                                    next = Next::Write;
                                }
                            }
                        }
                    }
                } else {
                    // Register for the fan-out's wake before looking again, so that a
                    // record published in between is not missed.
                    let notified = hub.published().notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    taken = hub.take(&mut position, BATCH, &mut frames);
                    if matches!(taken, Take::Nothing) {
                        held = Some(tokio::select! {
                            biased;
                            c = ctl_rx.recv() => Woken::Control(c),
                            () = &mut notified => Woken::Records,
                            () = &mut heartbeat => Woken::Beat,
                        });
                    }
                }
            }
            match taken {
                Take::Nothing => {}
                Take::Records { after, more } => {
                    caught_up = !more;
                    with_host_step(&mut frames, after, hub.step());
                    next = Next::Write;
                    writing = Some(after);
                }
                Take::Behind => {
                    // The next take says so if the stream has ended meanwhile.
                    if let Some(again) = hub.join(Some(id)) {
                        left.resyncs += 1;
                        if left.resyncs == 1 {
                            info!(
                                step = left.step,
                                to = again.world.step,
                                "viewer {peer} fell more than the queue behind at step {}: resynced from the host's snapshot at step {} (later resyncs are counted in its leave line)",
                                left.step,
                                again.world.step
                            );
                        } else {
                            debug!(step = again.world.step, "resync");
                        }
                        writing = Some(again.world.step);
                        position = again.position;
                        caught_up = false;
                        frames.extend(encode(&ToViewer::Snapshot {
                            kind: SnapshotKind::Resync,
                            world: again.world,
                        }));
                        next = Next::Write;
                    }
                }
                Take::Ended(end) => next = Next::Stop(Some(end)),
            }
        }
        match next {
            Next::Again => continue,
            Next::Stop(end) => break end,
            Next::Write => {}
        }
        if let Err(why) = send_frames(&mut writer, &frames, cfg.stall).await {
            if matches!(why, Why::Stalled(_)) {
                hub.counters.stalled.fetch_add(1, Ordering::Relaxed);
            }
            left.why = why;
            read_task.abort();
            return left;
        }
        last_sent = Instant::now();
        if let Some(step) = writing {
            left.step = step;
        }
        if beat_fired {
            heartbeat.as_mut().reset(last_sent + cfg.heartbeat);
            beat_fired = false;
        }
    };
    if let Some(end) = stop {
        debug!(reason = end.reason.name(), "sending end");
        let sent = send_frames(&mut writer, &encode(&ToViewer::End(end.clone())), cfg.stall).await;
        if sent.is_ok() && writer.shutdown().await.is_ok() {
            // Wait for the viewer to close its side (the reader then finishes).
            let _ = timeout(LINGER, async { while ctl_rx.recv().await.is_some() {} }).await;
        }
        left.why = Why::Ended(end);
    }
    read_task.abort();
    left
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
            Err(_) => {
                let text = format!("nothing received for {} ms", silence.as_millis());
                let _ = ctl
                    .send(Control::Close(Box::new(End {
                        reason: EndReason::Silent,
                        text,
                        host_step: hub.step(),
                    })))
                    .await;
                return;
            }
            Ok(None) | Ok(Some(Err(WireError::Io(_)))) => {
                let _ = ctl.send(Control::Gone).await;
                return;
            }
            Ok(Some(Err(WireError::Format(e)))) => {
                hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                let _ = ctl
                    .send(Control::Close(Box::new(End {
                        reason: EndReason::ProtocolError,
                        text: e.to_string(),
                        host_step: hub.step(),
                    })))
                    .await;
                return;
            }
            Ok(Some(Ok(m))) => m,
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
            ToHost::Hello(_) => {
                hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                let end = End {
                    reason: EndReason::ProtocolError,
                    text: format!(
                        "{}: at offset {at}: expected a drift request (0x02) or heartbeat (0x03), found a second hello (0x01)",
                        reader.decoder().name()
                    ),
                    host_step: hub.step(),
                };
                let _ = ctl.send(Control::Close(Box::new(end))).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn frames(steps: &[u8]) -> Vec<EncodedFrame> {
        steps
            .iter()
            .map(|&s| EncodedFrame(Bytes::from(vec![s])))
            .collect()
    }

    /// The bytes of a heartbeat frame from docs/protocol.md: length 9, type 0x84, step.
    fn heartbeat(step: u64) -> Vec<u8> {
        let mut f = vec![9, 0, 0, 0, 0x84];
        f.extend_from_slice(&step.to_le_bytes());
        f
    }

    fn bytes(frames: &[EncodedFrame]) -> Vec<Vec<u8>> {
        frames.iter().map(|f| f.0.to_vec()).collect()
    }

    #[test]
    fn a_write_behind_the_host_starts_with_its_step() {
        let mut f = frames(&[11, 12]);
        with_host_step(&mut f, 12, 40);
        assert_eq!(bytes(&f), vec![heartbeat(40), vec![11], vec![12]]);
    }

    #[test]
    fn a_write_that_reaches_the_host_carries_records_only() {
        let mut f = frames(&[11, 12]);
        with_host_step(&mut f, 12, 12);
        assert_eq!(bytes(&f), vec![vec![11], vec![12]]);
    }

    /// A writer that takes at most `n` bytes per call, like a socket with little room.
    struct Trickle {
        got: Vec<u8>,
        n: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.n);
            self.got.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Partial writes resume where the kernel stopped, across frames and past the number
    /// of slices one vectored write takes.
    #[tokio::test]
    async fn frames_are_written_whole_and_in_order_through_partial_writes() {
        let all: Vec<EncodedFrame> = (0..200u8)
            .map(|i| EncodedFrame(Bytes::from(vec![i; 1 + i as usize % 7])))
            .collect();
        let want: Vec<u8> = all.iter().flat_map(|f| f.0.to_vec()).collect();
        for n in [1, 3, 1000] {
            let mut w = Trickle { got: Vec::new(), n };
            write_frames(&mut w, &all).await.unwrap();
            assert_eq!(w.got, want, "{n} bytes per write");
        }
    }
}
