//! Publishing the live stream to NATS JetStream (docs/fan-out.md): records, keyframes and
//! the end on the subjects of one stream, and drift requests answered by request/reply.
//! The names, ids, headers and limits are `ostm_protocol::wire::nats`'s.
//!
//! The stepping loop hands each step to [`Feed::record`] without ever waiting: the feed is
//! a bounded channel, and a step that finds it full is dropped (counted) and followed by a
//! keyframe once there is room again, so viewers close the gap there. A keyframe also
//! follows a failed publish and a lost connection to the server, whose last messages may
//! not have been stored. The publisher task talks to NATS at its own pace and reconnects
//! through the client.

use crate::hub::Hub;
use async_nats::jetstream::{
    self, context::CreateStreamErrorKind, message::PublishMessage, stream,
};
use bytes::{Bytes, BytesMut};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use ostm_protocol::wire::nats::{
    self as names, MessageIds, Session, COUNT_HEADER, MAX_BATCH_BYTES, MAX_BATCH_RECORDS,
    RATE_HEADER, STEP_HEADER,
};
use ostm_protocol::wire::{End, HostCodec, SnapshotKind, ToHost, ToViewer};
use ostm_protocol::World;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// Steps the feed holds while NATS is slow or away.
pub const FEED_CAPACITY: usize = 65_536;
/// Publish acknowledgements awaited at once at most.
const IN_FLIGHT: usize = 1024;
/// The default of `--retention-bytes`: small enough that many sessions share one server
/// (the server sets aside each stream's `max_bytes` of its JetStream storage when it
/// creates the stream), large enough for an hour at a viewer's pace.
pub const DEFAULT_RETENTION_BYTES: i64 = 64 << 20;
/// The longest wait between two attempts at creating the stream.
const STREAM_RETRY_MAX: Duration = Duration::from_secs(5);

/// What the publisher is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The servers as messages name them (several joined by commas).
    pub url: String,
    /// The servers the client takes one of, failing over to the others.
    pub servers: ostm_protocol::wire::nats::Servers,
    /// The stream's replicas, when the host creates it.
    pub replicas: usize,
    pub session: Session,
    /// A keyframe every this many steps.
    pub keyframe_every: u64,
    /// The host's rate (0: as fast as it can), for the keyframes' header.
    pub rate: u32,
    pub max_age: Duration,
    pub max_bytes: i64,
    pub auth: ostm_runtime::cli::NatsAuthArgs,
}

impl Options {
    /// The stream's configuration (docs/fan-out.md, "Subjects and stream").
    fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.session.stream(),
            subjects: self.session.stored(),
            max_age: self.max_age,
            max_bytes: self.max_bytes,
            discard: stream::DiscardPolicy::Old,
            storage: stream::StorageType::File,
            duplicate_window: names::duplicate_window(self.max_age),
            allow_direct: true,
            num_replicas: self.replicas,
            ..Default::default()
        }
    }
}

/// Counters and state for the status line.
#[derive(Debug, Default)]
pub struct Counters {
    /// Steps handed to NATS and acknowledged by the stream: the records of acknowledged
    /// messages.
    pub published: AtomicU64,
    /// Steps dropped because the feed was full: records never handed to the publisher.
    pub dropped: AtomicU64,
    /// Steps whose publish failed or was not acknowledged: the records of those messages,
    /// each once. A keyframe or the end that fails holds no step and adds nothing (it
    /// still asks for a keyframe), so published + dropped + failed never exceeds the
    /// steps the host took.
    pub failed: AtomicU64,
    /// The client, once made: its connection state is the status line's.
    client: OnceLock<async_nats::Client>,
    /// The stream exists with the session's subjects.
    stream_ready: AtomicBool,
    /// Why the server refused the stream, while it does.
    refused: Mutex<Option<String>>,
    /// Messages may have been lost (a publish failed, the connection dropped): the next
    /// step gets a keyframe.
    want_key: AtomicBool,
}

/// What the status line says of NATS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Connected to the server, with the stream made.
    Up,
    /// Not connected, or the stream not made yet.
    Down,
    /// The server refuses the stream: why.
    Refused(String),
}

