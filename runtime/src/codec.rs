//! The wire's sans-IO codec ([`ostm_protocol::wire::Codec`]) as a tokio-util
//! `Decoder`/`Encoder`, for `Framed`, `FramedRead` and `FramedWrite` on a socket.

use bytes::BytesMut;
use ostm_protocol::wire::msg::Message;
use ostm_protocol::wire::{Codec, EncodedFrame, FrameTooLong, ToHost, ToViewer};
use ostm_protocol::FormatError;
use std::ops::{Deref, DerefMut};
use tokio_util::codec::{Decoder, Encoder};

/// A codec error on a socket: malformed bytes (the connection is then closed) or an I/O
/// failure.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer sent bytes that are not a valid frame.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The socket failed.
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
}

impl From<FrameTooLong> for WireError {
    /// A message too long for a frame: refused as the invalid input to a write it is.
    fn from(e: FrameTooLong) -> Self {
        WireError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    }
}

/// Decodes frames of `D` and encodes frames of `E` on one connection: the protocol's
/// [`Codec`], which it derefs to (`consumed`, `take_records`, …), driven by tokio-util.
#[derive(Debug)]
pub struct FrameCodec<D, E>(pub Codec<D, E>);

/// The host's side: decodes viewer messages, encodes host messages.
pub type HostFrameCodec = FrameCodec<ToHost, ToViewer>;
/// The viewer's side: decodes host messages, encodes viewer messages.
pub type ViewerFrameCodec = FrameCodec<ToViewer, ToHost>;

impl<D, E> FrameCodec<D, E> {
    /// A codec for a fresh connection named `name` in errors.
    pub fn new(name: impl Into<String>) -> Self {
        FrameCodec(Codec::new(name))
    }
}

impl<D, E> Deref for FrameCodec<D, E> {
    type Target = Codec<D, E>;
    fn deref(&self) -> &Codec<D, E> {
        &self.0
    }
}

impl<D, E> DerefMut for FrameCodec<D, E> {
    fn deref_mut(&mut self) -> &mut Codec<D, E> {
        &mut self.0
    }
}

impl<D: Message, E> Decoder for FrameCodec<D, E> {
    type Item = D;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<D>, WireError> {
        Ok(self.0.decode(src)?)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<D>, WireError> {
        Ok(self.0.decode_eof(src)?)
    }
}

// One impl per message type (not one over every `Message`): `Message` is another crate's
// trait, so a blanket impl could overlap the `EncodedFrame` one below.
macro_rules! encoder {
    ($($e:ty),*) => {$(
        impl<D> Encoder<$e> for FrameCodec<D, $e> {
            type Error = WireError;

            fn encode(&mut self, msg: $e, dst: &mut BytesMut) -> Result<(), WireError> {
                Ok(self.0.encode(&msg, dst)?)
            }
        }
    )*};
}
encoder!(ToHost, ToViewer);

impl<D, E> Encoder<EncodedFrame> for FrameCodec<D, E> {
    type Error = WireError;

    fn encode(&mut self, frame: EncodedFrame, dst: &mut BytesMut) -> Result<(), WireError> {
        dst.extend_from_slice(&frame.0);
        Ok(())
    }
}
