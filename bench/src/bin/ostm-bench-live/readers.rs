//! In-process viewers: each verifies every record it receives (decode the frame, run the
//! step, hash the world, compare with the host's hash), as `ostm-viewer` does, and notes
//! the wall-clock time at which it verified each stamped step. Over TCP they speak
//! docs/protocol.md to the host; through NATS they read the session as docs/fan-out.md
//! says (the latest keyframe, then an ordered consumer from its stream sequence).

use futures::{SinkExt, StreamExt};
use ostm_protocol::session::{self, Feed, Goal, Input, Limits, Stop};
use ostm_protocol::sim::op::for_each_op;
use ostm_protocol::wire::{Record, RecordRef, SnapshotKind, ToHost, ToViewer};
use ostm_protocol::{Op, World};
use ostm_runtime::ViewerFrameCodec;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Records a viewer verifies before it lets the other viewers of its thread run: like a
/// viewer process of its own, none may keep the others from reading for long.
const YIELD_EVERY: u64 = 64;

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
    feed: Feed,
    ops: Vec<Op>,
    every: u64,
    /// (world step, unix ns when verified), for steps that are multiples of `every`.
    pub verdicts: Vec<(u64, u128)>,
    pub counts: Arc<Counts>,
}

impl Verifier {
    pub fn new(every: u64) -> Verifier {
        Verifier {
            core: session::Verifier::new(Limits::default(), Goal::default(), false),
            feed: Feed::new(),
            ops: Vec::new(),
            every: every.max(1),
            verdicts: Vec::new(),
            counts: Arc::new(Counts::default()),
        }
    }

    /// The step the next record must have, once attached.
    fn next(&self) -> Option<u64> {
        self.core.attached_at().map(|_| self.core.world().step)
    }

    /// A snapshot: the attach (the first), or a resync on the same connection.
    fn snapshot(&mut self, world: World) {
        let input = match self.core.attached_at() {
            None => Input::Attached {
                world,
                connection: 0,
            },
            Some(_) => Input::Resync(world),
        };
        self.core.handle(input);
        self.events();
    }

    /// A keyframe on the stream, by the rule the viewer's NATS reader follows ([`Feed`]).
    fn keyframe(&mut self, world: World) {
        self.feed.keyframe(&mut self.core, world);
        self.events();
    }

    /// A record on the stream: skipped when a repeat or inside a gap, verified otherwise.
    fn stream_record(&mut self, r: &Record) -> Result<(), String> {
        self.decode(r)?;
        let fed = self
            .feed
            .record(&mut self.core, RecordRef::from(r), &self.ops);
        self.events();
        match fed {
            Some(_) => {
                self.verified_one();
                Ok(())
            }
            None if self.core.is_stopped() => Err(self.why_stopped(r)),
            None => Ok(()),
        }
    }

