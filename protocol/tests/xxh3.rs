//! The world hash's XXH3-64 (`ostm_protocol::sim::world::xxh3_64_with`, which for inputs longer
//! than 240 bytes takes a loop of its own on 512-bit vectors or on 256-bit ones, and
//! twox-hash otherwise), on every path this CPU has (`Kernel::ALL` that are available;
//! `Scalar` is twox-hash), against xxhash-rust's one-shot XXH3-64, the value the format
//! defines: on every length
//! from 0 to 4 160 bytes (up to four blocks of 1 024 and a stripe more: every count of
//! whole blocks, of stripes after them and of bytes in the last one), on every snapshot
//! length (12 + 32 n for n = 1..=64), and on random bytes of random lengths.

use ostm_protocol::sim::world::{xxh3_64, xxh3_64_with, Kernel};
use proptest::prelude::*;

/// `len` bytes that differ from one length and one place to the next.
fn bytes(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) ^ len.wrapping_mul(7) ^ (i >> 8)) as u8)
        .collect()
}

/// The paths this CPU has.
fn paths() -> Vec<Kernel> {
    Kernel::ALL.into_iter().filter(|k| k.available()).collect()
}

#[test]
fn every_length_up_to_four_blocks_and_a_stripe() {
    let names: Vec<&str> = paths().iter().map(|k| k.name()).collect();
    eprintln!("paths on this CPU: {names:?} (scalar: twox-hash)");
    for len in 0..=4 * 1024 + 64 {
        let b = bytes(len);
        let want = xxhash_rust::xxh3::xxh3_64(&b);
        for k in paths() {
            assert_eq!(xxh3_64_with(k, &b), want, "length {len}, {}", k.name());
        }
        assert_eq!(xxh3_64(&b), want, "length {len}");
    }
}

#[test]
fn every_snapshot_length() {
    for n in 1..=64 {
        let b = bytes(12 + 32 * n);
        for k in paths() {
            let got = xxh3_64_with(k, &b);
            assert_eq!(
                got,
                xxhash_rust::xxh3::xxh3_64(&b),
                "{n} bodies, {}",
                k.name()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes(b in proptest::collection::vec(any::<u8>(), 0..6000)) {
        for k in paths() {
            prop_assert_eq!(xxh3_64_with(k, &b), xxhash_rust::xxh3::xxh3_64(&b), "{}", k.name());
        }
    }
}
