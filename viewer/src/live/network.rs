//! The viewer's reader: connects, does the handshake, and reads the host's messages as
//! fast as they arrive into the [`Spool`], on a thread of its own, whatever the verifier
//! is doing. It sends the viewer's heartbeats and drift requests, and, with `--reconnect`,
//! connects again after a lost connection (docs/protocol.md, "Reconnecting").
//!
//! The rules are the sans-IO machine [`tcp::Reader`] (ostm-protocol); this file is its
//! driver: the socket, its options (the receive mark), TLS, the clock and the spool.

use super::shared::{Ended, Shared, DRIFT_REPLY_TIMEOUT, HOST_CLOSED, NATS_READER_STOPPED};
use super::spool::{Full, Item, Spool};
use super::tls::{explain, Tls};
use super::watermark::{self, Watermark};
use bytes::BytesMut;
use futures::SinkExt;
pub use ostm_protocol::reader::tcp::Lost;
use ostm_protocol::reader::tcp::{self, Event};
use ostm_protocol::session::Millis;
use ostm_protocol::wire::{DriftReply, ToHost};
use ostm_runtime::{ViewerFrameCodec, WireError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

/// Messages the reader hands to the spool at once, at most.
const BATCH: usize = 1024;
/// The read buffer's size: a fast host's records are taken in reads of up to this much,
/// not of tokio-util's default 8 KiB (fewer system calls and wake-ups per record).
const READ_BUFFER: usize = 256 * 1024;

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
                                let mut reader =
                                    Reader::new(dial, sp, shared.clone(), from_verifier, reply_tx);
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

/// A connection's byte stream: plain TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The driver of the TCP/TLS reader's machine ([`tcp::Reader`]): it opens the
/// connections the machine asks for, hands it every byte read and the time, writes what
/// it gives, and moves what it delivers into the spool.
struct Reader {
    dial: Dial,
    spool: Arc<Spool>,
    shared: Arc<Shared>,
    from_verifier: mpsc::UnboundedReceiver<ToHost>,
    replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
    /// The machine's clock: milliseconds since this instant.
    started: tokio::time::Instant,
    /// What goes to the spool, under one lock per [`BATCH`] items.
    batch: Vec<Item>,
    /// The machine asked for a connection.
    connect: bool,
    /// The machine closed the current connection or attempt.
    closed: bool,
    /// The machine has stopped.
    done: bool,
    /// Records read so far, counted only under the test's read throttle.
    throttled: u64,
    /// The machine waits for the verifier to take what the spool holds on disk.
    drain_spool: bool,
}

impl Reader {
    fn new(
        dial: Dial,
        spool: Arc<Spool>,
        shared: Arc<Shared>,
        from_verifier: mpsc::UnboundedReceiver<ToHost>,
        replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
    ) -> Reader {
        Reader {
            dial,
            spool,
            shared,
            from_verifier,
            replies,
            started: tokio::time::Instant::now(),
            batch: Vec::with_capacity(BATCH),
            connect: false,
            closed: false,
            done: false,
            throttled: 0,
            drain_spool: false,
        }
    }

    fn now(&self) -> Millis {
        self.started.elapsed().as_millis() as Millis
    }

    /// When the machine wants the time next.
    fn deadline(&self, m: &tcp::Reader) -> tokio::time::Instant {
        match m.poll_timeout() {
            Some(t) => self.started + Duration::from_millis(t),
            None => tokio::time::Instant::now() + Duration::from_secs(3600),
        }
    }

    async fn run(&mut self) {
        let cfg = tcp::Config {
            addr: self.dial.addr.clone(),
            token: self.dial.token.clone(),
            reconnect_ms: self.dial.reconnect.map(|d| d.as_millis() as u64),
            tls: self.dial.tls.is_some(),
            one_at_a_time: self.dial.throttle_read.is_some(),
        };
        let mut m = tcp::Reader::new(cfg, self.now());
        loop {
            self.drain(&mut m);
            self.flush(&mut m);
            self.drain(&mut m);
            if self.done {
                // Its last word is in the spool.
                let _ = self.spool.push_all(&mut self.batch);
                return;
            }
            if std::mem::take(&mut self.drain_spool) {
                // The spool's bound (`--spool-max`): join again at the host's step once
                // the verifier has taken what was spooled, as after a lost connection.
                while !self.spool.disk_drained() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                m.handle_spool_drained(self.now());
                continue;
            }
            if std::mem::take(&mut self.connect) {
                self.connection(&mut m).await;
                continue;
            }
            tokio::time::sleep_until(self.deadline(&m)).await;
            m.handle_timeout(self.now());
        }
    }

    /// Moves the machine's events out: arrivals to the spool, drift replies to the
    /// verifier. Returns the records delivered one by one (for the read throttle).
    fn drain(&mut self, m: &mut tcp::Reader) -> u64 {
        let mut records = 0;
        while let Some(e) = m.poll_event() {
            match e {
                Event::Connect => self.connect = true,
                Event::Close => self.closed = true,
                Event::Done => self.done = true,
                Event::DriftReply(d) => {
                    let _ = self.replies.send(Ok(d));
                }
                Event::StreamEnded => {
                    let _ = self.replies.send(Err(HOST_CLOSED.into()));
                }
                Event::Reconnecting { wait_ms, why } => info!(wait_ms, "reconnecting: {why}"),
                Event::AwaitDrain => self.drain_spool = true,
                Event::Deliver(a) => {
                    match &a {
                        Item::Attached { connection, .. } => {
                            self.shared.connection.store(*connection, Ordering::SeqCst);
                            // Each connection's host says its own step: a host restarted
                            // behind the step the old one had reached must not leave the
                            // lag counted from the old one.
                            self.shared
                                .host_step
                                .store(m.host_step(), Ordering::Relaxed);
                        }
                        Item::Resync(world) => debug!(to = world.step, "resync snapshot"),
                        Item::Record(_) => records += 1,
                        _ => {}
                    }
                    let flush = matches!(a, Item::Attached { .. } | Item::End(_))
                        || self.batch.len() + 1 >= BATCH;
                    self.batch.push(a);
                    if flush {
                        self.flush(m);
                    }
                }
            }
        }
        self.shared
            .host_step
            .fetch_max(m.host_step(), Ordering::Relaxed);
        records
    }

    /// Hands the batch to the spool; a spool that fails stops the reader.
    fn flush(&mut self, m: &mut tcp::Reader) {
        let end = self.batch.iter().any(|i| matches!(i, Item::End(_)));
        if let Err(e) = self.spool.push_all(&mut self.batch) {
            self.batch.clear();
            if Full::is(&e) {
                return m.handle_spool_full(self.now(), e.to_string());
            }
            let why = if end {
                Lost::SpoolEnd
            } else {
                Lost::Spool(e.to_string())
            };
            m.handle_spool_failed(why);
        }
    }

    /// One connection, from its opening until the machine closes it.
    async fn connection(&mut self, m: &mut tcp::Reader) {
        self.closed = false;
        let addr = self.dial.addr.clone();
        let opened = tokio::time::timeout_at(
            self.deadline(m),
            open(&addr, self.dial.throttle_read.is_some()),
        )
        .await;
        let tcp = match opened {
            Err(_) => return m.handle_timeout(self.now()),
            Ok(Err(e)) => return m.handle_connect_failed(self.now(), e.to_string()),
            Ok(Ok(s)) => s,
        };
        let _ = tcp.set_nodelay(true);
        let fd = Some(std::os::fd::AsRawFd::as_raw_fd(&tcp));
        let received = Arc::new(AtomicU64::new(0));
        m.handle_connected(self.now());
        let tcp = Counted {
            io: tcp,
            received: received.clone(),
        };
        let tls = self.dial.tls.clone();
        let io: Box<dyn Io> = match &tls {
            None => Box::new(tcp),
            Some(tls) => {
                let handshake = tls.connector.connect(tls.name.clone(), tcp);
                tokio::pin!(handshake);
                loop {
                    match tokio::time::timeout_at(self.deadline(m), &mut handshake).await {
                        Ok(Ok(s)) => break Box::new(s),
                        Ok(Err(e)) => {
                            let why = explain(&addr, &tls.name, &e);
                            return m.handle_tls_failed(self.now(), why);
                        }
                        Err(_) => {
                            m.handle_received(received.load(Ordering::Relaxed));
                            m.handle_timeout(self.now());
                            self.drain(m);
                            if self.closed || self.done {
                                return;
                            }
                        }
                    }
                }
            }
        };
        self.stream(m, io, fd, received).await;
    }

    /// Reads the connection into the machine, and writes what the machine says (the
    /// hello, heartbeats, the verifier's drift requests), until the machine closes it.
    async fn stream(
        &mut self,
        m: &mut tcp::Reader,
        io: Box<dyn Io>,
        fd: Option<std::os::fd::RawFd>,
        received: Arc<AtomicU64>,
    ) {
        let mut mark = Watermark::new(fd);
        let (mut rd, wr) = tokio::io::split(io);
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = FramedWrite::new(wr, ViewerFrameCodec::new(self.dial.addr.clone()));
        let writer = write_loop(sink, rx);
        tokio::pin!(writer);
        let mut writing = true;
        let mut buf = BytesMut::with_capacity(READ_BUFFER);
        let mut eof = false;
        // The silence deadline passed and the runtime has been made to look at the
        // socket once since (see below); cleared by every read that brings bytes.
        let mut looked_again = false;
        loop {
            // Everything already read is taken before the silence is judged: a viewer
            // paused for longer than the silence timeout reads what waits in its socket
            // when it resumes.
            while !self.closed && m.handle_data(self.now(), &mut buf, eof) {
                if self.drain(m) > 0 {
                    if let Some(per_second) = self.dial.throttle_read {
                        self.throttled += 1;
                        let due = self.started
                            + Duration::from_secs_f64(
                                self.throttled as f64 / per_second.max(1) as f64,
                            );
                        self.flush(m);
                        tokio::time::sleep_until(due).await;
                    }
                }
            }
            self.drain(m);
            self.flush(m);
            self.drain(m);
            while let Some(t) = m.poll_transmit() {
                let _ = tx.send(t);
            }
            if self.closed || self.done || eof {
                return;
            }
            if buf.capacity() - buf.len() < READ_BUFFER / 2 {
                buf.reserve(READ_BUFFER);
            }
            // The heartbeats say the step the verifier has reached.
            m.handle_viewer_step(self.shared.viewer_step.load(Ordering::Relaxed));
            let deadline = self.deadline(m);
            tokio::select! {
                biased;
                r = rd.read_buf(&mut buf) => match r {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        looked_again = false;
                        mark.after_read(n);
                    }
                    Err(e) => m.handle_read_failed(self.now(), e.to_string()),
                },
                _ = tokio::time::sleep(watermark::PATIENCE), if mark.raised() => mark.lower(),
                _ = tokio::time::sleep_until(deadline) => {
                    if m.silent(self.now()) && !looked_again {
                        // The clock ran out, but the runtime may not have looked at the
                        // socket since: a process stopped (SIGSTOP, a suspended machine)
                        // comes back with its wait for the socket interrupted (EINTR) and
                        // its timers expired, so the timer is seen first and the socket's
                        // readiness not yet. Drop the receive mark (bytes under it are
                        // then reported), let the runtime poll the socket (a yield makes
                        // it look without waiting), and read again before judging.
                        looked_again = true;
                        mark.lower();
                        tokio::task::yield_now().await;
                        continue;
                    }
                    m.handle_received(received.load(Ordering::Relaxed));
                    m.handle_timeout(self.now());
                }
                // The writer stops only when the connection broke under it; the reader
                // goes on with what has arrived until it finds the end.
                w = &mut writer, if writing => {
                    writing = false;
                    if let Err(e) = w {
                        m.handle_write_failed(self.now(), e);
                    }
                }
                r = self.from_verifier.recv(), if m.is_streaming() => {
                    if let Some(r) = r {
                        m.send(r);
                    }
                }
            }
            // A heartbeat due under a stream fast enough that the timer's branch never
            // wins.
            let now = self.now();
            if m.poll_timeout().is_some_and(|t| t <= now) && !m.silent(now) {
                m.handle_timeout(now);
            }
        }
    }
}

/// The write side of a connection: each message the machine gives, until the connection
/// breaks (`Err`, the sentence; the reader finds out) or the reader hangs up.
async fn write_loop<S>(mut sink: S, mut rx: mpsc::UnboundedReceiver<ToHost>) -> Result<(), String>
where
    S: futures::Sink<ToHost, Error = WireError> + Unpin,
{
    while let Some(m) = rx.recv().await {
        sink.send(m).await.map_err(|e| e.to_string())?;
    }
    Ok(())
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
