//! Framing: `length u32 | payload`, with the length checked against [`MAX_FRAME_LEN`]
//! before a byte of the payload is buffered for. Sans-IO: the codec decodes from and
//! encodes to byte buffers its driver fills and drains (`ostm-runtime`'s `FrameCodec`
//! drives it as a tokio-util codec).
//!
//! The codec counts the bytes it has consumed on its connection, so a malformed frame is
//! a [`FormatError`] naming its offset within the stream, e.g.
//! `127.0.0.1:50412: at offset 4107: expected opcode 1..=5, found 9`.

use super::msg::Message;
use super::{ToHost, ToViewer, MAX_FRAME_LEN};
use crate::cursor::Cursor;
use crate::error::FormatError;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::marker::PhantomData;
use std::sync::Arc;

/// The length prefix's size.
pub(super) const HEAD: usize = 4;

/// A message too long for one frame: the payload would exceed [`MAX_FRAME_LEN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes exceeds the maximum {MAX_FRAME_LEN}")]
pub struct FrameTooLong {
    /// The payload's length.
    pub len: usize,
}

/// A frame already encoded by [`Codec::encode_frame`] (length prefix included), so the
/// host encodes each record once and hands the same bytes to every viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame(pub Bytes);

/// Decodes frames of `D` and encodes frames of `E` on one connection.
#[derive(Debug)]
pub struct Codec<D, E> {
    /// Names the connection in errors (a peer address, or `stream`).
    name: Arc<str>,
    /// Bytes of whole frames consumed so far: the stream offset of the next frame.
    pub(super) consumed: u64,
    _types: PhantomData<fn() -> (D, E)>,
}

/// The host's side: decodes viewer messages, encodes host messages.
pub type HostCodec = Codec<ToHost, ToViewer>;
/// The viewer's side: decodes host messages, encodes viewer messages.
pub type ViewerCodec = Codec<ToViewer, ToHost>;

impl<D, E> Codec<D, E> {
    /// A codec for a fresh connection named `name` in errors.
    pub fn new(name: impl Into<String>) -> Self {
        Codec {
            name: Arc::from(name.into()),
            consumed: 0,
            _types: PhantomData,
        }
    }

    /// Bytes of whole frames consumed so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The connection's name in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }
}

impl<D, E: Message> Codec<D, E> {
    /// Encodes one message as a whole frame, length prefix included.
    ///
    /// # Errors
    /// A message whose payload would exceed [`MAX_FRAME_LEN`] (none that this crate
    /// builds can: the largest is a record with a 65 535-byte input).
    pub fn encode_frame(msg: &E) -> Result<EncodedFrame, FrameTooLong> {
        let mut out = BytesMut::new();
        put_frame(msg, &mut out)?;
        Ok(EncodedFrame(out.freeze()))
    }

    /// Appends `msg` to `dst` as one whole frame, length prefix included.
    ///
    /// # Errors
    /// As [`Codec::encode_frame`].
    pub fn encode(&mut self, msg: &E, dst: &mut BytesMut) -> Result<(), FrameTooLong> {
        put_frame(msg, dst)
    }
}

fn put_frame(msg: &impl Message, dst: &mut BytesMut) -> Result<(), FrameTooLong> {
    let start = dst.len();
    dst.put_u32_le(0);
    msg.encode(dst);
    let len = dst.len() - start - HEAD;
    if len > MAX_FRAME_LEN {
        dst.truncate(start);
        return Err(FrameTooLong { len });
    }
    dst[start..start + HEAD].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

impl<D: Message, E> Codec<D, E> {
    /// Decodes the frame at the front of `src`, if it is whole, and consumes it; `None`
    /// when more bytes are needed (room for the rest of the frame is then reserved, never
    /// more than one frame). The driver reads into `src` and calls this again.
    ///
    /// # Errors
    /// A length out of range or a payload that is not a valid message, at its offset in
    /// the stream; the connection is then to be closed.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<D>, FormatError> {
        if src.len() < HEAD {
            return Ok(None);
        }
        let len = u32::from_le_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if len == 0 || len > MAX_FRAME_LEN {
            return Err(FormatError::new(
                &*self.name,
                self.consumed,
                format!("expected frame length 1..={MAX_FRAME_LEN}, found {len}"),
            ));
        }
        if src.len() < HEAD + len {
            // Checked against the maximum above: this never reserves more than one frame.
            src.reserve(HEAD + len - src.len());
            return Ok(None);
        }
        // Decoded in place (every message owns what it keeps), then consumed: no split
        // of the buffer per frame.
        let base = self.consumed + HEAD as u64;
        let decoded = {
            let mut c = Cursor::new(&self.name, &src[HEAD..HEAD + len], base);
            D::decode(&mut c, &self.name).and_then(|m| c.finish("frame").map(|()| m))
        };
        src.advance(HEAD + len);
        let msg = decoded?;
        self.consumed = base + len as u64;
        Ok(Some(msg))
    }

    /// [`Codec::decode`] at the end of the stream: bytes left that are not a whole frame
    /// are an error.
    ///
    /// # Errors
    /// As [`Codec::decode`], and a stream that ends inside a frame.
    pub fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<D>, FormatError> {
        match self.decode(src)? {
            Some(msg) => Ok(Some(msg)),
            None if src.is_empty() => Ok(None),
            None => {
                let want = if src.len() < HEAD {
                    format!("a {HEAD}-byte frame length")
                } else {
                    let len = u32::from_le_bytes([src[0], src[1], src[2], src[3]]);
                    format!("{len} frame bytes")
                };
                let have = src.len().saturating_sub(HEAD);
                let found = if src.len() < HEAD { src.len() } else { have };
                let e = FormatError::new(
                    &*self.name,
                    self.consumed,
                    format!(
                        "connection closed inside a frame: expected {want}, found {found} bytes"
                    ),
                );
                src.clear();
                Err(e)
            }
        }
    }
}
