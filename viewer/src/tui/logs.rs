//! Log lines while the terminal view has the screen: a line written then would land in
//! the middle of the picture, so the viewer's log writer ([`Stderr`]) holds them and
//! writes them to stderr once the terminal is restored, in order, at most [`HELD_MAX`]
//! bytes of them (a line says how many more were dropped).

use std::io::Write;
use std::sync::Mutex;

/// The most log bytes held while the view is up.
pub const HELD_MAX: usize = 1 << 20;

struct Held {
    bytes: Vec<u8>,
    /// Writes dropped because `bytes` was full.
    dropped: u64,
}

static HELD: Mutex<Option<Held>> = Mutex::new(None);

fn held() -> std::sync::MutexGuard<'static, Option<Held>> {
    // A panic while holding the lock leaves plain bytes behind: still usable.
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// From now on, log lines are held instead of written.
pub fn hold() {
    let mut h = held();
    if h.is_none() {
        *h = Some(Held {
            bytes: Vec::new(),
            dropped: 0,
        });
    }
}

/// Writes the held log lines to stderr, and writes the next ones straight there again.
pub fn release() {
    let Some(h) = held().take() else {
        return;
    };
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(&h.bytes);
    if h.dropped > 0 {
        let _ = writeln!(
            e,
            "({} more log lines came while the terminal view was up; not kept)",
            h.dropped
        );
    }
    let _ = e.flush();
}

/// The viewer's log writer: stderr, or held while the terminal view is up.
pub struct Stderr;

/// One log line's writer (see [`Stderr`]).
pub struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut h = held();
        match h.as_mut() {
            Some(h) if h.bytes.len() + buf.len() <= HELD_MAX => h.bytes.extend_from_slice(buf),
            Some(h) => h.dropped += 1,
            None => {
                drop(h);
                return std::io::stderr().write(buf);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
