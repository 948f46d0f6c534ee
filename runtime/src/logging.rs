//! The one logging set-up of the binaries.

use std::io::IsTerminal;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Logs through `tracing` to `writer` (standard error, or a writer in front of it),
/// filtered by `RUST_LOG`, else by `default_filter`; colours only when stderr is a
/// terminal, so a log written to a file holds no escape codes.
pub fn init<W>(default_filter: &str, writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
