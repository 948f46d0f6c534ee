//! The viewer's reader: connects, does the handshake, and reads the host's messages as
//! fast as they arrive into the [`Spool`], on a thread of its own, whatever the verifier
//! is doing. It sends the viewer's heartbeats and drift requests, and, with `--reconnect`,
//! connects again after a lost connection (docs/protocol.md, "Reconnecting").

use super::shared::{Ended, Shared, DRIFT_REPLY_TIMEOUT, HOST_CLOSED, NATS_READER_STOPPED};
use super::spool::{Full, Item, Spool};
use super::tls::{explain, Tls};
use super::watermark::{self, Watermark};
use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use ostm_protocol::wire::{
    DriftReply, End, EndReason, Hello, PeerRole, SnapshotKind, ToHost, ToViewer, ViewerCodec,
    Welcome, HEARTBEAT_MS, SILENCE_TIMEOUT_MS, VERSION,
};
use ostm_protocol::{FormatError, World};
use ostm_runtime::WireError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::codec::{Framed, FramedWrite};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

/// How long to wait for the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait, once connected, for the first byte from the host (its TLS handshake's
/// or its welcome's): an ostm host answers a hello at once, so a peer that sends nothing
/// this long is not one, or is not answering. Once bytes come, the whole welcome has the
/// silence timeout ([`SILENCE`]) from the connection.
pub const WELCOME_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the viewer waits for anything from the host.
pub const SILENCE: Duration = Duration::from_millis(SILENCE_TIMEOUT_MS as u64);
/// The first wait before reconnecting; each failed attempt doubles it up to
/// [`RECONNECT_MAX_WAIT`].
pub const RECONNECT_FIRST_WAIT: Duration = Duration::from_millis(250);
/// Messages the reader hands to the spool at once, at most.
const BATCH: usize = 1024;
/// The read buffer's size: a fast host's records are taken in reads of up to this much,
/// not of tokio-util's default 8 KiB (fewer system calls and wake-ups per record).
const READ_BUFFER: usize = 256 * 1024;
/// The longest wait between two reconnection attempts.
pub const RECONNECT_MAX_WAIT: Duration = Duration::from_secs(5);

/// What the reader needs to know.
#[derive(Debug, Clone, Default)]
pub struct Dial {
    pub addr: String,
    pub token: Option<String>,
    /// Reconnect after a lost connection, for at most this long without success.
    pub reconnect: Option<Duration>,
    /// Test only: read at most this many records per second, with a small receive buffer.
    pub throttle_read: Option<u32>,
    /// TLS, when asked for.
    pub tls: Option<Tls>,
}

/// The reader's thread and what the verifier uses to reach the host.
pub struct Network {
    thread: Option<std::thread::JoinHandle<()>>,
    cancel: CancellationToken,
    to_host: mpsc::UnboundedSender<ToHost>,
    /// Drift replies, and `Err(why)` when none will come (the connection that would carry
    /// it has ended, or no host answered the request).
    pub replies: std::sync::mpsc::Receiver<Result<DriftReply, String>>,
    /// Why no reply can come once the reader's thread has ended.
    pub gone: &'static str,
    /// How long the verifier waits for the reader's answer to a drift request: over NATS
    /// longer than the reader's own wait, so that the reader's reason is the one reported.
    pub reply_wait: std::time::Duration,
}

impl Network {
    /// Starts the reader on its own thread; everything it reads goes to `spool`. With
    /// `nats`, the session is read from NATS JetStream instead of a TCP host.
    pub fn start(
        dial: Dial,
        nats: Option<super::nats::Dial>,
        spool: Arc<Spool>,
        shared: Arc<Shared>,
    ) -> std::io::Result<Network> {
        let (gone, reply_wait) = if nats.is_some() {
            (NATS_READER_STOPPED, super::nats::DRIFT_WAIT)
        } else {
            (HOST_CLOSED, DRIFT_REPLY_TIMEOUT)
        };
        let cancel = CancellationToken::new();
        let (to_host, from_verifier) = mpsc::unbounded_channel();
        let (reply_tx, replies) = std::sync::mpsc::channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let c = cancel.clone();
        let thread = std::thread::Builder::new()
            .name("ostm-reader".into())
            .spawn(move || {
                let sp = spool.clone();
                rt.block_on(async move {
                    let read = async {
                        match nats {
                            Some(n) => {
                                let ended = super::nats::run(
                                    n,
                                    sp.clone(),
                                    shared.clone(),
                                    from_verifier,
                                    reply_tx,
                                )
                                .await;
                                if let Ended::Lost(why) | Ended::Broken(why) = ended {
                                    let why = why.to_string();
                                    let _ = sp.push(Item::Lost { why, last: true });
                                }
                            }
                            None => {
                                let mut reader = Reader {
                                    dial,
                                    spool: sp,
                                    shared: shared.clone(),
                                    cancel: c.clone(),
                                    from_verifier,
                                    replies: reply_tx,
                                };
                                reader.run().await
                            }
                        }
                    };
                    tokio::select! {
                        _ = read => {}
                        _ = ostm_runtime::signal::stop_signal() => {
                            shared.interrupted.interrupt();
                        }
                        _ = c.cancelled() => {}
                    }
                });
                spool.close();
            })?;
        Ok(Network {
            thread: Some(thread),
            cancel,
            to_host,
            replies,
            gone,
            reply_wait,
        })
    }

