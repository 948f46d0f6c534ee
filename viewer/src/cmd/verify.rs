//! `ostm-viewer verify`: runs a replay from its start world and compares every hash row
//! by step number; given several files of one live session (`session.ostm`,
//! `session.1.ostm`, …), verifies each and says where the gaps and overlaps between them
//! lie. The JSON objects are documented in `docs/replay-format.md`.

use crate::args::BundleArgs;
use crate::exit::{fail, Exit};
use crate::live::bundle::BundleTo;
use crate::report::bundle::{add_bundle_json, written_line, Written};
use crate::report::replay::{error_json, hex, malformed, read};
use ostm_protocol::format::trace::setup_line;
use ostm_protocol::{Replay, Verdict};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Files with at least this many steps show a progress bar (when stderr is a terminal).
pub const PROGRESS_MIN_STEPS: u64 = crate::progress::MIN_STEPS;

/// Arguments of `verify`.
#[derive(clap::Args)]
#[command(
    after_help = "Exit codes: 0 every hash row matches (or a file has none: the \
final hash is printed), 1 a row differs (the first one is named: its step and both \
hashes), or, for several files, two files disagree at a step both hold, 2 a file is \
malformed or unreadable, or several files are not of one world.

Examples:
  ostm-viewer verify testdata/test-10000.ostm
  ostm-viewer verify testdata/test-2d-600.ostm --json | jq .result
  ostm-viewer verify run.ostm --bundle failure.ostmb && ostm-viewer replay failure.ostmb
  ostm-viewer verify run.ostm --from-keyframe k5000.json
  ostm-viewer verify session.ostm session.1.ostm session.2.ostm
  ostm-viewer verify session*.ostm --json | jq '.gaps'

On a mismatch a failure bundle is written (default FILE.ostmb; docs/bundle-format.md);
`ostm-viewer replay BUNDLE` reproduces it.

Several files are the numbered files of one live session (a viewer's recording goes on
in session.1.ostm, session.2.ostm, ... after each resync). They must share one setup and
link block (else exit 2, nothing runs). Each is verified as it would be alone (a file
whose row differs gets its own bundle beside it; --bundle PATH and --from-keyframe take
one file only, exit 2 with several), then they are put in order of start step (so a
glob's order does not matter) and every gap between them is named:
  gap: steps 1200..1530 (330 steps) between session.ostm and session.1.ostm
as is every overlap, whose common steps must hold the same hash rows (compared by step
number; exit 1 where they differ). A last line sums it up: `ok: 3 files of one world,
...` or `mismatch: ...`."
)]
pub struct Args {
    /// The replay file (.ostm), or several files of one session.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub bundle: BundleArgs,
    /// Start from this keyframe (molen/keyframe@1, docs/keyframe.md) instead of the
    /// replay's start, and compare the rows from its tick on (one file only).
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

/// What verifying one file gave: its exit, its JSON object, and its text lines (stdout,
/// and stderr for a bundle that could not be written).
struct Report {
    exit: Exit,
    doc: Value,
    out: Vec<String>,
    err: Vec<String>,
}

/// How one file is verified: where its bundle goes, and the keyframe it starts from.
struct Opts<'a> {
    file: &'a Path,
    bundle: Option<PathBuf>,
    from_keyframe: Option<&'a Path>,
}

/// Runs `verify`.
pub fn run(args: Args) -> Exit {
    match args.files.as_slice() {
        [file] => run_one(&args, file),
        files => run_set(&args, files),
    }
}

/// One file: the report exactly as it has always been.
fn run_one(args: &Args, file: &Path) -> Exit {
    let replay = match read(file) {
        Ok(r) => r,
        Err(e) => return malformed(file, args.json, &e),
    };
    let opts = Opts {
        file,
        bundle: args.bundle.target(|| beside(file)).map(BundleTo::into_path),
        from_keyframe: args.from_keyframe.as_deref(),
    };
    let report = match verify_one(&opts, &replay) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if args.json {
        return print_json(&report.doc, report.exit);
    }
    for line in &report.out {
        println!("{line}");
    }
    for line in &report.err {
        eprintln!("{line}");
    }
    report.exit
}

