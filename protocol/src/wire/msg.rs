//! The messages, each with its exact bytes (the frame's type byte and body).
//!
//! Viewer to host ([`ToHost`]): `0x01` hello, `0x02` drift request, `0x03` heartbeat.
//! Host to viewer ([`ToViewer`]): `0x81` welcome, `0x82` snapshot, `0x83` record,
//! `0x84` heartbeat, `0x85` end, `0x86` drift reply. All integers little endian.

use super::{PeerRole, MAGIC, MAX_TEXT_LEN, MAX_TOKEN_LEN, VERSION};
use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::sim::link::Link;
use crate::sim::op::for_each_op;
use crate::sim::world::{
    Setup, World, BODY_BYTES, MAX_SNAPSHOT_BYTES, SETUP_BYTES, SNAPSHOT_HEADER_BYTES,
};
use bytes::{BufMut, Bytes, BytesMut};

/// The largest probe snapshot: setup, a 64-body snapshot, a link block.
pub const MAX_PROBE_BYTES: usize = SETUP_BYTES + MAX_SNAPSHOT_BYTES + Link::LEN;

/// A message from a viewer to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHost {
    /// `0x01`: the viewer's half of the handshake; the first frame it sends.
    Hello(Hello),
    /// `0x02`: "send me your snapshot at this step" (after a hash mismatch).
    DriftRequest { step: u64 },
    /// `0x03`: sent when the viewer has sent nothing else for a heartbeat interval;
    /// carries the step of the viewer's world (its last verified step).
    Heartbeat { viewer_step: u64 },
}

/// The viewer's hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version the viewer speaks.
    pub version: u16,
    /// The role byte as sent (1 = viewer); 0 when the version is not this build's, whose
    /// remaining bytes are skipped unread.
    pub role: u8,
    /// The shared secret, empty when none (at most [`MAX_TOKEN_LEN`] bytes).
    pub token: Vec<u8>,
}

/// A message from the host to a viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToViewer {
    /// `0x81`: the host's half of the handshake.
    Welcome(Welcome),
    /// `0x82`: the probe snapshot the viewer's world is rebuilt from.
    Snapshot { kind: SnapshotKind, world: World },
    /// `0x83`: one step.
    Record(Record),
    /// `0x84`: sent when the host has sent nothing else for a heartbeat interval.
    Heartbeat { host_step: u64 },
    /// `0x85`: the stream ends; the host closes the connection after it.
    End(End),
    /// `0x86`: the answer to a drift request.
    DriftReply(DriftReply),
}

/// The host's welcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Welcome {
    /// The protocol version the host speaks.
    pub version: u16,
    /// The role byte as sent (2 = host); 0 when the version is not this build's.
    pub role: u8,
    /// Steps per second the host aims at; 0 means as fast as it can.
    pub rate: u32,
    /// The host's heartbeat interval in milliseconds.
    pub heartbeat_ms: u32,
    /// How many recent snapshots the host keeps for drift requests.
    pub ring: u32,
    /// How many records the host queues for one viewer before resyncing it.
    pub queue: u32,
}

/// Why a snapshot was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotKind {
    /// 0: right after the welcome.
    Attach = 0,
    /// 1: the viewer fell more than its queue behind; records between its last one and
    /// this snapshot's step were never sent.
    Resync = 1,
}

/// One step: its number, its input, and the host's world hash after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The step's number: the step of the world the input is applied to. After it the
    /// world is at `step + 1`, and `hash` is that world's hash.
    pub step: u64,
    /// The host's world hash after the step.
    pub hash: u64,
    /// The step's input bytes (checked to decode as ops).
    pub input: Bytes,
}

/// Why a stream ended; the byte sent in the end message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// 1: the host ran the steps it was asked to (or its replay's last step).
    Finished = 1,
    /// 2: the host was stopped (Ctrl-C or a signal).
    Shutdown = 2,
    /// 3: the viewer speaks a protocol version the host does not.
    VersionMismatch = 3,
    /// 4: the token was missing or wrong.
    BadToken = 4,
    /// 5: the host already serves its maximum number of viewers.
    Full = 5,
    /// 6: the peer is not a viewer (wrong magic or role).
    NotAViewer = 6,
    /// 7: the viewer sent a malformed frame.
    ProtocolError = 7,
    /// 8: the host could not write to the viewer for the stall timeout.
    Stalled = 8,
    /// 9: the host received nothing from the viewer for the silence timeout.
    Silent = 9,
    /// 10: the host failed (for example its own recording could not be written).
    HostError = 10,
}

impl EndReason {
    /// All reasons, by byte.
    pub const ALL: [EndReason; 10] = [
        EndReason::Finished,
        EndReason::Shutdown,
        EndReason::VersionMismatch,
        EndReason::BadToken,
        EndReason::Full,
        EndReason::NotAViewer,
        EndReason::ProtocolError,
        EndReason::Stalled,
        EndReason::Silent,
        EndReason::HostError,
    ];

