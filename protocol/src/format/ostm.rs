//! The `.ostm` replay format, version 1: reader and writer.
//!
//! ```text
//! magic "OSTM" | version u16 = 1 | flags u16 | setup length u32 (6, or 10 with a link)
//! setup 6 bytes | link block 4 bytes (flag bit 2) | step count u32 (<= 16 777 216)
//! start snapshot: u32 length + snapshot (flag bit 1)
//! hash rows: u64 x (step count + 1) (flag bit 0)
//! per step: u16 input length + input bytes
//! ```
//! Every length is checked against the bytes that remain before anything is allocated.

use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::sim::link::Link;
use crate::sim::op::{for_each_op, Op, OpKind, MAX_INPUT_LEN};
use crate::sim::world::{
    Setup, World, BODY_BYTES, MAX_SNAPSHOT_BYTES, SETUP_BYTES, SNAPSHOT_HEADER_BYTES,
};
use std::path::Path;

/// The four magic bytes.
pub const MAGIC: &[u8; 4] = b"OSTM";
/// The only version.
pub const VERSION: u16 = 1;
/// Flag bit 0: hash rows present.
pub const FLAG_HASHES: u16 = 1;
/// Flag bit 1: a start snapshot present.
pub const FLAG_START_SNAPSHOT: u16 = 2;
/// Flag bit 2: a link block follows the setup.
pub const FLAG_LINK: u16 = 4;
/// The most steps a replay may hold.
pub const MAX_STEPS: u32 = 16_777_216;

/// All step inputs of a replay, stored back to back; each is already validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    bytes: Vec<u8>,
    /// End offset (in `bytes`) of each step's input.
    ends: Vec<usize>,
}

impl Inputs {
    /// Number of steps.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True with no steps.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Step `i`'s input bytes.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Step `i`'s ops.
    pub fn ops(&self, i: usize) -> Vec<Op> {
        let mut ops = Vec::new();
        self.ops_into(i, &mut ops);
        ops
    }

    /// Step `i`'s ops into `ops` (cleared first), reusing its allocation.
    pub fn ops_into(&self, i: usize, ops: &mut Vec<Op>) {
        ops.clear();
        // Inputs are validated when added, so this cannot fail.
        let _ = for_each_op("", self.get(i), 0, |op| ops.push(op));
    }

    /// Appends a step's input after checking it decodes; returns its ops.
    pub fn push(&mut self, input: &[u8]) -> Result<Vec<Op>, FormatError> {
        if input.len() > MAX_INPUT_LEN {
            return Err(FormatError::new(
                "input",
                0,
                format!(
                    "expected at most {MAX_INPUT_LEN} input bytes, found {}",
                    input.len()
                ),
            ));
        }
        let ops = crate::sim::op::decode_input("input", input, 0)?;
        self.bytes.extend_from_slice(input);
        self.ends.push(self.bytes.len());
        Ok(ops)
    }

    /// Appends a step's ops.
    pub fn push_ops(&mut self, ops: &[Op]) {
        for op in ops {
            op.encode(&mut self.bytes);
        }
        self.ends.push(self.bytes.len());
    }

    /// Iterates over the step inputs.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }
}

/// A whole replay in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub setup: Setup,
    pub link: Option<Link>,
    /// The world a live attach began from (flag bit 1); its step is the start step.
    pub start: Option<World>,
    /// Hash rows (flag bit 0): row i is the world hash at start step + i.
    pub hashes: Option<Vec<u64>>,
    pub inputs: Inputs,
}

/// What `inspect` reports about the ops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Count per kind, indexed by opcode - 1.
    pub by_kind: [u64; 5],
    /// Steps with an empty input.
    pub empty_steps: u64,
}

impl Replay {
    /// A replay of `setup` from step 0 with no steps yet.
    pub fn new(setup: Setup, link: Option<Link>) -> Replay {
        Replay {
            setup,
            link,
            start: None,
            hashes: None,
            inputs: Inputs::default(),
        }
    }

    /// The flags word this replay is written with.
    pub fn flags(&self) -> u16 {
        flags_for(
            self.hashes.is_some(),
            self.start.is_some(),
            self.link.is_some(),
        )
    }