impl Counters {
    pub fn state(&self) -> State {
        if let Some(why) = self.refused.lock().ok().and_then(|r| r.clone()) {
            return State::Refused(why);
        }
        let connected = self
            .client
            .get()
            .is_some_and(|c| c.connection_state() == async_nats::connection::State::Connected);
        if connected && self.stream_ready.load(Ordering::Relaxed) {
            State::Up
        } else {
            State::Down
        }
    }

    fn set_refused(&self, why: Option<String>) {
        if let Ok(mut r) = self.refused.lock() {
            *r = why;
        }
    }

    /// Counts a message of `records` steps (0 for a keyframe or the end) as failed: it
    /// may not be on the stream, so the next step gets a keyframe.
    fn fail(&self, records: u64) {
        self.failed.fetch_add(records, Ordering::Relaxed);
        self.want_key.store(true, Ordering::Relaxed);
    }
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
    /// `--keyframe-every` steps, at the start, after a dropped step, after a failed
    /// publish or a lost connection). Never waits.
    pub fn before_step(&mut self, world: &World) {
        let lost = self.counters.want_key.load(Ordering::Relaxed)
            && self.counters.want_key.swap(false, Ordering::Relaxed);
        if self.need_key || lost || world.step.is_multiple_of(self.every) {
            self.need_key = self
                .tx
                .try_send(Item::Key {
                    world: world.clone(),
                })
                .is_err();
        }
    }

    /// Hands the end over, waiting at most a second for room (a feed that stays full
    /// means NATS is away: the end is then not published; it holds no step, so no
    /// counter counts it).
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
        warn!("the publisher's feed stayed full: the end is not published to NATS");
    }
}

/// Where the stepping loop hands each step's record frame: the feed, or a test's probe.
pub trait Records {
    /// Hands the record of step `step` over (its frame). Never waits.
    fn record(&mut self, step: u64, frame: &Bytes);
}

impl Records for Feed {
    /// A full feed drops the record and asks for a keyframe at the next step.
    fn record(&mut self, step: u64, frame: &Bytes) {
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
}

/// What the first attempt at the server found.
pub enum Prepared {
    /// The server was not there: the publisher connects when it comes.
    Absent,
    /// Connected; the stream is made when `ready`, else the publisher keeps trying.
    Connected {
        client: async_nats::Client,
        ready: bool,
    },
}

/// The client's options: the session's authentication, and a keyframe asked for whenever
/// the connection drops (what was in flight may not have been stored).
async fn connect_options(
    opts: &Options,
    counters: &Arc<Counters>,
) -> Result<async_nats::ConnectOptions, String> {
    let c = counters.clone();
    Ok(opts
        .auth
        .connect_options()
        .await?
        .event_callback(move |ev| {
            let c = c.clone();
            async move {
                if matches!(ev, async_nats::Event::Disconnected) {
                    c.want_key.store(true, Ordering::Relaxed);
                }
            }
        }))
}

/// Tries the server once before the host announces itself: a server that answers and
/// refuses the stream (not enough storage for `--retention-bytes`, no JetStream) is an
/// error for the host's start; a server not there yet is not.
///
/// # Errors
/// The credentials cannot be read, or the server refuses the stream: a sentence saying
/// what to do.
pub async fn prepare(opts: &Options, counters: &Arc<Counters>) -> Result<Prepared, String> {
    let client = match connect_options(opts, counters)
        .await?
        .connect(opts.servers.urls())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            warn!(
                "NATS at {} is not answering ({e}); the host starts and publishes once it comes",
                opts.url
            );
            return Ok(Prepared::Absent);
        }
    };
    let _ = counters.client.set(client.clone());
    let ready = match make_stream(&jetstream::new(client.clone()), opts).await {
        Ok(()) => true,
        Err(Failure::Refused(why)) => return Err(why),
        Err(Failure::NotNow(why)) => {
            warn!("{why}; retrying");
            false
        }
    };
    counters.stream_ready.store(ready, Ordering::Relaxed);
    Ok(Prepared::Connected { client, ready })
}

