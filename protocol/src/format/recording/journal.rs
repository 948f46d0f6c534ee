//! The in-progress recording file (`FILE.part`) and its assembly into a `.ostm` replay.
//!
//! Layout (docs/replay-format.md, "The in-progress file"), little endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `OSTMPAR2` |
//! | 8 | `h` | the finished file's header exactly as `.ostm` lays it out, with step count 0: magic `OSTM` … step count, start snapshot length and start snapshot when flag bit 1 is set |
//! | 8 + `h` | 8 | hash row 0: the start world's hash |
//! | 16 + `h` | 8 | the header check: XXH3-64 (seed 0) of the `16 + h` bytes before it |
//! | then | … | one record per step: u16 input length `n`, `n` input bytes, u64 hash row, u32 record check (the low 32 bits of XXH3-64, seeded with the header check, of the record's `2 + n + 8` bytes before it) |
//!
//! A record is whole when all `2 + n + 12` of its bytes are there and its check holds.
//! [`assemble`] keeps the longest prefix of whole records whose inputs decode (and, when
//! asked, whose rows the replay reproduces), and says what it did not keep and why: a
//! torn tail (what a killed writer leaves), damage followed by whole records
//! (corruption: not a torn tail), or a whole record it cannot keep.

use super::ostm_header;
use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::format::ostm::{start_world, Header, FLAG_HASHES, MAX_HEADER_BYTES, MAX_STEPS};
use crate::sim::op::for_each_op;
use crate::sim::world::{xxh3_64, World};
use crate::Op;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The in-progress file's magic.
pub const JOURNAL_MAGIC: &[u8; 8] = b"OSTMPAR2";
/// The magic of the in-progress files of earlier versions (no header or record checks),
/// which this version does not read.
pub const OLD_JOURNAL_MAGIC: &[u8; 8] = b"OSTMPART";
/// Bytes of a record besides its input: the u16 length, the u64 row, the u32 check.
pub const RECORD_OVERHEAD: usize = 2 + 8 + 4;
/// The largest record: a 65 535-byte input.
pub const MAX_RECORD: usize = RECORD_OVERHEAD + u16::MAX as usize;

/// The in-progress file of a recording into `path`: `path` with `.part` appended.
pub fn journal_path(path: &Path) -> PathBuf {
    suffixed(path, ".part")
}

/// Where a recording's `FILE.part` is written until it holds its header: `FILE.part.new`.
pub fn fresh_path(path: &Path) -> PathBuf {
    suffixed(path, ".part.new")
}

/// Where the replay `out` is assembled before it is renamed over `out`: `out.part.tmp`.
pub fn assembly_path(out: &Path) -> PathBuf {
    suffixed(out, ".part.tmp")
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The header check: XXH3-64 (seed 0) of the magic, the header and row 0.
pub fn header_check(head: &[u8]) -> u64 {
    xxh3_64(head)
}

/// A record's check: the low 32 bits of XXH3-64 seeded with the header check, of the
/// record's length, input and row.
pub fn record_check(header_check: u64, record: &[u8]) -> u32 {
    twox_hash::XxHash3_64::oneshot_with_seed(header_check, record) as u32
}

/// Magic, the `.ostm` header, row 0 and the header check of a recording of `world`
/// starting now; and the header check.
pub(super) fn header_bytes(world: &World, with_start_snapshot: bool) -> (Vec<u8>, u64) {
    let mut out = JOURNAL_MAGIC.to_vec();
    out.extend_from_slice(&ostm_header(world, with_start_snapshot));
    out.extend_from_slice(&world.hash().to_le_bytes());
    let check = header_check(&out);
    out.extend_from_slice(&check.to_le_bytes());
    (out, check)
}

/// What the first record not kept shows about the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropKind {
    /// The file ends inside it, or it is damaged and no whole record follows: what a
    /// writer killed while appending (or a lost write at the end) leaves.
    TornTail,
    /// It is damaged (cut short or its check does not hold) and a whole record follows
    /// at `resumes_at`: damage in the middle, not a torn tail.
    Corruption { resumes_at: u64 },
    /// It is whole, but the replay does not reproduce its hash row.
    NotReproduced,
    /// It is whole, but its input does not decode or it would be the 16 777 217th step.
    Refused,
}

