//! Per-step traces, replays read a step at a time, and the first difference between two runs.
//!
//! A trace is text, one line per step, holding every field of the world exactly
//! (`docs/trace-format.md` is the byte-for-byte description):
//!
//! ```text
//! ostm-trace 1
//! setup dims=3 bodies=2 seed=7 link=none
//! s=0 h=5d1f0b8c9a2e4410 g=3 n=2 | 1 0 500 9000 4100 -12 3 40 | 1 0 7000 200 900 5 -8 0
//! s=1 h=... g=3 n=2 | ...
//! end rows=2
//! ```
//!
//! Everything here streams: a [`TraceReader`] holds one line, a [`ReplayStream`] one step's
//! input, so comparing two inputs of any length takes constant memory.

use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::link::{Link, Role};
use crate::op::{for_each_op, Op};
use crate::ostm::{Header, FLAG_HASHES, MAGIC, MAX_HEADER_BYTES};
use crate::world::{first_difference, Body, Dims, Setup, World, MAX_BODIES};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The first line of every trace.
pub const TRACE_MAGIC: &str = "ostm-trace 1";
/// The longest line a trace may hold, newline included: 64 bodies of 8 fields at most
/// 11 characters each, with separators, and the row's own fields, rounded up.
pub const MAX_TRACE_LINE: usize = 8192;

/// How an input was recognised from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Starts with `ostm-trace 1`.
    Trace,
    /// Starts with `OSTM`.
    Replay,
}

