//! `ostm-viewer seek`: the world at a step, from the nearest indexed keyframe.

use crate::exit::{fail, Exit};
use ostm_protocol::format::seek::{default_index_path, seek};
use std::path::PathBuf;

/// Arguments of `seek`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer index long.ostm && ostm-viewer seek long.ostm --step 8000000
  ostm-viewer seek long.ostm --step 123456 --index long.idx --json
  ostm-viewer seek long.ostm --step 5000 --trace   # print the world as a trace row

Restores the index's keyframe at or before the step and runs the replay on from there.
Exit 1 when the replay's hash row at that step differs from the world reached.")]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// The step to reach.
    #[arg(long)]
    pub step: u64,
    /// The index (default: FILE.seek, written by `ostm-viewer index`).
    #[arg(long)]
    pub index: Option<PathBuf>,
    /// Also print the world as a trace row (docs/trace-format.md).
    #[arg(long)]
    pub trace: bool,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `seek`.
pub fn run(args: Args) -> Exit {
    let index = args
        .index
        .clone()
        .unwrap_or_else(|| default_index_path(&args.file));
    if args.index.is_none() && !index.exists() {
        return fail(format!(
            "{}: no seek index beside the replay (expected {}); write one with `ostm-viewer index {}`",
            args.file.display(),
            index.display(),
            args.file.display()
        ));
    }
    let s = match seek(&args.file, &index, args.step) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let hash = s.world.hash();
    let matches = s.recorded_hash.map(|r| r == hash);
    let mut row = String::new();
    ostm_protocol::format::trace::format_row(&mut row, &s.world, hash);
    if args.json {
        let mut v = serde_json::json!({
            "step": s.world.step,
            "hash": format!("{hash:016x}"),
            "keyframe_step": s.keyframe_step,
            "steps_run": s.steps_run,
            "recorded_hash": s.recorded_hash.map(|h| format!("{h:016x}")),
            "matches_recording": matches,
        });
        if args.trace {
            v["trace"] = row.trim_end().into();
        }
        println!("{v}");
    } else {
        println!(
            "step {} hash {hash:016x} (keyframe at step {}, {} steps run)",
            s.world.step, s.keyframe_step, s.steps_run
        );
        match s.recorded_hash {
            Some(r) if r == hash => println!("matches the replay's hash row"),
            Some(r) => println!("differs from the replay's hash row {r:016x}"),
            None => println!("the replay has no hash rows to compare"),
        }
        if args.trace {
            print!("{row}");
        }
    }
    if matches == Some(false) {
        Exit::Different
    } else {
        Exit::Ok
    }
}