    /// Sends a message to the host on the current connection (dropped if there is none).
    pub fn send(&self, m: ToHost) {
        let _ = self.to_host.send(m);
    }

    /// Stops the reader and waits for its thread (closing the connection).
    pub fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Whether `--reconnect` connects again after the host ended the stream with `e`: after
/// every end but `finished` (the host ran what it was asked to; nothing follows).
pub fn reconnects_after(e: &End) -> bool {
    e.reason != EndReason::Finished
}

/// A connection's byte stream: plain TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection: the framed stream, and its TCP socket for the receive mark.
struct Conn {
    framed: Framed<Box<dyn Io>, Framing>,
    fd: Option<std::os::fd::RawFd>,
}

/// The viewer's codec, with each decoded message's offset in the connection's stream
/// (the offset of its frame's first byte), for errors that name it.
struct Framing(ViewerCodec);

impl Decoder for Framing {
    type Item = (u64, ToViewer);
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<(u64, ToViewer)>, WireError> {
        let at = self.0.consumed();
        Ok(self.0.decode(src)?.map(|m| (at, m)))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<(u64, ToViewer)>, WireError> {
        let at = self.0.consumed();
        Ok(self.0.decode_eof(src)?.map(|m| (at, m)))
    }
}

impl Encoder<ToHost> for Framing {
    type Error = WireError;

    fn encode(&mut self, m: ToHost, dst: &mut BytesMut) -> Result<(), WireError> {
        Ok(self.0.encode(&m, dst)?)
    }
}

/// Why a connection attempt failed.
enum Refused {
    /// The host could not be reached or the connection broke during the handshake: worth
    /// another attempt.
    Unreachable(Lost),
    /// The host answered and refused, or spoke another protocol: final.
    Final(Lost),
}

/// Why the TCP reader stopped reading a host (a connection attempt or a stream); the
/// text the verdict gives (the spool carries it as [`Item::Lost`]'s `why`).
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    #[error("cannot connect to {addr}: timed out")]
    ConnectTimedOut { addr: String },
    #[error("cannot connect to {addr}: {err}")]
    Connect { addr: String, err: std::io::Error },
    /// Not a byte within [`WELCOME_TIMEOUT`] of the hello.
    #[error(
        "{addr} sent nothing within {} ms of the hello: it is not an ostm host, or not \
         answering{}",
        WELCOME_TIMEOUT.as_millis(),
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
    /// The TLS handshake failed: [`explain`]'s sentence.
    #[error("{0}")]
    Tls(String),
    #[error("cannot send the hello to {addr}: {err}")]
    SendHello { addr: String, err: WireError },
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
    #[error("connection lost: {0}")]
    Connection(std::io::Error),
    #[error("gave up reconnecting after {secs} s: {why}")]
    GaveUp { secs: u64, why: Box<Lost> },
    #[error("cannot spool the host's records to disk: {0}")]
    Spool(std::io::Error),
    /// The spool's bound (`--spool-max`) reached: a [`Full`].
    #[error("{0}")]
    SpoolBound(std::io::Error),
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

struct Reader {
    dial: Dial,
    spool: Arc<Spool>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    from_verifier: mpsc::UnboundedReceiver<ToHost>,
    replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
}

impl Reader {
    fn push(&self, item: Item) -> bool {
        match self.spool.push(item) {
            Ok(()) => true,
            Err(e) => {
                self.lost(Lost::Spool(e), true);
                false
            }
        }
    }

    fn lost(&self, why: Lost, last: bool) {
        let why = why.to_string();
        let _ = self.spool.push(Item::Lost { why, last });
    }

