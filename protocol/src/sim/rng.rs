//! sfc32, the generator that turns a world's u32 seed into its initial bodies.

/// Chris Doty-Humphrey's Small Fast Counting generator, 32-bit variant.
///
/// ```text
/// t = a + b + d;  d = d + 1;  a = b ^ (b >> 9);  b = c + (c << 3);
/// c = rotl(c, 21) + t;  return t        (all arithmetic wrapping mod 2^32)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sfc32 {
    /// The state words `[a, b, c, d]`.
    pub state: [u32; 4],
}

/// Outputs discarded after seeding, so that nearby seeds diverge.
pub const SEED_DISCARD: usize = 12;

impl Sfc32 {
    /// Seeds from a u32: `a = 0x9E3779B9, b = 0x243F6A88, c = 0xB7E15162, d = seed`,
    /// then discards [`SEED_DISCARD`] outputs.
    pub fn from_seed(seed: u32) -> Self {
        let mut rng = Sfc32 {
            state: [0x9E37_79B9, 0x243F_6A88, 0xB7E1_5162, seed],
        };
        for _ in 0..SEED_DISCARD {
            rng.next_u32();
        }
        rng
    }

    /// The next output.
    pub fn next_u32(&mut self) -> u32 {
        let [a, b, c, d] = self.state;
        let t = a.wrapping_add(b).wrapping_add(d);
        self.state = [
            b ^ (b >> 9),
            c.wrapping_add(c << 3),
            c.rotate_left(21).wrapping_add(t),
            d.wrapping_add(1),
        ];
        t
    }

    /// A value in `lo..=hi` as `lo + next % (hi - lo + 1)` (modulo bias accepted and stated).
    pub fn range(&mut self, lo: i32, hi: i32) -> i32 {
        let span = (hi as i64 - lo as i64 + 1) as u64;
        (lo as i64 + (self.next_u32() as u64 % span) as i64) as i32
    }
}
