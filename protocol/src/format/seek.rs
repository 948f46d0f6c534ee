//! The seek index: keyframes every K steps in a JSON-lines sidecar, so a step in the middle
//! of a long replay is reached by restoring the nearest keyframe and running on.
//!
//! ```text
//! {"kind":"ostm-seek-index","v":1,"every":K,"startStep":S,"steps":C,"entries":E,"replayBytes":N,"replayHead":"<hex>"}
//! {"row":0,"step":S,"inputOffset":O0,"hash":"<hex>","keyframe":{…molen/keyframe@1…}}
//! {"row":K,"step":S+K,"inputOffset":OK,"hash":"<hex>","keyframe":{…}}
//! ```
//!
//! `docs/seek-index.md` describes every field. Entries are in row order, so [`seek`] finds
//! the entry at or before a step by bisecting the file's bytes: a handful of line reads
//! whatever the replay's length.

use crate::error::FormatError;
use crate::format::keyframe::{self, DEFAULT_TICK_RATE};
use crate::format::replay_stream::{ReplayStream, ReplayTracer};
use crate::sim::op::Op;
use crate::sim::world::World;
use serde::Deserialize;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Keyframe spacing unless told otherwise.
pub const DEFAULT_EVERY: u32 = 4096;
/// The longest line an index may hold (a keyframe of 64 bodies is about 11 KiB).
pub const MAX_INDEX_LINE: usize = 64 * 1024;
/// How many leading bytes of the replay `replayHead` hashes.
pub const HEAD_BYTES: usize = 4096;
/// The header's `kind`.
pub const KIND: &str = "ostm-seek-index";

/// The sidecar's default path: the replay's path with `.seek` appended.
pub fn default_index_path(replay: &Path) -> PathBuf {
    let mut s = replay.as_os_str().to_owned();
    s.push(".seek");
    PathBuf::from(s)
}

/// The header line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexHeader {
    pub kind: String,
    pub v: u32,
    pub every: u32,
    #[serde(rename = "startStep")]
    pub start_step: u64,
    pub steps: u32,
    pub entries: u32,
    #[serde(rename = "replayBytes")]
    pub replay_bytes: u64,
    #[serde(rename = "replayHead")]
    pub replay_head: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    row: u32,
    step: u64,
    #[serde(rename = "inputOffset")]
    input_offset: u64,
    hash: String,
    keyframe: serde_json::Value,
}

/// XXH3-64 of the replay's first [`HEAD_BYTES`] bytes, as 16 hex digits.
fn replay_head(path: &Path) -> Result<(u64, String), FormatError> {
    let name = path.display().to_string();
    let mut f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
    let len = f.metadata().map_err(|e| FormatError::io(&name, &e))?.len();
    let mut head = Vec::with_capacity(HEAD_BYTES);
    (&mut f)
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| FormatError::io(&name, &e))?;
    Ok((len, format!("{:016x}", crate::sim::world::xxh3_64(&head))))
}

