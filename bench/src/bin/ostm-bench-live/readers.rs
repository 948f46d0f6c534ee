//! In-process viewers: each verifies every record it receives (decode the frame, run the
//! step, hash the world, compare with the host's hash), as `ostm-viewer` does, and notes
//! the wall-clock time at which it verified each stamped step.
//!
//! The rules are the viewer's own: the reader machines [`tcp::Reader`] (docs/protocol.md:
//! the handshake, heartbeats, silence, runs of records) and [`nats::Reader`]
//! (docs/fan-out.md: the stream's messages once each by sequence, gaps, keyframes), what
//! they hand over given to the verifier ([`session::Verifier`]) through [`Arrival`], as
//! `ostm-viewer` does, run by the viewer's own driver loops (ostm-runtime's [`read`] and
//! [`follow`]). The bench's side of them only verifies: no spool, TLS, reconnection or
//! drift request (a drift, a failure or a lost connection ends the viewer with its
//! sentence).

use ostm_protocol::reader::{nats, tcp, Arrival};
use ostm_protocol::session::{self, Goal, Limits, Stop};
use ostm_protocol::sim::op::for_each_op;
use ostm_protocol::wire::{RecordRef, ToHost};
use ostm_protocol::Op;
use ostm_runtime::follow::{follow, Followed, Hand};
use ostm_runtime::read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Records a viewer verifies before it lets the other viewers of its thread run: like a
/// viewer process of its own, none may keep the others from reading for long.
const YIELD_EVERY: u64 = 64;

/// Bytes read from a socket at once, at most: about a hundred records of the embedded
/// world, so that a viewer far behind yields about every [`YIELD_EVERY`] records.
const READ_BUFFER: usize = 8 * 1024;

/// What one viewer has done so far, read by the bench while it runs.
#[derive(Debug, Default)]
pub struct Counts {
    pub verified: AtomicU64,
    pub resyncs: AtomicU64,
}

/// One viewer: the viewer's own sans-IO verifier ([`session::Verifier`]), and the times
/// it verified stamped steps.
pub struct Verifier {
    core: session::Verifier,
    ops: Vec<Op>,
    every: u64,
    /// The step whose hash differed, if one did.
    drift: Option<u64>,
    /// Records verified since the viewer last let the others run.
    unyielded: u64,
    /// (world step, unix ns when verified), for steps that are multiples of `every`.
    pub verdicts: Vec<(u64, u128)>,
    pub counts: Arc<Counts>,
}

impl Verifier {
    pub fn new(every: u64) -> Verifier {
        Verifier {
            core: session::Verifier::new(Limits::default(), Goal::default(), false),
            ops: Vec::new(),
            every: every.max(1),
            drift: None,
            unyielded: 0,
            verdicts: Vec::new(),
            counts: Arc::new(Counts::default()),
        }
    }

    /// Whether the viewer took the host's end with every step from its attach to the
    /// end's step verified (no gap, none left open).
    pub fn verified_to_the_end(&self) -> bool {
        matches!(self.core.stop(), Some(Stop::HostEnded(_)))
            && self.core.summary(0).gaps.is_empty()
            && self.core.resyncs() == 0
    }

