//! Publishing the live stream to NATS JetStream (docs/fan-out.md): records, keyframes and
//! the end on the subjects of one stream, and drift requests answered by request/reply.
//!
//! The rules (the feed and its bound, keyframes, batches, message ids, acknowledgements
//! awaited, the counters) are the machine's, `ostm_protocol::serve::publish::Publisher`;
//! this file drives it. The stepping loop hands each step to it through [`Feed`] without
//! ever waiting (the lock is held for one push); the publisher task moves its messages to
//! the client and the client's acknowledgements, errors and lost connections back, and
//! wakes for the machine's timer. Making the stream (and saying why a server refuses it)
//! is the client's API and stays here.

use crate::hub::Hub;
use async_nats::jetstream::{
    self, context::CreateStreamErrorKind, message::PublishMessage, stream,
};
use bytes::BytesMut;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use ostm_protocol::serve::publish::{self as machine, Publisher};
use ostm_protocol::wire::nats::{self as names, Session};
use ostm_protocol::wire::{End, HostCodec, ToHost, ToViewer};
use ostm_protocol::World;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{info, warn};

/// The default of `--retention-bytes`: small enough that many sessions share one server
/// (the server sets aside each stream's `max_bytes` of its JetStream storage when it
/// creates the stream), large enough for an hour at a viewer's pace.
pub const DEFAULT_RETENTION_BYTES: i64 = 64 << 20;
/// The longest the host waits at its stop for an end being repeated (the publisher
/// gives it up [`machine::END_WAIT_MS`] after its first publish, once its last attempt's
/// [`machine::ACK_TIMEOUT_MS`] has passed), with a second to spare.
pub const END_WAIT_MAX: Duration =
    Duration::from_millis(machine::END_WAIT_MS + machine::ACK_TIMEOUT_MS + 1_000);
/// Failed publishes are warned about once, then at most this often, with their count
/// since (docs/fan-out.md, "Failed publishes are not repeated").
pub const FAILURE_WARNING_EVERY: Duration = Duration::from_secs(10);
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

/// What the stepping loop, the publisher task and the status line share: the machine,
/// and the client's state.
#[derive(Debug)]
pub struct Counters {
    /// The publisher's rules and counters, locked for one call at a time.
    machine: Mutex<Publisher>,
    /// Wakes the publisher task: the feed has something, or has closed.
    wake: Notify,
    /// The client, once made: its connection state is the status line's.
    client: OnceLock<async_nats::Client>,
    /// The stream exists with the session's subjects.
    stream_ready: AtomicBool,
    /// Why the server refused the stream, while it does.
    refused: Mutex<Option<String>>,
    /// The failed publishes since the last warning about them.
    failures: Mutex<Failures>,
    /// The server (host, port) the machine last asked to move from: the client tries it
    /// last when it reconnects.
    avoid: ostm_runtime::moving::Avoid,
}

/// The failed publishes since the last warning about them (a server away fails every
/// message: thousands a second).
#[derive(Debug, Default)]
struct Failures {
    /// Messages failed since the last warning.
    tally: crate::tally::Tally,
    /// The steps they held.
    steps: u64,
    /// A failure was warned about, and no publish acknowledged since.
    failing: bool,
}

impl Failures {
    /// Message from `step` (holding `steps`) failed (`why`): the first is warned about at
    /// once, the next at most once per [`FAILURE_WARNING_EVERY`] with their count.
    fn failed(&mut self, step: u64, steps: u64, why: &str) {
        self.steps += steps;
        let first = !self.failing && self.tally.since == 0;
        let Some(failed) = self.tally.add(1, FAILURE_WARNING_EVERY) else {
            return;
        };
        let steps = std::mem::take(&mut self.steps);
        self.failing = true;
        if first && failed == 1 {
            warn!(
                step,
                steps,
                "the NATS publish from step {step} failed: {why}; further failures are counted and logged at most once every {} s until NATS acknowledges publishes again",
                FAILURE_WARNING_EVERY.as_secs()
            );
        } else {
            warn!(
                step,
                failed,
                steps,
                "{failed} NATS publishes failed since the last warning ({steps} steps), the last from step {step}: {why}"
            );
        }
    }

    /// A publish was acknowledged: after failures warned about, a line says so (with the
    /// failures since the last warning); the count goes on from there.
    fn acked(&mut self) {
        if !self.failing {
            return;
        }
        self.failing = false;
        let (failed, steps) = (
            std::mem::take(&mut self.tally.since),
            std::mem::take(&mut self.steps),
        );
        info!(
            failed,
            steps,
            "NATS acknowledges the host's publishes again ({failed} more failed since the last warning, {steps} steps)"
        );
    }

