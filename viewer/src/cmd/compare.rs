//! `ostm-viewer compare`: a replay against a pose cache, frame by frame.

use crate::args::parse_offset;
use crate::exit::{fail, Exit};
use crate::report::ghost::{print_json, print_text, Compared, FrameResult};
use crate::world_at::world_at;
use ostm_protocol::format::ospc::{deviations, Deviation, PoseCache};
use ostm_protocol::Replay;
use std::path::PathBuf;

/// Arguments of `compare`.
#[derive(clap::Args)]
#[command(
    after_help = "At each frame's step the run's world is compared with the cache body by body: the \
deviation is the largest absolute difference over the axes between the pose minus the offset \
and the body's position (mm). A body present on one side only is a presence mismatch. \
Exit 0 when no body is beyond --tolerance, 1 when one is, 2 on bad input.

Examples:
  ostm-viewer compare testdata/test-2d-600.ostm testdata/test-2d-ghost.ospc --offset 400,0
  ostm-viewer compare run.ostm engine-dump.ospc --offset 0,0,0 --tolerance 2 --json"
)]
pub struct Args {
    /// The replay.
    pub run: PathBuf,
    /// The pose cache.
    pub ghost: PathBuf,
    /// The offset the cache was drawn with, removed before comparing: X,Y[,Z] mm.
    #[arg(long, allow_hyphen_values = true)]
    pub offset: String,
    /// The largest deviation (mm) still accepted.
    #[arg(long, default_value_t = 0)]
    pub tolerance: u64,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `compare`.
pub fn run(args: Args) -> Exit {
    let (replay, cache, offset) = match read_inputs(&args) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let results = match compare_frames(&replay, &cache, offset, args.tolerance) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let first_bad = results
        .iter()
        .enumerate()
        .find_map(|(f, r)| r.first_beyond.map(|b| (f, r.step, b)));
    let compared = Compared {
        run: &args.run,
        ghost: &args.ghost,
        offset,
        tolerance: args.tolerance,
    };
    if args.json {
        print_json(&compared, &results, first_bad);
    } else {
        print_text(&compared, &cache, &results, first_bad);
    }
    if first_bad.is_some() {
        Exit::Different
    } else {
        Exit::Ok
    }
}

/// The replay, the pose cache and the offset, checked against each other: the same
/// dimensions, and every frame's step one the replay holds.
fn read_inputs(args: &Args) -> Result<(Replay, PoseCache, [i32; 3]), String> {
    let replay = Replay::read_file(&args.run).map_err(|e| e.to_string())?;
    let cache = PoseCache::read_file(&args.ghost).map_err(|e| e.to_string())?;
    if cache.dims() != replay.setup.dims {
        return Err(format!(
            "{} is {}D but {} is {}D",
            args.ghost.display(),
            cache.dims() as u8,
            args.run.display(),
            replay.setup.dims as u8
        ));
    }
    let offset = parse_offset(&args.offset, replay.setup.dims)?;
    let (first, last) = (cache.start_step(), cache.last_step());
    // Every frame's step is one the replay holds (counted from its start step, modulo
    // 2^64: a replay whose steps wrap past u64::MAX holds 0, 1, ... after it).
    let held = replay
        .row_of(first)
        .is_some_and(|row| row as u64 + (last - first) <= replay.step_count() as u64);
    if !held {
        return Err(format!(
            "{} covers steps {first}..={last}, but {} holds steps {}..={}",
            args.ghost.display(),
            args.run.display(),
            replay.start_step(),
            replay.end_step()
        ));
    }
    Ok((replay, cache, offset))
}

/// Each frame of `cache` against the run's world at its step.
fn compare_frames(
    replay: &Replay,
    cache: &PoseCache,
    offset: [i32; 3],
    tolerance: u64,
) -> Result<Vec<FrameResult>, String> {
    let mut world = world_at(replay, cache.start_step())?;
    let mut results = Vec::with_capacity(cache.frame_count());
    for f in 0..cache.frame_count() {
        if f > 0 {
            world.step(
                &replay
                    .inputs
                    .ops(world.step.wrapping_sub(replay.start_step()) as usize),
            );
        }
        let poses = cache.frame(f).unwrap_or(&[]);
        let mut r = FrameResult {
            step: world.step,
            worst: None,
            presence: Vec::new(),
            first_beyond: None,
        };
        for (b, d) in deviations(&world, poses, offset).into_iter().enumerate() {
            let beyond = match d {
                Deviation::Absent => false,
                Deviation::Distance(x) => {
                    if r.worst.is_none_or(|(_, w)| x > w) {
                        r.worst = Some((b, x));
                    }
                    x > tolerance
                }
                Deviation::Presence { in_run } => {
                    r.presence.push((b, in_run));
                    true
                }
            };
            if beyond && r.first_beyond.is_none() {
                r.first_beyond = Some((b, d));
            }
        }
        results.push(r);
    }
    Ok(results)
}