/// Recognises an input from its first bytes (at least 4 are needed to say "replay").
pub fn detect(input: &str, first: &[u8]) -> Result<InputKind, FormatError> {
    if first.starts_with(MAGIC) {
        Ok(InputKind::Replay)
    } else if first.starts_with(TRACE_MAGIC.as_bytes()) {
        Ok(InputKind::Trace)
    } else {
        let shown = &first[..first.len().min(12)];
        Err(FormatError::new(
            input,
            0,
            format!("expected a replay (magic \"OSTM\") or a trace (first line \"{TRACE_MAGIC}\"), found {shown:02x?}"),
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Writing

/// The `setup` line's text (without newline).
pub fn setup_line(setup: &Setup, link: Option<Link>) -> String {
    let link = match link {
        None => "none".to_string(),
        Some(l) => format!("{}:{}:{}", l.role as u8, l.body, l.transfer_step),
    };
    format!(
        "setup dims={} bodies={} seed={} link={link}",
        setup.dims as u8, setup.bodies, setup.seed
    )
}

/// Writes a trace one row at a time.
pub struct TraceWriter<W: Write> {
    out: W,
    rows: u64,
    line: String,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the two header lines.
    pub fn new(mut out: W, setup: &Setup, link: Option<Link>) -> io::Result<Self> {
        writeln!(out, "{TRACE_MAGIC}")?;
        writeln!(out, "{}", setup_line(setup, link))?;
        Ok(TraceWriter {
            out,
            rows: 0,
            line: String::with_capacity(MAX_TRACE_LINE),
        })
    }

    /// Writes one row: the world as it is now and its hash.
    pub fn row(&mut self, world: &World) -> io::Result<()> {
        self.line.clear();
        format_row(&mut self.line, world, world.hash());
        self.out.write_all(self.line.as_bytes())?;
        self.rows += 1;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes the `end` line and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        writeln!(self.out, "end rows={}", self.rows)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Appends one row line (with its newline) for `world` whose hash is `hash`.
pub fn format_row(out: &mut String, world: &World, hash: u64) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "s={} h={:016x} g={} n={}",
        world.step,
        hash,
        world.gravity,
        world.bodies.len()
    );
    for b in &world.bodies {
        let _ = write!(
            out,
            " | {} {} {} {} {} {} {} {}",
            b.alive as u8, b.still, b.pos[0], b.pos[1], b.pos[2], b.vel[0], b.vel[1], b.vel[2]
        );
    }
    out.push('\n');
}

// ---------------------------------------------------------------------------------------
// Reading traces

/// Reads a trace a line at a time, checking every line.
pub struct TraceReader<R: BufRead> {
    input: String,
    reader: R,
    line: Vec<u8>,
    /// 1-based number of the line last read.
    line_no: u64,
    /// Byte offset of the line last read.
    line_at: u64,
    /// Byte offset of the next line.
    offset: u64,
    world: World,
    hash: u64,
    rows: u64,
    done: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        let name = path.display().to_string();
        let f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
        TraceReader::new(&name, BufReader::with_capacity(64 * 1024, f))
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Reads and checks the two header lines.
    pub fn new(input: &str, reader: R) -> Result<Self, FormatError> {
        let mut t = TraceReader {
            input: input.to_string(),
            reader,
            line: Vec::with_capacity(MAX_TRACE_LINE),
            line_no: 0,
            line_at: 0,
            offset: 0,
            // Replaced once the setup line is read.
            world: World::new(
                Setup {
                    dims: Dims::Two,
                    bodies: 1,
                    seed: 0,
                },
                None,
            ),
            hash: 0,
            rows: 0,
            done: false,
        };
        if !t.read_line()? {
            return Err(t.err(format!("expected \"{TRACE_MAGIC}\", found end of input")));
        }
        if t.text()? != TRACE_MAGIC {
            let found = t.shown();
            return Err(t.err(format!("expected \"{TRACE_MAGIC}\", found \"{found}\"")));
        }
        if !t.read_line()? {
            return Err(
                t.err("expected the setup line, found end of input (cut short)".to_string())
            );
        }
        let (setup, link) = parse_setup(t.text()?).map_err(|m| t.err(m))?;
        t.world = World::new(setup, link);
        Ok(t)
    }

    /// The input's name.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The setup from the header.
    pub fn setup(&self) -> Setup {
        self.world.setup()
    }

    /// The link from the header.
    pub fn link(&self) -> Option<Link> {
        self.world.link()
    }

    /// The 1-based line number and byte offset of the line last read.
    pub fn position(&self) -> (u64, u64) {
        (self.line_no, self.line_at)
    }

    fn err(&self, message: String) -> FormatError {
        FormatError::new(
            &self.input,
            self.line_at,
            format!("line {}: {message}", self.line_no),
        )
    }

    fn shown(&self) -> String {
        let s = String::from_utf8_lossy(&self.line);
        let s = s.trim_end_matches('\n');
        if s.len() > 60 {
            let mut end = 60;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &s[..end])
        } else {
            s.to_string()
        }
    }

    fn text(&self) -> Result<&str, FormatError> {
        let body = &self.line[..self.line.len() - 1];
        std::str::from_utf8(body).map_err(|_| self.err("expected UTF-8 text".to_string()))
    }

    /// Reads the next whole line into `self.line`; false at a clean end of input.
    fn read_line(&mut self) -> Result<bool, FormatError> {
        self.line.clear();
        self.line_no += 1;
        self.line_at = self.offset;
        let limit = MAX_TRACE_LINE as u64;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.line)
            .map_err(|e| {
                FormatError::new(&self.input, self.line_at, format!("cannot read: {e}"))
            })?;
        self.offset += n as u64;
        if n == 0 {
            return Ok(false);
        }
        if self.line.last() != Some(&b'\n') {
            return Err(if n as u64 >= limit {
                self.err(format!(
                    "expected a line of at most {MAX_TRACE_LINE} bytes, found a longer one"
                ))
            } else {
                self.err(format!("expected a line ending in a newline, found {n} bytes and the end of input (the trace is cut short)"))
            });
        }
        Ok(true)
    }

    /// The next row, or `None` after the `end` line (which must be the last).
    pub fn next_row(&mut self) -> Result<Option<(&World, u64)>, FormatError> {
        if self.done {
            return Ok(None);
        }
        if !self.read_line()? {
            return Err(self.err(format!(
                "expected a row or \"end rows={}\", found end of input (the trace is cut short)",
                self.rows
            )));
        }
        let text = self.text()?;
        if let Some(rest) = text.strip_prefix("end ") {
            let want = format!("rows={}", self.rows);
            if rest != want {
                let m = format!("expected \"end {want}\", found \"{text}\"");
                return Err(self.err(m));
            }
            self.done = true;
            let mut probe = [0u8; 1];
            let extra = self.reader.read(&mut probe).map_err(|e| {
                FormatError::new(&self.input, self.offset, format!("cannot read: {e}"))
            })?;
            if extra != 0 {
                return Err(FormatError::new(
                    &self.input,
                    self.offset,
                    format!("line {}: expected the end of the trace after the end line, found more bytes", self.line_no + 1),
                ));
            }
            return Ok(None);
        }
        let expect_step = if self.rows == 0 {
            None
        } else {
            Some(self.world.step.wrapping_add(1))
        };
        // `text()` checked the line is UTF-8.
        let text = std::str::from_utf8(&self.line[..self.line.len() - 1]).unwrap_or("");
        match parse_row(text, &mut self.world, expect_step) {
            Ok(h) => self.hash = h,
            Err(m) => return Err(self.err(m)),
        }
        self.rows += 1;
        Ok(Some((&self.world, self.hash)))
    }
}

fn parse_setup(text: &str) -> Result<(Setup, Option<Link>), String> {
    let bad = || {
        format!("expected \"setup dims=2|3 bodies=1..64 seed=U32 link=none|ROLE:BODY:STEP\", found \"{text}\"")
    };
    let mut it = text.split(' ');
    if it.next() != Some("setup") {
        return Err(bad());
    }
    let mut field = |name: &str| -> Result<&str, String> {
        it.next()
            .and_then(|t| t.strip_prefix(name))
            .and_then(|t| t.strip_prefix('='))
            .ok_or_else(bad)
    };
    let dims = match field("dims")? {
        "2" => Dims::Two,
        "3" => Dims::Three,
        _ => return Err(bad()),
    };
    let bodies: u8 = num(field("bodies")?).ok_or_else(bad)?;
    if bodies == 0 || bodies as usize > MAX_BODIES {
        return Err(bad());
    }
    let seed: u32 = num(field("seed")?).ok_or_else(bad)?;
    let link_text = field("link")?;
    let link = if link_text == "none" {
        None
    } else {
        let parts: Vec<&str> = link_text.split(':').collect();
        if parts.len() != 3 {
            return Err(bad());
        }
        let role = num::<u8>(parts[0])
            .and_then(Role::from_byte)
            .ok_or_else(bad)?;
        let body: u8 = num(parts[1]).ok_or_else(bad)?;
        let transfer_step: u16 = num(parts[2]).ok_or_else(bad)?;
        Some(Link {
            role,
            body,
            transfer_step,
        })
    };
    if it.next().is_some() {
        return Err(bad());
    }
    Ok((Setup { dims, bodies, seed }, link))
}

/// Parses an integer in its canonical form only: optional `-`, no leading zeros, no `+`.
fn num<T: std::str::FromStr>(t: &str) -> Option<T> {
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    if t.starts_with('-') && digits == "0" {
        return None;
    }
    t.parse().ok()
}

/// Parses a row into `world` (its bodies are replaced); returns the row's hash.
fn parse_row(text: &str, world: &mut World, expect_step: Option<u64>) -> Result<u64, String> {
    let mut parts = text.split(" | ");
    let head = parts.next().unwrap_or("");
    let mut h = head.split(' ');
    let mut field = |name: &str, what: &str| -> Result<&str, String> {
        h.next()
            .and_then(|t| t.strip_prefix(name))
            .ok_or_else(|| format!("expected {what} (\"{name}…\"), found \"{head}\""))
    };
    let step_t = field("s=", "the step")?;
    let step: u64 = num(step_t)
        .ok_or_else(|| format!("expected the step as an unsigned integer, found \"{step_t}\""))?;
    let hash_t = field("h=", "the hash")?;
    if hash_t.len() != 16
        || !hash_t
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!(
            "expected the hash as 16 lowercase hex digits, found \"{hash_t}\""
        ));
    }
    let hash = u64::from_str_radix(hash_t, 16)
        .map_err(|_| format!("expected a hash, found \"{hash_t}\""))?;
    let g_t = field("g=", "the gravity")?;
    let gravity: i32 =
        num(g_t).ok_or_else(|| format!("expected gravity as a 32-bit integer, found \"{g_t}\""))?;
    let n_t = field("n=", "the body count")?;
    let n: usize = num(n_t).ok_or_else(|| format!("expected the body count, found \"{n_t}\""))?;
    if n == 0 || n > MAX_BODIES {
        return Err(format!("expected a body count of 1..=64, found {n}"));
    }
    if let Some(extra) = h.next() {
        return Err(format!(
            "expected \" | \" after the body count, found \"{extra}\""
        ));
    }
    if let Some(want) = expect_step {
        if step != want {
            return Err(format!(
                "expected step {want} (one after the previous row), found {step}"
            ));
        }
    }
    world.step = step;
    world.gravity = gravity;
    world.bodies.clear();
    for i in 0..n {
        let part = parts
            .next()
            .ok_or_else(|| format!("expected {n} bodies, found {i}"))?;
        let mut v = [0i64; 8];
        let mut toks = part.split(' ');
        for (k, slot) in v.iter_mut().enumerate() {
            let t = toks
                .next()
                .ok_or_else(|| format!("body {i}: expected 8 fields, found {k}"))?;
            let parsed = if k == 1 {
                num::<u32>(t).map(i64::from)
            } else {
                num::<i32>(t).map(i64::from)
            };
            *slot = parsed.ok_or_else(|| {
                format!(
                    "body {i} {}: expected a {} integer, found \"{t}\"",
                    crate::world::BODY_FIELDS[k],
                    if k == 1 { "u32" } else { "32-bit" }
                )
            })?;
        }
        if toks.next().is_some() {
            return Err(format!("body {i}: expected 8 fields, found more"));
        }
        if v[0] != 0 && v[0] != 1 {
            return Err(format!("body {i} alive: expected 0 or 1, found {}", v[0]));
        }
        world.bodies.push(Body::new(
            v[0] == 1,
            v[1] as u32,
            [v[2] as i32, v[3] as i32, v[4] as i32],
            [v[5] as i32, v[6] as i32, v[7] as i32],
        ));
    }
    if parts.next().is_some() {
        return Err(format!("expected {n} bodies, found more"));
    }
    Ok(hash)
}

