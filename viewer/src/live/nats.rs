//! The viewer's reader for a session on NATS JetStream (`nats://HOST:PORT/NAME`,
//! docs/fan-out.md): joins at the latest keyframe (or the one at or before `--from-step`),
//! then takes every message of the stream in order from there into the same [`Spool`] the
//! TCP reader fills, so the verifier does not know which transport carried them.
//!
//! A message is as untrusted as bytes on a socket: a malformed payload, an oversized one
//! or a keyframe of another world ends the session with the subject, the stream sequence
//! and the byte offset; a record already seen (a duplicate delivery) is skipped by its
//! step number; a record past the next step is a gap, closed by the next keyframe.

use super::shared::{Ended, Shared};
use super::spool::{Full, Item, Spool};
use async_nats::jetstream::{self, consumer::pull, consumer::DeliverPolicy};
use futures::StreamExt;
use ostm_protocol::reader::nats;
use ostm_protocol::session::same_world;
use ostm_protocol::wire::nats::{self as wire, another_world, Session};
use ostm_protocol::wire::{DriftReply, ToHost, ToViewer, ViewerCodec};
use ostm_protocol::{FormatError, World};
use ostm_runtime::cli::NatsAuthArgs;
use ostm_runtime::follow::{follow, Followed, Hand};
use ostm_runtime::join::{rate, read_from};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::debug;

/// How long the reader waits for any message before it gives the session up: longer than
/// over TCP, since a NATS server that restarts takes the client a few reconnection
/// attempts and the reader a new consumer (asked for every 3 s of quiet) to resume.
pub const SILENCE: Duration = Duration::from_secs(30);
/// How long a drift request waits for the host's reply.
pub const DRIFT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the verifier waits for the reader's answer to a drift request: the reader
/// always answers within [`DRIFT_TIMEOUT`] of taking the request (a reply, or why none
/// came), so the verifier waits longer and reports the reader's reason.
pub const DRIFT_WAIT: Duration = Duration::from_secs(DRIFT_TIMEOUT.as_secs() + 5);

/// A session on NATS: the servers and the session's name.
#[derive(Debug, Clone)]
pub struct Target {
    /// The servers as messages name them (`nats://HOST:PORT`, several joined by commas).
    pub url: String,
    pub servers: wire::Servers,
    pub session: Session,
}

/// `nats://HOST:PORT/NAME` (or a list of servers, `nats://H1:P1,H2:P2/NAME`) as servers
/// and session; `None` for any other address. The rule is [`wire::session_address`]'s.
pub fn parse(addr: &str) -> Option<Result<Target, String>> {
    Some(
        wire::session_address(addr)?.map(|(servers, session)| Target {
            url: servers.to_string(),
            servers,
            session,
        }),
    )
}

/// Checks a live address with `--from-step` before anything is announced: a NATS address
/// must name a session, and `--from-step` needs one.
///
/// # Errors
/// A sentence naming what is wrong.
pub fn check_address(addr: &str, from_step: Option<u64>) -> Result<(), String> {
    match parse(addr) {
        Some(t) => t.map(|_| ()),
        None if from_step.is_some() => Err(
            "--from-step needs a session on NATS (nats://HOST:PORT/NAME): a TCP host streams from its current step".into(),
        ),
        None => Ok(()),
    }
}

/// What the NATS reader needs.
#[derive(Debug, Clone)]
pub struct Dial {
    pub target: Target,
    pub auth: NatsAuthArgs,
    /// Start from the keyframe at or before this step, not the latest.
    pub from_step: Option<u64>,
}

impl Target {
    /// The name a message is given in errors.
    fn place(&self, subject: &str, seq: u64) -> String {
        format!(
            "{}/{}: subject {subject}, stream sequence {seq}",
            self.url,
            self.session.name()
        )
    }

    /// `URL/NAME`, as errors begin.
    fn name(&self) -> String {
        format!("{}/{}", self.url, self.session.name())
    }
}

