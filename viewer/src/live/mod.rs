//! The live side of the viewer: attaching to a host, verifying its records by step
//! number, recording, and explaining drift.
//!
//! - [`network`]: the reader: connection, handshake, reading into the spool, heartbeats,
//!   reconnection.
//! - [`nats`]: the reader for a session on NATS JetStream.
//! - [`shared`]: what the readers and the verifier share (counters, the stop flag, how a
//!   connection ended).
//! - [`spool`]: the queue between reader and verifier, spilling to disk.
//! - [`tls`]: the viewer's TLS options and set-up.
//! - [`session`]: the driver of the sans-IO verifier ([`ostm_protocol::session`]), fed by
//!   the spool: verify, record, report.
//! - [`sessions`]: what a NATS server holds of ostm sessions (`sessions`).
//! - [`bundle`]: where a drift report's failure bundle is written.
//! - [`record`]: a recording that continues in a new numbered file across a resync.
//! - [`watermark`]: the reader's receive low-water mark for a fast host.

pub mod bundle;
pub mod nats;
pub mod network;
pub mod record;
pub mod session;
pub mod sessions;
pub mod shared;
pub mod spool;
pub mod tls;
pub mod watermark;
