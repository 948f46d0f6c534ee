//! The viewer's reader for a session on NATS JetStream (`nats://HOST:PORT/NAME`,
//! docs/fan-out.md): joins at the latest keyframe (or the one at or before `--from-step`),
//! then takes every message of the stream in order from there into the same [`Spool`] the
//! TCP reader fills, so the verifier does not know which transport carried them.
//!
//! A message is as untrusted as bytes on a socket: a malformed payload, an oversized one
//! or a keyframe of another world ends the session with the subject, the stream sequence
//! and the byte offset; a record already seen (a duplicate delivery) is skipped by its
//! step number; a record past the next step is a gap, closed by the next keyframe.

use super::network::{Ended, Shared};
use super::spool::{Item, Spool};
use async_nats::jetstream::{self, consumer::pull, consumer::DeliverPolicy};
use bytes::BytesMut;
use futures::StreamExt;
use ostm_protocol::cli::NatsAuthArgs;
use ostm_protocol::wire::{
    DriftReply, PeerRole, ToHost, ToViewer, ViewerCodec, Welcome, WireError, VERSION,
};
use ostm_protocol::World;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;
use tracing::debug;

/// The largest message payload a viewer takes: a batch of records (at most 64 KiB) plus
/// one largest frame.
pub const MAX_PAYLOAD: usize = 64 * 1024 + 4 + 65_554;
/// How long the reader waits for any message before it gives the session up: longer than
/// over TCP, since a NATS server that restarts takes the client a few reconnection
/// attempts and the ordered consumer two missed idle heartbeats (5 s each) to resume.
pub const SILENCE: Duration = Duration::from_secs(30);
/// How long a drift request waits for the host's reply.
const DRIFT_TIMEOUT: Duration = Duration::from_secs(5);

/// A session on NATS: the server and the session's name.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub session: String,
}

/// `nats://HOST:PORT/NAME` as server and session; `None` for any other address.
pub fn parse(addr: &str) -> Option<Result<Target, String>> {
    let rest = addr.strip_prefix("nats://")?;
    Some(match rest.split_once('/') {
        Some((server, name)) if !server.is_empty() && valid_session(name) => Ok(Target {
            url: format!("nats://{server}"),
            session: name.to_string(),
        }),
        _ => Err(format!(
            "{addr}: expected nats://HOST:PORT/NAME, NAME 1..=64 of A-Z a-z 0-9 _ -"
        )),
    })
}

fn valid_session(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
    fn stream(&self) -> String {
        format!("OSTM_{}", self.session)
    }
    fn subject(&self, leaf: &str) -> String {
        format!("ostm.{}.{leaf}", self.session)
    }
    /// The name a message is given in errors.
    fn place(&self, subject: &str, seq: u64) -> String {
        format!(
            "{}/{}: subject {subject}, stream sequence {seq}",
            self.url, self.session
        )
    }
}

/// Decodes every frame of a payload; errors name the message and the offset in it.
fn frames(place: &str, payload: &[u8]) -> Result<Vec<ToViewer>, String> {
    if payload.len() > MAX_PAYLOAD {
        return Err(format!(
            "{place}: at offset 0: expected a payload of at most {MAX_PAYLOAD} bytes, found {}",
            payload.len()
        ));
    }
    let mut src = BytesMut::from(payload);
    let mut codec = ViewerCodec::new(place.to_string());
    let mut out = Vec::new();
    loop {
        match codec.decode_eof(&mut src) {
            Ok(Some(m)) => out.push(m),
            Ok(None) => break,
            Err(WireError::Format(e)) => return Err(e.to_string()),
            Err(WireError::Io(e)) => return Err(format!("{place}: {e}")),
        }
    }
    if out.is_empty() {
        return Err(format!(
            "{place}: at offset 0: expected at least one frame, found an empty payload"
        ));
    }
    Ok(out)
}

/// The one keyframe a `.key` message holds.
fn keyframe(place: &str, payload: &[u8]) -> Result<World, String> {
    match frames(place, payload)?.as_slice() {
        [ToViewer::Snapshot { world, .. }] => Ok(world.clone()),
        _ => Err(format!(
            "{place}: at offset 0: expected one snapshot frame (0x82), found another message"
        )),
    }
}

