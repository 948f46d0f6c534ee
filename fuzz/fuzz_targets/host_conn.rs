#![no_main]
//! Fuzz target `host_conn`: see `ostm_fuzz::host_conn` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::host_conn(data));
