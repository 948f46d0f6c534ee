#![no_main]
//! Fuzz target `replay_stream`: see `ostm_fuzz::replay_stream` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::replay_stream(data));
