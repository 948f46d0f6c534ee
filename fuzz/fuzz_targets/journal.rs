#![no_main]
//! Fuzz target `journal`: see `ostm_fuzz::journal` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::journal(data));
