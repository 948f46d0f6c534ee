#![no_main]
//! Fuzz target `session`: see `ostm_fuzz::session` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::session(data));
