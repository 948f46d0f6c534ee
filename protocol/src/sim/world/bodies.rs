//! A world's body slots, stored behind one more slot that holds the snapshot header, so
//! that the world hash reads the whole snapshot where it lies, without copying it; and,
//! beside them, the vector kernel's copy of the bodies field by field, kept from one step
//! to the next for as long as nothing else writes the slots.

use super::{Body, Kernel, BODY_BYTES, SNAPSHOT_HEADER_BYTES};
use zerocopy::IntoBytes;

/// Where the header's 12 bytes sit in the slot before the bodies: its last 12 bytes, the
/// words of `vel`, right before the first body.
const HEADER_AT: usize = BODY_BYTES - SNAPSHOT_HEADER_BYTES;

/// A world's body slots: a `Vec<Body>` to read and write (it dereferences to `[Body]`)
/// whose memory also holds, right before the first body, the 12 snapshot header bytes of
/// the last step that [`Bodies::set_header`] was told about. Two `Bodies` are equal when
/// their body slots are; the header and the kernel's lanes are not part of the value.
pub struct Bodies {
    /// `slots[0]` holds the header in `vel` (step low word, step high word, gravity);
    /// `slots[1..]` are the bodies.
    slots: Vec<Body>,
    /// The vector kernel's copy of the first [`LANE_CHUNKS`] chunks of sixteen bodies, in
    /// its own layout (see `simd/`); made at the kernel's first step.
    lanes: Option<Box<Lanes>>,
    /// Bit i set: chunk i of `lanes` holds exactly what the slots of bodies 16 i ..
    /// 16 i + 16 hold. Every write to the slots but the kernel's clears the bits of the
    /// chunks it may have written: all of them, or one for [`Bodies::body_mut`], `push`
    /// and `pop` ([`Bodies::with_lanes`] is the kernel's way in).
    fresh: u8,
    /// The kernel whose layout `lanes` holds.
    owner: Kernel,
}

/// How many chunks of sixteen bodies [`Lanes`] holds: a world's most bodies, 64.
pub(super) const LANE_CHUNKS: usize = super::MAX_BODIES / 16;
// `Bodies::fresh` has a bit per chunk.
const _: () = assert!(LANE_CHUNKS <= u8::BITS as usize);

/// The vector kernel's copy of up to 64 bodies: per chunk of sixteen bodies, 512 bytes
/// in the kernel's own layout (the AVX-512 kernel's eight field vectors, the AVX2
/// kernel's sixteen-bit lanes: see `simd/`). 2 KiB, aligned for 512-bit loads.
#[repr(C, align(64))]
pub(super) struct Lanes(pub(super) [ChunkLanes; LANE_CHUNKS]);

/// One chunk's 512 bytes of [`Lanes`].
pub(super) type ChunkLanes = [[u32; 16]; 8];

impl Bodies {
    /// No body slots, room for `capacity`.
    pub fn with_capacity(capacity: usize) -> Bodies {
        let mut slots = Vec::with_capacity(capacity + 1);
        slots.push(Body::default());
        Bodies::of_slots(slots)
    }

    /// `slots` (the header's slot first), with no lanes yet.
    fn of_slots(slots: Vec<Body>) -> Bodies {
        Bodies {
            slots,
            lanes: None,
            fresh: 0,
            owner: Kernel::Scalar,
        }
    }

    /// Appends a slot.
    pub fn push(&mut self, b: Body) {
        self.forget(self.len());
        self.slots.push(b);
    }

    /// Removes and returns the last slot.
    pub fn pop(&mut self) -> Option<Body> {
        if self.slots.len() > 1 {
            self.forget(self.len() - 1);
            self.slots.pop()
        } else {
            None
        }
    }

    /// Slot `i` to write, if there is one. Unlike `get_mut` through `DerefMut`, which
    /// makes all of the kernel's lanes stale, this makes stale only those of the sixteen
    /// bodies around slot `i` (stage 1's ops and the link transfer write one body each).
    pub fn body_mut(&mut self, i: usize) -> Option<&mut Body> {
        self.forget(i);
        self.slots.get_mut(1..)?.get_mut(i)
    }

    /// Makes stale the lanes of the chunk of sixteen bodies that holds slot `i`.
    fn forget(&mut self, i: usize) {
        if let Some(bit) = 1u8.checked_shl((i / 16).try_into().unwrap_or(u32::MAX)) {
            self.fresh &= !bit;
        }
    }

    /// Removes every slot.
    pub fn clear(&mut self) {
        self.fresh = 0;
        self.slots.truncate(1);
    }

