//! `ostm-viewer inspect` and `verify`, run as the real binary on replays built here and on
//! the malformed corpus in `testdata/malformed/`.

mod support;

use ostm_protocol::sim::link::{Link, Role};
use ostm_protocol::sim::op::Op;
use ostm_protocol::sim::world::{Dims, Setup, World};
use ostm_protocol::Replay;
use std::path::{Path, PathBuf};
use support::*;

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// 3D, 2 bodies, seed 1, a sender link (body 1 at step 5), a start snapshot at step 3,
/// and four steps: one op of each kind over the first three, then an empty step
/// ([`ostm_protocol::sim::testdata::linked_start`] plus the steps).
fn linked_replay() -> Replay {
    let mut r = ostm_protocol::sim::testdata::linked_start();
    r.inputs.push_ops(&[
        Op::Impulse {
            body: 0,
            d: [i32::MAX, i32::MIN, 7],
        },
        Op::Teleport {
            body: 9,
            pos: [1, 2, 3],
        },
    ]);
    r.inputs
        .push_ops(&[Op::Remove { body: 0 }, Op::Gravity { g: -2 }]);
    r.inputs.push_ops(&[Op::Spawn {
        pos: [100, 200, 300],
    }]);
    r.inputs.push_ops(&[]);
    r.compute_hashes();
    r
}

/// 2D, 5 bodies, seed 77, from the setup, `steps` steps with an impulse every 10th.
fn plain_replay(steps: usize) -> Replay {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 5,
        seed: 77,
    };
    let mut r = Replay::new(setup, None);
    for i in 0..steps {
        if i % 10 == 0 {
            r.inputs.push_ops(&[Op::Impulse {
                body: (i % 5) as u8,
                d: [30, 60, 0],
            }]);
        } else {
            r.inputs.push_ops(&[]);
        }
    }
    r.compute_hashes();
    r
}

fn write(dir: &Path, name: &str, r: &Replay) -> PathBuf {
    let path = dir.join(name);
    r.write_file(&path).expect("write replay");
    path
}

fn malformed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/malformed")
}

