//! The fan-out through NATS JetStream (docs/fan-out.md), in one place for the host that
//! publishes, the viewer that reads and the bench: a session's stream and subjects, the
//! message ids and headers, the batch and payload limits, and the frames of one message's
//! payload, with errors that name their offset in it.
//!
//! Names and bytes only: no client, no socket, no clock. The binaries hand these strings
//! to their NATS client.

use super::codec::{ViewerCodec, HEAD};
use super::msg::{End, SnapshotKind, ToViewer};
use super::MAX_FRAME_LEN;
use crate::error::FormatError;
use crate::sim::world::World;
use bytes::BytesMut;
use std::time::Duration;

/// The longest session name.
pub const MAX_SESSION_LEN: usize = 64;
/// Records in one `rec` message at most.
pub const MAX_BATCH_RECORDS: u64 = 256;
/// Bytes of record frames in one `rec` message at most (a single larger record travels
/// alone).
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
/// The largest payload a viewer takes: a batch of records plus one largest frame
/// (65 536 + 4 + 65 554 = 131 094 bytes).
pub const MAX_PAYLOAD: usize = MAX_BATCH_BYTES + HEAD + MAX_FRAME_LEN;
/// Every session's stream is named this followed by the session's name.
pub const STREAM_PREFIX: &str = "OSTM_";
/// The stream's duplicate window at most: a repeated publish within it is stored once.
/// It is never longer than the stream's `max_age` (the server refuses that).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// The step a message is about (decimal).
pub const STEP_HEADER: &str = "Ostm-Step";
/// Records in a `rec` message (decimal).
pub const COUNT_HEADER: &str = "Ostm-Count";
/// The host's steps per second on a `key` message (decimal; 0 for as fast as it can).
pub const RATE_HEADER: &str = "Ostm-Rate";

/// Checks a session name: 1..=64 of `A-Z a-z 0-9 _ -`.
///
/// # Errors
/// The name is empty, too long, or holds another character: a sentence naming it.
pub fn check_session(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SESSION_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "session name `{name}`: expected 1..={MAX_SESSION_LEN} characters of A-Z, a-z, 0-9, _ and -"
        ))
    }
}

/// The NATS servers of an address (docs/fan-out.md, "Servers and failover"): `nats://`
/// then one or more `HOST:PORT` (or `HOST`) joined by commas, each of which may repeat
/// `nats://`; nothing may be empty or hold `/` or white space. The client connects to
/// one of them and fails over to the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Servers(Vec<String>);

impl Servers {
    /// A server list, as the host's `--publish` and `ostm-viewer sessions` take it (one
    /// `/` at its end is allowed); `None` when it is not one.
    pub fn parse(list: &str) -> Option<Servers> {
        Servers::strict(list.strip_suffix('/').unwrap_or(list))
    }

    fn strict(list: &str) -> Option<Servers> {
        let rest = list.strip_prefix("nats://")?;
        let mut urls = Vec::new();
        for item in rest.split(',') {
            let item = item.strip_prefix("nats://").unwrap_or(item);
            if item.is_empty() || item.contains('/') || item.chars().any(char::is_whitespace) {
                return None;
            }
            urls.push(format!("nats://{item}"));
        }
        Some(Servers(urls))
    }

    /// Each server's URL, `nats://HOST:PORT`, in the order given.
    pub fn urls(&self) -> &[String] {
        &self.0
    }
}

/// The servers joined by commas, each `nats://HOST:PORT`: how messages name them.
impl std::fmt::Display for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

/// The sentence for a server list that is not one, after the input that gave it.
pub fn servers_expected(input: &str) -> String {
    format!("{input}: expected nats://HOST:PORT, or several joined by commas (nats://HOST:PORT,HOST:PORT)")
}

/// A viewer's session address: a server list ([`Servers`]), then `/NAME`, the session's
/// name being everything after the last `/` (`nats://h1:4222,h2:4222/demo`). `None` for an
/// address not beginning with `nats://`. A bad NAME is refused with the session name's
/// one sentence ([`Session::new`]) after the address.
pub fn session_address(addr: &str) -> Option<Result<(Servers, Session), String>> {
    addr.strip_prefix("nats://")?;
    let bad = || format!("{addr}: expected nats://HOST:PORT/NAME");
    Some(match addr.rsplit_once('/') {
        Some((servers, name)) if servers.len() > "nats:/".len() => match Servers::strict(servers) {
            Some(servers) => Session::new(name)
                .map(|session| (servers, session))
                .map_err(|e| format!("{addr}: {e}")),
            None => Err(bad()),
        },
        _ => Err(bad()),
    })
}

