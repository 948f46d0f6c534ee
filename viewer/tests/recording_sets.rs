//! `ostm-viewer verify` on several numbered files of one live session (`session.ostm`,
//! `session.1.ostm`, …), run as the real binary on files cut here from
//! `testdata/test-10000.ostm` the way a viewer that attached late and resynced records them.

mod support;

use ostm_protocol::sim::link::{Link, Role};
use ostm_protocol::Replay;
use std::path::{Path, PathBuf};
use support::*;

fn write(dir: &Path, name: &str, r: &Replay) -> PathBuf {
    let p = dir.join(name);
    r.write_file(&p).expect("write replay");
    p
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The session of a viewer that resynced twice: steps 0..=1200, 1530..=2500, 3000..=4000.
fn session(dir: &Path) -> [PathBuf; 3] {
    let full = test_10000();
    [
        write(dir, "session.ostm", &cut(&full, 0, 1200)),
        write(dir, "session.1.ostm", &cut(&full, 1530, 2500)),
        write(dir, "session.2.ostm", &cut(&full, 3000, 4000)),
    ]
}

#[test]
fn three_files_are_put_in_order_and_both_gaps_named() {
    let dir = tempfile::tempdir().unwrap();
    let [s0, s1, s2] = session(dir.path());
    // Given out of order: reported in order of start step.
    let (code, out, err) = run(&["verify", s(&s2), s(&s0), s(&s1)]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert!(
        lines[0].starts_with(&format!(
            "{}: ok: all 1201 hash rows match (steps 0..1200); final hash ",
            s0.display()
        )),
        "{out}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "{}: ok: all 971 hash rows match (steps 1530..2500)",
            s1.display()
        )),
        "{out}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "{}: ok: all 1001 hash rows match (steps 3000..4000)",
            s2.display()
        )),
        "{out}"
    );
    assert_eq!(
        lines[3],
        format!(
            "gap: steps 1200..1530 (330 steps) between {} and {}",
            s0.display(),
            s1.display()
        )
    );
    assert_eq!(
        lines[4],
        format!(
            "gap: steps 2500..3000 (500 steps) between {} and {}",
            s1.display(),
            s2.display()
        )
    );
    assert_eq!(
        lines[5],
        "ok: 3 files of one world, steps 0..4000; 2 gaps (830 steps in no file), 0 overlaps; \
         every file verifies and every step held twice agrees"
    );

    let (code, out, _) = run(&["verify", s(&s1), s(&s2), s(&s0), "--json"]);
    assert_eq!(code, 0, "{out}");
    let v = json(&out);
    assert_eq!(v["result"], "match");
    assert_eq!(
        (&v["first_step"], &v["end_step"]),
        (&0.into(), &4000.into())
    );
    let files: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    assert_eq!(files, [s(&s0), s(&s1), s(&s2)]);
    // Each file's object is the one `verify FILE --json` prints alone.
    let (_, alone, _) = run(&["verify", s(&s1), "--json"]);
    assert_eq!(v["files"][1], json(&alone));
    assert_eq!(
        v["gaps"],
        serde_json::json!([
            {"from": 1200, "to": 1530, "steps": 330, "after": s(&s0), "before": s(&s1)},
            {"from": 2500, "to": 3000, "steps": 500, "after": s(&s1), "before": s(&s2)},
        ])
    );
    assert_eq!(v["overlaps"], serde_json::json!([]));
}

