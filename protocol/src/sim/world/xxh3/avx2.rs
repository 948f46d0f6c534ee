//! XXH3's accumulators as two 256-bit vectors (AVX2), for [`super::long`].

use super::long::{Lanes, INIT, PRIME32_1};
use std::arch::x86_64::*;

/// The eight accumulators in two vectors: 0..=3, 4..=7.
#[derive(Clone, Copy)]
pub(super) struct Avx2([__m256i; 2]);

/// What the 32 bytes at `data` add to four accumulators, `key` their secret (see
/// [`Lanes::gain`]).
///
/// # Safety
/// The CPU must have AVX2; `data` and `key` must each point at 32 readable bytes.
#[inline(always)]
unsafe fn half_gain(data: *const u8, key: *const u8) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        let d = _mm256_loadu_si256(data.cast());
        let dk = _mm256_xor_si256(d, _mm256_loadu_si256(key.cast()));
        let product = _mm256_mul_epu32(dk, _mm256_srli_epi64::<32>(dk));
        _mm256_add_epi64(product, _mm256_shuffle_epi32::<0b01_00_11_10>(d))
    }
}

/// The scramble of four accumulators, `k` their secret (see [`Lanes::scramble`]).
///
/// # Safety
/// The CPU must have AVX2.
#[inline(always)]
unsafe fn half_scramble(acc: __m256i, k: __m256i) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        let x = _mm256_xor_si256(_mm256_xor_si256(acc, _mm256_srli_epi64::<47>(acc)), k);
        // The 64-bit product by PRIME32_1 from two 32-bit ones.
        let p = _mm256_set1_epi64x(PRIME32_1 as i64);
        let lo = _mm256_mul_epu32(x, p);
        let hi = _mm256_mul_epu32(_mm256_srli_epi64::<32>(x), p);
        _mm256_add_epi64(lo, _mm256_slli_epi64::<32>(hi))
    }
}

impl Lanes for Avx2 {
    #[inline(always)]
    unsafe fn init() -> Self {
        // SAFETY: `INIT` is 64 readable bytes; AVX2, the caller's contract.
        unsafe {
            let p = INIT.as_ptr().cast::<__m256i>();
            Avx2([_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))])
        }
    }

    #[inline(always)]
    unsafe fn add(self, other: Self) -> Self {
        // SAFETY: AVX2, the caller's contract.
        unsafe {
            Avx2([
                _mm256_add_epi64(self.0[0], other.0[0]),
                _mm256_add_epi64(self.0[1], other.0[1]),
            ])
        }
    }

    #[inline(always)]
    unsafe fn gain(data: *const u8, key: *const u8) -> Self {
        // SAFETY: the caller's contract: 64 readable bytes at each.
        unsafe { Avx2([half_gain(data, key), half_gain(data.add(32), key.add(32))]) }
    }

    #[inline(always)]
    unsafe fn scramble(self, key: *const u8) -> Self {
        // SAFETY: the caller's contract: 64 readable bytes at `key`.
        unsafe {
            let k = key.cast::<__m256i>();
            Avx2([
                half_scramble(self.0[0], _mm256_loadu_si256(k)),
                half_scramble(self.0[1], _mm256_loadu_si256(k.add(1))),
            ])
        }
    }

    #[inline(always)]
    unsafe fn words(self) -> [u64; 8] {
        let mut a = [0u64; 8];
        // SAFETY: `a` is 64 writable bytes; AVX2, the caller's contract.
        unsafe {
            let p = a.as_mut_ptr().cast::<__m256i>();
            _mm256_storeu_si256(p, self.0[0]);
            _mm256_storeu_si256(p.add(1), self.0[1]);
        }
        a
    }
}

/// XXH3-64 with seed 0 of `input`.
///
/// # Safety
/// The CPU must have AVX2; `input` must be longer than 240 bytes.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn xxh3_64(input: &[u8]) -> u64 {
    // SAFETY: the contract of `long::xxh3_64`, this function's.
    unsafe { super::long::xxh3_64::<Avx2>(input) }
}