    /// What a reader handed over, given to the verifier (records verified one by one);
    /// `attached` counts the first attach. A drift or a failure ends the viewer.
    fn take(&mut self, a: Arrival, attached: &AtomicUsize) -> Result<(), String> {
        let first = self.core.attached_at().is_none();
        match a.give(&mut self.core) {
            Some(Arrival::Record(r)) => {
                let mut ops = std::mem::take(&mut self.ops);
                ops.clear();
                let decoded = for_each_op("record", &r.input, 0, |op| ops.push(op));
                if decoded.is_ok() {
                    self.verify(RecordRef::from(&r), &ops);
                }
                self.ops = ops;
                decoded.map_err(|e| e.to_string())?;
            }
            Some(Arrival::Records(run)) => {
                let mut ops = std::mem::take(&mut self.ops);
                let decoded = run.decode_each(&mut ops, |r, ops| self.verify(r, ops));
                self.ops = ops;
                decoded.map_err(|e| format!("protocol error: {e}"))?;
            }
            // A notice of missing records: the verifier waits for the keyframe.
            _ => {}
        }
        while let Some(e) = self.core.poll_event() {
            if let session::Event::Restarted { .. } = e {
                self.counts.resyncs.fetch_add(1, Ordering::Relaxed);
            }
        }
        if first && self.core.attached_at().is_some() {
            attached.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(step) = self.drift {
            return Err(format!("drift at step {step}"));
        }
        match self.core.stop() {
            Some(Stop::Failed(f)) => Err(f.to_string()),
            Some(Stop::Drift(d)) => Err(d.headline()),
            _ => Ok(()),
        }
    }

    /// One record: whether the viewer goes on (its hash matched).
    fn verify(&mut self, r: RecordRef<'_>, ops: &[Op]) -> bool {
        if self.core.handle_record(r, ops).is_none() {
            if !self.core.is_stopped() {
                self.drift = Some(r.step + 1);
            }
            return false;
        }
        self.counts.verified.fetch_add(1, Ordering::Relaxed);
        self.unyielded += 1;
        let step = self.core.world().step;
        if step.is_multiple_of(self.every) {
            self.verdicts.push((step, now_ns()));
        }
        true
    }

    /// Lets the other viewers of the thread run once this one has verified
    /// [`YIELD_EVERY`] records since it last did.
    async fn fair(&mut self) {
        if self.unyielded >= YIELD_EVERY {
            self.unyielded = 0;
            // Bytes already read cost no budget: without this, one viewer far behind
            // would hold its thread for as long as its backlog lasts.
            tokio::task::yield_now().await;
        }
    }
}

/// A viewer over TCP until `stop` or the host's end: the TCP reader's machine
/// ([`tcp::Reader`], no reconnection) run by the viewer's driver loop ([`read`]) on one
/// connection, every record verified.
pub async fn tcp(
    addr: String,
    v: Verifier,
    attached: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> Result<Verifier, String> {
    let cfg = tcp::Config {
        addr,
        token: None,
        reconnect_ms: None,
        tls: false,
        one_at_a_time: false,
    };
    let opts = read::Options {
        read_buffer: READ_BUFFER,
        small_receive_buffer: false,
    };
    let mut hand = Verifying { v, attached };
    let ran = tokio::select! {
        r = read::read(cfg, opts, Instant::now(), &mut hand) => r,
        _ = stop.cancelled() => Ok(()),
    };
    ran.map(|()| hand.v)
}

/// Retries `f` for up to 30 s, every 100 ms at first and then less often (the host
/// creates the stream and publishes its first keyframe a moment after it starts; a server
/// busy with the viewers already attached times requests out).
async fn retry<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> Result<T, String> {
    let mut last = String::new();
    let mut wait = Duration::from_millis(100);
    let give_up = Instant::now() + Duration::from_secs(30);
    while Instant::now() < give_up {
        match f().await {
            Ok(t) => return Ok(t),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
    Err(format!("{what}: {last}"))
}

/// How the error of a viewer that never attached begins: the caller counts those among
/// the viewers not attached, not a second time as failed.
pub const NOT_ATTACHED: &str = "not attached: ";

/// A viewer through NATS until `stop` or the session's end: the session's latest
/// keyframe, then every message of its stream from there in order through the NATS
/// reader's machine ([`nats::Reader`]: repeats skipped, a gap closed by the next keyframe),
/// as `ostm-viewer` does (docs/fan-out.md, "What a viewer does", "Gaps").
pub async fn nats(
    url: String,
    session: String,
    mut v: Verifier,
    attached: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> Result<Verifier, String> {
    use ostm_protocol::wire::nats::Session;
    let session = Session::new(&session)?;
    let keys = session.keyframes();
    let filter = session.filter();
    let join = async {
        let client = retry("connect", || async_nats::connect(url.as_str())).await?;
        let js = async_nats::jetstream::new(client);
        let stream_name = session.stream();
        let stream = retry("stream", || js.get_stream(stream_name.as_str())).await?;
        let key = retry("keyframe", || {
            stream.direct_get_last_for_subject(keys.as_str())
        })
        .await?;
        let place = format!("{url}: subject {keys}, stream sequence {}", key.sequence);
        let world =
            ostm_protocol::wire::nats::keyframe(&place, &key.payload).map_err(|e| e.to_string())?;
        let rate = ostm_runtime::join::rate(&key.headers);
        // A server busy delivering to the viewers already attached may time this out.
        let messages = retry("consumer", || {
            ostm_runtime::join::read_from(&stream, &filter, key.sequence + 1)
        })
        .await?;
        Ok::<_, String>((stream, key.sequence, world, rate, messages))
    };
    let (stream, key_seq, world, rate, messages) = tokio::select! {
        // Not attached when the case ends: the caller counts it as failed, once.
        _ = stop.cancelled() => return Ok(v),
        j = join => j.map_err(|e| format!("{NOT_ATTACHED}{e}"))?,
    };
    let name = format!("{url}/{}", session.name());
    let mut m = nats::Reader::new(name, session, world.clone(), key_seq, 0);
    v.take(nats::joined(world, rate, 1), &attached)?;
    let mut hand = Verifying { v, attached };
    let followed = tokio::select! {
        f = follow(&stream, &filter, &mut m, messages, &mut hand) => f,
        _ = stop.cancelled() => return Ok(hand.v),
    };
    match followed {
        Followed::End(_) => Ok(hand.v),
        Followed::Stopped(why) => Err(why),
        Followed::Refused(e) => Err(e.to_string()),
        Followed::Silent => Err(format!(
            "the session sent nothing for {} ms",
            nats::SILENCE_MS
        )),
        Followed::StreamEnded => Err(format!(
            "the stream {} ended",
            stream.cached_info().config.name
        )),
    }
}

/// The bench's side of the TCP and NATS driver loops ([`read`], [`follow`]): what the
/// machine delivers is verified at once; no drift request (a drift ends the viewer).
struct Verifying {
    v: Verifier,
    attached: Arc<AtomicUsize>,
}

impl read::Hand for Verifying {
    type Stop = String;

    fn deliver(&mut self, _: &mut tcp::Reader, a: Arrival) -> Result<(), String> {
        self.v.take(a, &self.attached)
    }

    /// The heartbeats say the viewer's step.
    fn viewer_step(&self) -> u64 {
        self.v.core.world().step
    }

    async fn after_data(&mut self, _: &mut tcp::Reader, _: u64) -> Result<(), String> {
        self.v.fair().await;
        Ok(())
    }
}

impl Hand for Verifying {
    type Stop = String;

    fn deliver(&mut self, _: &mut nats::Reader, batch: &mut Vec<Arrival>) -> Result<(), String> {
        for a in batch.drain(..) {
            self.v.take(a, &self.attached)?;
        }
        Ok(())
    }

    async fn request(&mut self) -> Option<ToHost> {
        std::future::pending().await
    }

    async fn pass_on(&mut self, _: ToHost) {}

    async fn after_message(&mut self) {
        // One message, and the other viewers of the thread run.
        tokio::task::yield_now().await;
    }
}
