//! `ostm-viewer index`: writes the seek index (keyframes every K steps) beside a replay.

use crate::exit::{fail, Exit};
use ostm_protocol::format::seek::{default_index_path, write_index, DEFAULT_EVERY};
use std::io::IsTerminal;
use std::path::PathBuf;

/// Arguments of `index`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer index long.ostm                 # writes long.ostm.seek
  ostm-viewer index long.ostm --every 1024 -o long.idx --json
  ostm-viewer seek long.ostm --step 8000000

The sidecar is JSON lines (docs/seek-index.md): a header naming the replay, then one
molen/keyframe@1 keyframe every K steps with the byte offset of the next step's input.")]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// Steps between keyframes.
    #[arg(long, default_value_t = DEFAULT_EVERY)]
    pub every: u32,
    /// Where to write the index (default: FILE.seek).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Print what was written as JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `index`.
pub fn run(args: Args) -> Exit {
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| default_index_path(&args.file));
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message("indexing");
        b
    });
    let res = write_index(&args.file, &out, args.every, |rows| {
        if let Some(b) = &bar {
            b.set_position(rows);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match res {
        Ok(h) => {
            crate::report::report(
                args.json,
                serde_json::json!({
                    "file": args.file.display().to_string(),
                    "output": out.display().to_string(),
                    "every": h.every,
                    "entries": h.entries,
                    "start_step": h.start_step,
                    "steps": h.steps,
                    "bytes": std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0),
                }),
                || {
                    format!(
                        "wrote {}: {} keyframes every {} steps ({} steps)",
                        out.display(),
                        h.entries,
                        h.every,
                        h.steps
                    )
                },
            );
            Exit::Ok
        }
        Err(e) => fail(e),
    }
}
