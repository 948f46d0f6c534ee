//! What commands print, below the commands that print it: the live session's lines and
//! verdict ([`session`]) and its log ([`log`]), a failure bundle's line ([`bundle`]), a world's fields
//! ([`fields`]), a replay's hashes, errors and link ([`replay`]).

pub mod bundle;
pub mod fields;
pub mod ghost;
pub mod lines;
pub mod log;
pub mod replay;
pub mod session;

use std::io::Write;

/// Prints what a command did on stdout: with `--json` the object `doc` on one line, else
/// the sentence `line` (for a command that wrote a file, `wrote FILE: …`).
pub fn report(json: bool, doc: serde_json::Value, line: impl FnOnce() -> String) {
    if json {
        println!("{doc}");
    } else {
        println!("{}", line());
    }
}

/// Prints one line on stdout at once (flushed), for a session's lines.
pub fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}
