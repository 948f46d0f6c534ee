#![no_main]
//! Fuzz target `nats_reader`: see `ostm_fuzz::nats_reader` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::nats_reader(data));
