//! `ostm-host`: steps a test-module world and serves it live over TCP.
//!
//! # Layout
//! - `serve`: the `serve` command: arguments, the accept loop, status lines, shutdown.
//! - `hub`: what the stepping loop shares with the connections (ring, queues, counters).
//! - `stepper`: the stepping loop, on its own thread.
//! - `conn`: one viewer's connection: the driver of `ostm_protocol::serve::Conn`.
//! - `pending`: connections that have not sent their hello yet (a pool apart from the
//!   viewer slots).
//! - `tls`: the host's TLS identity, checked at startup as a viewer will check it.
//! - `cert`: the `cert` command: a CA and the host's certificate (rcgen).
//! - `metrics`: the Prometheus metrics (served by `ostm_runtime::metrics`).
//! - `publish`: the stream published to NATS JetStream.
//! - `source`: where the world and its inputs come from.

/// `println!` that a closed pipe (`| head`) does not turn into a panic
/// (`ostm_runtime::stdout`); defined before the modules, so it is theirs too.
macro_rules! println {
    ($($arg:tt)*) => { ostm_runtime::println!($($arg)*) };
}

mod cert;
mod conn;
mod direct;
mod fan_out;
mod framing;
mod hub;
mod metrics;
mod pending;
mod publish;
mod serve;
mod source;
mod stepper;
mod tally;
mod tls;
mod unpoisoned;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

/// The binary's name.
const BIN: &str = "ostm-host";

/// Step a deterministic test-module world and serve it live to viewers over TCP.
///
/// Exit codes: 0 the stream ended cleanly (steps done, replay done, or Ctrl-C or SIGTERM),
/// 2 bad arguments or a failure. Logs go to stderr (info by default: viewers attaching and
/// leaving); set RUST_LOG (e.g. RUST_LOG=warn or RUST_LOG=debug), and --log-format json for
/// one JSON object per line.
#[derive(Parser)]
#[command(name = "ostm-host", version, about, long_about = None)]
#[command(after_help = "Examples:
  ostm-host serve
  ostm-host serve --listen 127.0.0.1:0 --rate max --steps 100000
  ostm-host serve --replay testdata/test-10000.ostm --record host.ostm
  ostm-host serve --listen 0.0.0.0:7878 --token \"$OSTM_TOKEN\"
  ostm-host cert create-ca --certs-dir certs && ostm-host cert create-host localhost --certs-dir certs
  ostm-host completions bash > ~/.local/share/bash-completion/completions/ostm-host
  ostm-host man --out ~/.local/share/man/man1
See `ostm-host serve --help` for every option and example.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: ostm_runtime::logging::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Step a world and serve it on a TCP address.
    Serve(Box<serve::Args>),
    /// Make TLS files: a CA viewers trust, and the host's certificate and key signed by it.
    Cert(cert::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(ostm_runtime::shell::CompletionsArgs),
    /// Write the man pages (one per command) to a directory.
    Man(ostm_runtime::shell::ManArgs),
}

fn main() -> ExitCode {
    ignore_file_size_signal();
    // `info` by default, so an operator sees each viewer attach and leave; colour only
    // when stderr is a terminal, so a log written to a file holds no escape codes.
    let cmd = ostm_runtime::shell::named(Cli::command(), BIN);
    let cli = Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    ostm_runtime::logging::init("info", cli.log.log_format, std::io::stderr);
    match cli.command {
        Command::Serve(args) => serve::main(*args),
        Command::Cert(args) => cert::main(args),
        Command::Completions(args) => args.run(Cli::command(), BIN),
        Command::Man(args) => args.run(ostm_runtime::shell::named(Cli::command(), BIN)),
    }
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
