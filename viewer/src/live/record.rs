//! A live recording: one `.ostm` per unbroken run of records.
//!
//! A viewer's records are contiguous until the host resyncs it; the steps it missed are
//! in no file. So a resync closes the current file (whole and valid up to the gap) and
//! the recording continues in a new file numbered after it: `session.ostm`, then
//! `session.1.ostm`, `session.2.ostm`, … Each file starts from its own start snapshot
//! (flag bit 1) and verifies on its own. While a file is being written it is
//! `FILE.part` (crash-safe: see `ostm_protocol::format::recording`).
//!
//! A write that fails (a full disk, a file-size limit) breaks the recording: the error
//! names the `FILE.part` it left, what that holds for sure and that `ostm-viewer recover`
//! is next; nothing more is written to it, and the files finished before are kept.

pub use ostm_protocol::format::recording::numbered;
use ostm_protocol::format::recording::{journal_path, Durability, Recorder};
use ostm_protocol::World;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A finished file: its path and step count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub steps: u32,
    /// The step its start snapshot is at.
    pub start_step: u64,
}

/// An in-progress file a failed write left, for `ostm-viewer recover`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// `FILE.part`.
    pub part: PathBuf,
    /// The step its start snapshot is at.
    pub start_step: u64,
    /// Steps it holds: whole records written before the failure.
    pub steps: u32,
}

/// What finishing a recording gave: the files finished, the in-progress files left for
/// `recover`, and why they were left.
#[derive(Debug, Default)]
pub struct Finished {
    pub files: Vec<Written>,
    pub unfinished: Vec<Unfinished>,
    pub error: Option<io::Error>,
}

/// The recording in progress.
pub struct Recording {
    base: PathBuf,
    index: u32,
    /// The file being written; `None` once a write failed.
    current: Option<Recorder>,
    start_step: u64,
    done: Vec<Written>,
    left: Vec<Unfinished>,
    durability: Durability,
    /// `--force`: numbered files that exist are overwritten rather than passed over.
    force: bool,
}

impl Recording {
    /// Starts recording at `world` (the probe snapshot) into `base`; with `force`, numbered
    /// files of it that exist are overwritten, else passed over ([`Recording::resync`]).
    ///
    /// # Errors
    /// The in-progress file cannot be created (nothing is left of it).
    pub fn start(
        base: &Path,
        world: &World,
        durability: Durability,
        force: bool,
    ) -> io::Result<Recording> {
        Ok(Recording {
            base: base.to_path_buf(),
            index: 0,
            current: Some(Recorder::create_with(base, world, true, durability)?),
            start_step: world.step,
            done: Vec::new(),
            left: Vec::new(),
            durability,
            force,
        })
    }

    /// The current file's recorder, or why there is none.
    fn current(&mut self) -> io::Result<&mut Recorder> {
        self.current
            .as_mut()
            .ok_or_else(|| io::Error::other("the recording stopped at a failed write"))
    }

    /// A failed write to the current file: the recording stops, leaving its `FILE.part`
    /// for `recover`; the error says so.
    fn broke(&mut self, e: io::Error) -> io::Error {
        let Some(rec) = self.current.take() else {
            return e;
        };
        let left = Unfinished {
            part: rec.journal().to_path_buf(),
            start_step: self.start_step,
            steps: rec.flushed(),
        };
        let text = format!(
            "{e}; it holds the steps {}..{} (the {} whole records written before the failure): `ostm-viewer recover {}` turns it into {}",
            left.start_step,
            left.start_step.wrapping_add(u64::from(left.steps)),
            left.steps,
            left.part.display(),
            rec.path().display()
        );
        self.left.push(left);
        // What is still in the recorder's buffer is not written (it could only add a torn
        // record); the file stays as the failed write left it.
        std::mem::forget(rec);
        io::Error::new(e.kind(), text)
    }

