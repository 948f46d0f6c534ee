//! Save/restore, proven: a world rebuilt with `World::from_snapshot` from the snapshot
//! bytes taken at a step chosen from the replay's own run continues exactly as the
//! uninterrupted run, matching every later hash row. A planted one-unit velocity change
//! after a restore is caught, so the check cannot pass vacuously.

use ostm_protocol::sim::testdata::specs;
use ostm_protocol::sim::world::BOX_MM;
use ostm_protocol::{Op, Replay, Role, Stage, World};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn read(name: &str) -> Replay {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name);
    Replay::read_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Steps (world step numbers, before the step runs) at which to snapshot, each with why.
/// Events are found in the replay's own run; the snapshot is taken just *before* the
/// event's step, so the restored world must reproduce the event itself.
fn restore_points(r: &Replay) -> BTreeMap<u64, Vec<&'static str>> {
    let mut found: Vec<(&'static str, u64)> = Vec::new();
    let seen = |what: &'static str, step: u64, found: &mut Vec<(&'static str, u64)>| {
        if !found.iter().any(|(w, _)| *w == what) {
            found.push((what, step));
        }
    };
    let mut w = r.start_world();
    let start = w.step;
    let n = r.step_count() as u64;
    for i in 0..r.step_count() {
        let ops = r.inputs.ops(i);
        let step = w.step;
        // First wall bounce: a live body whose move would leave the box on some axis.
        let mut probe = w.clone();
        probe.run_stage(Stage::ApplyInput, &ops);
        probe.run_stage(Stage::Gravity, &ops);
        let axes = probe.dims().axes();
        if probe.bodies.iter().filter(|b| b.alive).any(|b| {
            (0..axes).any(|a| !(0..=BOX_MM as i64).contains(&(b.pos[a] as i64 + b.vel[a] as i64)))
        }) {
            seen("first wall bounce", step, &mut found);
        }
        if ops.iter().any(|op| match *op {
            Op::Remove { body } => w.bodies.get(body as usize).is_some_and(|b| b.alive),
            _ => false,
        }) {
            seen("first remove", step, &mut found);
        }
        let slots = w.bodies.len();
        w.step(&ops);
        if w.bodies.len() > slots {
            seen("first spawn", step, &mut found);
        }
        if w.bodies.iter().any(|b| b.alive && b.still >= 1) {
            seen("first body at rest", step, &mut found);
        }
        if let Some(l) = w.link() {
            if l.role != Role::FieldsOnly && step == l.transfer_step as u64 {
                seen("link transfer", step, &mut found);
            }
        }
    }
    found.push(("a third of the way", start + n / 3));
    found.push(("two thirds of the way", start + 2 * n / 3));
    let mut points: BTreeMap<u64, Vec<&'static str>> = BTreeMap::new();
    for (what, step) in found {
        points.entry(step).or_default().push(what);
    }
    points
}

/// Runs `r` to world step `at`, snapshots, rebuilds from the bytes, applies `plant` to the
/// rebuilt world, runs on, and compares the restored world's hash with every hash row from
/// `at` to the end. `Err` names the first step that differs.
fn restore_and_check(r: &Replay, at: u64, plant: impl FnOnce(&mut World)) -> Result<usize, String> {
    let rows = r.hashes.as_ref().expect("hash rows");
    let mut w = r.start_world();
    let first = (at - w.step) as usize;
    for i in 0..first {
        w.step(&r.inputs.ops(i));
    }
    let bytes = w.snapshot();
    let mut restored =
        World::from_snapshot(r.setup, r.link, "snapshot", &bytes, 0).map_err(|e| e.to_string())?;
    plant(&mut restored);
    let mut checked = 0;
    for (i, &row) in rows.iter().enumerate().skip(first) {
        if i > first {
            restored.step(&r.inputs.ops(i - 1));
        }
        let actual = restored.hash();
        if actual != row {
            return Err(format!(
                "restored at step {at}: step {} hash {actual:016x}, uninterrupted run {row:016x}",
                restored.step
            ));
        }
        checked += 1;
    }
    Ok(checked)
}

#[test]
fn every_replay_restores_at_steps_from_its_own_run() {
    for spec in specs() {
        let r = read(spec.name);
        let points = restore_points(&r);
        eprintln!("{}: restore points {points:?}", spec.name);
        let reasons: Vec<&str> = points.values().flatten().copied().collect();
        for needed in [
            "first wall bounce",
            "first body at rest",
            "first spawn",
            "first remove",
            "a third of the way",
            "two thirds of the way",
        ] {
            // A replay that starts with every slot taken (the start-snapshot one) cannot spawn.
            let full = r.start_world().bodies.len() == ostm_protocol::sim::world::MAX_BODIES;
            if needed == "first spawn" && full {
                continue;
            }
            // The lively one runs quiet steps, then the lively phase: it removes nothing.
            if needed == "first remove" && spec.name == "test-lively.ostm" {
                continue;
            }
            assert!(
                reasons.contains(&needed),
                "{}: no {needed} in its run",
                spec.name
            );
        }
        for (&at, why) in &points {
            let checked = restore_and_check(&r, at, |_| {})
                .unwrap_or_else(|e| panic!("{}: {why:?}: {e}", spec.name));
            assert_eq!(
                checked as u64,
                r.start_step() + r.step_count() as u64 - at + 1
            );
        }
    }
}

#[test]
fn a_planted_one_unit_velocity_change_after_restore_is_caught() {
    for spec in specs() {
        let r = read(spec.name);
        for (&at, why) in &restore_points(&r) {
            let planted = restore_and_check(&r, at, |w| {
                if let Some(b) = w.bodies.iter_mut().find(|b| b.alive) {
                    b.vel[0] += 1;
                }
            });
            let err = planted.expect_err("a planted velocity change must be caught");
            assert!(
                err.contains(&format!("restored at step {at}")),
                "{}: {why:?}: {err}",
                spec.name
            );
        }
    }
}

#[test]
fn a_planted_change_is_caught_by_later_rows_too() {
    // Not only by the row at the restore step: compare from the step after it.
    let r = read("test-10000.ostm");
    let rows = r.hashes.as_ref().expect("rows");
    let at = 3000;
    let mut w = r.start_world();
    for i in 0..at {
        w.step(&r.inputs.ops(i));
    }
    let mut restored =
        World::from_snapshot(r.setup, r.link, "snapshot", &w.snapshot(), 0).expect("valid");
    let b = restored
        .bodies
        .iter_mut()
        .find(|b| b.alive && b.pos[0] > 100 && b.pos[0] < 9900)
        .expect("a live body");
    b.vel[0] += 1;
    let mut differing = 0;
    for i in at..r.step_count() {
        restored.step(&r.inputs.ops(i));
        differing += (restored.hash() != rows[i + 1]) as usize;
    }
    assert!(
        differing > 0,
        "the planted change never showed in a later row"
    );
}
