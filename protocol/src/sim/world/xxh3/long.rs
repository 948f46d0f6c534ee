//! XXH3-64 (seed 0, the default secret) of inputs longer than 240 bytes: xxHash 0.8's
//! long-input loop (`XXH3_hashLong_64b`), written once over [`Lanes`], the eight 64-bit
//! accumulators in vector registers (one 512-bit vector in `avx512.rs`, two 256-bit ones
//! in `avx2.rs`).
//!
//! The input is read in stripes of 64 bytes, sixteen to a block of 1 024. Each stripe adds
//! to the accumulators its words swapped in pairs and the product of the low and high
//! halves of each word xored with the secret at 8 bytes a stripe; each whole block is then
//! scrambled. After the last whole block come the stripes that remain but the last, then
//! the input's last 64 bytes with the secret at 121, and the accumulators are merged with
//! the secret at 11. The stripes of a block are independent of one another (their sums are
//! added to the accumulators at once), so they are computed four side by side.

/// xxHash's default secret (`XXH3_kSecret`), 192 bytes.
const SECRET: [u8; 192] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
];

pub(super) const PRIME32_1: u64 = 0x9E37_79B1;
const PRIME32_2: u64 = 0x85EB_CA77;
const PRIME32_3: u64 = 0xC2B2_AE3D;
const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;
/// The avalanche's multiplier (`PRIME_MX1`).
const PRIME_MX1: u64 = 0x1656_6791_9E37_79F9;

/// Bytes a stripe.
const STRIPE: usize = 64;
/// Stripes a block: (192 - 64) / 8.
const STRIPES_PER_BLOCK: usize = 16;
/// Bytes a block.
const BLOCK: usize = STRIPE * STRIPES_PER_BLOCK;
/// Where the secret of the scramble starts: its last 64 bytes.
const SCRAMBLE_AT: usize = SECRET.len() - STRIPE;
/// Where the secret of the last stripe starts.
const LAST_AT: usize = SECRET.len() - STRIPE - 7;
/// Where the secret of the merge starts.
const MERGE_AT: usize = 11;

/// The little-endian u64 of `SECRET` at byte `at`.
const fn secret_word(at: usize) -> u64 {
    let mut v = 0u64;
    let mut i = 0;
    while i < 8 {
        v |= (SECRET[at + i] as u64) << (8 * i);
        i += 1;
    }
    v
}

/// The eight accumulators in vector registers, and what the loop does with them.
pub(super) trait Lanes: Copy {
    /// The accumulators' starting values.
    ///
    /// # Safety (of every method)
    /// The CPU must have the lanes' instructions.
    unsafe fn init() -> Self;
    /// Lane by lane 64-bit sum.
    unsafe fn add(self, other: Self) -> Self;
    /// What one stripe adds to the accumulators: its words swapped in pairs, plus, for
    /// each word xored with the secret, the product of its low and high 32 bits.
    ///
    /// # Safety
    /// The CPU must have the lanes' instructions; `data` and `key` must each point at 64
    /// readable bytes.
    unsafe fn gain(data: *const u8, key: *const u8) -> Self;
    /// The scramble after each block: `acc ^= acc >> 47; acc ^= key; acc *= PRIME32_1`.
    ///
    /// # Safety
    /// As for [`Lanes::gain`], `key` pointing at 64 readable bytes.
    unsafe fn scramble(self, key: *const u8) -> Self;
    /// The eight accumulators, in order.
    unsafe fn words(self) -> [u64; 8];
}

/// The accumulators' starting values, in order.
pub(super) const INIT: [u64; 8] = [
    PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1,
];

/// The sum of what stripes `s..s + 4` of the block at `block` add to the accumulators.
///
/// # Safety
/// As for [`Lanes::gain`], for each of the four stripes and their secrets.
#[inline(always)]
unsafe fn four<L: Lanes>(block: *const u8, secret: *const u8, s: usize) -> L {
    // SAFETY: the caller's contract. (No closure here: a closure does not inherit the
    // caller's target features, and the intrinsics in it would not be inlined.)
    unsafe {
        let (b, k) = (block.add(s * STRIPE), secret.add(s * 8));
        let q0 = L::gain(b, k);
        let q1 = L::gain(b.add(STRIPE), k.add(8));
        let q2 = L::gain(b.add(2 * STRIPE), k.add(16));
        let q3 = L::gain(b.add(3 * STRIPE), k.add(24));
        q0.add(q1).add(q2.add(q3))
    }
}

/// XXH3-64 with seed 0 of `input`, the accumulators kept as `L`.
///
/// # Safety
/// The CPU must have `L`'s instructions (the caller is compiled for them, so that this
/// inlines); `input` must be longer than 240 bytes (shorter inputs take other formulas, and
/// the last stripe is read at `len - 64`).
#[inline(always)]
pub(super) unsafe fn xxh3_64<L: Lanes>(input: &[u8]) -> u64 {
    let len = input.len();
    debug_assert!(len > 240);
    let at = input.as_ptr();
    let secret = SECRET.as_ptr();
    let a = {
        // SAFETY (of every `L` method and helper below): the CPU has `L`'s instructions (this
        // function's contract); each stripe read is in `input`, and s < 16, so the secret's
        // bytes s * 8..s * 8 + 64 are in it.
        unsafe {
            let mut acc = L::init();
            let blocks = (len - 1) / BLOCK;
            for b in 0..blocks {
                // Block b is bytes b * 1024..(b + 1) * 1024 of `input` (b < (len - 1) / 1024).
                let block = at.add(b * BLOCK);
                let sum = four::<L>(block, secret, 0)
                    .add(four::<L>(block, secret, 4))
                    .add(four::<L>(block, secret, 8).add(four::<L>(block, secret, 12)));
                // The scramble's secret is bytes 128..192.
                acc = acc.add(sum).scramble(secret.add(SCRAMBLE_AT));
            }
            // The stripes after the last whole block, all but the one that ends the input
            // (each ends before `len - 1`).
            let stripes = ((len - 1) - BLOCK * blocks) / STRIPE;
            let rest = at.add(blocks * BLOCK);
            for s in 0..stripes {
                acc = acc.add(L::gain(rest.add(s * STRIPE), secret.add(s * 8)));
            }
            // The last stripe: len > 64; the secret's bytes 121..185.
            acc = acc.add(L::gain(at.add(len - STRIPE), secret.add(LAST_AT)));
            acc.words()
        }
    };
    let mut h = (len as u64).wrapping_mul(PRIME64_1);
    for i in 0..4 {
        let k0 = secret_word(MERGE_AT + 16 * i);
        let k1 = secret_word(MERGE_AT + 16 * i + 8);
        let m = u128::from(a[2 * i] ^ k0) * u128::from(a[2 * i + 1] ^ k1);
        h = h.wrapping_add((m as u64) ^ ((m >> 64) as u64));
    }
    h ^= h >> 37;
    h = h.wrapping_mul(PRIME_MX1);
    h ^ (h >> 32)
}
