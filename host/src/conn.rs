//! One viewer's connection: a thin loop around the sans-IO machine
//! [`ostm_protocol::serve::Conn`], which decides everything (the hello and its deadline,
//! the checks, the records owed, heartbeats, silence, stalls, resyncs, drift requests, the
//! end and the linger). This task moves bytes between the socket and the machine, answers
//! what the machine asks of the hub (records, a join, a drift reply), keeps the time, and
//! turns the machine's events into log lines and counters. A plain-TCP connection that has
//! sent every record parks its writer for the fan-out to write the next ones directly
//! ([`crate::direct`]); the machine is told what the fan-out did when it is given back.

use crate::direct::Direct;
use crate::fan_out::FanOut;
use crate::framing::{write_frames, Writer};
use crate::hub::Hub;
use crate::pending::Admitted;
use bytes::BytesMut;
use ostm_protocol::serve::conn::{Millis, HELLO_MS, LINGER_MAX_MS, LINGER_MS};
use ostm_protocol::serve::{Config, Conn, Event, Left, Request, Take, Transmit, BATCH};
use ostm_protocol::wire::Welcome;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant};
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
    /// (one that has sent its end lingers on, [`LINGER_MAX`] at most).
    pub delivery_over: CancellationToken,
}

/// The longest an ended viewer that is still taking what it was sent is waited for.
pub const LINGER_MAX: Duration = Duration::from_millis(LINGER_MAX_MS);

impl ConnConfig {
    /// The machine's configuration.
    fn machine(&self) -> Config {
        Config {
            token: self.token.as_ref().map(|t| t.as_bytes().to_vec()),
            welcome: self.welcome,
            hello_ms: HELLO_MS,
            stall_ms: self.stall.as_millis() as u64,
            silence_ms: self.silence.as_millis() as u64,
            heartbeat_ms: self.heartbeat.as_millis() as u64,
            linger_ms: LINGER_MS,
            linger_max_ms: LINGER_MAX_MS,
        }
    }
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;

/// The read buffer a connection starts with, in bytes: a viewer sends its hello (at most
/// 271 bytes with a 255-byte token), then 13-byte heartbeats and drift requests.
const READ_BUFFER: usize = 320;

/// The connection's clock: milliseconds since it was accepted.
struct Clock(Instant);

impl Clock {
    fn now(&self) -> Millis {
        self.0.elapsed().as_millis() as u64
    }
    fn at(&self, ms: Millis) -> Instant {
        self.0 + Duration::from_millis(ms)
    }
    fn ms(&self, at: Instant) -> Millis {
        at.saturating_duration_since(self.0).as_millis() as u64
    }
}

/// Sleeps until `at`, or for ever when there is nothing to wait for.
async fn until(clock: &Clock, at: Option<Millis>) {
    match at {
        Some(at) => sleep_until(clock.at(at)).await,
        None => std::future::pending().await,
    }
}

/// Until the connection is closed to make room for newer ones (never once it has given
/// up its place among the waiting connections).
async fn evicted(waiting: &Option<Admitted>) {
    match waiting {
        Some(w) => w.evicted.cancelled().await,
        None => std::future::pending().await,
    }
}

/// The socket's read side and whether it has ended.
struct Input {
    reader: Reader,
    buf: BytesMut,
    done: bool,
}

impl Input {
    /// Reads what arrived (waits for it): `Err` when the read failed, `Ok(0)` at the end.
    async fn read(&mut self) -> std::io::Result<usize> {
        if self.done {
            return std::future::pending().await;
        }
        self.buf.clear();
        self.buf.reserve(READ_BUFFER);
        self.reader.read_buf(&mut self.buf).await
    }

