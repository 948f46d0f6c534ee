//! `ostm-viewer trace`: one line per step of a replay, every field exact.

use crate::exit::{fail, Exit};
use ostm_protocol::trace::{trace_replay, ReplayStream, TraceError};
use std::io::BufWriter;
use std::path::PathBuf;

/// Arguments of `trace`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  ostm-viewer trace testdata/test-10000.ostm > run.trace
  ostm-viewer trace testdata/test-10000.ostm --from 400 --to 420
  ostm-viewer trace run.ostm -o run.trace

The format (docs/trace-format.md): a header line `ostm-trace 1`, a `setup` line, one
row per step `s=STEP h=HASH g=GRAVITY n=SLOTS | alive still px py pz vx vy vz | ...`,
and `end rows=N`. Compare two with `ostm-viewer first-difference`.")]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// First step to write (default: the replay's start step). The range --from..=--to
    /// must hold at least one of the replay's steps.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// Last step to write, inclusive (default: the replay's last).
    #[arg(long, default_value_t = u64::MAX, hide_default_value = true)]
    pub to: u64,
    /// Write to this file (whole, through FILE.part) instead of standard output.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
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
            }
        }
        Some(path) => {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".part");
            let tmp = PathBuf::from(tmp);
            let file = match std::fs::File::create(&tmp) {
                Ok(f) => f,
                Err(e) => return fail(format!("cannot create {}: {e}", tmp.display())),
            };
            let done = trace_replay(
                stream,
                BufWriter::with_capacity(64 * 1024, file),
                args.from,
                args.to,
            )
            .and_then(|_| {
                std::fs::File::open(&tmp)
                    .and_then(|f| f.sync_all())
                    .map_err(TraceError::Write)
            })
            .and_then(|_| std::fs::rename(&tmp, path).map_err(TraceError::Write));
            match done {
                Ok(()) => Exit::Ok,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    match e {
                        TraceError::Input(e) => fail(e),
                        TraceError::Write(e) => {
                            fail(format!("cannot write {}: {e}", path.display()))
                        }
                    }
                }
            }
        }
    }
}
