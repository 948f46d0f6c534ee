//! `ostm-viewer verify` (being built).

use crate::exit::{fail, Exit};

/// Arguments of `verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The replay file.
    pub file: std::path::PathBuf,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `verify`.
pub fn run(_args: Args) -> Exit {
    fail("not built yet")
}
