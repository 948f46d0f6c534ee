//! A live recording: one `.ostm` per unbroken run of records.
//!
//! A viewer's records are contiguous until the host resyncs it; the steps it missed are
//! in no file. So a resync closes the current file (whole and valid up to the gap) and
//! the recording continues in a new file numbered after it: `session.ostm`, then
//! `session.1.ostm`, `session.2.ostm`, … Each file starts from its own start snapshot
//! (flag bit 1) and verifies on its own.

use ostm_protocol::recording::Recorder;
use ostm_protocol::World;
use std::io;
use std::path::{Path, PathBuf};

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

impl Recording {
    /// Starts recording at `world` (the probe snapshot) into `base`.
    ///
    /// # Errors
    /// The file's sidecars cannot be created.
    pub fn start(base: &Path, world: &World) -> io::Result<Recording> {
        Ok(Recording {
            base: base.to_path_buf(),
            index: 0,
            current: Recorder::create(base, world, true)?,
            start_step: world.step,
            done: Vec::new(),
        })
    }

    /// Records one verified step.
    ///
    /// # Errors
    /// A write fails.
    pub fn push(&mut self, input: &[u8], hash: u64) -> io::Result<()> {
        self.current.push(input, hash)
    }

    /// Closes the current file at the gap and continues in the next numbered file from
    /// `world` (the resync snapshot); returns the new file's path.
    ///
    /// # Errors
    /// Finishing the current file or starting the next fails.
    pub fn resync(&mut self, world: &World) -> io::Result<PathBuf> {
        self.index += 1;
        let next = numbered(&self.base, self.index);
        let fresh = Recorder::create(&next, world, true)?;
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

#[cfg(test)]
mod tests {
    use super::numbered;
    use std::path::Path;

    #[test]
    fn numbered_files_keep_the_extension() {
        assert_eq!(numbered(Path::new("d/s.ostm"), 0), Path::new("d/s.ostm"));
        assert_eq!(numbered(Path::new("d/s.ostm"), 2), Path::new("d/s.2.ostm"));
        assert_eq!(numbered(Path::new("s"), 1), Path::new("s.1"));
    }
}
