//! Standard output that a reader may stop taking (`ostm-viewer inspect F | head -1`).
//!
//! `std::println!` panics when stdout is a pipe whose reader has gone (Rust ignores
//! SIGPIPE, so the write fails with EPIPE). Each binary shadows `println!` (and `print!`
//! where it prints) with a macro that calls [`line`] ([`text`]): a reader that has gone is no failure, the command finishes its
//! work (files it writes are finished, not left half-written) and its exit code stands;
//! what it would have printed goes nowhere.

use std::io::Write;

/// Writes `args` and a newline to stdout; a failed write (a reader that has gone, a full
/// disk behind a redirection) is dropped, never a panic.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// Writes `args` to stdout as it is ([`line`] without the newline).
pub fn text(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.flush());
}

/// `println!` for the binaries: [`line`] in place of the standard one, which panics on a
/// closed pipe. Each binary's crate root defines its own `println!`
/// as this one, before its modules, so that every module's `println!` is this.
#[macro_export]
macro_rules! println {
    () => {
        $crate::stdout::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::line(format_args!($($arg)*))
    };
}

/// `print!` for the binaries: [`text`] in place of the standard one.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::stdout::text(format_args!($($arg)*))
    };
}
