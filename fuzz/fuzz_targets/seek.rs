#![no_main]
//! Fuzz target `seek`: see `ostm_fuzz::seek` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::seek(data));