// ---------------------------------------------------------------------------------------
// Reading replays a step at a time

/// Reads a `.ostm` replay a step at a time from a seekable input: the header once, then one
/// step's input per call. Hash rows are read on demand, eight bytes at a time.
pub struct ReplayStream<R: Read + Seek> {
    input: String,
    reader: BufReader<R>,
    header: Header,
    len: u64,
    hashes_at: Option<u64>,
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
        crate::ostm::start_world(
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
    world: World,
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

/// Writes the trace of a replay, the rows whose step is in `from..=to`, in run order.
/// Returns the number of rows written. In a replay whose steps run past `u64::MAX` (the
/// step after it is 0) the rows after the wrap are read too, so a range can keep rows on
/// both sides of it; `ostm-viewer trace` refuses a range that would leave out the rows
/// between them.
pub fn trace_replay<R: Read + Seek, W: Write>(
    stream: ReplayStream<R>,
    out: W,
    from: u64,
    to: u64,
) -> Result<u64, TraceError> {
    trace_replay_watched(stream, out, from, to, |_| true)
}

/// [`trace_replay`], calling `watch(n)` after each of the replay's worlds with `n` the
/// worlds read so far (start world included), whether written or not; when it returns
/// `false` the trace stops there with [`TraceError::Stopped`] (the output is left as it is:
/// the caller removes it). For a progress bar and a stop on a signal.
pub fn trace_replay_watched<R: Read + Seek, W: Write>(
    stream: ReplayStream<R>,
    out: W,
    from: u64,
    to: u64,
    mut watch: impl FnMut(u64) -> bool,
) -> Result<u64, TraceError> {
    let setup = stream.header().setup;
    let link = stream.header().link;
    let wraps = stream
        .start_world()
        .step
        .checked_add(u64::from(stream.header().steps))
        .is_none();
    let mut w = TraceWriter::new(out, &setup, link).map_err(TraceError::Write)?;
    let mut t = ReplayTracer::new(stream);
    let mut read = 0u64;
    while let Some(world) = t.next_world().map_err(TraceError::Input)? {
        read += 1;
        if world.step > to && !wraps {
            break;
        }
        if world.step <= to && world.step >= from {
            w.row(world).map_err(TraceError::Write)?;
        }
        if !watch(read) {
            return Err(TraceError::Stopped);
        }
    }
    let rows = w.rows();
    w.finish().map_err(TraceError::Write)?;
    Ok(rows)
}

/// Why writing a trace stopped.
#[derive(Debug)]
pub enum TraceError {
    /// The input is malformed or unreadable.
    Input(FormatError),
    /// The output could not be written (a closed pipe among others).
    Write(io::Error),
    /// The watcher of [`trace_replay_watched`] asked to stop.
    Stopped,
}

// ---------------------------------------------------------------------------------------
// First difference

/// One of the two inputs of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first input.
    A,
    /// The second input.
    B,
}

impl Side {
    /// `A` or `B`.
    pub fn name(self) -> &'static str {
        match self {
            Side::A => "A",
            Side::B => "B",
        }
    }
}