#[test]
fn overlapping_files_must_hold_the_same_rows_at_their_common_steps() {
    let dir = tempfile::tempdir().unwrap();
    let full = test_10000();
    let a = write(dir.path(), "a.ostm", &cut(&full, 0, 1500));
    let b = write(dir.path(), "b.ostm", &cut(&full, 1200, 2500));
    let (code, out, err) = run(&["verify", s(&a), s(&b)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "overlap: steps 1200..=1500 (301 rows) held by both {} and {}: every row agrees",
            a.display(),
            b.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "ok: 2 files of one world, steps 0..2500; 0 gaps (0 steps in no file), 1 overlap;"
        ),
        "{out}"
    );

    // Planted: B starts from another world at step 1200 (one body 1 mm over) with rows of its
    // own that it reproduces. Alone it verifies; by step number it disagrees with A.
    let mut other = cut(&full, 1200, 2500);
    other.start.as_mut().unwrap().bodies[5].pos[0] += 1;
    other.compute_hashes();
    let c = write(dir.path(), "c.ostm", &other);
    assert_eq!(run(&["verify", s(&c)]).0, 0);
    let (code, out, _) = run(&["verify", s(&c), s(&a)]);
    assert_eq!(code, 1, "{out}");
    let rows = other.hashes.as_ref().unwrap();
    let mine = full.hashes.as_ref().unwrap()[1200];
    assert!(
        out.contains(&format!(
            "overlap: steps 1200..=1500 (301 rows) held by both {} and {}: they differ at step 1200: {} has {mine:016x}, {} has {:016x}",
            a.display(),
            c.display(),
            a.display(),
            c.display(),
            rows[0]
        )),
        "{out}"
    );
    assert!(
        out.contains("; 0 files with a differing hash row, 1 overlap that disagrees"),
        "{out}"
    );
    let (code, out, _) = run(&["verify", s(&a), s(&c), "--json"]);
    assert_eq!(code, 1);
    let v = json(&out);
    assert_eq!(v["result"], "mismatch");
    let o = &v["overlaps"][0];
    assert_eq!(
        (&o["from"], &o["to"], &o["rows"], &o["agree"]),
        (&1200.into(), &1500.into(), &301.into(), &false.into())
    );
    assert_eq!(o["mismatch"]["step"], 1200);
    assert_eq!(
        o["mismatch"]["hashes"],
        serde_json::json!([format!("{mine:016x}"), format!("{:016x}", rows[0])])
    );

    // Files that meet at one step share that row: it is compared.
    let d = write(dir.path(), "d.ostm", &cut(&full, 1500, 1600));
    let (code, out, _) = run(&["verify", s(&a), s(&d)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("overlap: steps 1500..=1500 (1 row)"), "{out}");
}

#[test]
fn a_file_with_a_wrong_row_is_named_and_gets_its_own_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let [s0, _, s2] = session(dir.path());
    let mut r = cut(&test_10000(), 1530, 2500);
    let good = r.hashes.as_ref().unwrap()[470];
    r.hashes.as_mut().unwrap()[470] ^= 1;
    let s1 = write(dir.path(), "session.1.ostm", &r);
    let (code, out, _) = run(&["verify", s(&s0), s(&s1), s(&s2)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "{}: mismatch at step 2000 (hash row 470): the file has {:016x}, the run computed {good:016x}",
            s1.display(),
            good ^ 1
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{}: rows 0..=469 (steps 1530..=1999) matched",
            s1.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("; 1 file with a differing hash row, 0 overlaps that disagree"),
        "{out}"
    );
    assert!(dir.path().join("session.1.ostm.ostmb").exists());
    assert!(!dir.path().join("session.ostm.ostmb").exists());
    assert!(!dir.path().join("session.2.ostm.ostmb").exists());
    // The gaps are still named.
    assert!(out.contains("gap: steps 1200..1530 (330 steps)"), "{out}");

    // --no-bundle holds for every file; --bundle PATH names one bundle: refused with several.
    std::fs::remove_file(dir.path().join("session.1.ostm.ostmb")).unwrap();
    let (code, out, _) = run(&["verify", s(&s0), s(&s1), "--no-bundle", "--json"]);
    assert_eq!(code, 1);
    assert!(!dir.path().join("session.1.ostm.ostmb").exists());
    let v = json(&out);
    assert_eq!(v["files"][1]["result"], "mismatch");
    assert_eq!(v["files"][1]["mismatch"]["step"], 2000);
    assert_eq!(v["files"][0]["result"], "match");
    let bundle = dir.path().join("one.ostmb");
    let (code, _, err) = run(&["verify", s(&s0), s(&s1), "--bundle", s(&bundle)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--bundle names one bundle"), "{err}");
    assert!(!bundle.exists());
}

#[test]
fn files_of_different_worlds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let [s0, s1, _] = session(dir.path());
    let other = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-2d-600.ostm");
    let (code, out, err) = run(&["verify", s(&s0), s(&s1), s(&other)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(&format!(
            "error: {} and {} are not files of one world: {} has \"setup dims=3 bodies=24 seed=10000 link=none\", {} has \"setup dims=2 bodies=12 seed=600 link=none\" (a viewer that reconnected to a host restarted with another world records that world in files of its own: verify the files of each world apart)",
            s0.display(),
            other.display(),
            s0.display(),
            other.display()
        )),
        "{err}"
    );
    // The same setup with a link block is another world too.
    let mut linked = cut(&test_10000(), 1200, 1300);
    linked.link = Some(Link {
        role: Role::FieldsOnly,
        body: 0,
        transfer_step: 0,
    });
    let linked = write(dir.path(), "linked.ostm", &linked);
    let (code, out, err) = run(&["verify", s(&s0), s(&linked), "--json"]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("link=3:0:0"), "{err}");
    let v = json(&out);
    assert_eq!(v["result"], "different_worlds");
    assert_eq!(
        v["files"][1]["setup"],
        "setup dims=3 bodies=24 seed=10000 link=3:0:0"
    );
    // Nothing ran: no bundle, although the linked file's rows are not its world's.
    assert!(!dir.path().join("linked.ostm.ostmb").exists());
}

#[test]
fn a_malformed_file_in_a_set_exits_2_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let [s0, s1, s2] = session(dir.path());
    // s0 with a wrong row (it would get a bundle if it ran), s1 cut short.
    let mut r = cut(&test_10000(), 0, 1200);
    r.hashes.as_mut().unwrap()[9] ^= 1;
    write(dir.path(), "session.ostm", &r);
    let bytes = std::fs::read(&s1).unwrap();
    std::fs::write(&s1, &bytes[..bytes.len() - 1]).unwrap();
    let (code, out, err) = run(&["verify", s(&s0), s(&s1), s(&s2)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(&format!("error: {}: at offset ", s1.display())),
        "{err}"
    );
    assert!(!dir.path().join("session.ostm.ostmb").exists());
    let (code, out, _) = run(&["verify", s(&s0), s(&s1), s(&s2), "--json"]);
    assert_eq!(code, 2);
    let v = json(&out);
    assert_eq!(v["result"], "malformed");
    assert_eq!(
        v["files"][0],
        serde_json::json!({"file": s(&s0), "valid": true})
    );
    assert_eq!(v["files"][1]["valid"], false);
    assert!(v["files"][1]["error"]["offset"].is_u64(), "{out}");
}

#[test]
fn from_keyframe_takes_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let [s0, s1, _] = session(dir.path());
    let k = dir.path().join("k.json");
    let (code, _, err) = run(&["keyframe", s(&s0), "--step", "10", "-o", s(&k)]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["verify", s(&s0), s(&s1), "--from-keyframe", s(&k)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--from-keyframe starts one file"), "{err}");
}
