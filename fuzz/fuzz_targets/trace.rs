#![no_main]
//! Fuzz target `trace`: see `ostm_fuzz::trace` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::trace(data));