    /// Records one verified step (buffered: the session's status tick flushes it).
    ///
    /// # Errors
    /// A write fails: the error names the `FILE.part` left and what it holds.
    pub fn push(&mut self, input: &[u8], hash: u64) -> io::Result<()> {
        match self.current()?.push(input, hash) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.broke(e)),
        }
    }

    /// Flushes when a flush is due; the session calls it at every status tick (every
    /// 250 ms, whether steps come or not), before the status is reported.
    ///
    /// # Errors
    /// A write fails: the error names the `FILE.part` left and what it holds.
    pub fn tick(&mut self) -> io::Result<()> {
        match self.current()?.flush_due(Instant::now()) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.broke(e)),
        }
    }

    /// Closes the current file at the gap and continues in the next numbered file from
    /// `world` (the resync snapshot); returns the new file's path. Without `--force` a
    /// number whose file or in-progress file exists (another process's, made since the
    /// paths were checked) is passed over: the next free number is taken.
    ///
    /// # Errors
    /// Finishing the current file (it is then left as `FILE.part`, for `recover`) or
    /// starting the next fails.
    pub fn resync(&mut self, world: &World) -> io::Result<PathBuf> {
        self.close()?;
        self.index += 1;
        let mut next = numbered(&self.base, self.index);
        while !self.force && (next.exists() || journal_path(&next).exists()) {
            self.index += 1;
            next = numbered(&self.base, self.index);
        }
        self.current = Some(Recorder::create_with(&next, world, true, self.durability)?);
        self.start_step = world.step;
        Ok(next)
    }

    /// Finishes the current file: every file written, in order; the in-progress files
    /// left for `recover` and why.
    pub fn finish(mut self) -> Finished {
        let error = match self.current {
            Some(_) => self.close().err(),
            None => None,
        };
        Finished {
            files: self.done,
            unfinished: self.left,
            error,
        }
    }

    /// Finishes the current file (it is then done), or leaves its `FILE.part` for
    /// `recover` and says so.
    fn close(&mut self) -> io::Result<()> {
        // Every step reaches the in-progress file first, so that a failed assembly (a
        // full disk) leaves a `FILE.part` with all of them.
        self.current()?
            .flush(Instant::now())
            .map_err(|e| self.broke(e))?;
        let Some(rec) = self.current.take() else {
            return Ok(());
        };
        let (path, part, steps) = (
            rec.path().to_path_buf(),
            rec.journal().to_path_buf(),
            rec.steps(),
        );
        match rec.finish() {
            Ok(steps) => {
                self.done.push(Written {
                    path,
                    steps,
                    start_step: self.start_step,
                });
                Ok(())
            }
            Err(e) => {
                let text = format!(
                    "{e}; {} is kept with all its {steps} steps: `ostm-viewer recover {}` turns it into {}",
                    part.display(),
                    part.display(),
                    path.display()
                );
                self.left.push(Unfinished {
                    part,
                    start_step: self.start_step,
                    steps,
                });
                Err(io::Error::new(e.kind(), text))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Recording;
    use ostm_protocol::format::recording::Durability;

    fn world() -> ostm_protocol::World {
        let setup = ostm_protocol::Setup {
            dims: ostm_protocol::Dims::Two,
            bodies: 1,
            seed: 1,
        };
        ostm_protocol::World::new(setup, None)
    }

    /// A numbered file another process made since the paths were checked is passed over
    /// (and kept); with --force it is overwritten as the docs say.
    #[test]
    fn a_resync_passes_over_a_numbered_file_that_exists_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("s.ostm");
        std::fs::write(dir.path().join("s.1.ostm"), b"another's").unwrap();
        std::fs::write(dir.path().join("s.2.ostm.part"), b"another's").unwrap();
        let mut r = Recording::start(&base, &world(), Durability::default(), false).unwrap();
        assert_eq!(r.resync(&world()).unwrap(), dir.path().join("s.3.ostm"));
        let done = r.finish();
        assert!(done.error.is_none());
        let names: Vec<_> = done.files.iter().map(|w| w.path.clone()).collect();
        assert_eq!(names, [base.clone(), dir.path().join("s.3.ostm")]);
        assert_eq!(
            std::fs::read(dir.path().join("s.1.ostm")).unwrap(),
            b"another's"
        );
        let mut r = Recording::start(&base, &world(), Durability::default(), true).unwrap();
        assert_eq!(r.resync(&world()).unwrap(), dir.path().join("s.1.ostm"));
        drop(r.finish());
    }
}
