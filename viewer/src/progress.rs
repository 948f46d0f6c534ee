//! Progress bars for long offline work, on stderr, shown only on a terminal.

use std::io::IsTerminal;

/// Work shorter than this many steps shows no bar (it ends before a bar would help).
pub const MIN_STEPS: u64 = 65_536;

/// A bar on stderr for `len` steps of work, labelled `what` ("verify", "trace"), or a
/// hidden one when stderr is not a terminal or the work is shorter than `min` steps.
pub fn bar(len: u64, min: u64, what: &str) -> indicatif::ProgressBar {
    if len < min || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} {bar:40} {human_pos}/{human_len} steps, eta {eta}",
    ) {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar
}
