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
    #[command(flatten)]
    pub bundle: BundleArgs,
    /// Start from this keyframe (molen/keyframe@1, docs/keyframe.md) instead of the
    /// replay's start, and compare the rows from its tick on.
    #[arg(long)]
    pub from_keyframe: Option<PathBuf>,
}

/// Where a failure bundle goes: `--bundle PATH` or `--no-bundle`. Shared by every command
/// that writes one (`verify`, `attach`, `check`); each states its default in its help.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BundleArgs {
    /// Where to write the failure bundle (default: see below).
    #[arg(long, conflicts_with = "no_bundle")]
    pub bundle: Option<PathBuf>,
    /// Write no failure bundle.
    #[arg(long)]
    pub no_bundle: bool,
}

impl BundleArgs {
    /// The path to write to: `--bundle`, else `default()`; `None` with `--no-bundle`.
    pub fn target(&self, default: impl FnOnce() -> PathBuf) -> Option<PathBuf> {
        if self.no_bundle {
            return None;
        }
        Some(self.bundle.clone().unwrap_or_else(default))
    }
}

/// What became of a bundle: its path, or why it could not be written.
pub type Written = Result<PathBuf, String>;

/// The line printed for a bundle: where it is and the one command that replays it.
pub fn written_line(w: &Written) -> String {
    match w {
        Ok(p) => format!(
            "bundle written: {} (reproduce: ostm-viewer replay {})",
            p.display(),
            p.display()
        ),
        Err(e) => format!("error: no bundle written: {e}"),
    }
}

/// Adds `bundle` (the path, or null) and, when writing failed, `bundle_error` to a JSON
/// result object.
pub fn add_bundle_json(obj: &mut serde_json::Value, w: Option<&Written>) {
    obj["bundle"] = match w {
        Some(Ok(p)) => p.display().to_string().into(),
        _ => serde_json::Value::Null,
    };
    if let Some(Err(e)) = w {
        obj["bundle_error"] = e.clone().into();
    }
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
    // The step the run starts from: the keyframe's tick, else the file's start step.
    let (verdict, from) = match &args.from_keyframe {
        Some(k) => match ostm_protocol::keyframe::read_file(k)
            .map_err(|e| e.to_string())
            .and_then(|k| {
                let from = k.world.step;
                ostm_protocol::keyframe::verify_from(&replay, k.world)
                    .map(|v| (v, from))
                    .map_err(|e| format!("{}: {e}", k_name(&args)))
            }) {
            Ok(v) => v,
            Err(e) => return fail(e),
        },
        None => {
            let bar = progress_bar(replay.step_count());
            let v = replay.verify(|done| bar.set_position(done as u64));
            bar.finish_and_clear();
            (v, replay.start_step())
        }
    };
    match verdict {
        Verdict::Match {
            final_hash,
            rows_checked,
        } => matched(&args, &replay, from, final_hash, rows_checked),
        Verdict::Mismatch {
            step,
            row,
            expected,
            actual,
        } => mismatched(
            &args,
            &replay,
            from,
            Mismatch {
                step,
                row,
                expected,
                actual,
            },
        ),
    }
}

/// Reports a run whose rows all matched; `from` is the step the run started from (the
/// keyframe's tick with `--from-keyframe`, else the file's start step).
fn matched(args: &Args, replay: &Replay, from: u64, final_hash: u64, rows_checked: u64) -> Exit {
    let start = replay.start_step();
    let end = replay.end_step();
    let steps = end.wrapping_sub(from);
    let no_rows = replay.hashes.is_none();
    tracing::info!(steps, rows_checked, final_hash = %hex(final_hash), "replay verified");
    if args.json {
        let doc = serde_json::json!({
            "file": args.file.display().to_string(),
            "result": if no_rows { "no_hash_rows" } else { "match" },
            "start_step": start,
            "step_count": replay.step_count(),
            "end_step": end,
            "from_step": from,
            "rows_checked": rows_checked,
            "final_hash": hex(final_hash),
        });
        return print_json(&doc, Exit::Ok);
    }
    let keyframe = match &args.from_keyframe {
        Some(k) => format!(" from the keyframe {}", k.display()),
        None => String::new(),
    };
    if no_rows {
        println!(
            "no hash rows: ran {steps} steps (steps {from}..{end}){keyframe}; final hash {} at step {end}",
            hex(final_hash)
        );
    } else {
        println!(
            "ok: all {rows_checked} hash rows match (steps {from}..{end}){keyframe}; final hash {} at step {end}",
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
///
/// `from` is the step the run started from: rows before it were not compared.
pub fn mismatched(args: &Args, replay: &Replay, from: u64, m: Mismatch) -> Exit {
    let (file, json) = (args.file.as_path(), args.json);
    tracing::info!(step = m.step, row = m.row, "hash row differs");
    let bundle = args
        .bundle
        .target(|| {
            let mut s = args.file.as_os_str().to_owned();
            s.push(".ostmb");
            PathBuf::from(s)
        })
        .map(|path| write_bundle(args, replay, m, path));
    let first_row = from.wrapping_sub(replay.start_step()) as usize;
    if json {
        let mut doc = serde_json::json!({
            "file": file.display().to_string(),
            "result": "mismatch",
            "start_step": replay.start_step(),
            "step_count": replay.step_count(),
            "end_step": replay.end_step(),
            "from_step": from,
            "rows_checked": m.row + 1 - first_row,
            "mismatch": {
                "step": m.step,
                "row": m.row,
                "expected": hex(m.expected),
                "actual": hex(m.actual),
            },
        });
        add_bundle_json(&mut doc, bundle.as_ref());
        return print_json(&doc, Exit::Different);
    }
    println!(
        "mismatch at step {} (hash row {}): the file has {}, the run computed {}",
        m.step,
        m.row,
        hex(m.expected),
        hex(m.actual)
    );
    if m.row > first_row {
        println!(
            "rows {first_row}..={} (steps {from}..={}) matched",
            m.row - 1,
            m.step.wrapping_sub(1)
        );
    }
    match &bundle {
        Some(w @ Ok(_)) => println!("{}", written_line(w)),
        Some(w @ Err(_)) => eprintln!("{}", written_line(w)),
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
fn write_bundle(args: &Args, replay: &Replay, m: Mismatch, path: PathBuf) -> Written {
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
