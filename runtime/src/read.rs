//! The TCP/TLS reader's driver (docs/protocol.md, "The viewer's reader and verifier",
//! "Reconnecting"): the one loop that opens the connections the machine
//! ([`tcp::Reader`]: the handshake and its deadlines, heartbeats, silence, runs of
//! records, the reconnection schedule, the spool's bound) asks for, hands it every byte
//! read and the time, writes what it gives (the hello, heartbeats, the verifier's drift
//! requests), and gives what it delivers to the caller's [`Hand`]: `ostm-viewer` spools
//! it (with its bound and drain, TLS, the receive mark and the test read throttle behind
//! the hand), the live bench verifies it at once.

use crate::{ViewerFrameCodec, WireError};
use bytes::BytesMut;
use futures::SinkExt;
use ostm_protocol::reader::tcp::{self, Event, HOST_CLOSED};
use ostm_protocol::reader::Arrival;
use ostm_protocol::session::Millis;
use ostm_protocol::wire::{DriftReply, ToHost};
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedWrite;
use tracing::{debug, info};

/// A connection's byte stream: plain TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A TLS handshake under way over a new connection: the secured stream, or the sentence
/// that says why not.
pub type Handshake = Pin<Box<dyn Future<Output = Result<Box<dyn Io>, String>> + Send>>;

/// What a new connection becomes (see [`Hand::secure`]).
pub enum Secured {
    /// Plain TCP: read as it is.
    Plain(Counted),
    /// TLS over it: the handshake, under the machine's deadlines.
    Tls(Handshake),
}

/// Where what the machine delivers goes, and what the caller adds to the loop.
pub trait Hand {
    /// Why the caller stops the loop.
    type Stop;

    /// One arrival the machine delivered, in order. The machine is there for what the
    /// caller tells it back (its spool's bound reached, the host's step).
    ///
    /// # Errors
    /// The caller stops the loop.
    fn deliver(&mut self, m: &mut tcp::Reader, a: Arrival) -> Result<(), Self::Stop>;

    /// Hands on what [`Hand::deliver`] kept back (the viewer's batch for its spool).
    ///
    /// # Errors
    /// The caller stops the loop.
    fn flush(&mut self, _m: &mut tcp::Reader) -> Result<(), Self::Stop> {
        Ok(())
    }

    /// After the machine's events were taken (the viewer notes the host's step).
    fn after_events(&mut self, _m: &tcp::Reader) {}

    /// A drift reply, or why none will come (the connection that would carry it ended).
    fn reply(&mut self, _r: Result<DriftReply, String>) {}