/// `(file, offset, message)` from the corpus manifest.
fn malformed_cases() -> Vec<(PathBuf, u64, String)> {
    let text = std::fs::read_to_string(malformed_dir().join("manifest.json")).expect("manifest");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("manifest JSON");
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            (
                malformed_dir().join(c["file"].as_str().expect("file")),
                c["offset"].as_u64().expect("offset"),
                c["message"].as_str().expect("message").to_string(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// inspect

#[test]
fn inspect_prints_every_section_of_a_valid_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = linked_replay();
    let path = write(dir.path(), "linked.ostm", &r);
    let (code, out, err) = run(&["inspect", s(&path)]);
    assert_eq!(code, 0, "stderr: {err}");
    let rows = r.hashes.as_deref().expect("rows");
    // Layout by hand: 26 header bytes (magic to step count, link included), 4 + 76
    // snapshot, 5 x 8 rows, then steps of 2+28, 2+7, 2+13 and 2+0 bytes.
    let size = 26 + 4 + 76 + 40 + 30 + 9 + 15 + 2;
    for want in [
        format!("file        {} ({size} bytes)", s(&path)),
        "magic       OSTM".to_string(),
        "version     1".to_string(),
        "flags       0x0007: bit 0 hash rows, bit 1 start snapshot, bit 2 link block".to_string(),
        "setup       3D, 2 bodies, seed 1 (0x00000001)".to_string(),
        "link        role 1 (sender): body 1 leaves at step 5; declares ContinuedBy, key tm-left, peer key tm-right".to_string(),
        "start       step 3 (start snapshot: 76 bytes, 2 slots, 2 alive, gravity 3)".to_string(),
        "steps       4 (steps 3..7)".to_string(),
        "ops         5 in all: impulse 1, teleport 1, remove 1, gravity 1, spawn 1; 1 empty steps".to_string(),
        format!("hash rows   5 rows: first {} (step 3), last {} (step 7)", hex(rows[0]), hex(rows[4])),
    ] {
        assert!(out.contains(&want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn inspect_names_the_receiver_and_fields_only_roles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let setup = Setup {
        dims: Dims::Two,
        bodies: 4,
        seed: 3,
    };
    let receiver = Link {
        role: Role::Receiver,
        body: 3,
        transfer_step: 150,
    };
    let path = write(
        dir.path(),
        "right.ostm",
        &Replay::new(setup, Some(receiver)),
    );
    let (code, out, _) = run(&["inspect", s(&path)]);
    assert_eq!(code, 0);
    assert!(out.contains("role 2 (receiver): body 3 arrives at step 150; declares Continues, key tm-right, peer key tm-left"), "{out}");
    assert!(
        out.contains("flags       0x0004: bit 2 link block"),
        "{out}"
    );
    assert!(out.contains("hash rows   none"), "{out}");

    let fields = Link {
        role: Role::FieldsOnly,
        body: 200,
        transfer_step: 9,
    };
    let path = write(dir.path(), "fields.ostm", &Replay::new(setup, Some(fields)));
    let (code, out, _) = run(&["inspect", s(&path), "--json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["link"]["role"], 3);
    assert_eq!(doc["link"]["body"], 200);
    assert!(doc["link"]["declaration"].is_null());
    assert!(doc["link"]["key"].is_null());
}

#[test]
fn inspect_json_holds_the_same_facts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = linked_replay();
    let path = write(dir.path(), "linked.ostm", &r);
    let (code, out, _) = run(&["inspect", s(&path), "--json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("inspect --json is JSON");
    let rows = r.hashes.as_deref().expect("rows");
    assert_eq!(doc["valid"], true);
    assert_eq!(doc["magic"], "OSTM");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["flags"]["value"], 7);
    assert_eq!(doc["flags"]["hash_rows"], true);
    assert_eq!(doc["setup"]["dims"], 3);
    assert_eq!(doc["setup"]["bodies"], 2);
    assert_eq!(doc["setup"]["seed"], 1);
    assert_eq!(doc["link"]["role_name"], "sender");
    assert_eq!(doc["link"]["transfer_step"], 5);
    assert_eq!(doc["link"]["declaration"], "ContinuedBy");
    assert_eq!(doc["link"]["key"], "tm-left");
    assert_eq!(doc["link"]["peer_key"], "tm-right");
    assert_eq!(doc["start_step"], 3);
    assert_eq!(doc["start_snapshot"]["slots"], 2);
    assert_eq!(doc["step_count"], 4);
    assert_eq!(doc["end_step"], 7);
    assert_eq!(doc["ops"]["total"], 5);
    assert_eq!(doc["ops"]["empty_steps"], 1);
    assert_eq!(doc["hashes"]["rows"], 5);
    assert_eq!(doc["hashes"]["first"]["step"], 3);
    assert_eq!(doc["hashes"]["first"]["hash"], hex(rows[0]));
    assert_eq!(doc["hashes"]["last"]["step"], 7);
    assert_eq!(doc["hashes"]["last"]["hash"], hex(rows[4]));
}

#[test]
fn inspect_refuses_every_malformed_file_with_its_offset() {
    let cases = malformed_cases();
    assert!(cases.len() >= 40);
    for (path, offset, message) in cases {
        let (code, out, err) = run(&["inspect", s(&path)]);
        assert_eq!(code, 2, "{}", path.display());
        assert!(out.is_empty(), "{}: stdout {out}", path.display());
        let want = format!("error: {}: at offset {offset}: ", path.display());
        assert!(
            err.contains(&want) && err.contains(&message),
            "{}: {err}",
            path.display()
        );
    }
}

#[test]
fn inspect_json_reports_a_malformed_file_as_an_object() {
    let path = malformed_dir().join("truncated-hash-rows.ostm");
    let (code, out, err) = run(&["inspect", s(&path), "--json"]);
    assert_eq!(code, 2);
    assert!(err.contains("at offset 106"), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["error"]["offset"], 106);
    assert_eq!(doc["error"]["input"], s(&path));
    assert!(doc["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("hash rows"));
}

#[test]
fn inspect_and_verify_exit_2_on_a_missing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent.ostm");
    for cmd in ["inspect", "verify"] {
        let (code, _, err) = run(&[cmd, s(&path)]);
        assert_eq!(code, 2, "{cmd}");
        assert!(err.contains("cannot read"), "{cmd}: {err}");
    }
}

// ---------------------------------------------------------------------------------------
// verify

#[test]
fn verify_passes_a_good_file_and_prints_the_final_hash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = plain_replay(300);
    let last = *r.hashes.as_deref().and_then(|h| h.last()).expect("rows");
    let path = write(dir.path(), "good.ostm", &r);
    let (code, out, err) = run(&["verify", s(&path)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ok: all 301 hash rows match (steps 0..300)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("final hash {} at step 300", hex(last))),
        "{out}"
    );

    let (code, out, _) = run(&["verify", s(&path), "--json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["result"], "match");
    assert_eq!(doc["rows_checked"], 301);
    assert_eq!(doc["final_hash"], hex(last));
}

#[test]
fn verify_starts_from_the_start_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "linked.ostm", &linked_replay());
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok: all 5 hash rows match (steps 3..7)"),
        "{out}"
    );
}

#[test]
fn verify_without_hash_rows_prints_the_final_hash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = plain_replay(50);
    r.hashes = None;
    let path = write(dir.path(), "bare.ostm", &r);
    // The final hash, computed independently of `Replay::verify`.
    let mut world = World::new(r.setup, None);
    for i in 0..r.step_count() {
        world.step(&r.inputs.ops(i));
    }
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!(
            "no hash rows: ran 50 steps (steps 0..50); final hash {} at step 50",
            hex(world.hash())
        )),
        "{out}"
    );
    let (_, out, _) = run(&["verify", s(&path), "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["result"], "no_hash_rows");
    assert_eq!(doc["rows_checked"], 0);
}

#[test]
fn verify_names_the_step_and_both_hashes_of_a_planted_wrong_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = plain_replay(300);
    let rows = r.hashes.as_mut().expect("rows");
    let good = rows[137];
    rows[137] ^= 1 << 40;
    let bad = rows[137];
    let path = write(dir.path(), "planted.ostm", &r);
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "mismatch at step 137 (hash row 137): the file has {}, the run computed {}",
            hex(bad),
            hex(good)
        )),
        "{out}"
    );
    assert!(
        out.contains("rows 0..=136 (steps 0..=136) matched"),
        "{out}"
    );

    let (code, out, _) = run(&["verify", s(&path), "--json"]);
    assert_eq!(code, 1);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["result"], "mismatch");
    assert_eq!(doc["mismatch"]["step"], 137);
    assert_eq!(doc["mismatch"]["expected"], hex(bad));
    assert_eq!(doc["mismatch"]["actual"], hex(good));
    assert_eq!(doc["rows_checked"], 138);
}

