//! The live wire protocol: the messages a host and its viewers exchange, and the codec
//! that frames them. `docs/protocol.md` is the specification, byte for byte; this module
//! and that page change together.
//!
//! # Layout
//! - [`msg`]: the message types and their exact bytes ([`ToHost`], [`ToViewer`]).
//! - [`codec`]: the sans-IO [`Codec`] that frames them on byte buffers, with a stated
//!   maximum frame length, counting the bytes consumed so every error names its offset in
//!   the stream.
//! - [`run`]: record frames a viewer's reader takes whole and its verifier decodes.
//! - [`nats`]: the fan-out through NATS JetStream: a session's stream and subjects, message
//!   ids, headers and payload limits, and the frames of one message's payload.
//!
//! Nothing here touches a socket or a clock: the codec works on byte buffers, so it is
//! tested by feeding it bytes.
//!
//! ```text
//! frame:   length u32 (1..=MAX_FRAME_LEN) | type u8 | body (length - 1 bytes)
//! ```

pub mod codec;
pub mod msg;
pub mod nats;
pub mod run;

pub use codec::{Codec, EncodedFrame, FrameTooLong, HostCodec, ViewerCodec};
pub use msg::{
    probe_bytes, DriftReply, DriftStatus, End, EndReason, Hello, Record, SnapshotKind, ToHost,
    ToViewer, Welcome,
};
pub use run::{RecordRef, RecordRun};

/// The eight bytes that open every `Hello` and `Welcome` body: `OSTMLIVE`.
pub const MAGIC: [u8; 8] = *b"OSTMLIVE";
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// The largest frame payload (type byte plus body) either side accepts or sends.
///
/// The largest legal message is a record carrying a 65 535-byte input:
/// 1 (type) + 8 (step) + 8 (hash) + 2 (input length) + 65 535 = 65 554 bytes.
pub const MAX_FRAME_LEN: usize = 65_554;
/// The longest token a viewer may send.
pub const MAX_TOKEN_LEN: usize = 255;
/// The longest end-message text.
pub const MAX_TEXT_LEN: usize = 1024;
/// How often each side sends a heartbeat when it has sent nothing else, in milliseconds.
pub const HEARTBEAT_MS: u32 = 1000;
/// A side that has received nothing for this long closes the connection, in milliseconds.
pub const SILENCE_TIMEOUT_MS: u32 = 10_000;

/// Who is at the other end: sent in `Hello` (viewer) and `Welcome` (host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// 1: a viewer, which receives the stream.
    Viewer = 1,
    /// 2: a host, which serves it.
    Host = 2,
}

#[cfg(test)]
mod tests;
