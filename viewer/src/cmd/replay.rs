//! `ostm-viewer replay`: reproduces the failure a bundle holds.

use crate::exit::{fail, Exit};
use ostm_protocol::format::bundle::Bundle;
use std::path::PathBuf;

/// Arguments of `replay`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer replay failure.ostmb
  ostm-viewer replay fixtures/corpus/floor-friction-skipped.ostmb --json

Runs the bundle's replay with this build and compares every hash row, then compares this
build's world at the failing step with the other side's (the reference's when the bundle
has it, else the writer's) and prints the first differing body and field.
Exit 1 when this build still disagrees with the recorded hashes (the failure
reproduces), 0 when it matches every row (the defect is fixed), 2 for a bad bundle.")]
pub struct Args {
    /// The bundle file.
    pub bundle: PathBuf,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `replay`.
pub fn run(args: Args) -> Exit {
    let bundle = match Bundle::read_file(&args.bundle) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let report = bundle.check();
    if args.json {
        let m = |m: &ostm_protocol::format::bundle::Mismatch| {
            serde_json::json!({
                "step": m.step,
                "row": m.row,
                "expected": format!("{:016x}", m.expected),
                "computed": format!("{:016x}", m.computed),
            })
        };
        let d = report.difference.as_ref().map(|d| {
            serde_json::json!({
                "step": d.step,
                "body": d.diff.body,
                "field": d.diff.field,
                "this": d.diff.a,
                "other": d.other,
                "value": d.diff.b,
            })
        });
        println!(
            "{}",
            serde_json::json!({
                "description": bundle.description,
                "recorded": m(&report.recorded),
                "rows": report.rows,
                "reproduces": report.mismatch.is_some(),
                "mismatch": report.mismatch.as_ref().map(m),
                "difference": d,
            })
        );
    } else {
        if !bundle.description.is_empty() {
            println!("bundle: {}", bundle.description);
        }
        println!("recorded: {}", report.recorded);
        match &report.mismatch {
            Some(m) => println!("this build: {m}"),
            None => println!(
                "this build: matches all {} hash rows; the failure does not reproduce",
                report.rows
            ),
        }
        match &report.difference {
            Some(d) => println!("{d}"),
            None if bundle.writer.is_some() || bundle.reference.is_some() => {
                println!(
                    "this build's world at step {} equals the bundle's",
                    report.recorded.step
                )
            }
            None => {}
        }
    }
    if report.mismatch.is_some() {
        Exit::Different
    } else {
        Exit::Ok
    }
}
