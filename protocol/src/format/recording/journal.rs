//! The in-progress recording file (`FILE.part`) and its assembly into a `.ostm` replay.
//!
//! Layout (docs/replay-format.md, "The in-progress file"), little endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `OSTMPART` |
//! | 8 | `h` | the finished file's header exactly as `.ostm` lays it out, with step count 0: magic `OSTM` … step count, start snapshot length and start snapshot when flag bit 1 is set |
//! | 8 + `h` | 8 | hash row 0: the start world's hash |
//! | then | … | one record per step: u16 input length `n`, `n` input bytes, u64 hash row |
//!
//! A record is whole when all `2 + n + 8` of its bytes are there. [`assemble`] keeps the
//! longest prefix of whole records whose inputs decode (and, when asked, whose rows the
//! replay reproduces), and reports what it dropped.

use super::ostm_header;
use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::format::ostm::{start_world, Header, FLAG_HASHES, MAX_HEADER_BYTES, MAX_STEPS};
use crate::sim::op::for_each_op;
use crate::sim::world::World;
use crate::Op;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The in-progress file's magic.
pub const JOURNAL_MAGIC: &[u8; 8] = b"OSTMPART";

/// The in-progress file of a recording into `path`: `path` with `.part` appended.
pub fn journal_path(path: &Path) -> PathBuf {
    suffixed(path, ".part")
}

/// Where a recording's `FILE.part` is written until it holds its header: `FILE.part.new`.
pub fn fresh_path(path: &Path) -> PathBuf {
    suffixed(path, ".part.new")
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Magic, the `.ostm` header and row 0 of a recording of `world` starting now.
pub(super) fn header_bytes(world: &World, with_start_snapshot: bool) -> Vec<u8> {
    let mut out = JOURNAL_MAGIC.to_vec();
    out.extend_from_slice(&ostm_header(world, with_start_snapshot));
    out.extend_from_slice(&world.hash().to_le_bytes());
    out
}

/// What was left out of an assembled replay: everything from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Offset in the in-progress file of the first byte not kept (a record's first byte).
    pub offset: u64,
    /// Bytes from there to the end of the file.
    pub bytes: u64,
    /// Why: a torn last record, an input that does not decode, a row not reproduced.
    pub why: String,
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
}

/// Why an assembly failed.
#[derive(Debug)]
pub enum AssembleError {
    /// The in-progress file holds no replay: its header or row 0 is cut short or malformed.
    Input(FormatError),
    /// The replay could not be written.
    Output { path: PathBuf, err: io::Error },
}

impl std::fmt::Display for AssembleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssembleError::Input(e) => write!(f, "{e}"),
            AssembleError::Output { path, err } => {
                write!(f, "cannot write {}: {err}", path.display())
            }
        }
    }
}

impl std::error::Error for AssembleError {}

/// The header part of an in-progress file: where the records start, and the start world.
struct Head {
    /// The `.ostm` header bytes (magic `OSTM` … start snapshot).
    ostm: Vec<u8>,
    /// Offset of the step count within `ostm`.
    count_at: usize,
    start: World,
    row0: u64,
    /// Offset of the first record in the in-progress file.
    records_at: u64,
}