/// One session's stream and subjects (docs/fan-out.md, "Subjects and stream").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    name: String,
}

/// What a subject of a session's stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaf {
    Records,
    Keyframes,
    End,
    /// Any other subject: ignored by viewers.
    Other,
}

impl Session {
    /// The session `name`, checked with [`check_session`].
    ///
    /// # Errors
    /// As [`check_session`].
    pub fn new(name: &str) -> Result<Session, String> {
        check_session(name)?;
        Ok(Session {
            name: name.to_string(),
        })
    }

    /// The session of a stream named `OSTM_NAME`, if the name is one.
    pub fn of_stream(stream: &str) -> Option<Session> {
        Session::new(stream.strip_prefix(STREAM_PREFIX)?).ok()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `OSTM_NAME`.
    pub fn stream(&self) -> String {
        format!("{STREAM_PREFIX}{}", self.name)
    }

    /// `ostm.NAME.rec`.
    pub fn records(&self) -> String {
        self.subject("rec")
    }

    /// `ostm.NAME.key`.
    pub fn keyframes(&self) -> String {
        self.subject("key")
    }

    /// `ostm.NAME.end`.
    pub fn end(&self) -> String {
        self.subject("end")
    }

    /// `ostm.NAME.drift`: request/reply, outside the stream.
    pub fn drift(&self) -> String {
        self.subject("drift")
    }

    /// `ostm.NAME.*`: what a viewer's consumer reads.
    pub fn filter(&self) -> String {
        self.subject("*")
    }

    /// The subjects the stream stores: records, keyframes and the end, not drift requests
    /// (a stream storing those would answer each with its acknowledgement before the host
    /// could).
    pub fn stored(&self) -> Vec<String> {
        vec![self.records(), self.keyframes(), self.end()]
    }

    /// What `subject` carries.
    pub fn leaf(&self, subject: &str) -> Leaf {
        let leaf = subject
            .strip_prefix("ostm.")
            .and_then(|s| s.strip_prefix(self.name.as_str()))
            .and_then(|s| s.strip_prefix('.'));
        match leaf {
            Some("rec") => Leaf::Records,
            Some("key") => Leaf::Keyframes,
            Some("end") => Leaf::End,
            _ => Leaf::Other,
        }
    }

    fn subject(&self, leaf: &str) -> String {
        format!("ostm.{}.{leaf}", self.name)
    }
}

/// The `Nats-Msg-Id` of the messages of one run of a host: `RUN-rec-S`, `RUN-key-K`,
/// `RUN-end`, where `RUN` is a token the host picks when it starts, so that a publish
/// repeated within the duplicate window is stored once while a host started again on the
/// same session is not taken for a repeat of the one before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageIds {
    run: String,
}

impl MessageIds {
    /// Ids for the run `run` (`A-Z a-z 0-9` only, by the host's choice).
    pub fn new(run: impl Into<String>) -> MessageIds {
        MessageIds { run: run.into() }
    }

    /// The run's token.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The id of a `rec` message whose first record is step `step`.
    pub fn records(&self, step: u64) -> String {
        format!("{}-rec-{step}", self.run)
    }

    /// The id of the keyframe at step `step`.
    pub fn keyframe(&self, step: u64) -> String {
        format!("{}-key-{step}", self.run)
    }

    /// The id of the end message.
    pub fn end(&self) -> String {
        format!("{}-end", self.run)
    }
}

/// The duplicate window for a stream kept `max_age`: [`DUPLICATE_WINDOW`], or `max_age`
/// when that is shorter (a server refuses a window longer than the age).
pub fn duplicate_window(max_age: Duration) -> Duration {
    max_age.min(DUPLICATE_WINDOW)
}

/// The frames of one message's payload, in order, each with its offset in the payload.
/// Made by [`frames`]; an error ends it.
pub struct Frames {
    codec: ViewerCodec,
    src: BytesMut,
    failed: bool,
}

