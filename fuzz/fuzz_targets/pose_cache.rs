#![no_main]
//! Fuzz target `pose_cache`: see `ostm_fuzz::pose_cache` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::pose_cache(data));
