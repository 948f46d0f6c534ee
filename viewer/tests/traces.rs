//! Traces, first difference, failure bundles, keyframes and the seek index, run as the real
//! `ostm-viewer` binary on replays built here.

mod support;

use ostm_protocol::sim::op::Op;
use ostm_protocol::sim::world::{Dims, Setup, World};
use ostm_protocol::Replay;
use std::path::{Path, PathBuf};
use support::*;

/// 3D, 5 bodies, seed 11, 400 steps with an impulse every 40 steps and a spawn at step 77.
fn replay() -> Replay {
    let mut r = Replay::new(
        Setup {
            dims: Dims::Three,
            bodies: 5,
            seed: 11,
        },
        None,
    );
    for i in 0..400u32 {
        let ops = match i {
            77 => vec![Op::Spawn {
                pos: [1000, 9000, 500],
            }],
            _ if i % 40 == 0 => vec![Op::Impulse {
                body: (i / 40 % 5) as u8,
                d: [50, 80, -20],
            }],
            _ => vec![],
        };
        r.inputs.push_ops(&ops);
    }
    r.compute_hashes();
    r
}

fn worlds(r: &Replay) -> Vec<World> {
    let mut out = vec![r.start_world()];
    for i in 0..r.step_count() {
        let mut w = out[i].clone();
        w.step(&r.inputs.ops(i));
        out.push(w);
    }
    out
}

fn write(dir: &Path, name: &str, r: &Replay) -> PathBuf {
    let p = dir.join(name);
    r.write_file(&p).expect("write replay");
    p
}

// ---------------------------------------------------------------------------------------
// trace and first-difference

