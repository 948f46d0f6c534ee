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

/// `testdata/test-10000.ostm`: the embedded world (3D, 24 bodies, seed 10000), 10 000 steps.
pub fn test_10000() -> ostm_protocol::Replay {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-10000.ostm");
    ostm_protocol::Replay::read_file(&path).expect("read test-10000")
}

/// What a viewer attached at step `from` and stopped at step `to` records of `r`: the world
/// at `from` as its start snapshot (none from step 0), the inputs of steps `from..to`, the
/// rows of steps `from..=to`.
pub fn cut(r: &ostm_protocol::Replay, from: usize, to: usize) -> ostm_protocol::Replay {
    let mut out = ostm_protocol::Replay::new(r.setup, r.link);
    if from > 0 {
        let mut w = r.start_world();
        for i in 0..from {
            w.step(&r.inputs.ops(i));
        }
        out.start = Some(w);
    }
    for i in from..to {
        out.inputs.push_ops(&r.inputs.ops(i));
    }
    out.hashes = Some(r.hashes.as_ref().expect("rows")[from..=to].to_vec());
    out
}