    /// The step the replay starts at: the start snapshot's, else 0.
    pub fn start_step(&self) -> u64 {
        self.start.as_ref().map_or(0, |w| w.step)
    }

    /// The world the replay starts from.
    pub fn start_world(&self) -> World {
        start_world(self.setup, self.link, self.start.as_ref())
    }

    /// Number of steps.
    pub fn step_count(&self) -> usize {
        self.inputs.len()
    }

    /// The step the replay ends at: the start step plus the step count (wrapping, so a
    /// hostile start step near `u64::MAX` gives a defined value).
    pub fn end_step(&self) -> u64 {
        self.start_step().wrapping_add(self.step_count() as u64)
    }

    /// The hash row at which the replay holds step `step` ([`row_of`]: counted from the
    /// start step modulo 2^64), if it holds it.
    pub fn row_of(&self, step: u64) -> Option<usize> {
        row_of(self.start_step(), self.step_count() as u64, step).map(|r| r as usize)
    }

    /// Runs every step and fills in the hash rows.
    pub fn compute_hashes(&mut self) {
        let mut world = self.start_world();
        let mut rows = Vec::with_capacity(self.step_count() + 1);
        rows.push(world.hash());
        for i in 0..self.step_count() {
            world.step(&self.inputs.ops(i));
            rows.push(world.hash());
        }
        self.hashes = Some(rows);
    }

    /// Counts ops by kind.
    pub fn op_counts(&self) -> OpCounts {
        let mut counts = OpCounts::default();
        for input in self.inputs.iter() {
            if input.is_empty() {
                counts.empty_steps += 1;
            }
            let _ = for_each_op("", input, 0, |op| {
                counts.by_kind[op.kind() as usize - 1] += 1
            });
        }
        counts
    }

    /// Count of one op kind.
    pub fn count_of(&self, kind: OpKind) -> u64 {
        self.op_counts().by_kind[kind as usize - 1]
    }

    /// Reads a replay file.
    pub fn read_file(path: &Path) -> Result<Replay, FormatError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| FormatError::io(&name, &e))?;
        Replay::from_bytes(&name, &bytes)
    }

    /// Parses a replay from bytes; `input` names it in errors.
    pub fn from_bytes(input: &str, bytes: &[u8]) -> Result<Replay, FormatError> {
        let mut c = Cursor::new(input, bytes, 0);
        let Header {
            flags,
            setup,
            link,
            steps: count,
            start,
        } = Header::read(input, &mut c)?;
        let hashes = if flags & FLAG_HASHES != 0 {
            let rows = count as usize + 1;
            let raw = c.take(rows * 8, &format!("hash rows ({rows} x u64)"))?;
            Some(
                raw.chunks_exact(8)
                    .map(|r| u64::from_le_bytes(r.try_into().unwrap_or([0; 8])))
                    .collect(),
            )
        } else {
            None
        };
        // Each step needs at least its 2-byte length: refuse a count the bytes cannot hold.
        if count as usize > c.remaining() / 2 {
            return Err(c.error(format!(
                "expected {count} step inputs (at least {} bytes), found {} bytes",
                count as u64 * 2,
                c.remaining()
            )));
        }
        let mut inputs = Inputs {
            bytes: Vec::with_capacity(c.remaining() - count as usize * 2),
            ends: Vec::with_capacity(count as usize),
        };
        for step in 0..count {
            let len = c.u16(&format!("input length of step {step}"))? as usize;
            let base = c.offset();
            let raw = c.take(len, &format!("input of step {step}"))?;
            for_each_op(input, raw, base, |_| {})?;
            inputs.bytes.extend_from_slice(raw);
            inputs.ends.push(inputs.bytes.len());
        }
        c.finish("replay")?;
        Ok(Replay {
            setup,
            link,
            start,
            hashes,
            inputs,
        })
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(
            &mut out,
            &self.setup,
            self.link,
            self.step_count() as u32,
            self.flags(),
        );
        if let Some(w) = &self.start {
            out.extend_from_slice(&(w.snapshot_len() as u32).to_le_bytes());
            w.write_snapshot(&mut out);
        }
        if let Some(rows) = &self.hashes {
            for r in rows {
                out.extend_from_slice(&r.to_le_bytes());
            }
        }
        for input in self.inputs.iter() {
            out.extend_from_slice(&(input.len() as u16).to_le_bytes());
            out.extend_from_slice(input);
        }
        out
    }

    /// Writes the file whole ([`crate::format::write_whole`]: through `PATH.PID.part`,
    /// synced, renamed; a failed write leaves `PATH` as it was and no `PATH.PID.part`).
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        crate::format::write_whole(path, &self.to_bytes())
    }
}