fn read_head(name: &str, file: &mut File) -> Result<Head, FormatError> {
    let mut buf = Vec::new();
    let want = (JOURNAL_MAGIC.len() + MAX_HEADER_BYTES + 8) as u64;
    Read::by_ref(file)
        .take(want)
        .read_to_end(&mut buf)
        .map_err(|e| FormatError::io(name, &e))?;
    let mut c = Cursor::new(name, &buf, 0);
    let magic = c.take(JOURNAL_MAGIC.len(), "magic")?;
    if magic != JOURNAL_MAGIC {
        return Err(c.error_at(
            0,
            format!("expected magic \"OSTMPART\" (an in-progress recording), found {magic:02x?}"),
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
    let ostm_len = (c.offset() as usize) - at;
    let count_at = if header.link.is_some() { 22 } else { 18 };
    let row0_at = c.offset();
    let row0 = c.u64("hash row 0")?;
    let start = start_world(header.setup, header.link, header.start.as_ref());
    Ok(Head {
        ostm: buf[at..at + ostm_len].to_vec(),
        count_at,
        start,
        row0,
        records_at: row0_at + 8,
    })
}

/// Reads records one at a time from an in-progress file.
struct Records {
    r: BufReader<File>,
    offset: u64,
    input: Vec<u8>,
}

/// One whole record, or why the next one is not.
enum Next {
    Record { at: u64, hash: u64 },
    End,
    Torn { at: u64, why: String },
}

impl Records {
    fn open(path: &Path, at: u64) -> io::Result<Records> {
        let mut f = File::open(path)?;
        f.seek(SeekFrom::Start(at))?;
        Ok(Records {
            r: BufReader::with_capacity(256 * 1024, f),
            offset: at,
            input: Vec::new(),
        })
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
        // The common case: the whole record is in the buffer.
        let buf = self.r.fill_buf()?;
        if let Some(&[a, b]) = buf.get(..2) {
            let n = u16::from_le_bytes([a, b]) as usize;
            if let Some(hash) = buf.get(2 + n..2 + n + 8) {
                let hash = u64::from_le_bytes(hash.try_into().unwrap_or([0; 8]));
                self.input.clear();
                self.input.extend_from_slice(&buf[2..2 + n]);
                self.r.consume(2 + n + 8);
                self.offset += (2 + n + 8) as u64;
                return Ok(Next::Record { at, hash });
            }
        }
        let mut len = [0u8; 2];
        match self.fill(&mut len)? {
            0 => return Ok(Next::End),
            2 => {}
            n => {
                return Ok(Next::Torn {
                    at,
                    why: format!(
                        "a torn last record: expected 2-byte input length of step {step}, found {n} bytes"
                    ),
                })
            }
        }
        let n = u16::from_le_bytes(len) as usize;
        self.input.resize(n, 0);
        let mut input = std::mem::take(&mut self.input);
        let got = self.fill(&mut input)?;
        self.input = input;
        if got < n {
            return Ok(Next::Torn {
                at,
                why: format!(
                    "a torn last record: expected {n}-byte input of step {step}, found {got} bytes"
                ),
            });
        }
        let mut hash = [0u8; 8];
        let got = self.fill(&mut hash)?;
        if got < 8 {
            return Ok(Next::Torn {
                at,
                why: format!(
                    "a torn last record: expected 8-byte hash row of step {step}, found {got} bytes"
                ),
            });
        }
        self.offset += (2 + n + 8) as u64;
        Ok(Next::Record {
            at,
            hash: u64::from_le_bytes(hash),
        })
    }
}

/// Turns the in-progress file `journal` into the replay `out` (written to
/// `out.part.tmp`, synced, then renamed over `out`): its header, start snapshot and row 0,
/// then every whole record up to the first that is torn, does not decode, or (with
/// `verify`) whose row the replay does not reproduce. Reads the file twice (rows, then
/// inputs) and holds one input at a time.
///
/// # Errors
/// The header, start snapshot or row 0 is cut short or malformed (or, with `verify`, row 0
/// is not the start world's hash): nothing can be recovered. Or `out` cannot be written.
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
            head.records_at - 8,
            format!(
                "hash row 0 is {:016x}, the start world's hash is {:016x}",
                head.row0,
                head.start.hash()
            ),
        )));
    }
    let tmp = suffixed(out, ".part.tmp");
    let write_err = |err: io::Error| AssembleError::Output {
        path: tmp.clone(),
        err,
    };
    let mut w = BufWriter::with_capacity(256 * 1024, File::create(&tmp).map_err(write_err)?);
    w.write_all(&head.ostm).map_err(write_err)?;
    w.write_all(&head.row0.to_le_bytes()).map_err(write_err)?;

    // Pass 1: the rows, and how many steps to keep.
    let mut world = head.start.clone();
    let start_step = world.step;
    let mut recs = Records::open(journal, head.records_at).map_err(input_err)?;
    let mut ops: Vec<Op> = Vec::new();
    let mut steps: u32 = 0;
    let mut dropped = None;
    loop {
        let step = start_step.wrapping_add(u64::from(steps));
        let (at, hash) = match recs.next(step).map_err(input_err)? {
            Next::End => break,
            Next::Torn { at, why } => {
                dropped = Some((at, why));
                break;
            }
            Next::Record { at, hash } => (at, hash),
        };
        if steps == MAX_STEPS {
            dropped = Some((at, format!("a replay holds at most {MAX_STEPS} steps")));
            break;
        }
        ops.clear();
        if let Err(e) = for_each_op(&name, &recs.input, at + 2, |op| ops.push(op)) {
            dropped = Some((
                at,
                format!("the input of step {step} does not decode: {}", e),
            ));
            break;
        }
        if verify {
            world.step(&ops);
            let computed = world.hash();
            if computed != hash {
                dropped = Some((
                    at,
                    format!(
                        "the hash row of step {} is {hash:016x}, the replay computes {computed:016x}",
                        step.wrapping_add(1)
                    ),
                ));
                break;
            }
        }
        w.write_all(&hash.to_le_bytes()).map_err(write_err)?;
        steps += 1;
    }
    drop(recs);

    // Pass 2: the inputs of the steps kept.
    let mut recs = Records::open(journal, head.records_at).map_err(input_err)?;
    for s in 0..steps {
        match recs
            .next(start_step.wrapping_add(u64::from(s)))
            .map_err(input_err)?
        {
            Next::Record { .. } => {
                let n = recs.input.len() as u16;
                w.write_all(&n.to_le_bytes()).map_err(write_err)?;
                w.write_all(&recs.input).map_err(write_err)?;
            }
            Next::End | Next::Torn { .. } => {
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
    file.sync_all().map_err(write_err)?;
    drop(file);
    std::fs::rename(&tmp, out).map_err(|err| AssembleError::Output {
        path: out.to_path_buf(),
        err,
    })?;
    Ok(Assembled {
        path: out.to_path_buf(),
        start_step,
        steps,
        dropped: dropped.map(|(offset, why)| Dropped {
            offset,
            bytes: total.saturating_sub(offset),
            why,
        }),
    })
}