/// The steps an input holds, as far as it has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// The step of its first row; `None` for a trace with no rows, or one not read yet.
    pub first: Option<u64>,
    /// The step of its last row: a replay's end step (its header says it), else the last
    /// row read.
    pub last: Option<u64>,
    /// True when `last` is the input's last step: always for a replay, for a trace once its
    /// `end` line has been read.
    pub complete: bool,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.first, self.last, self.complete) {
            (Some(a), Some(b), true) => write!(f, "{a}..={b}"),
            (Some(a), Some(b), false) => write!(f, "{a}..={b} so far (not read to its end)"),
            (_, _, true) => f.write_str("no step"),
            (_, _, false) => f.write_str("no step read"),
        }
    }
}

/// A replay's hash row that its own run does not reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    /// The input's name (its path as given).
    pub input: String,
    /// The row's index in the replay (0 is the start world).
    pub row: u64,
    /// The row's step number (start step + row).
    pub step: u64,
    /// The hash the file holds.
    pub stored: u64,
    /// The hash the run computed at that step.
    pub computed: u64,
}

/// Why reading an input stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// The input is malformed, cut short or unreadable.
    Format(FormatError),
    /// A replay's stored hash row differs from the hash its run computes.
    StoredRow(StoredRow),
}

impl From<FormatError> for Halt {
    fn from(e: FormatError) -> Halt {
        Halt::Format(e)
    }
}

