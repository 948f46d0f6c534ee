//! `ostm-viewer trace` prints every body field as the world holds it: a 2D body restored
//! from a start snapshot keeps its z values, a dead slot its fields
//! (`docs/trace-format.md`, the body fields of a row). The row the page quotes is read
//! from the page.

use std::path::PathBuf;
use std::process::Command;

const DOC: &str = include_str!("../../docs/trace-format.md");

#[test]
fn a_2d_snapshot_s_z_values_and_a_dead_slot_s_fields_are_printed_as_held() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/accepted/dead-slot-2d-z-link-slot.ostm");
    let out = ostm_testkit::run(
        Command::new(env!("CARGO_BIN_EXE_ostm-viewer")).args(["trace".as_ref(), file.as_os_str()]),
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("s=")).collect();
    assert_eq!(rows.len(), 31);
    // The page quotes the first row in a code span after "begins".
    let quoted = DOC
        .split("dead-slot-2d-z-link-slot.ostm` (2D) begins")
        .nth(1)
        .and_then(|rest| rest.split('`').nth(1))
        .expect("the quoted row");
    assert_eq!(rows[0], quoted);
    for row in &rows {
        let bodies: Vec<&str> = row.split(" | ").skip(1).collect();
        // Body 0: dead, its fields as the snapshot holds them, on every row.
        assert_eq!(bodies[0], "0 9 1 -2 3 4 -5 6", "{row}");
        // Body 1: position z 5 and velocity z -7 in a 2D world, never changed.
        let f: Vec<&str> = bodies[1].split(' ').collect();
        assert_eq!((f[4], f[7]), ("5", "-7"), "{row}");
    }
    // The slot spawned at step 5 with z 77 stores z as 0.
    let spawned: Vec<&str> = rows[6]
        .split(" | ")
        .nth(4)
        .expect("slot 3")
        .split(' ')
        .collect();
    assert_eq!(
        (spawned[0], spawned[4], spawned[7]),
        ("1", "0", "0"),
        "{}",
        rows[6]
    );
}