    async fn run(&mut self) {
        let mut attached_once = false;
        let mut failing_since: Option<Instant> = None;
        let mut wait = RECONNECT_FIRST_WAIT;
        loop {
            let attempt = connect(&self.dial).await;
            let (conn, welcome, world) = match attempt {
                Ok(c) => c,
                Err(Refused::Final(why)) => return self.lost(why, true),
                Err(Refused::Unreachable(why)) => {
                    let Some(budget) = self.dial.reconnect.filter(|_| attached_once) else {
                        return self.lost(why, true);
                    };
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= budget {
                        let secs = since.elapsed().as_secs();
                        let why = Box::new(why);
                        return self.lost(Lost::GaveUp { secs, why }, true);
                    }
                    info!(wait_ms = wait.as_millis() as u64, "reconnecting: {why}");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RECONNECT_MAX_WAIT);
                    continue;
                }
            };
            attached_once = true;
            wait = RECONNECT_FIRST_WAIT;
            self.shared.connection.fetch_add(1, Ordering::SeqCst);
            // Each connection's host says its own step: a host restarted behind the step
            // the old one had reached must not leave the lag counted from the old one.
            self.shared.host_step.store(world.step, Ordering::Relaxed);
            let attached = Attached {
                setup: world.setup(),
                link: world.link(),
                step: world.step,
            };
            if !self.push(Item::Attached { welcome, world }) {
                return;
            }
            let ended = self.stream(conn, attached).await;
            let _ = self.replies.send(Err(HOST_CLOSED.into()));
            let again = self.dial.reconnect.is_some();
            match ended {
                Ended::Cancelled => return,
                // The spool's bound (`--spool-max`): join again at the host's step once
                // the verifier has taken what was spooled, as after a lost connection.
                Ended::Broken(Lost::Spool(e)) if Full::is(&e) => {
                    self.lost(Lost::SpoolBound(e), false);
                    if !self.spool_drained().await {
                        return;
                    }
                }
                Ended::Broken(why) => return self.lost(why, true),
                Ended::End(e) if !(again && reconnects_after(&e)) => return,
                Ended::End(_) => {}
                Ended::Lost(why) if !again => return self.lost(why, true),
                Ended::Lost(why) => self.lost(why, false),
            }
            failing_since = Some(Instant::now());
        }
    }