    /// The machine waits for the verifier to take what the spool holds on disk: resolves
    /// once it has.
    fn spool_drained(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The step the verifier has reached, which heartbeats carry.
    fn viewer_step(&self) -> u64;

    /// The verifier's next message to the host; `None` when none will come.
    fn request(&mut self) -> impl Future<Output = Option<ToHost>> + Send {
        std::future::pending()
    }

    /// What a new connection becomes: plain TCP unless the caller wraps it in TLS.
    fn secure(&mut self, tcp: Counted) -> Secured {
        Secured::Plain(tcp)
    }

    /// After bytes were taken that the machine turned into `records` delivered one by one:
    /// the viewer's test read throttle waits here, the bench lets its other viewers run.
    ///
    /// # Errors
    /// The caller stops the loop.
    fn after_data(
        &mut self,
        _m: &mut tcp::Reader,
        _records: u64,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send {
        async { Ok(()) }
    }

    /// A connection's socket is read from now on (the viewer's receive mark).
    fn reading(&mut self, _fd: Option<RawFd>) {}

    /// A read of `n` bytes (the viewer raises its receive mark under a fast stream).
    fn after_read(&mut self, _n: usize) {}

    /// How long a wait for bytes may last before [`Hand::waited`] (a raised receive mark's
    /// patience); `None`: as long as the machine's deadline.
    fn patience(&self) -> Option<Duration> {
        None
    }

    /// A wait lasted its patience, or the silence is about to be judged: the receive mark
    /// drops back to one byte.
    fn waited(&mut self) {}
}

/// How the loop reads.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The read buffer's size: a fast host's records are taken in reads of up to this much.
    pub read_buffer: usize,
    /// Asks for a 4 KiB receive buffer (the viewer's test read throttle only).
    pub small_receive_buffer: bool,
}

/// Runs the machine made of `cfg` until it stops (its last word delivered first) or the
/// caller's hand stops it. The machine's clock counts milliseconds from `started` (the
/// hand's own calls to the machine count from there too).
///
/// # Errors
/// What the hand stopped the loop with.
pub async fn read<H: Hand>(
    cfg: tcp::Config,
    opts: Options,
    started: Instant,
    hand: &mut H,
) -> Result<(), H::Stop> {
    let mut d = Driver {
        started,
        addr: cfg.addr.clone(),
        opts,
        connect: false,
        closed: false,
        done: false,
        drain_spool: false,
    };
    let mut m = tcp::Reader::new(cfg, d.now());
    d.run(&mut m, hand).await
}

/// The loop's state beside the machine.
struct Driver {
    /// The machine's clock: milliseconds since this instant.
    started: Instant,
    addr: String,
    opts: Options,
    /// The machine asked for a connection.
    connect: bool,
    /// The machine closed the current connection or attempt.
    closed: bool,
    /// The machine has stopped.
    done: bool,
    /// The machine waits for the verifier to take what the spool holds on disk.
    drain_spool: bool,
}

impl Driver {
    fn now(&self) -> Millis {
        self.started.elapsed().as_millis() as Millis
    }

    /// When the machine wants the time next.
    fn deadline(&self, m: &tcp::Reader) -> Instant {
        match m.poll_timeout() {
            Some(t) => self.started + Duration::from_millis(t),
            None => Instant::now() + Duration::from_secs(3600),
        }
    }

    async fn run<H: Hand>(&mut self, m: &mut tcp::Reader, hand: &mut H) -> Result<(), H::Stop> {
        loop {
            self.drain(m, hand)?;
            hand.flush(m)?;
            self.drain(m, hand)?;
            if self.done {
                return Ok(());
            }
            if std::mem::take(&mut self.drain_spool) {
                // The spool's bound (`--spool-max`): join again at the host's step once
                // the verifier has taken what was spooled, as after a lost connection.
                hand.spool_drained().await;
                m.handle_spool_drained(self.now());
                continue;
            }
            if std::mem::take(&mut self.connect) {
                self.connection(m, hand).await?;
                continue;
            }
            tokio::time::sleep_until(self.deadline(m)).await;
            m.handle_timeout(self.now());
        }
    }

    /// Moves the machine's events out: arrivals to the hand, drift replies to the
    /// verifier. Returns the records delivered one by one (for the read throttle).
    fn drain<H: Hand>(&mut self, m: &mut tcp::Reader, hand: &mut H) -> Result<u64, H::Stop> {
        let mut records = 0;
        while let Some(e) = m.poll_event() {
            match e {
                Event::Connect => self.connect = true,
                Event::Close => self.closed = true,
                Event::Done => self.done = true,
                Event::DriftReply(d) => hand.reply(Ok(d)),
                Event::StreamEnded => hand.reply(Err(HOST_CLOSED.into())),
                Event::Reconnecting { wait_ms, why } => info!(wait_ms, "reconnecting: {why}"),
                Event::AwaitDrain => self.drain_spool = true,
                Event::Deliver(a) => {
                    match &a {
                        Arrival::Resync(world) => debug!(to = world.step, "resync snapshot"),
                        Arrival::Record(_) => records += 1,
                        _ => {}
                    }
                    hand.deliver(m, a)?;
                }
            }
        }
        hand.after_events(m);
        Ok(records)
    }

