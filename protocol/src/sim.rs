//! The simulation: a deterministic integer world and what drives it. Nothing here reads a
//! file, a socket or a clock; the same seed and inputs give the same hashes everywhere.
//!
//! - [`world`]: bodies, the four stages, snapshots, the world hash.
//! - [`op`]: step inputs, the five operations and their bytes.
//! - [`rng`]: sfc32, which turns a seed into the initial bodies.
//! - [`link`]: the link block (linked worlds).
//! - [`fields`]: the density fields computed from a world (outside its hash).
//! - [`scenario`]: the seeded input generator.
//! - [`testdata`]: the generated test data and its golden hashes.

pub mod fields;
pub mod link;
pub mod op;
pub mod rng;
pub mod scenario;
pub mod testdata;
pub mod world;
