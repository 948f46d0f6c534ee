//! Reading a `.ostm` replay a step at a time: the header once, then one step's input per
//! call ([`ReplayStream`]), and the worlds of its run ([`ReplayTracer`]), in constant
//! memory whatever the replay's length. `seek`, `ostm-viewer trace`/`diff` and the page
//! read replays this way.

use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::format::ostm::{Header, FLAG_HASHES, MAX_HEADER_BYTES};
use crate::sim::op::{for_each_op, Op};
use crate::sim::world::World;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Reads a `.ostm` replay a step at a time from a seekable input: the header once, then one
/// step's input per call. Hash rows are read on demand, eight bytes at a time.
pub struct ReplayStream<R: Read + Seek> {
    input: String,
    reader: BufReader<R>,
    header: Header,
    len: u64,
    pub(super) hashes_at: Option<u64>,
    inputs_at: u64,
    offset: u64,
    next: u32,
    buf: Vec<u8>,
}

impl ReplayStream<File> {
    /// Opens a replay file.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        let name = path.display().to_string();
        let f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
        ReplayStream::new(&name, f)
    }
}

impl<R: Read + Seek> ReplayStream<R> {
    /// Reads and checks the header, and checks that the file is long enough for its hash
    /// rows and for two bytes per step.
    pub fn new(input: &str, mut inner: R) -> Result<Self, FormatError> {
        let io_err = |e: io::Error| FormatError::io(input, &e);
        let len = inner.seek(SeekFrom::End(0)).map_err(io_err)?;
        inner.seek(SeekFrom::Start(0)).map_err(io_err)?;
        let mut head = Vec::with_capacity(MAX_HEADER_BYTES);
        (&mut inner)
            .take(MAX_HEADER_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(io_err)?;
        let mut c = Cursor::new(input, &head, 0);
        let header = Header::read(input, &mut c)?;
        let mut at = c.offset();
        let hashes_at = if header.flags & FLAG_HASHES != 0 {
            let rows = (header.steps as u64 + 1) * 8;
            if len - at < rows {
                return Err(FormatError::new(
                    input,
                    at,
                    format!(
                        "expected {rows}-byte hash rows ({} x u64), found {} bytes",
                        header.steps as u64 + 1,
                        len - at
                    ),
                ));
            }
            let h = at;
            at += rows;
            Some(h)
        } else {
            None
        };
        if header.steps as u64 * 2 > len - at {
            return Err(FormatError::new(
                input,
                at,
                format!(
                    "expected {} step inputs (at least {} bytes), found {} bytes",
                    header.steps,
                    header.steps as u64 * 2,
                    len - at
                ),
            ));
        }
        inner.seek(SeekFrom::Start(at)).map_err(io_err)?;
        Ok(ReplayStream {
            input: input.to_string(),
            reader: BufReader::with_capacity(64 * 1024, inner),
            header,
            len,
            hashes_at,
            inputs_at: at,
            offset: at,
            next: 0,
            buf: Vec::with_capacity(256),
        })
    }

    /// The input's name.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The replay's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The world the replay starts from.
    pub fn start_world(&self) -> World {
        crate::format::ostm::start_world(
            self.header.setup,
            self.header.link,
            self.header.start.as_ref(),
        )
    }

    /// Index of the next step to read (0-based, counted from the replay's start).
    pub fn next_index(&self) -> u32 {
        self.next
    }

    /// Byte offset of the next step's input length.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Byte offset of the first step's input length.
    pub fn inputs_offset(&self) -> u64 {
        self.inputs_at
    }

    /// Hash row `row` (the world hash at the start step + `row`), if the replay has rows.
    pub fn hash_row(&mut self, row: u32) -> Result<Option<u64>, FormatError> {
        let Some(base) = self.hashes_at else {
            return Ok(None);
        };
        if row > self.header.steps {
            return Ok(None);
        }
        let at = base + row as u64 * 8;
        let io_err = |e: io::Error| {
            FormatError::new(&self.input, at, format!("cannot read hash row {row}: {e}"))
        };
        let mut b = [0u8; 8];
        let inner = self.reader.get_mut();
        inner.seek(SeekFrom::Start(at)).map_err(io_err)?;
        inner.read_exact(&mut b).map_err(io_err)?;
        // Put the buffered reader back where it was.
        self.reader
            .seek(SeekFrom::Start(self.offset))
            .map_err(io_err)?;
        Ok(Some(u64::from_le_bytes(b)))
    }

    /// Moves to step `index`, whose input length starts at byte `offset` (as a seek index
    /// recorded it). The next [`ReplayStream::next_ops`] reads that step.
    pub fn seek_to(&mut self, index: u32, offset: u64) -> Result<(), FormatError> {
        if index > self.header.steps || offset < self.inputs_at || offset > self.len {
            return Err(FormatError::new(
                &self.input,
                offset,
                format!(
                    "expected an input offset of a step in {}..={}, found step {index}",
                    self.inputs_at, self.len
                ),
            ));
        }
        self.reader
            .seek(SeekFrom::Start(offset))
            .map_err(|e| FormatError::new(&self.input, offset, format!("cannot seek: {e}")))?;
        self.offset = offset;
        self.next = index;
        Ok(())
    }

    /// Reads the next step's input into `ops` (cleared first). Returns false after the last
    /// step, having checked that no bytes follow it.
    pub fn next_ops(&mut self, ops: &mut Vec<Op>) -> Result<bool, FormatError> {
        ops.clear();
        if self.next == self.header.steps {
            if self.offset != self.len {
                return Err(FormatError::new(
                    &self.input,
                    self.offset,
                    format!(
                        "expected end of replay, found {} trailing bytes",
                        self.len.saturating_sub(self.offset)
                    ),
                ));
            }
            return Ok(false);
        }
        let step = self.next;
        let at = self.offset;
        let mut lb = [0u8; 2];
        self.read_exact_at(&mut lb, at, || {
            format!("2-byte input length of step {step}")
        })?;
        let n = u16::from_le_bytes(lb) as usize;
        self.buf.resize(n, 0);
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.read_exact_at(&mut buf, at + 2, || {
            format!("{n}-byte input of step {step}")
        });
        self.buf = buf;
        r?;
        for_each_op(&self.input, &self.buf, at + 2, |op| ops.push(op))?;
        self.offset = at + 2 + n as u64;
        self.next += 1;
        Ok(true)
    }

    fn read_exact_at(
        &mut self,
        out: &mut [u8],
        at: u64,
        what: impl Fn() -> String,
    ) -> Result<(), FormatError> {
        let left = self.len.saturating_sub(at);
        if (out.len() as u64) > left {
            return Err(FormatError::new(
                &self.input,
                at,
                format!("expected {}, found {left} bytes", what()),
            ));
        }
        self.reader
            .read_exact(out)
            .map_err(|e| FormatError::new(&self.input, at, format!("cannot read {}: {e}", what())))
    }
}

/// A replay run step by step: yields the start world, then the world after each step.
pub struct ReplayTracer<R: Read + Seek> {
    stream: ReplayStream<R>,
    pub(super) world: World,
    ops: Vec<Op>,
    started: bool,
}

impl<R: Read + Seek> ReplayTracer<R> {
    /// Starts at the replay's start world.
    pub fn new(stream: ReplayStream<R>) -> Self {
        let world = stream.start_world();
        ReplayTracer {
            stream,
            world,
            ops: Vec::new(),
            started: false,
        }
    }

