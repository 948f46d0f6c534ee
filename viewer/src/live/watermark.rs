//! The reader's receive low-water mark (`SO_RCVLOWAT`): while the host streams faster than
//! one read takes, the reader asks the kernel not to wake it until a good piece of the
//! stream has arrived, so a fast host costs one wake-up per [`FAST`] bytes instead of one
//! per host write. When a wait under the raised mark lasts [`PATIENCE`], the mark drops
//! back to one byte: a slow or pausing host's records are read at once (docs/protocol.md,
//! "The viewer's reader and verifier").

use std::os::fd::RawFd;
use std::time::Duration;

/// The raised mark, in bytes.
pub const FAST: usize = 64 * 1024;
/// A read of at least this many bytes shows a fast stream: the mark is raised.
pub const RAISE_AFTER: usize = 8 * 1024;
/// How long the reader waits under the raised mark before it drops it.
pub const PATIENCE: Duration = Duration::from_millis(4);

/// One connection's mark.
pub struct Watermark {
    fd: Option<RawFd>,
    raised: bool,
}

impl Watermark {
    /// The mark of the TCP socket `fd` (`None`: a stream without one, which is left alone).
    pub fn new(fd: Option<RawFd>) -> Watermark {
        Watermark { fd, raised: false }
    }

    /// Whether the mark is raised (the reader then waits at most [`PATIENCE`]).
    pub fn raised(&self) -> bool {
        self.raised
    }

    /// After a read of `n` bytes: raises the mark when the stream is fast.
    pub fn after_read(&mut self, n: usize) {
        if n >= RAISE_AFTER && !self.raised {
            self.raised = self.set(FAST);
        }
    }

    /// A wait under the raised mark lasted [`PATIENCE`]: back to one byte.
    pub fn lower(&mut self) {
        if self.raised {
            self.set(1);
            self.raised = false;
        }
    }

    fn set(&self, bytes: usize) -> bool {
        let Some(fd) = self.fd else { return false };
        let v = bytes as libc::c_int;
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&v`, which lives for the
        // call; `fd` is the connection's socket, open for as long as the reader uses it.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn mark(fd: RawFd) -> libc::c_int {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes to `&mut v`, which lives for the call.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    #[test]
    fn a_large_read_raises_the_mark_and_patience_drops_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let fd = s.as_raw_fd();
        let mut m = Watermark::new(Some(fd));
        m.after_read(RAISE_AFTER - 1);
        assert!(!m.raised());
        assert_eq!(mark(fd), 1, "a small read leaves the mark at one byte");
        m.after_read(RAISE_AFTER);
        assert!(m.raised());
        assert_eq!(mark(fd) as usize, FAST);
        m.lower();
        assert!(!m.raised());
        assert_eq!(mark(fd), 1);
    }

    #[test]
    fn a_stream_without_a_socket_is_left_alone() {
        let mut m = Watermark::new(None);
        m.after_read(FAST);
        assert!(
            !m.raised(),
            "no socket: no raised mark, so no wait under it"
        );
    }
}
