//! XXH3's accumulators as one 512-bit vector (AVX-512F), for [`super::long`].

use super::long::{Lanes, INIT, PRIME32_1};
use std::arch::x86_64::*;

/// The eight accumulators in one vector.
#[derive(Clone, Copy)]
pub(super) struct Avx512(__m512i);

impl Lanes for Avx512 {
    #[inline(always)]
    unsafe fn init() -> Self {
        // SAFETY: `INIT` is 64 readable bytes; AVX-512F, the caller's contract.
        Avx512(unsafe { _mm512_loadu_si512(INIT.as_ptr().cast()) })
    }

    #[inline(always)]
    unsafe fn add(self, other: Self) -> Self {
        // SAFETY: AVX-512F, the caller's contract.
        Avx512(unsafe { _mm512_add_epi64(self.0, other.0) })
    }

    #[inline(always)]
    unsafe fn gain(data: *const u8, key: *const u8) -> Self {
        // SAFETY: the caller's contract.
        unsafe {
            let d = _mm512_loadu_si512(data.cast());
            let dk = _mm512_xor_si512(d, _mm512_loadu_si512(key.cast()));
            let product = _mm512_mul_epu32(dk, _mm512_srli_epi64::<32>(dk));
            Avx512(_mm512_add_epi64(
                product,
                _mm512_shuffle_epi32::<0b01_00_11_10>(d),
            ))
        }
    }

    #[inline(always)]
    unsafe fn scramble(self, key: *const u8) -> Self {
        // SAFETY: the caller's contract.
        unsafe {
            let acc = self.0;
            let k = _mm512_loadu_si512(key.cast());
            let x = _mm512_xor_si512(_mm512_xor_si512(acc, _mm512_srli_epi64::<47>(acc)), k);
            // The 64-bit product by PRIME32_1 from two 32-bit ones.
            let p = _mm512_set1_epi64(PRIME32_1 as i64);
            let lo = _mm512_mul_epu32(x, p);
            let hi = _mm512_mul_epu32(_mm512_srli_epi64::<32>(x), p);
            Avx512(_mm512_add_epi64(lo, _mm512_slli_epi64::<32>(hi)))
        }
    }

    #[inline(always)]
    unsafe fn words(self) -> [u64; 8] {
        let mut a = [0u64; 8];
        // SAFETY: `a` is 64 writable bytes; AVX-512F, the caller's contract.
        unsafe { _mm512_storeu_si512(a.as_mut_ptr().cast(), self.0) };
        a
    }
}

/// XXH3-64 with seed 0 of `input`.
///
/// # Safety
/// The CPU must have AVX-512F; `input` must be longer than 240 bytes.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn xxh3_64(input: &[u8]) -> u64 {
    // SAFETY: the contract of `long::xxh3_64`, this function's.
    unsafe { super::long::xxh3_64::<Avx512>(input) }
}
