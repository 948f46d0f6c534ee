//! Step inputs: the five operations and their exact bytes.
//!
//! ```text
//! 1 body:u8 dx:i32 dy:i32 dz:i32   impulse   (14 bytes)
//! 2 body:u8 x:i32 y:i32 z:i32      teleport  (14 bytes)
//! 3 body:u8                        remove    (2 bytes)
//! 4 gravity:i32                    gravity   (5 bytes)
//! 5 x:i32 y:i32 z:i32              spawn     (13 bytes)
//! ```

use crate::cursor::Cursor;
use crate::error::FormatError;

/// The largest input one step can carry (its length is a u16).
pub const MAX_INPUT_LEN: usize = u16::MAX as usize;

/// One operation of a step's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Adds `d` to the body's velocity (saturating).
    Impulse { body: u8, d: [i32; 3] },
    /// Sets the body's position.
    Teleport { body: u8, pos: [i32; 3] },
    /// Removes the body: its slot becomes all zeros and stays.
    Remove { body: u8 },
    /// Sets the world's gravity.
    Gravity { g: i32 },
    /// Appends a body at rest at `pos`, unless the world holds 64 slots.
    Spawn { pos: [i32; 3] },
}

/// Which kind an op is, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    Impulse = 1,
    Teleport = 2,
    Remove = 3,
    Gravity = 4,
    Spawn = 5,
}

impl OpKind {
    /// All kinds, by opcode.
    pub const ALL: [OpKind; 5] = [
        OpKind::Impulse,
        OpKind::Teleport,
        OpKind::Remove,
        OpKind::Gravity,
        OpKind::Spawn,
    ];

    /// The kind's name as printed by the tools.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Impulse => "impulse",
            OpKind::Teleport => "teleport",
            OpKind::Remove => "remove",
            OpKind::Gravity => "gravity",
            OpKind::Spawn => "spawn",
        }
    }
}

impl Op {
    /// The op's kind.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Impulse { .. } => OpKind::Impulse,
            Op::Teleport { .. } => OpKind::Teleport,
            Op::Remove { .. } => OpKind::Remove,
            Op::Gravity { .. } => OpKind::Gravity,
            Op::Spawn { .. } => OpKind::Spawn,
        }
    }

    /// The op's encoded length in bytes, opcode included.
    pub fn encoded_len(&self) -> usize {
        match self {
            Op::Impulse { .. } | Op::Teleport { .. } => 14,
            Op::Remove { .. } => 2,
            Op::Gravity { .. } => 5,
            Op::Spawn { .. } => 13,
        }
    }

    /// Appends the op's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.kind() as u8);
        let push3 = |out: &mut Vec<u8>, v: &[i32; 3]| {
            for c in v {
                out.extend_from_slice(&c.to_le_bytes());
            }
        };
        match self {
            Op::Impulse { body, d } => {
                out.push(*body);
                push3(out, d);
            }
            Op::Teleport { body, pos } => {
                out.push(*body);
                push3(out, pos);
            }
            Op::Remove { body } => out.push(*body),
            Op::Gravity { g } => out.extend_from_slice(&g.to_le_bytes()),
            Op::Spawn { pos } => push3(out, pos),
        }
    }
}

/// Encodes a whole step input.
pub fn encode_input(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ops.iter().map(Op::encoded_len).sum());
    for op in ops {
        op.encode(&mut out);
    }
    out
}

/// Decodes a step input strictly: an unknown opcode or an op cut off inside the input
/// is an error at its absolute offset (`base` is the input's first byte's offset).
pub fn decode_input(input: &str, bytes: &[u8], base: u64) -> Result<Vec<Op>, FormatError> {
    let mut ops = Vec::new();
    for_each_op(input, bytes, base, |op| ops.push(op))?;
    Ok(ops)
}

/// Decodes a step input, calling `f` on each op in order, without allocating.
pub fn for_each_op(
    input: &str,
    bytes: &[u8],
    base: u64,
    mut f: impl FnMut(Op),
) -> Result<(), FormatError> {
    let mut c = Cursor::new(input, bytes, base);
    while c.remaining() > 0 {
        let at = c.offset();
        let code = c.u8("opcode")?;
        let cut = |e: FormatError| {
            FormatError::new(
                input,
                at,
                format!("op {code} cut off inside its step input: {}", e.message),
            )
        };
        let op = match code {
            1 | 2 => {
                let body = c.u8("body index").map_err(cut)?;
                let v = read3(&mut c).map_err(cut)?;
                if code == 1 {
                    Op::Impulse { body, d: v }
                } else {
                    Op::Teleport { body, pos: v }
                }
            }
            3 => Op::Remove {
                body: c.u8("body index").map_err(cut)?,
            },
            4 => Op::Gravity {
                g: c.i32("gravity").map_err(cut)?,
            },
            5 => Op::Spawn {
                pos: read3(&mut c).map_err(cut)?,
            },
            other => {
                return Err(FormatError::new(
                    input,
                    at,
                    format!("expected opcode 1..=5, found {other}"),
                ))
            }
        };
        f(op);
    }
    Ok(())
}

fn read3(c: &mut Cursor<'_>) -> Result<[i32; 3], FormatError> {
    Ok([c.i32("i32 x")?, c.i32("i32 y")?, c.i32("i32 z")?])
}
