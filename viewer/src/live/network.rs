//! The viewer's reader: connects, does the handshake, and reads the host's messages as
//! fast as they arrive into the [`Spool`], on a thread of its own, whatever the verifier
//! is doing. It sends the viewer's heartbeats and drift requests, and, with `--reconnect`,
//! connects again after a lost connection (docs/protocol.md, "Reconnecting").

use super::shared::{Ended, Shared, DRIFT_REPLY_TIMEOUT, HOST_CLOSED, NATS_READER_STOPPED};
use super::spool::{Item, Spool};
use super::tls::{explain, Tls};
use super::watermark::{self, Watermark};
use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use ostm_protocol::wire::{
    DriftReply, End, EndReason, Hello, PeerRole, SnapshotKind, ToHost, ToViewer, ViewerCodec,
    Welcome, HEARTBEAT_MS, SILENCE_TIMEOUT_MS, VERSION,
};
use ostm_protocol::World;
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
#[derive(Debug, Clone)]
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
    Unreachable(String),
    /// The host answered and refused, or spoke another protocol: final.
    Final(String),
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
                let _ = self.spool.push(Item::Lost {
                    why: format!("cannot spool the host's records to disk: {e}"),
                    last: true,
                });
                false
            }
        }
    }

    fn lost(&self, why: String, last: bool) {
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
                        return self.lost(
                            format!(
                                "gave up reconnecting after {} s: {why}",
                                since.elapsed().as_secs()
                            ),
                            true,
                        );
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
                Ended::Broken(why) => return self.lost(why, true),
                Ended::End(e) if !(again && reconnects_after(&e)) => return,
                Ended::End(_) => {}
                Ended::Lost(why) if !again => return self.lost(why, true),
                Ended::Lost(why) => self.lost(why, false),
            }
            failing_since = Some(Instant::now());
        }
    }

    /// Reads one connection's stream into the spool, and sends heartbeats and the
    /// verifier's messages, until it ends.
    async fn stream(&mut self, conn: Conn, attached: Attached) -> Ended {
        let addr = self.dial.addr.clone();
        let mut next_step = attached.step;
        // The read side decodes straight from its buffer: every message one read brought
        // is decoded in one loop, with no stream poll and no lock per message.
        let mut mark = Watermark::new(conn.fd);
        let parts = conn.framed.into_parts();
        let mut codec = parts.codec;
        let mut buf = parts.read_buf;
        let (mut rd, wr) = tokio::io::split(parts.io);
        let mut sink = FramedWrite::new(wr, Framing(ViewerCodec::new(addr.clone())));
        *sink.write_buffer_mut() = parts.write_buf;
        let shared = self.shared.clone();
        let from_verifier = &mut self.from_verifier;
        let writer = async move {
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
        };
        let spool = &self.spool;
        let shared = &self.shared;
        let replies = &self.replies;
        let throttle = self.dial.throttle_read;
        let reader = async {
            let started = tokio::time::Instant::now();
            let mut records: u64 = 0;
            let mut batch: Vec<Item> = Vec::with_capacity(BATCH);
            let mut deadline = tokio::time::Instant::now() + SILENCE;
            // The silence deadline passed and the runtime has been made to look at the
            // socket once since (see below); cleared by every read that brings bytes.
            let mut looked_again = false;
            let mut eof = false;
            loop {
                // Everything already read is decoded and handed to the spool, under one
                // lock per [`BATCH`] messages.
                let mut decoded = false;
                loop {
                    // Records are taken whole, as they came, and decoded by the verifier
                    // (a test's read throttle counts them one by one instead).
                    if throttle.is_none() {
                        if let Some(run) = codec.0.take_records(&mut buf, next_step) {
                            next_step = next_step.wrapping_add(run.count());
                            shared.host_step.fetch_max(next_step, Ordering::Relaxed);
                            decoded = true;
                            batch.push(Item::Records(run));
                            if batch.len() >= BATCH {
                                if let Err(e) = spool.push_all(&mut batch) {
                                    return Ended::Broken(format!(
                                        "cannot spool the host's records to disk: {e}"
                                    ));
                                }
                            }
                            continue;
                        }
                    }
                    let next = if eof {
                        codec.decode_eof(&mut buf)
                    } else {
                        codec.decode(&mut buf)
                    };
                    let (at, msg) = match next {
                        Ok(Some(m)) => m,
                        Ok(None) if eof => {
                            let _ = spool.push_all(&mut batch);
                            return Ended::Lost(
                                "the host closed the connection without an end message".into(),
                            );
                        }
                        Ok(None) => break,
                        Err(WireError::Format(e)) => {
                            let _ = spool.push_all(&mut batch);
                            return Ended::Broken(format!("protocol error: {e}"));
                        }
                        Err(WireError::Io(e)) => {
                            let _ = spool.push_all(&mut batch);
                            return Ended::Lost(format!("connection lost: {e}"));
                        }
                    };
                    decoded = true;
                    match msg {
                        ToViewer::Record(r) if r.step != next_step => {
                            let _ = spool.push_all(&mut batch);
                            return Ended::Broken(format!(
                                "{addr}: at offset {at}: expected a record for step {next_step}, found a record for step {}",
                                r.step
                            ));
                        }
                        ToViewer::Record(r) => {
                            next_step = r.step.wrapping_add(1);
                            shared
                                .host_step
                                .fetch_max(r.step.saturating_add(1), Ordering::Relaxed);
                            batch.push(Item::Record(r));
                            if let Some(per_second) = throttle {
                                records += 1;
                                let due = started
                                    + Duration::from_secs_f64(
                                        records as f64 / per_second.max(1) as f64,
                                    );
                                if let Err(e) = spool.push_all(&mut batch) {
                                    return Ended::Broken(format!(
                                        "cannot spool the host's records to disk: {e}"
                                    ));
                                }
                                tokio::time::sleep_until(due).await;
                            }
                        }
                        ToViewer::Snapshot {
                            kind: SnapshotKind::Resync,
                            world,
                        } => {
                            if world.setup() != attached.setup || world.link() != attached.link {
                                let _ = spool.push_all(&mut batch);
                                return Ended::Broken(format!(
                                    "{addr}: at offset {at}: expected a resync snapshot of the attached world ({}), found one of another world ({})",
                                    world_name(attached.setup, attached.link),
                                    world_name(world.setup(), world.link())
                                ));
                            }
                            next_step = world.step;
                            debug!(to = world.step, "resync snapshot");
                            shared.host_step.fetch_max(world.step, Ordering::Relaxed);
                            batch.push(Item::Resync(world));
                        }
                        ToViewer::Heartbeat { host_step } => {
                            shared.host_step.fetch_max(host_step, Ordering::Relaxed);
                        }
                        ToViewer::DriftReply(d) => {
                            let _ = replies.send(Ok(d));
                        }
                        ToViewer::End(e) => {
                            batch.push(Item::End(e.clone()));
                            if spool.push_all(&mut batch).is_err() {
                                return Ended::Broken("cannot spool the host's end message".into());
                            }
                            return Ended::End(e);
                        }
                        other => {
                            let _ = spool.push_all(&mut batch);
                            return Ended::Broken(format!(
                                "{addr}: at offset {at}: expected a record, heartbeat, resync snapshot, end or drift reply, found {}",
                                name(&other)
                            ));
                        }
                    }
                    if batch.len() >= BATCH {
                        if let Err(e) = spool.push_all(&mut batch) {
                            return Ended::Broken(format!(
                                "cannot spool the host's records to disk: {e}"
                            ));
                        }
                    }
                }
                if let Err(e) = spool.push_all(&mut batch) {
                    return Ended::Broken(format!("cannot spool the host's records to disk: {e}"));
                }
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
                        return Ended::Lost(format!("the host sent nothing for {SILENCE_TIMEOUT_MS} ms"));
                    }
                };
                match read {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        looked_again = false;
                        mark.after_read(n);
                    }
                    Err(e) => return Ended::Lost(format!("connection lost: {e}")),
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
            return Err(Refused::Unreachable(format!(
                "cannot connect to {addr}: timed out"
            )))
        }
        Ok(Err(e)) => {
            return Err(Refused::Unreachable(format!(
                "cannot connect to {addr}: {e}"
            )))
        }
        Ok(Ok(s)) => s,
    };
    let _ = tcp.set_nodelay(true);
    let received = Arc::new(AtomicU64::new(0));
    let tls_hint = if dial.tls.is_some() {
        ""
    } else {
        " (a host that serves TLS waits for a TLS client: try --tls)"
    };
    let greet = greet(dial, tcp, received.clone());
    tokio::pin!(greet);
    let greeted = match timeout(WELCOME_TIMEOUT, &mut greet).await {
        Ok(r) => r,
        // Nothing at all from the peer: an ostm host answers a hello at once.
        Err(_) if received.load(Ordering::Relaxed) == 0 => Err(Refused::Unreachable(format!(
            "{addr} sent nothing within {} ms of the hello: it is not an ostm host, or not answering{tls_hint}",
            WELCOME_TIMEOUT.as_millis(),
        ))),
        // Bytes are coming: a slow link, given the silence rule.
        Err(_) => match timeout(SILENCE.saturating_sub(WELCOME_TIMEOUT), &mut greet).await {
            Ok(r) => r,
            Err(_) => Err(Refused::Unreachable(format!(
                "{addr} sent no whole welcome within {SILENCE_TIMEOUT_MS} ms of the hello ({} bytes arrived): the link is too slow, or the host has stalled",
                received.load(Ordering::Relaxed)
            ))),
        },
    };
    let (mut conn, welcome) = greeted?;
    match timeout(SILENCE, handshake_next(&mut conn, dial, false)).await {
        Err(_) => Err(Refused::Unreachable(format!(
            "{addr} sent its welcome but no attach snapshot within {SILENCE_TIMEOUT_MS} ms: the link is too slow, or the host has stalled"
        ))),
        Ok(next) => match next? {
            (
                _,
                ToViewer::Snapshot {
                    kind: SnapshotKind::Attach,
                    world,
                },
            ) => Ok((conn, welcome, world)),
            (_, ToViewer::End(e)) => Err(Refused::Final(format!(
                "the host ended the stream before its snapshot ({}): {}",
                e.reason.name(),
                e.text
            ))),
            (at, other) => Err(Refused::Final(format!(
                "{addr}: at offset {at}: expected the host's attach snapshot (0x82, kind 0), found {}",
                name(&other)
            ))),
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
            Err(e) => return Err(Refused::Final(explain(addr, &tls.name, &e))),
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
    if let Err(e) = conn.framed.send(ToHost::Hello(hello)).await {
        return Err(Refused::Unreachable(format!(
            "cannot send the hello to {addr}: {e}"
        )));
    }
    let welcome = match handshake_next(&mut conn, dial, true).await? {
        (_, ToViewer::Welcome(w)) => w,
        (_, ToViewer::End(e)) => {
            return Err(Refused::Final(format!(
                "the host refused the viewer ({}): {}",
                e.reason.name(),
                e.text
            )))
        }
        (at, other) => {
            return Err(Refused::Final(format!(
                "{addr}: at offset {at}: expected the host's welcome (0x81), found {}",
                name(&other)
            )))
        }
    };
    if welcome.version != VERSION {
        return Err(Refused::Final(format!(
            "the host speaks protocol version {}, this viewer speaks {VERSION}",
            welcome.version
        )));
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
        None => Err(Refused::Unreachable(format!(
            "{addr} closed the connection during the handshake{}",
            if dial.tls.is_some() {
                ""
            } else {
                " (a host that serves TLS closes a plaintext connection: try --tls)"
            }
        ))),
        Some(Err(WireError::Format(e))) if first => {
            let seen = describe(conn.framed.read_buffer());
            Err(Refused::Final(format!(
                "{addr} is not an ostm host: it sent {seen} ({e})"
            )))
        }
        Some(Err(WireError::Format(e))) => Err(Refused::Final(format!("protocol error: {e}"))),
        Some(Err(WireError::Io(e))) => Err(Refused::Unreachable(format!("connection lost: {e}"))),
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

/// The first bytes a peer sent, as a person can read them: as text when they are
/// printable (an HTTP or SSH banner), in hex otherwise, with a word on TLS records.
pub fn describe(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(48)];
    let more = if bytes.len() > head.len() { "…" } else { "" };
    if head.len() >= 3 && matches!(head[0], 0x14..=0x17) && head[1] == 3 && head[2] <= 4 {
        return format!(
            "a TLS record ({}{more}): the host serves TLS; connect with --tls",
            hex(head)
        );
    }
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