#[test]
fn a_planted_one_unit_difference_is_reported_at_its_step_body_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let r = replay();
    let path = write(dir.path(), "r.ostm", &r);
    let a = dir.path().join("a.trace");
    let (code, _, err) = run(&["trace", s(&path), "-o", s(&a)]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&a).unwrap();
    assert_eq!(text.lines().count(), 2 + 401 + 1);

    // Plant: step 123, body 2, velocity.y one larger. Rows are `s=.. h=.. g=.. n=..`
    // followed by ` | ` and eight fields per body; velocity.y is the seventh.
    let w = &worlds(&r)[123];
    let vy = w.bodies[2].vel[1];
    let planted: String = text
        .lines()
        .map(|l| {
            if l.starts_with("s=123 ") {
                let mut parts: Vec<String> = l.split(" | ").map(str::to_string).collect();
                let mut f: Vec<String> = parts[3].split(' ').map(str::to_string).collect();
                assert_eq!(f[6], vy.to_string());
                f[6] = (vy + 1).to_string();
                parts[3] = f.join(" ");
                parts.join(" | ") + "\n"
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_ne!(planted, text);
    let b = dir.path().join("b.trace");
    std::fs::write(&b, &planted).unwrap();

    let (code, out, _) = run(&["first-difference", s(&a), s(&b)]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out.trim(),
        format!(
            "first difference at step 123 (row 123): body 2 velocity.y: A {vy}, B {}\n\
             compared steps 0..=123 (124 rows); A holds 0..=123 so far (not read to its end), \
             B holds 0..=123 so far (not read to its end)",
            vy + 1
        )
    );
    let (code, out, _) = run(&["first-difference", s(&path), s(&b), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["step"].as_u64(), v["body"].as_u64(), v["field"].as_str()),
        (Some(123), Some(2), Some("velocity.y"))
    );

    // Unplanted: identical, whether each side is a trace or a replay.
    for (x, y) in [(&a, &a), (&path, &a), (&a, &path), (&path, &path)] {
        let (code, out, err) = run(&["first-difference", s(x), s(y)]);
        assert_eq!(
            (code, out.trim()),
            (
                0,
                "identical (steps 0..=400 compared, 401 rows; A holds 0..=400, B holds 0..=400)"
            ),
            "{err}"
        );
    }
}

#[test]
fn two_replays_that_part_are_compared_on_the_fly() {
    let dir = tempfile::tempdir().unwrap();
    let r = replay();
    let mut other = Replay::new(r.setup, None);
    for i in 0..r.step_count() {
        let mut ops = r.inputs.ops(i);
        if i == 200 {
            ops.push(Op::Gravity { g: 4 });
        }
        other.inputs.push_ops(&ops);
    }
    let a = write(dir.path(), "a.ostm", &r);
    let b = write(dir.path(), "b.ostm", &other);
    let (code, out, _) = run(&["first-difference", s(&a), s(&b)]);
    assert_eq!(code, 1);
    // Gravity is set in the input stage of step 200, so the world after it (step 201)
    // differs first in gravity: 3 against 4.
    assert_eq!(
        out.trim(),
        "first difference at step 201 (row 201): gravity: A 3, B 4\n\
         compared steps 0..=201 (202 rows); A holds 0..=400, B holds 0..=400"
    );
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn replays_that_start_at_different_steps_are_compared_by_step_number() {
    let dir = tempfile::tempdir().unwrap();
    let full = test_10000();
    let a = write(dir.path(), "a.ostm", &cut(&full, 0, 3000));
    let b = write(dir.path(), "b.ostm", &cut(&full, 417, 5000));
    // Each verifies on its own.
    for p in [&a, &b] {
        let (code, out, err) = run(&["verify", s(p)]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (code, out, err) = run(&["first-difference", s(&a), s(&b)]);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            "identical (steps 417..=3000 compared, 2584 rows; A holds 0..=3000, B holds 417..=5000)"
        ),
        "{err}"
    );
    let (code, out, _) = run(&["first-difference", s(&b), s(&a), "--json"]);
    assert_eq!(code, 0, "{out}");
    let v = json(&out);
    assert_eq!(v["identical"], true);
    assert_eq!(v["result"], "identical");
    assert_eq!(v["rows"], 2584);
    assert_eq!(
        (&v["compared"]["first"], &v["compared"]["last"]),
        (&417.into(), &3000.into())
    );
    assert_eq!(
        (&v["a_steps"]["first"], &v["a_steps"]["last"]),
        (&417.into(), &5000.into())
    );
    assert_eq!(
        (&v["b_steps"]["first"], &v["b_steps"]["last"]),
        (&0.into(), &3000.into())
    );

    // A trace starts where its rows start: steps 1000..=1100 of the same world.
    let t = dir.path().join("t.trace");
    let (code, _, err) = run(&[
        "trace",
        s(&dir.path().join("b.ostm")),
        "--from",
        "1000",
        "--to",
        "1100",
        "-o",
        s(&t),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["first-difference", s(&t), s(&a)]);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            "identical (steps 1000..=1100 compared, 101 rows; A holds 1000..=1100, B holds 0..=3000)"
        ),
        "{err}"
    );

    // A planted difference in B's input at step 1000 (its rows made to match it): found at
    // step 1001, row 1001 of A and row 584 of B.
    let mut changed = cut(&full, 417, 5000);
    let mut planted = Replay::new(changed.setup, changed.link);
    planted.start = changed.start.take();
    for i in 0..changed.step_count() {
        let mut ops = changed.inputs.ops(i);
        if i == 1000 - 417 {
            ops.push(Op::Gravity { g: 123 });
        }
        planted.inputs.push_ops(&ops);
    }
    planted.compute_hashes();
    let p = write(dir.path(), "planted.ostm", &planted);
    let (code, out, _) = run(&["first-difference", s(&a), s(&p)]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("first difference at step 1001 (A row 1001, B row 584): gravity: A "),
        "{out}"
    );
    assert!(lines[0].ends_with(", B 123"), "{out}");
    assert_eq!(
        lines[1],
        "compared steps 417..=1001 (585 rows); A holds 0..=3000, B holds 417..=5000"
    );
    let (_, out, _) = run(&["first-difference", s(&a), s(&p), "--json"]);
    let v = json(&out);
    assert_eq!(
        (
            &v["result"],
            &v["step"],
            &v["a_row"],
            &v["b_row"],
            &v["field"]
        ),
        (
            &"different".into(),
            &1001.into(),
            &1001.into(),
            &584.into(),
            &"gravity".into()
        )
    );
}

#[test]
fn a_stored_row_its_own_replay_does_not_reproduce_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let full = test_10000();
    let a = write(dir.path(), "a.ostm", &cut(&full, 0, 3000));
    // B's row at step 2000 (its row 1583) one off: the run of B still equals A there.
    let mut b = cut(&full, 417, 5000);
    let rows = b.hashes.as_mut().unwrap();
    let good = rows[1583];
    rows[1583] = good.wrapping_add(1);
    let b = write(dir.path(), "b.ostm", &b);
    let (code, out, err) = run(&["first-difference", s(&a), s(&b)]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        out.trim(),
        format!(
            "B does not reproduce its own hash row at step 2000 (row 1583 of {}): the file has {:016x}, its run computed {good:016x}\n\
             compared steps 417..=1999 (1583 rows); A holds 0..=3000, B holds 417..=5000",
            b.display(),
            good.wrapping_add(1)
        )
    );
    let (code, out, _) = run(&["first-difference", s(&b), s(&a), "--json"]);
    assert_eq!(code, 1);
    let v = json(&out);
    assert_eq!(v["result"], "stored_row_differs");
    assert_eq!(v["identical"], false);
    let r = &v["stored_row"];
    assert_eq!(
        (&r["input"], &r["file"], &r["step"], &r["row"]),
        (&"A".into(), &s(&b).into(), &2000.into(), &1583.into())
    );
    assert_eq!(r["stored"], format!("{:016x}", good.wrapping_add(1)));
    assert_eq!(r["computed"], format!("{good:016x}"));

    // A row outside the common steps (B's step 4500, past A's last step) is checked too:
    // each input is read to its end.
    let mut late = cut(&full, 417, 5000);
    late.hashes.as_mut().unwrap()[4500 - 417] ^= 1 << 63;
    let late = write(dir.path(), "late.ostm", &late);
    let (code, out, _) = run(&["first-difference", s(&a), s(&late)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("B does not reproduce its own hash row at step 4500 (row 4083 of "),
        "{out}"
    );
    assert!(
        out.contains("compared steps 417..=3000 (2584 rows)"),
        "{out}"
    );
}

/// The planted fault of the old comparison: test-10000 against itself with one stored row
/// changed came out "identical", the rows being ignored.
#[test]
fn one_changed_stored_row_is_not_identical() {
    let dir = tempfile::tempdir().unwrap();
    let full = test_10000();
    let mut one = full.clone();
    let good = full.hashes.as_ref().unwrap()[7321];
    one.hashes.as_mut().unwrap()[7321] ^= 0x40;
    let one = write(dir.path(), "one.ostm", &one);
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-10000.ostm");
    let (code, out, _) = run(&["first-difference", s(&src), s(&one)]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out.trim(),
        format!(
            "B does not reproduce its own hash row at step 7321 (row 7321 of {}): the file has {:016x}, its run computed {good:016x}\n\
             compared steps 0..=7320 (7321 rows); A holds 0..=10000, B holds 0..=10000",
            one.display(),
            good ^ 0x40
        )
    );
    // And the other way round: A is named.
    let (code, out, _) = run(&["first-difference", s(&one), s(&src), "--json"]);
    assert_eq!(code, 1, "{out}");
    let v = json(&out);
    assert_eq!(v["stored_row"]["input"], "A");
    assert_eq!(v["stored_row"]["step"], 7321);
}

#[test]
fn replays_with_no_step_in_common_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let full = test_10000();
    let a = write(dir.path(), "a.ostm", &cut(&full, 0, 300));
    let b = write(dir.path(), "b.ostm", &cut(&full, 417, 900));
    let (code, out, err) = run(&["first-difference", s(&a), s(&b)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(&format!(
            "error: no step in common: A ({}) holds 0..=300, B ({}) holds 417..=900; nothing to compare",
            a.display(),
            b.display()
        )),
        "{err}"
    );
    let (code, out, _) = run(&["first-difference", s(&b), s(&a), "--json"]);
    assert_eq!(code, 2);
    let v = json(&out);
    assert_eq!(v["result"], "no_common_step");
    assert_eq!(v["identical"], false);
    assert!(v["compared"].is_null());
    assert_eq!(
        (&v["a_steps"]["first"], &v["b_steps"]["last"]),
        (&417.into(), &300.into())
    );
    // Touching at one step is a step in common.
    let c = write(dir.path(), "c.ostm", &cut(&full, 300, 400));
    let (code, out, err) = run(&["first-difference", s(&a), s(&c)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("identical (steps 300..=300 compared, 1 row;"),
        "{out}"
    );
}

#[test]
fn cut_short_and_malformed_traces_exit_2_naming_input_line_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.ostm", &replay());
    let a = dir.path().join("a.trace");
    assert_eq!(run(&["trace", s(&path), "-o", s(&a)]).0, 0);
    let text = std::fs::read_to_string(&a).unwrap();
    let line_start = |n: usize| {
        text.split_inclusive('\n')
            .take(n - 1)
            .map(str::len)
            .sum::<usize>()
    };

    let cases: Vec<(&str, String, usize)> = vec![
        // Cut in the middle of line 100.
        ("cut.trace", text[..line_start(100) + 10].to_string(), 100),
        // Cut at a line boundary: the end line is missing.
        ("noend.trace", text[..line_start(404)].to_string(), 404),
        // A field that is not a number on line 50.
        (
            "bad.trace",
            text.split_inclusive('\n')
                .enumerate()
                .map(|(i, l)| {
                    if i == 49 {
                        l.replacen(" g=3 ", " g=x ", 1)
                    } else {
                        l.to_string()
                    }
                })
                .collect(),
            50,
        ),
    ];
    for (name, body, line) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, &body).unwrap();
        for args in [
            ["first-difference", s(&a), s(&p)],
            ["first-difference", s(&p), s(&a)],
        ] {
            let (code, out, err) = run(&args);
            assert_eq!(code, 2, "{name}: {out}{err}");
            let want = format!(
                "{}: at offset {}: line {line}:",
                p.display(),
                line_start(line)
            );
            assert!(err.contains(&want), "{name}: wanted {want:?} in {err:?}");
        }
    }
    // Not a trace or a replay at all.
    let p = dir.path().join("junk");
    std::fs::write(&p, "hello\n").unwrap();
    let (code, _, err) = run(&["first-difference", s(&a), s(&p)]);
    assert_eq!(code, 2);
    assert!(err.contains("expected a replay"), "{err}");
}

