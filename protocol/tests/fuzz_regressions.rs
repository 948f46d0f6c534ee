//! Every input the fuzzers found a crash with, replayed on the stable toolchain.
//!
//! `fixtures/fuzz/<target>/` holds the inputs, one file each, kept once the crash was
//! fixed (docs/reliability.md lists them). Each runs through the same check as its fuzz
//! target: `fuzz/src/lib.rs` is compiled into this test as a module, so a property the
//! fuzzer checks (written back byte for byte, two readers agree, errors inside the input)
//! is checked here too, and a library panic fails the test with the file's name.

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod fuzz;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/fuzz")
}

/// The files kept for `target`, by name.
fn inputs(target: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(fixtures().join(target)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = dir
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_kept_input_passes_its_targets_check() {
    let mut failed = Vec::new();
    let mut ran = 0;
    for (target, check) in fuzz::TARGETS {
        for file in inputs(target) {
            let bytes = std::fs::read(&file).expect("read a kept input");
            ran += 1;
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&bytes))) {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!("{target}: {}: {why}", file.display()));
            }
        }
    }
    fuzz::remove_scratch();
    assert!(ran > 0, "no input under {}", fixtures().display());
    assert!(
        failed.is_empty(),
        "{} of {ran} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn every_fixture_directory_is_a_target() {
    let names: Vec<&str> = fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    for e in std::fs::read_dir(fixtures()).expect("fixtures/fuzz") {
        let e = e.expect("a directory entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            assert!(
                names.contains(&name.as_str()),
                "fixtures/fuzz/{name} is no target"
            );
        }
    }
}
