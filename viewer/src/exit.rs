//! Exit codes, the same for every command: 0 ok, 1 a difference or drift found,
//! 2 bad input or failure.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: everything checked out.
    Ok,
    /// 1: a difference, mismatch or drift was found.
    Different,
    /// 2: bad input, or the command could not do its work.
    Failure,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(match e {
            Exit::Ok => 0,
            Exit::Different => 1,
            Exit::Failure => 2,
        })
    }
}

/// Prints an error to stderr and returns [`Exit::Failure`].
pub fn fail(err: impl std::fmt::Display) -> Exit {
    eprintln!("error: {err}");
    Exit::Failure
}
