//! The recording options of the binaries' command lines (`ostm-viewer attach --record`,
//! `ostm-host serve --record`): one definition for both.

use super::Durability;
use std::path::PathBuf;

/// The recording options, shared by every command that records.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RecordArgs {
    /// Record the session to this .ostm file; while it runs the file is FILE.part, which
    /// `ostm-viewer recover` turns into FILE after a crash.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Overwrite an existing recording (FILE, FILE.part, numbered files).
    #[arg(long, requires = "record")]
    pub force: bool,
    /// fdatasync the recording at every flush (about 4 a second), so that a power loss,
    /// not only a killed process, loses at most the last flush.
    #[arg(long, requires = "record")]
    pub sync: bool,
    /// Test only (a planted fault): never flush the recording while it runs.
    #[arg(long, hide = true)]
    pub no_flush_for_tests: bool,
}

impl RecordArgs {
    /// How the recording reaches the disk.
    pub fn durability(&self) -> Durability {
        Durability {
            sync: self.sync,
            no_flush: self.no_flush_for_tests,
        }
    }
}
