//! Frames onto a viewer's socket: the write side of a connection, and the vectored writes
//! that put shared frames on it as they are. Used by the connection's task ([`crate::conn`]) and by the
//! fan-out's direct writes ([`crate::direct`]); it knows nothing of the hub.

use ostm_protocol::wire::EncodedFrame;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncWrite, AsyncWriteExt, WriteHalf};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// Records sent in one write at most.
pub use ostm_protocol::serve::BATCH;

/// The write side: frames are written as they are, shared, with no buffer of its own.
/// A plain-TCP one can also be written without a task (`try_write_vectored`), which the
/// fan-out does while the connection is caught up ([`crate::direct`]).
pub enum Writer {
    Tcp(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Writer::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Writer::Tcp(w) => w.is_write_vectored(),
            Writer::Tls(w) => w.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_flush(cx),
            Writer::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// Slices in one vectored write at most: a batch of records and the heartbeat ahead of it.
pub const MAX_SLICES: usize = BATCH + 1;

/// Writes the frames as they are (shared, not copied), in vectored writes, then flushes
/// (which TLS needs).
pub async fn write_frames<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frames: &[EncodedFrame],
) -> std::io::Result<()> {
    for chunk in frames.chunks(MAX_SLICES) {
        let mut slices = [IoSlice::new(&[]); MAX_SLICES];
        for (s, f) in slices.iter_mut().zip(chunk) {
            *s = IoSlice::new(&f.0);
        }
        let mut left = &mut slices[..chunk.len()];
        while !left.is_empty() {
            let n = writer.write_vectored(left).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut left, n);
        }
    }
    writer.flush().await
}

/// What is left of `frames` once their first `written` bytes are written: the frame the
/// write stopped in cut at that byte, and the frames after it.
pub fn rest_of(frames: &[EncodedFrame], mut written: usize) -> Vec<EncodedFrame> {
    let mut rest = Vec::new();
    for f in frames {
        if written >= f.0.len() {
            written -= f.0.len();
        } else {
            rest.push(EncodedFrame(f.0.slice(written..)));
            written = 0;
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// A writer that takes at most `n` bytes per call, like a socket with little room.
    struct Trickle {
        got: Vec<u8>,
        n: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.n);
            self.got.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Partial writes resume where the kernel stopped, across frames and past the number
    /// of slices one vectored write takes.
    #[tokio::test]
    async fn frames_are_written_whole_and_in_order_through_partial_writes() {
        let all: Vec<EncodedFrame> = (0..200u8)
            .map(|i| EncodedFrame(Bytes::from(vec![i; 1 + i as usize % 7])))
            .collect();
        let want: Vec<u8> = all.iter().flat_map(|f| f.0.to_vec()).collect();
        for n in [1, 3, 1000] {
            let mut w = Trickle { got: Vec::new(), n };
            write_frames(&mut w, &all).await.unwrap();
            assert_eq!(w.got, want, "{n} bytes per write");
        }
    }

    fn frames_of(lens: &[usize]) -> Vec<EncodedFrame> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| EncodedFrame(Bytes::from(vec![i as u8; n])))
            .collect()
    }

    fn joined(frames: &[EncodedFrame]) -> Vec<u8> {
        frames.iter().flat_map(|f| f.0.to_vec()).collect()
    }

    /// Whatever byte a write stops at, the bytes written and the rest are the whole write,
    /// in order, once each.
    #[test]
    fn the_rest_of_a_short_write_starts_at_the_byte_it_stopped_at() {
        let all = frames_of(&[9, 1, 30, 7]);
        let bytes = joined(&all);
        for written in 0..=bytes.len() {
            let rest = rest_of(&all, written);
            assert_eq!(joined(&rest), bytes[written..], "{written} bytes written");
            assert!(rest.iter().all(|f| !f.0.is_empty()));
        }
    }
}
