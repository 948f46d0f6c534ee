#![no_main]
//! Fuzz target `bundle`: see `ostm_fuzz::bundle` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::bundle(data));
