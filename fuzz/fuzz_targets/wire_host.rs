#![no_main]
//! Fuzz target `wire_host`: see `ostm_fuzz::wire_host` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::wire_host(data));
