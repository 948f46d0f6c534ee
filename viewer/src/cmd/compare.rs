//! `ostm-viewer compare`: a replay against a pose cache, frame by frame.

use crate::args::parse_offset;
use crate::exit::{fail, Exit};
use crate::world_at::world_at;
use ostm_protocol::format::ospc::{deviations, Deviation, PoseCache};
use ostm_protocol::Replay;
use serde_json::json;
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

/// One frame's result.
struct FrameResult {
    step: u64,
    /// Largest deviation among bodies present on both sides, and its body.
    worst: Option<(usize, u64)>,
    /// Bodies present on one side only: (body, present in the run).
    presence: Vec<(usize, bool)>,
    /// The first body (slot order) beyond the tolerance.
    first_beyond: Option<(usize, Deviation)>,
}

/// Runs `compare`.
pub fn run(args: Args) -> Exit {
    let replay = match Replay::read_file(&args.run) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let cache = match PoseCache::read_file(&args.ghost) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if cache.dims() != replay.setup.dims {
        return fail(format!(
            "{} is {}D but {} is {}D",
            args.ghost.display(),
            cache.dims() as u8,
            args.run.display(),
            replay.setup.dims as u8
        ));
    }
    let offset = match parse_offset(&args.offset, replay.setup.dims) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let first = cache.start_step();
    let last = cache.last_step();
    let run_last = replay.end_step();
    // Every frame's step is one the replay holds (counted from its start step, modulo
    // 2^64: a replay whose steps wrap past u64::MAX holds 0, 1, ... after it).
    let held = replay
        .row_of(first)
        .is_some_and(|row| row as u64 + (last - first) <= replay.step_count() as u64);
    if !held {
        return fail(format!(
            "{} covers steps {first}..={last}, but {} holds steps {}..={run_last}",
            args.ghost.display(),
            args.run.display(),
            replay.start_step()
        ));
    }
    let mut world = match world_at(&replay, first) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
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
        let devs = deviations(&world, poses, offset);
        let mut r = FrameResult {
            step: world.step,
            worst: None,
            presence: Vec::new(),
            first_beyond: None,
        };
        for (b, d) in devs.into_iter().enumerate() {
            let beyond = match d {
                Deviation::Absent => false,
                Deviation::Distance(x) => {
                    if r.worst.is_none_or(|(_, w)| x > w) {
                        r.worst = Some((b, x));
                    }
                    x > args.tolerance
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
    let first_bad = results
        .iter()
        .enumerate()
        .find_map(|(f, r)| r.first_beyond.map(|b| (f, r.step, b)));
    if args.json {
        let frames: Vec<_> = results
            .iter()
            .enumerate()
            .map(|(f, r)| {
                json!({
                    "frame": f,
                    "step": r.step,
                    "max_deviation": r.worst.map(|w| w.1),
                    "max_body": r.worst.map(|w| w.0),
                    "presence_mismatches": r.presence.iter().map(|&(b, in_run)| json!({"body": b, "in_run": in_run})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let first_beyond = first_bad.map(|(f, step, (b, d))| {
            json!({
                "frame": f,
                "step": step,
                "body": b,
                "deviation": match d { Deviation::Distance(x) => Some(x), _ => None },
                "presence_mismatch": matches!(d, Deviation::Presence { .. }),
            })
        });
        println!(
            "{}",
            json!({
                "run": args.run.display().to_string(),
                "ghost": args.ghost.display().to_string(),
                "offset": offset,
                "tolerance": args.tolerance,
                "frames": frames,
                "max_deviation": results.iter().filter_map(|r| r.worst.map(|w| w.1)).max(),
                "first_beyond": first_beyond,
                "within": first_bad.is_none(),
            })
        );
    } else {
        println!(
            "{} against {} (offset {},{},{} removed, tolerance {} mm), steps {first}..={last}",
            args.run.display(),
            args.ghost.display(),
            offset[0],
            offset[1],
            offset[2],
            args.tolerance
        );
        for (f, r) in results.iter().enumerate() {
            let worst = match r.worst {
                Some((b, x)) => format!("largest deviation {x} mm (body {b})"),
                None => "no body present on both sides".to_string(),
            };
            let presence: String = r
                .presence
                .iter()
                .map(|&(b, in_run)| {
                    format!(
                        "; body {b} only in the {}",
                        if in_run { "run" } else { "cache" }
                    )
                })
                .collect();
            let mark = if r.first_beyond.is_some() {
                "  BEYOND"
            } else {
                ""
            };
            println!("  frame {f:>4} step {:>8}: {worst}{presence}{mark}", r.step);
        }
        match first_bad {
            None => println!("all {} frames within {} mm", results.len(), args.tolerance),
            Some((f, step, (b, d))) => {
                let what = match d {
                    Deviation::Distance(x) => format!("deviates {x} mm"),
                    Deviation::Presence { in_run: true } => {
                        "is in the run but not in the cache".to_string()
                    }
                    Deviation::Presence { in_run: false } => {
                        "is in the cache but not in the run".to_string()
                    }
                    Deviation::Absent => String::new(),
                };
                println!("first beyond tolerance: frame {f} (step {step}), body {b} {what}");
            }
        }
    }
    if first_bad.is_some() {
        Exit::Different
    } else {
        Exit::Ok
    }
}
