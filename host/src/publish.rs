//! Publishing the live stream to NATS JetStream (docs/fan-out.md): records, keyframes and
//! the end on the subjects of one stream, and drift requests answered by request/reply.
//!
//! The stepping loop hands each step to [`Feed::step`] without ever waiting: the feed is a
//! bounded channel, and a step that finds it full is dropped (counted) and followed by a
//! keyframe once there is room again, so viewers resync there. The publisher task talks to
//! NATS at its own pace and reconnects through the client.

use crate::hub::Hub;
use async_nats::jetstream::{self, message::PublishMessage, stream};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use ostm_protocol::wire::{End, HostCodec, SnapshotKind, ToHost, ToViewer};
use ostm_protocol::World;
use std::collections::VecDeque;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;
use tracing::{info, warn};

/// Steps the feed holds while NATS is slow or away.
pub const FEED_CAPACITY: usize = 65_536;
/// Records in one message at most.
pub const MAX_BATCH_RECORDS: usize = 256;
/// Payload bytes in one message at most (records are added while they fit).
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
/// Publish acknowledgements awaited at once at most.
const IN_FLIGHT: usize = 1024;

/// The subjects and stream of one session (docs/fan-out.md, "Subjects").
#[derive(Debug, Clone)]
pub struct Names {
    pub session: String,
}

impl Names {
    pub fn stream(&self) -> String {
        format!("OSTM_{}", self.session)
    }
    pub fn records(&self) -> String {
        format!("ostm.{}.rec", self.session)
    }
    pub fn keyframes(&self) -> String {
        format!("ostm.{}.key", self.session)
    }
    pub fn end(&self) -> String {
        format!("ostm.{}.end", self.session)
    }
    pub fn drift(&self) -> String {
        format!("ostm.{}.drift", self.session)
    }
    /// The subjects the stream stores: records, keyframes and the end, not drift requests
    /// (a stream storing those would answer each with its acknowledgement before the host
    /// could).
    pub fn stored(&self) -> Vec<String> {
        vec![self.records(), self.keyframes(), self.end()]
    }
}

/// Checks a session name: 1..=64 of `A-Z a-z 0-9 _ -`.
///
/// # Errors
/// The name is empty, too long, or holds another character.
pub fn check_session(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--session `{name}`: expected 1..=64 characters of A-Z, a-z, 0-9, _ and -"
        ))
    }
}

/// What the publisher is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub names: Names,
    /// A keyframe every this many steps.
    pub keyframe_every: u64,
    /// The host's rate (0: as fast as it can), for the keyframes' header.
    pub rate: u32,
    pub max_age: Duration,
    pub max_bytes: i64,
    pub auth: ostm_protocol::cli::NatsAuthArgs,
}

/// Counters for the status line.
#[derive(Debug, Default)]
pub struct Counters {
    /// Steps handed to NATS and acknowledged by the stream.
    pub published: AtomicU64,
    /// Steps dropped because the feed was full.
    pub dropped: AtomicU64,
    /// Publishes that failed.
    pub failed: AtomicU64,
    pub connected: AtomicBool,
}

/// One thing to publish.
enum Item {
    Record { step: u64, frame: Bytes },
    Key { world: World },
    End(End),
}

/// The stepping loop's side of the publisher.
pub struct Feed {
    tx: mpsc::Sender<Item>,
    every: u64,
    need_key: bool,
    pub counters: Arc<Counters>,
}

impl Feed {
    /// Before the step from `world`: hands a keyframe of it over when one is due (every
    /// `--keyframe-every` steps, at the start, and after a dropped step). Never waits.
    pub fn before_step(&mut self, world: &World) {
        if self.need_key || world.step.is_multiple_of(self.every) {
            self.need_key = self
                .tx
                .try_send(Item::Key {
                    world: world.clone(),
                })
                .is_err();
        }
    }

