//! `ostm-viewer fields`, `follow`, `ghost`, `compare` and `render`, run as the real binary
//! on replays built here, checked against hand-computed values.

mod support;

use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::sim::world::{Body, Setup};
use ostm_protocol::{Dims, Link, Op, Replay, Role, World};
use serde_json::Value;
use std::path::{Path, PathBuf};
use support::*;

fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("JSON ({e}): {}\n{}", r.stdout, r.stderr))
}

/// A replay whose start snapshot holds exactly these live bodies (and one removed slot
/// after them) at step 5, with no steps: the world at step 5 is the hand-built one.
fn hand_built(
    dir: &Path,
    name: &str,
    dims: Dims,
    bodies: &[[i32; 3]],
    link: Option<Link>,
) -> PathBuf {
    let setup = Setup {
        dims,
        bodies: bodies.len() as u8 + 1,
        seed: 9,
    };
    let mut w = World::with_bodies_at(setup, link, bodies);
    w.bodies.push(Body::default());
    w.step = 5;
    let mut r = Replay::new(setup, link);
    r.start = Some(w);
    let path = dir.join(name);
    r.write_file(&path).expect("write replay");
    path
}

fn density(v: &Value, i: usize, j: usize) -> u64 {
    v["density"]["values"][j][i]
        .as_u64()
        .expect("density value")
}

fn occupancy(v: &Value, i: usize, j: usize, t: usize) -> u64 {
    v["occupancy"]["values"][j][i][t]
        .as_u64()
        .expect("occupancy value")
}

/// Sum of all values, to check that nothing else is non-zero.
fn sums(v: &Value) -> (u64, u64) {
    let d = v["density"]["values"]
        .as_array()
        .expect("rows")
        .iter()
        .flat_map(|r| r.as_array().expect("row").iter())
        .map(|x| x.as_u64().unwrap_or(0))
        .sum();
    let o = v["occupancy"]["values"]
        .as_array()
        .expect("rows")
        .iter()
        .flat_map(|r| r.as_array().expect("row").iter())
        .flat_map(|c| c.as_array().expect("cell").iter())
        .map(|x| x.as_u64().unwrap_or(0))
        .sum();
    (d, o)
}

#[test]
fn fields_of_a_hand_built_2d_world_match_the_hand_computation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let link = Link {
        role: Role::FieldsOnly,
        body: 0,
        transfer_step: 0,
    };
    // On vertex (2, 3); inside cell (0, 0); on the right wall x = 10000.
    let path = hand_built(
        dir.path(),
        "f.ostm",
        Dims::Two,
        &[[2500, 3750, 0], [1000, 250, 0], [10_000, 4000, 0]],
        Some(link),
    );
    let r = viewer(&["fields", s(&path), "--step", "5", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["step"], 5);
    assert_eq!(v["declared"], true);
    assert_eq!(v["plane"], serde_json::json!(["x", "y"]));
    assert_eq!(v["live_bodies"], 3);
    assert_eq!(density(&v, 2, 3), 1_562_500);
    // (1000, 250): tents 250 | 1000 along x, 1000 | 250 along y.
    assert_eq!(density(&v, 0, 0), 250 * 1000);
    assert_eq!(density(&v, 1, 0), 1000 * 1000);
    assert_eq!(density(&v, 0, 1), 250 * 250);
    assert_eq!(density(&v, 1, 1), 1000 * 250);
    // (10000, 4000): all on the wall column i = 8, tents 1000 | 250 along y.
    assert_eq!(density(&v, 8, 3), 1250 * 1000);
    assert_eq!(density(&v, 8, 4), 1250 * 250);
    assert_eq!(sums(&v), (3 * 1_562_500, 3));
    assert_eq!(occupancy(&v, 2, 3, 1), 1);
    assert_eq!(occupancy(&v, 0, 0, 0), 1);
    assert_eq!(occupancy(&v, 7, 3, 0), 1);
    // The text form shows the same world.
    let t = viewer(&["fields", s(&path), "--step", "5"]);
    assert_eq!(t.code, 0);
    assert!(t.stdout.contains("3 live bodies"), "{}", t.stdout);
    assert!(t
        .stdout
        .contains("fields declared by the link block (role 3, fields-only)"));
}

