//! `ostm-viewer keyframe`: the world at a step as a `molen/keyframe@1` JSON file.

use crate::exit::{fail, Exit};
use ostm_protocol::format::keyframe::{to_json_pretty, DEFAULT_TICK_RATE};
use std::path::PathBuf;

/// Arguments of `keyframe`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer keyframe testdata/test-10000.ostm --step 5000 -o k5000.json
  ostm-viewer keyframe run.ostm --step 0 -o start.json --tick-rate 30 --json
  ostm-viewer verify run.ostm --from-keyframe k5000.json

The keyframe validates against the molen/keyframe@1 schema; docs/keyframe.md lists every
field. Import (`--from-keyframe`) reads each body's exact `body` component.")]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// The step whose world is exported (the world after that many steps from step 0).
    #[arg(long)]
    pub step: u64,
    /// Where to write the keyframe (whole, through FILE.part).
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// The tickRate written (steps per second, 1..=240).
    #[arg(long, default_value_t = DEFAULT_TICK_RATE)]
    pub tick_rate: u32,
    /// Print what was written as JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `keyframe`.
pub fn run(args: Args) -> Exit {
    let world = match ostm_protocol::format::seek::run_to(&args.file, args.step) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let text = match to_json_pretty(&world, args.tick_rate) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    if let Err(e) = ostm_protocol::format::write_whole(&args.output, text.as_bytes()) {
        return fail(format!("cannot write {}: {e}", args.output.display()));
    }
    let hash = world.hash();
    crate::report::report(
        args.json,
        serde_json::json!({
            "file": args.file.display().to_string(),
            "output": args.output.display().to_string(),
            "step": world.step,
            "hash": format!("{hash:016x}"),
            "live_bodies": world.alive_count(),
            "tick_rate": args.tick_rate,
            "bytes": text.len(),
        }),
        || {
            let live = world.alive_count();
            let noun = if live == 1 { "body" } else { "bodies" };
            format!(
                "wrote {}: the world at step {} (hash {hash:016x}, {live} live {noun})",
                args.output.display(),
                world.step
            )
        },
    );
    Exit::Ok
}