    /// The reason for a byte, if it is one.
    pub fn from_byte(b: u8) -> Option<EndReason> {
        EndReason::ALL.into_iter().find(|r| *r as u8 == b)
    }

    /// The reason's name, as printed by the tools.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Finished => "finished",
            EndReason::Shutdown => "shutdown",
            EndReason::VersionMismatch => "version-mismatch",
            EndReason::BadToken => "bad-token",
            EndReason::Full => "full",
            EndReason::NotAViewer => "not-a-viewer",
            EndReason::ProtocolError => "protocol-error",
            EndReason::Stalled => "stalled",
            EndReason::Silent => "silent",
            EndReason::HostError => "host-error",
        }
    }

    /// True for a clean end of the stream (the viewer exits 0): finished or shutdown.
    pub fn is_clean(self) -> bool {
        matches!(self, EndReason::Finished | EndReason::Shutdown)
    }
}

/// The end message: a reason and a human-readable text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub reason: EndReason,
    /// At most [`MAX_TEXT_LEN`] bytes of UTF-8 (cut on a character boundary when sent).
    pub text: String,
    /// The host's step when it sent this.
    pub host_step: u64,
}

/// Whether the host still held the requested snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftStatus {
    /// 0: held; the reply carries it.
    Held = 0,
    /// 1: older than the host's ring of recent snapshots.
    TooOld = 1,
    /// 2: a step the host has not reached.
    NotReached = 2,
}

/// The answer to a drift request for step `S`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftReply {
    /// The requested step `S`.
    pub step: u64,
    pub status: DriftStatus,
    /// The host's world at step `S`, as it hashed it (status held only).
    pub world: Option<World>,
    /// The host's recomputation of step `S - 1` from its own snapshot at `S - 1` and the
    /// input it streamed for that step: the world hash after each of the four stages.
    /// `None` when the snapshot at `S - 1` is no longer held.
    pub stages: Option<[u64; 4]>,
}

/// The probe snapshot of a world: the 6-byte setup, the world snapshot, then the 4-byte
/// link block when the world has one.
pub fn probe_bytes(world: &World) -> Vec<u8> {
    let mut out = Vec::with_capacity(SETUP_BYTES + world.snapshot_len() + Link::LEN);
    out.extend_from_slice(&world.setup().to_bytes());
    world.write_snapshot(&mut out);
    if let Some(l) = world.link() {
        out.extend_from_slice(&l.to_bytes());
    }
    out
}

/// Reads a probe snapshot of `len` bytes (link block last when `has_link`); `len_at` is
/// the offset of its length field, where a length of the wrong shape is refused.
fn read_probe(
    c: &mut Cursor<'_>,
    input: &str,
    len: usize,
    len_at: u64,
    has_link: bool,
) -> Result<World, FormatError> {
    let at = c.offset();
    let link_len = if has_link { Link::LEN } else { 0 };
    // setup, snapshot header, 1..=64 bodies, the link block.
    let fixed = SETUP_BYTES + SNAPSHOT_HEADER_BYTES + link_len;
    let (min, max) = (fixed + BODY_BYTES, fixed + 64 * BODY_BYTES);
    if len < min || len > max || !(len - fixed).is_multiple_of(BODY_BYTES) {
        let with = if has_link { "with" } else { "without" };
        return Err(c.error_at(
            len_at,
            format!("expected probe snapshot length 6 + 12 + 32 x (1..=64){} ({min}..={max}, {with} a link block), found {len}", if has_link { " + 4" } else { "" }),
        ));
    }
    let raw = c.take(len, "probe snapshot")?;
    let mut p = Cursor::new(input, raw, at);
    let setup = Setup::read(&mut p)?;
    let snap_len = len - SETUP_BYTES - link_len;
    let snap_at = p.offset();
    let snap = p.take(snap_len, "world snapshot")?;
    let link = if has_link {
        Some(Link::read(&mut p)?)
    } else {
        None
    };
    World::from_snapshot(setup, link, input, snap, snap_at)
}

/// Writes `flags u8 (bit 0: link block) | probe length u32 | probe`.
fn put_probe(out: &mut BytesMut, world: &World) {
    out.put_u8(world.link().is_some() as u8);
    let probe = probe_bytes(world);
    out.put_u32_le(probe.len() as u32);
    out.put_slice(&probe);
}

/// Reads what [`put_probe`] writes.
fn get_probe(c: &mut Cursor<'_>, input: &str) -> Result<World, FormatError> {
    let flags_at = c.offset();
    let flags = c.u8("probe flags")?;
    if flags > 1 {
        return Err(c.error_at(
            flags_at,
            format!("expected probe flags 0 or 1, found {flags}"),
        ));
    }
    let len_at = c.offset();
    let len = c.u32("probe snapshot length")? as usize;
    read_probe(c, input, len, len_at, flags == 1)
}