#[test]
fn fields_of_a_hand_built_3d_world_use_the_x_z_floor() {
    let dir = tempfile::tempdir().expect("temp dir");
    // On an edge along x (z = 5000 on vertex row 4); in the upper triangle of cell (5, 6).
    let path = hand_built(
        dir.path(),
        "f.ostm",
        Dims::Three,
        &[[1750, 9000, 5000], [6350, 4000, 8700]],
        None,
    );
    let v = json(&viewer(&["fields", s(&path), "--step", "5", "--json"]));
    assert_eq!(v["plane"], serde_json::json!(["x", "z"]));
    assert_eq!(v["declared"], false);
    assert_eq!(density(&v, 1, 4), 750 * 1250);
    assert_eq!(density(&v, 2, 4), 500 * 1250);
    assert_eq!(density(&v, 5, 6), 1150 * 50);
    assert_eq!(density(&v, 6, 7), 100 * 1200);
    assert_eq!(occupancy(&v, 1, 4, 0), 1);
    assert_eq!(occupancy(&v, 5, 6, 1), 1);
    assert_eq!(sums(&v), (2 * 1_562_500, 2));
}

#[test]
fn fields_refuse_a_step_the_replay_does_not_hold() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = hand_built(dir.path(), "f.ostm", Dims::Two, &[[1, 1, 0]], None);
    let r = viewer(&["fields", s(&path), "--step", "6"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("step 6 is outside the replay, which holds steps 5..=5"),
        "{}",
        r.stderr
    );
    let r = viewer(&["fields", s(&dir.path().join("missing.ostm")), "--step", "0"]);
    assert_eq!(r.code, 2);
}

/// A replay of `steps` empty steps (gravity as built) with a link block.
fn linked(
    dir: &Path,
    name: &str,
    seed: u32,
    link: Link,
    steps: usize,
    ops_at: Option<(usize, Op)>,
) -> PathBuf {
    let setup = Setup {
        dims: Dims::Three,
        bodies: 5,
        seed,
    };
    let mut r = Replay::new(setup, Some(link));
    for i in 0..steps {
        match ops_at {
            Some((at, op)) if at == i => r.inputs.push_ops(&[op]),
            _ => r.inputs.push_ops(&[]),
        }
    }
    let path = dir.join(name);
    r.write_file(&path).expect("write replay");
    path
}

fn sender(body: u8, step: u16) -> Link {
    Link {
        role: Role::Sender,
        body,
        transfer_step: step,
    }
}

fn receiver(body: u8, step: u16) -> Link {
    Link {
        role: Role::Receiver,
        body,
        transfer_step: step,
    }
}

