#![no_main]
//! Fuzz target `publisher`: see `ostm_fuzz::publisher` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::publisher(data));
