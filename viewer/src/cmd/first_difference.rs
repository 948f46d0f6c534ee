//! `ostm-viewer first-difference`: where two runs part.

use crate::exit::{fail, Exit};
use ostm_protocol::trace::{compare, Comparison, RowSource};
use std::path::PathBuf;

/// Arguments of `first-difference`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer first-difference a.trace b.trace
  ostm-viewer first-difference testdata/test-10000.ostm other-build.trace
  ostm-viewer first-difference left.ostm right.ostm --json

A and B may each be a trace (`ostm-viewer trace`) or a replay (run as it is read); each
is read a line or a step at a time, so memory stays flat on inputs of any length.
Prints `identical`, or the first differing step with the first differing body and field
and both values. Exit 0 identical, 1 different, 2 when an input is malformed or cut
short (the message names the input, line and byte offset).")]
pub struct Args {
    /// First input: a trace or a replay.
    pub a: PathBuf,
    /// Second input: a trace or a replay.
    pub b: PathBuf,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `first-difference`.
pub fn run(args: Args) -> Exit {
    let mut a = match RowSource::open(&args.a) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut b = match RowSource::open(&args.b) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    match compare(&mut a, &mut b) {
        Err(e) => fail(e),
        Ok(Comparison::Identical { rows }) => {
            if args.json {
                println!("{}", serde_json::json!({ "identical": true, "rows": rows }));
            } else {
                println!("identical ({rows} rows)");
            }
            Exit::Ok
        }
        Ok(Comparison::Different(d)) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "identical": false,
                        "row": d.row,
                        "step": d.step,
                        "body": d.body,
                        "field": d.field,
                        "a": d.a,
                        "b": d.b,
                    })
                );
            } else {
                println!("{d}");
            }
            Exit::Different
        }
    }
}
