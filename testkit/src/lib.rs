//! Test helpers shared by every test crate of the workspace.
//!
//! - [`bin`] finds a binary of the workspace that cargo built for this test run (no test
//!   builds anything itself: `cargo test --workspace` builds `ostm-host` and
//!   `ostm-viewer` before any test starts, under the workspace's one feature set).
//! - [`Proc`] is a child process whose stdout and stderr are read by two threads from the
//!   moment it starts, so a child never blocks on a full pipe whatever it prints and
//!   however slow the machine is; every wait is bounded by [`LIMIT`].
//! - [`Cluster`] is a JetStream cluster of real `nats-server`s on 127.0.0.1 that a test
//!   can kill, pause, restart, corrupt and cut off nodes of ([`Link`]: a TCP forwarder a
//!   test can cut and heal).

mod cluster;
mod link;
mod proc;

pub use cluster::{find_nats, free_port, monitor, nats_bin, Cluster, Node};
pub use link::Link;

pub use proc::{bin, run, signal, Proc, LIMIT};
