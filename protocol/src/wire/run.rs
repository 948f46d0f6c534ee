//! A run of record frames taken from a viewer's read buffer as they came, checked only
//! for what the reader must know at once (whole frames of type 0x83 whose steps follow
//! on), and decoded in full later, by the verifier, with the codec's own checks and
//! errors. The reader then does a few loads per record instead of a decode, an
//! allocation and a queue entry (docs/protocol.md, "The viewer's reader and verifier").

use super::codec::{Codec, HEAD};
use super::msg::record_body;
use super::MAX_FRAME_LEN;
use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::sim::op::{for_each_op, Op};
use bytes::{Buf, Bytes, BytesMut};
use std::sync::Arc;

/// A record payload's fixed part: type, step, hash, input length.
const RECORD_HEAD: usize = 1 + 8 + 8 + 2;

/// Record frames, whole and in stream order, with consecutive steps; their bodies not yet
/// decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRun {
    /// The frames, length prefixes included.
    frames: Bytes,
    /// The stream offset of the first frame's first byte.
    base: u64,
    /// The first record's step.
    first: u64,
    /// Records in the run.
    count: u64,
    /// The stream's name in errors.
    name: Arc<str>,
}

/// One record of a run, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub step: u64,
    pub hash: u64,
    pub input: &'a [u8],
}

impl<'a> From<&'a super::Record> for RecordRef<'a> {
    fn from(r: &'a super::Record) -> RecordRef<'a> {
        RecordRef {
            step: r.step,
            hash: r.hash,
            input: &r.input,
        }
    }
}

impl RecordRun {
    /// The first record's step.
    pub fn first_step(&self) -> u64 {
        self.first
    }

    /// Records in the run.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The frames' bytes.
    pub fn frames(&self) -> &Bytes {
        &self.frames
    }

    /// The stream offset of the first frame.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The stream's name in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A run rebuilt from its parts (a run read back from a spill file). The frames are
    /// checked again when decoded.
    pub fn from_parts(
        frames: Bytes,
        base: u64,
        first: u64,
        count: u64,
        name: Arc<str>,
    ) -> RecordRun {
        RecordRun {
            frames,
            base,
            first,
            count,
            name,
        }
    }

    /// Decodes every record in order with the codec's checks, the same errors at the same
    /// offsets, passing each with its input's ops (collected in `ops`) to `each`, which
    /// returns `false` to stop. A frame that does not decode ends it with that error, after
    /// `each` has had every record before it.
    ///
    /// # Errors
    /// The first record that the codec would have refused.
    pub fn decode_each(
        &self,
        ops: &mut Vec<Op>,
        mut each: impl FnMut(RecordRef<'_>, &[Op]) -> bool,
    ) -> Result<(), FormatError> {
        let name = &*self.name;
        let mut rest = &self.frames[..];
        let mut at = self.base;
        while rest.len() >= HEAD {
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let Some(payload) = rest.get(HEAD..HEAD + len) else {
                break;
            };
            let mut c = Cursor::new(name, payload, at + HEAD as u64);
            let type_at = c.offset();
            let t = c.u8("message type")?;
            if t != 0x83 {
                return Err(c.error_at(
                    type_at,
                    format!("expected a record (0x83), found 0x{t:02x}"),
                ));
            }
            let (step, hash, input, input_at) = record_body(&mut c)?;
            ops.clear();
            for_each_op(name, input, input_at, |op| ops.push(op))?;
            c.finish("frame")?;
            if !each(RecordRef { step, hash, input }, ops) {
                return Ok(());
            }
            rest = &rest[HEAD + len..];
            at += (HEAD + len) as u64;
        }
        Ok(())
    }
}

impl<D, E> Codec<D, E> {
    /// Takes the whole record frames at the front of `src` whose steps run on from
    /// `next_step`, without decoding their bodies (see [`RecordRun::decode_each`]), and
    /// counts them as consumed. It stops before anything else: another message, a frame
    /// not yet whole, a length out of range, a record of another step; the codec's decode
    /// then takes (or refuses) that frame. A record taken whose body the codec would refuse
    /// (an input length that does not fill the frame, a bad op) is refused, with the
    /// codec's error, by [`RecordRun::decode_each`].
    /// `None` when the first frame is not such a record.
    pub fn take_records(&mut self, src: &mut BytesMut, next_step: u64) -> Option<RecordRun> {
        let mut taken = 0usize;
        let mut step = next_step;
        loop {
            let rest = &src[taken..];
            if rest.len() < HEAD + RECORD_HEAD {
                break;
            }
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if !(RECORD_HEAD..=MAX_FRAME_LEN).contains(&len) || rest.len() < HEAD + len {
                break;
            }
            let p = &rest[HEAD..HEAD + len];
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&p[i..i + 8]);
                u64::from_le_bytes(b)
            };
            if p[0] != 0x83 || word(1) != step {
                break;
            }
            step = step.wrapping_add(1);
            taken += HEAD + len;
        }
        if taken == 0 {
            return None;
        }
        // Copied out, one allocation per run: the read buffer stays the reader's alone, so
        // a run holds exactly its own bytes however long it waits.
        let frames = Bytes::copy_from_slice(&src[..taken]);
        src.advance(taken);
        let base = self.consumed;
        self.consumed += taken as u64;
        Some(RecordRun {
            frames,
            base,
            first: next_step,
            count: step.wrapping_sub(next_step),
            name: self.shared_name(),
        })
    }
}