/// Why the stream could not be made.
enum Failure {
    /// The server answered no: a sentence saying what to do.
    Refused(String),
    /// No answer (yet): worth trying again.
    NotNow(String),
}

/// Creates the session's stream, or takes the one of that name (setting its subjects when
/// an older host made it with others).
async fn make_stream(js: &jetstream::Context, opts: &Options) -> Result<(), Failure> {
    let cfg = opts.stream_config();
    let name = cfg.name.clone();
    let subjects = cfg.subjects.clone();
    let s = js
        .get_or_create_stream(cfg)
        .await
        .map_err(|e| match e.kind() {
            CreateStreamErrorKind::JetStream(api) => Failure::Refused(refusal(opts, &name, &api)),
            CreateStreamErrorKind::JetStreamUnavailable => Failure::Refused(format!(
                "the NATS server at {} has no JetStream for the stream {name}: start it with -js (or enable JetStream for this account)",
                opts.url
            )),
            _ => Failure::NotNow(format!("cannot create the NATS stream {name}: {e}")),
        })?;
    // A stream made by an older host stored `ostm.NAME.*`, drift requests too: it keeps
    // its settings and gets the subjects of docs/fan-out.md.
    let mut have = s.cached_info().config.clone();
    if have.num_replicas.max(1) != opts.replicas {
        warn!(
            "the NATS stream {name} exists with {} replicas; using it as it is (--replicas {} applies to a stream the host creates)",
            have.num_replicas.max(1),
            opts.replicas
        );
    }
    if have.subjects != subjects {
        info!(stream = %name, from = ?have.subjects, "setting the stream's subjects");
        have.subjects = subjects;
        if let Err(e) = js.update_stream(have).await {
            warn!("cannot set the subjects of the NATS stream {name}: {e}");
        }
    }
    Ok(())
}

/// The sentence for a server's refusal of the stream.
fn refusal(opts: &Options, name: &str, api: &jetstream::Error) -> String {
    use async_nats::jetstream::ErrorCode;
    let what = match api.error_code() {
        ErrorCode::STORAGE_RESOURCES_EXCEEDED | ErrorCode::INSUFFICIENT_RESOURCES => format!(
            "; it sets aside --retention-bytes ({} bytes) of its JetStream storage for each stream: give a smaller --retention-bytes, or the server more storage (jetstream max_file_store)",
            opts.max_bytes
        ),
        _ => String::new(),
    };
    format!(
        "the NATS server at {} refused the stream {name}: {api}{what}",
        opts.url
    )
}

/// Starts the publisher on the current runtime; returns the stepping loop's feed and the
/// task, which ends after publishing the end (or when `stop` is cancelled).
pub fn start(
    opts: Options,
    counters: Arc<Counters>,
    prepared: Prepared,
    hub: Arc<Hub>,
    stop: tokio_util::sync::CancellationToken,
) -> (Feed, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(FEED_CAPACITY);
    let feed = Feed {
        tx,
        every: opts.keyframe_every.max(1),
        need_key: true,
        counters: counters.clone(),
    };
    let task = tokio::spawn(run(opts, prepared, hub, rx, counters, stop));
    (feed, task)
}

/// The client, connecting now when the server was not there at the start.
async fn client(
    opts: &Options,
    prepared: Prepared,
    counters: &Arc<Counters>,
) -> Option<(async_nats::Client, bool)> {
    match prepared {
        Prepared::Connected { client, ready } => Some((client, ready)),
        Prepared::Absent => {
            let o = match connect_options(opts, counters).await {
                Ok(o) => o,
                Err(e) => {
                    warn!("{e}");
                    return None;
                }
            };
            match o
                .retry_on_initial_connect()
                .connect(opts.servers.urls())
                .await
            {
                Ok(c) => {
                    let _ = counters.client.set(c.clone());
                    Some((c, false))
                }
                Err(e) => {
                    warn!("cannot connect to NATS at {}: {e}", opts.url);
                    None
                }
            }
        }
    }
}

