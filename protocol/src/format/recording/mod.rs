//! Writes a replay step by step, crash-safe, holding neither its inputs nor its hash rows
//! in memory.
//!
//! The `.ostm` layout puts the hash rows (one per step) before the inputs, and the step
//! count before both, so the finished file cannot be written until the session ends. While
//! it runs, the recorder appends to one **in-progress file**, `FILE.part`
//! ([`journal`]: the finished file's header and start snapshot, row 0 and a check of
//! them, then one record per step: input, hash row and the record's check). Its header is
//! written and flushed when recording starts; the caller flushes the rest on its schedule
//! ([`Recorder::flush_due`], [`FLUSH_EVERY`]). A process killed at any moment leaves a
//! `FILE.part` that [`journal::assemble`] (`ostm-viewer recover`) turns into a valid
//! `.ostm` holding every whole step it reached. A clean [`Recorder::finish`] assembles
//! `FILE` from it (written to `FILE.part.tmp`, synced, renamed over `FILE`, so a finished
//! file is always whole) and removes `FILE.part`. A write that fails (a full disk, a
//! file-size limit) leaves `FILE.part` as it was for `recover`, and nothing else.

pub mod journal;

use crate::format::ostm::{flags_for, write_header, MAX_STEPS};
use crate::sim::link::Link;
use crate::sim::world::{Setup, World};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use journal::{assemble, journal_path, why_io, Assembled, DropKind, Dropped, JOURNAL_MAGIC};
use journal::{MAX_RECORD, RECORD_OVERHEAD};

/// The longest the recorder's buffer may hold written steps before [`Recorder::flush_due`]
/// hands them to the operating system. The callers (viewer and host) call it on every
/// step and at least every 250 ms when no step comes, so a step is in the file at most
/// about 0.5 s after it was recorded.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// The recorder's buffer: large enough that flushing is what puts steps in the file. A
/// fuller buffer is written out at once.
const BUFFER_BYTES: usize = 64 * 1024;

/// How a recorder puts its steps on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Durability {
    /// `fdatasync` the in-progress file at every flush (survives a power loss up to the
    /// last flush), not only hand it to the operating system (survives a killed process).
    pub sync: bool,
    /// Test only (a planted fault): never flush; steps reach the file only when the
    /// buffer fills.
    pub no_flush: bool,
}

/// A replay being recorded: start snapshot, then one input and one hash per step.
pub struct Recorder {
    path: PathBuf,
    journal: PathBuf,
    setup: Setup,
    steps: u32,
    /// Steps whose whole record the operating system has taken (written out).
    flushed: u32,
    /// The header check, the seed of every record's check.
    check: u64,
    file: File,
    /// Records not yet written out: `steps - flushed` of them, the first possibly
    /// without the bytes a failed write took.
    buf: Vec<u8>,
    durability: Durability,
    /// Steps written since the last flush.
    unflushed: bool,
    last_flush: Option<Instant>,
    /// A simulated disk ([`Recorder::fill_disk_after`]): the bytes the file may still take.
    room: Option<u64>,
}

impl Recorder {
    /// Starts a recording of a world as it is now, into `path` (in progress in
    /// `path.part`, which is created or truncated). With `with_start_snapshot` the replay
    /// holds the world's snapshot (flag bit 1), else it must be at step 0 and the replay
    /// starts from the setup. The header, start snapshot and row 0 are flushed before it
    /// returns.
    ///
    /// # Errors
    /// The world cannot start a replay without a snapshot, or the file cannot be written.
    pub fn create(path: &Path, world: &World, with_start_snapshot: bool) -> io::Result<Recorder> {
        Recorder::create_with(path, world, with_start_snapshot, Durability::default())
    }