#[test]
fn trace_from_to_writes_only_those_rows() {
    let dir = tempfile::tempdir().unwrap();
    let r = replay();
    let path = write(dir.path(), "r.ostm", &r);
    let (code, out, _) = run(&["trace", s(&path), "--from", "10", "--to", "12"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2 + 3 + 1);
    assert_eq!(lines[0], "ostm-trace 1");
    assert_eq!(lines[1], "setup dims=3 bodies=5 seed=11 link=none");
    let w = &worlds(&r)[10];
    assert!(
        lines[2].starts_with(&format!("s=10 h={:016x} g=3 n=5 | ", w.hash())),
        "{}",
        lines[2]
    );
    assert_eq!(lines[5], "end rows=3");
    // The replay holds steps 0..=400: a range reaching into it is clipped, one past it is
    // refused rather than written as an empty trace.
    let (code, out, err) = run(&["trace", s(&path), "--from", "400"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("end rows=1\n"), "{out}");
    for range in [["--from", "401"], ["--from", "18446744073709551615"]] {
        let (code, out, err) = run(&["trace", s(&path), range[0], range[1]]);
        assert_eq!(code, 2, "{range:?}: {out}");
        assert!(out.is_empty(), "{range:?}: {out}");
        assert!(err.contains("steps 0..=400"), "{range:?}: {err}");
    }
    let (code, _, err) = run(&["trace", s(&path), "--from", "5", "--to", "4"]);
    assert_eq!(code, 2, "{err}");
}

// ---------------------------------------------------------------------------------------
// bundles

#[test]
fn a_verify_mismatch_bundle_replays_to_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = replay();
    r.hashes.as_mut().unwrap()[250] ^= 0x10;
    let path = write(dir.path(), "planted.ostm", &r);
    let bundle = dir.path().join("failure.ostmb");
    let (code, out, err) = run(&["verify", s(&path), "--json", "--bundle", s(&bundle)]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = &v["mismatch"];
    assert_eq!(m["step"], 250);

    let (code, out, _) = run(&["replay", s(&bundle), "--json"]);
    assert_eq!(code, 1, "the failure reproduces: {out}");
    let b: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got = &b["mismatch"];
    assert_eq!(
        (
            &got["step"],
            &got["row"],
            &got["expected"],
            &got["computed"]
        ),
        (&m["step"], &m["row"], &m["expected"], &m["actual"])
    );
    assert_eq!(b["recorded"], b["mismatch"]);
    // The bundle keeps the steps up to just past the failure, not the whole file.
    assert_eq!(b["rows"], 250 + 8 + 1);

    // Without --bundle it lands beside the file; --no-bundle writes none.
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 1);
    assert!(out.contains("bundle written: "), "{out}");
    assert!(dir.path().join("planted.ostm.ostmb").exists());
    std::fs::remove_file(dir.path().join("planted.ostm.ostmb")).unwrap();
    assert_eq!(run(&["verify", s(&path), "--no-bundle"]).0, 1);
    assert!(!dir.path().join("planted.ostm.ostmb").exists());
}

#[test]
fn every_corpus_bundle_replays_and_its_defect_stays_fixed() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/corpus");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "ostmb") {
            continue;
        }
        let (code, out, err) = run(&["replay", s(&p)]);
        assert_eq!(code, 0, "{}: {out}{err}", p.display());
        assert!(out.contains("the failure does not reproduce"), "{out}");
        n += 1;
    }
    assert!(n >= 1);
    let (_, out, _) = run(&["replay", s(&dir.join("floor-friction-skipped.ostmb"))]);
    assert!(
        out.contains("first difference at step 141: body 0 velocity.x: this build 4, writer 5"),
        "{out}"
    );
}

