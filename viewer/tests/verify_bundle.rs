//! What `ostm-viewer verify FILE` prints and writes on a mismatch, line for line as
//! `docs/replay-format.md` ("The failure bundle") gives it: `FILE.ostmb` beside the file
//! by default, `--bundle PATH`, `--no-bundle`, a bundle that cannot be written, and the
//! JSON `bundle` / `bundle_error` keys.

mod support;

use ostm_protocol::sim::world::{Dims, Setup};
use ostm_protocol::Replay;
use support::*;

/// 2D, 1 body, seed 7, three empty steps, hash row 2 with its lowest bit flipped.
fn bad_replay() -> (Replay, u64, u64) {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 1,
        seed: 7,
    };
    let mut r = Replay::new(setup, None);
    for _ in 0..3 {
        r.inputs.push_ops(&[]);
    }
    r.compute_hashes();
    let rows = r.hashes.as_mut().expect("rows");
    let actual = rows[2];
    rows[2] ^= 1;
    let expected = rows[2];
    (r, expected, actual)
}

#[test]
fn a_mismatch_writes_its_bundle_where_the_page_says_and_prints_the_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sub = dir.path().join("runs");
    std::fs::create_dir(&sub).expect("mkdir");
    let (r, expected, actual) = bad_replay();
    let file = sub.join("a.ostm");
    r.write_file(&file).expect("write");
    let head = format!(
        "mismatch at step 2 (hash row 2): the file has {expected:016x}, the run computed {actual:016x}\n\
         rows 0..=1 (steps 0..=1) matched\n"
    );

    // Default: FILE.ostmb, the path as given with .ostmb appended, beside the file.
    let (code, out, err) = run(&["verify", s(&file)]);
    let beside = format!("{}.ostmb", s(&file));
    assert_eq!(code, 1);
    assert_eq!(
        out,
        format!("{head}bundle written: {beside} (reproduce: ostm-viewer replay {beside})\n")
    );
    assert_eq!(err, "");
    assert!(sub.join("a.ostm.ostmb").is_file());
    assert!(!sub.join("a.ostm.ostmb.part").exists());
    assert_eq!(run(&["replay", &beside]).0, 1, "the bundle reproduces");

    // --bundle PATH, replacing what is there.
    let named = dir.path().join("named.ostmb");
    std::fs::write(&named, b"old").expect("write");
    let (code, out, _) = run(&["verify", s(&file), "--bundle", s(&named)]);
    assert_eq!(code, 1);
    let p = s(&named);
    assert_eq!(
        out,
        format!("{head}bundle written: {p} (reproduce: ostm-viewer replay {p})\n")
    );
    assert_ne!(std::fs::read(&named).expect("read"), b"old");

    // --no-bundle: no line, no file.
    std::fs::remove_file(sub.join("a.ostm.ostmb")).expect("rm");
    let (code, out, err) = run(&["verify", s(&file), "--no-bundle"]);
    assert_eq!((code, out.as_str(), err.as_str()), (1, head.as_str(), ""));
    assert!(!sub.join("a.ostm.ostmb").exists());

    // A bundle that cannot be written: the error on stderr, still exit 1.
    let nowhere = dir.path().join("no/such/dir/x.ostmb");
    let (code, out, err) = run(&["verify", s(&file), "--bundle", s(&nowhere)]);
    assert_eq!(code, 1);
    assert_eq!(out, head);
    let prefix = format!("error: no bundle written: {}: ", s(&nowhere));
    assert!(err.starts_with(&prefix) && err.ends_with('\n'), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // JSON: bundle is the path, or null; bundle_error only when writing failed.
    let json = |args: &[&str]| -> serde_json::Value {
        let (_, out, _) = run(args);
        serde_json::from_str(&out).expect("JSON")
    };
    let doc = json(&["verify", "--json", s(&file)]);
    assert_eq!(doc["bundle"], beside.as_str());
    assert!(doc.get("bundle_error").is_none());
    assert_eq!(doc["from_step"], 0);
    assert_eq!(doc["rows_checked"], 3);
    let doc = json(&["verify", "--json", "--no-bundle", s(&file)]);
    assert!(doc["bundle"].is_null());
    assert!(doc.get("bundle_error").is_none());
    let doc = json(&["verify", "--json", s(&file), "--bundle", s(&nowhere)]);
    assert!(doc["bundle"].is_null());
    let message = doc["bundle_error"].as_str().expect("bundle_error");
    assert_eq!(format!("error: no bundle written: {message}\n"), err);

    // Both flags: a usage error before anything is read.
    let (code, out, _) = run(&["verify", s(&file), "--bundle", s(&named), "--no-bundle"]);
    assert_eq!((code, out.as_str()), (2, ""));

    // A file that matches writes no bundle and prints no bundle line.
    let good = dir.path().join("good.ostm");
    let mut ok = r.clone();
    ok.compute_hashes();
    ok.write_file(&good).expect("write");
    let (code, out, _) = run(&["verify", s(&good)]);
    assert_eq!(code, 0);
    assert!(!out.contains("bundle"), "{out}");
    assert!(!dir.path().join("good.ostm.ostmb").exists());
}
