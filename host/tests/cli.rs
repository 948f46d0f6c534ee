//! `ostm-host` as a user runs it: help with examples, exit codes, a short run to its end.
//! (This crate also makes `cargo test --workspace` build `ostm-host` before any test
//! starts, for the viewer's live tests.)

use ostm_testkit::{run, Proc};
use std::process::Command;

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ostm-host"))
}

#[test]
fn help_shows_examples_and_exits_0() {
    for args in [&["--help"][..], &["serve", "--help"]] {
        let out = run(host().args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Examples:"), "{args:?}: {text}");
        assert!(text.contains("ostm-host serve"), "{args:?}: {text}");
    }
    // Every other command's help has examples with the binary's own name.
    for cmd in ["cert", "completions", "man"] {
        let out = run(host().args([cmd, "--help"]));
        assert_eq!(out.status.code(), Some(0), "{cmd}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Examples:") && text.contains(&format!("ostm-host {cmd}")),
            "{cmd}: {text}"
        );
        assert!(!text.contains("BIN"), "{cmd}: {text}");
    }
}

/// The way to cause a drift on purpose is in `serve --help`, in a `Testing` section; the
/// older hidden spelling `--perturb` is not shown; a malformed value is bad input.
#[test]
fn drift_at_is_in_a_testing_section_of_the_help() {
    let out = run(host().args(["serve", "--help"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let testing = text
        .split_once("\nTesting:\n")
        .unwrap_or_else(|| panic!("no Testing section: {text}"))
        .1;
    assert!(
        testing.trim_start().starts_with("--drift-at <STEP[:BODY]>"),
        "{testing}"
    );
    assert!(!text.contains("--perturb"), "{text}");
    for bad in ["x", "600:", "600:300", ":5"] {
        let out = run(host().args(["serve", "--drift-at", bad]));
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("expected STEP[:BODY]"), "{bad}: {err}");
    }
}

#[test]
fn an_unknown_option_is_bad_input() {
    let out = run(host().args(["serve", "--no-such-option"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-option"));
}

#[test]
fn a_non_loopback_address_needs_a_token() {
    let out = run(host().args(["serve", "--listen", "0.0.0.0:0", "--steps", "1"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("is not a loopback address: a token is required"));
}

#[test]
fn a_short_run_prints_its_address_first_and_its_end_last() {
    let mut p = Proc::spawn(host().args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--rate",
        "max",
        "--steps",
        "50",
        "--status-ms",
        "0",
    ]));
    let first = p.line().expect("a first line");
    assert!(first.contains("127.0.0.1:"), "{first}");
    let out = p.finish();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("end: finished"), "{text}");
}

#[test]
fn localhost_is_accepted_as_a_listen_address() {
    let out = run(host().args([
        "serve",
        "--listen",
        "localhost:0",
        "--rate",
        "max",
        "--steps",
        "5",
        "--status-ms",
        "0",
    ]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        first.starts_with("ostm-host listening on 127.0.0.1:")
            || first.starts_with("ostm-host listening on [::1]:"),
        "{first}"
    );
}