impl DropKind {
    /// The kind's name in JSON: `torn_tail`, `corruption`, `not_reproduced`, `refused`.
    pub fn name(self) -> &'static str {
        match self {
            DropKind::TornTail => "torn_tail",
            DropKind::Corruption { .. } => "corruption",
            DropKind::NotReproduced => "not_reproduced",
            DropKind::Refused => "refused",
        }
    }
}

/// What was left out of an assembled replay: everything from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Offset in the in-progress file of the first byte not kept (a record's first byte).
    pub offset: u64,
    /// Bytes from there to the end of the file.
    pub bytes: u64,
    /// Why the record there was not kept.
    pub why: String,
    /// What that says about the file.
    pub kind: DropKind,
}

/// A replay assembled from an in-progress file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembled {
    /// The replay written.
    pub path: PathBuf,
    pub start_step: u64,
    /// Whole steps kept.
    pub steps: u32,
    /// What was not kept, if anything.
    pub dropped: Option<Dropped>,
}

impl Assembled {
    /// The step the replay's last world is at.
    pub fn end_step(&self) -> u64 {
        self.start_step.wrapping_add(u64::from(self.steps))
    }

    /// Whether everything not kept is a torn tail (or nothing was dropped): the
    /// in-progress file holds nothing more.
    pub fn whole(&self) -> bool {
        self.dropped
            .as_ref()
            .is_none_or(|d| d.kind == DropKind::TornTail)
    }
}

/// Why an assembly failed.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The in-progress file holds no replay: its header, row 0 or header check is cut
    /// short, malformed or does not hold.
    #[error(transparent)]
    Input(FormatError),
    /// The replay could not be written (nothing of it is left: `out.part.tmp` is removed).
    #[error("cannot write {}: {err}{}", .path.display(), why_io(.err))]
    Output { path: PathBuf, err: io::Error },
}

/// What a write error usually means, for a person: ` (the disk is full)`, ` (a file-size
/// limit is reached: ulimit -f)`, ` (the file system is read-only)`, or nothing.
pub fn why_io(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => " (the disk is full)",
        io::ErrorKind::FileTooLarge => " (a file-size limit is reached: ulimit -f)",
        io::ErrorKind::ReadOnlyFilesystem => " (the file system is read-only)",
        io::ErrorKind::PermissionDenied => " (no permission to write there)",
        _ => "",
    }
}

/// The header part of an in-progress file: where the records start, and the start world.
struct Head {
    /// The `.ostm` header bytes (magic `OSTM` … start snapshot).
    ostm: Vec<u8>,
    /// Offset of the step count within `ostm`.
    count_at: usize,
    start: World,
    row0: u64,
    /// The header check (the seed of the records' checks).
    check: u64,
    /// Offset of the first record in the in-progress file.
    records_at: u64,
}

fn read_head(name: &str, file: &mut File) -> Result<Head, FormatError> {
    let mut buf = Vec::new();
    let want = (JOURNAL_MAGIC.len() + MAX_HEADER_BYTES + 16) as u64;
    Read::by_ref(file)
        .take(want)
        .read_to_end(&mut buf)
        .map_err(|e| FormatError::io(name, &e))?;
    let mut c = Cursor::new(name, &buf, 0);
    let magic = c.take(JOURNAL_MAGIC.len(), "magic")?;
    if magic == OLD_JOURNAL_MAGIC {
        return Err(c.error_at(
            0,
            "expected magic \"OSTMPAR2\", found \"OSTMPART\": an in-progress recording of an earlier version, without checks; recover it with the ostm-viewer that wrote it",
        ));
    }
    if magic != JOURNAL_MAGIC {
        return Err(c.error_at(
            0,
            format!("expected magic \"OSTMPAR2\" (an in-progress recording), found {magic:02x?}"),
        ));
    }
    let at = JOURNAL_MAGIC.len();
    let mut c = Cursor::new(name, &buf[at..], at as u64);
    let header = Header::read(name, &mut c)?;
    // The recorder always writes hash rows (one per record): a header without flag bit 0
    // would assemble into a replay whose rows are read as step inputs.
    if header.flags & FLAG_HASHES == 0 {
        return Err(c.error_at(
            (at + 6) as u64,
            format!(
                "expected flag bit 0 (hash rows) set in an in-progress recording, found flags 0x{:04x}",
                header.flags
            ),
        ));
    }
    let count_at = if header.link.is_some() { 22 } else { 18 };
    if header.steps != 0 {
        return Err(c.error_at(
            (at + count_at) as u64,
            format!(
                "expected step count 0 in an in-progress recording, found {}",
                header.steps
            ),
        ));
    }
    let ostm_len = (c.offset() as usize) - at;
    let row0 = c.u64("hash row 0")?;
    let check_at = c.offset();
    let stored = c.u64("header check")?;
    let computed = header_check(&buf[..check_at as usize]);
    if stored != computed {
        return Err(c.error_at(
            check_at,
            format!(
                "the header check is {stored:016x}, the bytes before it give {computed:016x}: the header or row 0 is damaged"
            ),
        ));
    }
    let start = start_world(header.setup, header.link, header.start.as_ref());
    Ok(Head {
        ostm: buf[at..at + ostm_len].to_vec(),
        count_at,
        start,
        row0,
        check: stored,
        records_at: check_at + 8,
    })
}

