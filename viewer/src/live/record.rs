//! A live recording: one `.ostm` per unbroken run of records.
//!
//! A viewer's records are contiguous until the host resyncs it; the steps it missed are
//! in no file. So a resync closes the current file (whole and valid up to the gap) and
//! the recording continues in a new file numbered after it: `session.ostm`, then
//! `session.1.ostm`, `session.2.ostm`, … Each file starts from its own start snapshot
//! (flag bit 1) and verifies on its own. While a file is being written it is
//! `FILE.part` (crash-safe: see `ostm_protocol::format::recording`).

pub use ostm_protocol::format::recording::numbered;
use ostm_protocol::format::recording::{Durability, Recorder};
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

/// The recording in progress.
pub struct Recording {
    base: PathBuf,
    index: u32,
    current: Recorder,
    start_step: u64,
    done: Vec<Written>,
    durability: Durability,
}

impl Recording {
    /// Starts recording at `world` (the probe snapshot) into `base`.
    ///
    /// # Errors
    /// The file's sidecars cannot be created.
    pub fn start(base: &Path, world: &World, durability: Durability) -> io::Result<Recording> {
        Ok(Recording {
            base: base.to_path_buf(),
            index: 0,
            current: Recorder::create_with(base, world, true, durability)?,
            start_step: world.step,
            done: Vec::new(),
            durability,
        })
    }

    /// Records one verified step (buffered: the session's status tick flushes it).
    ///
    /// # Errors
    /// A write fails.
    pub fn push(&mut self, input: &[u8], hash: u64) -> io::Result<()> {
        self.current.push(input, hash)
    }

    /// Flushes when a flush is due; the session calls it at every status tick (every
    /// 250 ms, whether steps come or not), before the status is reported.
    ///
    /// # Errors
    /// A write fails.
    pub fn tick(&mut self) -> io::Result<()> {
        self.current.flush_due(Instant::now()).map(|_| ())
    }

    /// Closes the current file at the gap and continues in the next numbered file from
    /// `world` (the resync snapshot); returns the new file's path.
    ///
    /// # Errors
    /// Finishing the current file or starting the next fails.
    pub fn resync(&mut self, world: &World) -> io::Result<PathBuf> {
        self.index += 1;
        let next = numbered(&self.base, self.index);
        let fresh = Recorder::create_with(&next, world, true, self.durability)?;
        let old = std::mem::replace(&mut self.current, fresh);
        let path = old.path().to_path_buf();
        let steps = old.finish()?;
        self.done.push(Written {
            path,
            steps,
            start_step: self.start_step,
        });
        self.start_step = world.step;
        Ok(next)
    }

    /// Finishes the current file; returns every file written, in order.
    ///
    /// # Errors
    /// Finishing the current file fails.
    pub fn finish(mut self) -> io::Result<Vec<Written>> {
        let path = self.current.path().to_path_buf();
        let steps = self.current.finish()?;
        self.done.push(Written {
            path,
            steps,
            start_step: self.start_step,
        });
        Ok(self.done)
    }
}
