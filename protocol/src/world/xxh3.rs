//! XXH3-64 with seed 0 (xxHash 0.8's `XXH3_64bits`), the function of the world hash, at the
//! speed of the CPU it runs on. The value is the same on every CPU; only its speed differs.
//!
//! - Inputs longer than 240 bytes on x86-64 CPUs with AVX-512F: `avx512.rs`, xxHash's
//!   long-input loop on 512-bit vectors (one vector holds XXH3's eight accumulators).
//!   Every world of 8 or more body slots has such a snapshot.
//! - Otherwise twox-hash, which picks AVX2 or SSE2 at run time.
//!
//! No crate offers the first: twox-hash has no AVX-512 path, xxhash-rust picks its vector
//! width when it is compiled (the whole build would need AVX-512), and the one crate that
//! picks AVX-512 at run time measured slower than both here (docs/performance.md, "XXH3
//! on 512-bit vectors"). `protocol/tests/kernel.rs` holds this function equal to
//! xxhash-rust's on every length from 0 to 4 160 bytes and on random inputs.

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Inputs longer than this take XXH3's long-input loop (shorter ones its own formulas).
const LONG: usize = 240;

/// XXH3-64 with seed 0 of `bytes`.
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if bytes.len() > LONG && std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F, checked just above, and the input is longer than
        // 240 bytes: the function's contract.
        return unsafe { avx512::xxh3_64_long(bytes) };
    }
    twox_hash::XxHash3_64::oneshot(bytes)
}