    /// At the publisher's end: failures not yet warned about are.
    fn flush(&mut self) {
        if self.tally.since > 0 {
            let (failed, steps) = (
                std::mem::take(&mut self.tally.since),
                std::mem::take(&mut self.steps),
            );
            warn!(
                failed,
                steps, "{failed} NATS publishes failed since the last warning ({steps} steps)"
            );
        }
    }
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
    /// The machine for `opts`, with this run's token in its message ids.
    pub fn new(opts: &Options) -> Counters {
        Counters {
            machine: Mutex::new(Publisher::new(machine::Config::new(
                opts.session.clone(),
                run_token(),
                opts.keyframe_every,
                opts.rate,
            ))),
            wake: Notify::new(),
            client: OnceLock::new(),
            stream_ready: AtomicBool::new(false),
            refused: Mutex::new(None),
            failures: Mutex::new(Failures::default()),
            avoid: Default::default(),
        }
    }

    /// The machine, for one call (a panic elsewhere while it was held leaves it usable:
    /// every call leaves it whole).
    fn machine(&self) -> MutexGuard<'_, Publisher> {
        self.machine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn failures(&self) -> MutexGuard<'_, Failures> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Steps published, dropped and failed (docs/fan-out.md, "Failed publishes are not
    /// repeated").
    pub fn counts(&self) -> machine::Counts {
        self.machine().counts()
    }

    /// The end has been published, and is repeated until it is acknowledged (the host
    /// waits for it at its stop).
    pub fn is_repeating_end(&self) -> bool {
        self.machine().is_repeating_end()
    }

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
}

/// The stepping loop's side of the publisher.
pub struct Feed {
    shared: Arc<Counters>,
}

impl Feed {
    /// Before the step from `world`: its keyframe goes into the feed when one is due.
    /// Never waits.
    pub fn before_step(&mut self, world: &World) {
        self.shared.machine().handle_before_step(world);
    }

