//! The host's side, sans-IO: machines in the shape of [`crate::session::Verifier`] that
//! hold no thread, clock, channel, socket or file. `ostm-host` drives them over the
//! operating system's sockets and timers; tests and the fuzzer drive them in memory.
//!
//! # Layout
//! - [`conn`]: one viewer's connection: the hello and its deadline, the version, token and
//!   full checks, the welcome and attach snapshot, the records a connection takes from the
//!   host's ring with the heartbeat ahead of them, the heartbeat and silence timers, the
//!   stall of a write, a slow viewer's resync, drift requests, the end and the linger
//!   before close.
//! - [`ring`]: the fan-out: the records each connection is owed at its position (a resync
//!   for one more than `queue` behind, the end after the records owed), and the recent
//!   worlds drift requests are answered from.
//! - [`publish`]: the NATS publisher: the stepping loop's feed and its bound, keyframes
//!   (their cadence, and the ones that close a gap), records batched into messages, the
//!   message ids, the acknowledgements awaited and the steps published, dropped and failed.

pub mod conn;
#[cfg(any(test, feature = "plants"))]
pub mod pair;
pub mod publish;
pub mod ring;

pub use conn::{Config, Conn, Event, Handed, Joined, Left, Request, Take, Transmit, Why};

/// Records sent in one write at most.
pub const BATCH: usize = 64;