    /// [`Recorder::create`] with a stated [`Durability`].
    ///
    /// # Errors
    /// As [`Recorder::create`].
    pub fn create_with(
        path: &Path,
        world: &World,
        with_start_snapshot: bool,
        durability: Durability,
    ) -> io::Result<Recorder> {
        if !with_start_snapshot
            && (world.step != 0 || *world != World::new(world.setup(), world.link()))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a recording without a start snapshot must start from the setup's world at step 0",
            ));
        }
        let journal = journal_path(path);
        // The header is written under another name and the file renamed to `FILE.part`
        // once it holds the header: a writer killed in between leaves no `.part` without
        // its header (docs/replay-format.md, "The in-progress file").
        let fresh = journal::fresh_path(path);
        let file = File::create(&fresh)?;
        let (head, check) = journal::header_bytes(world, with_start_snapshot);
        let mut r = Recorder {
            path: path.to_path_buf(),
            journal,
            setup: world.setup(),
            steps: 0,
            flushed: 0,
            check,
            file,
            buf: Vec::with_capacity(BUFFER_BYTES + MAX_RECORD),
            durability,
            unflushed: false,
            last_flush: None,
            room: None,
        };
        let started = (|| -> io::Result<()> {
            r.file.write_all(&head)?;
            if durability.sync {
                r.file.sync_all()?;
            }
            std::fs::rename(&fresh, &r.journal)?;
            // With sync, the name `FILE.part` survives a power loss too.
            if durability.sync {
                crate::format::sync_dir(&r.journal)?;
            }
            Ok(())
        })();
        if let Err(e) = started {
            // Nothing was recorded: no `.part.new` is left behind (a full disk, a limit).
            let _ = std::fs::remove_file(&fresh);
            return Err(io::Error::new(
                e.kind(),
                format!("cannot write {}: {e}{}", fresh.display(), why_io(&e)),
            ));
        }
        Ok(r)
    }

    /// Steps recorded so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Steps in the in-progress file: those whose whole record the operating system has
    /// taken (after a failed write, the file may also hold the first bytes of the next).
    pub fn flushed(&self) -> u32 {
        self.flushed
    }

    /// The file being written (once finished).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The in-progress file (`FILE.part`).
    pub fn journal(&self) -> &Path {
        &self.journal
    }

    /// The setup of the world recorded.
    pub fn setup(&self) -> Setup {
        self.setup
    }

    /// Records one step: its input bytes and the world hash after it (in the buffer until
    /// the next flush).
    ///
    /// # Errors
    /// The replay is full, the input too long, or a write fails.
    pub fn push(&mut self, input: &[u8], hash_after: u64) -> io::Result<()> {
        if self.steps >= MAX_STEPS {
            return Err(io::Error::other("a replay holds at most 16 777 216 steps"));
        }
        let len = u16::try_from(input.len())
            .map_err(|_| io::Error::other("step input longer than 65535 bytes"))?;
        let at = self.buf.len();
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(input);
        self.buf.extend_from_slice(&hash_after.to_le_bytes());
        let check = journal::record_check(self.check, &self.buf[at..]);
        self.buf.extend_from_slice(&check.to_le_bytes());
        self.steps += 1;
        self.unflushed = true;
        if self.buf.len() >= BUFFER_BYTES {
            self.write_out()?;
        }
        Ok(())
    }

    /// A simulated disk that fills (the seeded simulation of whole sessions): from now on
    /// the file takes at most `bytes` more bytes; a write past them takes what fits and
    /// then fails as on a full disk (ENOSPC), as the kernel's writes do. The real disk's
    /// own limits apply as well.
    pub fn fill_disk_after(&mut self, bytes: u64) {
        self.room = Some(bytes);
    }

    /// Writes the buffer out. On failure the bytes the file took leave the buffer and
    /// the whole records among them are counted as written, so [`Recorder::flushed`] is
    /// what the file holds, and a later write continues exactly where the file ends.
    fn write_out(&mut self) -> io::Result<()> {
        let mut done = 0;
        while done < self.buf.len() {
            match write_within(&mut self.file, &mut self.room, &self.buf[done..]) {
                Ok(0) => {
                    return Err(self.write_failed(done, io::ErrorKind::WriteZero.into()));
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.write_failed(done, e)),
            }
        }
        self.buf.clear();
        self.flushed = self.steps;
        Ok(())
    }

    /// A write that failed after the file took `done` bytes of the buffer.
    fn write_failed(&mut self, done: usize, e: io::Error) -> io::Error {
        let mut at = 0;
        while let Some(&[a, b]) = self.buf.get(at..at + 2) {
            let end = at + RECORD_OVERHEAD + u16::from_le_bytes([a, b]) as usize;
            if end > done {
                break;
            }
            self.flushed += 1;
            at = end;
        }
        self.buf.drain(..done);
        self.failed(e)
    }

    /// Hands every buffered step to the operating system (and syncs it with
    /// [`Durability::sync`]).
    ///
    /// # Errors
    /// A write or sync fails.
    pub fn flush(&mut self, now: Instant) -> io::Result<()> {
        self.last_flush = Some(now);
        if !self.unflushed || self.durability.no_flush {
            return Ok(());
        }
        self.write_out()?;
        if self.durability.sync {
            self.file.sync_data().map_err(|e| self.failed(e))?;
        }
        self.unflushed = false;
        Ok(())
    }

    /// Flushes when [`FLUSH_EVERY`] has passed since the last flush; `now` is the
    /// caller's clock. Returns whether it flushed.
    ///
    /// # Errors
    /// A write or sync fails.
    pub fn flush_due(&mut self, now: Instant) -> io::Result<bool> {
        let due = self
            .last_flush
            .is_none_or(|t| now.saturating_duration_since(t) >= FLUSH_EVERY);
        if due {
            self.flush(now)?;
        }
        Ok(due)
    }

    /// Writes the whole replay, removes the in-progress file; returns the step count.
    ///
    /// # Errors
    /// A write fails (the in-progress file is then left as it is, for `recover`, and
    /// nothing else: no `FILE.part.tmp`).
    pub fn finish(mut self) -> io::Result<u32> {
        self.write_out()?;
        drop(self.file);
        let done = assemble(&self.journal, &self.path, false).map_err(|e| {
            let kind = match &e {
                journal::AssembleError::Output { err, .. } => err.kind(),
                journal::AssembleError::Input(_) => io::ErrorKind::InvalidData,
            };
            io::Error::new(kind, e.to_string())
        })?;
        if done.steps != self.steps || done.dropped.is_some() {
            return Err(io::Error::other(format!(
                "{}: the in-progress file holds {} whole steps, {} were recorded",
                self.journal.display(),
                done.steps,
                self.steps
            )));
        }
        std::fs::remove_file(&self.journal)?;
        Ok(self.steps)
    }

    /// `e`, a failed write to the in-progress file, as a sentence naming the file.
    fn failed(&self, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("{}: {e}{}", self.journal.display(), why_io(&e)),
        )
    }
}