/// Why the NATS reader stopped reading a session; the text the verdict gives (the spool
/// carries it as [`Item::Lost`]'s `why`). `session` is `URL/NAME`, `stream` the stream's
/// name.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    /// The NATS options could not be made (the credentials file): their own sentence.
    #[error("{0}")]
    Options(String),
    #[error("cannot connect to NATS at {url}: {err}")]
    Connect {
        url: String,
        err: async_nats::ConnectError,
    },
    #[error("no session {name} on {url} (stream {stream}): {err}")]
    NoSession {
        name: String,
        url: String,
        stream: String,
        err: String,
    },
    #[error("{session}: no keyframe yet on {subject}: {err}")]
    NoKeyframeYet {
        session: String,
        subject: String,
        err: String,
    },
    #[error("cannot read the keyframes of {stream}: {err}")]
    Keyframes { stream: String, err: String },
    /// A keyframe message without its stream information.
    #[error("{0}")]
    KeyframeInfo(String),
    #[error(
        "{session}: the stream holds no keyframe at or before step {step} (its oldest has \
         gone, or the session started later)"
    )]
    NoKeyframeAtOrBefore { session: String, step: u64 },
    /// A message refused (malformed, not a record, a keyframe of another world): the
    /// error names the subject, the stream sequence and the byte offset.
    #[error(transparent)]
    Refused(#[from] FormatError),
    #[error("cannot spool the keyframe")]
    SpoolKeyframe,
    #[error("cannot read the stream {stream} for {} s: {err}", SILENCE.as_secs())]
    CannotRead { stream: String, err: String },
    #[error(
        "the session {name} on {url} sent nothing for {} ms (its host publishes a record \
         every step, at least one a second)",
        SILENCE.as_millis()
    )]
    Silent { name: String, url: String },
    #[error("the stream {stream} ended")]
    StreamEnded { stream: String },
    #[error("cannot spool the stream's records to disk: {0}")]
    Spool(std::io::Error),
}

/// Runs the reader until the stream ends, fails, or `cancel` fires: connects, finds the
/// session's stream and the keyframe to start from, hands that world to the verifier,
/// then reads on from the message after it ([`read_on`]).
pub async fn run(
    dial: Dial,
    spool: Arc<Spool>,
    shared: Arc<Shared>,
    from_verifier: mpsc::UnboundedReceiver<ToHost>,
    replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
) -> Ended<Lost> {
    let t = &dial.target;
    let (client, stream) = match open(&dial).await {
        Ok(c) => c,
        Err(e) => return Ended::Broken(e),
    };
    let (key_seq, world, host_rate) = match start_keyframe(&stream, &dial).await {
        Ok(k) => k,
        Err(e) => return Ended::Broken(e),
    };
    // The machine's clock starts when the read loop does (`read_on`).
    let reader = nats::Reader::new(t.name(), t.session.clone(), world.clone(), key_seq, 0);
    shared.connection.fetch_add(1, Ordering::SeqCst);
    shared.host_step.fetch_max(world.step, Ordering::Relaxed);
    let connection = shared.connection.load(Ordering::SeqCst);
    let attached = nats::joined(world, host_rate, connection);
    if spool.push(attached).is_err() {
        return Ended::Broken(Lost::SpoolKeyframe);
    }
    let messages = match first_consumer(&stream, &t.session, key_seq + 1).await {
        Ok(m) => m,
        Err(e) => return Ended::Broken(e),
    };
    let mut link = Link {
        target: t,
        client: &client,
        stream: &stream,
        from_verifier,
        replies: &replies,
    };
    read_on(&mut link, reader, messages, &shared, &spool).await
}

/// Connects to the server and finds the session's stream.
async fn open(dial: &Dial) -> Result<(async_nats::Client, jetstream::stream::Stream), Lost> {
    let t = &dial.target;
    let s = &t.session;
    let options = dial.auth.connect_options().await.map_err(Lost::Options)?;
    let client = options
        .connect(t.servers.urls())
        .await
        .map_err(|err| Lost::Connect {
            url: t.url.clone(),
            err,
        })?;
    let stream = jetstream::new(client.clone())
        .get_stream(s.stream())
        .await
        .map_err(|e| Lost::NoSession {
            name: s.name().to_string(),
            url: t.url.clone(),
            stream: s.stream(),
            err: e.to_string(),
        })?;
    Ok((client, stream))
}

