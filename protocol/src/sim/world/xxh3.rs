//! XXH3-64 with seed 0 (xxHash 0.8's `XXH3_64bits`), the function of the world hash, at the
//! speed of the CPU it runs on. The value is the same on every CPU; only its speed differs.
//!
//! - Inputs longer than 240 bytes on x86-64 CPUs with AVX-512F or AVX2: xxHash's
//!   long-input loop (`long.rs`) on one 512-bit vector (`avx512.rs`) or two 256-bit ones
//!   (`avx2.rs`), four stripes side by side. Every world of 8 or more body slots has such
//!   a snapshot.
//! - Otherwise twox-hash, which picks AVX2 or SSE2 at run time.
//!
//! No crate offers the first: twox-hash has no AVX-512 path and takes a block's stripes
//! one after another, xxhash-rust picks its vector width when it is compiled (the whole
//! build would need AVX-512), and the one crate that picks AVX-512 at run time measured
//! slower than both here (docs/performance.md, "Sixteen bodies in 32-bit lanes, and XXH3,
//! on AVX-512"). Both paths are kept because they win: against twox-hash on a world's 2 060
//! snapshot bytes, alternated in one run with a control (`benches/xxh3.rs`), the 512-bit
//! path took about 0.73 of its time and the 256-bit one about 0.89, both on a CPU with
//! AVX-512 (docs/performance.md, "XXH3: written here or from a crate", which says what is
//! left to measure on a CPU with AVX2 only). `protocol/tests/xxh3.rs` holds each path this CPU
//! has equal to xxhash-rust on every length from 0 to 4 160 bytes and on random inputs.

use super::Kernel;

mod long;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Inputs longer than this take XXH3's long-input loop (shorter ones its own formulas).
const LONG: usize = 240;

/// XXH3-64 with seed 0 of `bytes`, by the fastest path this CPU has.
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    xxh3_64_with(Kernel::best(), bytes)
}

/// XXH3-64 with seed 0 of `bytes`, with the vectors of `kernel` (`Scalar`: twox-hash)
/// where this CPU has them, else by the next path down. The value is the same on every
/// path.
pub fn xxh3_64_with(kernel: Kernel, bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if bytes.len() > LONG {
        match kernel {
            Kernel::Avx512 if kernel.available() => {
                // SAFETY: the CPU has AVX-512F, checked just above, and the input is longer
                // than 240 bytes: the function's contract.
                return unsafe { avx512::xxh3_64(bytes) };
            }
            Kernel::Avx512 | Kernel::Avx2 if Kernel::Avx2.available() => {
                // SAFETY: the CPU has AVX2, checked just above; the input is longer than
                // 240 bytes.
                return unsafe { avx2::xxh3_64(bytes) };
            }
            _ => {}
        }
    }
    let _ = kernel;
    twox_hash::XxHash3_64::oneshot(bytes)
}