/// The frames of `payload`, a message named `place` in errors (`URL/NAME: subject S,
/// stream sequence N`).
///
/// # Errors
/// A payload over [`MAX_PAYLOAD`] bytes, or an empty one, at offset 0. The frames' own
/// errors come from the iterator, each at its offset in the payload.
pub fn frames(place: &str, payload: &[u8]) -> Result<Frames, FormatError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(FormatError::new(
            place,
            0,
            format!(
                "expected a payload of at most {MAX_PAYLOAD} bytes, found {}",
                payload.len()
            ),
        ));
    }
    if payload.is_empty() {
        return Err(FormatError::new(
            place,
            0,
            "expected at least one frame, found an empty payload",
        ));
    }
    Ok(Frames {
        codec: ViewerCodec::new(place),
        src: BytesMut::from(payload),
        failed: false,
    })
}

impl Frames {
    /// The offset of the next frame in the payload.
    pub fn offset(&self) -> u64 {
        self.codec.consumed()
    }

    fn error(&self, offset: u64, message: impl Into<String>) -> FormatError {
        FormatError::new(self.codec.name(), offset, message)
    }

    /// The one frame of a payload that must hold exactly one: `what` names it in the
    /// error (`one end frame (0x85)`).
    fn only(mut self, what: &str) -> Result<(u64, ToViewer), FormatError> {
        let first = match self.next() {
            Some(f) => f?,
            None => return Err(self.error(0, format!("expected {what}, found no frame"))),
        };
        let at = self.offset();
        match self.next() {
            None => Ok(first),
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => Err(self.error(at, format!("expected {what}, found a second frame"))),
        }
    }
}

impl Iterator for Frames {
    type Item = Result<(u64, ToViewer), FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.src.is_empty() {
            return None;
        }
        let at = self.offset();
        let r = match self.codec.decode(&mut self.src) {
            Ok(Some(m)) => Ok((at, m)),
            Ok(None) => {
                let n = self.src.len();
                let message = if n < HEAD {
                    format!("the payload ends inside a frame: expected a {HEAD}-byte frame length, found {n} bytes")
                } else {
                    let len =
                        u32::from_le_bytes([self.src[0], self.src[1], self.src[2], self.src[3]]);
                    format!(
                        "the payload ends inside a frame: expected {len} frame bytes, found {}",
                        n - HEAD
                    )
                };
                Err(self.error(at, message))
            }
            Err(e) => Err(e),
        };
        self.failed = r.is_err();
        Some(r)
    }
}

/// The type byte of a host message, for errors.
pub fn type_byte(m: &ToViewer) -> u8 {
    match m {
        ToViewer::Welcome(_) => 0x81,
        ToViewer::Snapshot { .. } => 0x82,
        ToViewer::Record(_) => 0x83,
        ToViewer::Heartbeat { .. } => 0x84,
        ToViewer::End(_) => 0x85,
        ToViewer::DriftReply(_) => 0x86,
    }
}

/// The error for a frame in a `rec` message that is not a record.
pub fn not_a_record(place: &str, offset: u64, m: &ToViewer) -> FormatError {
    FormatError::new(
        place,
        offset,
        format!(
            "expected record frames (0x83) only, found a frame of type 0x{:02x}",
            type_byte(m)
        ),
    )
}

/// The world of a `key` message: exactly one snapshot frame of kind 0 (attach).
///
/// # Errors
/// Any other payload, at the offset of what is wrong.
pub fn keyframe(place: &str, payload: &[u8]) -> Result<World, FormatError> {
    const WHAT: &str = "one snapshot frame (0x82)";
    match frames(place, payload)?.only(WHAT)? {
        (
            _,
            ToViewer::Snapshot {
                kind: SnapshotKind::Attach,
                world,
            },
        ) => Ok(world),
        // The kind byte follows the length and the type byte.
        (at, ToViewer::Snapshot { kind, .. }) => Err(FormatError::new(
            place,
            at + HEAD as u64 + 1,
            format!(
                "expected a snapshot of kind 0 (attach), found kind {}",
                kind as u8
            ),
        )),
        (at, m) => Err(FormatError::new(
            place,
            at,
            format!(
                "expected {WHAT}, found a frame of type 0x{:02x}",
                type_byte(&m)
            ),
        )),
    }
}

