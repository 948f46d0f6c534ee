//! `ostm-viewer recover FILE…`: turns what a killed recording left (`FILE.part`) into a
//! valid `.ostm` holding the longest whole prefix.

use crate::exit::Exit;
use ostm_protocol::format::recording::journal::AssembleError;
use ostm_protocol::format::recording::{assemble, journal_path, Assembled};
use std::path::{Path, PathBuf};

/// Arguments of `recover`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  # A viewer or host killed while recording left session.ostm.part
  ostm-viewer recover session.ostm.part
  # The same, naming the recording (its .part is found beside it); then check the result
  ostm-viewer recover session.ostm && ostm-viewer verify session.ostm
  # Every unfinished file of a session, as JSON lines
  ostm-viewer recover session*.part --json

Each FILE is an in-progress recording (FILE.part, docs/replay-format.md \"The in-progress
file\") or the recording it was to become (then FILE.part is read). The result is written
beside it without the .part (atomically: FILE.part.tmp, then renamed) and holds the header,
the start snapshot and every step whose input and hash row are whole, decode, and are
reproduced by running the replay; a torn last record (or anything after the first step
that fails) is dropped and reported with its offset. The .part file is removed once the
result is written, unless --keep.

Exit codes:
  0  every FILE was recovered (possibly to 0 steps)
  2  a FILE holds nothing recoverable (its header, start snapshot or row 0 is cut short or
     malformed: the message names the offset), cannot be read, or its result exists already
     (--force overwrites it)")]
pub struct Args {
    /// In-progress recordings (FILE.part), or the recordings they were to become.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Overwrite a finished file that is already there.
    #[arg(long)]
    pub force: bool,
    /// Keep the .part file after recovering it.
    #[arg(long)]
    pub keep: bool,
    /// One JSON object per file on stdout, for scripts.
    #[arg(long)]
    pub json: bool,
}

/// The in-progress file and the result for one argument.
fn paths(arg: &Path) -> (PathBuf, PathBuf) {
    let s = arg.as_os_str().to_string_lossy();
    match s.strip_suffix(".part") {
        Some(out) => (arg.to_path_buf(), PathBuf::from(out)),
        None => (journal_path(arg), arg.to_path_buf()),
    }
}

/// Runs `recover`.
pub fn run(args: Args) -> Exit {
    let mut exit = Exit::Ok;
    for arg in &args.files {
        let (journal, out) = paths(arg);
        let result = if !journal.exists() {
            Err(format!(
                "{}: no in-progress recording there (a finished recording needs no recovery)",
                journal.display()
            ))
        } else if out.exists() && !args.force {
            Err(format!(
                "{} exists already; --force overwrites it",
                out.display()
            ))
        } else {
            assemble(&journal, &out, true).map_err(|e| match e {
                AssembleError::Input(f) => format!("nothing recoverable: {f}"),
                other => other.to_string(),
            })
        };
        match result {
            Ok(a) => {
                let removed = !args.keep && std::fs::remove_file(&journal).is_ok();
                report(&args, &journal, &a, removed);
            }
            Err(e) => {
                exit = Exit::Failure;
                if args.json {
                    println!(
                        "{}",
                        serde_json::json!({"file": journal.display().to_string(), "recovered": false, "error": e})
                    );
                }
                eprintln!("error: {e}");
            }
        }
    }
    exit
}

fn report(args: &Args, journal: &Path, a: &Assembled, removed: bool) {
    if args.json {
        let dropped = a
            .dropped
            .as_ref()
            .map(|d| serde_json::json!({"offset": d.offset, "bytes": d.bytes, "why": d.why}));
        println!(
            "{}",
            serde_json::json!({
                "file": journal.display().to_string(),
                "recovered": true,
                "output": a.path.display().to_string(),
                "start_step": a.start_step,
                "steps": a.steps,
                "end_step": a.end_step(),
                "dropped": dropped,
                "removed": removed,
            })
        );
        return;
    }
    println!(
        "recovered {}: {} steps (steps {}..{}) from {}",
        a.path.display(),
        a.steps,
        a.start_step,
        a.end_step(),
        journal.display()
    );
    match &a.dropped {
        None => println!("dropped nothing: the file ends after a whole record"),
        Some(d) => println!(
            "dropped {} bytes from offset {}: {}",
            d.bytes, d.offset, d.why
        ),
    }
    if removed {
        println!("removed {}", journal.display());
    }
}
