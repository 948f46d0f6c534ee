//! The one logging set-up of the binaries: `tracing` to standard error, as text or as
//! JSON (`--log-format json`, one object per line).

use std::io::IsTerminal;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per event: time, level, spans, target, message, fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields` (`message` and the
    /// event's fields), `target`, `span` and `spans` (the spans and their fields).
    Json,
}

/// The logging options both binaries take (on every command).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// How log lines on stderr are written: text, or json (one object per line, for log
    /// shippers). RUST_LOG still filters them.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text,
        env = "OSTM_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
}

/// Logs through `tracing` to `writer` (standard error, or a writer in front of it) in
/// `format`, filtered by `RUST_LOG`, else by `default_filter`; text has colours only when
/// stderr is a terminal, so a log written to a file holds no escape codes.
pub fn init<W>(default_filter: &str, format: LogFormat, writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}
