//! What a NATS server holds of ostm sessions (`ostm-viewer sessions`, docs/fan-out.md
//! "Sessions on a server"): each stream `OSTM_NAME`, read through its first and last
//! messages and its keyframes, never through a consumer (listing changes nothing).

use async_nats::jetstream::context::{RequestError, RequestErrorKind};
use futures::StreamExt;
use ostm_protocol::wire::nats::{
    self as wire, Servers, Session, COUNT_HEADER, RATE_HEADER, STEP_HEADER,
};
use ostm_protocol::World;
use ostm_runtime::cli::NatsAuthArgs;

/// One session on the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    pub session: String,
    pub stream: String,
    /// The world of the last keyframe.
    pub world: Option<WorldLine>,
    /// The host's step: after the last record, at the last keyframe, or the end's.
    pub host_step: Option<u64>,
    /// The host's steps per second (the last keyframe's `Ostm-Rate`; 0: as fast as it can).
    pub rate: Option<u32>,
    /// The step of the oldest message the stream still holds.
    pub oldest_step: Option<u64>,
    /// The step of the oldest keyframe it still holds: as far back as `--from-step` goes.
    pub oldest_keyframe: Option<u64>,
    pub last_keyframe_step: Option<u64>,
    /// Milliseconds since the server stored the last keyframe.
    pub last_keyframe_age_ms: Option<u64>,
    /// The end's reason and text, when the last message is the end.
    pub ended: Option<(String, String)>,
    pub messages: u64,
    pub bytes: u64,
    /// What could not be read, if anything (a malformed message, a missing header).
    pub problem: Option<String>,
}

/// A world as the listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldLine {
    pub dims: u8,
    /// Body slots.
    pub bodies: usize,
    pub alive: usize,
    pub seed: u32,
}

impl WorldLine {
    fn of(w: &World) -> WorldLine {
        let s = w.setup();
        WorldLine {
            dims: s.dims as u8,
            bodies: w.bodies.len(),
            alive: w.alive_count(),
            seed: s.seed,
        }
    }
}

/// Lists the sessions on the servers `servers` (`nats://HOST:PORT`, or several: the
/// client takes one and fails over to the others), by name.
///
/// # Errors
/// The server cannot be reached, or has no JetStream (what to do: start it with `-js`):
/// a sentence naming it.
pub async fn list(servers: &Servers, auth: &NatsAuthArgs) -> Result<Vec<Listed>, String> {
    let url = &servers.to_string();
    let client = auth
        .connect_options()
        .await?
        .connect(servers.urls())
        .await
        .map_err(|e| format!("cannot connect to NATS at {url}: {e}"))?;
    let js = async_nats::jetstream::new(client);
    let mut infos = Vec::new();
    let mut streams = js.streams();
    while let Some(info) = streams.next().await {
        let info = info.map_err(|e| {
            // No JetStream API answers on a server (or account) without JetStream: the
            // list's request had no responders (the kind of the error, or of its source).
            let inner = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<RequestError>())
                .map(|r| r.kind());
            if e.kind() == RequestErrorKind::NoResponders
                || inner == Some(RequestErrorKind::NoResponders)
            {
                no_jetstream(url)
            } else {
                format!("cannot list the streams of {url}: {e}")
            }
        })?;
        if let Some(session) = Session::of_stream(&info.config.name) {
            infos.push((session, info));
        }
    }
    let mut out = Vec::new();
    for (session, info) in infos {
        out.push(one(&js, &session, &info).await);
    }
    out.sort_by(|a, b| a.session.cmp(&b.session));
    Ok(out)
}

/// The sentence for a server that answers without JetStream.
pub fn no_jetstream(url: &str) -> String {
    format!(
        "the NATS server at {url} has no JetStream: start it with -js (or enable JetStream for this account)"
    )
}

