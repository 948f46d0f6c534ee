//! `ostm-viewer trace`: one line per step of a replay, every field exact.

use crate::exit::{fail, Exit};
use ostm_protocol::format::replay_stream::ReplayStream;
use ostm_protocol::format::trace::{trace_replay, trace_replay_watched, TraceError};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Arguments of `trace`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer trace testdata/test-10000.ostm > run.trace
  ostm-viewer trace testdata/test-10000.ostm --from 400 --to 420
  ostm-viewer trace run.ostm -o run.trace          # progress on a terminal, then `wrote …`
  ostm-viewer trace run.ostm -o run.trace --json

The format (docs/trace-format.md): a header line `ostm-trace 1`, a `setup` line, one
row per step `s=STEP h=HASH g=GRAVITY n=SLOTS | alive still px py pz vx vy vz | ...`,
and `end rows=N`. Compare two with `ostm-viewer first-difference`. With -o the file is
written whole through FILE.part; Ctrl-C or SIGTERM stops it and removes FILE.part (exit 2).")]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// First step to write (default: the replay's start step). The range --from..=--to
    /// must hold at least one of the replay's steps.
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub from: u64,
    /// Last step to write, inclusive (default: the replay's last).
    #[arg(long, default_value_t = u64::MAX, hide_default_value = true)]
    pub to: u64,
    /// Write to this file (whole, through FILE.part) instead of standard output.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// With -o: print what was written as JSON for scripts.
    #[arg(long, requires = "output")]
    pub json: bool,
}

/// Runs `trace`.
pub fn run(args: Args) -> Exit {
    if args.from > args.to {
        return fail(format!("--from {} is after --to {}", args.from, args.to));
    }
    let stream = match ReplayStream::open(&args.file) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let first = stream.header().start.as_ref().map_or(0, |w| w.step);
    let steps = u64::from(stream.header().steps);
    let last = first.wrapping_add(steps);
    // A replay whose steps run past u64::MAX holds first..=u64::MAX, then 0..=last.
    let (before, after) = if first.checked_add(steps).is_some() {
        (args.from <= last && args.to >= first, false)
    } else {
        (args.to >= first, args.from <= last)
    };
    if !before && !after {
        return fail(format!(
            "{}: --from {} --to {} holds none of the replay's steps {first}..={last}",
            args.file.display(),
            args.from,
            args.to
        ));
    }
    if before && after && (args.from, args.to) != (0, u64::MAX) {
        return fail(format!(
            "{}: --from {} --to {} holds steps {}..={} before the step counter wraps past {} \
             and {}..={} after it, but not the steps between: a trace's rows are consecutive \
             steps",
            args.file.display(),
            args.from,
            args.to,
            args.from.max(first),
            args.to,
            u64::MAX,
            args.from,
            args.to.min(last)
        ));
    }
    match &args.output {
        None => {
            let out = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
            match trace_replay(stream, out, args.from, args.to) {
                Ok(rows) => {
                    tracing::debug!(rows, "trace written");
                    Exit::Ok
                }
                Err(TraceError::Input(e)) => fail(e),
                // A reader that stopped early (`| head`) is not a failure.
                Err(TraceError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Ok,
                Err(TraceError::Write(e)) => fail(format!("cannot write the trace: {e}")),
                Err(TraceError::Stopped) => fail("interrupted"),
            }
        }
        Some(path) => {
            let worlds = if first.checked_add(steps).is_some() {
                args.to.min(last).saturating_sub(first).saturating_add(1)
            } else {
                steps.saturating_add(1)
            };
            to_file(stream, &args, path, worlds)
        }
    }
}

/// A trace of this many steps or more shows a progress bar on a terminal: each row
/// writes every body, so even the 10 000 steps of `test-10000.ostm` make 16 MB.
pub const TRACE_PROGRESS_MIN_STEPS: u64 = 4096;

/// `trace -o PATH`: the trace into `PATH.part` with a progress bar of `worlds` (on a
/// terminal), synced and renamed when whole; a signal stops it and removes `PATH.part`.
fn to_file(stream: ReplayStream<std::fs::File>, args: &Args, path: &Path, worlds: u64) -> Exit {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".part");
    let tmp = PathBuf::from(tmp);
    // Before the file exists: from here on a signal is seen by the loop, not fatal.
    let stop = ostm_runtime::signal::stop_flag();
    let file = match std::fs::File::create(&tmp) {
        Ok(f) => f,
        Err(e) => return fail(format!("cannot create {}: {e}", tmp.display())),
    };
    let bar = crate::progress::bar(worlds, TRACE_PROGRESS_MIN_STEPS, "trace");
    let rows = trace_replay_watched(
        stream,
        BufWriter::with_capacity(64 * 1024, file),
        args.from,
        args.to,
        |read| {
            if read % 1024 == 0 {
                bar.set_position(read);
            }
            !stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
        },
    );
    bar.finish_and_clear();
    let done = rows.and_then(|rows| {
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .and_then(|_| std::fs::rename(&tmp, path))
            .map(|_| rows)
            .map_err(TraceError::Write)
    });
    let rows = match done {
        Ok(rows) => rows,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return match e {
                TraceError::Input(e) => fail(e),
                TraceError::Write(e) => fail(format!("cannot write {}: {e}", path.display())),
                TraceError::Stopped => fail(format!(
                    "interrupted: {} removed, nothing written",
                    tmp.display()
                )),
            };
        }
    };
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    crate::report::report(
        args.json,
        serde_json::json!({
            "file": args.file.display().to_string(),
            "output": path.display().to_string(),
            "rows": rows,
            "bytes": bytes,
        }),
        || format!("wrote {}: {rows} rows, {bytes} bytes", path.display()),
    );
    Exit::Ok
}
