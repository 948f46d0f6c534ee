//! One module per subcommand.

pub mod attach;
pub mod check;
pub mod compare;
pub mod fields;
pub mod first_difference;
pub mod follow;
pub mod ghost;
pub mod index;
pub mod inspect;
pub mod keyframe;
pub mod recover;
pub mod render;
pub mod replay;
pub mod seek;
pub mod sessions;
pub mod trace;
pub mod verify;
pub mod watch;

/// Prints what a command did on stdout: with `--json` the object `doc` on one line, else
/// the sentence `line` (for a command that wrote a file, `wrote FILE: …`).
pub fn report(json: bool, doc: serde_json::Value, line: impl FnOnce() -> String) {
    if json {
        println!("{doc}");
    } else {
        println!("{}", line());
    }
}

/// The log filter without `RUST_LOG`: warnings, except the SVG library's own, which
/// warns once per text element or glyph about fonts (`render` says it once itself:
/// [`crate::render::png`]).
pub const DEFAULT_LOG: &str = "warn,usvg=error";

/// Logs to stderr through `tracing` (text or JSON: `--log-format`), filtered by `RUST_LOG` (default [`DEFAULT_LOG`]);
/// colours only when stderr is a terminal, so redirected logs hold no escape codes; held
/// while the terminal view has the screen ([`crate::tui::logs`]).
pub fn init_logging(format: ostm_runtime::logging::LogFormat) {
    ostm_runtime::logging::init(DEFAULT_LOG, format, crate::tui::logs::Stderr);
}