    /// One connection, from its opening until the machine closes it.
    async fn connection<H: Hand>(
        &mut self,
        m: &mut tcp::Reader,
        hand: &mut H,
    ) -> Result<(), H::Stop> {
        self.closed = false;
        let opened = tokio::time::timeout_at(
            self.deadline(m),
            open(&self.addr, self.opts.small_receive_buffer),
        )
        .await;
        let tcp = match opened {
            Err(_) => {
                m.handle_timeout(self.now());
                return Ok(());
            }
            Ok(Err(e)) => {
                m.handle_connect_failed(self.now(), e.to_string());
                return Ok(());
            }
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
        let io: Box<dyn Io> = match hand.secure(tcp) {
            Secured::Plain(tcp) => Box::new(tcp),
            Secured::Tls(mut handshake) => loop {
                match tokio::time::timeout_at(self.deadline(m), &mut handshake).await {
                    Ok(Ok(s)) => break s,
                    Ok(Err(why)) => {
                        m.handle_tls_failed(self.now(), why);
                        return Ok(());
                    }
                    Err(_) => {
                        m.handle_received(received.load(Ordering::Relaxed));
                        m.handle_timeout(self.now());
                        self.drain(m, hand)?;
                        if self.closed || self.done {
                            return Ok(());
                        }
                    }
                }
            },
        };
        self.stream(m, hand, io, fd, received).await
    }

    /// Reads the connection into the machine, and writes what the machine says (the
    /// hello, heartbeats, the verifier's drift requests), until the machine closes it.
    async fn stream<H: Hand>(
        &mut self,
        m: &mut tcp::Reader,
        hand: &mut H,
        io: Box<dyn Io>,
        fd: Option<RawFd>,
        received: Arc<AtomicU64>,
    ) -> Result<(), H::Stop> {
        hand.reading(fd);
        let (mut rd, wr) = tokio::io::split(io);
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = FramedWrite::new(wr, ViewerFrameCodec::new(self.addr.clone()));
        let writer = write_loop(sink, rx);
        tokio::pin!(writer);
        let mut writing = true;
        let read_buffer = self.opts.read_buffer;
        let mut buf = BytesMut::with_capacity(read_buffer);
        let mut eof = false;
        // The silence deadline passed and the runtime has been made to look at the
        // socket once since (see below); cleared by every read that brings bytes.
        let mut looked_again = false;
        loop {
            // Everything already read is taken before the silence is judged: a viewer
            // paused for longer than the silence timeout reads what waits in its socket
            // when it resumes.
            while !self.closed && m.handle_data(self.now(), &mut buf, eof) {
                let records = self.drain(m, hand)?;
                hand.after_data(m, records).await?;
            }
            self.drain(m, hand)?;
            hand.flush(m)?;
            self.drain(m, hand)?;
            while let Some(t) = m.poll_transmit() {
                let _ = tx.send(t);
            }
            if self.closed || self.done || eof {
                return Ok(());
            }
            if buf.capacity() - buf.len() < read_buffer / 2 {
                buf.reserve(read_buffer);
            }
            // The heartbeats say the step the verifier has reached.
            m.handle_viewer_step(hand.viewer_step());
            let deadline = self.deadline(m);
            let patience = hand.patience();
            tokio::select! {
                biased;
                r = rd.read_buf(&mut buf) => match r {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        looked_again = false;
                        hand.after_read(n);
                    }
                    Err(e) => m.handle_read_failed(self.now(), e.to_string()),
                },
                _ = tokio::time::sleep(patience.unwrap_or_default()), if patience.is_some() => hand.waited(),
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
                        hand.waited();
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
                r = hand.request(), if m.is_streaming() => {
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
pub struct Counted {
    io: TcpStream,
    received: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let got = buf.filled().len().saturating_sub(before);
        self.received.fetch_add(got as u64, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
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