enum Inner {
    Trace(TraceReader<BufReader<File>>),
    Replay {
        tracer: ReplayTracer<File>,
        /// The file again, at its hash rows, read eight bytes per row in order (`None`
        /// without hash rows).
        stored: Option<BufReader<File>>,
        /// The computed hash of the current world.
        hash: u64,
    },
}

/// One side of a comparison: a trace, or a replay run as it is read whose computed hashes
/// are checked against its own hash rows on the way.
pub struct RowSource {
    name: String,
    inner: Inner,
    held: Held,
    /// Rows read so far.
    rows: u64,
    /// True while a row is current (after a successful [`RowSource::advance`]).
    current: bool,
    ended: bool,
}

impl RowSource {
    /// Opens a file, telling a trace from a replay by its first bytes.
    pub fn open(path: &Path) -> Result<RowSource, FormatError> {
        let name = path.display().to_string();
        let mut f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
        let mut first = Vec::with_capacity(16);
        (&mut f)
            .take(TRACE_MAGIC.len() as u64)
            .read_to_end(&mut first)
            .map_err(|e| FormatError::io(&name, &e))?;
        let (inner, held) = match detect(&name, &first)? {
            InputKind::Trace => (Inner::Trace(TraceReader::open(path)?), Held::default()),
            InputKind::Replay => {
                let stream = ReplayStream::open(path)?;
                let start = stream.header().start.as_ref().map_or(0, |w| w.step);
                let held = Held {
                    first: Some(start),
                    last: Some(start.wrapping_add(stream.header().steps as u64)),
                    complete: true,
                };
                let stored = match stream.hashes_at {
                    None => None,
                    Some(at) => {
                        let mut f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
                        f.seek(SeekFrom::Start(at)).map_err(|e| {
                            FormatError::new(&name, at, format!("cannot seek: {e}"))
                        })?;
                        Some(BufReader::with_capacity(64 * 1024, f))
                    }
                };
                let inner = Inner::Replay {
                    tracer: ReplayTracer::new(stream),
                    stored,
                    hash: 0,
                };
                (inner, held)
            }
        };
        Ok(RowSource {
            name,
            inner,
            held,
            rows: 0,
            current: false,
            ended: false,
        })
    }

    /// The input's name (its path as given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The input's kind.
    pub fn kind(&self) -> InputKind {
        match self.inner {
            Inner::Trace(_) => InputKind::Trace,
            Inner::Replay { .. } => InputKind::Replay,
        }
    }

    /// The setup and link the input declares.
    pub fn setup(&self) -> (Setup, Option<Link>) {
        match &self.inner {
            Inner::Trace(t) => (t.setup(), t.link()),
            Inner::Replay { tracer, .. } => (
                tracer.stream().header().setup,
                tracer.stream().header().link,
            ),
        }
    }

    /// The steps the input holds, as far as it is known.
    pub fn held(&self) -> Held {
        self.held
    }

    /// Moves to the next row (the first on the first call); false after the last one. A
    /// replay's computed hash is compared with its stored row at that step here.
    pub fn advance(&mut self) -> Result<bool, Halt> {
        if self.ended {
            self.current = false;
            return Ok(false);
        }
        let row = self.rows;
        let step = match &mut self.inner {
            Inner::Trace(t) => t.next_row()?.map(|(w, _)| w.step),
            Inner::Replay {
                tracer,
                stored,
                hash,
            } => match tracer.next_world()? {
                None => None,
                Some(w) => {
                    *hash = w.hash();
                    let step = w.step;
                    if let Some(rows) = stored {
                        let at = tracer.stream.hashes_at.unwrap_or(0) + row * 8;
                        let mut b = [0u8; 8];
                        rows.read_exact(&mut b).map_err(|e| {
                            FormatError::new(
                                &self.name,
                                at,
                                format!("cannot read hash row {row}: {e}"),
                            )
                        })?;
                        let stored = u64::from_le_bytes(b);
                        if stored != *hash {
                            return Err(Halt::StoredRow(StoredRow {
                                input: self.name.clone(),
                                row,
                                step,
                                stored,
                                computed: *hash,
                            }));
                        }
                    }
                    Some(step)
                }
            },
        };
        match step {
            Some(s) => {
                self.rows += 1;
                self.current = true;
                if self.kind() == InputKind::Trace {
                    self.held.first.get_or_insert(s);
                    self.held.last = Some(s);
                }
            }
            None => {
                self.current = false;
                self.ended = true;
                self.held.complete = true;
            }
        }
        Ok(step.is_some())
    }

