//! The spool between the viewer's reader and its verifier: a first-in first-out queue of
//! what the host sent, bounded in memory, that spills records to an unlinked temporary
//! file when the verifier falls behind (docs/protocol.md, "The viewer's reader and
//! verifier").
//!
//! The reader pushes every message as it arrives and never waits for the verifier;
//! the verifier pops them in order. At most [`MEMORY_BYTES`] of records are held in
//! memory; further records go to the file, and come back from it in order. The file is
//! bounded ([`Limits::disk`], `--spool-max`): a record that would take it past its bound
//! is refused with [`Full`], and the reader then joins the host again once the verifier has
//! caught up (a gap, never a silent loss).

use bytes::Bytes;
use ostm_protocol::wire::{Record, RecordRun};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Records held in memory at most, in bytes (input bytes plus [`RECORD_OVERHEAD`] each).
pub const MEMORY_BYTES: usize = 8 * 1024 * 1024;
/// What one record costs in memory beyond its input bytes, for the bound above.
pub const RECORD_OVERHEAD: usize = 64;
/// The spill file's bound by default (`--spool-max`): 1 GiB.
pub const DEFAULT_DISK_BYTES: u64 = 1 << 30;

/// How much the spool may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Records in memory, in bytes ([`MEMORY_BYTES`]; smaller only in tests).
    pub memory: usize,
    /// The spill file's size at most, in bytes (`--spool-max`).
    pub disk: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory: MEMORY_BYTES,
            disk: DEFAULT_DISK_BYTES,
        }
    }
}

/// A record refused because the spill file would pass its bound (`--spool-max`).
#[derive(Debug, thiserror::Error)]
#[error(
    "the viewer's spool of records not yet verified reached --spool-max {} (an unlinked file in {}), {records} records behind the host",
    size_text(*.max),
    .dir.display()
)]
pub struct Full {
    pub max: u64,
    pub dir: PathBuf,
    /// Records waiting then, in memory and on disk.
    pub records: u64,
}

impl Full {
    /// `e` is a [`Full`]: the bound was reached, no write failed.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|i| i.is::<Full>())
    }
}

/// A size in bytes as people read it: `20.5 MiB (21495808 bytes)`, `512 bytes`.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {unit} ({bytes} bytes)", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

/// Parses a size: a whole number of bytes, or a number (with a fraction) followed by `K`,
/// `M`, `G` or `T` (optionally `KiB`, `MiB`, … or `KB`, `MB`, …; every unit a power of
/// 1 024; case and a space before the unit do not matter): `1G`, `512MiB`, `1.5 GB`.
///
/// # Errors
/// A sentence naming the text and what was expected.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim().to_ascii_lowercase());
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => u32::MAX,
    };
    let expected =
        || format!("expected a size such as 1G, 512M, 64K or a number of bytes, found {text:?}");
    if shift == u32::MAX || num.is_empty() {
        return Err(expected());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(1u64 << shift).ok_or_else(expected);
    }
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() && x * ((1u64 << shift) as f64) < u64::MAX as f64 => {
            Ok((x * (1u64 << shift) as f64) as u64)
        }
        _ => Err(expected()),
    }
}

/// The file is written and read in pieces of this size.
const CHUNK: usize = 256 * 1024;

/// One thing the verifier is told, in stream order: what a reader delivers.
pub use ostm_protocol::reader::Arrival as Item;

/// A place in the queue: an item in memory, or that many entries (records or runs) in
/// the file.
enum Entry {
    Item(Item),
    OnDisk(u64),
}

struct Inner {
    queue: VecDeque<Entry>,
    /// Bytes of records in memory (see [`MEMORY_BYTES`]).
    mem_bytes: usize,
    /// Records waiting, in memory and on disk.
    records: u64,
    disk: Disk,
    closed: bool,
    /// The verifier is waiting for an item (a push must wake it).
    waiting: bool,
    /// `OnDisk` entries in `queue`.
    disk_runs: usize,
    /// Records in the file.
    on_disk: u64,
}

