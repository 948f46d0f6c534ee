//! A bench that cannot measure says so in a sentence and exits 2, with no table: arguments
//! are checked before anything is announced, and a case that measured nothing (no viewer
//! attached, one failed, no record verified) stops the bench instead of printing a row of
//! zeros and ratios.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ostm-bench-live"))
        .args(args)
        .output()
        .expect("run ostm-bench-live")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A loopback port nobody listens on (bound, then let go).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("its address").port()
}

#[test]
fn an_out_dir_that_does_not_exist_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let missing = tmp.path().join("not-made");
    let out = bench(&["--out", missing.to_str().expect("utf-8 path")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.starts_with(&format!(
            "ostm-bench-live: --out {}: no such directory: create it first, or give another\n",
            missing.display()
        )),
        "stderr: {err}"
    );
    assert_eq!(text(&out.stdout), "", "nothing announced, no table");
    assert!(!missing.exists(), "nothing made");
}

#[test]
fn an_out_dir_that_takes_no_file_is_refused() {
    // /proc is a directory in which nobody, root included, can make a file.
    let out = bench(&["--out", "/proc"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.starts_with("ostm-bench-live: --out /proc: cannot write a file there: "),
        "stderr: {err}"
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn a_host_binary_that_does_not_exist_is_refused() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let host = tmp.path().join("ostm-host");
    let out = bench(&[
        "--out",
        tmp.path().to_str().expect("utf-8 path"),
        "--host",
        host.to_str().expect("utf-8 path"),
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.starts_with(&format!(
            "ostm-bench-live: --host {}: no such file (build it: cargo build --release -p ostm-host)\n",
            host.display()
        )),
        "stderr: {err}"
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn readers_that_reach_no_host_measure_nothing_and_say_so() {
    let addr = format!("127.0.0.1:{}", closed_port());
    let out = bench(&["readers", "--addr", &addr, "--viewers", "2"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains(&format!(
            "ostm-bench-live readers: measured nothing whole: 0 of 2 viewers attached, 2 failed, \
             0 steps verified (is a host serving {addr}?)"
        )),
        "stderr: {err}"
    );
}

/// The bench's viewers read a host by the viewer's own reader machine, its handshake
/// deadlines included: a peer that takes the connection and the hello but answers nothing
/// is given up after 2 000 ms with the viewer's sentence (the bench's own loop, before,
/// waited for it as long as the peer kept the connection open).
#[test]
fn readers_give_up_a_peer_that_answers_nothing_as_the_viewer_does() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("its address").to_string();
    // Takes every connection and keeps it open, saying nothing.
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in listener.incoming() {
            kept.push(s);
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_ostm-bench-live"))
        .args(["readers", "--addr", &addr, "--viewers", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ostm-bench-live readers");
    // Generous on a loaded machine: the deadline is 2 s after each viewer's hello.
    let limit = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("wait for it").is_none() {
        if std::time::Instant::now() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("its output");
            panic!(
                "the readers still wait for a peer that says nothing after 120 s; stderr: {}",
                text(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("its output");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains(&format!(
            "viewer failed: {addr} sent nothing within 2000 ms of the hello: it is not an ostm host, or not answering"
        )),
        "stderr: {err}"
    );
    assert!(
        err.contains("0 of 2 viewers attached, 2 failed"),
        "stderr: {err}"
    );
}

/// A stand-in host: prints a listening line for a port nobody serves, then waits.
fn fake_host(dir: &Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("fake-host");
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho \"ostm-host listening on 127.0.0.1:{port}\"\nexec sleep 600\n"),
    )
    .expect("write the stand-in host");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
    path
}

#[test]
fn a_case_whose_viewers_never_attach_stops_the_bench_with_no_row() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let port = closed_port();
    let host = fake_host(tmp.path(), port);
    let out = bench(&[
        "--out",
        tmp.path().to_str().expect("utf-8 path"),
        "--host",
        host.to_str().expect("utf-8 path"),
        "--viewers",
        "1",
        "--rate",
        "60",
        "--seconds",
        "1",
        "--attach-steps",
        "0",
    ]);
    let (stdout, err) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout: {stdout}\nstderr: {err}"
    );
    assert!(
        err.contains(&format!(
            "ostm-bench-live: cannot measure tcp with 1 viewers at --rate 60: none of the 1 \
             viewers attached (cannot connect to 127.0.0.1:{port}: "
        )),
        "stderr: {err}"
    );
    // The baseline's row came first; the host's case printed none.
    assert!(
        stdout.contains("| plain loop (baseline) | 1 |"),
        "stdout: {stdout}"
    );
    assert!(!stdout.contains("| tcp |"), "stdout: {stdout}");
    assert!(!stdout.contains("load average after"), "stdout: {stdout}");
}
