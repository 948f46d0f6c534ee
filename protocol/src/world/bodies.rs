//! A world's body slots, stored behind one more slot that holds the snapshot header, so
//! that the world hash reads the whole snapshot where it lies, without copying it.

use super::{Body, BODY_BYTES, SNAPSHOT_HEADER_BYTES};
use zerocopy::IntoBytes;

/// Where the header's 12 bytes sit in the slot before the bodies: its last 12 bytes, the
/// words of `vel`, right before the first body.
const HEADER_AT: usize = BODY_BYTES - SNAPSHOT_HEADER_BYTES;

/// A world's body slots: a `Vec<Body>` to read and write (it dereferences to `[Body]`)
/// whose memory also holds, right before the first body, the 12 snapshot header bytes of
/// the last step that [`Bodies::set_header`] was told about. Two `Bodies` are equal when
/// their body slots are; the header is not part of the value.
#[derive(Eq)]
pub struct Bodies {
    /// `slots[0]` holds the header in `vel` (step low word, step high word, gravity);
    /// `slots[1..]` are the bodies.
    slots: Vec<Body>,
}

impl Bodies {
    /// No body slots, room for `capacity`.
    pub fn with_capacity(capacity: usize) -> Bodies {
        let mut slots = Vec::with_capacity(capacity + 1);
        slots.push(Body::default());
        Bodies { slots }
    }

    /// Appends a slot.
    pub fn push(&mut self, b: Body) {
        self.slots.push(b);
    }

    /// Removes and returns the last slot.
    pub fn pop(&mut self) -> Option<Body> {
        if self.slots.len() > 1 {
            self.slots.pop()
        } else {
            None
        }
    }

    /// Removes every slot.
    pub fn clear(&mut self) {
        self.slots.truncate(1);
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
        Bodies {
            slots: self.slots.clone(),
        }
    }

    /// Reuses `self`'s buffer (`#[derive(Clone)]` would allocate a new one).
    fn clone_from(&mut self, other: &Bodies) {
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

impl std::ops::DerefMut for Bodies {
    fn deref_mut(&mut self) -> &mut [Body] {
        &mut self.slots[1..]
    }
}

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
