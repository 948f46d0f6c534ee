//! `ostm-viewer verify`: runs a replay from its start world and compares every hash row
//! by step number. The JSON object is documented in `docs/replay-format.md`.

use crate::cmd::inspect::{hex, malformed, read};
use crate::exit::{fail, Exit};
use ostm_protocol::{Replay, Verdict};
use std::io::IsTerminal;
use std::path::PathBuf;

/// Files with at least this many steps show a progress bar (when stderr is a terminal).
pub const PROGRESS_MIN_STEPS: usize = 65_536;

/// Arguments of `verify`.
#[derive(clap::Args)]
#[command(
    after_help = "Exit codes: 0 every hash row matches (or the file has none: the \
final hash is printed), 1 a row differs (the first one is named: its step and both \
hashes), 2 the file is malformed or unreadable.

Examples:
  ostm-viewer verify testdata/test-10000.ostm
  ostm-viewer verify testdata/test-2d-600.ostm --json | jq .result
  ostm-viewer verify run.ostm --bundle failure.ostmb && ostm-viewer replay failure.ostmb
  ostm-viewer verify run.ostm --from-keyframe k5000.json

On a mismatch a failure bundle is written (default FILE.ostmb; docs/bundle-format.md);
`ostm-viewer replay BUNDLE` reproduces it."
)]
pub struct Args {
    /// The replay file (.ostm).
    pub file: PathBuf,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Where to write the failure bundle on a mismatch (default: FILE.ostmb).
    #[arg(long, conflicts_with = "no_bundle")]
    pub bundle: Option<PathBuf>,
    /// Write no failure bundle on a mismatch.
    #[arg(long)]
    pub no_bundle: bool,
    /// Start from this keyframe (molen/keyframe@1, docs/keyframe.md) instead of the
    /// replay's start, and compare the rows from its tick on.
    #[arg(long)]
    pub from_keyframe: Option<PathBuf>,
}

/// The first hash row that differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// The step number the row belongs to (start step + row).
    pub step: u64,
    /// The row's index in the file.
    pub row: usize,
    /// The hash the file holds.
    pub expected: u64,
    /// The hash the run computed.
    pub actual: u64,
}