/// The end of an `end` message: exactly one end frame.
///
/// # Errors
/// Any other payload, at the offset of what is wrong.
pub fn end(place: &str, payload: &[u8]) -> Result<End, FormatError> {
    const WHAT: &str = "one end frame (0x85)";
    match frames(place, payload)?.only(WHAT)? {
        (_, ToViewer::End(e)) => Ok(e),
        (at, m) => Err(FormatError::new(
            place,
            at,
            format!(
                "expected {WHAT}, found a frame of type 0x{:02x}",
                type_byte(&m)
            ),
        )),
    }
}

/// The error for a keyframe whose world is not the session's.
pub fn another_world(place: &str) -> FormatError {
    FormatError::new(
        place,
        0,
        "expected a keyframe of the session's world, found one of another world",
    )
}

/// The gap rule of docs/fan-out.md ("What a viewer does"): what a viewer does with each
/// record and keyframe of the stream, taken in stream order, which is step order.
///
/// The viewer needs one step next, the step of its world. A record of that step is
/// verified; a record below it is a repeat; a record past it cannot be verified without a
/// world at its step. A keyframe past it says that the steps between are not on the
/// stream (the stream is in step order, and the host publishes the keyframe of step `K`
/// before the record of step `K`): the viewer continues from it at once, the steps between
/// a gap. The end, or the loss of the stream, with steps heard of past the viewer's leaves
/// the gap open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    next: u64,
    /// The step after the highest record heard of.
    heard: u64,
    /// A record past `next` has come since the viewer's last step: it waits for a keyframe.
    waiting: bool,
}

/// What to do with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The step the viewer needs: verify it.
    Verify,
    /// Below the viewer's step: a repeat, already verified or jumped over.
    Repeat,
    /// Past the viewer's step: skipped until a keyframe closes the gap.
    Skip,
    /// Past the viewer's step, the first such record since the viewer's last step: the
    /// steps from it are missing, and the viewer waits for a keyframe (it says so:
    /// [`waiting`]). Skipped like [`Take::Skip`].
    Missing,
}

/// What a viewer says when the records stopped at `from` on the stream `stream`, which
/// goes on: a record of step `seen` came instead ([`Take::Missing`]), and the viewer waits
/// for a keyframe. A notice: nothing reconnects, and the gap is reported when it closes.
pub fn waiting(stream: &str, from: u64, seen: u64) -> String {
    format!(
        "steps from {from} are not on the stream {stream} (its next record is of step {seen}); waiting for its next keyframe"
    )
}

impl Follow {
    /// A viewer whose world is at step `next` (the keyframe it joined at).
    pub fn new(next: u64) -> Follow {
        Follow {
            next,
            heard: next,
            waiting: false,
        }
    }

    /// The step the viewer needs next.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// A record of step `step`.
    pub fn record(&mut self, step: u64) -> Take {
        self.heard = self.heard.max(step.saturating_add(1));
        match step.cmp(&self.next) {
            std::cmp::Ordering::Less => Take::Repeat,
            std::cmp::Ordering::Equal => {
                self.next = step.saturating_add(1);
                self.waiting = false;
                Take::Verify
            }
            std::cmp::Ordering::Greater if self.waiting => Take::Skip,
            std::cmp::Ordering::Greater => {
                self.waiting = true;
                Take::Missing
            }
        }
    }

    /// A keyframe at step `step`: `Some(from)` when it closes a gap (steps `from..step`
    /// never came; the viewer continues from the keyframe), `None` when the viewer has no
    /// use for it.
    pub fn keyframe(&mut self, step: u64) -> Option<u64> {
        self.heard = self.heard.max(step);
        if step > self.next {
            self.waiting = false;
            let from = std::mem::replace(&mut self.next, step);
            Some(from)
        } else {
            None
        }
    }

