//! The `.ospc` pose cache, version 1: every body's position for a run of consecutive
//! steps, as a reference engine would dump it. Written by `ostm-viewer ghost` (the
//! stand-in for such a dump) and compared against a replay by `ostm-viewer compare`.
//!
//! ```text
//! offset  size
//!  0      4    magic "OSPC"
//!  4      2    version u16 = 1
//!  6      1    dimensions u8, 2 or 3
//!  7      1    body count u8, 1..=64
//!  8      8    start step u64
//! 16      4    frame count u32, 1..=16 777 216 (start step + frame count - 1 fits in u64)
//! 20      ...  frame count x body count poses, frame by frame, body by body:
//!              present u8 (0 or 1), x i32, y i32, z i32   (13 bytes)
//! ```
//! An absent pose is all zeros; in 2D every z is 0. The file ends after the last pose.
//! Frame `f` is the world at step `start step + f`: the state after the bookkeeping stage
//! of the step before, which that step's hash row describes. The full definition is
//! `docs/pose-cache.md`.

use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::format::ostm::Replay;
use crate::sim::world::{Dims, World, MAX_BODIES};
use std::path::Path;

/// The four magic bytes.
pub const MAGIC: &[u8; 4] = b"OSPC";
/// The only version.
pub const VERSION: u16 = 1;
/// Bytes before the first pose.
pub const HEADER_BYTES: usize = 20;
/// Bytes of one pose.
pub const POSE_BYTES: usize = 13;
/// The most frames a cache may hold.
pub const MAX_FRAMES: u32 = 16_777_216;

/// One body's pose in one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pose {
    /// False for a body that does not exist (not yet spawned, removed, not yet arrived).
    pub present: bool,
    /// Position in millimetres; all zeros when absent; z = 0 in 2D.
    pub pos: [i32; 3],
}

/// A whole pose cache in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoseCache {
    dims: Dims,
    start_step: u64,
    bodies: u8,
    /// Frame-major: pose of body `b` in frame `f` is at `f * bodies + b`.
    poses: Vec<Pose>,
}

/// Why a pose cache could not be made from a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GhostError {
    /// The run does not hold every step the cache should cover.
    #[error("the run covers steps {first}..={last}, but frames {from}..={to} were asked for")]
    OutOfRange {
        first: u64,
        last: u64,
        from: u64,
        to: u64,
    },
    /// Frames that would run past step `u64::MAX` (where a replay's step wraps to 0), which
    /// a pose cache's steps `S..=S+F-1` cannot.
    #[error("frames from step {from} on ({frames} of them) would pass step 18446744073709551615, which a pose cache cannot hold")]
    PastMaxStep { from: u64, frames: u64 },
    /// Zero frames, or more than [`MAX_FRAMES`].
    #[error("expected a frame count of 1..={MAX_FRAMES}, found {0}")]
    FrameCount(u64),
    /// A 2D run with a z offset.
    #[error("a 2D run takes an offset x,y (or x,y,0), found z = {0}")]
    OffsetZ(i32),
    /// A position plus the offset leaves the i32 range.
    #[error("body {body} at step {step}: position plus offset leaves the 32-bit range")]
    Overflow { step: u64, body: usize },
}

impl PoseCache {
    /// An empty cache (no frames yet) of `bodies` bodies (1..=64) from `start_step`.
    pub fn new(dims: Dims, start_step: u64, bodies: u8) -> PoseCache {
        PoseCache {
            dims,
            start_step,
            bodies: bodies.clamp(1, MAX_BODIES as u8),
            poses: Vec::new(),
        }
    }

    /// 2D or 3D.
    pub fn dims(&self) -> Dims {
        self.dims
    }

    /// The step of frame 0.
    pub fn start_step(&self) -> u64 {
        self.start_step
    }

    /// Bodies per frame.
    pub fn body_count(&self) -> usize {
        self.bodies as usize
    }

    /// Frames held.
    pub fn frame_count(&self) -> usize {
        self.poses.len() / self.body_count()
    }

    /// The step of the last frame (the start step while no frame is held; a cache read
    /// from a file holds at least one and its last step fits in `u64`).
    pub fn last_step(&self) -> u64 {
        self.start_step
            .wrapping_add((self.frame_count() as u64).saturating_sub(1))
    }