impl Inner {
    fn push(&mut self, dir: &Path, limits: Limits, item: Item) -> io::Result<()> {
        let Some((cost, records)) = cost(&item) else {
            self.queue.push_back(Entry::Item(item));
            return Ok(());
        };
        let spilling = matches!(self.queue.back(), Some(Entry::OnDisk(_)));
        if spilling || self.mem_bytes + cost > limits.memory {
            if self.disk.size() + disk_bytes(&item) > limits.disk {
                return Err(io::Error::other(Full {
                    max: limits.disk,
                    dir: dir.to_path_buf(),
                    records: self.records,
                }));
            }
            self.disk
                .append(dir, &item)
                .map_err(|e| self.disk.failed(dir, e))?;
            self.on_disk += records;
            match self.queue.back_mut() {
                Some(Entry::OnDisk(n)) => *n += 1,
                _ => {
                    self.queue.push_back(Entry::OnDisk(1));
                    self.disk_runs += 1;
                }
            }
        } else {
            self.mem_bytes += cost;
            self.queue.push_back(Entry::Item(item));
        }
        self.records += records;
        Ok(())
    }

    fn pop(&mut self) -> io::Result<Option<Item>> {
        let item = match self.queue.front_mut() {
            None => return Ok(None),
            Some(Entry::OnDisk(n)) => {
                let item = self.disk.take()?;
                *n -= 1;
                if *n == 0 {
                    self.queue.pop_front();
                    self.disk_runs -= 1;
                    if self.disk_runs == 0 {
                        self.disk.reset()?;
                    }
                }
                let records = cost(&item).map_or(0, |(_, n)| n);
                self.on_disk -= records;
                self.records -= records;
                item
            }
            Some(Entry::Item(_)) => match self.queue.pop_front() {
                Some(Entry::Item(item)) => {
                    if let Some((cost, records)) = cost(&item) {
                        self.mem_bytes -= cost;
                        self.records -= records;
                    }
                    item
                }
                _ => return Ok(None),
            },
        };
        Ok(Some(item))
    }
}

/// The bytes an item takes in the spill file.
fn disk_bytes(item: &Item) -> u64 {
    match item {
        Item::Record(r) => (RECORD_HEAD + r.input.len()) as u64,
        Item::Records(run) => (RUN_HEAD + run.frames().len()) as u64,
        _ => 0,
    }
}

/// What a record item costs the memory bound, and the records it carries; `None` for
/// other items.
fn cost(item: &Item) -> Option<(usize, u64)> {
    match item {
        Item::Record(r) => Some((r.input.len() + RECORD_OVERHEAD, 1)),
        Item::Records(run) => Some((run.frames().len() + RECORD_OVERHEAD, run.count())),
        _ => None,
    }
}

/// The spill file: records at `[read, written + pending.len())`.
struct Disk {
    file: Option<File>,
    /// Bytes in the file.
    written: u64,
    /// Bytes not yet written, which follow `written`.
    pending: Vec<u8>,
    /// Offset of the next record to read.
    read: u64,
    /// Bytes read ahead from `read` on.
    ahead: Vec<u8>,
    ahead_pos: usize,
    /// Largest the file has been, in bytes.
    peak: u64,
    /// The stream's name in the errors of runs read back (one name per session).
    name: Option<Arc<str>>,
}

/// The spool; shared by the reader and the verifier.
pub struct Spool {
    inner: Mutex<Inner>,
    ready: Condvar,
    dir: PathBuf,
    limits: Limits,
}

/// How many records are waiting, and how many of them are on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub records: u64,
    pub on_disk: u64,
    /// The largest the spill file has been, in bytes.
    pub peak_disk_bytes: u64,
}

impl Spool {
    /// A spool whose spill file, once needed, is an unlinked temporary file in `dir`.
    pub fn new(dir: &Path, limits: Limits) -> Spool {
        Spool {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                mem_bytes: 0,
                records: 0,
                disk: Disk {
                    file: None,
                    written: 0,
                    pending: Vec::new(),
                    read: 0,
                    ahead: Vec::new(),
                    ahead_pos: 0,
                    peak: 0,
                    name: None,
                },
                closed: false,
                waiting: false,
                disk_runs: 0,
                on_disk: 0,
            }),
            ready: Condvar::new(),
            dir: dir.to_path_buf(),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends an item (never waits for the verifier).
    ///
    /// # Errors
    /// The spill file cannot be created or written.
    pub fn push(&self, item: Item) -> io::Result<()> {
        self.push_all(&mut vec![item])
    }

