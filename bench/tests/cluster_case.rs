//! The bench's cluster case as a user runs it: `--transport cluster` starts three real
//! nats-servers on 127.0.0.1 (testkit's `Cluster`), the host publishes with `--replicas 3`
//! and the viewers read through the three nodes; the row counts the viewers attached and
//! those that verified to the host's end, and gives each node's CPU.

use ostm_testkit::{bin, nats_bin};
use std::process::Command;

#[test]
fn the_cluster_case_counts_its_viewers_and_each_nodes_cpu() {
    nats_bin();
    let out_dir = tempfile::tempdir().expect("temporary directory");
    let out = Command::new(env!("CARGO_BIN_EXE_ostm-bench-live"))
        .arg("--host")
        .arg(bin("ostm-host"))
        .arg("--out")
        .arg(out_dir.path())
        .args(["--transport", "cluster", "--viewers", "6", "--rate", "60"])
        .args(["--seconds", "2", "--attach-steps", "0"])
        .output()
        .expect("run ostm-bench-live");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| nats cluster (3 nodes) |"))
        .unwrap_or_else(|| panic!("no cluster row; stdout: {stdout}\nstderr: {stderr}"));
    let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
    // viewers, attached, verified to the end.
    assert_eq!(
        &cells[1..4],
        ["6", "6", "6"],
        "row: {row}\nstderr: {stderr}"
    );
    // Each node's CPU per delivered record, named, the stream's leader marked once.
    let nodes = cells[11];
    for name in ["n0", "n1", "n2"] {
        assert!(nodes.contains(name), "row: {row}");
    }
    assert_eq!(nodes.matches("(leader)").count(), 1, "row: {row}");
}
