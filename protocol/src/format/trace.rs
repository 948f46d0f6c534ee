//! Per-step traces: the text format, written and read a line at a time.
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
//! A trace reader holds one line at a time. A replay's trace is written as its steps are
//! run ([`trace_replay`], over [`ReplayTracer`]).

use super::replay_stream::{ReplayStream, ReplayTracer};
use crate::error::FormatError;
use crate::format::ostm::MAGIC;
use crate::sim::link::{Link, Role};
use crate::sim::world::{Body, Dims, Setup, World, MAX_BODIES};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, Write};
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
    pub(super) world: World,
    pub(super) hash: u64,
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
                    crate::sim::world::BODY_FIELDS[k],
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