    /// Appends every item of `items` in order, under one lock, and empties it.
    ///
    /// # Errors
    /// The spill file cannot be created or written.
    pub fn push_all(&self, items: &mut Vec<Item>) -> io::Result<()> {
        let mut g = self.lock();
        let inner = &mut *g;
        for item in items.drain(..) {
            inner.push(&self.dir, self.limits, item)?;
        }
        let wake = inner.waiting;
        drop(g);
        if wake {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// No more items will come (the reader has stopped); a waiting `pop` returns.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// The next item, waiting at most `wait`. `Ok(None)` when none came in time or the
    /// spool is closed and empty.
    ///
    /// # Errors
    /// A record cannot be read back from the spill file.
    pub fn pop(&self, wait: Duration) -> io::Result<Option<Item>> {
        let mut out = VecDeque::new();
        self.pop_into(wait, &mut out, 1)?;
        Ok(out.pop_front())
    }

    /// Moves up to `max` items, in order, to the back of `out`, waiting at most `wait` for
    /// the first; returns how many it moved (0: none came in time, or closed and empty).
    ///
    /// # Errors
    /// A record cannot be read back from the spill file.
    pub fn pop_into(
        &self,
        wait: Duration,
        out: &mut VecDeque<Item>,
        max: usize,
    ) -> io::Result<usize> {
        let mut g = self.lock();
        if g.queue.is_empty() && !g.closed {
            g.waiting = true;
            g = self
                .ready
                .wait_timeout(g, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            g.waiting = false;
        }
        let inner = &mut *g;
        let mut moved = 0;
        while moved < max {
            match inner.pop()? {
                Some(item) => out.push_back(item),
                None => break,
            }
            moved += 1;
        }
        Ok(moved)
    }

    /// What to add to `e`, a failed write of the recording, when the disk is full: how much
    /// the spool's file (which no `ls` shows) held, and where.
    pub fn disk_note(&self, e: &io::Error) -> String {
        if !matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        ) {
            return String::new();
        }
        format!(
            "; the spool of records not yet verified held {} of it, an unlinked file in {} (--spool-dir puts it elsewhere, --spool-max bounds it)",
            size_text(self.lock().disk.size()),
            self.dir.display()
        )
    }

    /// Room again after [`Full`]: nothing waits in the spill file (the verifier has taken
    /// all of it, and the file is empty again) and memory is at most half full.
    pub fn disk_drained(&self) -> bool {
        let g = self.lock();
        g.disk_runs == 0 && g.mem_bytes <= self.limits.memory / 2
    }

    /// Records waiting now.
    pub fn backlog(&self) -> Backlog {
        let g = self.lock();
        let on_disk = g.on_disk;
        Backlog {
            records: g.records,
            on_disk,
            peak_disk_bytes: g.disk.peak,
        }
    }
}

/// An entry in the spill file: a kind byte, then for a record (0) u64 step, u64 hash, u16
/// input length, the input; for a run of record frames (1) u64 stream offset, u64 first
/// step, u64 count, u32 length, the frames. Little-endian.
const RECORD_HEAD: usize = 1 + 8 + 8 + 2;
const RUN_HEAD: usize = 1 + 8 + 8 + 8 + 4;

impl Disk {
    /// The file's size, with what is still to be written to it.
    fn size(&self) -> u64 {
        self.written + self.pending.len() as u64
    }

    /// `e`, a failed write to the file, saying how much it held and where.
    fn failed(&self, dir: &Path, e: io::Error) -> io::Error {
        let why = ostm_protocol::format::recording::why_io(&e);
        io::Error::new(
            e.kind(),
            format!(
                "{e}{why}; the spool of records not yet verified held {}, an unlinked file in {} (--spool-dir puts it elsewhere, --spool-max bounds it)",
                size_text(self.size()),
                dir.display()
            ),
        )
    }

    fn append(&mut self, dir: &Path, item: &Item) -> io::Result<()> {
        if self.file.is_none() {
            self.file = Some(tempfile::tempfile_in(dir)?);
        }
        let p = &mut self.pending;
        match item {
            Item::Record(r) => {
                p.push(0);
                p.extend_from_slice(&r.step.to_le_bytes());
                p.extend_from_slice(&r.hash.to_le_bytes());
                p.extend_from_slice(&(r.input.len() as u16).to_le_bytes());
                p.extend_from_slice(&r.input);
            }
            Item::Records(run) => {
                p.push(1);
                p.extend_from_slice(&run.base().to_le_bytes());
                p.extend_from_slice(&run.first_step().to_le_bytes());
                p.extend_from_slice(&run.count().to_le_bytes());
                p.extend_from_slice(&(run.frames().len() as u32).to_le_bytes());
                p.extend_from_slice(run.frames());
                if self.name.is_none() {
                    self.name = Some(Arc::from(run.name()));
                }
            }
            _ => return Err(io::Error::other("only records are spilled")),
        }
        if self.pending.len() >= CHUNK {
            self.write_pending()?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> io::Result<()> {
        if let Some(f) = &self.file {
            f.write_all_at(&self.pending, self.written)?;
            self.written += self.pending.len() as u64;
            self.peak = self.peak.max(self.written);
            self.pending.clear();
        }
        Ok(())
    }

    /// Makes at least `n` bytes from the read position available in `ahead`.
    fn want(&mut self, n: usize) -> io::Result<()> {
        if self.ahead.len() - self.ahead_pos >= n {
            return Ok(());
        }
        self.ahead.drain(..self.ahead_pos);
        self.ahead_pos = 0;
        let mut at = self.read + self.ahead.len() as u64;
        while self.ahead.len() < n {
            if at >= self.written {
                // What is asked for has not reached the file yet.
                self.write_pending()?;
            }
            let Some(f) = &self.file else {
                return Err(io::Error::other("the spool's file is missing"));
            };
            let left = self.written.saturating_sub(at);
            if left == 0 {
                return Err(io::Error::other("the spool's file ends inside a record"));
            }
            let take = (left as usize).min(CHUNK.max(n));
            let old = self.ahead.len();
            self.ahead.resize(old + take, 0);
            f.read_exact_at(&mut self.ahead[old..], at)?;
            at += take as u64;
        }
        Ok(())
    }

    fn take(&mut self) -> io::Result<Item> {
        self.want(1)?;
        let kind = self.ahead[self.ahead_pos];
        let head = if kind == 0 { RECORD_HEAD } else { RUN_HEAD };
        self.want(head)?;
        let h = &self.ahead[self.ahead_pos..self.ahead_pos + head];
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let len = if kind == 0 {
            u16::from_le_bytes([h[17], h[18]]) as usize
        } else {
            u32::from_le_bytes([h[25], h[26], h[27], h[28]]) as usize
        };
        let (a, b, c) = (word(1), word(9), if kind == 0 { 0 } else { word(17) });
        self.want(head + len)?;
        let start = self.ahead_pos + head;
        let bytes = Bytes::copy_from_slice(&self.ahead[start..start + len]);
        self.ahead_pos += head + len;
        self.read += (head + len) as u64;
        Ok(if kind == 0 {
            Item::Record(Record {
                step: a,
                hash: b,
                input: bytes,
            })
        } else {
            let name = self.name.clone().unwrap_or_else(|| Arc::from("stream"));
            Item::Records(RecordRun::from_parts(bytes, a, b, c, name))
        })
    }

    /// Everything on disk has been read: start the file over.
    fn reset(&mut self) -> io::Result<()> {
        if self.read < self.written + self.pending.len() as u64 {
            return Ok(());
        }
        if let Some(f) = &self.file {
            f.set_len(0)?;
        }
        self.written = 0;
        self.read = 0;
        self.pending.clear();
        self.ahead.clear();
        self.ahead_pos = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, len: usize) -> Record {
        Record {
            step,
            hash: step.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            input: Bytes::from(vec![(step % 251) as u8; len]),
        }
    }

    /// Far more records than memory holds, with other items among them: every one comes
    /// back once, in order, and memory never holds more than its bound.
    #[test]
    fn records_spill_to_disk_and_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path(), Limits::default());
        let n = 40_000u64;
        let mut popped = 0u64;
        let mut expect = 0u64;
        for s in 0..n {
            spool
                .push(Item::Record(record(s, (s % 700) as usize)))
                .unwrap();
            if s == 30_000 {
                spool
                    .push(Item::Lost {
                        why: "marker".into(),
                        last: false,
                    })
                    .unwrap();
            }
            assert!(spool.lock().mem_bytes <= MEMORY_BYTES);
            // Drain a little now and then, as a slow verifier would.
            if s % 7 == 0 {
                if let Some(Item::Record(r)) = spool.pop(Duration::ZERO).unwrap() {
                    assert_eq!(r, record(expect, (expect % 700) as usize));
                    expect += 1;
                    popped += 1;
                }
            }
        }
        assert!(spool.backlog().on_disk > 0, "the test spilled");
        let mut saw_marker = false;
        while let Some(item) = spool.pop(Duration::ZERO).unwrap() {
            match item {
                Item::Record(r) => {
                    assert_eq!(r, record(expect, (expect % 700) as usize));
                    expect += 1;
                    popped += 1;
                }
                Item::Lost { .. } => {
                    assert_eq!(expect, 30_001, "the marker comes after record 30 000");
                    saw_marker = true;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(saw_marker);
        assert_eq!(popped, n);
        assert_eq!(
            spool.backlog(),
            Backlog {
                records: 0,
                on_disk: 0,
                peak_disk_bytes: spool.backlog().peak_disk_bytes
            }
        );
    }

    /// Runs of record frames spill whole and come back as they went in, among single
    /// records, with their records counted in the backlog.
    #[test]
    fn runs_spill_to_disk_and_come_back_whole() {
        use bytes::BytesMut;
        use ostm_protocol::wire::{Codec, ToViewer, ViewerCodec};
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path(), Limits::default());
        let mut codec = ViewerCodec::new("host");
        let mut step = 0u64;
        let mut runs = Vec::new();
        while spool.backlog().on_disk == 0 || runs.len() < 2000 {
            let mut buf = BytesMut::new();
            for _ in 0..(runs.len() % 300 + 1) {
                let r = record(step, runs.len() % 40);
                step += 1;
                let f = Codec::<ToViewer, ToViewer>::encode_frame(&ToViewer::Record(r)).unwrap();
                buf.extend_from_slice(&f.0);
            }
            let first = step - (runs.len() % 300 + 1) as u64;
            let run = codec.take_records(&mut buf, first).unwrap();
            assert!(buf.is_empty());
            spool.push(Item::Records(run.clone())).unwrap();
            runs.push(Item::Records(run));
            if runs.len() % 50 == 0 {
                let r = record(step, 3);
                spool.push(Item::Record(r.clone())).unwrap();
                runs.push(Item::Record(r));
                step += 1;
                codec = ViewerCodec::new("host");
            }
            assert!(spool.lock().mem_bytes <= MEMORY_BYTES);
        }
        assert_eq!(spool.backlog().records, step);
        for want in runs {
            let got = spool.pop(Duration::ZERO).unwrap().unwrap();
            match (got, want) {
                (Item::Records(a), Item::Records(b)) => {
                    assert_eq!(a.frames(), b.frames());
                    assert_eq!(
                        (a.base(), a.first_step(), a.count(), a.name()),
                        (b.base(), b.first_step(), b.count(), b.name())
                    );
                }
                (Item::Record(a), Item::Record(b)) => assert_eq!(a, b),
                (a, b) => panic!("{a:?} came back for {b:?}"),
            }
        }
        assert_eq!(spool.backlog().records, 0);
    }

    /// Past its bound the file takes no more records: the push says so (a [`Full`], naming
    /// the bound and the directory), nothing of the record is kept, and once the verifier
    /// has taken what was on disk the spool takes records again.
    #[test]
    fn the_spill_file_is_bounded_and_takes_records_again_once_drained() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            memory: 4 * 1024,
            disk: 64 * 1024,
        };
        let spool = Spool::new(dir.path(), limits);
        let mut step = 0;
        let e = loop {
            match spool.push(Item::Record(record(step, 100))) {
                Ok(()) => step += 1,
                Err(e) => break e,
            }
            assert!(step < 10_000, "the bound was never reached");
        };
        assert!(Full::is(&e), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("--spool-max 64.0 KiB (65536 bytes)")
                && text.contains(&dir.path().display().to_string()),
            "{text}"
        );
        assert!(spool.lock().disk.size() <= limits.disk);
        assert_eq!(spool.backlog().records, step);
        assert!(!spool.disk_drained());
        for s in 0..step {
            match spool.pop(Duration::ZERO).unwrap() {
                Some(Item::Record(r)) => assert_eq!(r.step, s),
                other => panic!("{other:?}"),
            }
        }
        assert!(spool.disk_drained());
        spool.push(Item::Record(record(step, 100))).unwrap();
        // With no room on disk at all, memory is the bound: room again once half of it
        // has been taken.
        let spool = Spool::new(
            dir.path(),
            Limits {
                memory: 4 * 1024,
                disk: 0,
            },
        );
        let mut n = 0;
        while spool.push(Item::Record(record(n, 100))).is_ok() {
            n += 1;
        }
        assert!(!spool.disk_drained());
        while !spool.disk_drained() {
            assert!(spool.pop(Duration::ZERO).unwrap().is_some());
        }
        assert!(spool.backlog().records > 0 && spool.backlog().records <= n / 2 + 1);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5 gb"), Ok(3 << 29));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("0"), Ok(0));
        for bad in ["", "G", "1X", "-1M", "99999999999T"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("expected a size such as 1G"), "{bad}: {e}");
        }
        assert_eq!(size_text(512), "512 bytes");
        assert_eq!(size_text(3 << 19), "1.5 MiB (1572864 bytes)");
    }

    #[test]
    fn a_closed_empty_spool_returns_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path(), Limits::default());
        spool.close();
        assert!(spool.pop(Duration::from_secs(600)).unwrap().is_none());
    }
}