/// The keyframe to start from (the latest, or the last at or before `--from-step`): its
/// stream sequence, its world and the host's rate.
async fn start_keyframe(
    stream: &jetstream::stream::Stream,
    dial: &Dial,
) -> Result<(u64, World, u32), Lost> {
    let t = &dial.target;
    let keys = t.session.keyframes();
    match dial.from_step {
        None => match stream.direct_get_last_for_subject(&keys).await {
            Ok(m) => wire::keyframe(&t.place(&keys, m.sequence), &m.payload)
                .map(|w| (m.sequence, w, rate(&m.headers)))
                .map_err(Lost::Refused),
            Err(e) => Err(Lost::NoKeyframeYet {
                session: t.name(),
                subject: keys.clone(),
                err: e.to_string(),
            }),
        },
        Some(step) => find_keyframe(stream, t, &keys, step).await,
    }
}

/// The first consumer, from stream sequence `from`. A server busy delivering to many
/// others may time out its creation: it is asked again, waiting 0.5 s doubling to 4 s,
/// until the session has been silent for [`SILENCE`].
async fn first_consumer(
    stream: &jetstream::stream::Stream,
    s: &Session,
    from: u64,
) -> Result<pull::Ordered, Lost> {
    let filter = s.filter();
    let asked = tokio::time::Instant::now();
    let mut wait = Duration::from_millis(500);
    loop {
        match read_from(stream, &filter, from).await {
            Ok(m) => return Ok(m),
            Err(err) if asked.elapsed() >= SILENCE => {
                return Err(Lost::CannotRead {
                    stream: s.stream(),
                    err,
                })
            }
            Err(e) => {
                debug!(error = %e, "cannot create the stream's consumer yet: asking again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(4));
            }
        }
    }
}

/// What the read loop talks to besides the stream's messages: the server (drift
/// requests out, a new consumer when quiet) and the verifier (its requests in, the
/// replies out).
struct Link<'a> {
    target: &'a Target,
    client: &'a async_nats::Client,
    stream: &'a jetstream::stream::Stream,
    from_verifier: mpsc::UnboundedReceiver<ToHost>,
    replies: &'a std::sync::mpsc::Sender<Result<DriftReply, String>>,
}

/// Reads the stream's messages into the spool through the NATS reader's machine
/// ([`nats::Reader`]: the gap rule, messages taken once by stream sequence, the silence
/// and the resumption of a quiet stream with a new consumer) by the one NATS driver loop
/// ([`follow`]), passing the verifier's drift requests on, until the stream's end
/// message, a refusal, or the silence.
async fn read_on(
    link: &mut Link<'_>,
    mut m: nats::Reader,
    messages: pull::Ordered,
    shared: &Shared,
    spool: &Spool,
) -> Ended<Lost> {
    let s = &link.target.session;
    let filter = s.filter();
    let stream = link.stream;
    let mut hand = Spooling {
        link,
        shared,
        spool,
    };
    let followed = follow(stream, &filter, &mut m, messages, &mut hand).await;
    let link = hand.link;
    match followed {
        Followed::End(_) => {
            // The verifier may still be behind and find a drift: its request goes to the
            // host as before (which answers, or is gone) until the session drops the
            // reader.
            while let Some(r) = link.from_verifier.recv().await {
                pass_on(link.client, &s.drift(), r, link.replies).await;
            }
            Ended::End
        }
        Followed::Silent => Ended::Lost(Lost::Silent {
            name: s.name().to_string(),
            url: link.target.url.clone(),
        }),
        Followed::StreamEnded => Ended::Lost(Lost::StreamEnded { stream: s.stream() }),
        Followed::Refused(e) => Ended::Broken(Lost::Refused(e)),
        Followed::Stopped(e) => Ended::Broken(Lost::Spool(e)),
    }
}