/// Why an index could not be written.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The replay is malformed.
    #[error("{0}")]
    Input(#[from] FormatError),
    /// The index could not be written.
    #[error("cannot write the index: {0}")]
    Write(#[from] io::Error),
    /// A world could not be exported as a keyframe.
    #[error("{0}")]
    Export(#[from] keyframe::ExportError),
    /// K was 0.
    #[error("the keyframe spacing must be at least 1")]
    Every,
}

/// Writes the index of `replay` to `index` (through `INDEX.part`, synced, renamed when
/// whole, and the directory synced): a keyframe at rows 0, K, 2K, … up to the last step.
/// `progress` gets the rows done. Returns the header written.
pub fn write_index(
    replay: &Path,
    index: &Path,
    every: u32,
    mut progress: impl FnMut(u64),
) -> Result<IndexHeader, IndexError> {
    if every == 0 {
        return Err(IndexError::Every);
    }
    let (replay_bytes, replay_head) = replay_head(replay)?;
    let stream = ReplayStream::open(replay)?;
    let steps = stream.header().steps;
    let header = IndexHeader {
        kind: KIND.into(),
        v: 1,
        every,
        start_step: stream.start_world().step,
        steps,
        entries: steps / every + 1,
        replay_bytes,
        replay_head,
    };
    let mut tmp = index.as_os_str().to_owned();
    tmp.push(".part");
    let tmp = PathBuf::from(tmp);
    // A replay that turns out malformed part way leaves no half-written index behind.
    let written = write_entries(&tmp, &header, stream, every, &mut progress).and_then(|()| {
        std::fs::rename(&tmp, index)
            .and_then(|()| crate::format::sync_dir(index))
            .map_err(IndexError::from)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| header)
}

/// Writes the index header and every entry to `tmp`, synced.
fn write_entries(
    tmp: &Path,
    header: &IndexHeader,
    stream: ReplayStream<File>,
    every: u32,
    progress: &mut impl FnMut(u64),
) -> Result<(), IndexError> {
    let mut out = BufWriter::new(File::create(tmp)?);
    serde_json::to_writer(&mut out, header).map_err(io::Error::from)?;
    out.write_all(b"\n")?;
    for_each_keyframe(stream, every, progress, |row, world, offset| {
        let kf = keyframe::to_json_line(&world, DEFAULT_TICK_RATE)?;
        let (step, hash) = (world.step, world.hash());
        writeln!(out, "{{\"row\":{row},\"step\":{step},\"inputOffset\":{offset},\"hash\":\"{hash:016x}\",\"keyframe\":{kf}}}")?;
        Ok(())
    })?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

/// Runs the replay once from its start, calling `entry` with the row, the world and the
/// offset of the next step's input at rows 0, K, 2K, … (the entries of the index);
/// `progress` gets the rows done every 65 536 rows.
fn for_each_keyframe(
    stream: ReplayStream<File>,
    every: u32,
    progress: &mut impl FnMut(u64),
    mut entry: impl FnMut(u64, World, u64) -> Result<(), IndexError>,
) -> Result<(), IndexError> {
    let mut t = ReplayTracer::new(stream);
    let mut row = 0u64;
    while let Some(world) = t.next_world()? {
        if row.is_multiple_of(every as u64) {
            let world = world.clone();
            // The offset of the input of the step that follows this world.
            let offset = t.stream().offset();
            entry(row, world, offset)?;
        }
        row += 1;
        if row.is_multiple_of(65536) {
            progress(row);
        }
    }
    Ok(())
}

/// What [`seek`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeked {
    /// The world at the step asked for.
    pub world: World,
    /// The step of the keyframe it started from.
    pub keyframe_step: u64,
    /// Steps run after restoring the keyframe.
    pub steps_run: u64,
    /// The replay's hash row at the step, when the replay has rows.
    pub recorded_hash: Option<u64>,
}

/// Restores the index's keyframe at or before `step` and runs the replay on to `step`.
pub fn seek(replay: &Path, index: &Path, step: u64) -> Result<Seeked, FormatError> {
    let mut stream = ReplayStream::open(replay)?;
    seek_stream(replay, &mut stream, index, step)
}

/// [`seek`] on a stream already open on `replay`, left just after `step` (its next
/// [`ReplayStream::next_ops`] reads the step that follows), so a caller can play on.
pub fn seek_stream(
    replay: &Path,
    stream: &mut ReplayStream<File>,
    index: &Path,
    step: u64,
) -> Result<Seeked, FormatError> {
    let iname = index.display().to_string();
    let mut f = BufReader::with_capacity(
        16 * 1024,
        File::open(index).map_err(|e| FormatError::io(&iname, &e))?,
    );
    let len = f
        .get_ref()
        .metadata()
        .map_err(|e| FormatError::io(&iname, &e))?
        .len();
    let mut line = Vec::with_capacity(16 * 1024);
    let first = read_line(&mut f, &iname, 0, &mut line)?;
    let header: IndexHeader = serde_json::from_slice(&line).map_err(|e| {
        FormatError::new(&iname, 0, format!("line 1: expected the index header: {e}"))
    })?;
    if header.kind != KIND || header.v != 1 || header.every == 0 {
        return Err(FormatError::new(
            &iname,
            0,
            format!("line 1: expected kind \"{KIND}\", v 1 and every >= 1"),
        ));
    }
    let (rbytes, rhead) = replay_head(replay)?;
    if rbytes != header.replay_bytes || rhead != header.replay_head {
        return Err(FormatError::new(
            &iname,
            0,
            format!("line 1: expected an index of {} ({rbytes} bytes, head {rhead}), found one made for {} bytes, head {}", replay.display(), header.replay_bytes, header.replay_head),
        ));
    }
    // The header's start step and step count place every entry: they must be the
    // replay's own (an edited header would otherwise run past the replay's end).
    let (start, steps) = (stream.start_world().step, stream.header().steps);
    if (header.start_step, header.steps) != (start, steps) {
        return Err(FormatError::new(
            &iname,
            0,
            format!(
                "line 1: expected startStep {start} and steps {steps} (the replay's), found startStep {} and steps {}",
                header.start_step, header.steps
            ),
        ));
    }
    check_step(&iname, start, steps, step)?;
    check_complete(&mut f, &iname, first, len, &header)?;
    let target = ((step - header.start_step) / header.every as u64 * header.every as u64) as u32;

    // Bisect over byte offsets: `lo` is always the start of a line whose row is <= target.
    let mut lo = first;
    let mut hi = len;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match line_after(&mut f, &iname, mid, &mut line)? {
            Some(start) if start < hi => {
                let row = entry_row(&line)
                    .ok_or_else(|| FormatError::new(&iname, start, "expected an index entry"))?;
                if row <= target {
                    lo = start;
                } else {
                    hi = mid;
                }
            }
            _ => hi = mid,
        }
    }
    f.seek(SeekFrom::Start(lo))
        .map_err(|e| FormatError::io(&iname, &e))?;
    read_line(&mut f, &iname, lo, &mut line)?;
    let entry: Entry = serde_json::from_slice(&line)
        .map_err(|e| FormatError::new(&iname, lo, format!("expected an index entry: {e}")))?;
    if entry.row != target {
        return Err(FormatError::new(
            &iname,
            lo,
            format!(
                "expected the entry for row {target}, found row {}",
                entry.row
            ),
        ));
    }
    let kf = keyframe::parse_value(&format!("{iname} (entry at offset {lo})"), &entry.keyframe)?;
    let h = stream.header();
    let world = kf.world;
    let want_hash = format!("{:016x}", world.hash());
    if world.setup() != h.setup
        || world.link() != h.link
        || world.step != entry.step
        || entry.step != start.wrapping_add(target as u64)
        || entry.hash != want_hash
    {
        return Err(FormatError::new(&iname, lo, format!("expected the keyframe of row {target} of this replay (hash {}), found one that differs", entry.hash)));
    }
    if let Some(row_hash) = stream.hash_row(target)? {
        if format!("{row_hash:016x}") != want_hash {
            return Err(FormatError::new(&iname, lo, format!("expected the keyframe of row {target} to have the replay's hash {row_hash:016x}, found {want_hash}")));
        }
    }
    stream.seek_to(target, entry.input_offset)?;
    run_on(stream, world, (step - start) as u32)
}

/// Refuses an index that does not end with its last entry, the one for row
/// `floor(steps / every) · every`: an index cut short (a copy interrupted, a disk that lost
/// its end) is refused whatever step is asked for, not only a step whose entry is gone.
/// `first` is the offset after the header line; the last line is read from the end.
fn check_complete(
    f: &mut BufReader<File>,
    name: &str,
    first: u64,
    len: u64,
    header: &IndexHeader,
) -> Result<(), FormatError> {
    let (steps, every) = (header.steps, header.every);
    let last_row = steps / every * every;
    let from = len.saturating_sub(MAX_INDEX_LINE as u64 + 1).max(first);
    f.seek(SeekFrom::Start(from))
        .map_err(|e| FormatError::io(name, &e))?;
    let mut tail = Vec::with_capacity((len - from) as usize);
    f.take(len - from)
        .read_to_end(&mut tail)
        .map_err(|e| FormatError::new(name, from, format!("cannot read: {e}")))?;
    let line_start = |bytes: &[u8]| {
        bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(from, |i| from + i as u64 + 1)
    };
    let cut = |at: u64, found: String| {
        FormatError::new(
            name,
            at,
            format!("expected the index to end with the entry for row {last_row} (steps {steps}, every {every}), found {found}: the index is cut short; write it again with `ostm-viewer index`"),
        )
    };
    let Some((b'\n', body)) = tail.split_last() else {
        let start = line_start(&tail);
        return Err(cut(
            start,
            if tail.is_empty() {
                "nothing after the header".into()
            } else {
                format!("a last line of {} bytes without its newline", len - start)
            },
        ));
    };
    let start = line_start(body);
    match entry_row(&tail[(start - from) as usize..]) {
        Some(row) if row == last_row => Ok(()),
        Some(row) => Err(cut(start, format!("the entry for row {row} last"))),
        None => Err(cut(start, "a last line that is not an entry".into())),
    }
}

/// Refuses a step outside the replay's `start..=start + steps` (`name` leads the error).
fn check_step(name: &str, start: u64, steps: u32, step: u64) -> Result<(), FormatError> {
    if step < start || step - start > steps as u64 {
        let end = start.wrapping_add(steps as u64);
        return Err(FormatError::new(
            name,
            0,
            format!("expected a step in {start}..={end}, found {step}"),
        ));
    }
    Ok(())
}

/// Runs `stream`, positioned at the row of the keyframe `world`, on to row `row`, and reads
/// that row's hash.
fn run_on(
    stream: &mut ReplayStream<File>,
    mut world: World,
    row: u32,
) -> Result<Seeked, FormatError> {
    let keyframe_step = world.step;
    let from = stream.next_index();
    let mut ops: Vec<Op> = Vec::new();
    for _ in from..row {
        if !stream.next_ops(&mut ops)? {
            break;
        }
        world.step(&ops);
    }
    let recorded_hash = stream.hash_row(row)?;
    Ok(Seeked {
        world,
        keyframe_step,
        steps_run: row.saturating_sub(from) as u64,
        recorded_hash,
    })
}

/// A seek index held in memory, for a replay that has none beside it: the same entries
/// ([`write_index`]'s rows 0, K, 2K, …: the world and the offset of the next step's input)
/// made in one pass over the replay, never written anywhere.
#[derive(Debug, Clone)]
pub struct MemoryIndex {
    every: u32,
    start_step: u64,
    steps: u32,
    /// The world at row `i · every` and the offset of the input that follows it.
    entries: Vec<(World, u64)>,
}

impl MemoryIndex {
    /// Runs `replay` once and keeps a keyframe every `every` rows; `progress` gets the
    /// rows done (every 65 536).
    pub fn build(
        replay: &Path,
        every: u32,
        mut progress: impl FnMut(u64),
    ) -> Result<MemoryIndex, IndexError> {
        if every == 0 {
            return Err(IndexError::Every);
        }
        let stream = ReplayStream::open(replay)?;
        let (start_step, steps) = (stream.start_world().step, stream.header().steps);
        let mut entries = Vec::with_capacity((steps / every) as usize + 1);
        for_each_keyframe(stream, every, &mut progress, |_, world, offset| {
            entries.push((world, offset));
            Ok(())
        })?;
        Ok(MemoryIndex {
            every,
            start_step,
            steps,
            entries,
        })
    }

    /// The rows between keyframes.
    pub fn every(&self) -> u32 {
        self.every
    }

    /// [`seek_stream`] from the keyframes held: `stream` must be open on the replay the
    /// index was built from; it is left just after `step`.
    pub fn seek(&self, stream: &mut ReplayStream<File>, step: u64) -> Result<Seeked, FormatError> {
        let name = stream.input().to_string();
        check_step(&name, self.start_step, self.steps, step)?;
        let row = (step - self.start_step) as u32;
        let k = (row / self.every) as usize;
        let (world, offset) = self.entries.get(k).ok_or_else(|| {
            FormatError::new(&name, 0, format!("expected a keyframe for row {row}"))
        })?;
        stream.seek_to(k as u32 * self.every, *offset)?;
        run_on(stream, world.clone(), row)
    }
}

/// Runs a replay from its start up to `step` (the baseline [`seek`] is measured against).
pub fn run_to(replay: &Path, step: u64) -> Result<World, FormatError> {
    let mut t = ReplayTracer::new(ReplayStream::open(replay)?);
    let name = replay.display().to_string();
    while let Some(w) = t.next_world()? {
        if w.step == step {
            return Ok(w.clone());
        }
    }
    Err(FormatError::new(
        name,
        0,
        format!("expected the replay to reach step {step}"),
    ))
}

/// The `row` of an entry line, read from its first field.
fn entry_row(line: &[u8]) -> Option<u32> {
    let rest = line.strip_prefix(b"{\"row\":")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Reads the line starting at `at` (the reader must be there) without its newline;
/// returns the offset after it.
fn read_line(
    f: &mut BufReader<File>,
    name: &str,
    at: u64,
    line: &mut Vec<u8>,
) -> Result<u64, FormatError> {
    line.clear();
    let n = f
        .take(MAX_INDEX_LINE as u64)
        .read_until(b'\n', line)
        .map_err(|e| FormatError::new(name, at, format!("cannot read: {e}")))?;
    if line.last() != Some(&b'\n') {
        return Err(FormatError::new(
            name,
            at,
            format!("expected a line of at most {MAX_INDEX_LINE} bytes ending in a newline, found {n} bytes (cut short or too long)"),
        ));
    }
    line.pop();
    Ok(at + n as u64)
}

/// Reads the first whole line starting after byte `mid - 1`'s line ends; `None` at the end.
fn line_after(
    f: &mut BufReader<File>,
    name: &str,
    mid: u64,
    line: &mut Vec<u8>,
) -> Result<Option<u64>, FormatError> {
    f.seek(SeekFrom::Start(mid - 1))
        .map_err(|e| FormatError::io(name, &e))?;
    line.clear();
    let skipped = f
        .take(MAX_INDEX_LINE as u64)
        .read_until(b'\n', line)
        .map_err(|e| FormatError::new(name, mid, format!("cannot read: {e}")))?;
    if line.last() != Some(&b'\n') {
        return Ok(None);
    }
    let start = mid - 1 + skipped as u64;
    let mut probe = [0u8; 1];
    if f.read(&mut probe).map_err(|e| FormatError::io(name, &e))? == 0 {
        return Ok(None);
    }
    f.seek_relative(-1).map_err(|e| FormatError::io(name, &e))?;
    read_line(f, name, start, line)?;
    Ok(Some(start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ostm::Replay;
    use crate::sim::rng::Sfc32;
    use crate::sim::world::{Dims, Setup};

    fn replay(steps: usize) -> Replay {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Three,
                bodies: 6,
                seed: 77,
            },
            None,
        );
        let mut rng = Sfc32::from_seed(1);
        for _ in 0..steps {
            let ops = match rng.next_u32() % 16 {
                0 => vec![Op::Impulse {
                    body: (rng.next_u32() % 8) as u8,
                    d: [rng.range(-90, 90), rng.range(0, 120), 5],
                }],
                1 => vec![Op::Spawn {
                    pos: [rng.range(0, 10_000), 9000, 100],
                }],
                2 => vec![Op::Remove {
                    body: (rng.next_u32() % 8) as u8,
                }],
                3 => vec![Op::Gravity { g: rng.range(1, 6) }],
                _ => vec![],
            };
            r.inputs.push_ops(&ops);
        }
        r.compute_hashes();
        r
    }

    #[test]
    fn seek_agrees_with_a_full_replay_at_many_random_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ostm");
        let r = replay(3000);
        r.write_file(&path).unwrap();
        let index = default_index_path(&path);
        let h = write_index(&path, &index, 97, |_| {}).unwrap();
        assert_eq!(h.entries, 3000 / 97 + 1);
        // Every world of the replay, by stepping it in memory.
        let mut worlds = vec![r.start_world()];
        for i in 0..r.step_count() {
            let mut w = worlds[i].clone();
            w.step(&r.inputs.ops(i));
            worlds.push(w);
        }
        let mut rng = Sfc32::from_seed(2024);
        let mut steps: Vec<u64> = (0..200).map(|_| (rng.next_u32() % 3001) as u64).collect();
        steps.extend([0, 96, 97, 98, 2909, 2910, 3000]);
        for step in steps {
            let s = seek(&path, &index, step).unwrap();
            assert_eq!(s.world, worlds[step as usize], "step {step}");
            assert_eq!(s.keyframe_step, step / 97 * 97);
            assert_eq!(s.recorded_hash, Some(s.world.hash()));
        }
        assert!(seek(&path, &index, 3001).is_err());
    }

    #[test]
    fn the_memory_index_reaches_every_world_the_file_index_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ostm");
        let r = replay(2000);
        r.write_file(&path).unwrap();
        let index = default_index_path(&path);
        write_index(&path, &index, 64, |_| {}).unwrap();
        let mut mem = MemoryIndex::build(&path, 64, |_| {}).unwrap();
        assert_eq!((mem.every(), mem.entries.len()), (64, 2000 / 64 + 1));
        let mut stream = ReplayStream::open(&path).unwrap();
        let mut rng = Sfc32::from_seed(99);
        let mut steps: Vec<u64> = (0..150).map(|_| (rng.next_u32() % 2001) as u64).collect();
        steps.extend([0, 63, 64, 65, 1983, 1984, 2000]);
        for &step in &steps {
            let from_file = seek(&path, &index, step).unwrap();
            let s = mem.seek(&mut stream, step).unwrap();
            assert_eq!(s, from_file, "step {step}");
            // The stream is left just after the step: the next input is step + 1's.
            let mut ops = Vec::new();
            let more = stream.next_ops(&mut ops).unwrap();
            assert_eq!(more, step < 2000, "step {step}");
            if more {
                let mut next = s.world.clone();
                next.step(&ops);
                assert_eq!(
                    next.hash(),
                    r.hashes.as_ref().unwrap()[step as usize + 1],
                    "step {step}"
                );
            }
        }
        let e = mem.seek(&mut stream, 2001).unwrap_err();
        assert!(e.message.contains("expected a step in 0..=2000"), "{e}");
        // A keyframe moved by one millimetre gives worlds the replay's rows do not hold.
        let live = mem.entries[5]
            .0
            .bodies
            .iter()
            .position(|b| b.alive)
            .unwrap();
        mem.entries[5].0.bodies[live].pos[0] += 1;
        let s = mem.seek(&mut stream, 5 * 64 + 10).unwrap();
        assert_ne!(s.recorded_hash, Some(s.world.hash()));
    }

    #[test]
    fn a_replay_cut_short_leaves_no_index_and_no_part_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ostm");
        let mut bytes = replay(300).to_bytes();
        bytes.truncate(bytes.len() - 1);
        std::fs::write(&path, bytes).unwrap();
        let index = default_index_path(&path);
        let err = write_index(&path, &index, 50, |_| {}).unwrap_err();
        assert!(matches!(err, IndexError::Input(_)), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from("r.ostm")]);
    }

    #[test]
    fn a_planted_change_in_an_entry_or_the_replay_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ostm");
        replay(500).write_file(&path).unwrap();
        let index = default_index_path(&path);
        write_index(&path, &index, 50, |_| {}).unwrap();
        assert!(seek(&path, &index, 260).is_ok());
        let text = std::fs::read_to_string(&index).unwrap();
        // A keyframe whose body moved by one millimetre no longer has the entry's hash.
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut v: serde_json::Value = serde_json::from_str(&lines[6]).unwrap();
        let n = v["keyframe"]["nextEntitySeq"].as_u64().unwrap();
        let live = (0..n)
            .map(|i| format!("b{i}"))
            .find(|b| v["keyframe"]["entities"][b]["body"]["alive"] == true)
            .unwrap();
        let pos = &mut v["keyframe"]["entities"][&live]["body"]["pos"][0];
        *pos = (pos.as_i64().unwrap() + 1).into();
        lines[6] = format!(
            "{{\"row\":{},\"step\":{},\"inputOffset\":{},\"hash\":{},\"keyframe\":{}}}",
            v["row"], v["step"], v["inputOffset"], v["hash"], v["keyframe"]
        );
        std::fs::write(&index, lines.join("\n") + "\n").unwrap();
        let e = seek(&path, &index, 260).unwrap_err();
        assert!(e.message.contains("row 250"), "{e}");
        // An index made for another replay is refused by its header.
        write_index(&path, &index, 50, |_| {}).unwrap();
        replay(501).write_file(&path).unwrap();
        let e = seek(&path, &index, 260).unwrap_err();
        assert!(e.message.contains("expected an index of"), "{e}");
    }

    #[test]
    fn a_header_whose_steps_or_start_are_not_the_replays_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ostm");
        replay(100).write_file(&path).unwrap();
        let index = default_index_path(&path);
        // One entry (row 0): any step of the replay is reached from it.
        write_index(&path, &index, 1000, |_| {}).unwrap();
        assert_eq!(seek(&path, &index, 100).unwrap().world.step, 100);
        let text = std::fs::read_to_string(&index).unwrap();
        for (from, to) in [
            ("\"steps\":100,", "\"steps\":200,"),
            ("\"startStep\":0,", "\"startStep\":7,"),
        ] {
            let edited = text.replacen(from, to, 1);
            assert_ne!(edited, text, "{from}");
            std::fs::write(&index, edited).unwrap();
            // Without the check, step 150 "ran" 150 steps and stopped at the replay's end.
            let e = seek(&path, &index, 150).unwrap_err();
            assert!(e.message.contains("the replay's"), "{e}");
        }
    }
}
