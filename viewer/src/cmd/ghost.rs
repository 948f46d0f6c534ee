//! `ostm-viewer ghost`: writes a pose cache (`.ospc`) of a replay's bodies, moved by an
//! offset: the stand-in for a reference engine's dump.

use crate::args::parse_offset;
use crate::exit::{fail, Exit};
use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::Replay;
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `ghost`.
#[derive(clap::Args)]
#[command(
    after_help = "Frame f of the cache is the world at step FROM + f; every step must lie in the replay. \
The format is docs/pose-cache.md.

Examples:
  ostm-viewer ghost testdata/test-2d-600.ostm --from 200 --frames 40 --offset 400,0 -o test-2d-ghost.ospc
  ostm-viewer ghost testdata/test-10000.ostm --from 0 --frames 600 --offset 0,0,-250 -o g.ospc --json"
)]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// The step of the first frame.
    #[arg(long)]
    pub from: u64,
    /// How many frames (consecutive steps), 1..=16777216.
    #[arg(long)]
    pub frames: u64,
    /// Added to every body's position, in mm: X,Y in 2D, X,Y[,Z] in 3D.
    #[arg(long, allow_hyphen_values = true)]
    pub offset: String,
    /// The pose cache to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ghost`.
pub fn run(args: Args) -> Exit {
    let replay = match Replay::read_file(&args.file) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let offset = match parse_offset(&args.offset, replay.setup.dims) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let cache = match PoseCache::from_replay(&replay, args.from, args.frames, offset) {
        Ok(c) => c,
        Err(e) => return fail(format!("{}: {e}", args.file.display())),
    };
    if let Err(e) = cache.write_file(&args.output) {
        return fail(format!("{}: cannot write: {e}", args.output.display()));
    }
    let last = cache.last_step();
    crate::report::report(
        args.json,
        json!({
            "file": args.file.display().to_string(),
            "output": args.output.display().to_string(),
            "dims": cache.dims() as u8,
            "start_step": cache.start_step(),
            "last_step": last,
            "frames": cache.frame_count(),
            "bodies": cache.body_count(),
            "offset": offset,
        }),
        || {
            format!(
                "wrote {}: {} frames (steps {}..={last}) of {} bodies, offset ({}, {}, {}) mm",
                args.output.display(),
                cache.frame_count(),
                cache.start_step(),
                cache.body_count(),
                offset[0],
                offset[1],
                offset[2]
            )
        },
    );
    Exit::Ok
}