    /// Hands the record of step `step` over (its frame). Never waits; a full feed drops
    /// it and asks for a keyframe at the next step.
    pub fn record(&mut self, step: u64, frame: &Bytes) {
        if self.need_key {
            // The keyframe this record needs did not fit: the record is no use without it.
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self
            .tx
            .try_send(Item::Record {
                step,
                frame: frame.clone(),
            })
            .is_err()
        {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            self.need_key = true;
        }
    }

    /// Hands the end over, waiting at most a second for room (a feed that stays full
    /// means NATS is away: the end is then not published).
    pub fn end(&self, end: End) {
        let mut item = Item::End(end);
        for _ in 0..100 {
            match self.tx.try_send(item) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(back)) => item = back,
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts the publisher on the current runtime; returns the stepping loop's feed and the
/// task, which ends after publishing the end (or when `stop` is cancelled).
pub fn start(
    opts: Options,
    hub: Arc<Hub>,
    stop: tokio_util::sync::CancellationToken,
) -> (Feed, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(FEED_CAPACITY);
    let counters = Arc::new(Counters::default());
    let feed = Feed {
        tx,
        every: opts.keyframe_every.max(1),
        need_key: true,
        counters: counters.clone(),
    };
    let task = tokio::spawn(run(opts, hub, rx, counters, stop));
    (feed, task)
}

async fn run(
    opts: Options,
    hub: Arc<Hub>,
    mut rx: mpsc::Receiver<Item>,
    counters: Arc<Counters>,
    stop: tokio_util::sync::CancellationToken,
) {
    let client = match opts.auth.connect_options().await {
        Ok(o) => match o.retry_on_initial_connect().connect(&opts.url).await {
            Ok(c) => c,
            Err(e) => {
                warn!("cannot connect to NATS at {}: {e}", opts.url);
                return;
            }
        },
        Err(e) => {
            warn!("{e}");
            return;
        }
    };
    let js = jetstream::new(client.clone());
    let names = opts.names.clone();
    // The stream, created or checked (retried while NATS is away).
    loop {
        let cfg = stream::Config {
            name: names.stream(),
            subjects: names.stored(),
            max_age: opts.max_age,
            max_bytes: opts.max_bytes,
            discard: stream::DiscardPolicy::Old,
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            allow_direct: true,
            ..Default::default()
        };
        let subjects = cfg.subjects.clone();
        match js.get_or_create_stream(cfg).await {
            Ok(s) => {
                // A stream made by an older host stored `ostm.NAME.*`, drift requests too:
                // it keeps its settings and gets the subjects of docs/fan-out.md.
                let mut have = s.cached_info().config.clone();
                if have.subjects != subjects {
                    info!(stream = %names.stream(), from = ?have.subjects, "setting the stream's subjects");
                    have.subjects = subjects;
                    if let Err(e) = js.update_stream(have).await {
                        warn!(
                            "cannot set the subjects of the NATS stream {}: {e}",
                            names.stream()
                        );
                    }
                }
                break;
            }
            Err(e) => {
                warn!(
                    "cannot create the NATS stream {}: {e}; retrying",
                    names.stream()
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
    }
    counters.connected.store(true, Ordering::Relaxed);
    info!(stream = %names.stream(), "publishing to NATS");
    tokio::spawn(answer_drift(client.clone(), names.drift(), hub));
    let mut acks: VecDeque<(u64, Ack)> = VecDeque::new();
    let mut batch = BytesMut::new();
    let mut pending: Option<Item> = None;
    loop {
        let first = match pending.take() {
            Some(i) => i,
            None => tokio::select! {
                i = rx.recv() => match i { Some(i) => i, None => break },
                _ = tokio::time::sleep(Duration::from_millis(100)), if !acks.is_empty() => {
                    settle_ready(&mut acks, &counters);
                    continue;
                }
                _ = stop.cancelled() => break,
            },
        };
        let (subject, id, step, count, payload) = match first {
            Item::Record { step, frame } => {
                // Records waiting now go in one message, while they fit.
                batch.clear();
                batch.extend_from_slice(&frame);
                let mut count = 1u64;
                while count < MAX_BATCH_RECORDS as u64 {
                    match rx.try_recv() {
                        Ok(Item::Record { step: s, frame: f })
                            if s == step + count && batch.len() + f.len() <= MAX_BATCH_BYTES =>
                        {
                            batch.extend_from_slice(&f);
                            count += 1;
                        }
                        Ok(other) => {
                            pending = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                (
                    names.records(),
                    format!("rec-{step}"),
                    step,
                    count,
                    batch.split().freeze(),
                )
            }
            Item::Key { world } => {
                let frame = match HostCodec::encode_frame(&ToViewer::Snapshot {
                    kind: SnapshotKind::Attach,
                    world: world.clone(),
                }) {
                    Ok(f) => f.0,
                    Err(e) => {
                        warn!("cannot encode a keyframe: {e}");
                        continue;
                    }
                };
                (
                    names.keyframes(),
                    format!("key-{}", world.step),
                    world.step,
                    0,
                    frame,
                )
            }
            Item::End(end) => {
                let step = end.host_step;
                let frame = match HostCodec::encode_frame(&ToViewer::End(end)) {
                    Ok(f) => f.0,
                    Err(_) => continue,
                };
                (names.end(), "end".to_string(), step, 0, frame)
            }
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Ostm-Step", step.to_string().as_str());
        if count > 0 {
            headers.insert("Ostm-Count", count.to_string().as_str());
        }
        if subject == names.keyframes() {
            headers.insert("Ostm-Rate", opts.rate.to_string().as_str());
        }
        let publish = PublishMessage::build()
            .payload(payload)
            .message_id(id)
            .headers(headers);
        match js.send_publish(subject, publish).await {
            Ok(ack) => acks.push_back((count, Box::pin(ack.into_future()))),
            Err(e) => {
                counters.failed.fetch_add(count.max(1), Ordering::Relaxed);
                warn!("cannot publish step {step} to NATS: {e}");
            }
        }
        settle_ready(&mut acks, &counters);
        while acks.len() > IN_FLIGHT {
            settle(&mut acks, &counters).await;
        }
    }
    while !acks.is_empty() {
        settle(&mut acks, &counters).await;
    }
    let _ = client.flush().await;
}

/// A publish acknowledgement still to come.
type Ack = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
            > + Send,
    >,
>;

fn count_ack(
    count: u64,
    r: Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
    counters: &Counters,
) {
    match r {
        Ok(_) => {
            counters.published.fetch_add(count, Ordering::Relaxed);
        }
        Err(e) => {
            counters.failed.fetch_add(count.max(1), Ordering::Relaxed);
            warn!("NATS did not acknowledge a publish: {e}");
        }
    }
}

/// Waits for the oldest acknowledgement.
async fn settle(acks: &mut VecDeque<(u64, Ack)>, counters: &Counters) {
    if let Some((count, ack)) = acks.pop_front() {
        count_ack(count, ack.await, counters);
    }
}

/// Takes the acknowledgements that have come, oldest first, without waiting.
fn settle_ready(acks: &mut VecDeque<(u64, Ack)>, counters: &Counters) {
    while let Some((count, ack)) = acks.front_mut() {
        let count = *count;
        match futures::FutureExt::now_or_never(ack.as_mut()) {
            Some(r) => {
                acks.pop_front();
                count_ack(count, r, counters);
            }
            None => break,
        }
    }
}

/// Answers drift requests (a drift request frame) with a drift reply frame.
async fn answer_drift(client: async_nats::Client, subject: String, hub: Arc<Hub>) {
    let mut sub = match client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            warn!("cannot subscribe to {subject}: {e}");
            return;
        }
    };
    while let Some(msg) = sub.next().await {
        let Some(reply_to) = msg.reply.clone() else {
            continue;
        };
        let mut src = BytesMut::from(&msg.payload[..]);
        let mut codec = HostCodec::new(format!("{subject} request"));
        let reply = match codec.decode_eof(&mut src) {
            // The hub counts the request.
            Ok(Some(ToHost::DriftRequest { step })) if src.is_empty() => {
                ToViewer::DriftReply(hub.drift(step))
            }
            _ => continue,
        };
        if let Ok(f) = HostCodec::encode_frame(&reply) {
            let _ = client.publish(reply_to, f.0).await;
        }
    }
}
