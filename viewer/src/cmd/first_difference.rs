//! `ostm-viewer first-difference`: where two runs part, compared by step number.

use crate::exit::{fail, Exit};
use ostm_protocol::format::compare::{compare, Compared, Comparison, Held, Outcome, RowSource};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Arguments of `first-difference`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer first-difference a.trace b.trace
  ostm-viewer first-difference testdata/test-10000.ostm other-build.trace
  ostm-viewer first-difference session.ostm other-viewer.ostm --json

A and B may each be a trace (`ostm-viewer trace`) or a replay (run as it is read); each
is read a line or a step at a time, so memory stays flat on inputs of any length.

Rows are compared by step number: only the steps both inputs hold are compared (a
viewer that attached at step 0 and one that attached at step 417 are compared from
step 417 on). Each input is read to its end, and every hash row a replay stores is
checked against the hash its own run computes at that step.

Prints `identical (steps 417..=3000 compared, 2584 rows; A holds 0..=3000, B holds
417..=5000)`, or the first differing step with the first differing body and field and
both values, or the first stored hash row a replay's own run does not reproduce.

Exit codes: 0 identical at every common step (and every stored row reproduced),
1 a difference between A and B, or a replay that does not reproduce its own hash row,
2 an input is malformed, cut short or unreadable (the message names the input, line and
byte offset), or A and B hold no step in common (nothing to compare).")]
pub struct Args {
    /// First input: a trace or a replay.
    pub a: PathBuf,
    /// Second input: a trace or a replay.
    pub b: PathBuf,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// `1 row`, `2584 rows`.
fn rows(n: u64) -> String {
    format!("{n} row{}", if n == 1 { "" } else { "s" })
}

fn held_json(h: &Held) -> Value {
    json!({ "first": h.first, "last": h.last, "complete": h.complete })
}

fn compared_json(c: &Option<Compared>) -> Value {
    match c {
        Some(c) => json!({ "first": c.first, "last": c.last, "rows": c.rows }),
        None => Value::Null,
    }
}

/// `compared steps 417..=500; A holds 0..=3000, B holds 417..=5000`.
fn context_line(c: &Comparison) -> String {
    let compared = match &c.compared {
        Some(x) => format!("compared steps {}..={} ({})", x.first, x.last, rows(x.rows)),
        None => "no step compared yet".to_string(),
    };
    format!("{compared}; A holds {}, B holds {}", c.a, c.b)
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
    let c = match compare(&mut a, &mut b) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut doc = json!({
        "identical": c.outcome == Outcome::Identical,
        "compared": compared_json(&c.compared),
        "a_steps": held_json(&c.a),
        "b_steps": held_json(&c.b),
    });
    let (exit, text) = match &c.outcome {
        Outcome::Identical => {
            doc["result"] = "identical".into();
            doc["rows"] = c.compared.map_or(0, |x| x.rows).into();
            let text = match &c.compared {
                Some(x) => format!(
                    "identical (steps {}..={} compared, {}; A holds {}, B holds {})",
                    x.first,
                    x.last,
                    rows(x.rows),
                    c.a,
                    c.b
                ),
                None => format!("identical (no rows; A holds {}, B holds {})", c.a, c.b),
            };
            (Exit::Ok, text)
        }
        Outcome::NoCommonStep => {
            doc["result"] = "no_common_step".into();
            if args.json {
                println!("{doc}");
            }
            return fail(format!(
                "no step in common: A ({}) holds {}, B ({}) holds {}; nothing to compare",
                args.a.display(),
                c.a,
                args.b.display(),
                c.b
            ));
        }
        Outcome::Different(d) => {
            doc["result"] = "different".into();
            doc["row"] = d.a_row.unwrap_or(0).into();
            doc["a_row"] = d.a_row.into();
            doc["b_row"] = d.b_row.into();
            doc["step"] = d.step.into();
            doc["body"] = d.body.into();
            doc["field"] = d.field.into();
            doc["a"] = d.a.clone().into();
            doc["b"] = d.b.clone().into();
            let text = if d.step.is_some() {
                format!("{d}\n{}", context_line(&c))
            } else {
                d.to_string()
            };
            (Exit::Different, text)
        }
        Outcome::StoredRow { side, row } => {
            doc["result"] = "stored_row_differs".into();
            doc["stored_row"] = json!({
                "input": side.name(),
                "file": row.input,
                "step": row.step,
                "row": row.row,
                "stored": format!("{:016x}", row.stored),
                "computed": format!("{:016x}", row.computed),
            });
            let text = format!(
                "{side} does not reproduce its own hash row at step {} (row {} of {}): the file has {:016x}, its run computed {:016x}\n{}",
                row.step,
                row.row,
                row.input,
                row.stored,
                row.computed,
                context_line(&c),
                side = side.name(),
            );
            (Exit::Different, text)
        }
    };
    if args.json {
        println!("{doc}");
    } else {
        println!("{text}");
    }
    exit
}
