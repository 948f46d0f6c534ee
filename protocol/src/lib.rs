//! The test module, its `.ostm` replay format, and the live wire protocol.
//!
//! # Layout
//! - [`world`]: the simulation (bodies, the four stages, snapshots, the world hash).
//! - [`op`]: step inputs, the five operations and their bytes.
//! - [`rng`]: sfc32, which turns a seed into the initial bodies.
//! - [`link`]: the link block (linked worlds).
//! - [`ostm`]: reading and writing `.ostm` replays.
//! - [`recording`]: writing a replay step by step without holding its inputs in memory.
//! - [`scenario`], [`testdata`]: the seeded input generator and the generated test data.
//! - [`cursor`], [`error`]: bounds-checked reading and the one error type.
//!
//! Nothing here does I/O on a socket or reads a clock: the simulation is deterministic.

pub mod bundle;
#[cfg(feature = "cli")]
pub mod cli;
pub mod cursor;
pub mod error;
pub mod fields;
pub mod keyframe;
pub mod link;
pub mod op;
pub mod ospc;
pub mod ostm;
pub mod recording;
pub mod rng;
pub mod scenario;
pub mod seek;
#[cfg(feature = "signal")]
pub mod signal;
pub mod testdata;
pub mod trace;
pub mod wire;
pub mod world;

pub use error::FormatError;
pub use link::{Link, Role};
pub use op::{Op, OpKind};
pub use ostm::{Replay, Verdict};
pub use world::{Body, Dims, Setup, Stage, World};