#[test]
fn a_bundle_cut_short_exits_2() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/corpus/floor-friction-skipped.ostmb");
    let bytes = std::fs::read(dir).unwrap();
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("cut.ostmb");
    std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
    let (code, _, err) = run(&["replay", s(&p)]);
    assert_eq!(code, 2);
    assert!(err.contains("cut.ostmb: at offset"), "{err}");
}

// ---------------------------------------------------------------------------------------
// keyframes

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/keyframe.schema.json"),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&v).expect("the schema compiles")
}

#[test]
fn keyframes_validate_against_the_schema_and_continue_exactly_like_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let r = replay();
    let path = write(dir.path(), "r.ostm", &r);
    let schema = schema();
    let all = worlds(&r);
    for step in [0u64, 1, 77, 78, 250, 399, 400] {
        let k = dir.path().join(format!("k{step}.json"));
        let (code, out, err) = run(&[
            "keyframe",
            s(&path),
            "--step",
            &step.to_string(),
            "-o",
            s(&k),
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("at step {step} ")), "{out}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&k).unwrap()).unwrap();
        let errors: Vec<String> = schema.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "step {step}: {errors:?}");
        assert_eq!(doc["tick"], step);
        assert_eq!(doc["tickRate"], 60);
        assert_eq!(
            doc["entityOrder"].as_array().unwrap().len(),
            all[step as usize].bodies.len()
        );
        // Continue from it: every row from the keyframe's tick on matches.
        let (code, out, err) = run(&["verify", s(&path), "--from-keyframe", s(&k), "--json"]);
        assert_eq!(code, 0, "step {step}: {out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["rows_checked"], 401 - step, "{out}");
        assert_eq!(v["from_step"], step, "{out}");
    }
    // The text names the steps checked, from the keyframe's tick (rows 250..=400).
    let (code, out, _) = run(&[
        "verify",
        s(&path),
        "--from-keyframe",
        s(&dir.path().join("k250.json")),
    ]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("ok: all 151 hash rows match (steps 250..400) from the keyframe "),
        "{out}"
    );
    // Planted: one body one millimetre off at step 250 is caught at row 250.
    let k = dir.path().join("k250.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&k).unwrap()).unwrap();
    let x = doc["entities"]["b1"]["body"]["pos"][0].as_i64().unwrap();
    doc["entities"]["b1"]["body"]["pos"][0] = (x + 1).into();
    let planted = dir.path().join("planted.json");
    std::fs::write(&planted, doc.to_string()).unwrap();
    assert!(schema.is_valid(&doc));
    let (code, out, _) = run(&[
        "verify",
        s(&path),
        "--from-keyframe",
        s(&planted),
        "--json",
        "--no-bundle",
    ]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mismatch"]["step"], 250);
    assert_eq!(
        v["rows_checked"], 1,
        "only the keyframe's own row was compared"
    );
}

#[test]
fn a_malformed_keyframe_is_refused_with_its_json_path_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.ostm", &replay());
    let k = dir.path().join("k.json");
    assert_eq!(
        run(&["keyframe", s(&path), "--step", "90", "-o", s(&k)]).0,
        0
    );
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&k).unwrap()).unwrap();
    type Plant = Box<dyn Fn(&mut serde_json::Value)>;
    let plants: Vec<(&str, Plant)> = vec![
        (
            "$.entities.b4.body.still: expected an integer",
            Box::new(|v| v["entities"]["b4"]["body"]["still"] = "3".into()),
        ),
        (
            "$.entities.b5: missing",
            Box::new(|v| drop(v["entities"].as_object_mut().unwrap().remove("b5"))),
        ),
        (
            "$.entityOrder[0]: expected \"b0\"",
            Box::new(|v| v["entityOrder"][0] = "b1".into()),
        ),
        (
            "$.seed: expected an integer",
            Box::new(|v| v["seed"] = "eleven".into()),
        ),
    ];
    for (want, plant) in plants {
        let mut v = good.clone();
        plant(&mut v);
        let p = dir.path().join("bad.json");
        std::fs::write(&p, v.to_string()).unwrap();
        let bundle = dir.path().join("should-not-exist.ostmb");
        let (code, _, err) = run(&[
            "verify",
            s(&path),
            "--from-keyframe",
            s(&p),
            "--bundle",
            s(&bundle),
        ]);
        assert_eq!(code, 2, "{want}");
        assert!(err.contains(want), "wanted {want:?} in {err:?}");
        assert!(!bundle.exists());
    }
}