#[test]
fn verify_numbers_a_mismatch_by_step_from_the_start_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = linked_replay();
    // Row 0 is the start snapshot's own hash, at step 3.
    r.hashes.as_mut().expect("rows")[0] ^= 1;
    let path = write(dir.path(), "row0.ostm", &r);
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 1);
    assert!(out.contains("mismatch at step 3 (hash row 0)"), "{out}");
    // A changed input (one unit of impulse) makes the next row differ, not the file invalid.
    let mut r = linked_replay();
    let rows = r.hashes.clone();
    let mut changed = Replay::new(r.setup, r.link);
    changed.start = r.start.take();
    for i in 0..r.step_count() {
        let mut ops = r.inputs.ops(i);
        if i == 2 {
            ops.push(Op::Impulse {
                body: 2,
                d: [1, 0, 0],
            });
        }
        changed.inputs.push_ops(&ops);
    }
    changed.hashes = rows;
    let path = write(dir.path(), "changed.ostm", &changed);
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 1);
    assert!(out.contains("mismatch at step 6 (hash row 3)"), "{out}");
}

#[test]
fn verify_exits_2_on_malformed_files() {
    for name in [
        "bad-magic.ostm",
        "unknown-opcode-6.ostm",
        "huge-hash-row-count.ostm",
        "trailing-byte.ostm",
    ] {
        let path = malformed_dir().join(name);
        let (code, out, err) = run(&["verify", s(&path)]);
        assert_eq!(code, 2, "{name}");
        assert!(out.is_empty(), "{name}: {out}");
        assert!(
            err.contains(&format!("error: {}: at offset ", path.display())),
            "{name}: {err}"
        );
        let (code, out, _) = run(&["verify", s(&path), "--json"]);
        assert_eq!(code, 2);
        let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert!(doc["error"]["offset"].is_u64(), "{name}: {out}");
    }
}

