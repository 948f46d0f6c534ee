//! `ostm-viewer`: inspects, verifies, attaches to, records and compares test-module worlds.
//!
//! Each subcommand lives in `cmd/<name>.rs` with its own `Args` and `run`.

/// `println!` and `print!` that a closed pipe (`| head`) does not turn into a panic
/// (`ostm_runtime::stdout`); defined before the modules, so they are theirs too.
macro_rules! println {
    ($($arg:tt)*) => { ostm_runtime::println!($($arg)*) };
}
macro_rules! print {
    ($($arg:tt)*) => { ostm_runtime::print!($($arg)*) };
}

mod args;
mod cmd;
mod exit;
mod live;
mod metrics;
mod priority;
mod progress;
mod render;
mod report;
mod strip;
mod tui;
mod web;
mod world_at;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use exit::Exit;
use std::process::ExitCode;

/// The binary's name.
const BIN: &str = "ostm-viewer";

/// Watch, record and check deterministic test-module worlds.
///
/// Exit codes, for every command: 0 ok, 1 a difference or drift was found,
/// 2 bad input or failure. Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug), and
/// --log-format json for one JSON object per line.
#[derive(Parser)]
#[command(name = "ostm-viewer", version, about, long_about = None)]
#[command(after_help = "Examples:
  ostm-viewer inspect testdata/test-10000.ostm
  ostm-viewer verify testdata/test-10000.ostm --json
  ostm-viewer attach 127.0.0.1:7878 --record session.ostm
  ostm-viewer watch 127.0.0.1:7878             # prints a URL: open it in a browser
  ostm-viewer recover session.ostm.part
  ostm-viewer check 127.0.0.1:7878 --steps 600
  ostm-viewer sessions nats://127.0.0.1:4222   # the sessions a NATS server holds
  ostm-viewer render testdata/test-field-2d.ostm --step 300 -o frame.png
  ostm-viewer follow testdata/test-link-left.ostm testdata/test-link-right.ostm --body 3
  ostm-viewer completions bash > ~/.local/share/bash-completion/completions/ostm-viewer
  ostm-viewer man --out ~/.local/share/man/man1")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: ostm_runtime::logging::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and validate a replay, print its header, flags, setup and op counts.
    Inspect(cmd::inspect::Args),
    /// Run a replay (or the numbered files of one session) and compare every hash row by step number.
    Verify(cmd::verify::Args),
    /// Attach to a live host at any step, verify every step by number, record, report drift.
    Attach(args::AttachArgs),
    /// Attach as attach does and serve a live web view of the verified world; or serve a replay with a timeline.
    Watch(cmd::watch::Args),
    /// Attach, verify N steps, and print a one-line verdict (for monitoring scripts).
    Check(cmd::check::Args),
    /// Print a world's density (per grid vertex) and occupancy (per triangle) at a step.
    Fields(cmd::fields::Args),
    /// Draw a world at a step as SVG or PNG: box, bodies, a field overlay, ghosts.
    Render(cmd::render::Args),
    /// Follow a body across a linked pair of replays; exit 1 if they do not continue each other.
    Follow(cmd::follow::Args),
    /// Write a pose cache (.ospc) of a replay's bodies moved by an offset.
    Ghost(cmd::ghost::Args),
    /// Compare a replay with a pose cache frame by frame; exit 1 beyond the tolerance.
    Compare(cmd::compare::Args),
    /// Print one line per step of a replay: hash, gravity and every body's fields.
    Trace(cmd::trace::Args),
    /// Find where two traces or replays first differ (exit 0 same, 1 different, 2 bad input).
    FirstDifference(cmd::first_difference::Args),
    /// Turn what a killed recording left (FILE.part) into a valid .ostm replay.
    Recover(cmd::recover::Args),
    /// Reproduce the failure a bundle holds and print the first difference.
    Replay(cmd::replay::Args),
    /// Export the world at a step as a molen/keyframe@1 JSON keyframe.
    Keyframe(cmd::keyframe::Args),
    /// Write a seek index: keyframes every K steps beside a replay.
    Index(cmd::index::Args),
    /// Reach a step from the nearest indexed keyframe.
    Seek(cmd::seek::Args),
    /// List the sessions a NATS server holds: world, host step, rate, oldest step, last keyframe, ended.
    Sessions(cmd::sessions::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(ostm_runtime::shell::CompletionsArgs),
    /// Write the man pages (one per command) to a directory.
    Man(ostm_runtime::shell::ManArgs),
}

/// The log filter without `RUST_LOG`: warnings, and the live session's events at info
/// ([`report::log::TARGET`]), except the SVG library's own warnings, once per text element
/// or glyph about fonts (`render` says it once itself: [`crate::render::png`]).
pub const DEFAULT_LOG: &str = "warn,ostm_viewer::session=info,usvg=error";

/// [`DEFAULT_LOG`] for a person at a terminal: text logs whose stderr and stdout are the
/// same screen would repeat each session line the command prints, so the session's events
/// are logged from `warn` there too (`RUST_LOG=ostm_viewer::session=info` brings them back).
pub const TERMINAL_LOG: &str = "warn,usvg=error";

/// Logs to stderr through `tracing` (text or JSON: `--log-format`), filtered by
/// `RUST_LOG` (default [`DEFAULT_LOG`], or [`TERMINAL_LOG`] for text when stdout and
/// stderr are both terminals); colours only when stderr is a terminal, so redirected logs
/// hold no escape codes; held while the terminal view has the screen ([`tui::logs`]).
fn init_logging(format: ostm_runtime::logging::LogFormat) {
    use std::io::IsTerminal;
    let on_screen = format == ostm_runtime::logging::LogFormat::Text
        && std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal();
    let default = if on_screen { TERMINAL_LOG } else { DEFAULT_LOG };
    ostm_runtime::logging::init(default, format, tui::logs::Stderr);
}

fn main() -> ExitCode {
    ignore_file_size_signal();
    let cmd = ostm_runtime::shell::named(Cli::command(), BIN);
    let cli = Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    init_logging(cli.log.log_format);
    let exit: Exit = match cli.command {
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Attach(a) => cmd::attach::run(a),
        Command::Watch(a) => cmd::watch::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Fields(a) => cmd::fields::run(a),
        Command::Render(a) => cmd::render::run(a),
        Command::Follow(a) => cmd::follow::run(a),
        Command::Ghost(a) => cmd::ghost::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::FirstDifference(a) => cmd::first_difference::run(a),
        Command::Recover(a) => cmd::recover::run(a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::Keyframe(a) => cmd::keyframe::run(a),
        Command::Index(a) => cmd::index::run(a),
        Command::Seek(a) => cmd::seek::run(a),
        Command::Sessions(a) => cmd::sessions::run(a),
        Command::Completions(a) => return a.run(Cli::command(), BIN),
        Command::Man(a) => return a.run(ostm_runtime::shell::named(Cli::command(), BIN)),
    };
    exit.into()
}

/// A file-size limit (`ulimit -f`, `prlimit --fsize`) must not kill the process without a
/// word: with SIGXFSZ ignored, a write past the limit fails with EFBIG, which is reported
/// like any failed write (naming the file, and `recover` for a recording).
fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler of ours and
    // touches no memory; it is done before any other thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}