    /// Hands what a read gave to the machine.
    fn feed(&mut self, conn: &mut Conn, read: std::io::Result<usize>, now: Millis) {
        match read {
            Ok(0) => {
                self.done = true;
                conn.handle_eof(now);
            }
            Ok(_) => conn.handle_bytes(&self.buf, now),
            Err(e) => {
                self.done = true;
                conn.handle_read_failed(e);
            }
        }
    }
}

/// Everything one connection's task holds.
struct Driver<'a> {
    peer: SocketAddr,
    /// The socket (for what the viewer has taken while the connection lingers).
    fd: RawFd,
    cfg: &'a ConnConfig,
    /// Whether the machine was told that the time to deliver is over.
    told_over: bool,
    hub: &'a Hub,
    fan_out: &'a FanOut,
    slots: &'a Arc<Semaphore>,
    clock: Clock,
    conn: Conn,
    input: Input,
    /// The viewer slot, once taken.
    permit: Option<OwnedSemaphorePermit>,
    /// Its place among the connections before their hello, until it is given up.
    waiting: Option<Admitted>,
    /// Plain TCP: the slot where the writer parks for the fan-out.
    direct: Option<Arc<Direct>>,
    tcp: bool,
}

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
        let clock = Clock(Instant::now());
        let mut conn = Conn::new(cfg.machine(), peer.to_string(), 0);
        let evicted = waiting.evicted.clone();
        // The TLS handshake counts in the hello's time.
        let accepted = async {
            match &cfg.tls {
                Some(tls) => match tls.acceptor.accept(stream).await {
                    Ok(s) => {
                        let (r, w) = tokio::io::split(s);
                        Ok((Box::new(r) as Reader, Writer::Tls(w)))
                    }
                    Err(e) => Err((tls, e)),
                },
                None => {
                    let (r, w) = stream.into_split();
                    Ok((Box::new(r) as Reader, Writer::Tcp(w)))
                }
            }
        };
        let (reader, writer) = tokio::select! {
            biased;
            () = evicted.cancelled() => {
                debug!("closed to make room for newer connections");
                return;
            }
            () = until(&clock, conn.poll_timeout()) => {
                conn.handle_timeout(clock.now());
                let mut d = (&*hub, peer);
                while let Some(e) = conn.poll_event() {
                    note(&mut d, e);
                }
                return;
            }
            got = accepted => match got {
                Ok(got) => got,
                Err((tls, e)) => {
                    hub.counters.refused.fetch_add(1, Ordering::Relaxed);
                    tls.identity.refused(&e);
                    return;
                }
            },
        };
        let mut d = Driver {
            peer,
            fd,
            cfg: &cfg,
            told_over: false,
            hub: &hub,
            fan_out: &fan_out,
            slots: &slots,
            clock,
            conn,
            input: Input {
                reader,
                buf: BytesMut::with_capacity(READ_BUFFER),
                done: false,
            },
            permit: None,
            tcp: matches!(writer, Writer::Tcp(_)),
            waiting: Some(waiting),
            direct: None,
        };
        d.run(writer).await;
        drop(d.permit.take());
    }
    .instrument(span)
    .await
}

/// The log line or counter of an event that needs nothing of the connection.
fn note((hub, peer): &mut (&Hub, SocketAddr), e: Event) {
    match e {
        Event::Refused { reason, log } => {
            hub.counters.refused.fetch_add(1, Ordering::Relaxed);
            match reason {
                Some(reason) => info!(reason = reason.name(), "refused: {log}"),
                None => info!("refused: {log}"),
            }
        }
        Event::ProtocolError => {
            hub.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
        }
        Event::Stalled => {
            hub.counters.stalled.fetch_add(1, Ordering::Relaxed);
        }
        Event::Attached { id, step } => {
            hub.counters.viewers.fetch_add(1, Ordering::Relaxed);
            hub.counters.viewers_total.fetch_add(1, Ordering::Relaxed);
            info!(id, step, "viewer {peer} attached at step {step}");
        }
        Event::Resynced { from, to, count } => {
            if count == 1 {
                info!(
                    step = from,
                    to,
                    "viewer {peer} fell more than the queue behind at step {from}: resynced from the host's snapshot at step {to} (later resyncs are counted in its leave line)"
                );
            } else {
                debug!(step = to, "resync");
            }
        }
        Event::Left(left) => {
            hub.counters.viewers.fetch_sub(1, Ordering::Relaxed);
            log_left(&left, *peer, hub.step());
        }
        // Admission needs the driver.
        Event::Accepted => {}
    }
}

