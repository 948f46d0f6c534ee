//! The one error type for everything read from outside: files, sockets, keyframes.

/// A malformed or unreadable input.
///
/// Every error names the input (a file path, `stream`, or a peer address), the byte
/// offset at which the problem was found, and what was expected there. Displayed as
/// `testdata/x.ostm: at offset 12: expected 6-byte setup, found 3 bytes`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input}: at offset {offset}: {message}")]
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

#[cfg(test)]
mod tests {
    use super::FormatError;
    use std::io;

    /// The text users and scripts read, byte for byte (derived with thiserror, once
    /// written by hand).
    #[test]
    fn a_format_error_reads_as_it_always_has() {
        let e = FormatError::new(
            "testdata/x.ostm",
            12,
            "expected 6-byte setup, found 3 bytes",
        );
        assert_eq!(
            e.to_string(),
            "testdata/x.ostm: at offset 12: expected 6-byte setup, found 3 bytes"
        );
        let read = FormatError::io("a.ostm", &io::Error::other("boom"));
        assert_eq!(read.to_string(), "a.ostm: at offset 0: cannot read: boom");
    }
}