#[test]
fn help_shows_examples_and_exit_codes() {
    for cmd in ["inspect", "verify"] {
        let (code, out, _) = run(&[cmd, "--help"]);
        assert_eq!(code, 0);
        assert!(
            out.contains("Examples:") && out.contains("Exit codes:"),
            "{cmd}: {out}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The committed test data

/// `testdata/*.ostm` and `testdata/accepted/*.ostm` (files the contract allows with
/// values our writer never makes: a dead slot with fields set, a 2D z, a link index with
/// no slot).
fn testdata_replays() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let mut files: Vec<PathBuf> = [root.clone(), root.join("accepted")]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).expect("list testdata"))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "ostm"))
        .collect();
    files.sort();
    assert!(
        files
            .iter()
            .any(|p| p.parent().is_some_and(|d| d.ends_with("accepted"))),
        "testdata/accepted holds a replay"
    );
    files
}

#[test]
fn every_committed_replay_inspects_and_verifies() {
    let files = testdata_replays();
    assert!(files.len() >= 6, "{files:?}");
    for path in files {
        let (code, out, err) = run(&["inspect", s(&path), "--json"]);
        assert_eq!(code, 0, "{}: {err}", path.display());
        let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(
            doc["hashes"]["rows"],
            doc["step_count"].as_u64().expect("count") + 1,
            "{}",
            path.display()
        );
        let (code, out, err) = run(&["verify", s(&path)]);
        assert_eq!(code, 0, "{}: {out}{err}", path.display());
        assert!(out.starts_with("ok: all "), "{}: {out}", path.display());
    }
}

#[test]
fn test_10000_is_what_the_contract_says() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-10000.ostm");
    let (code, out, _) = run(&["inspect", s(&path), "--json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["setup"]["dims"], 3);
    assert_eq!(doc["setup"]["bodies"], 24);
    assert_eq!(doc["step_count"], 10_000);
    assert_eq!(doc["hashes"]["last"]["step"], 10_000);
}

#[test]
fn verify_catches_one_wrong_row_in_test_10000() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-10000.ostm");
    let mut r = Replay::read_file(&src).expect("read test-10000");
    let rows = r.hashes.as_mut().expect("rows");
    let good = rows[7321];
    rows[7321] = good.wrapping_add(1);
    let path = write(dir.path(), "planted.ostm", &r);
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!(
            "mismatch at step 7321 (hash row 7321): the file has {}, the run computed {}",
            hex(good.wrapping_add(1)),
            hex(good)
        )),
        "{out}"
    );
}

#[test]
fn logs_to_a_pipe_hold_no_colour_codes() {
    // `trace` logs its row count at debug level; stderr here is a pipe, not a terminal.
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-2d-600.ostm");
    let out = ostm_testkit::run(
        std::process::Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
            .args(["trace", s(&file), "--to", "2"])
            .env("RUST_LOG", "debug"),
    );
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("trace written"),
        "the log line is missing: {err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "escape codes in a piped log: {err:?}"
    );
}
