//! `ostm-viewer recover FILE…`: turns what a killed recording left (`FILE.part`) into a
//! valid `.ostm` holding the longest whole prefix.

use crate::exit::Exit;
use ostm_protocol::format::recording::journal::AssembleError;
use ostm_protocol::format::recording::{assemble, journal_path, Assembled, DropKind};
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
beside it without the .part (atomically: FILE.part.tmp, then renamed; nothing is left of
it when it cannot be written) and holds the header, the start snapshot and every step
whose record is whole (its check holds), decodes, and is reproduced by running the
replay. What follows is classified: a torn tail (the file ends inside a record, or what
is there is damaged and no whole record follows: what a killed writer leaves) is dropped
and the .part removed (unless --keep); damage followed by whole records (corruption), or
a whole record that cannot be kept, is reported with its offset and the .part is kept.

Exit codes:
  0  every FILE was recovered (possibly to 0 steps); anything dropped was a torn tail
  1  a whole record's hash row is not reproduced by the replay (kept: the steps before it)
  2  a FILE is corrupt (damage followed by whole records: the steps before the damage are
     kept, the .part too), holds nothing recoverable (its header, start snapshot, row 0 or
     header check is cut short, malformed or does not hold: the message names the offset),
     cannot be read or written, or its result exists already (--force overwrites it)")]
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
                // Only a torn tail is what a crash leaves: anything else keeps the
                // in-progress file, the evidence.
                let removed = a.whole() && !args.keep && std::fs::remove_file(&journal).is_ok();
                report(&args, &journal, &a, removed);
                let this = match a.dropped.as_ref().map(|d| d.kind) {
                    None | Some(DropKind::TornTail) => Exit::Ok,
                    Some(DropKind::NotReproduced) => Exit::Different,
                    Some(DropKind::Corruption { .. } | DropKind::Refused) => Exit::Failure,
                };
                if this != Exit::Ok {
                    eprintln!(
                        "error: {}: {} holds only the {} steps before offset {}; {} is kept",
                        journal.display(),
                        a.path.display(),
                        a.steps,
                        a.dropped.as_ref().map_or(0, |d| d.offset),
                        journal.display()
                    );
                }
                exit = worse(exit, this);
            }
            Err(e) => {
                exit = worse(exit, Exit::Failure);
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

/// The exit code that says more of two.
fn worse(a: Exit, b: Exit) -> Exit {
    let rank = |e: Exit| match e {
        Exit::Ok => 0,
        Exit::Different => 1,
        Exit::Failure => 2,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

fn report(args: &Args, journal: &Path, a: &Assembled, removed: bool) {
    if args.json {
        let dropped = a.dropped.as_ref().map(|d| {
            let mut o = serde_json::json!({"offset": d.offset, "bytes": d.bytes, "why": d.why, "kind": d.kind.name()});
            if let DropKind::Corruption { resumes_at } = d.kind {
                o["resumes_at"] = resumes_at.into();
            }
            o
        });
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
        Some(d) => match d.kind {
            DropKind::TornTail => println!(
                "dropped {} bytes from offset {}: {}",
                d.bytes, d.offset, d.why
            ),
            DropKind::Corruption { resumes_at } => println!(
                "corruption at offset {}: {}; a whole record follows at offset {resumes_at}: not a torn tail",
                d.offset, d.why
            ),
            DropKind::NotReproduced | DropKind::Refused => println!(
                "not kept from offset {}: {} (the record is whole: not a torn tail)",
                d.offset, d.why
            ),
        },
    }
    if removed {
        println!("removed {}", journal.display());
    } else if let Some(d) = a.dropped.as_ref().filter(|_| !a.whole()) {
        println!(
            "kept {} ({} bytes from offset {} are not in {})",
            journal.display(),
            d.bytes,
            d.offset,
            a.path.display()
        );
    }
}