/// Everything before the hash rows: flags, setup, link block, step count, start snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub flags: u16,
    pub setup: Setup,
    pub link: Option<Link>,
    /// The step count (at most [`MAX_STEPS`]).
    pub steps: u32,
    pub start: Option<World>,
}

/// The hash row at which a replay that starts at step `start` and runs `steps` steps holds
/// step `step`: `step - start` counted modulo 2^64 (the step after `u64::MAX` is 0, as the
/// world's step wraps), when that is at most `steps`; else `None`.
pub fn row_of(start: u64, steps: u64, step: u64) -> Option<u64> {
    let row = step.wrapping_sub(start);
    (row <= steps).then_some(row)
}

/// The flags word of a replay with (or without) hash rows, a start snapshot and a link block.
pub fn flags_for(hashes: bool, start_snapshot: bool, link: bool) -> u16 {
    ((hashes as u16) * FLAG_HASHES)
        | ((start_snapshot as u16) * FLAG_START_SNAPSHOT)
        | ((link as u16) * FLAG_LINK)
}

/// The world a replay starts from: its start snapshot's, else the setup's world at step 0.
pub fn start_world(setup: Setup, link: Option<Link>, start: Option<&World>) -> World {
    match start {
        Some(w) => w.clone(),
        None => World::new(setup, link),
    }
}

/// The longest header: magic, version, flags, setup length, setup, link, step count,
/// snapshot length and the largest snapshot.
pub const MAX_HEADER_BYTES: usize =
    4 + 2 + 2 + 4 + SETUP_BYTES + Link::LEN + 4 + 4 + MAX_SNAPSHOT_BYTES;

impl Header {
    /// Reads and checks everything up to the hash rows; `c` is left at the hash rows.
    pub fn read(input: &str, c: &mut Cursor<'_>) -> Result<Header, FormatError> {
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            return Err(c.error_at(
                c.offset() - 4,
                format!("expected magic \"OSTM\", found {magic:02x?}"),
            ));
        }
        let at = c.offset();
        let version = c.u16("version")?;
        if version != VERSION {
            return Err(c.error_at(at, format!("expected version 1, found {version}")));
        }
        let at = c.offset();
        let flags = c.u16("flags")?;
        if flags & !(FLAG_HASHES | FLAG_START_SNAPSHOT | FLAG_LINK) != 0 {
            return Err(c.error_at(
                at,
                format!("expected flag bits 3..15 to be 0, found flags 0x{flags:04x}"),
            ));
        }
        let has_link = flags & FLAG_LINK != 0;
        let at = c.offset();
        let setup_len = c.u32("setup length")?;
        let want = if has_link {
            SETUP_BYTES + Link::LEN
        } else {
            SETUP_BYTES
        } as u32;
        if setup_len != want {
            return Err(c.error_at(
                at,
                format!("expected setup length {want} (flags 0x{flags:04x}), found {setup_len}"),
            ));
        }
        let setup = Setup::read(c)?;
        let link = if has_link { Some(Link::read(c)?) } else { None };
        let at = c.offset();
        let count = c.u32("step count")?;
        if count > MAX_STEPS {
            return Err(c.error_at(
                at,
                format!("expected step count at most {MAX_STEPS}, found {count}"),
            ));
        }
        let start = if flags & FLAG_START_SNAPSHOT != 0 {
            let at = c.offset();
            let len = c.u32("start snapshot length")? as usize;
            // Check the length's shape before trusting it to take bytes: a snapshot is a
            // 12-byte header and 1..=64 bodies of 32 bytes.
            let min = SNAPSHOT_HEADER_BYTES + BODY_BYTES;
            if !(min..=MAX_SNAPSHOT_BYTES).contains(&len)
                || !(len - SNAPSHOT_HEADER_BYTES).is_multiple_of(BODY_BYTES)
            {
                return Err(c.error_at(
                    at,
                    format!("expected start snapshot length 12 + 32 x (1..=64) ({min}..={MAX_SNAPSHOT_BYTES}), found {len}"),
                ));
            }
            let base = c.offset();
            let snap = c.take(len, "start snapshot")?;
            Some(World::from_snapshot(setup, link, input, snap, base)?)
        } else {
            None
        };
        Ok(Header {
            flags,
            setup,
            link,
            steps: count,
            start,
        })
    }
}