    /// Hands the end over, waiting at most a second for room (a feed that stays full
    /// means NATS is away: the end is then not published; it holds no step, so no
    /// counter counts it).
    pub fn end(&self, end: End) {
        for _ in 0..100 {
            if self.shared.machine().handle_end(end.clone()) {
                self.shared.wake.notify_one();
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        warn!("the publisher's feed stayed full: the end is not published to NATS");
    }
}

impl Drop for Feed {
    /// Nothing more comes: the publisher task ends once the feed is published.
    fn drop(&mut self) {
        self.shared.machine().handle_feed_closed();
        self.shared.wake.notify_one();
    }
}

/// Where the stepping loop hands each step's record frame: the feed, or a test's probe.
pub trait Records {
    /// Hands the record of step `step` over (its frame). Never waits.
    fn record(&mut self, step: u64, frame: &bytes::Bytes);
}

impl Records for Feed {
    /// A full feed drops the record and asks for a keyframe at the next step.
    fn record(&mut self, step: u64, frame: &bytes::Bytes) {
        self.shared.machine().handle_record(step, frame.clone());
        self.shared.wake.notify_one();
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

/// The client's options: the session's authentication; the machine told when the
/// connection drops (a keyframe is asked for: what was in flight may not have been
/// stored) and comes back; and the server the machine asked to move from tried last.
async fn connect_options(
    opts: &Options,
    counters: &Arc<Counters>,
) -> Result<async_nats::ConnectOptions, String> {
    let c = counters.clone();
    let options = counters.avoid.options(opts.auth.connect_options().await?);
    Ok(options.event_callback(move |ev| {
        let c = c.clone();
        async move {
            match ev {
                async_nats::Event::Disconnected => c.machine().handle_disconnected(),
                async_nats::Event::Connected => c.machine().handle_connected(),
                _ => {}
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
    let feed = Feed {
        shared: counters.clone(),
    };
    let task = tokio::spawn(run(opts, prepared, hub, counters, stop));
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
    shared: Arc<Counters>,
    stop: tokio_util::sync::CancellationToken,
) {
    let Some((client, ready)) = client(&opts, prepared, &shared).await else {
        return;
    };
    let js = jetstream::new(client.clone());
    if !ready && !keep_making_stream(&js, &opts, &shared, &stop).await {
        return;
    }
    info!(stream = %opts.session.stream(), "publishing to NATS");
    tokio::spawn(answer_drift(client.clone(), opts.session.drift(), hub));
    let clock = Clock(tokio::time::Instant::now());
    let mut acks = Acks::default();
    loop {
        // Everything the machine has to send now; the acknowledgements that have come,
        // without waiting.
        loop {
            let next = {
                let mut m = shared.machine();
                m.handle_timeout(clock.now());
                m.poll_transmit(clock.now())
            };
            log_events(&shared, &client);
            let Some(p) = next else { break };
            let token = p.token;
            match js.send_publish(p.subject.clone(), message(p)).await {
                Ok(ack) => acks.push(token, ack.into_future()),
                Err(e) => shared.machine().handle_ack_failed(token, e.to_string()),
            }
            acks.take_ready(&shared);
        }
        let (done, deadline) = {
            let m = shared.machine();
            (m.is_done(), m.poll_timeout())
        };
        log_events(&shared, &client);
        if done {
            break;
        }
        let timer = deadline.map(|d| clock.at(d));
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = acks.take_next(&shared), if !acks.is_empty() => {}
            _ = tokio::time::sleep_until(timer.unwrap_or_else(tokio::time::Instant::now)), if timer.is_some() => {}
            _ = stop.cancelled() => break,
        }
    }
    log_events(&shared, &client);
    shared.failures().flush();
    let _ = client.flush().await;
}

/// The machine's time: milliseconds since the publisher task started.
struct Clock(tokio::time::Instant);

impl Clock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }

    fn at(&self, t: u64) -> tokio::time::Instant {
        self.0 + Duration::from_millis(t)
    }
}

/// The client's message for a publish: its headers, then its id (`headers` replaces the
/// message's header map, so the id goes after).
fn message(p: machine::Publish) -> PublishMessage {
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in &p.headers {
        headers.insert(*name, value.as_str());
    }
    PublishMessage::build()
        .payload(p.payload)
        .headers(headers)
        .message_id(p.id)
}

/// Logs what the machine says happened; asked to move to another server, has the client
/// reconnect, the server it is on tried last.
fn log_events(shared: &Counters, client: &async_nats::Client) {
    loop {
        let Some(ev) = shared.machine().poll_event() else {
            return;
        };
        match ev {
            machine::Event::MoveServer { unacknowledged_ms } => {
                if let Some(server) = shared.avoid.move_from(client) {
                    warn!(
                        unacknowledged_ms,
                        server = %server,
                        "nothing published to NATS was acknowledged for {unacknowledged_ms} ms, some of it failed, while connected to {server}: it stores nothing (cut off from its cluster?); moving to another server"
                    );
                }
            }
            machine::Event::Failed { step, steps, why } => {
                shared.failures().failed(step, steps, &why)
            }
            machine::Event::Unencodable { step, why } => warn!(step, "{why}"),
            machine::Event::EndAcknowledged { attempts } => {
                info!(attempts, "NATS acknowledged the end at its publish number {attempts}")
            }
            machine::Event::EndLost { attempts, why } => warn!(
                attempts,
                "NATS did not acknowledge the end within {} s of its first publish ({attempts} publishes, the last: {why}): it is not published; viewers reading the session from NATS end after their 30 s of silence, without the host's verdict",
                machine::END_WAIT_MS / 1000
            ),
        }
    }
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

/// A publish acknowledgement still to come, with its message's token.
type Ack = Pin<Box<dyn Future<Output = (u64, AckResult)> + Send>>;

/// The client's acknowledgements awaited, every one of them polled from its publish on
/// (the client's own wait starts when it is first polled). The machine times each out
/// itself ([`machine::ACK_TIMEOUT_MS`]); whichever comes first counts, the other is
/// ignored.
#[derive(Default)]
struct Acks(FuturesUnordered<Ack>);

impl Acks {
    /// Awaits the acknowledgement of message `token` (polled at once).
    fn push(&mut self, token: u64, ack: impl Future<Output = AckResult> + Send + 'static) {
        self.0.push(Box::pin(async move { (token, ack.await) }));
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Hands the acknowledgements that have come (in any order) to the machine, without
    /// waiting; polls every other one.
    fn take_ready(&mut self, shared: &Counters) {
        while let Some(Some((token, r))) = self.0.next().now_or_never() {
            settle(token, r, shared);
        }
    }

    /// Waits for the next acknowledgement to come, whichever it is, and hands it over.
    async fn take_next(&mut self, shared: &Counters) {
        if let Some((token, r)) = self.0.next().await {
            settle(token, r, shared);
        }
    }
}

fn settle(token: u64, r: AckResult, shared: &Counters) {
    match r {
        Ok(_) => {
            shared.machine().handle_acked(token);
            shared.failures().acked();
        }
        Err(e) => shared
            .machine()
            .handle_ack_failed(token, format!("NATS did not acknowledge it: {e}")),
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
    use super::Failures;

    /// A server away fails every message: the first failure is warned about, the next are
    /// counted (not warned again within the period), an acknowledgement says they stopped
    /// and starts the count over, and the period goes on from the last warning.
    #[test]
    fn failed_publishes_are_warned_about_once_then_counted_until_acknowledged_again() {
        let mut f = Failures::default();
        f.failed(10, 3, "no responders");
        assert!(f.failing);
        assert_eq!((f.tally.since, f.steps), (0, 0), "said");
        let warned = f.tally.warned;
        assert!(warned.is_some());
        for step in 11..1_000 {
            f.failed(step, 1, "no responders");
        }
        assert_eq!(
            (f.tally.since, f.steps, f.tally.warned),
            (989, 989, warned),
            "counted, not warned again"
        );
        f.acked();
        assert!(!f.failing);
        assert_eq!((f.tally.since, f.steps), (0, 0), "said with the line");
        f.acked();
        f.failed(1_000, 2, "no responders");
        assert_eq!(
            (f.tally.since, f.steps, f.tally.warned),
            (1, 2, warned),
            "within the period: counted for the next warning"
        );
        f.flush();
        assert_eq!((f.tally.since, f.steps), (0, 0), "said at the end");
    }
}