    fn events(&mut self) {
        while let Some(e) = self.core.poll_event() {
            if let session::Event::Restarted { .. } = e {
                self.counts.resyncs.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn decode(&mut self, r: &Record) -> Result<(), String> {
        self.ops.clear();
        let ops = &mut self.ops;
        for_each_op("record", &r.input, 0, |op| ops.push(op)).map_err(|e| e.to_string())
    }

    fn why_stopped(&self, r: &Record) -> String {
        match self.core.stop() {
            Some(Stop::Failed(f)) => f.to_string(),
            _ => format!("drift at step {}", r.step + 1),
        }
    }

    fn verified_one(&mut self) {
        self.counts.verified.fetch_add(1, Ordering::Relaxed);
        let step = self.core.world().step;
        if step.is_multiple_of(self.every) {
            self.verdicts.push((step, now_ns()));
        }
    }

    fn record(&mut self, r: &Record) -> Result<(), String> {
        self.decode(r)?;
        if self
            .core
            .handle_record(RecordRef::from(r), &self.ops)
            .is_none()
        {
            return Err(self.why_stopped(r));
        }
        self.verified_one();
        Ok(())
    }
}

/// A viewer over TCP until `stop`: hello, then every record verified, a heartbeat a second.
pub async fn tcp(
    addr: String,
    mut v: Verifier,
    attached: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> Result<Verifier, String> {
    let stream = TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut conn = Framed::new(stream, ViewerFrameCodec::new(addr));
    conn.send(ostm_protocol::reader::tcp::hello(None))
        .await
        .map_err(|e| e.to_string())?;
    let mut beat = tokio::time::interval(Duration::from_secs(1));
    let mut taken: u64 = 0;
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => break,
            _ = beat.tick() => {
                let viewer_step = v.next().unwrap_or(0);
                let _ = conn.send(ToHost::Heartbeat { viewer_step }).await;
                continue;
            }
            m = conn.next() => match m {
                None => break,
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(m)) => m,
            },
        };
        match msg {
            ToViewer::Snapshot { kind, world } => {
                if kind == SnapshotKind::Attach {
                    attached.fetch_add(1, Ordering::Relaxed);
                }
                v.snapshot(world);
            }
            ToViewer::Record(r) => {
                v.record(&r)?;
                taken += 1;
                if taken.is_multiple_of(YIELD_EVERY) {
                    // Frames already buffered cost no budget: without this, one viewer
                    // far behind would hold its thread for as long as its backlog lasts
                    // while the host's writes to the others stall.
                    tokio::task::yield_now().await;
                }
            }
            ToViewer::End(_) => break,
            _ => {}
        }
    }
    Ok(v)
}

/// Decodes every frame of a NATS message's payload.
fn frames(payload: &[u8]) -> Result<Vec<ToViewer>, String> {
    ostm_protocol::wire::nats::frames("nats message", payload)
        .and_then(|f| f.map(|r| r.map(|(_, m)| m)).collect())
        .map_err(|e| e.to_string())
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
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < give_up {
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

/// A viewer through NATS until `stop`: the session's latest keyframe, then every message
/// of its stream from there in order; a record past the next step is skipped, and a
/// keyframe past the next step closes the gap (counted as a resync), as `ostm-viewer` does
/// (docs/fan-out.md, "Gaps").
pub async fn nats(
    url: String,
    session: String,
    mut v: Verifier,
    attached: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> Result<Verifier, String> {
    use async_nats::jetstream;
    use ostm_protocol::wire::nats::{Leaf, Session};
    let session = Session::new(&session)?;
    let keys = session.keyframes();
    let join = async {
        let client = retry("connect", || async_nats::connect(url.as_str())).await?;
        let js = jetstream::new(client);
        let stream_name = session.stream();
        let stream = retry("stream", || js.get_stream(stream_name.as_str())).await?;
        let key = retry("keyframe", || {
            stream.direct_get_last_for_subject(keys.as_str())
        })
        .await?;
        let Some(ToViewer::Snapshot { world, .. }) = frames(&key.payload)?.pop() else {
            return Err("the keyframe is not a snapshot".to_string());
        };
        // A server busy delivering to the viewers already attached may time this out.
        let filter = session.filter();
        let messages = retry("consumer", || {
            ostm_runtime::join::read_from(&stream, &filter, key.sequence + 1)
        })
        .await?;
        Ok((world, messages))
    };
    let (world, mut messages) = tokio::select! {
        // Not attached when the case ends: the caller counts it as failed, once.
        _ = stop.cancelled() => return Ok(v),
        j = join => j.map_err(|e| format!("{NOT_ATTACHED}{e}"))?,
    };
    v.snapshot(world);
    attached.fetch_add(1, Ordering::Relaxed);
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => break,
            m = messages.next() => match m {
                None => break,
                Some(Err(_)) => continue,
                Some(Ok(m)) => m,
            },
        };
        let subject = msg.subject.as_str();
        match session.leaf(subject) {
            Leaf::Records => {
                for m in frames(&msg.payload)? {
                    let ToViewer::Record(r) = m else {
                        return Err(format!("{subject}: not a record"));
                    };
                    v.stream_record(&r)?;
                }
            }
            Leaf::Keyframes => {
                if let Some(ToViewer::Snapshot { world, .. }) = frames(&msg.payload)?.pop() {
                    v.keyframe(world);
                }
            }
            Leaf::End => break,
            Leaf::Other => {}
        }
        tokio::task::yield_now().await;
    }
    Ok(v)
}