fn read_text(c: &mut Cursor<'_>) -> Result<String, FormatError> {
    let at = c.offset();
    let len = c.u16("text length")? as usize;
    if len > MAX_TEXT_LEN {
        return Err(c.error_at(
            at,
            format!("expected text length at most {MAX_TEXT_LEN}, found {len}"),
        ));
    }
    let raw = c.take(len, "text")?;
    Ok(String::from_utf8_lossy(raw).into_owned())
}

/// Cuts `s` to at most `max` bytes on a character boundary.
fn cut_text(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A message that can be framed: its type byte and body.
pub trait Message: Sized {
    /// Appends the type byte and the body.
    fn encode(&self, out: &mut BytesMut);
    /// Reads the type byte and the body from a whole frame payload; `input` names the stream.
    ///
    /// # Errors
    /// An unknown type byte, a body too short, or a value out of range, at its offset.
    fn decode(c: &mut Cursor<'_>, input: &str) -> Result<Self, FormatError>;
}

impl Message for ToHost {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            ToHost::Hello(h) => {
                out.put_u8(0x01);
                out.put_slice(&MAGIC);
                out.put_u16_le(h.version);
                out.put_u8(h.role);
                let token = &h.token[..h.token.len().min(MAX_TOKEN_LEN)];
                out.put_u8(token.len() as u8);
                out.put_slice(token);
            }
            ToHost::DriftRequest { step } => {
                out.put_u8(0x02);
                out.put_u64_le(*step);
            }
            ToHost::Heartbeat { viewer_step } => {
                out.put_u8(0x03);
                out.put_u64_le(*viewer_step);
            }
        }
    }

    fn decode(c: &mut Cursor<'_>, _input: &str) -> Result<Self, FormatError> {
        let at = c.offset();
        match c.u8("message type")? {
            0x01 => {
                read_magic(c)?;
                let version = c.u16("version")?;
                if version != VERSION {
                    // A hello of another version may be laid out differently after its
                    // version: skip it unread so the host can answer "version mismatch".
                    let rest = c.remaining();
                    c.take(rest, "hello")?;
                    return Ok(ToHost::Hello(Hello {
                        version,
                        role: 0,
                        token: Vec::new(),
                    }));
                }
                let role = c.u8("role")?;
                let token_len = c.u8("token length")? as usize;
                let token = c.take(token_len, "token")?.to_vec();
                Ok(ToHost::Hello(Hello {
                    version,
                    role,
                    token,
                }))
            }
            0x02 => Ok(ToHost::DriftRequest {
                step: c.u64("drift request step")?,
            }),
            0x03 => Ok(ToHost::Heartbeat {
                viewer_step: c.u64("heartbeat step")?,
            }),
            t => Err(c.error_at(
                at,
                format!("expected a viewer message type 0x01..=0x03, found 0x{t:02x}"),
            )),
        }
    }
}

/// A record's body after its type byte: step, hash, and the input with its stream offset
/// (its ops are checked by the caller).
pub(super) fn record_body<'a>(
    c: &mut Cursor<'a>,
) -> Result<(u64, u64, &'a [u8], u64), FormatError> {
    let step = c.u64("record step")?;
    let hash = c.u64("record hash")?;
    let len = c.u16("input length")? as usize;
    let base = c.offset();
    let raw = c.take(len, "step input")?;
    Ok((step, hash, raw, base))
}

fn read_magic(c: &mut Cursor<'_>) -> Result<(), FormatError> {
    let at = c.offset();
    let magic = c.take(MAGIC.len(), "magic")?;
    if magic != MAGIC {
        return Err(c.error_at(
            at,
            format!("expected magic \"OSTMLIVE\", found {magic:02x?}"),
        ));
    }
    Ok(())
}