    /// The current row: the world and its hash (as written in a trace, computed for a
    /// replay), and the row's index in the input; `None` before the first
    /// [`RowSource::advance`] and after the last row.
    pub fn row(&self) -> Option<(&World, u64, u64)> {
        if !self.current {
            return None;
        }
        let index = self.rows - 1;
        match &self.inner {
            Inner::Trace(t) => Some((&t.world, t.hash, index)),
            Inner::Replay { tracer, hash, .. } => Some((&tracer.world, *hash, index)),
        }
    }

    /// The current row's step.
    pub fn step(&self) -> Option<u64> {
        self.row().map(|(w, _, _)| w.step)
    }
}

/// Where two inputs first differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The step both rows are at (`None` for a setup difference).
    pub step: Option<u64>,
    /// A's row index there (0-based; `None` for a setup difference).
    pub a_row: Option<u64>,
    /// B's row index there.
    pub b_row: Option<u64>,
    /// The body, for a body field.
    pub body: Option<usize>,
    /// `setup`, `gravity`, `body count`, a body field as in [`crate::world::BODY_FIELDS`],
    /// or `hash`.
    pub field: &'static str,
    /// A's value, as text.
    pub a: String,
    /// B's value, as text.
    pub b: String,
}

impl Difference {
    /// The field with its body: `body 7 velocity.y`, or `gravity`.
    pub fn what(&self) -> String {
        match self.body {
            Some(i) => format!("body {i} {}", self.field),
            None => self.field.to_string(),
        }
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.step, self.a_row, self.b_row) {
            (Some(s), Some(ra), Some(rb)) if ra == rb => write!(
                f,
                "first difference at step {s} (row {ra}): {}: A {}, B {}",
                self.what(),
                self.a,
                self.b
            ),
            (Some(s), Some(ra), Some(rb)) => write!(
                f,
                "first difference at step {s} (A row {ra}, B row {rb}): {}: A {}, B {}",
                self.what(),
                self.a,
                self.b
            ),
            _ => write!(
                f,
                "first difference in the {}: A {}, B {}",
                self.what(),
                self.a,
                self.b
            ),
        }
    }
}

/// The steps at which A and B were compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compared {
    /// The first step compared: the first step both inputs hold.
    pub first: u64,
    /// The last step compared (for a difference, its step).
    pub last: u64,
    /// How many rows were compared.
    pub rows: u64,
}

/// What a [`compare`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every step both inputs hold is equal, and every stored hash row was reproduced.
    Identical,
    /// The inputs hold no step in common (each was read to its end): nothing to compare.
    NoCommonStep,
    /// The first difference between A and B at a step both hold.
    Different(Difference),
    /// A replay whose run does not reproduce its own hash row (found before any difference
    /// between A and B).
    StoredRow {
        /// Which input.
        side: Side,
        /// The row.
        row: StoredRow,
    },
}

/// The outcome of [`compare`] with the steps each input holds and the steps compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// What was found.
    pub outcome: Outcome,
    /// The steps A holds (as far as it was read).
    pub a: Held,
    /// The steps B holds.
    pub b: Held,
    /// The steps at which A and B were compared; `None` when none was.
    pub compared: Option<Compared>,
}

/// Compares two inputs **by step number**, reading each a row at a time side by side: the
/// input whose row is at the lower step reads on (a replay's steps are run, its stored
/// hash rows checked) until both are at the same step, then the two are compared row by row
/// while both have rows, then each is read to its end. The first finding ends the reading:
/// a replay row its own run does not reproduce (at one step A is read before B, and both
/// before they are compared), or a difference between A and B. A malformed or cut-short
/// input before that is an error naming that input and where.
pub fn compare(a: &mut RowSource, b: &mut RowSource) -> Result<Comparison, FormatError> {
    let mut compared = None;
    let outcome = match compare_rows(a, b, &mut compared) {
        Ok(o) => o,
        Err((_, Halt::Format(e))) => return Err(e),
        Err((side, Halt::StoredRow(row))) => Outcome::StoredRow { side, row },
    };
    Ok(Comparison {
        outcome,
        a: a.held(),
        b: b.held(),
        compared,
    })
}

