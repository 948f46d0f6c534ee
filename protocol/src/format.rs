//! The file formats: replays and what is derived from them, each byte for byte in `docs/`.
//!
//! - [`ostm`]: reading and writing `.ostm` replays whole (`docs/replay-format.md`).
//! - [`recording`]: writing a replay step by step, its journal, recovery after a crash.
//! - [`replay_stream`]: reading a replay a step at a time, in constant memory.
//! - [`trace`]: the per-step trace text format (`docs/trace-format.md`).
//! - [`compare`]: the first difference between two runs, traces or replays.
//! - [`bundle`]: the drift bundle (`.ostmb`, `docs/bundle-format.md`).
//! - [`keyframe`]: a world as JSON at a step, and its checks (`docs/keyframe.md`).
//! - [`ospc`]: the pose cache (`docs/pose-cache.md`).
//! - [`seek`]: the seek index beside a replay (`docs/seek-index.md`).

pub mod bundle;
pub mod compare;
pub mod keyframe;
pub mod ospc;
pub mod ostm;
pub mod recording;
pub mod replay_stream;
pub mod seek;
pub mod trace;