impl Message for ToViewer {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            ToViewer::Welcome(w) => {
                out.put_u8(0x81);
                out.put_slice(&MAGIC);
                out.put_u16_le(w.version);
                out.put_u8(w.role);
                out.put_u32_le(w.rate);
                out.put_u32_le(w.heartbeat_ms);
                out.put_u32_le(w.ring);
                out.put_u32_le(w.queue);
            }
            ToViewer::Snapshot { kind, world } => {
                out.put_u8(0x82);
                out.put_u8(*kind as u8);
                put_probe(out, world);
            }
            ToViewer::Record(r) => {
                out.put_u8(0x83);
                out.put_u64_le(r.step);
                out.put_u64_le(r.hash);
                out.put_u16_le(r.input.len() as u16);
                out.put_slice(&r.input);
            }
            ToViewer::Heartbeat { host_step } => {
                out.put_u8(0x84);
                out.put_u64_le(*host_step);
            }
            ToViewer::End(e) => {
                out.put_u8(0x85);
                out.put_u8(e.reason as u8);
                out.put_u64_le(e.host_step);
                let text = cut_text(&e.text, MAX_TEXT_LEN);
                out.put_u16_le(text.len() as u16);
                out.put_slice(text.as_bytes());
            }
            ToViewer::DriftReply(d) => {
                out.put_u8(0x86);
                out.put_u64_le(d.step);
                // "Held" without a world cannot be sent as such: it goes out as too old.
                let status = match (d.status, &d.world) {
                    (DriftStatus::Held, None) => DriftStatus::TooOld,
                    (s, _) => s,
                };
                out.put_u8(status as u8);
                if let (DriftStatus::Held, Some(world)) = (d.status, &d.world) {
                    put_probe(out, world);
                    match &d.stages {
                        Some(s) => {
                            out.put_u8(1);
                            for h in s {
                                out.put_u64_le(*h);
                            }
                        }
                        None => out.put_u8(0),
                    }
                }
            }
        }
    }

    fn decode(c: &mut Cursor<'_>, input: &str) -> Result<Self, FormatError> {
        let at = c.offset();
        match c.u8("message type")? {
            0x81 => {
                read_magic(c)?;
                let version = c.u16("version")?;
                if version != VERSION {
                    let rest = c.remaining();
                    c.take(rest, "welcome")?;
                    return Ok(ToViewer::Welcome(Welcome {
                        version,
                        role: 0,
                        rate: 0,
                        heartbeat_ms: 0,
                        ring: 0,
                        queue: 0,
                    }));
                }
                let role_at = c.offset();
                let role = c.u8("role")?;
                if role != PeerRole::Host as u8 {
                    return Err(
                        c.error_at(role_at, format!("expected role 2 (host), found {role}"))
                    );
                }
                Ok(ToViewer::Welcome(Welcome {
                    version,
                    role,
                    rate: c.u32("rate")?,
                    heartbeat_ms: c.u32("heartbeat interval")?,
                    ring: c.u32("ring size")?,
                    queue: c.u32("queue size")?,
                }))
            }
            0x82 => {
                let kind_at = c.offset();
                let kind = match c.u8("snapshot kind")? {
                    0 => SnapshotKind::Attach,
                    1 => SnapshotKind::Resync,
                    k => {
                        return Err(c.error_at(
                            kind_at,
                            format!("expected snapshot kind 0 or 1, found {k}"),
                        ))
                    }
                };
                let world = get_probe(c, input)?;
                Ok(ToViewer::Snapshot { kind, world })
            }
            0x83 => {
                let (step, hash, raw, base) = record_body(c)?;
                for_each_op(input, raw, base, |_| {})?;
                Ok(ToViewer::Record(Record {
                    step,
                    hash,
                    input: Bytes::copy_from_slice(raw),
                }))
            }
            0x84 => Ok(ToViewer::Heartbeat {
                host_step: c.u64("heartbeat step")?,
            }),
            0x85 => {
                let reason_at = c.offset();
                let b = c.u8("end reason")?;
                let reason = EndReason::from_byte(b).ok_or_else(|| {
                    c.error_at(reason_at, format!("expected end reason 1..=10, found {b}"))
                })?;
                let host_step = c.u64("end step")?;
                let text = read_text(c)?;
                Ok(ToViewer::End(End {
                    reason,
                    text,
                    host_step,
                }))
            }
            0x86 => {
                let step = c.u64("drift reply step")?;
                let status_at = c.offset();
                let status = match c.u8("drift status")? {
                    0 => DriftStatus::Held,
                    1 => DriftStatus::TooOld,
                    2 => DriftStatus::NotReached,
                    s => {
                        return Err(c.error_at(
                            status_at,
                            format!("expected drift status 0, 1 or 2, found {s}"),
                        ))
                    }
                };
                if status != DriftStatus::Held {
                    return Ok(ToViewer::DriftReply(DriftReply {
                        step,
                        status,
                        world: None,
                        stages: None,
                    }));
                }
                let world = get_probe(c, input)?;
                let has_at = c.offset();
                let stages = match c.u8("stage hashes present")? {
                    0 => None,
                    1 => Some([
                        c.u64("stage hash")?,
                        c.u64("stage hash")?,
                        c.u64("stage hash")?,
                        c.u64("stage hash")?,
                    ]),
                    b => return Err(c.error_at(has_at, format!("expected 0 or 1, found {b}"))),
                };
                Ok(ToViewer::DriftReply(DriftReply {
                    step,
                    status,
                    world: Some(world),
                    stages,
                }))
            }
            t => Err(c.error_at(
                at,
                format!("expected a host message type 0x81..=0x86, found 0x{t:02x}"),
            )),
        }
    }
}