#[test]
fn a_linked_pair_continues_and_the_step_numbers_agree() {
    let dir = tempfile::tempdir().expect("temp dir");
    let left = linked(dir.path(), "l.ostm", 11, sender(3, 20), 40, None);
    let right = linked(dir.path(), "r.ostm", 12, receiver(3, 20), 40, None);
    let r = viewer(&["follow", s(&left), s(&right), "--body", "3", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = json(&r);
    assert_eq!(v["continues"], true);
    assert_eq!(v["reasons"], serde_json::json!([]));
    assert_eq!(v["left"]["declaration"], "ContinuedBy");
    assert_eq!(v["left"]["key"], "tm-left");
    assert_eq!(v["right"]["declaration"], "Continues");
    assert_eq!(v["right"]["key"], "tm-right");
    // Body 3 is last seen in LEFT at step 20 where the sender's own world has it.
    let mut w = World::new(
        Setup {
            dims: Dims::Three,
            bodies: 5,
            seed: 11,
        },
        Some(sender(3, 20)),
    );
    for _ in 0..20 {
        w.step(&[]);
    }
    let t = &v["transfer"];
    assert_eq!(t["left_last_seen"]["step"], 20);
    assert_eq!(
        t["left_last_seen"]["pos"],
        serde_json::json!(w.bodies[3].pos)
    );
    assert_eq!(t["left_gone_at_step"], 21);
    // It appears in the middle of the box moving 40 mm/step along +x (docs/test-module.md).
    assert_eq!(t["right_appeared"]["step"], 21);
    assert_eq!(
        t["right_appeared"]["pos"],
        serde_json::json!([5000, 5000, 5000])
    );
    assert_eq!(t["right_appeared"]["vel"], serde_json::json!([40, 0, 0]));
    // Three steps each side by default.
    let steps: Vec<(String, u64)> = v["track"]
        .as_array()
        .expect("track")
        .iter()
        .map(|p| {
            (
                p["world"].as_str().unwrap_or("").to_string(),
                p["step"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [
        ("left", 18),
        ("left", 19),
        ("left", 20),
        ("right", 21),
        ("right", 22),
        ("right", 23),
    ]
    .iter()
    .map(|(w, s)| (w.to_string(), *s))
    .collect();
    assert_eq!(steps, want);
    let text = viewer(&["follow", s(&left), s(&right), "--body", "3"]);
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.contains(
            "step numbers agree: gone from LEFT at step 21, appeared in RIGHT at step 21"
        ),
        "{}",
        text.stdout
    );
}

#[test]
fn mismatched_pairs_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let left = linked(d, "l.ostm", 11, sender(3, 20), 40, None);
    let right = linked(d, "r.ostm", 12, receiver(3, 20), 40, None);
    let cases: Vec<(PathBuf, PathBuf, &str, &str)> = vec![
        // Wrong keys: the pair given the wrong way round.
        (
            right.clone(),
            left.clone(),
            "3",
            "LEFT is receiver (role 2, key tm-right), but the left side must be the sender",
        ),
        (
            right.clone(),
            left.clone(),
            "3",
            "RIGHT is sender (role 1, key tm-left), but the right side must be the receiver",
        ),
        // Wrong step.
        (
            left.clone(),
            linked(d, "r21.ostm", 12, receiver(3, 21), 40, None),
            "3",
            "LEFT's transfer step is 20 but RIGHT's is 21",
        ),
        // Wrong body.
        (
            left.clone(),
            linked(d, "r2.ostm", 12, receiver(2, 20), 40, None),
            "3",
            "LEFT sends body 3 but RIGHT receives body 2",
        ),
        (
            left.clone(),
            right.clone(),
            "2",
            "--body 2, but LEFT's link names body 3",
        ),
        // Not linked at all, or only declaring fields.
        (
            linked(
                d,
                "f.ostm",
                11,
                Link {
                    role: Role::FieldsOnly,
                    body: 3,
                    transfer_step: 20,
                },
                40,
                None,
            ),
            right.clone(),
            "3",
            "LEFT is fields-only (role 3)",
        ),
        // A replay that stops before the transfer.
        (
            linked(d, "short.ostm", 11, sender(3, 20), 20, None),
            right.clone(),
            "3",
            "LEFT holds steps 0..=20, so it does not run transfer step 20",
        ),
        // The body is removed by an op before the transfer: it never leaves at step 20.
        (
            linked(
                d,
                "removed.ostm",
                11,
                sender(3, 20),
                40,
                Some((7, Op::Remove { body: 3 })),
            ),
            right.clone(),
            "3",
            "body 3 was last alive in LEFT at step 7",
        ),
    ];
    for (l, r, body, reason) in cases {
        let run = viewer(&["follow", s(&l), s(&r), "--body", body]);
        assert_eq!(run.code, 1, "{reason}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stdout.contains("the pair does not continue each other"),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout.contains(reason),
            "expected {reason:?} in\n{}",
            run.stdout
        );
        let v = json(&viewer(&["follow", s(&l), s(&r), "--body", body, "--json"]));
        assert_eq!(v["continues"], false);
        assert!(v["reasons"].as_array().is_some_and(|a| a
            .iter()
            .any(|x| x.as_str().is_some_and(|x| x.contains(reason)))));
    }
    // A replay without a link block.
    let plain = d.join("plain.ostm");
    Replay::new(
        Setup {
            dims: Dims::Three,
            bodies: 5,
            seed: 1,
        },
        None,
    )
    .write_file(&plain)
    .expect("write");
    let run = viewer(&["follow", s(&plain), s(&right)]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("LEFT has no link block"));
    // Unreadable input is a failure, not a mismatch.
    std::fs::write(d.join("bad.ostm"), b"OSTM").expect("write");
    assert_eq!(
        viewer(&["follow", s(&d.join("bad.ostm")), s(&right)]).code,
        2
    );
}

/// A 2D replay of 60 steps with a removal at step 15 and a spawn at step 25.
fn run_2d(dir: &Path) -> (PathBuf, Replay) {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 6,
        seed: 5,
    };
    let mut r = Replay::new(setup, None);
    for i in 0..60 {
        let ops = match i {
            15 => vec![Op::Remove { body: 2 }],
            25 => vec![Op::Spawn {
                pos: [3000, 9000, 0],
            }],
            _ => vec![],
        };
        r.inputs.push_ops(&ops);
    }
    let path = dir.join("run.ostm");
    r.write_file(&path).expect("write replay");
    (path, r)
}

/// `ostm-viewer ghost RUN --from FROM --frames FRAMES --offset OFFSET -o OUT EXTRA...`.
fn run_ghost(
    run: &Path,
    from: &str,
    frames: &str,
    offset: &str,
    out: &Path,
    extra: &[&str],
) -> Run {
    let args = [
        "ghost",
        s(run),
        "--from",
        from,
        "--frames",
        frames,
        "--offset",
        offset,
        "-o",
        s(out),
    ];
    viewer(&[&args[..], extra].concat())
}

#[test]
fn a_ghost_holds_the_run_moved_right_and_compares_clean() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, replay) = run_2d(dir.path());
    let out = dir.path().join("g.ospc");
    let g = run_ghost(&run, "10", "20", "400,0", &out, &["--json"]);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let v = json(&g);
    assert_eq!(
        (
            v["start_step"].as_u64(),
            v["last_step"].as_u64(),
            v["bodies"].as_u64()
        ),
        (Some(10), Some(29), Some(7))
    );
    let cache = PoseCache::read_file(&out).expect("the ghost reads back");
    let mut w = replay.start_world();
    for i in 0..30usize {
        if i >= 10 {
            let frame = cache.frame_at_step(i as u64).expect("frame");
            for (b, pose) in frame.iter().enumerate() {
                match w.bodies.get(b).filter(|b| b.alive) {
                    Some(body) => assert_eq!(
                        (pose.present, pose.pos),
                        (true, [body.pos[0] + 400, body.pos[1], 0]),
                        "step {i} body {b}"
                    ),
                    None => assert!(!pose.present, "step {i} body {b}"),
                }
            }
        }
        w.step(&replay.inputs.ops(i));
    }
    let c = viewer(&["compare", s(&run), s(&out), "--offset", "400,0", "--json"]);
    assert_eq!(c.code, 0, "{}{}", c.stdout, c.stderr);
    let v = json(&c);
    assert_eq!(v["within"], true);
    assert_eq!(v["max_deviation"], 0);
    assert_eq!(v["frames"].as_array().map(Vec::len), Some(20));
}

#[test]
fn compare_reports_the_first_frame_and_body_beyond_the_tolerance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, _) = run_2d(dir.path());
    let out = dir.path().join("g.ospc");
    assert_eq!(run_ghost(&run, "10", "20", "400,0", &out, &[]).code, 0);
    // The wrong offset: every body is 1 mm off on y from frame 0, body 0.
    let c = viewer(&["compare", s(&run), s(&out), "--offset", "400,1", "--json"]);
    assert_eq!(c.code, 1);
    let v = json(&c);
    assert_eq!(
        v["first_beyond"],
        serde_json::json!({"frame": 0, "step": 10, "body": 0, "deviation": 1, "presence_mismatch": false})
    );
    assert_eq!(
        viewer(&[
            "compare",
            s(&run),
            s(&out),
            "--offset",
            "400,1",
            "--tolerance",
            "1"
        ])
        .code,
        0
    );
    // Planted fault: frame 5 body 3's x moved by 7 mm in the file.
    let mut bytes = std::fs::read(&out).expect("read");
    let at = 20 + (5 * 7 + 3) * 13 + 1;
    let x = i32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) + 7;
    bytes[at..at + 4].copy_from_slice(&x.to_le_bytes());
    std::fs::write(&out, &bytes).expect("write");
    let c = viewer(&["compare", s(&run), s(&out), "--offset", "400,0"]);
    assert_eq!(c.code, 1);
    assert!(
        c.stdout
            .contains("first beyond tolerance: frame 5 (step 15), body 3 deviates 7 mm"),
        "{}",
        c.stdout
    );
    assert_eq!(
        viewer(&[
            "compare",
            s(&run),
            s(&out),
            "--offset",
            "400,0",
            "--tolerance",
            "7"
        ])
        .code,
        0
    );
    // Planted fault: body 2 (removed during step 15) claimed present at step 16 (frame 6).
    let at = 20 + (6 * 7 + 2) * 13;
    bytes[at] = 1;
    bytes[at + 1..at + 5].copy_from_slice(&100i32.to_le_bytes());
    std::fs::write(&out, &bytes).expect("write");
    let v = json(&viewer(&[
        "compare",
        s(&run),
        s(&out),
        "--offset",
        "400,0",
        "--tolerance",
        "7",
        "--json",
    ]));
    assert_eq!(
        v["first_beyond"],
        serde_json::json!({"frame": 6, "step": 16, "body": 2, "deviation": null, "presence_mismatch": true})
    );
}

