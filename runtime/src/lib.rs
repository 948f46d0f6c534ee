//! The binaries' thin runtime layer: what `ostm-host`, `ostm-viewer` and the benches share
//! that needs a runtime, a command line or the network, kept out of `ostm-protocol`
//! (which has no runtime, no socket and no clock), as quinn sits on quinn-proto.
//!
//! # Layout
//! - [`codec`]: the wire's sans-IO codec as a tokio-util `Decoder`/`Encoder`
//!   ([`FrameCodec`]), and [`WireError`], a malformed frame or a failed socket.
//! - [`cli`]: options both binaries' command lines share (recording, token, NATS
//!   authentication and its client options).
//! - [`join`]: joining a session on NATS JetStream as a viewer does (the stream from a
//!   sequence on, the host's rate).
//! - [`read`]: the TCP/TLS reader machine's driver loop, which the viewer and the bench run.
//! - [`follow`]: the NATS reader machine's driver loop, which the viewer and the bench run.
//! - [`signal`]: the stop signal (SIGINT, SIGTERM).
//! - [`shell`]: the `completions` and `man` commands (clap_complete, clap_mangen).
//! - [`metrics`]: the `/metrics` endpoint of `--metrics ADDR` (prometheus-client).
//! - [`logging`]: the one logging set-up, `tracing` filtered by `RUST_LOG`.
//! - [`stdout`]: `println!` that a closed pipe (`| head`) does not turn into a panic.
//! - [`DEFAULT_PORT`]: the TCP port when an address names none.

pub mod cli;
pub mod codec;
pub mod follow;
pub mod join;
pub mod logging;
pub mod metrics;
pub mod moving;
pub mod read;
pub mod shell;
pub mod signal;
pub mod stdout;

pub use codec::{FrameCodec, HostFrameCodec, ViewerFrameCodec, WireError};

/// The default TCP port: `ostm-host serve` listens on it and `ostm-viewer` dials it when
/// an address names none.
pub const DEFAULT_PORT: u16 = 7878;
