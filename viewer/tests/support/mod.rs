//! Helpers for the offline command tests: run the real `ostm-viewer` and read what it
//! printed.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// What one run of the viewer gave.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `ostm-viewer ARGS` to completion, with `RUST_LOG` unset, its output read while
/// it runs.
pub fn viewer(args: &[&str]) -> Run {
    let out = ostm_testkit::run(Command::new(env!("CARGO_BIN_EXE_ostm-viewer")).args(args));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`viewer`] as `(exit code, stdout, stderr)`.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let r = viewer(args);
    (r.code, r.stdout, r.stderr)
}

/// A path as an argument (temp paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