// ---------------------------------------------------------------------------------------
// seek

#[test]
fn seek_agrees_with_a_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let r = replay();
    let path = write(dir.path(), "r.ostm", &r);
    // Before `index`: the error says which index is missing and how to write it.
    let (code, _, err) = run(&["seek", s(&path), "--step", "5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("r.ostm.seek"), "{err}");
    assert!(err.contains("ostm-viewer index"), "{err}");
    let (code, out, err) = run(&["index", s(&path), "--every", "64"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("7 keyframes every 64 steps"), "{out}");
    let all = worlds(&r);
    for step in [0u64, 63, 64, 65, 191, 333, 400] {
        let (code, out, err) = run(&[
            "seek",
            s(&path),
            "--step",
            &step.to_string(),
            "--json",
            "--trace",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let w = &all[step as usize];
        assert_eq!(v["hash"], format!("{:016x}", w.hash()));
        assert_eq!(v["keyframe_step"], step / 64 * 64);
        assert_eq!(v["matches_recording"], true);
        let mut row = String::new();
        ostm_protocol::format::trace::format_row(&mut row, w, w.hash());
        assert_eq!(v["trace"], row.trim_end());
    }
    let (code, _, err) = run(&["seek", s(&path), "--step", "401"]);
    assert_eq!(code, 2, "{err}");
}