    /// The bodies, the lanes (made here the first time, zeroed) and the bits that say
    /// which of their chunks are fresh, for the vector kernel `kernel`, which keeps the
    /// three in step: unlike every other way to write the slots, this one forgets
    /// nothing, unless the lanes were another kernel's.
    pub(super) fn with_lanes(&mut self, kernel: Kernel) -> (&mut [Body], &mut Lanes, &mut u8) {
        if self.owner != kernel {
            self.owner = kernel;
            self.fresh = 0;
        }
        let lanes = self
            .lanes
            .get_or_insert_with(|| Box::new(Lanes([[[0; 16]; 8]; LANE_CHUNKS])));
        (&mut self.slots[1..], lanes, &mut self.fresh)
    }

    /// Writes the snapshot header of (`step`, `gravity`) right before the bodies.
    pub(super) fn set_header(&mut self, step: u64, gravity: i32) {
        self.slots[0].vel = header_words(step, gravity);
    }

    /// The snapshot bytes in place (header, then the bodies' memory), when the header
    /// written last is that of (`step`, `gravity`); else `None`. Only on a little-endian
    /// machine, where a body's memory is its snapshot bytes.
    pub(super) fn snapshot_in_place(&self, step: u64, gravity: i32) -> Option<&[u8]> {
        if cfg!(target_endian = "big") || self.slots[0].vel != header_words(step, gravity) {
            return None;
        }
        let bytes = self.slots.as_bytes();
        bytes.get(HEADER_AT..)
    }
}

/// The header's three little-endian words as `vel` holds them.
fn header_words(step: u64, gravity: i32) -> [i32; 3] {
    [step as u32 as i32, (step >> 32) as u32 as i32, gravity]
}

impl Clone for Bodies {
    fn clone(&self) -> Bodies {
        Bodies::of_slots(self.slots.clone())
    }

    /// Reuses `self`'s buffers (`#[derive(Clone)]` would allocate new ones); its lanes
    /// are forgotten, not copied: the kernel fills them again at its next step.
    fn clone_from(&mut self, other: &Bodies) {
        self.fresh = 0;
        self.slots.clone_from(&other.slots);
    }
}

impl Default for Bodies {
    fn default() -> Bodies {
        Bodies::with_capacity(0)
    }
}

impl std::ops::Deref for Bodies {
    type Target = [Body];
    fn deref(&self) -> &[Body] {
        &self.slots[1..]
    }
}

/// Every write through it makes the kernel's lanes stale: they are forgotten.
impl std::ops::DerefMut for Bodies {
    fn deref_mut(&mut self) -> &mut [Body] {
        self.fresh = 0;
        &mut self.slots[1..]
    }
}

impl Eq for Bodies {}

impl PartialEq for Bodies {
    fn eq(&self, other: &Bodies) -> bool {
        **self == **other
    }
}

impl PartialEq<[Body]> for Bodies {
    fn eq(&self, other: &[Body]) -> bool {
        **self == *other
    }
}

impl PartialEq<Vec<Body>> for Bodies {
    fn eq(&self, other: &Vec<Body>) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Bodies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<Body> for Bodies {
    fn from_iter<I: IntoIterator<Item = Body>>(iter: I) -> Bodies {
        let mut b = Bodies::default();
        b.slots.extend(iter);
        b
    }
}

impl From<Vec<Body>> for Bodies {
    fn from(v: Vec<Body>) -> Bodies {
        v.into_iter().collect()
    }
}

impl From<&[Body]> for Bodies {
    fn from(v: &[Body]) -> Bodies {
        v.iter().copied().collect()
    }
}

impl<'a> IntoIterator for &'a Bodies {
    type Item = &'a Body;
    type IntoIter = std::slice::Iter<'a, Body>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Bodies {
    type Item = &'a mut Body;
    type IntoIter = std::slice::IterMut<'a, Body>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::{Bodies, Body};

    /// A verifier keeps the world before a step with `clone_from`, which must copy into the
    /// buffer it has rather than allocate another (what a derived `Clone` does).
    #[test]
    fn clone_from_copies_into_the_buffer_it_has() {
        let a: Bodies = vec![Body::new(true, 1, [1, 2, 3], [4, 5, 6]); 24].into();
        let mut b = Bodies::with_capacity(64);
        b.push(Body::default());
        let at = b.as_ptr();
        b.clone_from(&a);
        assert_eq!(b, a);
        assert_eq!(b.as_ptr(), at, "clone_from allocated a new buffer");
    }
}