/// Writes magic, version, flags, setup length, setup, link block and step count.
pub fn write_header(out: &mut Vec<u8>, setup: &Setup, link: Option<Link>, steps: u32, flags: u16) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    let setup_len = if link.is_some() {
        SETUP_BYTES + Link::LEN
    } else {
        SETUP_BYTES
    } as u32;
    out.extend_from_slice(&setup_len.to_le_bytes());
    out.extend_from_slice(&setup.to_bytes());
    if let Some(l) = link {
        out.extend_from_slice(&l.to_bytes());
    }
    out.extend_from_slice(&steps.to_le_bytes());
}

/// The outcome of running a replay against its hash rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every row matched (or there were none); the final world hash.
    Match { final_hash: u64, rows_checked: u64 },
    /// The first row that differs: its step number and both hashes.
    Mismatch {
        step: u64,
        row: usize,
        expected: u64,
        actual: u64,
    },
}

/// How often [`Replay::verify`] reports progress, in steps.
pub const PROGRESS_EVERY: usize = 4096;

impl Replay {
    /// The world at step `step` (the state hash row `step - start step` describes), run
    /// from the start world. `progress` is called with the number of steps done every
    /// [`PROGRESS_EVERY`] steps. Fails with a sentence when the replay does not hold that
    /// step.
    pub fn world_at(&self, step: u64, mut progress: impl FnMut(usize)) -> Result<World, String> {
        let (first, last) = (self.start_step(), self.end_step());
        let Some(row) = self.row_of(step) else {
            return Err(format!(
                "step {step} is outside the replay, which holds steps {first}..={last}"
            ));
        };
        let mut world = self.start_world();
        for i in 0..row {
            world.step(&self.inputs.ops(i));
            if i % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
                progress(i + 1);
            }
        }
        Ok(world)
    }

    /// Runs every step, comparing each hash row by step number: row `i` against the world
    /// hash at the start step + `i` (row 0 before any step runs). Stops at the first row
    /// that differs. `progress` is called with the number of steps done every
    /// [`PROGRESS_EVERY`] steps and once at the end.
    ///
    /// A replay read from a file holds exactly step count + 1 rows; rows missing from a
    /// replay built in code are not checked, and `rows_checked` counts the rows compared.
    pub fn verify(&self, progress: impl FnMut(usize)) -> Verdict {
        self.verify_from_row(self.start_world(), 0, progress)
    }

    /// Runs on from `world`, which must be the world at hash row `first` (its step is the
    /// start step + `first`), comparing every later row that exists by step number;
    /// `progress` is called with the number of rows past `first` done every
    /// [`PROGRESS_EVERY`] steps and at the end. Rows missing from a replay built in code
    /// are not checked.
    pub fn verify_from_row(
        &self,
        mut world: World,
        first: usize,
        mut progress: impl FnMut(usize),
    ) -> Verdict {
        let rows = self.hashes.as_deref().unwrap_or(&[]);
        let mut checked = 0u64;
        let mut ops = Vec::new();
        for row in first..=self.step_count() {
            if row > first {
                self.inputs.ops_into(row - 1, &mut ops);
                world.step(&ops);
                let done = row - first;
                if done.is_multiple_of(PROGRESS_EVERY) {
                    progress(done);
                }
            }
            if let Some(&expected) = rows.get(row) {
                let actual = world.hash();
                checked += 1;
                if expected != actual {
                    return Verdict::Mismatch {
                        step: world.step,
                        row,
                        expected,
                        actual,
                    };
                }
            }
        }
        progress(self.step_count().saturating_sub(first));
        Verdict::Match {
            final_hash: world.hash(),
            rows_checked: checked,
        }
    }
}
