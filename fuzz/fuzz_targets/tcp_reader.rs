#![no_main]
//! Fuzz target `tcp_reader`: see `ostm_fuzz::tcp_reader` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::tcp_reader(data));