/// Runs the reader until the stream ends, fails, or `cancel` fires.
pub async fn run(
    dial: Dial,
    spool: Arc<Spool>,
    shared: Arc<Shared>,
    mut from_verifier: mpsc::UnboundedReceiver<ToHost>,
    replies: std::sync::mpsc::Sender<Result<DriftReply, String>>,
) -> Ended {
    let t = &dial.target;
    let client = match dial.auth.connect_options().await {
        Ok(o) => match o.connect(&t.url).await {
            Ok(c) => c,
            Err(e) => return Ended::Broken(format!("cannot connect to NATS at {}: {e}", t.url)),
        },
        Err(e) => return Ended::Broken(e),
    };
    let js = jetstream::new(client.clone());
    let stream = match js.get_stream(t.stream()).await {
        Ok(s) => s,
        Err(e) => {
            return Ended::Broken(format!(
                "no session {} on {} (stream {}): {e}",
                t.session,
                t.url,
                t.stream()
            ))
        }
    };
    let keys = t.subject("key");
    // The keyframe to start from, and its stream sequence.
    let start = match dial.from_step {
        None => match stream.direct_get_last_for_subject(&keys).await {
            Ok(m) => {
                let place = t.place(&keys, m.sequence);
                keyframe(&place, &m.payload).map(|w| (m.sequence, w, rate(&m.headers)))
            }
            Err(e) => Err(format!(
                "{}/{}: no keyframe yet on {keys}: {e}",
                t.url, t.session
            )),
        },
        Some(s) => find_keyframe(&stream, t, &keys, s).await,
    };
    let (key_seq, world, host_rate) = match start {
        Ok(k) => k,
        Err(e) => return Ended::Broken(e),
    };
    let (setup, link) = (world.setup(), world.link());
    let mut expected = world.step;
    shared.connection.fetch_add(1, Ordering::SeqCst);
    shared.host_step.fetch_max(world.step, Ordering::Relaxed);
    let welcome = Welcome {
        version: VERSION,
        role: PeerRole::Host as u8,
        rate: host_rate,
        heartbeat_ms: 0,
        ring: 0,
        queue: 0,
    };
    if spool.push(Item::Attached { welcome, world }).is_err() {
        return Ended::Broken("cannot spool the keyframe".into());
    }
    let filter = format!("ostm.{}.*", t.session);
    // A server busy delivering to many others may time out the consumer's creation: it is
    // asked again until the session has been silent for `SILENCE`.
    let asked = tokio::time::Instant::now();
    let mut wait = Duration::from_millis(500);
    let mut messages = loop {
        match read_from(&stream, &filter, key_seq + 1).await {
            Ok(m) => break m,
            Err(e) if asked.elapsed() >= SILENCE => {
                return Ended::Broken(format!(
                    "cannot read the stream {} for {} s: {e}",
                    t.stream(),
                    SILENCE.as_secs()
                ))
            }
            Err(e) => {
                debug!(error = %e, "cannot create the stream's consumer yet: asking again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(4));
            }
        }
    };
    // The last stream sequence taken, and when the last message came.
    let mut last_seq = key_seq;
    let mut heard = tokio::time::Instant::now();
    let (recs, end) = (t.subject("rec"), t.subject("end"));
    // A record past the next step was seen: records are skipped until a keyframe at or
    // after the step the viewer is at.
    let mut gap = false;
    let mut batch: Vec<Item> = Vec::new();
    loop {
        let msg = tokio::select! {
            biased;
            m = messages.next() => m,
            _ = tokio::time::sleep(RESUME_AFTER) => {
                if heard.elapsed() >= SILENCE {
                    return Ended::Lost(format!(
                        "the session {} on {} sent nothing for {} ms (its host publishes a record every step, at least one a second)",
                        t.session, t.url, SILENCE.as_millis()
                    ));
                }
                // Quiet for a while (a restarted server, a lost consumer): read on from
                // the message after the last one taken with a new consumer.
                debug!(last_seq, "no message for a while: reading on with a new consumer");
                if let Ok(m) = read_from(&stream, &filter, last_seq + 1).await {
                    messages = m;
                }
                continue;
            }
            r = from_verifier.recv() => {
                if let Some(r) = r {
                    pass_on(&client, &t.subject("drift"), r, &replies).await;
                }
                continue;
            }
        };
        let msg = match msg {
            None => return Ended::Lost(format!("the stream {} ended", t.stream())),
            Some(Err(e)) => {
                // The ordered consumer recreates itself after a server restart; a gap
                // this leaves is found by step number.
                debug!("stream read error: {e}");
                continue;
            }
            Some(Ok(m)) => m,
        };
        let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
        heard = tokio::time::Instant::now();
        if seq <= last_seq && seq != 0 {
            // Delivered again by a new consumer: already taken.
            continue;
        }
        last_seq = last_seq.max(seq);
        let subject = msg.subject.as_str().to_string();
        let place = t.place(&subject, seq);
        if subject == recs {
            let decoded = match frames(&place, &msg.payload) {
                Ok(f) => f,
                Err(e) => return Ended::Broken(e),
            };
            for m in decoded {
                let ToViewer::Record(r) = m else {
                    return Ended::Broken(format!(
                        "{place}: expected record frames (0x83) only, found another message"
                    ));
                };
                shared
                    .host_step
                    .fetch_max(r.step.saturating_add(1), Ordering::Relaxed);
                if gap || r.step < expected {
                    // A duplicate delivery, or a record the viewer cannot use yet.
                    continue;
                }
                if r.step > expected {
                    debug!(expected, found = r.step, "gap in the stream");
                    gap = true;
                    continue;
                }
                expected = r.step.wrapping_add(1);
                batch.push(Item::Record(r));
            }
        } else if subject == keys {
            let world = match keyframe(&place, &msg.payload) {
                Ok(w) => w,
                Err(e) => return Ended::Broken(e),
            };
            if world.setup() != setup || world.link() != link {
                return Ended::Broken(format!(
                    "{place}: expected a keyframe of the session's world, found one of another world"
                ));
            }
            shared.host_step.fetch_max(world.step, Ordering::Relaxed);
            if gap && world.step >= expected {
                gap = false;
                expected = world.step;
                batch.push(Item::Resync(world));
            }
        } else if subject == end {
            match frames(&place, &msg.payload).as_deref() {
                Ok([ToViewer::End(e)]) => {
                    batch.push(Item::End(e.clone()));
                    let _ = spool.push_all(&mut batch);
                    // The verifier may still be behind and find a drift: its request goes
                    // to the host as before (which answers, or is gone) until the session
                    // drops the reader.
                    while let Some(r) = from_verifier.recv().await {
                        pass_on(&client, &t.subject("drift"), r, &replies).await;
                    }
                    return Ended::End(e.clone());
                }
                Ok(_) => {
                    return Ended::Broken(format!(
                        "{place}: expected one end frame (0x85), found another message"
                    ))
                }
                Err(e) => return Ended::Broken(e.clone()),
            }
        } else {
            debug!(subject, "a message on another subject; ignored");
        }
        if let Err(e) = spool.push_all(&mut batch) {
            return Ended::Broken(format!("cannot spool the stream's records to disk: {e}"));
        }
    }
}

/// How long without a message before the reader reads on with a new consumer.
const RESUME_AFTER: Duration = Duration::from_secs(3);

/// The stream's messages on `filter` from stream sequence `start` on, in order.
async fn read_from(
    stream: &jetstream::stream::Stream,
    filter: &str,
    start: u64,
) -> Result<pull::Ordered, String> {
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    consumer.messages().await.map_err(|e| e.to_string())
}

/// The host's rate from a keyframe's `Ostm-Rate` header (0 when absent).
fn rate(headers: &async_nats::HeaderMap) -> u32 {
    headers
        .get("Ostm-Rate")
        .and_then(|v| v.as_str().parse().ok())
        .unwrap_or(0)
}

/// The last keyframe at or before `step`, read through the keyframes in order.
async fn find_keyframe(
    stream: &jetstream::stream::Stream,
    t: &Target,
    keys: &str,
    step: u64,
) -> Result<(u64, World, u32), String> {
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: keys.to_string(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot read the keyframes of {}: {e}", t.stream()))?;
    let mut msgs = consumer
        .messages()
        .await
        .map_err(|e| format!("cannot read the keyframes of {}: {e}", t.stream()))?;
    let mut best: Option<(u64, World, u32)> = None;
    let mut first: Option<(ostm_protocol::Setup, Option<ostm_protocol::Link>)> = None;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
        let info = m.info().map_err(|e| e.to_string())?;
        let (seq, pending) = (info.stream_sequence, info.pending);
        let place = t.place(keys, seq);
        let world = keyframe(&place, &m.payload)?;
        let this = (world.setup(), world.link());
        if *first.get_or_insert(this) != this {
            return Err(format!(
                "{place}: expected a keyframe of the session's world, found one of another world"
            ));
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
    best.ok_or_else(|| {
        format!(
            "{}/{}: the stream holds no keyframe at or before step {step} (its oldest has gone, or the session started later)",
            t.url, t.session
        )
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
    match frames(subject, &reply.payload) {
        Ok(f) => match f.as_slice() {
            [ToViewer::DriftReply(d)] => Ok(d.clone()),
            _ => Err(format!(
                "the answer on {subject} is not one drift reply frame (0x86)"
            )),
        },
        Err(e) => Err(format!("the answer on {subject} is malformed: {e}")),
    }
}
