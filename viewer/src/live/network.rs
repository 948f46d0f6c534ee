//! The viewer's reader: connects, does the handshake, and reads the host's messages as
//! fast as they arrive into the [`Spool`], on a thread of its own, whatever the verifier
//! is doing. It sends the viewer's heartbeats and drift requests, and, with `--reconnect`,
//! connects again after a lost connection (docs/protocol.md, "Reconnecting").
//!
//! The rules are the sans-IO machine [`tcp::Reader`] (ostm-protocol), run by the driver
//! loop the bench shares ([`read`], ostm-runtime: sockets, the clock, reads and writes);
//! this file is the viewer's side of it: the spool, TLS, the receive mark and the test
//! read throttle.

use super::shared::{Ended, Shared, DRIFT_REPLY_TIMEOUT, HOST_CLOSED, NATS_READER_STOPPED};
use super::spool::{Full, Item, Spool};
use super::tls::{explain, Tls};
use super::watermark::{self, Watermark};
use ostm_protocol::reader::tcp;
pub use ostm_protocol::reader::tcp::Lost;
use ostm_protocol::session::Millis;
use ostm_protocol::wire::{DriftReply, ToHost};
use ostm_runtime::read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
                                Spooling::run(dial, sp, shared.clone(), from_verifier, reply_tx)
                                    .await
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

/// The viewer's side of the TCP/TLS driver loop ([`read`]): what the machine delivers
/// goes to the spool in batches (its bound reached or drained told back to the machine),
/// drift requests and their replies pass between the verifier and the connection, and
/// the TLS set-up, the receive mark and the test read throttle are the viewer's own.
struct Spooling {
    dial: Dial,
    spool: Arc<Spool>,
    shared: Arc<Shared>,
    from_verifier: mpsc::UnboundedReceiver<ToHost>,
    replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
    /// When the reader started: the machine's clock counts from here (the driver's, the
    /// spool's bound and the read throttle's).
    started: tokio::time::Instant,
    /// What goes to the spool, under one lock per [`BATCH`] items.
    batch: Vec<Item>,
    /// Records read so far, counted only under the test's read throttle.
    throttled: u64,
    /// The current connection's receive mark.
    mark: Watermark,
}

impl Spooling {
    /// Reads the connections `dial` names until the reader stops; its last word is then
    /// in the spool.
    async fn run(
        dial: Dial,
        spool: Arc<Spool>,
        shared: Arc<Shared>,
        from_verifier: mpsc::UnboundedReceiver<ToHost>,
        replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
    ) {
        let cfg = tcp::Config {
            addr: dial.addr.clone(),
            token: dial.token.clone(),
            reconnect_ms: dial.reconnect.map(|d| d.as_millis() as u64),
            tls: dial.tls.is_some(),
            one_at_a_time: dial.throttle_read.is_some(),
        };
        let opts = read::Options {
            read_buffer: READ_BUFFER,
            small_receive_buffer: dial.throttle_read.is_some(),
        };
        let mut hand = Spooling {
            dial,
            spool,
            shared,
            from_verifier,
            replies,
            started: tokio::time::Instant::now(),
            batch: Vec::with_capacity(BATCH),
            throttled: 0,
            mark: Watermark::new(None),
        };
        let started = hand.started;
        match read::read(cfg, opts, started, &mut hand).await {
            Ok(()) => {}
            Err(never) => match never {},
        }
        let _ = hand.spool.push_all(&mut hand.batch);
    }
}

impl read::Hand for Spooling {
    type Stop = std::convert::Infallible;

    fn deliver(&mut self, m: &mut tcp::Reader, a: Item) -> Result<(), Self::Stop> {
        if let Item::Attached { connection, .. } = &a {
            self.shared.connection.store(*connection, Ordering::SeqCst);
            // Each connection's host says its own step: a host restarted behind the step
            // the old one had reached must not leave the lag counted from the old one.
            self.shared
                .host_step
                .store(m.host_step(), Ordering::Relaxed);
        }
        let flush =
            matches!(a, Item::Attached { .. } | Item::End(_)) || self.batch.len() + 1 >= BATCH;
        self.batch.push(a);
        if flush {
            self.flush(m)?;
        }
        Ok(())
    }

    /// Hands the batch to the spool; a spool that fails stops the reader.
    fn flush(&mut self, m: &mut tcp::Reader) -> Result<(), Self::Stop> {
        let end = self.batch.iter().any(|i| matches!(i, Item::End(_)));
        if let Err(e) = self.spool.push_all(&mut self.batch) {
            self.batch.clear();
            if Full::is(&e) {
                m.handle_spool_full(now(self.started), e.to_string());
                return Ok(());
            }
            let why = if end {
                Lost::SpoolEnd
            } else {
                Lost::Spool(e.to_string())
            };
            m.handle_spool_failed(why);
        }
        Ok(())
    }

    fn after_events(&mut self, m: &tcp::Reader) {
        self.shared
            .host_step
            .fetch_max(m.host_step(), Ordering::Relaxed);
    }

    fn reply(&mut self, r: Result<DriftReply, String>) {
        let _ = self.replies.send(r);
    }

    async fn spool_drained(&mut self) {
        while !self.spool.disk_drained() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn viewer_step(&self) -> u64 {
        self.shared.viewer_step.load(Ordering::Relaxed)
    }

    async fn request(&mut self) -> Option<ToHost> {
        self.from_verifier.recv().await
    }

    fn secure(&mut self, tcp: read::Counted) -> read::Secured {
        let Some(tls) = self.dial.tls.clone() else {
            return read::Secured::Plain(tcp);
        };
        let addr = self.dial.addr.clone();
        read::Secured::Tls(Box::pin(async move {
            match tls.connector.connect(tls.name.clone(), tcp).await {
                Ok(s) => Ok(Box::new(s) as Box<dyn read::Io>),
                Err(e) => Err(explain(&addr, &tls.name, &e)),
            }
        }))
    }

    async fn after_data(&mut self, m: &mut tcp::Reader, records: u64) -> Result<(), Self::Stop> {
        let Some(per_second) = self.dial.throttle_read else {
            return Ok(());
        };
        if records > 0 {
            self.throttled += 1;
            let due = self.started
                + Duration::from_secs_f64(self.throttled as f64 / per_second.max(1) as f64);
            self.flush(m)?;
            tokio::time::sleep_until(due).await;
        }
        Ok(())
    }

    fn reading(&mut self, fd: Option<std::os::fd::RawFd>) {
        self.mark = Watermark::new(fd);
    }

    fn after_read(&mut self, n: usize) {
        self.mark.after_read(n);
    }

    fn patience(&self) -> Option<Duration> {
        self.mark.raised().then_some(watermark::PATIENCE)
    }

    fn waited(&mut self) {
        self.mark.lower();
    }
}

/// Milliseconds since `started`: the machine's clock.
fn now(started: tokio::time::Instant) -> Millis {
    started.elapsed().as_millis() as Millis
}