/// Logs `viewer ADDR left at step S: WHY`, one line, at `info` when the stream ended or
/// the viewer closed, at `warn` when the viewer was dropped or closed for misbehaving.
fn log_left(left: &Left, peer: SocketAddr, host_step: u64) {
    let (id, step, resyncs) = (left.id, left.step, left.resyncs);
    if left.why.bad() {
        warn!(id, step, host_step, resyncs, "viewer {peer} {left}");
    } else {
        info!(id, step, host_step, resyncs, "viewer {peer} {left}");
    }
}

impl Driver<'_> {
    /// Sees to the machine's events: the log, the counters, and the admission of a viewer
    /// whose hello was accepted.
    fn events(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            match e {
                Event::Accepted => self.admit(),
                e => note(&mut (self.hub, self.peer), e),
            }
        }
        // A refused hello keeps its place among the waiting connections until its end is
        // sent; an accepted one gives it up before it takes a viewer slot.
        if self.conn.is_closed() {
            self.waiting = None;
        }
    }

    /// A viewer whose hello was accepted takes a viewer slot and joins the hub at its
    /// step; else it is refused (the host is full) or sent the stream's end.
    fn admit(&mut self) {
        self.waiting = None;
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            self.conn.handle_full();
            return;
        };
        match self.hub.join(None) {
            Some(joined) => {
                self.permit = Some(permit);
                self.conn.handle_join(Some(joined));
            }
            // Not counted as a refusal: the stream is over for everyone.
            None => self.conn.handle_stream_over(self.hub.ended()),
        }
    }

    async fn run(&mut self, mut writer: Writer) {
        loop {
            self.events();
            if self.conn.is_closed() {
                return;
            }
            if !self.told_over && self.cfg.delivery_over.is_cancelled() {
                self.told_over = true;
                self.conn.handle_delivery_over();
                continue;
            }
            let now = self.clock.now();
            if let Some(t) = self.conn.poll_transmit(now, self.hub.step()) {
                self.write(&mut writer, t).await;
                continue;
            }
            if self.conn.is_closed() {
                continue;
            }
            match self.conn.poll_request() {
                Some(Request::Take { wait: false }) => {
                    self.take();
                }
                Some(Request::Take { wait: true }) if self.tcp => {
                    writer = match self.park(writer).await {
                        Some(w) => w,
                        None => {
                            self.conn.handle_writer_lost();
                            self.events();
                            return;
                        }
                    }
                }
                Some(Request::Take { wait: true }) => self.wait_woken().await,
                Some(Request::Join) => self.conn.handle_join(self.hub.join(Some(self.conn.id()))),
                Some(Request::Unacknowledged) => {
                    let n = unacknowledged(self.fd).unwrap_or(0);
                    self.conn.handle_unacknowledged(n, self.clock.now());
                }
                Some(Request::Drift(step)) => {
                    let reply = self.hub.drift(step);
                    info!(step, status = ?reply.status, "drift request answered");
                    self.conn.handle_drift_reply(reply);
                }
                None => {
                    let at = self.conn.poll_timeout();
                    if at.is_none() && self.input.done {
                        // Nothing can happen any more (not reached).
                        return;
                    }
                    let hello = self.conn.before_hello();
                    tokio::select! {
                        biased;
                        () = evicted(&self.waiting), if hello => {
                            debug!("closed to make room for newer connections");
                            return;
                        }
                        r = self.input.read() => self.input.feed(&mut self.conn, r, self.clock.now()),
                        () = until(&self.clock, at) => self.conn.handle_timeout(self.clock.now()),
                    }
                }
            }
        }
    }

    /// Takes the records past the viewer's position from the hub's ring; `false` when
    /// there were none.
    fn take(&mut self) -> bool {
        let mut position = self.conn.position();
        let take = self.hub.take(&mut position, BATCH, self.conn.take_buffer());
        let found = !matches!(take, Take::Nothing);
        self.conn.handle_take(take, position, self.hub.step());
        found
    }

    /// Writes the machine's frames as one write, reading what the viewer sends meanwhile,
    /// until it is written or the machine's time for it is up.
    async fn write(&mut self, writer: &mut Writer, t: Transmit) {
        let Transmit { frames, shutdown } = t;
        let over = &self.cfg.delivery_over;
        let done = {
            let write = async {
                write_frames(writer, &frames).await?;
                // The end was written: the write side is shut down (an error here is the
                // shutdown's, `Ok(false)`).
                Ok::<bool, std::io::Error>(!shutdown || writer.shutdown().await.is_ok())
            };
            tokio::pin!(write);
            loop {
                let at = self.conn.poll_timeout();
                tokio::select! {
                    biased;
                    r = &mut write => break Some(r),
                    r = self.input.read() => self.input.feed(&mut self.conn, r, self.clock.now()),
                    () = over.cancelled(), if !self.told_over => {
                        self.told_over = true;
                        self.conn.handle_delivery_over();
                        if !self.conn.is_writing() {
                            break None;
                        }
                    }
                    () = until(&self.clock, at) => {
                        self.conn.handle_timeout(self.clock.now());
                        if !self.conn.is_writing() {
                            break None;
                        }
                    }
                }
            }
        };
        match done {
            Some(Ok(true)) => self.conn.handle_sent(frames, self.clock.now()),
            Some(Ok(false)) => self.conn.handle_shutdown_failed(),
            Some(Err(e)) => self.conn.handle_write_failed(e),
            // Stalled or undelivered: the machine has seen to it.
            None => {}
        }
    }

    /// Caught up on TLS: registers for the fan-out's wake before taking again, so that a
    /// record published in between is not missed, then waits for it, the viewer or the
    /// machine's time.
    async fn wait_woken(&mut self) {
        let hub = self.hub;
        let notified = hub.published().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.take() {
            return;
        }
        let at = self.conn.poll_timeout();
        tokio::select! {
            biased;
            r = self.input.read() => self.input.feed(&mut self.conn, r, self.clock.now()),
            () = &mut notified => {}
            () = until(&self.clock, at) => self.conn.handle_timeout(self.clock.now()),
        }
    }

    /// Caught up on plain TCP: parks the writer for the fan-out, which writes the next
    /// records itself, and waits for what it cannot write, the viewer or the machine's
    /// time; then takes the writer back and tells the machine what the fan-out did.
    /// `None` only if the writer was lost.
    async fn park(&mut self, writer: Writer) -> Option<Writer> {
        let direct = match &self.direct {
            Some(direct) => direct.clone(),
            None => {
                let direct = Arc::new(Direct::new());
                self.fan_out.register(self.hub, &direct);
                self.direct = Some(direct.clone());
                direct
            }
        };
        let woken = direct.woken();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let c = &self.conn;
        let parked = direct.park(
            self.hub,
            writer,
            c.position(),
            c.step(),
            self.clock.at(c.last_sent()),
        );
        if let Err(back) = parked {
            // Records came since the last take (or the end): take them.
            self.take();
            return Some(back);
        }
        let at = self.conn.poll_timeout();
        enum Woke {
            Read(std::io::Result<usize>),
            Records,
            Time,
        }
        let woke = tokio::select! {
            biased;
            r = self.input.read() => Woke::Read(r),
            () = &mut woken => Woke::Records,
            () = until(&self.clock, at) => Woke::Time,
        };
        let back = direct.unpark()?;
        self.conn.handle_unparked(
            back.position,
            back.step,
            self.clock.ms(back.last_sent),
            back.handed,
        );
        let now = self.clock.now();
        match woke {
            Woke::Read(r) => self.input.feed(&mut self.conn, r, now),
            Woke::Records => {}
            Woke::Time => self.conn.handle_timeout(now),
        }
        Some(back.writer)
    }
}

/// The bytes in the socket `fd` that the peer has not acknowledged yet (sent or not);
/// `None` if the kernel does not say.
fn unacknowledged(fd: RawFd) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is the connection's socket, open while its task is (it holds the
    // socket's halves); TIOCOUTQ (SIOCOUTQ) only writes the count into `n`.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(u64::try_from(n).unwrap_or(0))
}