/// The default bundle path: `FILE.ostmb`.
fn beside(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".ostmb");
    PathBuf::from(s)
}

/// Verifies one replay from its start (or from the keyframe) and builds its report.
/// `Err` is a keyframe that cannot be used (exit 2).
fn verify_one(opts: &Opts<'_>, replay: &Replay) -> Result<Report, String> {
    // The step the run starts from: the keyframe's tick, else the file's start step.
    let (verdict, from) = match opts.from_keyframe {
        Some(k) => ostm_protocol::format::keyframe::read_file(k)
            .map_err(|e| e.to_string())
            .and_then(|kf| {
                let from = kf.world.step;
                ostm_protocol::format::keyframe::verify_from(replay, kf.world)
                    .map(|v| (v, from))
                    .map_err(|e| format!("{}: {e}", k.display()))
            })?,
        None => {
            let bar =
                crate::progress::bar(replay.step_count() as u64, PROGRESS_MIN_STEPS, "verify");
            let v = replay.verify(|done| bar.set_position(done as u64));
            bar.finish_and_clear();
            (v, replay.start_step())
        }
    };
    Ok(match verdict {
        Verdict::Match {
            final_hash,
            rows_checked,
        } => matched(opts, replay, from, final_hash, rows_checked),
        Verdict::Mismatch {
            step,
            row,
            expected,
            actual,
        } => mismatched(
            opts,
            replay,
            from,
            Mismatch {
                step,
                row,
                expected,
                actual,
            },
        ),
    })
}

/// Reports a run whose rows all matched; `from` is the step the run started from (the
/// keyframe's tick with `--from-keyframe`, else the file's start step).
fn matched(
    opts: &Opts<'_>,
    replay: &Replay,
    from: u64,
    final_hash: u64,
    rows_checked: u64,
) -> Report {
    let start = replay.start_step();
    let end = replay.end_step();
    let steps = end.wrapping_sub(from);
    let no_rows = replay.hashes.is_none();
    tracing::info!(steps, rows_checked, final_hash = %hex(final_hash), "replay verified");
    let doc = json!({
        "file": opts.file.display().to_string(),
        "result": if no_rows { "no_hash_rows" } else { "match" },
        "start_step": start,
        "step_count": replay.step_count(),
        "end_step": end,
        "from_step": from,
        "rows_checked": rows_checked,
        "final_hash": hex(final_hash),
    });
    let keyframe = match opts.from_keyframe {
        Some(k) => format!(" from the keyframe {}", k.display()),
        None => String::new(),
    };
    let line = if no_rows {
        format!(
            "no hash rows: ran {steps} steps (steps {from}..{end}){keyframe}; final hash {} at step {end}",
            hex(final_hash)
        )
    } else {
        format!(
            "ok: all {rows_checked} hash rows match (steps {from}..{end}){keyframe}; final hash {} at step {end}",
            hex(final_hash)
        )
    };
    Report {
        exit: Exit::Ok,
        doc,
        out: vec![line],
        err: Vec::new(),
    }
}