    /// The poses of frame `f`, if held.
    pub fn frame(&self, f: usize) -> Option<&[Pose]> {
        let n = self.body_count();
        // Checked: a frame index from a step far past the cache must give None, not wrap.
        let start = f.checked_mul(n)?;
        self.poses.get(start..start.checked_add(n)?)
    }

    /// The poses at step `step`, if a frame covers it.
    pub fn frame_at_step(&self, step: u64) -> Option<&[Pose]> {
        let f = step.checked_sub(self.start_step)?;
        self.frame(usize::try_from(f).ok()?)
    }

    /// Appends a frame: `poses` is cut or padded with absent poses to the body count,
    /// and in 2D every z is set to 0; absent poses are stored as all zeros.
    pub fn push_frame(&mut self, poses: &[Pose]) {
        for b in 0..self.body_count() {
            let mut p = poses.get(b).copied().unwrap_or_default();
            if !p.present {
                p = Pose::default();
            } else if self.dims == Dims::Two {
                p.pos[2] = 0;
            }
            self.poses.push(p);
        }
    }

    /// The poses of `frames` consecutive steps of `replay` from step `from`, every present
    /// body moved by `offset`. The body count is the most body slots any of those
    /// worlds holds; a slot a world does not hold yet is absent.
    pub fn from_replay(
        replay: &Replay,
        from: u64,
        frames: u64,
        offset: [i32; 3],
    ) -> Result<PoseCache, GhostError> {
        if frames == 0 || frames > MAX_FRAMES as u64 {
            return Err(GhostError::FrameCount(frames));
        }
        if replay.setup.dims == Dims::Two && offset[2] != 0 {
            return Err(GhostError::OffsetZ(offset[2]));
        }
        let (first, last) = (replay.start_step(), replay.end_step());
        let to = from.saturating_add(frames - 1);
        let out_of_range = GhostError::OutOfRange {
            first,
            last,
            from,
            to,
        };
        // Every frame's step must be one the replay holds (counted from its start step,
        // modulo 2^64: `Replay::row_of`), and none may pass u64::MAX.
        match replay.row_of(from) {
            Some(row) if (row as u64).saturating_add(frames - 1) <= replay.step_count() as u64 => {}
            _ => return Err(out_of_range),
        }
        if from.checked_add(frames - 1).is_none() {
            return Err(GhostError::PastMaxStep { from, frames });
        }
        let mut world = replay.world_at(from, |_| {}).map_err(|_| out_of_range)?;
        let mut worlds_poses: Vec<Vec<Pose>> = Vec::with_capacity(frames as usize);
        for f in 0..frames {
            worlds_poses.push(poses_of(&world, offset)?);
            if f + 1 < frames {
                world.step(&replay.inputs.ops(world.step.wrapping_sub(first) as usize));
            }
        }
        let bodies = worlds_poses.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let mut cache = PoseCache::new(replay.setup.dims, from, bodies as u8);
        cache.poses.reserve(bodies * frames as usize);
        for p in &worlds_poses {
            cache.push_frame(p);
        }
        Ok(cache)
    }