/// The viewer's side of the NATS driver loop: what the machine delivers goes to the
/// spool, the verifier's drift requests to the host.
struct Spooling<'l, 'a> {
    link: &'l mut Link<'a>,
    shared: &'l Shared,
    spool: &'l Spool,
}

impl Hand for Spooling<'_, '_> {
    type Stop = std::io::Error;

    fn deliver(&mut self, m: &mut nats::Reader, batch: &mut Vec<Item>) -> std::io::Result<()> {
        for a in batch.iter() {
            match a {
                Item::Gap {
                    to, world: Some(_), ..
                } => debug!(to, "a keyframe closes a gap"),
                Item::Missing { why } => debug!(why, "records missing; waiting for a keyframe"),
                _ => {}
            }
        }
        self.shared
            .host_step
            .fetch_max(m.host_step(), Ordering::Relaxed);
        push(self.spool, m, batch)
    }

    async fn request(&mut self) -> Option<ToHost> {
        self.link.from_verifier.recv().await
    }

    async fn pass_on(&mut self, r: ToHost) {
        let link = &self.link;
        pass_on(link.client, &link.target.session.drift(), r, link.replies).await;
    }
}

/// Hands `batch` to the spool. Its bound reached (`--spool-max`) is a gap, not a failure:
/// the reader drops records until the spool has room again and a keyframe comes, and its
/// notice goes to the verifier (memory holds it).
fn push(spool: &Spool, m: &mut nats::Reader, batch: &mut Vec<Item>) -> std::io::Result<()> {
    // The end (last when it came) is kept whatever the spool refuses before it.
    let end = match batch.last() {
        Some(Item::End(_)) => batch.pop(),
        _ => None,
    };
    match spool.push_all(batch) {
        Err(e) if Full::is(&e) => {
            batch.clear();
            m.handle_spool_full(e.to_string());
            while let Some(e) = m.poll_event() {
                if let nats::Event::Deliver(a) = e {
                    batch.push(a);
                }
            }
        }
        r => r?,
    }
    batch.extend(end);
    spool.push_all(batch)?;
    if m.is_draining() && spool.disk_drained() {
        m.handle_spool_drained();
    }
    Ok(())
}

/// The last keyframe at or before `step`, read through the keyframes in order.
async fn find_keyframe(
    stream: &jetstream::stream::Stream,
    t: &Target,
    keys: &str,
    step: u64,
) -> Result<(u64, World, u32), Lost> {
    let keyframes = |e: &dyn std::fmt::Display| Lost::Keyframes {
        stream: t.session.stream(),
        err: e.to_string(),
    };
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: keys.to_string(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| keyframes(&e))?;
    let mut msgs = consumer.messages().await.map_err(|e| keyframes(&e))?;
    let mut best: Option<(u64, World, u32)> = None;
    let mut first: Option<World> = None;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
        let info = m.info().map_err(|e| Lost::KeyframeInfo(e.to_string()))?;
        let (seq, pending) = (info.stream_sequence, info.pending);
        let place = t.place(keys, seq);
        let world = wire::keyframe(&place, &m.payload)?;
        if !same_world(first.get_or_insert_with(|| world.clone()), &world) {
            return Err(another_world(&place).into());
        }
        if world.step > step {
            break;
        }
        let r = m.headers.as_ref().map(rate).unwrap_or(0);
        best = Some((seq, world, r));
        if pending == 0 {
            break;
        }
    }
    best.ok_or_else(|| Lost::NoKeyframeAtOrBefore {
        session: t.name(),
        step,
    })
}

/// Passes the verifier's message on to the host: a drift request is asked on `subject`
/// and its answer handed back on `replies`; anything else has no meaning through NATS.
async fn pass_on(
    client: &async_nats::Client,
    subject: &str,
    r: ToHost,
    replies: &std::sync::mpsc::Sender<Result<DriftReply, String>>,
) {
    if let ToHost::DriftRequest { step } = r {
        let _ = replies.send(drift(client, subject, step).await);
    }
}