fn compare_rows(
    a: &mut RowSource,
    b: &mut RowSource,
    compared: &mut Option<Compared>,
) -> Result<Outcome, (Side, Halt)> {
    let (sa, la) = a.setup();
    let (sb, lb) = b.setup();
    if (sa, la) != (sb, lb) {
        return Ok(Outcome::Different(Difference {
            step: None,
            a_row: None,
            b_row: None,
            body: None,
            field: "setup",
            a: setup_line(&sa, la),
            b: setup_line(&sb, lb),
        }));
    }
    let next_a = |a: &mut RowSource| a.advance().map_err(|h| (Side::A, h));
    let next_b = |b: &mut RowSource| b.advance().map_err(|h| (Side::B, h));
    next_a(a)?;
    next_b(b)?;
    // Align: the input behind reads on until both are at one step or one ends.
    loop {
        match (a.step(), b.step()) {
            (Some(x), Some(y)) if x < y => next_a(a)?,
            (Some(x), Some(y)) if x > y => next_b(b)?,
            _ => break,
        };
    }
    // Side by side: both rows are at the same step, since each input's steps go up by one.
    while let (Some((wa, ha, ra)), Some((wb, hb, rb))) = (a.row(), b.row()) {
        let step = wa.step;
        let c = compared.get_or_insert(Compared {
            first: step,
            last: step,
            rows: 0,
        });
        c.last = step;
        c.rows += 1;
        let found = match first_difference(wa, wb) {
            Some(d) => Some((d.body, d.field, d.a.to_string(), d.b.to_string())),
            None if ha != hb => Some((None, "hash", format!("{ha:016x}"), format!("{hb:016x}"))),
            None => None,
        };
        if let Some((body, field, va, vb)) = found {
            return Ok(Outcome::Different(Difference {
                step: Some(step),
                a_row: Some(ra),
                b_row: Some(rb),
                body,
                field,
                a: va,
                b: vb,
            }));
        }
        next_a(a)?;
        next_b(b)?;
    }
    // Whatever is left of either is read to its end: checked, and its stored rows too.
    while next_a(a)? {}
    while next_b(b)? {}
    Ok(if compared.is_some() {
        Outcome::Identical
    } else {
        Outcome::NoCommonStep
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ostm::Replay;

    fn world(bodies: u8) -> World {
        World::new(
            Setup {
                dims: Dims::Three,
                bodies,
                seed: 99,
            },
            None,
        )
    }

    fn trace_text(steps: usize) -> String {
        let mut w = world(3);
        let mut t = TraceWriter::new(Vec::new(), &w.setup(), None).unwrap();
        t.row(&w).unwrap();
        for _ in 0..steps {
            w.step(&[]);
            t.row(&w).unwrap();
        }
        String::from_utf8(t.finish().unwrap()).unwrap()
    }

    fn read_all(text: &str) -> Result<Vec<(World, u64)>, FormatError> {
        let mut r = TraceReader::new("t", text.as_bytes())?;
        let mut out = Vec::new();
        while let Some((w, h)) = r.next_row()? {
            out.push((w.clone(), h));
        }
        Ok(out)
    }

    #[test]
    fn a_row_is_written_as_documented() {
        let mut w = world(1);
        w.bodies[0] = Body::new(true, 2, [1, -2, 3], [-4, 5, 0]);
        w.gravity = -7;
        w.step = 12;
        let mut s = String::new();
        format_row(&mut s, &w, 0xab);
        assert_eq!(s, "s=12 h=00000000000000ab g=-7 n=1 | 1 2 1 -2 3 -4 5 0\n");
    }

    #[test]
    fn a_trace_reads_back_to_the_same_worlds_and_hashes() {
        let text = trace_text(50);
        let rows = read_all(&text).unwrap();
        assert_eq!(rows.len(), 51);
        let mut w = world(3);
        for (i, (got, h)) in rows.iter().enumerate() {
            if i > 0 {
                w.step(&[]);
            }
            assert_eq!(got.bodies, w.bodies);
            assert_eq!(got.step, w.step);
            assert_eq!(*h, w.hash());
        }
    }

    #[test]
    fn a_trace_cut_anywhere_is_an_error_not_a_short_trace() {
        let text = trace_text(3);
        for cut in 0..text.len() {
            assert!(read_all(&text[..cut]).is_err(), "cut at {cut} was accepted");
        }
        assert!(read_all(&text).is_ok());
    }

    #[test]
    fn malformed_rows_are_refused_with_their_line() {
        let text = trace_text(2);
        let cases = [
            ("| 1 0 ", "| 1 x "),
            ("| 1 0 ", "| 2 0 "),
            (" g=3 ", " g=+3 "),
            (" n=3 ", " n=4 "),
            (" n=3 ", " n=65 "),
            ("s=1 ", "s=2 "),
            ("end rows=3", "end rows=4"),
        ];
        for (from, to) in cases {
            let bad = text.replacen(from, to, 1);
            assert_ne!(bad, text, "{from}");
            let e = read_all(&bad).unwrap_err();
            assert!(e.message.starts_with("line "), "{e}");
        }
        let e = read_all(&format!("{text}x")).unwrap_err();
        assert!(e.message.contains("after the end line"), "{e}");
        assert_eq!(e.offset, text.len() as u64);
    }

    #[test]
    fn steps_above_i64_max_are_compared_by_number_as_written() {
        let w = world(1);
        let trace = |step: u64, gravity: i32| {
            let mut w = w.clone();
            w.step = step;
            w.gravity = gravity;
            let mut row = String::new();
            format_row(&mut row, &w, w.hash());
            format!(
                "{TRACE_MAGIC}\n{}\n{row}end rows=1\n",
                setup_line(&w.setup(), None)
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            RowSource::open(&p).unwrap()
        };
        // Steps u64::MAX and 5: no step in common, each range as written.
        let c = compare(
            &mut open("a.trace", trace(u64::MAX, 3)),
            &mut open("b.trace", trace(5, 3)),
        )
        .unwrap();
        assert_eq!(c.outcome, Outcome::NoCommonStep);
        assert_eq!(c.compared, None);
        assert_eq!(
            (c.a.first, c.a.last, c.a.complete),
            (Some(u64::MAX), Some(u64::MAX), true)
        );
        assert_eq!((c.b.first, c.b.last), (Some(5), Some(5)));
        // Both at u64::MAX: compared there.
        let c = compare(
            &mut open("c.trace", trace(u64::MAX, 3)),
            &mut open("d.trace", trace(u64::MAX, 4)),
        )
        .unwrap();
        let Outcome::Different(d) = c.outcome else {
            panic!("the gravities differ: {c:?}");
        };
        assert_eq!(
            (d.step, d.field, d.a.as_str(), d.b.as_str()),
            (Some(u64::MAX), "gravity", "3", "4")
        );
    }

    /// 2D, 4 bodies, seed 5, `steps` steps with an impulse every 7th, hash rows filled in.
    fn small_replay(steps: usize) -> Replay {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Two,
                bodies: 4,
                seed: 5,
            },
            None,
        );
        for i in 0..steps {
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
        r
    }

    /// `r` from step `from` on: the world there as the start snapshot, its rows and inputs.
    fn cut(r: &Replay, from: usize) -> Replay {
        let mut out = Replay::new(r.setup, r.link);
        let mut w = r.start_world();
        for i in 0..from {
            w.step(&r.inputs.ops(i));
        }
        out.start = Some(w);
        for i in from..r.step_count() {
            out.inputs.push_ops(&r.inputs.ops(i));
        }
        out.hashes = r.hashes.as_ref().map(|h| h[from..].to_vec());
        out
    }

    #[test]
    fn replays_starting_at_different_steps_compare_their_common_steps() {
        let dir = tempfile::tempdir().unwrap();
        let full = small_replay(60);
        let mut late = cut(&full, 17);
        let (pa, pb) = (dir.path().join("a.ostm"), dir.path().join("b.ostm"));
        full.write_file(&pa).unwrap();
        late.write_file(&pb).unwrap();
        let run = || {
            compare(
                &mut RowSource::open(&pa).unwrap(),
                &mut RowSource::open(&pb).unwrap(),
            )
            .unwrap()
        };
        let c = run();
        assert_eq!(c.outcome, Outcome::Identical);
        assert_eq!(
            c.compared,
            Some(Compared {
                first: 17,
                last: 60,
                rows: 44
            })
        );
        assert_eq!((c.a.first, c.a.last), (Some(0), Some(60)));
        assert_eq!((c.b.first, c.b.last), (Some(17), Some(60)));
        // One stored row of B (step 30, its row 13) changed: B's own run does not make it.
        let rows = late.hashes.as_mut().unwrap();
        let good = rows[13];
        rows[13] ^= 1;
        late.write_file(&pb).unwrap();
        let c = run();
        assert_eq!(
            c.outcome,
            Outcome::StoredRow {
                side: Side::B,
                row: StoredRow {
                    input: pb.display().to_string(),
                    row: 13,
                    step: 30,
                    stored: good ^ 1,
                    computed: good,
                }
            }
        );
        assert_eq!(c.compared.map(|c| (c.first, c.last)), Some((17, 29)));
    }

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