    /// Reads a pose cache file.
    pub fn read_file(path: &Path) -> Result<PoseCache, FormatError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| FormatError::io(&name, &e))?;
        PoseCache::from_bytes(&name, &bytes)
    }

    /// Parses a pose cache; `input` names it in errors.
    pub fn from_bytes(input: &str, bytes: &[u8]) -> Result<PoseCache, FormatError> {
        let mut c = Cursor::new(input, bytes, 0);
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            return Err(c.error_at(0, format!("expected magic \"OSPC\", found {magic:02x?}")));
        }
        let at = c.offset();
        let version = c.u16("version")?;
        if version != VERSION {
            return Err(c.error_at(at, format!("expected version 1, found {version}")));
        }
        let at = c.offset();
        let dims = match c.u8("dimensions")? {
            2 => Dims::Two,
            3 => Dims::Three,
            d => return Err(c.error_at(at, format!("expected dimensions 2 or 3, found {d}"))),
        };
        let at = c.offset();
        let bodies = c.u8("body count")?;
        if bodies == 0 || bodies as usize > MAX_BODIES {
            return Err(c.error_at(at, format!("expected body count 1..=64, found {bodies}")));
        }
        let start_step = c.u64("start step")?;
        let at = c.offset();
        let frames = c.u32("frame count")?;
        if frames == 0 || frames > MAX_FRAMES {
            return Err(c.error_at(
                at,
                format!("expected frame count 1..={MAX_FRAMES}, found {frames}"),
            ));
        }
        if start_step.checked_add(frames as u64 - 1).is_none() {
            return Err(c.error_at(
                at,
                format!("expected start step + frame count - 1 to fit in u64, found start step {start_step} and {frames} frames"),
            ));
        }
        // At most 16 777 216 x 64 x 13 bytes: fits in u64, and in usize on 64-bit targets.
        let need = frames as u64 * bodies as u64 * POSE_BYTES as u64;
        if need > c.remaining() as u64 {
            return Err(c.error(format!(
                "expected {need} bytes of poses ({frames} frames x {bodies} bodies x {POSE_BYTES}), found {} bytes",
                c.remaining()
            )));
        }
        let count = frames as usize * bodies as usize;
        let mut poses = Vec::with_capacity(count);
        for k in 0..count {
            let (f, b) = (k / bodies as usize, k % bodies as usize);
            let at = c.offset();
            let present = c.u8("pose present")?;
            let mut pos = [0i32; 3];
            for p in pos.iter_mut() {
                *p = c.i32("pose position")?;
            }
            match present {
                0 if pos != [0; 3] => {
                    return Err(c.error_at(at + 1, format!("frame {f} body {b}: expected an absent pose to be all zeros, found {pos:?}")));
                }
                0 | 1 => {}
                _ => {
                    return Err(c.error_at(
                        at,
                        format!("frame {f} body {b}: expected present 0 or 1, found {present}"),
                    ))
                }
            }
            if dims == Dims::Two && pos[2] != 0 {
                return Err(c.error_at(
                    at + 9,
                    format!(
                        "frame {f} body {b}: expected z = 0 in a 2D pose cache, found {}",
                        pos[2]
                    ),
                ));
            }
            poses.push(Pose {
                present: present == 1,
                pos,
            });
        }
        c.finish("pose cache")?;
        Ok(PoseCache {
            dims,
            start_step,
            bodies,
            poses,
        })
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.poses.len() * POSE_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(self.dims as u8);
        out.push(self.bodies);
        out.extend_from_slice(&self.start_step.to_le_bytes());
        out.extend_from_slice(&(self.frame_count() as u32).to_le_bytes());
        for p in &self.poses {
            out.push(p.present as u8);
            for v in p.pos {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Writes the file whole ([`crate::format::write_whole`]: through `PATH.PID.part`,
    /// synced, renamed; a failed write leaves `PATH` as it was and no `PATH.PID.part`).
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        crate::format::write_whole(path, &self.to_bytes())
    }
}

/// Every body slot's pose in `world`, present bodies moved by `offset`.
pub fn poses_of(world: &World, offset: [i32; 3]) -> Result<Vec<Pose>, GhostError> {
    let axes = world.dims().axes();
    world
        .bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if !b.alive {
                return Ok(Pose::default());
            }
            let mut pos = [0i32; 3];
            for a in 0..axes {
                pos[a] = b.pos[a]
                    .checked_add(offset[a])
                    .ok_or(GhostError::Overflow {
                        step: world.step,
                        body: i,
                    })?;
            }
            Ok(Pose { present: true, pos })
        })
        .collect()
}

/// How far one body of a run is from its pose in a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deviation {
    /// Absent in both.
    Absent,
    /// Present in both: the largest absolute difference over the world's axes, in mm,
    /// after subtracting the offset from the pose.
    Distance(u64),
    /// Present in one only; `in_run` says which.
    Presence { in_run: bool },
}