    /// The stream ended at the host's step `host_step`, or was lost (`host_step` 0): the
    /// steps from the viewer's to the last one heard of that never came, as `(from, to)`.
    pub fn open_gap(&self, host_step: u64) -> Option<(u64, u64)> {
        let to = self.heard.max(host_step);
        (to > self.next).then_some((self.next, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EndReason, HostCodec, Record};
    use crate::{Dims, Setup};

    fn frame(m: &ToViewer) -> Vec<u8> {
        HostCodec::encode_frame(m).unwrap().0.to_vec()
    }

    fn record(step: u64) -> Vec<u8> {
        frame(&ToViewer::Record(Record {
            step,
            hash: step * 3,
            input: bytes::Bytes::new(),
        }))
    }

    fn world() -> World {
        World::new(
            Setup {
                dims: Dims::Two,
                bodies: 3,
                seed: 1,
            },
            None,
        )
    }

    #[test]
    fn a_keyframe_past_the_next_step_closes_the_gap_at_once() {
        let mut f = Follow::new(10);
        assert_eq!(f.record(10), Take::Verify);
        assert_eq!(f.record(10), Take::Repeat);
        assert_eq!(
            f.keyframe(11),
            None,
            "the keyframe of the next step: no gap"
        );
        assert_eq!(f.record(11), Take::Verify);
        // Steps 12..20 dropped by the host: the keyframe of 20 comes before record 20.
        assert_eq!(f.keyframe(20), Some(12));
        assert_eq!(f.next(), 20);
        assert_eq!(f.record(20), Take::Verify);
        // A message lost: records past the next step wait for a keyframe.
        assert_eq!(f.record(25), Take::Missing);
        assert_eq!(f.record(26), Take::Skip);
        assert_eq!(f.keyframe(27), Some(21));
        assert_eq!(f.record(27), Take::Verify);
        assert_eq!(f.open_gap(28), None, "nothing missing at the end");
        assert_eq!(f.record(40), Take::Missing);
        assert_eq!(
            f.open_gap(0),
            Some((28, 41)),
            "lost: up to the last heard of"
        );
        assert_eq!(
            f.open_gap(50),
            Some((28, 50)),
            "ended: up to the host's step"
        );
    }

    #[test]
    fn names_follow_the_doc() {
        let s = Session::new("demo-1").unwrap();
        assert_eq!(s.stream(), "OSTM_demo-1");
        assert_eq!(
            s.stored(),
            ["ostm.demo-1.rec", "ostm.demo-1.key", "ostm.demo-1.end"]
        );
        assert_eq!(s.drift(), "ostm.demo-1.drift");
        assert_eq!(s.filter(), "ostm.demo-1.*");
        assert_eq!(s.leaf("ostm.demo-1.rec"), Leaf::Records);
        assert_eq!(s.leaf("ostm.demo-1.key"), Leaf::Keyframes);
        assert_eq!(s.leaf("ostm.demo-1.end"), Leaf::End);
        assert_eq!(s.leaf("ostm.demo-1.other"), Leaf::Other);
        assert_eq!(s.leaf("ostm.demo-12.rec"), Leaf::Other);
        assert_eq!(Session::of_stream("OSTM_demo-1"), Some(s));
        assert_eq!(Session::of_stream("KV_x"), None);
        let ids = MessageIds::new("r1");
        assert_eq!(ids.records(7), "r1-rec-7");
        assert_eq!(ids.keyframe(0), "r1-key-0");
        assert_eq!(ids.end(), "r1-end");
        assert_eq!(MAX_PAYLOAD, 131_094);
    }

    #[test]
    fn server_lists_and_session_addresses_follow_the_doc() {
        let urls = |s: &str| Servers::parse(s).map(|s| s.urls().to_vec());
        assert_eq!(urls("nats://h:1").unwrap(), ["nats://h:1"]);
        assert_eq!(urls("nats://h:1/").unwrap(), ["nats://h:1"]);
        assert_eq!(
            urls("nats://h:1,g:2,nats://k:3").unwrap(),
            ["nats://h:1", "nats://g:2", "nats://k:3"]
        );
        assert_eq!(
            Servers::parse("nats://h:1,nats://g:2").unwrap().to_string(),
            "nats://h:1,nats://g:2"
        );
        for bad in [
            "h:1",
            "nats://",
            "nats://h:1,",
            "nats://,h:1",
            "nats://h:1/x",
            "nats://h :1",
            "tls://h:1",
        ] {
            assert_eq!(urls(bad), None, "{bad}");
        }
        let (servers, session) = session_address("nats://h:1,nats://g:2/demo")
            .unwrap()
            .unwrap();
        assert_eq!(servers.urls(), ["nats://h:1", "nats://g:2"]);
        assert_eq!(session.name(), "demo");
        let (servers, _) = session_address("nats://h:1,g:2/demo").unwrap().unwrap();
        assert_eq!(servers.urls(), ["nats://h:1", "nats://g:2"]);
        assert!(session_address("h:1/demo").is_none());
        for bad in [
            "nats://h:1",
            "nats:///demo",
            "nats://h:1,/demo",
            "nats://h:1//demo",
            "nats://h:1/",
        ] {
            let e = session_address(bad).unwrap().unwrap_err();
            assert!(
                e == format!("{bad}: expected nats://HOST:PORT/NAME") || e.contains("session name"),
                "{bad}: {e}"
            );
        }
        let e = session_address("nats://h:1,g:2/a.b").unwrap().unwrap_err();
        assert!(
            e.starts_with("nats://h:1,g:2/a.b: session name `a.b`"),
            "{e}"
        );
    }

    #[test]
    fn session_names_are_checked() {
        for bad in ["", "a.b", "a b", "é", &"x".repeat(65)] {
            let e = check_session(bad).unwrap_err();
            assert!(e.contains("expected 1..=64 characters"), "{e}");
        }
        check_session(&"x".repeat(64)).unwrap();
    }

    #[test]
    fn the_window_is_never_longer_than_the_age() {
        assert_eq!(
            duplicate_window(Duration::from_secs(3600)),
            DUPLICATE_WINDOW
        );
        assert_eq!(
            duplicate_window(Duration::from_secs(30)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn frames_before_a_bad_one_are_given_then_the_error_at_its_offset() {
        let mut p = [record(0), record(1)].concat();
        let at = p.len() as u64;
        p.extend_from_slice(&[2, 0, 0, 0, 0x7e, 0]);
        let got: Vec<_> = frames("m", &p).unwrap().collect();
        assert_eq!(got.len(), 3);
        assert!(matches!(&got[0], Ok((0, ToViewer::Record(r))) if r.step == 0));
        assert!(matches!(&got[1], Ok((_, ToViewer::Record(r))) if r.step == 1));
        let e = got[2].as_ref().unwrap_err();
        // The type byte follows the frame's length.
        assert_eq!(e.offset, at + 4, "{e}");
        assert!(e.message.contains("expected a host message type"), "{e}");
    }

    #[test]
    fn a_payload_cut_inside_a_frame_says_so() {
        let r = record(0);
        let e = frames("m", &r[..r.len() - 3])
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(
            e.message.starts_with("the payload ends inside a frame"),
            "{e}"
        );
        let p = [record(0), vec![9, 0]].concat();
        let e = frames("m", &p).unwrap().nth(1).unwrap().unwrap_err();
        assert_eq!(e.offset, r.len() as u64);
        assert!(
            e.message.contains("a 4-byte frame length, found 2 bytes"),
            "{e}"
        );
    }

    #[test]
    fn size_and_emptiness_are_checked_first() {
        let e = frames("m", &[]).err().unwrap();
        assert_eq!(
            e.to_string(),
            "m: at offset 0: expected at least one frame, found an empty payload"
        );
        let e = frames("m", &vec![0; MAX_PAYLOAD + 1]).err().unwrap();
        assert_eq!(
            e.to_string(),
            "m: at offset 0: expected a payload of at most 131094 bytes, found 131095"
        );
    }

    #[test]
    fn a_keyframe_is_one_snapshot_of_kind_0() {
        let w = world();
        let key = frame(&ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: w.clone(),
        });
        assert_eq!(keyframe("k", &key).unwrap(), w);
        let resync = frame(&ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world: w.clone(),
        });
        let e = keyframe("k", &resync).unwrap_err();
        assert_eq!(
            (e.offset, e.message.as_str()),
            (5, "expected a snapshot of kind 0 (attach), found kind 1")
        );
        let two = [key.clone(), key.clone()].concat();
        let e = keyframe("k", &two).unwrap_err();
        assert_eq!(e.offset, key.len() as u64);
        assert!(e.message.ends_with("found a second frame"), "{e}");
        let e = keyframe("k", &record(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: at offset 0: expected one snapshot frame (0x82), found a frame of type 0x83"
        );
    }

    #[test]
    fn an_end_message_is_one_end_frame() {
        let e = End {
            reason: EndReason::Finished,
            text: "done".into(),
            host_step: 5,
        };
        let f = frame(&ToViewer::End(e.clone()));
        assert_eq!(end("e", &f).unwrap(), e);
        let err = end("e", &[f.clone(), record(1)].concat()).unwrap_err();
        assert_eq!(err.offset, f.len() as u64);
        let err = end("e", &record(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "e: at offset 0: expected one end frame (0x85), found a frame of type 0x83"
        );
    }
}