/// Reads records one at a time from an in-progress file.
struct Records {
    r: BufReader<File>,
    offset: u64,
    check: u64,
    /// The last record's bytes (length, input, row).
    record: Vec<u8>,
}

/// One whole record, or why the next one is not.
enum Next {
    Record {
        at: u64,
        hash: u64,
    },
    End,
    /// Cut short (`whole` false) or its check does not hold.
    Bad {
        at: u64,
        why: String,
    },
}

impl Records {
    fn open(path: &Path, at: u64, check: u64) -> io::Result<Records> {
        let mut f = File::open(path)?;
        f.seek(SeekFrom::Start(at))?;
        Ok(Records {
            r: BufReader::with_capacity(256 * 1024, f),
            offset: at,
            check,
            record: Vec::new(),
        })
    }

    /// The last record's input.
    fn input(&self) -> &[u8] {
        &self.record[2..self.record.len() - 8]
    }

    /// Reads up to `buf.len()` bytes; returns how many it got.
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    fn next(&mut self, step: u64) -> io::Result<Next> {
        let at = self.offset;
        let torn = |what: String| {
            Ok(Next::Bad {
                at,
                why: format!("a torn last record: {what}"),
            })
        };
        let mut len = [0u8; 2];
        match self.fill(&mut len)? {
            0 => return Ok(Next::End),
            2 => {}
            n => {
                return torn(format!(
                    "expected 2-byte input length of step {step}, found {n} bytes"
                ))
            }
        }
        let n = u16::from_le_bytes(len) as usize;
        self.record.clear();
        self.record.extend_from_slice(&len);
        self.record.resize(2 + n + 8, 0);
        let mut body = std::mem::take(&mut self.record);
        let got = self.fill(&mut body[2..]);
        self.record = body;
        let got = got?;
        if got < n {
            return torn(format!(
                "expected {n}-byte input of step {step}, found {got} bytes"
            ));
        }
        if got < n + 8 {
            return torn(format!(
                "expected 8-byte hash row of step {step}, found {} bytes",
                got - n
            ));
        }
        let mut stored = [0u8; 4];
        let got = self.fill(&mut stored)?;
        if got < 4 {
            return torn(format!(
                "expected 4-byte record check of step {step}, found {got} bytes"
            ));
        }
        let stored = u32::from_le_bytes(stored);
        let computed = record_check(self.check, &self.record);
        if stored != computed {
            return Ok(Next::Bad {
                at,
                why: format!(
                    "the check of the record of step {step} is {stored:08x}, its bytes give {computed:08x}"
                ),
            });
        }
        self.offset += (n + RECORD_OVERHEAD) as u64;
        let mut row = [0u8; 8];
        row.copy_from_slice(&self.record[2 + n..]);
        Ok(Next::Record {
            at,
            hash: u64::from_le_bytes(row),
        })
    }
}