fn progress_bar(steps: usize) -> indicatif::ProgressBar {
    if steps < PROGRESS_MIN_STEPS || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(steps as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "verify {bar:40} {human_pos}/{human_len} steps, eta {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Runs `verify`.
pub fn run(args: Args) -> Exit {
    let replay = match read(&args.file) {
        Ok(r) => r,
        Err(e) => return malformed(&args.file, args.json, &e),
    };
    let verdict = match &args.from_keyframe {
        Some(k) => match ostm_protocol::keyframe::read_file(k)
            .map_err(|e| e.to_string())
            .and_then(|k| {
                ostm_protocol::keyframe::verify_from(&replay, k.world)
                    .map_err(|e| format!("{}: {e}", k_name(&args)))
            }) {
            Ok(v) => v,
            Err(e) => return fail(e),
        },
        None => {
            let bar = progress_bar(replay.step_count());
            let v = replay.verify(|done| bar.set_position(done as u64));
            bar.finish_and_clear();
            v
        }
    };
    match verdict {
        Verdict::Match {
            final_hash,
            rows_checked,
        } => matched(&args, &replay, final_hash, rows_checked),
        Verdict::Mismatch {
            step,
            row,
            expected,
            actual,
        } => mismatched(
            &args,
            &replay,
            Mismatch {
                step,
                row,
                expected,
                actual,
            },
        ),
    }
}

fn matched(args: &Args, replay: &Replay, final_hash: u64, rows_checked: u64) -> Exit {
    let start = replay.start_step();
    let end = start.wrapping_add(replay.step_count() as u64);
    let steps = replay.step_count();
    let no_rows = replay.hashes.is_none();
    tracing::info!(steps, rows_checked, final_hash = %hex(final_hash), "replay verified");
    if args.json {
        let doc = serde_json::json!({
            "file": args.file.display().to_string(),
            "result": if no_rows { "no_hash_rows" } else { "match" },
            "start_step": start,
            "step_count": steps,
            "end_step": end,
            "rows_checked": rows_checked,
            "final_hash": hex(final_hash),
        });
        return print_json(&doc, Exit::Ok);
    }
    if no_rows {
        println!(
            "no hash rows: ran {steps} steps (steps {start}..{end}); final hash {} at step {end}",
            hex(final_hash)
        );
    } else {
        println!(
            "ok: all {rows_checked} hash rows match (steps {start}..{end}); final hash {} at step {end}",
            hex(final_hash)
        );
    }
    Exit::Ok
}

/// Reports the first hash row that differs and returns exit 1.
///
/// This is the one place a mismatch is handled: anything more to do on a mismatch (such
/// as writing a failure bundle) hooks in here. The world just before the failing row's
/// step can be rebuilt by running `replay` from its start world for `row - 1` steps.
pub fn mismatched(args: &Args, replay: &Replay, m: Mismatch) -> Exit {
    let (file, json) = (args.file.as_path(), args.json);
    tracing::info!(step = m.step, row = m.row, "hash row differs");
    let bundle = (!args.no_bundle).then(|| write_bundle(args, replay, m));
    if json {
        let doc = serde_json::json!({
            "file": file.display().to_string(),
            "result": "mismatch",
            "start_step": replay.start_step(),
            "step_count": replay.step_count(),
            "end_step": replay.start_step().wrapping_add(replay.step_count() as u64),
            "rows_checked": m.row + 1,
            "mismatch": {
                "step": m.step,
                "row": m.row,
                "expected": hex(m.expected),
                "actual": hex(m.actual),
            },
            "bundle": bundle.as_ref().map(|b| b.as_ref().map(|p| p.display().to_string()).map_err(|e| e.to_string())),
        });
        return print_json(&doc, Exit::Different);
    }
    println!(
        "mismatch at step {} (hash row {}): the file has {}, the run computed {}",
        m.step,
        m.row,
        hex(m.expected),
        hex(m.actual)
    );
    if m.row > 0 {
        println!(
            "rows 0..={} (steps {}..={}) matched",
            m.row - 1,
            replay.start_step(),
            m.step.wrapping_sub(1)
        );
    }
    match bundle {
        Some(Ok(p)) => println!(
            "bundle written: {} (reproduce: ostm-viewer replay {})",
            p.display(),
            p.display()
        ),
        Some(Err(e)) => eprintln!("error: no bundle written: {e}"),
        None => {}
    }
    Exit::Different
}

fn k_name(args: &Args) -> String {
    args.from_keyframe
        .as_ref()
        .map(|k| k.display().to_string())
        .unwrap_or_default()
}

/// Writes the failure bundle for a mismatch: the writer's world is this run's at the row.
fn write_bundle(args: &Args, replay: &Replay, m: Mismatch) -> Result<PathBuf, String> {
    let path = args.bundle.clone().unwrap_or_else(|| {
        let mut s = args.file.as_os_str().to_owned();
        s.push(".ostmb");
        PathBuf::from(s)
    });
    let mut world = match &args.from_keyframe {
        Some(k) => {
            ostm_protocol::keyframe::read_file(k)
                .map_err(|e| e.to_string())?
                .world
        }
        None => replay.start_world(),
    };
    let first = (world.step - replay.start_step()) as usize;
    for i in first..m.row {
        world.step(&replay.inputs.ops(i));
    }
    let description = format!(
        "ostm-viewer {} verify {}{}: hash row {} (step {}) differs",
        env!("CARGO_PKG_VERSION"),
        args.file.display(),
        args.from_keyframe
            .as_ref()
            .map(|k| format!(" --from-keyframe {}", k.display()))
            .unwrap_or_default(),
        m.row,
        m.step
    );
    let bundle = ostm_protocol::bundle::Bundle::from_mismatch(
        replay,
        m.row,
        m.actual,
        Some(world),
        None,
        &description,
    )
    .ok_or("the replay has no such hash row")?;
    bundle
        .write_file(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

fn print_json(doc: &serde_json::Value, exit: Exit) -> Exit {
    match serde_json::to_string_pretty(doc) {
        Ok(text) => {
            println!("{text}");
            exit
        }
        Err(e) => fail(e),
    }
}
