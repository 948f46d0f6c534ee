//! The world hash's XXH3-64 (`ostm_protocol::world::xxh3_64`, which takes a 512-bit loop of
//! its own for inputs longer than 240 bytes on CPUs with AVX-512F and twox-hash otherwise)
//! against xxhash-rust's one-shot XXH3-64, the value the format defines: on every length
//! from 0 to 4 160 bytes (up to four blocks of 1 024 and a stripe more: every count of
//! whole blocks, of stripes after them and of bytes in the last one), on every snapshot
//! length (12 + 32 n for n = 1..=64), and on random bytes of random lengths.

use ostm_protocol::world::xxh3_64;
use proptest::prelude::*;

/// `len` bytes that differ from one length and one place to the next.
fn bytes(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) ^ len.wrapping_mul(7) ^ (i >> 8)) as u8)
        .collect()
}

#[test]
fn every_length_up_to_four_blocks_and_a_stripe() {
    #[cfg(target_arch = "x86_64")]
    eprintln!(
        "AVX-512F on this CPU: {} (without it, every length takes twox-hash)",
        std::is_x86_feature_detected!("avx512f")
    );
    for len in 0..=4 * 1024 + 64 {
        let b = bytes(len);
        assert_eq!(xxh3_64(&b), xxhash_rust::xxh3::xxh3_64(&b), "length {len}");
    }
}

#[test]
fn every_snapshot_length() {
    for n in 1..=64 {
        let b = bytes(12 + 32 * n);
        assert_eq!(xxh3_64(&b), xxhash_rust::xxh3::xxh3_64(&b), "{n} bodies");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes(b in proptest::collection::vec(any::<u8>(), 0..6000)) {
        prop_assert_eq!(xxh3_64(&b), xxhash_rust::xxh3::xxh3_64(&b));
    }
}