/// Asks the host for its snapshot at `step` by request/reply; `Err(why)` when no host
/// answers, or its answer is not one drift reply.
async fn drift(
    client: &async_nats::Client,
    subject: &str,
    step: u64,
) -> Result<DriftReply, String> {
    let req = ViewerCodec::encode_frame(&ToHost::DriftRequest { step })
        .map_err(|e| format!("the drift request for step {step} does not encode: {e}"))?;
    let reply = tokio::time::timeout(DRIFT_TIMEOUT, client.request(subject.to_string(), req.0))
        .await
        .map_err(|_| {
            format!(
                "no host answered the drift request on {subject} within {} s; the host has gone",
                DRIFT_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::NoResponders => {
                format!("no host answers drift requests on {subject} any more; the host has gone")
            }
            _ => format!("the drift request on {subject} failed: {e}"),
        })?;
    let frames: Result<Vec<_>, _> =
        wire::frames(subject, &reply.payload).and_then(|f| f.map(|r| r.map(|(_, m)| m)).collect());
    match frames {
        Ok(f) => match f.as_slice() {
            [ToViewer::DriftReply(d)] => Ok(d.clone()),
            _ => Err(format!(
                "the answer on {subject} is not one drift reply frame (0x86)"
            )),
        },
        Err(e) => Err(format!("the answer on {subject} is malformed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::{Lost, SILENCE};
    use ostm_protocol::FormatError;

    /// The texts the verdict gives, byte for byte as they were written by hand at each
    /// site before [`Lost`] (the client's own connection error aside).
    #[test]
    fn the_nats_readers_reasons_read_as_they_always_have() {
        let url = "nats://127.0.0.1:4222";
        let s = || format!("{url}/demo");
        let bad = FormatError::new(
            format!("{url}/demo: subject ostm.demo.rec, stream sequence 9"),
            4,
            "expected one snapshot frame (0x82)",
        );
        let cases: Vec<(Lost, String)> = vec![
            (Lost::Options("cannot read creds.txt".into()), "cannot read creds.txt".into()),
            (
                Lost::NoSession {
                    name: "demo".into(),
                    url: url.into(),
                    stream: "OSTM_demo".into(),
                    err: "stream not found".into(),
                },
                format!("no session demo on {url} (stream OSTM_demo): stream not found"),
            ),
            (
                Lost::NoKeyframeYet {
                    session: s(),
                    subject: "ostm.demo.key".into(),
                    err: "no message found".into(),
                },
                format!("{url}/demo: no keyframe yet on ostm.demo.key: no message found"),
            ),
            (
                Lost::Keyframes { stream: "OSTM_demo".into(), err: "timed out".into() },
                "cannot read the keyframes of OSTM_demo: timed out".into(),
            ),
            (Lost::KeyframeInfo("not a JetStream message".into()), "not a JetStream message".into()),
            (
                Lost::NoKeyframeAtOrBefore { session: s(), step: 50 },
                format!("{url}/demo: the stream holds no keyframe at or before step 50 (its oldest has gone, or the session started later)"),
            ),
            (Lost::Refused(bad.clone()), bad.to_string()),
            (Lost::SpoolKeyframe, "cannot spool the keyframe".into()),
            (
                Lost::CannotRead { stream: "OSTM_demo".into(), err: "timed out".into() },
                format!("cannot read the stream OSTM_demo for {} s: timed out", SILENCE.as_secs()),
            ),
            (
                Lost::Silent { name: "demo".into(), url: url.into() },
                format!(
                    "the session demo on {url} sent nothing for {} ms (its host publishes a record every step, at least one a second)",
                    SILENCE.as_millis()
                ),
            ),
            (Lost::StreamEnded { stream: "OSTM_demo".into() }, "the stream OSTM_demo ended".into()),
            (
                Lost::Spool(std::io::Error::other("disk full")),
                "cannot spool the stream's records to disk: disk full".into(),
            ),
        ];
        for (why, text) in cases {
            assert_eq!(why.to_string(), text);
        }
    }
}