/// The offset of the first whole record (all its bytes there, its check holds, its input
/// decodes) that starts after `from` in the in-progress file `path` of `total` bytes.
fn whole_record_after(
    name: &str,
    path: &Path,
    from: u64,
    total: u64,
    check: u64,
) -> io::Result<Option<u64>> {
    let mut f = File::open(path)?;
    let mut base = from + 1;
    let mut buf = Vec::new();
    while base + RECORD_OVERHEAD as u64 <= total {
        let want = (total - base).min(2 * MAX_RECORD as u64) as usize;
        buf.resize(want, 0);
        f.seek(SeekFrom::Start(base))?;
        f.read_exact(&mut buf)?;
        let at_end = base + want as u64 == total;
        // Candidates whose largest possible record lies inside the window, or every one
        // when the window reaches the end of the file.
        let last = if at_end { want } else { want - MAX_RECORD };
        for i in 0..last {
            let Some(&[a, b]) = buf.get(i..i + 2) else {
                break;
            };
            let n = u16::from_le_bytes([a, b]) as usize;
            let Some(stored) = buf.get(i + 2 + n + 8..i + n + RECORD_OVERHEAD) else {
                continue;
            };
            let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
            let record = &buf[i..i + 2 + n + 8];
            if record_check(check, record) == stored
                && for_each_op(name, &record[2..2 + n], 0, |_| {}).is_ok()
            {
                return Ok(Some(base + i as u64));
            }
        }
        if at_end {
            break;
        }
        base += last as u64;
    }
    Ok(None)
}

/// Removes a half-written file unless it was renamed into place.
struct Unfinished<'a> {
    path: &'a Path,
    done: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(self.path);
        }
    }
}

/// A step in making a finished file whole on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The whole file, written under its temporary name, is synced.
    SyncTemp,
    /// It is renamed over the finished name, and the directory synced.
    RenameOver,
}

/// The order [`assemble`] takes the steps in: sync, then rename, so that the finished name
/// never points at bytes a crash could still lose.
pub const FINISH: [Finish; 2] = [Finish::SyncTemp, Finish::RenameOver];

#[cfg(feature = "plants")]
static RENAME_BEFORE_SYNC: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The order the steps are taken in: [`FINISH`], unless the simulation planted the fault
/// that renames first (`plant_rename_before_sync`, with the `plants` feature only).
pub fn finish_order() -> [Finish; 2] {
    #[cfg(feature = "plants")]
    if RENAME_BEFORE_SYNC.load(std::sync::atomic::Ordering::Relaxed) {
        return [Finish::RenameOver, Finish::SyncTemp];
    }
    FINISH
}

