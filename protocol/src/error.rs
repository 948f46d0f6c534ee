//! The one error type for everything read from outside: files, sockets, keyframes.

use std::fmt;

/// A malformed or unreadable input.
///
/// Every error names the input (a file path, `stream`, or a peer address), the byte
/// offset at which the problem was found, and what was expected there. Displayed as
/// `testdata/x.ostm: at offset 12: expected 6-byte setup, found 3 bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// The input's name: a file path, `stream`, or a peer address.
    pub input: String,
    /// Byte offset within the input where the problem starts.
    pub offset: u64,
    /// What was expected and what was found.
    pub message: String,
}

impl FormatError {
    /// An error in `input` at `offset`.
    pub fn new(input: impl Into<String>, offset: u64, message: impl Into<String>) -> Self {
        FormatError {
            input: input.into(),
            offset,
            message: message.into(),
        }
    }

    /// An I/O failure while reading `input` (offset 0 unless known).
    pub fn io(input: impl Into<String>, err: &std::io::Error) -> Self {
        FormatError::new(input, 0, format!("cannot read: {err}"))
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: at offset {}: {}",
            self.input, self.offset, self.message
        )
    }
}

impl std::error::Error for FormatError {}