/// What a stream holds of its session; a message that cannot be read is the `problem`.
/// Each part (the oldest message, the last, the keyframes) is read on its own, so that a
/// message that cannot be read leaves unknown only what it would have said.
async fn one(
    js: &async_nats::jetstream::Context,
    session: &Session,
    info: &async_nats::jetstream::stream::Info,
) -> Listed {
    let mut l = Listed {
        session: session.name().to_string(),
        stream: session.stream(),
        messages: info.state.messages,
        bytes: info.state.bytes,
        ..Listed::default()
    };
    if info.state.messages == 0 {
        return l;
    }
    let stream = match js.get_stream_no_info(session.stream()).await {
        Ok(s) => s,
        Err(e) => {
            l.problem = Some(e.to_string());
            return l;
        }
    };
    let problems: Vec<String> = [
        oldest(&stream, session, info, &mut l).await,
        last(&stream, session, info, &mut l).await,
        keyframes(&stream, session, info, &mut l).await,
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    if !problems.is_empty() {
        l.problem = Some(problems.join("; "));
    }
    l
}

/// Where a message is, as problems name it.
fn place(session: &Session, subject: &str, seq: u64) -> String {
    format!(
        "{}: subject {subject}, stream sequence {seq}",
        session.stream()
    )
}

/// The oldest message's step.
async fn oldest(
    stream: &async_nats::jetstream::stream::Stream<()>,
    session: &Session,
    info: &async_nats::jetstream::stream::Info,
    l: &mut Listed,
) -> Result<(), String> {
    let first = info.state.first_sequence;
    let m = message(stream, first).await?;
    l.oldest_step = Some(step(&m.headers, &place(session, &m.subject, m.sequence))?);
    Ok(())
}

/// The stream's message at sequence `seq`.
async fn message(
    stream: &async_nats::jetstream::stream::Stream<()>,
    seq: u64,
) -> Result<async_nats::jetstream::message::StreamMessage, String> {
    stream
        .get_raw_message(seq)
        .await
        .map_err(|e| format!("cannot read stream sequence {seq}: {e}"))
}

/// The host's step after the last message, and the end when it is one.
async fn last(
    stream: &async_nats::jetstream::stream::Stream<()>,
    session: &Session,
    info: &async_nats::jetstream::stream::Info,
    l: &mut Listed,
) -> Result<(), String> {
    let last = info.state.last_sequence;
    let m = message(stream, last).await?;
    let at = place(session, &m.subject, m.sequence);
    let s = step(&m.headers, &at)?;
    l.host_step = Some(match session.leaf(&m.subject) {
        wire::Leaf::Records => s.saturating_add(header(&m.headers, COUNT_HEADER, &at)?),
        wire::Leaf::End => {
            let end = wire::end(&at, &m.payload).map_err(|e| e.to_string())?;
            l.ended = Some((end.reason.name().to_string(), end.text));
            end.host_step
        }
        _ => s,
    });
    Ok(())
}

/// The last keyframe's world, step, rate and age, and the oldest keyframe's step.
async fn keyframes(
    stream: &async_nats::jetstream::stream::Stream<()>,
    session: &Session,
    info: &async_nats::jetstream::stream::Info,
    l: &mut Listed,
) -> Result<(), String> {
    let first = info.state.first_sequence;
    let keys = session.keyframes();
    let Ok(k) = stream.get_last_raw_message_by_subject(&keys).await else {
        // No keyframe held (yet): the rest stays unknown.
        return Ok(());
    };
    let at = place(session, &k.subject, k.sequence);
    let world = wire::keyframe(&at, &k.payload).map_err(|e| e.to_string())?;
    l.world = Some(WorldLine::of(&world));
    l.last_keyframe_step = Some(world.step);
    l.rate = Some(u32::try_from(header(&k.headers, RATE_HEADER, &at)?).unwrap_or(u32::MAX));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    l.last_keyframe_age_ms =
        Some(((now - k.time.unix_timestamp_nanos()).max(0) / 1_000_000) as u64);
    let o = stream
        .get_first_raw_message_by_subject(&keys, first)
        .await
        .map_err(|e| format!("cannot read the oldest keyframe: {e}"))?;
    l.oldest_keyframe = Some(step(&o.headers, &place(session, &o.subject, o.sequence))?);
    Ok(())
}

/// A message's `Ostm-Step`.
fn step(headers: &async_nats::HeaderMap, place: &str) -> Result<u64, String> {
    header(headers, STEP_HEADER, place)
}

/// A decimal header of a message.
fn header(headers: &async_nats::HeaderMap, name: &str, place: &str) -> Result<u64, String> {
    let v = headers
        .get(name)
        .ok_or_else(|| format!("{place}: expected a header {name}, found none"))?;
    v.as_str()
        .parse()
        .map_err(|_| format!("{place}: expected a decimal {name}, found `{}`", v.as_str()))
}
