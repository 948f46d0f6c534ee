//! A bounds-checked little-endian reader over a byte slice that knows its offset.
//!
//! Every read checks the bytes that remain first, so a length field can never make
//! the reader allocate or index past the end.

use crate::error::FormatError;

/// Reads little-endian integers from a slice, tracking the absolute offset.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    input: &'a str,
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf`, whose first byte is at offset `base` within `input`.
    pub fn new(input: &'a str, buf: &'a [u8], base: u64) -> Self {
        Cursor {
            buf,
            pos: 0,
            input,
            base,
        }
    }

    /// Absolute offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// An error at the current offset.
    pub fn error(&self, message: impl Into<String>) -> FormatError {
        FormatError::new(self.input, self.offset(), message)
    }

    /// An error at an absolute offset.
    pub fn error_at(&self, offset: u64, message: impl Into<String>) -> FormatError {
        FormatError::new(self.input, offset, message)
    }

    /// Takes `n` bytes, or fails with `expected N-byte WHAT, found M bytes`.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FormatError> {
        if self.remaining() < n {
            return Err(self.error(format!(
                "expected {n}-byte {what}, found {} bytes",
                self.remaining()
            )));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FormatError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads a `u8`.
    pub fn u8(&mut self, what: &str) -> Result<u8, FormatError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// Reads a little-endian `u16`.
    pub fn u16(&mut self, what: &str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian `u32`.
    pub fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian `i32`.
    pub fn i32(&mut self, what: &str) -> Result<i32, FormatError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian `u64`.
    pub fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Fails unless every byte has been read.
    pub fn finish(&self, what: &str) -> Result<(), FormatError> {
        if self.remaining() != 0 {
            return Err(self.error(format!(
                "expected end of {what}, found {} trailing bytes",
                self.remaining()
            )));
        }
        Ok(())
    }
}
