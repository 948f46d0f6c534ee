//! What `compare` prints: a replay against a pose cache, frame by frame (text or JSON).

use ostm_protocol::format::ospc::{Deviation, PoseCache};
use serde_json::json;
use std::path::Path;

/// What was compared: the run, the cache, the offset removed and the tolerance.
pub struct Compared<'a> {
    pub run: &'a Path,
    pub ghost: &'a Path,
    pub offset: [i32; 3],
    pub tolerance: u64,
}

/// One frame's result.
pub struct FrameResult {
    pub step: u64,
    /// Largest deviation among bodies present on both sides, and its body.
    pub worst: Option<(usize, u64)>,
    /// Bodies present on one side only: (body, present in the run).
    pub presence: Vec<(usize, bool)>,
    /// The first body (slot order) beyond the tolerance.
    pub first_beyond: Option<(usize, Deviation)>,
}

/// The first frame with a body beyond the tolerance: (frame, step, (body, deviation)).
pub type FirstBad = Option<(usize, u64, (usize, Deviation))>;

/// One JSON object: every frame, the largest deviation, the first beyond.
pub fn print_json(args: &Compared<'_>, results: &[FrameResult], first_bad: FirstBad) {
    let offset = args.offset;
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
}

/// A heading, a line per frame, and the verdict.
pub fn print_text(
    args: &Compared<'_>,
    cache: &PoseCache,
    results: &[FrameResult],
    first_bad: FirstBad,
) {
    let offset = args.offset;
    println!(
        "{} against {} (offset {},{},{} removed, tolerance {} mm), steps {}..={}",
        args.run.display(),
        args.ghost.display(),
        offset[0],
        offset[1],
        offset[2],
        args.tolerance,
        cache.start_step(),
        cache.last_step()
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
