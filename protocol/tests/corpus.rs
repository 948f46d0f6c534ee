//! The failure-bundle corpus: each bundle in `fixtures/corpus/` is rebuilt here from its
//! recipe and must match the committed bytes, and must replay clean on this build.
//!
//! Regenerate with `OSTM_WRITE_CORPUS=1 cargo test -p ostm-protocol --test corpus`.

use ostm_protocol::format::bundle::Bundle;
use ostm_protocol::sim::world::{move_axis, Dims, Setup, World};
use ostm_protocol::{Op, Replay};
use std::path::PathBuf;

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/corpus")
        .join(name)
}

/// A planted defect: a step whose move stage forgets floor friction.
fn step_without_friction(w: &mut World, ops: &[Op]) {
    w.apply_input(ops);
    w.apply_gravity();
    let axes = w.dims().axes();
    for b in w.bodies.iter_mut().filter(|b| b.alive) {
        for a in 0..axes {
            let (p, v) = move_axis(b.pos[a], b.vel[a]);
            b.pos[a] = p;
            b.vel[a] = v;
        }
    }
    w.bookkeeping();
}

/// The replay the recording side made: 3D, 4 bodies, seed 2024, 400 steps, a sideways
/// impulse on body 2 every 50 steps; hash rows from the real step.
fn recorded() -> Replay {
    let mut r = Replay::new(
        Setup {
            dims: Dims::Three,
            bodies: 4,
            seed: 2024,
        },
        None,
    );
    for i in 0..400 {
        let ops = if i % 50 == 0 {
            vec![Op::Impulse {
                body: 2,
                d: [60, 0, -30],
            }]
        } else {
            vec![]
        };
        r.inputs.push_ops(&ops);
    }
    r.compute_hashes();
    r
}

/// What a writer build without floor friction writes when it verifies `recorded()`.
fn floor_friction_skipped() -> Bundle {
    let r = recorded();
    let rows = r.hashes.as_ref().unwrap();
    let mut w = r.start_world();
    let mut row = 0;
    while w.hash() == rows[row] {
        step_without_friction(&mut w, &r.inputs.ops(row));
        row += 1;
    }
    Bundle::from_mismatch(
        &r,
        row,
        w.hash(),
        Some(w.clone()),
        None,
        "planted defect: the move stage skipped floor friction (v * 7 / 8 for horizontal velocity on the floor)",
    )
    .unwrap()
}

#[test]
fn floor_friction_skipped_is_rebuilt_byte_for_byte_and_replays_clean() {
    let b = floor_friction_skipped();
    let path = corpus("floor-friction-skipped.ostmb");
    if std::env::var_os("OSTM_WRITE_CORPUS").is_some() {
        b.write_file(&path).unwrap();
    }
    let committed = std::fs::read(&path).expect("fixtures/corpus/floor-friction-skipped.ostmb");
    assert_eq!(
        committed,
        b.to_bytes(),
        "the committed bundle is not what its recipe makes"
    );

    let report = Bundle::from_bytes("corpus", &committed).unwrap().check();
    // This build has friction: every recorded row matches, so the defect stays fixed.
    assert_eq!(report.mismatch, None);
    // And the writer's world differs exactly where friction acts: a horizontal velocity
    // of a body on the floor, this build's value being the writer's times 7/8, truncated.
    let d = report
        .difference
        .expect("a difference against the writer's world");
    let writer = b.writer.as_ref().unwrap();
    let body = d.diff.body.unwrap();
    assert_eq!(writer.bodies[body].pos[1], 0, "body {body} is on the floor");
    assert!(
        d.diff.field == "velocity.x" || d.diff.field == "velocity.z",
        "{}",
        d.diff.field
    );
    assert_eq!(d.diff.a, d.diff.b * 7 / 8);
    assert_ne!(d.diff.a, d.diff.b);
}

#[test]
fn every_corpus_bundle_replays_clean_on_this_build() {
    let dir = corpus("");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "ostmb") {
            let report = Bundle::read_file(&path).unwrap().check();
            assert_eq!(report.mismatch, None, "{} reproduces again", path.display());
            n += 1;
        }
    }
    assert!(n >= 1, "the corpus is empty");
}