/// Each body's deviation between `world` and `poses` (a frame of a cache written with
/// `offset`). Covers the larger of the world's slot count and the frame's body count;
/// a slot missing on one side counts as absent there.
pub fn deviations(world: &World, poses: &[Pose], offset: [i32; 3]) -> Vec<Deviation> {
    let axes = world.dims().axes();
    let n = world.bodies.len().max(poses.len());
    (0..n)
        .map(|i| {
            let run = world.bodies.get(i).filter(|b| b.alive);
            let ghost = poses.get(i).filter(|p| p.present);
            match (run, ghost) {
                (None, None) => Deviation::Absent,
                (Some(_), None) => Deviation::Presence { in_run: true },
                (None, Some(_)) => Deviation::Presence { in_run: false },
                (Some(b), Some(p)) => Deviation::Distance(
                    (0..axes)
                        .map(|a| {
                            (p.pos[a] as i64 - offset[a] as i64 - b.pos[a] as i64).unsigned_abs()
                        })
                        .max()
                        .unwrap_or(0),
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::op::Op;
    use crate::sim::world::{Body, Setup};

    fn pose(x: i32, y: i32, z: i32) -> Pose {
        Pose {
            present: true,
            pos: [x, y, z],
        }
    }

    fn sample() -> PoseCache {
        let mut c = PoseCache::new(Dims::Three, 200, 2);
        c.push_frame(&[pose(1, -2, 3), Pose::default()]);
        c.push_frame(&[pose(10_400, 0, i32::MIN), pose(i32::MAX, 5, 6)]);
        c
    }

    /// The header of a 2D cache of `bodies` bodies and `frames` frames from step 7.
    fn header(dims: u8, bodies: u8, frames: u32) -> Vec<u8> {
        let mut b = b"OSPC".to_vec();
        b.extend_from_slice(&1u16.to_le_bytes());
        b.push(dims);
        b.push(bodies);
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&frames.to_le_bytes());
        b
    }

    fn pose_bytes(present: u8, pos: [i32; 3]) -> Vec<u8> {
        let mut b = vec![present];
        for v in pos {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn err(bytes: &[u8]) -> FormatError {
        match PoseCache::from_bytes("t.ospc", bytes) {
            Ok(c) => panic!("expected an error, read {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn the_bytes_are_the_documented_layout() {
        let mut c = PoseCache::new(Dims::Two, 7, 1);
        c.push_frame(&[pose(400, 9, 0)]);
        let mut want = header(2, 1, 1);
        want.extend_from_slice(&pose_bytes(1, [400, 9, 0]));
        assert_eq!(c.to_bytes(), want);
        assert_eq!(want.len(), HEADER_BYTES + POSE_BYTES);
    }

    #[test]
    fn a_cache_round_trips() {
        let c = sample();
        let bytes = c.to_bytes();
        assert_eq!(bytes.len(), HEADER_BYTES + 2 * 2 * POSE_BYTES);
        let back = PoseCache::from_bytes("t.ospc", &bytes).expect("reads back");
        assert_eq!(back, c);
        assert_eq!(back.to_bytes(), bytes);
        assert_eq!(back.frame_at_step(201), c.frame(1));
        assert_eq!(back.frame_at_step(199), None);
        assert_eq!(back.frame_at_step(202), None);
        // A step far past the cache is no frame (not a wrapped index into it).
        assert_eq!(back.frame_at_step(u64::MAX), None);
        assert_eq!(back.frame_at_step(200 + (1 << 63)), None);
        assert_eq!(back.frame(usize::MAX), None);
    }

    #[test]
    fn a_cache_written_to_a_file_reads_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("g.ospc");
        sample().write_file(&path).expect("write");
        assert_eq!(PoseCache::read_file(&path).expect("read"), sample());
        let missing =
            PoseCache::read_file(&dir.path().join("none.ospc")).expect_err("missing file");
        assert!(missing.message.starts_with("cannot read"), "{missing}");
    }

    #[test]
    fn malformed_headers_are_refused_at_their_offsets() {
        let cases: Vec<(Vec<u8>, u64, &str)> = vec![
            (b"OSP".to_vec(), 0, "expected 4-byte magic"),
            (b"OSTM\x01\x00".to_vec(), 0, "expected magic \"OSPC\""),
            (
                [&b"OSPC"[..], &[2, 0]].concat(),
                4,
                "expected version 1, found 2",
            ),
            (
                [&b"OSPC"[..], &[1, 0, 4]].concat(),
                6,
                "expected dimensions 2 or 3, found 4",
            ),
            (
                [&b"OSPC"[..], &[1, 0, 2, 0]].concat(),
                7,
                "expected body count 1..=64, found 0",
            ),
            (
                [&b"OSPC"[..], &[1, 0, 2, 65]].concat(),
                7,
                "expected body count 1..=64, found 65",
            ),
            (
                [&b"OSPC"[..], &[1, 0, 2, 1, 0, 0]].concat(),
                8,
                "expected 8-byte start step",
            ),
            (
                header(2, 1, 0),
                16,
                "expected frame count 1..=16777216, found 0",
            ),
            (header(2, 1, MAX_FRAMES + 1), 16, "found 16777217"),
            (
                header(2, 1, 1)[..18].to_vec(),
                16,
                "expected 4-byte frame count",
            ),
        ];
        for (bytes, offset, what) in cases {
            let e = err(&bytes);
            assert_eq!(e.offset, offset, "{e}");
            assert!(e.message.contains(what), "{e} should say {what}");
            assert_eq!(e.input, "t.ospc");
        }
    }

    #[test]
    fn a_start_step_whose_last_frame_overflows_is_refused() {
        let mut b = header(2, 1, 2);
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = err(&b);
        assert_eq!(e.offset, 16);
        assert!(e.message.contains("fit in u64"), "{e}");
        // One frame at u64::MAX is fine.
        let mut b = header(2, 1, 1);
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        b.extend_from_slice(&pose_bytes(0, [0; 3]));
        assert_eq!(
            PoseCache::from_bytes("t", &b).expect("reads").start_step(),
            u64::MAX
        );
    }

    #[test]
    fn a_frame_count_the_bytes_cannot_hold_is_refused_before_allocating() {
        // 16 777 216 frames x 64 bodies claimed, 13 bytes present.
        let mut b = header(3, 64, MAX_FRAMES);
        b.extend_from_slice(&pose_bytes(0, [0; 3]));
        let e = err(&b);
        assert_eq!(e.offset, 20);
        assert_eq!(
            e.message,
            "expected 13958643712 bytes of poses (16777216 frames x 64 bodies x 13), found 13 bytes"
        );
        // One byte short of two poses.
        let mut b = header(2, 2, 1);
        b.extend_from_slice(&pose_bytes(0, [0; 3]));
        b.extend_from_slice(&pose_bytes(0, [0; 3])[..12]);
        assert!(err(&b).message.contains("expected 26 bytes of poses"));
    }

    #[test]
    fn trailing_bytes_are_refused_at_the_end_of_the_poses() {
        let mut b = sample().to_bytes();
        let end = b.len() as u64;
        b.push(0);
        let e = err(&b);
        assert_eq!(e.offset, end);
        assert_eq!(
            e.message,
            "expected end of pose cache, found 1 trailing bytes"
        );
    }

    #[test]
    fn malformed_poses_are_refused_at_their_offsets() {
        let first = HEADER_BYTES as u64;
        let second = first + POSE_BYTES as u64;
        let cases: Vec<(Vec<u8>, u64, &str)> = vec![
            (
                pose_bytes(2, [0; 3]),
                first,
                "frame 0 body 0: expected present 0 or 1, found 2",
            ),
            (
                pose_bytes(0, [0, 0, 1]),
                first + 1,
                "expected an absent pose to be all zeros",
            ),
            (
                pose_bytes(1, [5, 5, 1]),
                first + 9,
                "expected z = 0 in a 2D pose cache, found 1",
            ),
        ];
        for (bad, offset, what) in cases {
            // Frame 0 body 0 is bad; a good pose follows as body 1.
            let mut b = header(2, 2, 1);
            b.extend_from_slice(&bad);
            b.extend_from_slice(&pose_bytes(1, [1, 2, 0]));
            let e = err(&b);
            assert_eq!(e.offset, offset, "{e}");
            assert!(e.message.contains(what), "{e} should say {what}");
        }
        // The second pose of the second frame names frame 1 body 1.
        let mut b = header(2, 2, 2);
        for p in [
            pose_bytes(1, [1, 1, 0]),
            pose_bytes(1, [1, 1, 0]),
            pose_bytes(1, [1, 1, 0]),
            pose_bytes(3, [0; 3]),
        ] {
            b.extend_from_slice(&p);
        }
        let e = err(&b);
        assert_eq!(e.offset, second + 2 * POSE_BYTES as u64);
        assert!(e.message.starts_with("frame 1 body 1:"), "{e}");
        // A 3D cache allows z.
        let mut b = header(3, 1, 1);
        b.extend_from_slice(&pose_bytes(1, [5, 5, 1]));
        assert!(PoseCache::from_bytes("t", &b).is_ok());
    }

    #[test]
    fn every_truncation_of_a_valid_cache_is_an_error_not_a_panic() {
        let bytes = sample().to_bytes();
        for n in 0..bytes.len() {
            let e = err(&bytes[..n]);
            assert!(e.offset <= n as u64, "{e} for {n} bytes");
        }
    }

    fn replay_2d() -> Replay {
        let setup = Setup {
            dims: Dims::Two,
            bodies: 3,
            seed: 42,
        };
        let mut r = Replay::new(setup, None);
        for s in 0..10 {
            let ops = if s == 4 {
                vec![Op::Remove { body: 1 }, Op::Spawn { pos: [1, 2, 0] }]
            } else {
                vec![]
            };
            r.inputs.push_ops(&ops);
        }
        r
    }

    #[test]
    fn a_ghost_holds_the_run_moved_by_the_offset() {
        let r = replay_2d();
        let g = PoseCache::from_replay(&r, 3, 4, [400, 0, 0]).expect("ghost");
        assert_eq!((g.start_step(), g.frame_count(), g.body_count()), (3, 4, 4));
        let mut w = r.start_world();
        for s in 0..7u64 {
            if s >= 3 {
                let frame = g.frame_at_step(s).expect("frame");
                for (i, b) in w.bodies.iter().enumerate() {
                    assert_eq!(frame[i].present, b.alive, "step {s} body {i}");
                    if b.alive {
                        assert_eq!(frame[i].pos, [b.pos[0] + 400, b.pos[1], 0]);
                    }
                }
                // Before the spawn (steps 3 and 4) body 3 does not exist yet.
                assert_eq!(frame[3].present, s >= 5);
                assert!(deviations(&w, frame, [400, 0, 0])
                    .iter()
                    .all(|d| matches!(d, Deviation::Absent | Deviation::Distance(0))));
            }
            w.step(&r.inputs.ops(s as usize));
        }
    }

    #[test]
    fn ghosts_outside_the_run_or_with_a_bad_offset_are_refused() {
        let r = replay_2d();
        assert_eq!(
            PoseCache::from_replay(&r, 8, 4, [0; 3]),
            Err(GhostError::OutOfRange {
                first: 0,
                last: 10,
                from: 8,
                to: 11
            })
        );
        assert!(PoseCache::from_replay(&r, 8, 3, [0; 3]).is_ok());
        assert_eq!(
            PoseCache::from_replay(&r, 0, 0, [0; 3]),
            Err(GhostError::FrameCount(0))
        );
        assert_eq!(
            PoseCache::from_replay(&r, 0, 1, [0, 0, 5]),
            Err(GhostError::OffsetZ(5))
        );
        assert_eq!(
            PoseCache::from_replay(&r, 0, 1, [i32::MAX, 0, 0]),
            Err(GhostError::Overflow { step: 0, body: 0 })
        );
    }

    #[test]
    fn deviations_measure_the_largest_axis_after_the_offset() {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 3,
            seed: 1,
        };
        let mut w = World::new(setup, None);
        w.bodies = vec![
            Body::new(true, 0, [100, 200, 300], [0; 3]),
            Body::new(true, 0, [100, 200, 300], [0; 3]),
            Body::default(),
        ]
        .into();
        let poses = [
            pose(500, 190, 330),
            Pose::default(),
            Pose::default(),
            pose(1, 1, 1),
        ];
        // Body 0: |500 - 400 - 100| = 0, |190 - 200| = 10, |330 - 300| = 30.
        assert_eq!(
            deviations(&w, &poses, [400, 0, 0]),
            vec![
                Deviation::Distance(30),
                Deviation::Presence { in_run: true },
                Deviation::Absent,
                Deviation::Presence { in_run: false },
            ]
        );
        // In 2D z is not compared.
        let setup = Setup {
            dims: Dims::Two,
            ..setup
        };
        let mut w2 = World::new(setup, None);
        w2.bodies = vec![Body::new(true, 0, [100, 200, 0], [0; 3])].into();
        assert_eq!(
            deviations(&w2, &[pose(100, 203, 77)], [0; 3]),
            vec![Deviation::Distance(3)]
        );
    }
}