/// One write to `file`, within the simulated disk's `room` when there is one
/// ([`Recorder::fill_disk_after`]).
fn write_within(file: &mut File, room: &mut Option<u64>, bytes: &[u8]) -> io::Result<usize> {
    let Some(left) = *room else {
        return file.write(bytes);
    };
    if left == 0 && !bytes.is_empty() {
        // ENOSPC: what a full disk's write returns.
        return Err(io::Error::from_raw_os_error(28));
    }
    let fits = bytes.len().min(usize::try_from(left).unwrap_or(usize::MAX));
    let n = file.write(&bytes[..fits])?;
    *room = Some(left - n as u64);
    Ok(n)
}

/// The flags word of a recording: hash rows, and a start snapshot and link as the world has.
fn recording_flags(with_start_snapshot: bool, link: Option<Link>) -> u16 {
    flags_for(true, with_start_snapshot, link.is_some())
}

/// The finished file's header as a recording of `world` starts it (step count 0, the
/// start snapshot when asked for).
fn ostm_header(world: &World, with_start_snapshot: bool) -> Vec<u8> {
    let link = world.link();
    let mut head = Vec::new();
    write_header(
        &mut head,
        &world.setup(),
        link,
        0,
        recording_flags(with_start_snapshot, link),
    );
    if with_start_snapshot {
        let s = world.snapshot();
        head.extend_from_slice(&(s.len() as u32).to_le_bytes());
        head.extend_from_slice(&s);
    }
    head
}

/// The path of the `n`-th file of a recording (0 is the base path itself):
/// `dir/session.ostm` gives `dir/session.1.ostm`; a name without extension gets `.1`.
pub fn numbered(base: &Path, n: u32) -> PathBuf {
    if n == 0 {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match base.extension() {
        Some(ext) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{n}"),
    };
    base.with_file_name(name)
}

/// Checks, before anything is recorded, that a recording can be written to `base`: not a
/// directory, in a directory that exists and can be written (a file is created there and
/// removed), and, unless `force`, that neither `base` nor its in-progress file nor any
/// numbered file of it (`base.1.ostm`, … and their `.part`) exists yet.
///
/// # Errors
/// What is in the way, as a sentence naming the path.
pub fn check_target(base: &Path, force: bool) -> Result<(), String> {
    let shown = base.display();
    if base.as_os_str().is_empty() {
        return Err("the recording path is empty".into());
    }
    if base.is_dir() {
        return Err(format!("{shown} is a directory; name a file to record to"));
    }
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "cannot record to {shown}: the directory {} does not exist",
            dir.display()
        ));
    }
    if !force {
        let journal = journal_path(base);
        if journal.exists() {
            return Err(format!(
                "{} exists: an unfinished recording (`ostm-viewer recover {}` turns it into {shown}); --force overwrites it",
                journal.display(),
                journal.display()
            ));
        }
        if base.exists() {
            return Err(format!("{shown} exists; --force overwrites it"));
        }
        if let Some(n) = existing_numbered(base, &dir) {
            return Err(format!(
                "{} exists (a numbered file of an earlier recording to {shown}); --force overwrites it",
                n.display()
            ));
        }
    }
    // Writable: create the in-progress file's name now and remove it again (an existing
    // one is kept when it is not ours to remove: with --force it is truncated later).
    let probe = suffixed_probe(base);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("cannot record to {shown}: {e}")),
    }
}