    /// Waits until the verifier has taken everything in the spool's file; false when the
    /// session was cancelled first.
    async fn spool_drained(&self) -> bool {
        while !self.spool.disk_drained() {
            tokio::select! {
                _ = self.cancel.cancelled() => return false,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        true
    }

    /// Reads one connection's stream into the spool, and sends heartbeats and the
    /// verifier's messages, until it ends.
    async fn stream(&mut self, conn: Conn, attached: Attached) -> Ended<Lost> {
        let addr = self.dial.addr.clone();
        // The read side decodes straight from its buffer: every message one read brought
        // is decoded in one loop, with no stream poll and no lock per message.
        let mut mark = Watermark::new(conn.fd);
        let parts = conn.framed.into_parts();
        let mut codec = parts.codec;
        let mut buf = parts.read_buf;
        let (mut rd, wr) = tokio::io::split(parts.io);
        let mut sink = FramedWrite::new(wr, Framing(ViewerCodec::new(addr.clone())));
        *sink.write_buffer_mut() = parts.write_buf;
        let writer = send_loop(sink, self.shared.clone(), &mut self.from_verifier);
        let mut intake = Intake {
            addr,
            next_step: attached.step,
            attached,
            spool: &self.spool,
            shared: &self.shared,
            replies: &self.replies,
            throttle: self.dial.throttle_read,
            started: tokio::time::Instant::now(),
            records: 0,
            batch: Vec::with_capacity(BATCH),
        };
        let reader = async {
            let mut deadline = tokio::time::Instant::now() + SILENCE;
            // The silence deadline passed and the runtime has been made to look at the
            // socket once since (see below); cleared by every read that brings bytes.
            let mut looked_again = false;
            let mut eof = false;
            loop {
                let decoded = match intake.decode_all(&mut codec, &mut buf, eof).await {
                    Ok(decoded) => decoded,
                    Err(ended) => return ended,
                };
                if decoded {
                    deadline = tokio::time::Instant::now() + SILENCE;
                }
                // What has already arrived is read before the silence is judged: the
                // read comes first, so a viewer paused for longer than the silence
                // timeout reads what waits in its socket when it resumes (and see the
                // deadline's branch below).
                if buf.capacity() - buf.len() < READ_BUFFER / 2 {
                    buf.reserve(READ_BUFFER);
                }
                let read = tokio::select! {
                    biased;
                    r = rd.read_buf(&mut buf) => r,
                    _ = tokio::time::sleep(watermark::PATIENCE), if mark.raised() => {
                        mark.lower();
                        continue;
                    }
                    _ = tokio::time::sleep_until(deadline) => {
                        if !looked_again {
                            // The clock ran out, but the runtime may not have looked at
                            // the socket since: a process stopped (SIGSTOP, a suspended
                            // machine) comes back with its wait for the socket interrupted
                            // (EINTR) and its timers expired, so the timer is seen first
                            // and the socket's readiness not yet. Drop the receive mark
                            // (bytes under it are then reported), let the runtime poll the
                            // socket (a yield makes it look without waiting), and read
                            // again before judging.
                            looked_again = true;
                            mark.lower();
                            tokio::task::yield_now().await;
                            continue;
                        }
                        return Ended::Lost(Lost::Silent);
                    }
                };
                match read {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        looked_again = false;
                        mark.after_read(n);
                    }
                    Err(e) => return Ended::Lost(Lost::Connection(e)),
                }
            }
        };
        tokio::pin!(writer);
        tokio::pin!(reader);
        let cancel = self.cancel.clone();
        let mut writing = true;
        loop {
            tokio::select! {
                e = &mut reader => return e,
                // The writer stops only when the connection broke under it; the reader
                // goes on with what has arrived until it finds the end.
                _ = &mut writer, if writing => writing = false,
                _ = cancel.cancelled() => return Ended::Cancelled,
            }
        }
    }
}

/// The write side of a connection: a heartbeat every [`HEARTBEAT_MS`] and each message
/// the verifier sends, until the verifier hangs up or the connection breaks (the reader
/// finds out). Gives the sink back.
async fn send_loop<S>(
    mut sink: S,
    shared: Arc<Shared>,
    from_verifier: &mut mpsc::UnboundedReceiver<ToHost>,
) -> S
where
    S: futures::Sink<ToHost> + Unpin,
{
    let beat = Duration::from_millis(HEARTBEAT_MS as u64);
    let mut next_beat = tokio::time::Instant::now() + beat;
    loop {
        let msg = tokio::select! {
            _ = tokio::time::sleep_until(next_beat) => {
                next_beat = tokio::time::Instant::now() + beat;
                ToHost::Heartbeat { viewer_step: shared.viewer_step.load(Ordering::Relaxed) }
            }
            m = from_verifier.recv() => match m {
                Some(m) => m,
                None => return sink,
            },
        };
        if sink.send(msg).await.is_err() {
            // The connection is broken; the reader finds out.
            return sink;
        }
    }
}

/// The read side's handling of what it decodes: each message checked against the step
/// the stream stands at and batched into the spool, under one lock per [`BATCH`] items.
/// An `Err` is how the connection ended.
struct Intake<'a> {
    addr: String,
    attached: Attached,
    spool: &'a Spool,
    shared: &'a Shared,
    replies: &'a std::sync::mpsc::Sender<Result<DriftReply, String>>,
    /// A test's read throttle, in records a second.
    throttle: Option<u32>,
    started: tokio::time::Instant,
    /// Records read so far, counted only under the throttle.
    records: u64,
    /// The step the next record must carry.
    next_step: u64,
    batch: Vec<Item>,
}

impl Intake<'_> {
    /// Decodes everything already read in `buf` (at the end of the stream when `eof`)
    /// and hands it to the spool. Says whether any message was decoded.
    async fn decode_all(
        &mut self,
        codec: &mut Framing,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<bool, Ended<Lost>> {
        let mut decoded = false;
        loop {
            // Records are taken whole, as they came, and decoded by the verifier
            // (a test's read throttle counts them one by one instead).
            if self.throttle.is_none() {
                if let Some(run) = codec.0.take_records(buf, self.next_step) {
                    self.next_step = self.next_step.wrapping_add(run.count());
                    self.shared
                        .host_step
                        .fetch_max(self.next_step, Ordering::Relaxed);
                    decoded = true;
                    self.batch.push(Item::Records(run));
                    self.flush_if_full()?;
                    continue;
                }
            }
            let next = if eof {
                codec.decode_eof(buf)
            } else {
                codec.decode(buf)
            };
            let (at, msg) = match next {
                Ok(Some(m)) => m,
                Ok(None) if eof => return Err(self.abandon(Ended::Lost(Lost::ClosedWithoutEnd))),
                Ok(None) => break,
                Err(WireError::Format(e)) => {
                    return Err(self.abandon(Ended::Broken(Lost::Protocol(e))))
                }
                Err(WireError::Io(e)) => return Err(self.abandon(Ended::Lost(Lost::Connection(e)))),
            };
            decoded = true;
            self.handle(at, msg).await?;
            self.flush_if_full()?;
        }
        if let Err(e) = self.spool.push_all(&mut self.batch) {
            return Err(Ended::Broken(Lost::Spool(e)));
        }
        Ok(decoded)
    }

    /// What one decoded message does, `at` its offset in the stream.
    async fn handle(&mut self, at: u64, msg: ToViewer) -> Result<(), Ended<Lost>> {
        match msg {
            ToViewer::Record(r) if r.step != self.next_step => {
                let out_of_step = Lost::OutOfStep {
                    addr: self.addr.clone(),
                    at,
                    expected: self.next_step,
                    found: r.step,
                };
                return Err(self.abandon(Ended::Broken(out_of_step)));
            }
            ToViewer::Record(r) => {
                self.next_step = r.step.wrapping_add(1);
                self.shared
                    .host_step
                    .fetch_max(r.step.saturating_add(1), Ordering::Relaxed);
                self.batch.push(Item::Record(r));
                if let Some(per_second) = self.throttle {
                    self.records += 1;
                    let due = self.started
                        + Duration::from_secs_f64(self.records as f64 / per_second.max(1) as f64);
                    if let Err(e) = self.spool.push_all(&mut self.batch) {
                        return Err(Ended::Broken(Lost::Spool(e)));
                    }
                    tokio::time::sleep_until(due).await;
                }
            }
            ToViewer::Snapshot {
                kind: SnapshotKind::Resync,
                world,
            } => {
                let attached = &self.attached;
                if world.setup() != attached.setup || world.link() != attached.link {
                    let another = Lost::ResyncOfAnotherWorld {
                        addr: self.addr.clone(),
                        at,
                        attached: world_name(attached.setup, attached.link),
                        found: world_name(world.setup(), world.link()),
                    };
                    return Err(self.abandon(Ended::Broken(another)));
                }
                self.next_step = world.step;
                debug!(to = world.step, "resync snapshot");
                self.shared
                    .host_step
                    .fetch_max(world.step, Ordering::Relaxed);
                self.batch.push(Item::Resync(world));
            }
            ToViewer::Heartbeat { host_step } => {
                self.shared
                    .host_step
                    .fetch_max(host_step, Ordering::Relaxed);
            }
            ToViewer::DriftReply(d) => {
                let _ = self.replies.send(Ok(d));
            }
            ToViewer::End(e) => {
                self.batch.push(Item::End(e.clone()));
                if self.spool.push_all(&mut self.batch).is_err() {
                    return Err(Ended::Broken(Lost::SpoolEnd));
                }
                return Err(Ended::End(e));
            }
            other => {
                let unexpected = Lost::Unexpected {
                    addr: self.addr.clone(),
                    at,
                    found: name(&other),
                };
                return Err(self.abandon(Ended::Broken(unexpected)));
            }
        }
        Ok(())
    }

    /// Hands the batch to the spool once it holds [`BATCH`] items.
    fn flush_if_full(&mut self) -> Result<(), Ended<Lost>> {
        if self.batch.len() >= BATCH {
            if let Err(e) = self.spool.push_all(&mut self.batch) {
                return Err(Ended::Broken(Lost::Spool(e)));
            }
        }
        Ok(())
    }

    /// The connection ends as `ended`: what the batch holds still goes to the spool.
    fn abandon(&mut self, ended: Ended<Lost>) -> Ended<Lost> {
        let _ = self.spool.push_all(&mut self.batch);
        ended
    }
}

/// What a connection attached to: the stream must continue from it.
struct Attached {
    setup: ostm_protocol::Setup,
    link: Option<ostm_protocol::Link>,
    step: u64,
}

/// A world's setup and link as a person reads them.
fn world_name(s: ostm_protocol::Setup, l: Option<ostm_protocol::Link>) -> String {
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

/// Connects and does the handshake: hello, welcome, attach snapshot (docs/protocol.md,
/// "What the viewer says about a stranger"). The host must have sent something within
/// [`WELCOME_TIMEOUT`] of the connection (its TLS handshake counts), its whole welcome
/// within [`SILENCE`] of the connection, and its attach snapshot within [`SILENCE`] of
/// the welcome. Every failure but a refusal, a stranger's bytes, another version or a
/// failed TLS handshake is worth another attempt under `--reconnect`.
async fn connect(dial: &Dial) -> Result<(Conn, Welcome, World), Refused> {
    let addr = &dial.addr;
    let tcp = match timeout(CONNECT_TIMEOUT, open(addr, dial.throttle_read.is_some())).await {
        Err(_) => {
            let addr = addr.clone();
            return Err(Refused::Unreachable(Lost::ConnectTimedOut { addr }));
        }
        Ok(Err(err)) => {
            let addr = addr.clone();
            return Err(Refused::Unreachable(Lost::Connect { addr, err }));
        }
        Ok(Ok(s)) => s,
    };
    let _ = tcp.set_nodelay(true);
    let received = Arc::new(AtomicU64::new(0));
    let greet = greet(dial, tcp, received.clone());
    tokio::pin!(greet);
    let greeted = match timeout(WELCOME_TIMEOUT, &mut greet).await {
        Ok(r) => r,
        // Nothing at all from the peer: an ostm host answers a hello at once.
        Err(_) if received.load(Ordering::Relaxed) == 0 => {
            Err(Refused::Unreachable(Lost::NothingSent {
                addr: addr.clone(),
                tls: dial.tls.is_some(),
            }))
        }
        // Bytes are coming: a slow link, given the silence rule.
        Err(_) => match timeout(SILENCE.saturating_sub(WELCOME_TIMEOUT), &mut greet).await {
            Ok(r) => r,
            Err(_) => Err(Refused::Unreachable(Lost::NoWholeWelcome {
                addr: addr.clone(),
                bytes: received.load(Ordering::Relaxed),
            })),
        },
    };
    let (mut conn, welcome) = greeted?;
    match timeout(SILENCE, handshake_next(&mut conn, dial, false)).await {
        Err(_) => Err(Refused::Unreachable(Lost::NoAttachSnapshot {
            addr: addr.clone(),
        })),
        Ok(next) => match next? {
            (
                _,
                ToViewer::Snapshot {
                    kind: SnapshotKind::Attach,
                    world,
                },
            ) => Ok((conn, welcome, world)),
            (_, ToViewer::End(e)) => Err(Refused::Final(Lost::EndedBeforeSnapshot(e))),
            (at, other) => Err(Refused::Final(Lost::NotAttachSnapshot {
                addr: addr.clone(),
                at,
                found: name(&other),
            })),
        },
    }
}

/// The TLS handshake (if any), the hello and the host's welcome; `received` counts the
/// bytes the peer has sent.
async fn greet(
    dial: &Dial,
    tcp: TcpStream,
    received: Arc<AtomicU64>,
) -> Result<(Conn, Welcome), Refused> {
    let addr = &dial.addr;
    let fd = Some(std::os::fd::AsRawFd::as_raw_fd(&tcp));
    let tcp = Counted { io: tcp, received };
    let io: Box<dyn Io> = match &dial.tls {
        Some(tls) => match tls.connector.connect(tls.name.clone(), tcp).await {
            Ok(s) => Box::new(s),
            Err(e) => return Err(Refused::Final(Lost::Tls(explain(addr, &tls.name, &e)))),
        },
        None => Box::new(tcp),
    };
    let mut conn = Conn {
        framed: Framed::with_capacity(io, Framing(ViewerCodec::new(addr.clone())), READ_BUFFER),
        fd,
    };
    let hello = Hello {
        version: VERSION,
        role: PeerRole::Viewer as u8,
        token: dial.token.clone().unwrap_or_default().into_bytes(),
    };
    if let Err(err) = conn.framed.send(ToHost::Hello(hello)).await {
        let addr = addr.clone();
        return Err(Refused::Unreachable(Lost::SendHello { addr, err }));
    }
    let welcome = match handshake_next(&mut conn, dial, true).await? {
        (_, ToViewer::Welcome(w)) => w,
        (_, ToViewer::End(e)) => return Err(Refused::Final(Lost::RefusedByHost(e))),
        (at, other) => {
            return Err(Refused::Final(Lost::NotWelcome {
                addr: addr.clone(),
                at,
                found: name(&other),
            }))
        }
    };
    if welcome.version != VERSION {
        return Err(Refused::Final(Lost::Version(welcome.version)));
    }
    Ok((conn, welcome))
}

/// The next handshake message. A first frame that does not decode is described by the
/// bytes the peer sent, so a viewer pointed at something that is not an ostm host says
/// what it is; a later one (after a welcome) is a protocol error like any in the stream.
async fn handshake_next(
    conn: &mut Conn,
    dial: &Dial,
    first: bool,
) -> Result<(u64, ToViewer), Refused> {
    let addr = &dial.addr;
    match conn.framed.next().await {
        None => Err(Refused::Unreachable(Lost::ClosedInHandshake {
            addr: addr.clone(),
            tls: dial.tls.is_some(),
        })),
        Some(Err(WireError::Format(err))) if first => {
            let sent = conn.framed.read_buffer();
            Err(Refused::Final(match tls_record(sent) {
                Some(record) => Lost::ServesTls {
                    addr: addr.clone(),
                    record,
                },
                None => Lost::NotOstm {
                    addr: addr.clone(),
                    seen: describe(sent),
                    err,
                },
            }))
        }
        Some(Err(WireError::Format(e))) => Err(Refused::Final(Lost::Protocol(e))),
        Some(Err(WireError::Io(e))) => Err(Refused::Unreachable(Lost::Connection(e))),
        Some(Ok(m)) => Ok(m),
    }
}

/// A TCP stream that counts the bytes it has received (the TLS handshake's included).
struct Counted {
    io: TcpStream,
    received: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        let got = buf.filled().len().saturating_sub(before);
        self.received.fetch_add(got as u64, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
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

/// Connects; `small_buffer` asks for a 4 KiB receive buffer (test throttling only).
async fn open(addr: &str, small_buffer: bool) -> std::io::Result<TcpStream> {
    if !small_buffer {
        return TcpStream::connect(addr).await;
    }
    let mut last = std::io::Error::other(format!("{addr} resolves to no address"));
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_recv_buffer_size(4096)?;
        match socket.connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

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
mod tests {
    use super::{Lost, WELCOME_TIMEOUT};
    use ostm_protocol::wire::{End, EndReason, SILENCE_TIMEOUT_MS, VERSION};
    use ostm_protocol::FormatError;
    use ostm_runtime::WireError;
    use std::io;

    /// A TLS alert or handshake record (what a TLS host answers a plaintext hello with)
    /// is told apart from other bytes, which `describe` reads as text or hex.
    #[test]
    fn a_tls_record_is_told_apart_from_a_stranger_s_bytes() {
        use super::{describe, tls_record};
        assert_eq!(
            tls_record(&[0x15, 3, 3, 0, 2, 2, 0x46]).as_deref(),
            Some("15 03 03 00 02 02 46")
        );
        let long = [&[0x16u8, 3, 1][..], &[0u8; 60][..]].concat();
        assert!(tls_record(&long).unwrap().ends_with("00…"));
        for not in [
            &b"SSH-2.0-OpenSSH_9.2p1\r\n"[..],
            &[0x15, 3, 5],
            &[0x18, 3, 3],
            &[0x16, 3],
        ] {
            assert_eq!(tls_record(not), None, "{not:?}");
        }
        assert_eq!(describe(b"SSH-2.0\r\n"), "\"SSH-2.0\\r\\n\"");
        assert_eq!(describe(&[0, 0xff]), "the bytes 00 ff");
    }

    /// The texts the verdict gives, byte for byte as they were written by hand at each
    /// site before [`Lost`].
    #[test]
    fn the_tcp_readers_reasons_read_as_they_always_have() {
        let a = || "127.0.0.1:7000".to_string();
        let addr = a();
        let io = || io::Error::other("reset by peer");
        let bad = FormatError::new(a(), 9, "unknown message type 0x99");
        let end = End {
            reason: EndReason::BadToken,
            text: "the token does not match".into(),
            host_step: 3,
        };
        let bad_token = EndReason::BadToken.name();
        let cases: Vec<(Lost, String)> = vec![
            (Lost::ConnectTimedOut { addr: a() }, format!("cannot connect to {addr}: timed out")),
            (
                Lost::Connect { addr: a(), err: io() },
                format!("cannot connect to {addr}: reset by peer"),
            ),
            (
                Lost::NothingSent { addr: a(), tls: false },
                format!(
                    "{addr} sent nothing within {} ms of the hello: it is not an ostm host, or not answering (a host that serves TLS waits for a TLS client: try --tls)",
                    WELCOME_TIMEOUT.as_millis()
                ),
            ),
            (
                Lost::NothingSent { addr: a(), tls: true },
                format!(
                    "{addr} sent nothing within {} ms of the hello: it is not an ostm host, or not answering",
                    WELCOME_TIMEOUT.as_millis()
                ),
            ),
            (
                Lost::NoWholeWelcome { addr: a(), bytes: 12 },
                format!("{addr} sent no whole welcome within {SILENCE_TIMEOUT_MS} ms of the hello (12 bytes arrived): the link is too slow, or the host has stalled"),
            ),
            (
                Lost::NoAttachSnapshot { addr: a() },
                format!("{addr} sent its welcome but no attach snapshot within {SILENCE_TIMEOUT_MS} ms: the link is too slow, or the host has stalled"),
            ),
            (
                Lost::EndedBeforeSnapshot(end.clone()),
                format!("the host ended the stream before its snapshot ({bad_token}): the token does not match"),
            ),
            (
                Lost::NotAttachSnapshot { addr: a(), at: 40, found: "a record (0x83)" },
                format!("{addr}: at offset 40: expected the host's attach snapshot (0x82, kind 0), found a record (0x83)"),
            ),
            (Lost::Tls("the TLS handshake failed".into()), "the TLS handshake failed".into()),
            (
                Lost::SendHello { addr: a(), err: WireError::Io(io()) },
                format!("cannot send the hello to {addr}: {}", WireError::Io(io())),
            ),
            (
                Lost::RefusedByHost(end),
                format!("the host refused the viewer ({bad_token}): the token does not match"),
            ),
            (
                Lost::NotWelcome { addr: a(), at: 0, found: "a heartbeat (0x84)" },
                format!("{addr}: at offset 0: expected the host's welcome (0x81), found a heartbeat (0x84)"),
            ),
            (
                Lost::Version(99),
                format!("the host speaks protocol version 99, this viewer speaks {VERSION}"),
            ),
            (
                Lost::ClosedInHandshake { addr: a(), tls: false },
                format!("{addr} closed the connection during the handshake (a host that serves TLS closes a plaintext connection: try --tls)"),
            ),
            (
                Lost::ClosedInHandshake { addr: a(), tls: true },
                format!("{addr} closed the connection during the handshake"),
            ),
            (
                Lost::NotOstm { addr: a(), seen: "\"SSH-2.0\"".into(), err: bad.clone() },
                format!("{addr} is not an ostm host: it sent \"SSH-2.0\" ({bad})"),
            ),
            (
                Lost::ServesTls { addr: a(), record: "15 03 03 00 02 02 46".into() },
                format!("{addr} serves TLS (it answered with a TLS record: 15 03 03 00 02 02 46): connect with --tls, and with --tls-ca CA.pem too when a private CA signed its certificate (as `ostm-host cert` makes)"),
            ),
            (Lost::Protocol(bad.clone()), format!("protocol error: {bad}")),
            (Lost::Connection(io()), "connection lost: reset by peer".into()),
            (
                Lost::GaveUp { secs: 30, why: Box::new(Lost::ConnectTimedOut { addr: a() }) },
                format!("gave up reconnecting after 30 s: cannot connect to {addr}: timed out"),
            ),
            (Lost::Spool(io()), "cannot spool the host's records to disk: reset by peer".into()),
            (Lost::SpoolEnd, "cannot spool the host's end message".into()),
            (
                Lost::ClosedWithoutEnd,
                "the host closed the connection without an end message".into(),
            ),
            (
                Lost::OutOfStep { addr: a(), at: 80, expected: 5, found: 7 },
                format!("{addr}: at offset 80: expected a record for step 5, found a record for step 7"),
            ),
            (
                Lost::ResyncOfAnotherWorld {
                    addr: a(),
                    at: 80,
                    attached: "3D, 24 bodies, seed 1, no link".into(),
                    found: "3D, 24 bodies, seed 2, no link".into(),
                },
                format!("{addr}: at offset 80: expected a resync snapshot of the attached world (3D, 24 bodies, seed 1, no link), found one of another world (3D, 24 bodies, seed 2, no link)"),
            ),
            (
                Lost::Unexpected { addr: a(), at: 80, found: "a welcome (0x81)" },
                format!("{addr}: at offset 80: expected a record, heartbeat, resync snapshot, end or drift reply, found a welcome (0x81)"),
            ),
            (Lost::Silent, format!("the host sent nothing for {SILENCE_TIMEOUT_MS} ms")),
        ];
        for (why, text) in cases {
            assert_eq!(why.to_string(), text);
        }
    }
}
