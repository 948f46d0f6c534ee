#![no_main]
//! Fuzz target `keyframe`: see `ostm_fuzz::keyframe` (fuzz/src/lib.rs) and docs/reliability.md.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ostm_fuzz::keyframe(data));
