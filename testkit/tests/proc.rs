//! The helper reads a child's pipes while it runs: a child that prints far more than a
//! pipe holds, on both pipes, still finishes, and nothing it printed is lost.

use ostm_testkit::Proc;
use std::process::Command;

/// 20 000 numbered lines on each pipe (about 200 KB each, three times a 64 KiB pipe).
const SCRIPT: &str = "i=0; while [ $i -lt 20000 ]; do echo \"out $i\"; echo \"err $i\" >&2; i=$((i+1)); done; exit 3";

#[test]
fn a_child_that_fills_both_pipes_finishes_and_loses_nothing() {
    let out = Proc::spawn(Command::new("sh").args(["-c", SCRIPT])).finish();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout.lines().count(), 20_000);
    assert_eq!(stderr.lines().count(), 20_000);
    assert_eq!(stdout.lines().last(), Some("out 19999"));
    assert_eq!(stderr.lines().nth(12_345), Some("err 12345"));
}

#[test]
fn lines_read_while_it_runs_are_part_of_its_output() {
    let mut p = Proc::spawn(Command::new("sh").args(["-c", SCRIPT]));
    let l = p.wait_line(|l| l == "out 100");
    assert_eq!(l, "out 100");
    let out = p.finish();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 20_000, "no line read early is lost");
    assert_eq!(stdout.lines().next(), Some("out 0"));
}

#[test]
fn a_killed_child_reports_what_it_printed() {
    let mut p = Proc::spawn(Command::new("sh").args(["-c", "echo ready; exec sleep 600"]));
    assert_eq!(p.line().as_deref(), Some("ready"));
    let out = p.kill();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "ready\n");
}