/// Plants the fault `scripts/simulate --plant rename-before-sync` must catch: finished
/// files are renamed before they are synced. Never called outside that simulation.
#[cfg(feature = "plants")]
#[doc(hidden)]
pub fn plant_rename_before_sync() {
    RENAME_BEFORE_SYNC.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Turns the in-progress file `journal` into the replay `out` (written to
/// `out.part.tmp`, synced, then renamed over `out`): its header, start snapshot and row 0,
/// then every whole record up to the first that is not whole, whose input does not
/// decode, or (with `verify`) whose row the replay does not reproduce. Reads the file
/// twice (rows, then inputs) and holds one input at a time. What follows the last record
/// kept is classified ([`DropKind`]): when the first record not kept is damaged, the rest
/// of the file is searched for a whole record; one found makes it corruption, not a torn
/// tail.
///
/// # Errors
/// The header, start snapshot, row 0 or header check is cut short, malformed or does not
/// hold (or, with `verify`, row 0 is not the start world's hash): nothing can be
/// recovered. Or `out` cannot be written: then `out.part.tmp` is removed, and `out` is as
/// it was.
pub fn assemble(journal: &Path, out: &Path, verify: bool) -> Result<Assembled, AssembleError> {
    let name = journal.display().to_string();
    let input_err = |e: io::Error| AssembleError::Input(FormatError::io(&name, &e));
    let mut f = File::open(journal).map_err(input_err)?;
    let total = f.metadata().map_err(input_err)?.len();
    let head = read_head(&name, &mut f).map_err(AssembleError::Input)?;
    drop(f);
    if verify && head.start.hash() != head.row0 {
        return Err(AssembleError::Input(FormatError::new(
            &name,
            head.records_at - 16,
            format!(
                "hash row 0 is {:016x}, the start world's hash is {:016x}",
                head.row0,
                head.start.hash()
            ),
        )));
    }
    let tmp = assembly_path(out);
    let write_err = |err: io::Error| AssembleError::Output {
        path: tmp.clone(),
        err,
    };
    let file = File::create(&tmp).map_err(write_err)?;
    let mut unfinished = Unfinished {
        path: &tmp,
        done: false,
    };
    let mut w = BufWriter::with_capacity(256 * 1024, file);
    w.write_all(&head.ostm).map_err(write_err)?;
    w.write_all(&head.row0.to_le_bytes()).map_err(write_err)?;

    // Pass 1: the rows, and how many steps to keep.
    let mut world = head.start.clone();
    let start_step = world.step;
    let mut recs = Records::open(journal, head.records_at, head.check).map_err(input_err)?;
    let mut ops: Vec<Op> = Vec::new();
    let mut steps: u32 = 0;
    let mut dropped = None;
    loop {
        let step = start_step.wrapping_add(u64::from(steps));
        let (at, hash) = match recs.next(step).map_err(input_err)? {
            Next::End => break,
            Next::Bad { at, why } => {
                let kind = match whole_record_after(&name, journal, at, total, head.check)
                    .map_err(input_err)?
                {
                    Some(resumes_at) => DropKind::Corruption { resumes_at },
                    None => DropKind::TornTail,
                };
                dropped = Some((at, why, kind));
                break;
            }
            Next::Record { at, hash } => (at, hash),
        };
        if steps == MAX_STEPS {
            let why = format!("a replay holds at most {MAX_STEPS} steps");
            dropped = Some((at, why, DropKind::Refused));
            break;
        }
        ops.clear();
        if let Err(e) = for_each_op(&name, recs.input(), at + 2, |op| ops.push(op)) {
            let why = format!("the input of step {step} does not decode: {e}");
            dropped = Some((at, why, DropKind::Refused));
            break;
        }
        if verify {
            world.step(&ops);
            let computed = world.hash();
            if computed != hash {
                let why = format!(
                    "the hash row of step {} is {hash:016x}, the replay computes {computed:016x}",
                    step.wrapping_add(1)
                );
                dropped = Some((at, why, DropKind::NotReproduced));
                break;
            }
        }
        w.write_all(&hash.to_le_bytes()).map_err(write_err)?;
        steps += 1;
    }
    drop(recs);

    // Pass 2: the inputs of the steps kept.
    let mut recs = Records::open(journal, head.records_at, head.check).map_err(input_err)?;
    for s in 0..steps {
        match recs
            .next(start_step.wrapping_add(u64::from(s)))
            .map_err(input_err)?
        {
            Next::Record { .. } => {
                let input = recs.input();
                w.write_all(&(input.len() as u16).to_le_bytes())
                    .map_err(write_err)?;
                w.write_all(input).map_err(write_err)?;
            }
            Next::End | Next::Bad { .. } => {
                return Err(AssembleError::Input(FormatError::new(
                    &name,
                    recs.offset,
                    "the file changed while it was being read",
                )))
            }
        }
    }
    let mut file = w.into_inner().map_err(|e| write_err(e.into_error()))?;
    file.seek(SeekFrom::Start(head.count_at as u64))
        .map_err(write_err)?;
    file.write_all(&steps.to_le_bytes()).map_err(write_err)?;
    for step in finish_order() {
        match step {
            Finish::SyncTemp => file.sync_all().map_err(write_err)?,
            // Renamed, and the directory synced before `FILE.part` may be removed: a
            // power loss then keeps the new name.
            Finish::RenameOver => std::fs::rename(&tmp, out)
                .and_then(|()| crate::format::sync_dir(out))
                .map_err(|err| AssembleError::Output {
                    path: out.to_path_buf(),
                    err,
                })?,
        }
    }
    drop(file);
    unfinished.done = true;
    Ok(Assembled {
        path: out.to_path_buf(),
        start_step,
        steps,
        dropped: dropped.map(|(offset, why, kind)| Dropped {
            offset,
            bytes: total.saturating_sub(offset),
            why,
            kind,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::{AssembleError, FormatError};
    use std::io;

    /// The text users and scripts read, byte for byte (derived with thiserror, once
    /// written by hand).
    #[test]
    fn an_assembly_error_reads_as_it_always_has() {
        let e = FormatError::new("a.ostm.part", 12, "expected a header check");
        assert_eq!(AssembleError::Input(e.clone()).to_string(), e.to_string());
        let full = io::Error::from(io::ErrorKind::StorageFull);
        let text = format!("cannot write out/r.ostm: {full} (the disk is full)");
        let full = AssembleError::Output {
            path: "out/r.ostm".into(),
            err: full,
        };
        assert_eq!(full.to_string(), text);
        let other = AssembleError::Output {
            path: "r.ostm".into(),
            err: io::Error::other("odd"),
        };
        assert_eq!(other.to_string(), "cannot write r.ostm: odd");
    }
}
