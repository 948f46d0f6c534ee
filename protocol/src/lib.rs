//! The test module, its `.ostm` replay format, and the live wire protocol: a library with
//! no runtime, no socket and no clock, in folders by layer.
//!
//! # Layout
//! - [`sim`]: the simulation.
//!   - [`sim::world`]: bodies, the four stages, snapshots, the world hash.
//!   - [`sim::op`]: step inputs, the five operations and their bytes.
//!   - [`sim::rng`]: sfc32, which turns a seed into the initial bodies.
//!   - [`sim::link`]: the link block (linked worlds).
//!   - [`sim::fields`]: the density fields computed from a world.
//!   - [`sim::scenario`], [`sim::testdata`]: the seeded input generator and the generated
//!     test data.
//! - [`format`]: the file formats.
//!   - [`format::ostm`]: reading and writing `.ostm` replays.
//!   - [`format::recording`]: writing a replay step by step, its journal and recovery.
//!   - [`format::replay_stream`]: reading a replay a step at a time.
//!   - [`format::trace`]: the per-step trace text format.
//!   - [`format::compare`]: the first difference between two runs.
//!   - [`format::bundle`], [`format::keyframe`], [`format::ospc`], [`format::seek`]: the
//!     drift bundle, keyframes, the pose cache and the seek index.
//! - [`wire`]: the live protocol's messages and the sans-IO codec that frames them.
//! - [`cursor`], [`error`]: bounds-checked reading and the one error type, used by all.
//! - [`session`]: the viewer's session, sans-IO: verification by step number, restarts,
//!   gaps, drift evidence.
//! - [`serve`]: the host's side, sans-IO: one viewer's connection (the hello, the records
//!   it is owed, heartbeats, silence, stalls, resyncs, drift requests, the end).
//!
//! Nothing here does I/O on a socket or reads a clock: the simulation is deterministic,
//! and the codec works on byte buffers. The binaries' runtime glue is `ostm-runtime`.
//! The crate root re-exports the types most callers need.

pub mod cursor;
pub mod error;
pub mod format;
mod plant;
pub mod reader;
pub mod serve;
pub mod session;
pub mod sim;
pub mod wire;

pub use error::FormatError;
pub use format::ostm::{Replay, Verdict};
pub use sim::link::{Link, Role};
pub use sim::op::{Op, OpKind};
pub use sim::world::{Body, Dims, Setup, Stage, World};
