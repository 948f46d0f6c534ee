//! What the readers (TCP, [`super::network`]; NATS, [`super::nats`]) and the verifier
//! ([`super::session`]) share, below all three: the counters and the stop flag they both
//! see, how the NATS reader's stream ended, and the drift replies' waits and refusals.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long to wait for the host's answer to a drift request (the session core's
/// deadline, [`ostm_protocol::session::DRIFT_REPLY_MS`]).
pub const DRIFT_REPLY_TIMEOUT: Duration =
    Duration::from_millis(ostm_protocol::session::DRIFT_REPLY_MS);

/// What the reader and the verifier share.
#[derive(Debug, Default)]
pub struct Shared {
    /// The latest host step heard of.
    pub host_step: AtomicU64,
    /// The viewer's verified step, for its heartbeats.
    pub viewer_step: AtomicU64,
    /// Ctrl-C or SIGTERM, or a view asking to stop ([`Interrupt`]).
    pub interrupted: Interrupt,
    /// Connections made so far (the current one's number).
    pub connection: AtomicU64,
}

/// Stops a session as Ctrl-C or SIGTERM does. A view sets it: a terminal in raw mode
/// delivers Ctrl-C as a key, not as a signal. Clones share one flag.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Asks the session to stop: it ends as interrupted (`session::Stop::Interrupted`).
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was asked for.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Why a drift request on TCP gets no answer once the connection has ended.
pub use ostm_protocol::reader::tcp::HOST_CLOSED;
/// Why a drift request through NATS gets no answer once the reader has stopped.
pub const NATS_READER_STOPPED: &str =
    "the viewer's NATS reader has stopped; the host cannot be asked through it any more";

/// How the NATS reader's stream ended; `Why` is its reason type ([`super::nats::Lost`]).
pub enum Ended<Why> {
    /// The host's end message (already in the spool).
    End,
    /// Lost: the reason.
    Lost(Why),
    /// A protocol error: final.
    Broken(Why),
}