/// Makes the stream, trying again while the server is away or refuses it (the refusal on
/// the status line). `false` when `stop` fires first.
async fn keep_making_stream(
    js: &jetstream::Context,
    opts: &Options,
    counters: &Counters,
    stop: &tokio_util::sync::CancellationToken,
) -> bool {
    let mut wait = Duration::from_secs(1);
    loop {
        match make_stream(js, opts).await {
            Ok(()) => {
                counters.set_refused(None);
                counters.stream_ready.store(true, Ordering::Relaxed);
                return true;
            }
            Err(Failure::Refused(why)) => {
                warn!("{why}; retrying");
                counters.set_refused(Some(why));
            }
            Err(Failure::NotNow(why)) => warn!("{why}; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return false,
        }
        wait = (wait * 2).min(STREAM_RETRY_MAX);
    }
}

async fn run(
    opts: Options,
    prepared: Prepared,
    hub: Arc<Hub>,
    mut rx: mpsc::Receiver<Item>,
    counters: Arc<Counters>,
    stop: tokio_util::sync::CancellationToken,
) {
    let Some((client, ready)) = client(&opts, prepared, &counters).await else {
        return;
    };
    let js = jetstream::new(client.clone());
    if !ready && !keep_making_stream(&js, &opts, &counters, &stop).await {
        return;
    }
    let session = opts.session.clone();
    info!(stream = %session.stream(), "publishing to NATS");
    tokio::spawn(answer_drift(client.clone(), session.drift(), hub));
    let ids = MessageIds::new(run_token());
    let mut acks = Acks::default();
    let mut batch = BytesMut::new();
    let mut pending: Option<Item> = None;
    loop {
        let first = match pending.take() {
            Some(i) => i,
            None => tokio::select! {
                i = rx.recv() => match i { Some(i) => i, None => break },
                _ = acks.take_next(&counters), if !acks.is_empty() => continue,
                _ = stop.cancelled() => break,
            },
        };
        let mut headers = async_nats::HeaderMap::new();
        let (subject, id, step, count, payload) = match first {
            Item::Record { step, frame } => {
                // Records waiting now go in one message, while they fit.
                batch.clear();
                batch.extend_from_slice(&frame);
                let mut count = 1u64;
                while count < MAX_BATCH_RECORDS {
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
                headers.insert(COUNT_HEADER, count.to_string().as_str());
                (
                    session.records(),
                    ids.records(step),
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
                headers.insert(RATE_HEADER, opts.rate.to_string().as_str());
                (
                    session.keyframes(),
                    ids.keyframe(world.step),
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
                (session.end(), ids.end(), step, 0, frame)
            }
        };
        headers.insert(STEP_HEADER, step.to_string().as_str());
        // The id after the other headers: `headers` replaces the message's header map.
        let publish = PublishMessage::build()
            .payload(payload)
            .headers(headers)
            .message_id(id);
        match js.send_publish(subject, publish).await {
            Ok(ack) => acks.push(count, ack.into_future()),
            Err(e) => {
                counters.fail(count);
                warn!("cannot publish step {step} to NATS: {e}");
            }
        }
        // The acknowledgements that have come, without waiting; then, with too many
        // awaited, the next to come.
        acks.take_ready(&counters);
        while acks.len() > IN_FLIGHT {
            acks.take_next(&counters).await;
        }
    }
    while acks.take_next(&counters).await {}
    let _ = client.flush().await;
}

/// This run's token in the message ids: the start time in nanoseconds and the process id,
/// in hexadecimal, so that a host started again on the same session within the duplicate
/// window is not taken for a repeat of the one before.
fn run_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{nanos:x}p{:x}", std::process::id())
}

/// What a publish's acknowledgement comes to.
type AckResult = Result<jetstream::publish::PublishAck, jetstream::context::PublishError>;

/// A publish acknowledgement still to come, with the steps its message holds.
type Ack = Pin<Box<dyn Future<Output = (u64, AckResult)> + Send>>;

/// The acknowledgements awaited, every one of them polled from its publish on. The
/// client starts an acknowledgement's 5 s timer when it is first polled: awaited one
/// after another, oldest first, a server killed with N publishes in flight would hold the
/// publisher N times 5 s (its feed full, every step dropped meanwhile); polled together,
/// they all time out 5 s after their publish.
#[derive(Default)]
struct Acks(FuturesUnordered<Ack>);

impl Acks {
    /// Awaits the acknowledgement of a message of `count` steps (polled at once).
    fn push(&mut self, count: u64, ack: impl Future<Output = AckResult> + Send + 'static) {
        self.0.push(Box::pin(async move { (count, ack.await) }));
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Counts the acknowledgements that have come (in any order), without waiting; polls
    /// every other one.
    fn take_ready(&mut self, counters: &Counters) {
        while let Some(Some((count, r))) = self.0.next().now_or_never() {
            count_ack(count, r, counters);
        }
    }

    /// Waits for the next acknowledgement to come, whichever it is, and counts it; `false`
    /// when none is awaited.
    async fn take_next(&mut self, counters: &Counters) -> bool {
        match self.0.next().await {
            Some((count, r)) => {
                count_ack(count, r, counters);
                true
            }
            None => false,
        }
    }
}

fn count_ack(count: u64, r: AckResult, counters: &Counters) {
    match r {
        Ok(_) => {
            counters.published.fetch_add(count, Ordering::Relaxed);
        }
        Err(e) => {
            counters.fail(count);
            warn!("NATS did not acknowledge a publish: {e}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};
    use std::sync::atomic::AtomicUsize;

    /// An acknowledgement that never comes, counting in `started` when it is first polled
    /// (when the client's would start its timer).
    fn never(started: &Arc<AtomicUsize>) -> impl Future<Output = AckResult> + Send + 'static {
        let started = started.clone();
        async move {
            started.fetch_add(1, Ordering::SeqCst);
            std::future::pending().await
        }
    }

    #[test]
    fn every_acknowledgement_awaited_is_polled_from_its_publish() {
        let (counters, started) = (Counters::default(), Arc::new(AtomicUsize::new(0)));
        let mut acks = Acks::default();
        for _ in 0..100 {
            acks.push(256, never(&started));
            acks.take_ready(&counters);
        }
        // All 100 timers run (a queue polling only its oldest would have started one).
        assert_eq!(started.load(Ordering::SeqCst), 100);
        assert_eq!(acks.len(), 100);
        assert_eq!(counters.failed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_acknowledgement_is_counted_when_it_comes_whatever_came_before() {
        let (counters, started) = (Counters::default(), Arc::new(AtomicUsize::new(0)));
        let mut acks = Acks::default();
        acks.push(7, never(&started));
        acks.push(3, async {
            Err(PublishError::new(PublishErrorKind::TimedOut))
        });
        acks.take_ready(&counters);
        // The second one's failure is counted (and asks for a keyframe) while the first
        // is still awaited.
        assert_eq!(counters.failed.load(Ordering::SeqCst), 3);
        assert!(counters.want_key.load(Ordering::SeqCst));
        assert_eq!(acks.len(), 1);
        let mut next = std::pin::pin!(acks.take_next(&counters));
        assert!(next.as_mut().now_or_never().is_none());
    }

    #[test]
    fn failed_counts_each_step_once_and_no_keyframe_or_end() {
        // A server away: a message of two records fails, then the keyframe sent after
        // the failure and the record of that keyframe's step fail too, then the end.
        // Three steps failed, so failed is 3: not one more for the keyframe and the end.
        let counters = Counters::default();
        let mut acks = Acks::default();
        let timed_out = || async { Err(PublishError::new(PublishErrorKind::TimedOut)) };
        acks.push(2, timed_out());
        acks.take_ready(&counters);
        assert!(counters.want_key.swap(false, Ordering::SeqCst));
        acks.push(0, timed_out()); // the keyframe
        acks.push(1, timed_out());
        acks.take_ready(&counters);
        counters.fail(0); // the end, refused by the client
        assert_eq!(counters.failed.load(Ordering::SeqCst), 3);
        assert!(counters.want_key.load(Ordering::SeqCst));
        assert_eq!(counters.published.load(Ordering::SeqCst), 0);
    }
}
