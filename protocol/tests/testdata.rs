//! The committed `testdata/` is exactly what the generator makes now, and the generated
//! replays hold what `docs/testdata.md` promises (every op kind, the cap, the extremes …).

use ostm_protocol::format::ostm::{FLAG_HASHES, FLAG_LINK, FLAG_START_SNAPSHOT};
use ostm_protocol::sim::scenario::LIVELY_FROM;
use ostm_protocol::sim::testdata::{self, specs};
use ostm_protocol::sim::world::{Dims, BOX_MM, DEFAULT_GRAVITY, MAX_BODIES};
use ostm_protocol::{Op, OpKind, Replay, Role, Verdict, World};
use std::path::PathBuf;

fn testdata_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn read(name: &str) -> Replay {
    let path = testdata_dir().join(name);
    Replay::read_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// `None` if equal, else a sentence naming the first differing offset.
fn compare(name: &str, committed: &[u8], generated: &[u8]) -> Option<String> {
    let first = committed.iter().zip(generated).position(|(a, b)| a != b);
    match first {
        Some(at) => Some(format!(
            "testdata/{name}: differs from the generator at offset {at} (committed 0x{:02x}, generated 0x{:02x})",
            committed[at], generated[at]
        )),
        None if committed.len() != generated.len() => Some(format!(
            "testdata/{name}: differs from the generator at offset {}: committed {} bytes, generated {} bytes",
            committed.len().min(generated.len()),
            committed.len(),
            generated.len()
        )),
        None => None,
    }
}

#[test]
fn committed_testdata_equals_the_generator() {
    let dir = testdata_dir();
    let mut problems = Vec::new();
    for (name, generated) in testdata::files() {
        match std::fs::read(dir.join(&name)) {
            Ok(committed) => problems.extend(compare(&name, &committed, &generated)),
            Err(e) => problems.push(format!("testdata/{name}: cannot read: {e}")),
        }
    }
    // Every committed replay must be one the generator makes (no stale leftovers).
    let generated: Vec<&str> = specs().iter().map(|s| s.name).collect();
    for entry in std::fs::read_dir(&dir).expect("testdata/ exists") {
        let name = entry
            .expect("readable dir entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        if name.ends_with(".ostm") && !generated.contains(&name.as_str()) {
            problems.push(format!(
                "testdata/{name}: committed but not made by the generator"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\nrun scripts/gen-testdata (and scripts/write-golden) if the change is intended",
        problems.join("\n")
    );
}

#[test]
fn the_comparison_names_a_planted_byte() {
    let (name, generated) = testdata::files().swap_remove(0);
    let mut planted = generated.clone();
    planted[1000] ^= 1;
    let report = compare(&name, &planted, &generated).expect("a changed byte is found");
    assert!(
        report.contains("testdata/test-10000.ostm") && report.contains("offset 1000"),
        "{report}"
    );
    let report = compare(&name, &generated[..500], &generated).expect("a short file is found");
    assert!(report.contains("offset 500"), "{report}");
    assert_eq!(compare(&name, &generated, &generated), None);
}

#[test]
fn generating_twice_gives_identical_bytes() {
    assert_eq!(testdata::files(), testdata::files());
}

#[test]
fn every_file_has_the_promised_header_and_its_hash_rows_verify() {
    for spec in specs() {
        let r = read(spec.name);
        assert_eq!(
            r.flags() & FLAG_HASHES,
            FLAG_HASHES,
            "{}: hash rows",
            spec.name
        );
        assert_eq!(r.setup, spec.setup, "{}", spec.name);
        assert_eq!(r.step_count(), spec.steps as usize, "{}", spec.name);
        match r.verify(|_| {}) {
            Verdict::Match { rows_checked, .. } => assert_eq!(rows_checked, spec.steps as u64 + 1),
            v => panic!("{}: {v:?}", spec.name),
        }
    }
    let big = read("test-10000.ostm");
    assert_eq!(
        (big.setup.dims, big.setup.bodies, big.step_count()),
        (Dims::Three, 24, 10_000)
    );
    let flat = read("test-2d-600.ostm");
    assert_eq!((flat.setup.dims, flat.step_count()), (Dims::Two, 600));
    for (name, dims) in [
        ("test-field-2d.ostm", Dims::Two),
        ("test-field-3d.ostm", Dims::Three),
    ] {
        let r = read(name);
        assert_eq!(r.setup.dims, dims, "{name}");
        assert_eq!(r.flags() & FLAG_LINK, FLAG_LINK, "{name}");
        assert_eq!(r.link.map(|l| l.role), Some(Role::FieldsOnly), "{name}");
    }
    let snap = read("test-start-snapshot.ostm");
    assert_eq!(snap.flags() & FLAG_START_SNAPSHOT, FLAG_START_SNAPSHOT);
    assert_eq!(snap.start_step(), testdata::START_SNAPSHOT_STEP);
    let start = snap.start.as_ref().expect("start snapshot");
    assert_eq!(
        snap.hashes.as_ref().expect("rows")[0],
        start.hash(),
        "row 0 is the snapshot's hash"
    );
}

#[test]
fn the_linked_pair_moves_body_3_at_step_150() {
    let left = read("test-link-left.ostm");
    let right = read("test-link-right.ostm");
    for (r, role) in [(&left, Role::Sender), (&right, Role::Receiver)] {
        let l = r.link.expect("link block");
        assert_eq!((l.role, l.body, l.transfer_step), (role, 3, 150));
    }
    // Run both; look at body 3 just before and just after step 150.
    let state = |r: &Replay| {
        let mut w = r.start_world();
        let mut before = None;
        for i in 0..r.step_count() {
            if w.step == 150 {
                before = Some(w.bodies[3]);
            }
            w.step(&r.inputs.ops(i));
            if w.step == 151 {
                return (before.expect("seen"), w.bodies[3]);
            }
        }
        panic!("replay shorter than 151 steps");
    };
    let (l_before, l_after) = state(&left);
    assert!(
        l_before.alive && !l_after.alive,
        "left: {l_before:?} -> {l_after:?}"
    );
    let (r_before, r_after) = state(&right);
    assert!(
        !r_before.alive && r_after.alive,
        "right: {r_before:?} -> {r_after:?}"
    );
    assert_eq!(r_after.pos, [5000, 5000, 5000]);
}

/// What a run of a replay exercised.
#[derive(Default, Debug)]
struct Seen {
    kinds: [bool; 5],
    max_slots: usize,
    spawn_at_cap: bool,
    gravity_zero: bool,
    gravity_negative: bool,
    gravity_back_to_default_after_change: bool,
    teleport_outside: bool,
    op_on_removed: bool,
    op_out_of_range: bool,
    remove_live: bool,
    /// i32::MIN / i32::MAX seen in: impulse dx dy dz, teleport x y z, gravity, spawn x y z.
    min: [bool; 10],
    max: [bool; 10],
    body_at_rest: bool,
}

fn exercise(r: &Replay) -> Seen {
    let mut seen = Seen::default();
    let mut w: World = r.start_world();
    let mut changed_gravity = false;
    for i in 0..r.step_count() {
        let ops = r.inputs.ops(i);
        for op in &ops {
            seen.kinds[op.kind() as usize - 1] = true;
            let mut fields = |first: usize, v: &[i32]| {
                for (j, x) in v.iter().enumerate() {
                    seen.min[first + j] |= *x == i32::MIN;
                    seen.max[first + j] |= *x == i32::MAX;
                }
            };
            match *op {
                Op::Impulse { d, .. } => fields(0, &d),
                Op::Teleport { pos, .. } => fields(3, &pos),
                Op::Gravity { g } => fields(6, &[g]),
                Op::Spawn { pos } => fields(7, &pos),
                Op::Remove { .. } => {}
            }
            let body = match *op {
                Op::Impulse { body, .. } | Op::Teleport { body, .. } | Op::Remove { body } => {
                    Some(body as usize)
                }
                _ => None,
            };
            if let Some(b) = body {
                match w.bodies.get(b) {
                    None => seen.op_out_of_range = true,
                    Some(x) if !x.alive => seen.op_on_removed = true,
                    Some(_) => seen.remove_live |= op.kind() == OpKind::Remove,
                }
            }
            if let Op::Teleport { pos, .. } = *op {
                seen.teleport_outside |= pos.iter().any(|&c| !(0..=BOX_MM).contains(&c));
            }
            if let Op::Gravity { g } = *op {
                seen.gravity_zero |= g == 0;
                seen.gravity_negative |= g < 0;
                seen.gravity_back_to_default_after_change |=
                    g == DEFAULT_GRAVITY && changed_gravity;
                changed_gravity |= g != DEFAULT_GRAVITY;
            }
            if let Op::Spawn { .. } = *op {
                seen.spawn_at_cap |= w.bodies.len() == MAX_BODIES;
            }
            // Apply op by op, so the next op sees the world it acts on.
            w.apply_input(std::slice::from_ref(op));
        }
        w.apply_gravity();
        w.move_bodies();
        w.bookkeeping();
        seen.max_slots = seen.max_slots.max(w.bodies.len());
        seen.body_at_rest |= w.bodies.iter().any(|b| b.alive && b.still >= 1);
    }
    seen
}

#[test]
fn the_long_replays_exercise_every_op_and_every_edge() {
    for name in ["test-10000.ostm", "test-2d-600.ostm"] {
        let r = read(name);
        let s = exercise(&r);
        assert_eq!(s.kinds, [true; 5], "{name}: every op kind");
        assert!(
            r.setup.bodies < 64 && s.max_slots == MAX_BODIES,
            "{name}: spawns fill to 64: {s:?}"
        );
        assert!(s.spawn_at_cap, "{name}: a spawn at the cap");
        assert!(
            s.gravity_zero && s.gravity_negative && s.gravity_back_to_default_after_change,
            "{name}: {s:?}"
        );
        assert!(s.teleport_outside, "{name}: teleport outside the box");
        assert!(
            s.op_on_removed && s.op_out_of_range && s.remove_live,
            "{name}: {s:?}"
        );
        assert_eq!(s.min, [true; 10], "{name}: i32::MIN in every i32 field");
        assert_eq!(s.max, [true; 10], "{name}: i32::MAX in every i32 field");
        assert!(s.body_at_rest, "{name}: a body comes to rest");
    }
}

#[test]
fn test_10000_ends_quiet_with_bodies_at_rest() {
    let r = read("test-10000.ostm");
    let last_ops = (r.step_count() - 1000..r.step_count())
        .filter(|&i| !r.inputs.get(i).is_empty())
        .count();
    assert_eq!(last_ops, 0, "the last 1000 steps are quiet");
    let mut w = r.start_world();
    for i in 0..r.step_count() {
        w.step(&r.inputs.ops(i));
    }
    let resting = w
        .bodies
        .iter()
        .filter(|b| b.alive && b.still >= 100)
        .count();
    assert!(
        resting * 2 > w.alive_count(),
        "most live bodies rest at the end: {resting} of {}",
        w.alive_count()
    );
}

#[test]
fn test_lively_crosses_into_the_lively_phase() {
    let lively = read("test-lively.ostm");
    let long = read("test-10000.ostm");
    assert_eq!(lively.start_step(), testdata::LIVELY_START_STEP);
    let rows = lively.hashes.as_ref().expect("rows");
    // The same world: its row at step 10 000 is test-10000.ostm's last row.
    let at = (LIVELY_FROM - testdata::LIVELY_START_STEP) as usize;
    assert_eq!(
        rows[at],
        *long.hashes.as_ref().expect("rows").last().unwrap()
    );
    for i in 0..lively.step_count() {
        let step = testdata::LIVELY_START_STEP + i as u64;
        let ops = lively.inputs.ops(i);
        let want = match step.checked_sub(LIVELY_FROM) {
            None => 0, // the fifth cycle's quiet end
            Some(m) => (m % 2000 == 0) as usize + (m % 4 == 0) as usize,
        };
        assert_eq!(ops.len(), want, "step {step}: {ops:?}");
        for op in &ops {
            match *op {
                Op::Gravity { g } => assert_eq!(g, DEFAULT_GRAVITY, "step {step}"),
                Op::Impulse { d, .. } => {
                    assert!(
                        (-80..=80).contains(&d[0]) && (-80..=80).contains(&d[2]),
                        "{d:?}"
                    );
                    assert!((40..=160).contains(&d[1]), "step {step}: {d:?}");
                }
                _ => panic!("step {step}: {op:?} in the lively phase"),
            }
        }
    }
}