/// Reports the first hash row that differs (exit 1).
///
/// This is the one place a mismatch is handled: anything more to do on a mismatch (such
/// as writing a failure bundle) hooks in here. The world just before the failing row's
/// step can be rebuilt by running `replay` from its start world for `row - 1` steps.
///
/// `from` is the step the run started from: rows before it were not compared.
fn mismatched(opts: &Opts<'_>, replay: &Replay, from: u64, m: Mismatch) -> Report {
    tracing::info!(step = m.step, row = m.row, "hash row differs");
    let bundle = opts
        .bundle
        .clone()
        .map(|path| write_bundle(opts, replay, m, path));
    let first_row = from.wrapping_sub(replay.start_step()) as usize;
    let mut doc = json!({
        "file": opts.file.display().to_string(),
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
    let mut out = vec![format!(
        "mismatch at step {} (hash row {}): the file has {}, the run computed {}",
        m.step,
        m.row,
        hex(m.expected),
        hex(m.actual)
    )];
    if m.row > first_row {
        out.push(format!(
            "rows {first_row}..={} (steps {from}..={}) matched",
            m.row - 1,
            m.step.wrapping_sub(1)
        ));
    }
    let mut err = Vec::new();
    match &bundle {
        Some(w @ Ok(_)) => out.push(written_line(w)),
        Some(w @ Err(_)) => err.push(written_line(w)),
        None => {}
    }
    Report {
        exit: Exit::Different,
        doc,
        out,
        err,
    }
}

/// Writes the failure bundle for a mismatch: the writer's world is this run's at the row.
fn write_bundle(opts: &Opts<'_>, replay: &Replay, m: Mismatch, path: PathBuf) -> Written {
    let mut world = match opts.from_keyframe {
        Some(k) => {
            ostm_protocol::format::keyframe::read_file(k)
                .map_err(|e| e.to_string())?
                .world
        }
        None => replay.start_world(),
    };
    let first = world.step.wrapping_sub(replay.start_step()) as usize;
    for i in first..m.row {
        world.step(&replay.inputs.ops(i));
    }
    let description = format!(
        "ostm-viewer {} verify {}{}: hash row {} (step {}) differs",
        env!("CARGO_PKG_VERSION"),
        opts.file.display(),
        opts.from_keyframe
            .map(|k| format!(" --from-keyframe {}", k.display()))
            .unwrap_or_default(),
        m.row,
        m.step
    );
    let bundle = ostm_protocol::format::bundle::Bundle::from_mismatch(
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

// ---------------------------------------------------------------------------------------
// Several files of one session

/// One file of a set, as read in the first pass.
struct Member {
    path: PathBuf,
    /// `setup dims=… bodies=… seed=… link=…`: the setup and link block.
    world: String,
    start: u64,
    /// The end step, start + step count counted on past `u64::MAX` (a file whose steps
    /// wrap to 0 after it reaches further than every file that starts after it); a step
    /// beyond `u64::MAX` is printed as its wrapped number (see [`step_no`]).
    end: u128,
}

/// The step number a position of the set's order is printed as: the world's step, which
/// wraps to 0 after `u64::MAX`.
fn step_no(position: u128) -> u64 {
    position as u64
}

/// A stretch of steps no file holds, between the file reaching furthest before it and the
/// next file.
struct Gap {
    from: u128,
    to: u128,
    after: usize,
    before: usize,
}

/// Steps `from..=to` held by two files (`first` starts no later than `second`), and the
/// hash rows each holds there, filled in as the files are run.
struct Overlap {
    from: u128,
    to: u128,
    first: usize,
    second: usize,
    rows: [Vec<u64>; 2],
}

impl Overlap {
    /// The first step whose rows differ, with both rows.
    fn difference(&self) -> Option<(u64, u64, u64)> {
        let [a, b] = &self.rows;
        (0..)
            .zip(a.iter().zip(b))
            .find(|(_, (x, y))| x != y)
            .map(|(i, (x, y))| (step_no(self.from + i), *x, *y))
    }
}

/// The hash rows of `replay` at steps `from..=to` (inside the replay, counted on past
/// `u64::MAX` as [`Member::end`] is): the stored rows, or, for a file without them, the
/// hashes its run computes.
fn rows_at(replay: &Replay, from: u128, to: u128) -> Vec<u64> {
    let start = u128::from(replay.start_step());
    let (i, j) = (
        from.saturating_sub(start) as usize,
        to.saturating_sub(start) as usize,
    );
    if let Some(rows) = &replay.hashes {
        return rows.get(i..=j).map(<[u64]>::to_vec).unwrap_or_default();
    }
    let mut world = replay.start_world();
    let mut out = Vec::with_capacity(j.saturating_sub(i) + 1);
    let mut ops = Vec::new();
    for k in 0..=j.min(replay.step_count()) {
        if k > 0 {
            replay.inputs.ops_into(k - 1, &mut ops);
            world.step(&ops);
        }
        if k >= i {
            out.push(world.hash());
        }
    }
    out
}

fn set_json(result: &str, files: Vec<Value>) -> Value {
    json!({ "result": result, "files": files, "gaps": [], "overlaps": [] })
}

/// Several files: each verified, then ordered by start step, gaps and overlaps named.
fn run_set(args: &Args, files: &[PathBuf]) -> Exit {
    if args.from_keyframe.is_some() {
        return fail(format!(
            "--from-keyframe starts one file from a keyframe; {} files given",
            files.len()
        ));
    }
    if args.bundle.bundle.is_some() {
        return fail(format!(
            "--bundle names one bundle; with {} files each mismatching file gets its own \
             beside it (FILE.ostmb), or give --no-bundle",
            files.len()
        ));
    }
    // First pass: every file whole and valid, and all of one world, before anything runs.
    let mut members = Vec::with_capacity(files.len());
    let mut refused = Vec::new();
    let mut objects = Vec::with_capacity(files.len());
    for path in files {
        match read(path) {
            Ok(r) => {
                objects.push(json!({ "file": path.display().to_string(), "valid": true }));
                members.push(Member {
                    path: path.clone(),
                    world: setup_line(&r.setup, r.link),
                    start: r.start_step(),
                    end: u128::from(r.start_step()) + r.step_count() as u128,
                });
            }
            Err(e) => {
                objects.push(json!({
                    "file": path.display().to_string(),
                    "valid": false,
                    "error": error_json(&e),
                }));
                refused.push(e);
            }
        }
    }
    if !refused.is_empty() {
        if args.json {
            let _ = print_json(&set_json("malformed", objects), Exit::Failure);
        }
        for e in &refused {
            eprintln!("error: {e}");
        }
        return Exit::Failure;
    }
    if let Some(other) = members.iter().find(|m| m.world != members[0].world) {
        let first = &members[0];
        let message = format!(
            "{} and {} are not files of one world: {} has \"{}\", {} has \"{}\" (a viewer that reconnected to a host restarted with another world records that world in files of its own: verify the files of each world apart)",
            first.path.display(),
            other.path.display(),
            first.path.display(),
            first.world,
            other.path.display(),
            other.world
        );
        if args.json {
            let worlds = members
                .iter()
                .map(|m| json!({ "file": m.path.display().to_string(), "setup": m.world }))
                .collect();
            let mut doc = set_json("different_worlds", worlds);
            doc["error"] = message.clone().into();
            let _ = print_json(&doc, Exit::Failure);
        }
        return fail(message);
    }
    // In order of start step (then end step); the order given breaks ties.
    members.sort_by_key(|m| (m.start, m.end));
    let (gaps, mut overlaps) = coverage(&members);

    // Second pass: each file verified as it would be alone, and its rows in every overlap.
    let mut reports = Vec::with_capacity(members.len());
    for (k, m) in members.iter().enumerate() {
        let replay = match read(&m.path) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        let opts = Opts {
            file: &m.path,
            bundle: args
                .bundle
                .target(|| beside(&m.path))
                .map(BundleTo::into_path),
            from_keyframe: None,
        };
        match verify_one(&opts, &replay) {
            Ok(r) => reports.push(r),
            Err(e) => return fail(e),
        }
        for o in overlaps.iter_mut() {
            for (side, idx) in [o.first, o.second].into_iter().enumerate() {
                if idx == k {
                    o.rows[side] = rows_at(&replay, o.from, o.to);
                }
            }
        }
    }
    report_set(args, &members, reports, &gaps, &overlaps)
}

/// The gaps and overlaps of files in start order.
fn coverage(members: &[Member]) -> (Vec<Gap>, Vec<Overlap>) {
    let mut gaps = Vec::new();
    let mut overlaps = Vec::new();
    // The file reaching furthest so far.
    let mut reach = 0usize;
    for j in 1..members.len() {
        let next = &members[j];
        if u128::from(next.start) > members[reach].end {
            gaps.push(Gap {
                from: members[reach].end,
                to: u128::from(next.start),
                after: reach,
                before: j,
            });
        }
        for (i, earlier) in members[..j].iter().enumerate() {
            if earlier.end >= u128::from(next.start) {
                overlaps.push(Overlap {
                    from: u128::from(next.start),
                    to: earlier.end.min(next.end),
                    first: i,
                    second: j,
                    rows: [Vec::new(), Vec::new()],
                });
            }
        }
        if next.end > members[reach].end {
            reach = j;
        }
    }
    (gaps, overlaps)
}

fn report_set(
    args: &Args,
    members: &[Member],
    reports: Vec<Report>,
    gaps: &[Gap],
    overlaps: &[Overlap],
) -> Exit {
    let name = |i: usize| members[i].path.display().to_string();
    let failed_files = reports.iter().filter(|r| r.exit != Exit::Ok).count();
    let failed_overlaps = overlaps.iter().filter(|o| o.difference().is_some()).count();
    let exit = if failed_files + failed_overlaps == 0 {
        Exit::Ok
    } else {
        Exit::Different
    };
    let first = members.first().map_or(0, |m| m.start);
    let last = step_no(members.iter().map(|m| m.end).max().unwrap_or(0));
    let missing: u128 = gaps.iter().map(|g| g.to - g.from).sum();
    if args.json {
        let doc = json!({
            "result": if exit == Exit::Ok { "match" } else { "mismatch" },
            "first_step": first,
            "end_step": last,
            "files": reports.iter().map(|r| r.doc.clone()).collect::<Vec<_>>(),
            "gaps": gaps.iter().map(|g| json!({
                "from": step_no(g.from),
                "to": step_no(g.to),
                "steps": step_no(g.to - g.from),
                "after": name(g.after),
                "before": name(g.before),
            })).collect::<Vec<_>>(),
            "overlaps": overlaps.iter().map(|o| {
                let d = o.difference();
                json!({
                    "from": step_no(o.from),
                    "to": step_no(o.to),
                    "rows": step_no(o.to - o.from + 1),
                    "files": [name(o.first), name(o.second)],
                    "agree": d.is_none(),
                    "mismatch": d.map(|(step, x, y)| json!({
                        "step": step,
                        "hashes": [hex(x), hex(y)],
                    })),
                })
            }).collect::<Vec<_>>(),
        });
        return print_json(&doc, exit);
    }
    for (k, r) in reports.iter().enumerate() {
        for line in &r.out {
            println!("{}: {line}", name(k));
        }
        for line in &r.err {
            eprintln!("{}: {line}", name(k));
        }
    }
    for g in gaps {
        println!(
            "gap: steps {}..{} ({} steps) between {} and {}",
            step_no(g.from),
            step_no(g.to),
            g.to - g.from,
            name(g.after),
            name(g.before)
        );
    }
    for o in overlaps {
        let rows = o.to - o.from + 1;
        let held = format!(
            "overlap: steps {}..={} ({rows} row{}) held by both {} and {}",
            step_no(o.from),
            step_no(o.to),
            if rows == 1 { "" } else { "s" },
            name(o.first),
            name(o.second)
        );
        match o.difference() {
            None => println!("{held}: every row agrees"),
            Some((step, x, y)) => println!(
                "{held}: they differ at step {step}: {} has {}, {} has {}",
                name(o.first),
                hex(x),
                name(o.second),
                hex(y)
            ),
        }
    }
    let summary = format!(
        "{} files of one world, steps {first}..{last}; {} gap{} ({missing} steps in no file), {} overlap{}",
        members.len(),
        gaps.len(),
        if gaps.len() == 1 { "" } else { "s" },
        overlaps.len(),
        if overlaps.len() == 1 { "" } else { "s" },
    );
    if exit == Exit::Ok {
        println!("ok: {summary}; every file verifies and every step held twice agrees");
    } else {
        println!(
            "mismatch: {summary}; {failed_files} file{} with a differing hash row, {failed_overlaps} overlap{} that disagree{}",
            if failed_files == 1 { "" } else { "s" },
            if failed_overlaps == 1 { "" } else { "s" },
            if failed_overlaps == 1 { "s" } else { "" },
        );
    }
    exit
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