/// A file name beside `base` that no recording uses, to test that the directory is writable.
fn suffixed_probe(base: &Path) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(format!(".probe-{}", std::process::id()));
    PathBuf::from(s)
}

/// A numbered file of `base` (or its in-progress file) that exists in `dir`.
fn existing_numbered(base: &Path, dir: &Path) -> Option<PathBuf> {
    let stem = base.file_stem()?.to_string_lossy().into_owned();
    let ext = base.extension().map(|e| e.to_string_lossy().into_owned());
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let name = name.strip_suffix(".part").unwrap_or(&name);
        let Some(rest) = name.strip_prefix(&format!("{stem}.")) else {
            continue;
        };
        let number = match &ext {
            Some(ext) => rest.strip_suffix(&format!(".{ext}")),
            None => Some(rest),
        };
        if number.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            return Some(entry.path());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{check_target, journal_path, numbered, Recorder};
    use std::path::Path;

    /// The simulated disk that fills: the file takes exactly the room it had, the write
    /// past it fails with ENOSPC naming the part, `flushed` counts the whole records the
    /// file holds, and `assemble` gives exactly those steps (the cut one a torn tail).
    #[test]
    fn a_simulated_full_disk_fails_like_a_real_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f.ostm");
        let setup = crate::Setup {
            dims: crate::Dims::Two,
            bodies: 4,
            seed: 1,
        };
        let world = crate::World::new(setup, None);
        let mut rec = Recorder::create(&out, &world, true).unwrap();
        let part = journal_path(&out);
        for i in 0..40u64 {
            rec.push(&[], i).unwrap();
        }
        rec.flush(std::time::Instant::now()).unwrap();
        let before = std::fs::metadata(&part).unwrap().len();
        // Records without input take 14 bytes: room for 5 and a part of the 6th.
        rec.fill_disk_after(5 * 14 + 9);
        for i in 40..60u64 {
            rec.push(&[], i).unwrap();
        }
        let e = rec.flush(std::time::Instant::now()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{}: No space left on device", part.display()))
                && e.to_string().ends_with("(the disk is full)"),
            "{e}"
        );
        assert_eq!(rec.flushed(), 45);
        assert_eq!(std::fs::metadata(&part).unwrap().len(), before + 5 * 14 + 9);
        // Still full: nothing more is taken.
        assert!(rec.flush(std::time::Instant::now()).is_err());
        assert_eq!(rec.flushed(), 45);
        drop(rec);
        // Not verified: the rows here are not the world's.
        let got = super::assemble(&part, &out, false).unwrap();
        assert_eq!(got.steps, 45);
        assert_eq!(got.dropped.map(|d| d.kind.name()), Some("torn_tail"));
    }

    #[test]
    fn numbered_files_keep_the_extension() {
        assert_eq!(numbered(Path::new("d/s.ostm"), 0), Path::new("d/s.ostm"));
        assert_eq!(numbered(Path::new("d/s.ostm"), 2), Path::new("d/s.2.ostm"));
        assert_eq!(numbered(Path::new("s"), 1), Path::new("s.1"));
    }

    #[test]
    fn targets_are_checked_before_recording() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let base = d.join("s.ostm");
        assert_eq!(check_target(&base, false), Ok(()));
        assert_eq!(
            std::fs::read_dir(d).unwrap().count(),
            0,
            "nothing left behind"
        );
        let e = check_target(d, false).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_target(&d.join("no/such/s.ostm"), false).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        for existing in ["s.ostm", "s.ostm.part", "s.3.ostm", "s.2.ostm.part"] {
            let p = d.join(existing);
            std::fs::write(&p, b"x").unwrap();
            let e = check_target(&base, false).unwrap_err();
            assert!(e.contains(existing) && e.contains("--force"), "{e}");
            assert_eq!(check_target(&base, true), Ok(()), "{existing}");
            std::fs::remove_file(&p).unwrap();
        }
        // Other files beside it are not in the way.
        std::fs::write(d.join("s.x.ostm"), b"x").unwrap();
        std::fs::write(d.join("other.ostm"), b"x").unwrap();
        assert_eq!(check_target(&base, false), Ok(()));
    }
}