#[test]
fn ghost_and_compare_refuse_bad_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, _) = run_2d(dir.path());
    let out = dir.path().join("g.ospc");
    let r = run_ghost(&run, "50", "20", "400,0", &out, &[]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("the run covers steps 0..=60, but frames 50..=69 were asked for"),
        "{}",
        r.stderr
    );
    assert!(!out.exists());
    assert_eq!(run_ghost(&run, "0", "2", "1,2,3", &out, &[]).code, 2);
    assert_eq!(run_ghost(&run, "0", "0", "1,2", &out, &[]).code, 2);
    // A cache that is cut short: refused with its offset.
    assert_eq!(run_ghost(&run, "0", "2", "-5,0", &out, &[]).code, 0);
    let bytes = std::fs::read(&out).expect("read");
    std::fs::write(&out, &bytes[..bytes.len() - 1]).expect("write");
    let r = viewer(&["compare", s(&run), s(&out), "--offset", "-5,0"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains(
            "at offset 20: expected 156 bytes of poses (2 frames x 6 bodies x 13), found 155 bytes"
        ),
        "{}",
        r.stderr
    );
    // A cache reaching past the run's last step.
    let mut c = PoseCache::new(Dims::Two, 60, 1);
    c.push_frame(&[]);
    c.push_frame(&[]);
    c.write_file(&out).expect("write");
    let r = viewer(&["compare", s(&run), s(&out), "--offset", "0,0"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("covers steps 60..=61"), "{}", r.stderr);
    // A 3D cache against a 2D run.
    PoseCache::new(Dims::Three, 0, 1)
        .write_file(&out)
        .expect("write");
    let mut c = PoseCache::new(Dims::Three, 0, 1);
    c.push_frame(&[]);
    c.write_file(&out).expect("write");
    assert_eq!(
        viewer(&["compare", s(&run), s(&out), "--offset", "0,0"]).code,
        2
    );
}

#[test]
fn render_writes_svg_and_png_with_bodies_ghosts_and_overlay() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, replay) = run_2d(dir.path());
    let ghost = dir.path().join("g.ospc");
    assert_eq!(run_ghost(&run, "10", "20", "400,0", &ghost, &[]).code, 0);
    let svg = dir.path().join("f.svg");
    let r = viewer(&[
        "render",
        s(&run),
        "--step",
        "20",
        "--ghost",
        s(&ghost),
        "--overlay",
        "occupancy",
        "-o",
        s(&svg),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&svg).expect("svg");
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    let world = {
        let mut w = replay.start_world();
        for i in 0..20 {
            w.step(&replay.inputs.ops(i));
        }
        w
    };
    let indices = |class: &str| -> Vec<usize> {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(class))
            .filter_map(|n| n.attribute("data-index")?.parse().ok())
            .collect()
    };
    let alive: Vec<usize> = world
        .bodies
        .iter()
        .enumerate()
        .filter(|(_, b)| b.alive)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(indices("body"), alive);
    assert_eq!(indices("ghost"), alive);
    assert_eq!(
        doc.descendants()
            .filter(|n| n.attribute("class") == Some("triangle"))
            .count(),
        128
    );
    // PNG: the signature and the 1040 x 940 size in the IHDR chunk.
    let png = dir.path().join("f.png");
    assert_eq!(
        viewer(&["render", s(&run), "--step", "20", "-o", s(&png)]).code,
        0
    );
    let bytes = std::fs::read(&png).expect("png");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(
        u32::from_be_bytes(bytes[16..20].try_into().expect("width")),
        1040
    );
    assert_eq!(
        u32::from_be_bytes(bytes[20..24].try_into().expect("height")),
        940
    );
    // A ghost without a frame for the step still renders, and says so.
    let r = viewer(&[
        "render",
        s(&run),
        "--step",
        "40",
        "--ghost",
        s(&ghost),
        "-o",
        s(&svg),
    ]);
    assert_eq!(r.code, 0);
    assert!(
        r.stderr.contains("has no frame for step 40"),
        "{}",
        r.stderr
    );
    // Bad output names and steps are refused.
    assert_eq!(
        viewer(&[
            "render",
            s(&run),
            "--step",
            "20",
            "-o",
            s(&dir.path().join("f.gif"))
        ])
        .code,
        2
    );
    assert_eq!(
        viewer(&["render", s(&run), "--step", "61", "-o", s(&svg)]).code,
        2
    );
}
