//! The live side of the viewer: attaching to a host, verifying its records by step
//! number, recording, and explaining drift.
//!
//! - [`session`]: the connection, the handshake, and the verify loop.
//! - [`drift`]: the drift report (the one place drift is handled).
//! - [`record`]: a recording that continues in a new numbered file across a resync.

pub mod drift;
pub mod record;
pub mod session;