    /// The underlying stream.
    pub fn stream(&self) -> &ReplayStream<R> {
        &self.stream
    }

    /// The next world (start world first), or `None` after the last step.
    pub fn next_world(&mut self) -> Result<Option<&World>, FormatError> {
        if !self.started {
            self.started = true;
            return Ok(Some(&self.world));
        }
        if !self.stream.next_ops(&mut self.ops)? {
            return Ok(None);
        }
        self.world.step(&self.ops);
        Ok(Some(&self.world))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ostm::Replay;
    use crate::sim::op::Op;
    use crate::sim::world::{Dims, Setup};

    #[test]
    fn a_replay_streams_to_the_same_worlds_as_stepping_it() {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Two,
                bodies: 4,
                seed: 5,
            },
            None,
        );
        for i in 0..30 {
            let ops = if i % 7 == 0 {
                vec![Op::Impulse {
                    body: 1,
                    d: [3, 40, 0],
                }]
            } else {
                vec![]
            };
            r.inputs.push_ops(&ops);
        }
        r.compute_hashes();
        let bytes = r.to_bytes();
        let mut t =
            ReplayTracer::new(ReplayStream::new("r", io::Cursor::new(bytes.clone())).unwrap());
        let mut hashes = Vec::new();
        while let Some(w) = t.next_world().unwrap() {
            hashes.push(w.hash());
        }
        assert_eq!(Some(hashes), r.hashes);
        // Cut short anywhere: an error, never a shorter run.
        for cut in 0..bytes.len() {
            let res =
                ReplayStream::new("r", io::Cursor::new(bytes[..cut].to_vec())).and_then(|s| {
                    let mut t = ReplayTracer::new(s);
                    while t.next_world()?.is_some() {}
                    Ok(())
                });
            assert!(res.is_err(), "cut at {cut} accepted");
        }
    }
}
