//! `World::step`'s vector kernels (stages 2 to 4 sixteen bodies at a time, with AVX-512 in
//! 32-bit lanes or with AVX2 in 16-bit lanes, `protocol/src/sim/world/simd/`) against the
//! reference: `World::step_scalar`, the body by body pass, and the four stages run one after
//! another (`World::run_stage`). Every kernel this CPU has (`Kernel::available`, run through
//! `World::step_with`) must give the same world as both after every step of random worlds
//! whose fields take the values where a kernel decides something: at and next to the walls,
//! the settle speed (|v| 10 and 11), the edge of the kernels' tame range (|v| and |g| 10 000
//! and 10 001, positions just outside the box), the still count's saturation, any i32
//! (hostile snapshots), dead slots holding fields, a 2D world's z, and every body count
//! 1..=64 (chunks of 16, 8 and the rest).
//!
//! After every step the world hash, which reads the snapshot where it lies in memory (the
//! header kept right before the bodies, `protocol/src/sim/world/bodies.rs`), must equal
//! xxhash-rust's one-shot XXH3-64 of the snapshot bytes; the stages leave the header
//! stale after stage 1 changes gravity, and a third test edits the world's fields by hand,
//! so both the in-place path and the path that puts the bytes together are held to it.
//!
//! On a CPU without AVX2 `step` is `step_scalar` and the first test only compares it with
//! the stages; a CPU without AVX-512F tests the AVX2 kernel only (the tests print which
//! kernels ran). valgrind's CPU has AVX2 and no AVX-512, so on any machine `valgrind
//! target/release/deps/kernel-*` runs these tests as a CPU without AVX-512F would. The
//! second test shows that the random worlds reach each of those cases many times, so that
//! a kernel wrong in any one of them would fail the first.

use ostm_protocol::sim::op::Op;
use ostm_protocol::sim::world::{Body, Dims, Kernel, Setup, Stage, World, BOX_MM};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// A position inside the kernel's range (`0..=L`), often at or next to a wall.
fn position() -> impl Strategy<Value = i32> {
    prop_oneof![
        4 => 0..=BOX_MM,
        2 => 0..=20,
        2 => BOX_MM - 20..=BOX_MM,
    ]
}

/// A velocity inside the kernel's range (`|v| <= L`), often about the settle speed.
fn velocity() -> impl Strategy<Value = i32> {
    prop_oneof![
        4 => -40..=40,
        3 => -12..=12,
        1 => BOX_MM - 2..=BOX_MM,
        1 => -BOX_MM..=-BOX_MM + 2,
    ]
}

/// A position the kernel leaves to the reference: just outside the box, or any i32.
fn far_position() -> impl Strategy<Value = i32> {
    prop_oneof![-3..=-1, BOX_MM + 1..=BOX_MM + 3, any::<i32>()]
}

/// A velocity the kernel leaves to the reference: just faster than L, or any i32.
fn far_velocity() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(BOX_MM + 1),
        Just(-BOX_MM - 1),
        Just(i32::MIN),
        any::<i32>()
    ]
}

fn still() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u32::MAX - 1),
        Just(u32::MAX),
        any::<u32>()
    ]
}

/// A body in the kernel's range: anywhere, or at rest on the floor (where most bodies of a
/// long run end).
fn body() -> impl Strategy<Value = Body> {
    let moving = (
        prop::bool::weighted(0.9),
        still(),
        [position(), position(), position()],
        [velocity(), velocity(), velocity()],
    )
        .prop_map(|(alive, still, pos, vel)| Body::new(alive, still, pos, vel));
    let resting = (still(), position(), position())
        .prop_map(|(still, x, z)| Body::new(true, still, [x, 0, z], [0; 3]));
    prop_oneof![3 => moving, 1 => resting]
}

/// A body with one field or more outside the kernel's range (a hostile snapshot's, or one
/// after a teleport or an impulse far out).
fn far_body() -> impl Strategy<Value = Body> {
    (
        body(),
        0usize..6,
        far_position(),
        far_velocity(),
        [any::<i32>(), any::<i32>(), any::<i32>()],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(mut b, field, p, v, any, wild)| {
            match field {
                0..=2 => b.pos[field] = p,
                _ => b.vel[field - 3] = v,
            }
            if wild {
                b.pos = any;
            }
            b
        })
}

fn gravity() -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => Just(3),
        4 => -11..=11,
        1 => prop_oneof![Just(BOX_MM), Just(BOX_MM + 1), Just(-BOX_MM), Just(-BOX_MM - 1)],
        1 => any::<i32>(),
    ]
}

/// Ops now and then: impulses and teleports keep feeding the kernel new cases.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (0u8..64, [velocity(), velocity(), velocity()])
            .prop_map(|(body, d)| Op::Impulse { body, d }),
        (0u8..64, [position(), position(), position()])
            .prop_map(|(body, pos)| Op::Teleport { body, pos }),
        (0u8..64, far_velocity(), velocity())
            .prop_map(|(body, x, y)| Op::Impulse { body, d: [x, y, y] }),
        (0u8..64, far_position(), position()).prop_map(|(body, x, y)| Op::Teleport {
            body,
            pos: [x, y, y]
        }),
        (0u8..64).prop_map(|body| Op::Remove { body }),
        gravity().prop_map(|g| Op::Gravity { g }),
    ];
    prop::collection::vec(op, 0..3)
}

/// A world of any dimensions holding 1..=64 drawn bodies, and the inputs of its steps. In
/// most worlds every body is in the kernel's range; the others hold a few far bodies.
fn world_and_steps() -> impl Strategy<Value = (World, Vec<Vec<Op>>)> {
    let far = prop_oneof![
        3 => Just(vec![]),
        1 => prop::collection::vec((0usize..64, far_body()), 1..=3),
    ];
    (
        prop::bool::ANY,
        prop::collection::vec(body(), 1..=64),
        far,
        gravity(),
        prop::collection::vec(ops(), 1..=12),
    )
        .prop_map(|(three, mut bodies, far, gravity, steps)| {
            for (i, b) in far {
                let n = bodies.len();
                bodies[i % n] = b;
            }
            let setup = Setup {
                dims: if three { Dims::Three } else { Dims::Two },
                bodies: bodies.len() as u8,
                seed: 0,
            };
            let mut w = World::new(setup, None);
            w.bodies = bodies.into();
            w.gravity = gravity;
            (w, steps)
        })
}

/// The vector kernels this CPU has.
fn vector_kernels() -> Vec<Kernel> {
    Kernel::ALL
        .into_iter()
        .filter(|k| *k != Kernel::Scalar && k.available())
        .collect()
}

/// Runs every step with each vector kernel, with `step`, with the scalar pass and stage by
/// stage, and requires the same world after each.
fn check(world: &World, steps: &[Vec<Op>]) -> Result<(), TestCaseError> {
    let kernels = vector_kernels();
    let mut vector: Vec<World> = kernels.iter().map(|_| world.clone()).collect();
    let (mut best, mut scalar, mut staged) = (world.clone(), world.clone(), world.clone());
    for (i, ops) in steps.iter().enumerate() {
        for (w, k) in vector.iter_mut().zip(&kernels) {
            w.step_with(*k, ops);
        }
        best.step(ops);
        scalar.step_scalar(ops);
        for stage in Stage::ALL {
            staged.run_stage(stage, ops);
        }
        prop_assert_eq!(
            &scalar,
            &staged,
            "step_scalar and the stages part at step {}",
            i
        );
        prop_assert_eq!(&best, &scalar, "step and step_scalar part at step {}", i);
        for (w, k) in vector.iter().zip(&kernels) {
            prop_assert_eq!(
                w,
                &scalar,
                "the {} kernel and step_scalar part at step {}",
                k.name(),
                i
            );
        }
        for (w, how) in [
            (&best, "step"),
            (&scalar, "step_scalar"),
            (&staged, "stages"),
        ] {
            prop_assert_eq!(
                w.hash(),
                xxhash_rust::xxh3::xxh3_64(&w.snapshot()),
                "the world hash after {} {} is not XXH3 of the snapshot",
                how,
                i
            );
        }
    }
    Ok(())
}

/// Every tame velocity, -L..=L, through each arithmetic step of the move: a body on the
/// floor with that velocity on x and z (floor friction, `trunc(7v / 8)`), and one that
/// crosses a wall with it on every axis (the bounce, `trunc(-3v / 4)`, and the settle
/// below |v| 11), under gravity 3 and 0, in 3D and 2D. The kernels compute these by other
/// formulas than the reference's (friction as `v - sign(v) ceil(|v| / 8)` in 16-bit lanes,
/// or from `7v` with a rounding term in 32-bit lanes), which could part from it at a single
/// value; random worlds meet only some values.
#[test]
fn the_kernel_equals_the_scalar_pass_at_every_tame_velocity() {
    let l = BOX_MM;
    let mut bodies = Vec::new();
    for v in -l..=l {
        bodies.push(Body::new(true, 0, [l / 2, 0, l / 2], [v, 0, v]));
        let wall = if v < 0 { 0 } else { l };
        bodies.push(Body::new(true, 0, [wall; 3], [v; 3]));
    }
    let mut worlds = 0;
    for dims in [Dims::Three, Dims::Two] {
        for gravity in [3, 0] {
            for chunk in bodies.chunks(64) {
                let setup = Setup {
                    dims,
                    bodies: chunk.len() as u8,
                    seed: 0,
                };
                let mut scalar = World::new(setup, None);
                scalar.bodies = chunk.into();
                scalar.gravity = gravity;
                let kernels = vector_kernels();
                let mut vector: Vec<World> = kernels.iter().map(|_| scalar.clone()).collect();
                scalar.step_scalar(&[]);
                for (w, k) in vector.iter_mut().zip(&kernels) {
                    w.step_with(*k, &[]);
                    assert_eq!(
                        *w,
                        scalar,
                        "{} kernel, {dims:?}, gravity {gravity}, bodies {chunk:?}",
                        k.name()
                    );
                }
                worlds += 1;
            }
        }
    }
    assert_eq!(worlds, 4 * (2 * (2 * l as usize + 1)).div_ceil(64));
}

/// A world's fields edited by hand between hashes: the header kept before the bodies is
/// then stale, and the hash must still be XXH3 of the snapshot. Each edit changes the
/// hash, so a hash read from the stale header (the fault this guards against) would fail.
#[test]
fn the_world_hash_follows_fields_edited_by_hand() {
    let setup = Setup {
        dims: Dims::Three,
        bodies: 24,
        seed: 7,
    };
    let mut w = World::new(setup, None);
    let mut hashes = vec![w.hash()];
    let edits: [fn(&mut World); 7] = [
        |w| w.step(&[]),
        |w| w.step += 1,
        |w| w.step += 1 << 32,
        |w| w.gravity = -5,
        |w| w.bodies[3].pos[0] += 1,
        |w| w.bodies.push(Body::new(true, 9, [1, 2, 3], [4, 5, 6])),
        |w| w.bodies = vec![Body::default(); 64].into(),
    ];
    for (i, edit) in edits.iter().enumerate() {
        edit(&mut w);
        let h = w.hash();
        assert_eq!(h, xxhash_rust::xxh3::xxh3_64(&w.snapshot()), "edit {i}");
        assert!(!hashes.contains(&h), "edit {i} left the hash as it was");
        hashes.push(h);
    }
}

/// The AVX-512 kernel keeps each chunk's fields from one step to the next (`Lanes` in
/// `protocol/src/sim/world/bodies.rs`) and reads them instead of the slots while nothing else
/// has written the slots. Here every other way to write them comes between two kernel
/// steps: each changes what the next steps compute, so a kernel that read lanes left stale
/// by it would part from the scalar pass, which gets the same writes.
#[test]
fn every_write_to_the_slots_between_steps_reaches_the_kernel() {
    type Edit = fn(&mut World);
    let edits: [(&str, Edit); 19] = [
        ("index", |w| w.bodies[5].vel[0] += 7),
        ("get_mut", |w| {
            if let Some(b) = w.bodies.get_mut(33) {
                b.pos[1] = 9_000;
            }
        }),
        ("iter_mut", |w| {
            w.bodies.iter_mut().for_each(|b| b.vel[1] += 40)
        }),
        ("for over &mut", |w| {
            for b in &mut w.bodies {
                b.still = 0;
                b.pos[0] = (b.pos[0] + 11).min(BOX_MM);
            }
        }),
        ("a dead body", |w| w.bodies[2].alive = false),
        ("a dead body back", |w| w.bodies[2].alive = true),
        ("push", |w| {
            w.bodies.push(Body::new(true, 0, [50, 60, 70], [-9, 9, 9]))
        }),
        ("pop", |w| {
            w.bodies.pop();
        }),
        ("clear and push", |w| {
            w.bodies.clear();
            w.bodies.push(Body::new(true, 0, [50, 60, 70], [-9, 9, 9]));
        }),
        ("clone_from", |w| {
            let mut other = w.clone();
            other.bodies[0].vel = [1, 2, 3];
            w.clone_from(&other);
        }),
        ("assigned", |w| {
            w.bodies = vec![Body::new(true, 4, [5, 6, 7], [8, 9, 10]); 17].into()
        }),
        ("an op of stage 1", |w| {
            w.apply_input(&[Op::Impulse {
                body: 1,
                d: [30, 30, 30],
            }])
        }),
        ("body_mut", |w| {
            if let Some(b) = w.bodies.body_mut(21) {
                b.vel[2] = -33;
            }
        }),
        ("an op on the third chunk's body", |w| {
            w.apply_input(&[Op::Impulse {
                body: 37,
                d: [-20, 50, 20],
            }])
        }),
        ("a spawn", |w| {
            w.apply_input(&[Op::Spawn {
                pos: [9_000, 100, 4_000],
            }])
        }),
        ("a removal", |w| w.apply_input(&[Op::Remove { body: 17 }])),
        ("an untame body", |w| w.bodies[0].vel[1] = -BOX_MM),
        ("more slots than a world holds, by hand", |w| {
            w.bodies = (0..100)
                .map(|i| {
                    Body::new(
                        i % 7 != 0,
                        0,
                        [100 * i, 5_000, 9_999 - 90 * i],
                        [i - 50, 9, -3],
                    )
                })
                .collect()
        }),
        ("back to forty", |w| {
            while w.bodies.len() > 40 {
                w.bodies.pop();
            }
        }),
    ];
    for kernel in vector_kernels() {
        for dims in [Dims::Three, Dims::Two] {
            let setup = Setup {
                dims,
                bodies: 40,
                seed: 11,
            };
            let mut scalar = World::new(setup, None);
            let mut vector = scalar.clone();
            let step = |vector: &mut World, scalar: &mut World, what: &str| {
                for i in 0..3 {
                    vector.step_with(kernel, &[]);
                    scalar.step_scalar(&[]);
                    assert_eq!(
                        vector,
                        scalar,
                        "{} kernel, {dims:?}: step {i} after {what}",
                        kernel.name()
                    );
                    assert_eq!(
                        vector.hash(),
                        xxhash_rust::xxh3::xxh3_64(&scalar.snapshot())
                    );
                }
            };
            step(&mut vector, &mut scalar, "the start");
            for (what, edit) in edits {
                edit(&mut vector);
                edit(&mut scalar);
                step(&mut vector, &mut scalar, what);
                // And a step of each other kernel between two of this one's.
                for other in Kernel::ALL.into_iter().filter(|k| *k != kernel) {
                    vector.step_with(other, &[]);
                    scalar.step_scalar(&[]);
                    step(&mut vector, &mut scalar, other.name());
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_kernel_equals_the_scalar_pass_and_the_stages((world, steps) in world_and_steps()) {
        check(&world, &steps)?;
    }
}

/// Counts what one live body's step did, read from the reference's world before and after.
fn reached(r: &mut Reached, b: &Body, a: &Body, g: i32, axes: usize) {
    let l = BOX_MM;
    let mut vel = b.vel;
    vel[1] = vel[1].saturating_sub(g);
    for (i, v) in vel.iter().enumerate().take(axes) {
        let np = b.pos[i] + v;
        if (0..=l).contains(&np) {
            continue;
        }
        match (a.vel[i], a.pos[i]) {
            (0, 0) => r.settled_low += 1,
            (0, p) if p == l => r.settled_high += 1,
            _ => r.bounced += 1,
        }
    }
    if a.pos[1] == 0 && (a.vel[0] != 0 || b.vel[0] != 0) {
        r.friction += 1;
    }
    match (a.still, b.still) {
        (0, s) if s != 0 => r.motion_reset += 1,
        (u32::MAX, u32::MAX) => r.still_saturated += 1,
        (s, _) if s != 0 => r.rest_counted += 1,
        _ => {}
    }
}

/// What the live bodies' steps did in the chunks the kernel works on.
#[derive(Default, Debug)]
struct Reached {
    bounced: usize,
    settled_low: usize,
    settled_high: usize,
    friction: usize,
    rest_counted: usize,
    still_saturated: usize,
    motion_reset: usize,
    untame_body: usize,
    untame_gravity: usize,
    dead_with_fields: usize,
    z_kept_in_2d: usize,
    partial_chunk: usize,
}

#[test]
fn the_random_worlds_reach_every_case_of_the_kernel() {
    let names: Vec<&str> = vector_kernels().iter().map(|k| k.name()).collect();
    eprintln!(
        "vector kernels on this CPU: {names:?} (without any, step is step_scalar); step uses {}",
        Kernel::best().name()
    );
    let l = BOX_MM;
    let tame = |p: i32, v: i32| (0..=l).contains(&p) && v.unsigned_abs() <= l as u32;
    let mut r = Reached::default();
    let mut runner = TestRunner::deterministic();
    let strategy = world_and_steps();
    for _ in 0..300 {
        let (world, steps) = strategy.new_tree(&mut runner).expect("a world").current();
        check(&world, &steps).expect("the three ways agree");
        let mut w = world;
        for ops in &steps {
            w.apply_input(ops);
            let before = w.clone();
            for stage in [Stage::Gravity, Stage::Move, Stage::Bookkeeping] {
                w.run_stage(stage, ops);
            }
            let axes = w.dims().axes();
            let g = before.gravity;
            if g.unsigned_abs() > l as u32 {
                r.untame_gravity += 1;
                continue;
            }
            let tame_body = |b: &Body| {
                let mut vel = b.vel;
                vel[1] = vel[1].wrapping_sub(g);
                !b.alive || (0..axes).all(|i| tame(b.pos[i], vel[i]))
            };
            // Only chunks of 16 that both kernels work on (every live body in range: the AVX2
            // kernel's chunks of 8 are then in range too) count.
            for (cb, ca) in before.bodies.chunks(16).zip(w.bodies.chunks(16)) {
                if !cb.iter().all(tame_body) {
                    r.untame_body += 1;
                    continue;
                }
                r.partial_chunk += (cb.len() < 16) as usize;
                for (b, a) in cb.iter().zip(ca) {
                    if !b.alive {
                        r.dead_with_fields += (*b != Body::default()) as usize;
                        continue;
                    }
                    if axes == 2 && (b.pos[2] != 0 || b.vel[2] != 0) {
                        r.z_kept_in_2d += 1;
                    }
                    reached(&mut r, b, a, g, axes);
                }
            }
        }
    }
    eprintln!("{r:?}");
    let counts = [
        r.bounced,
        r.settled_low,
        r.settled_high,
        r.friction,
        r.rest_counted,
        r.still_saturated,
        r.motion_reset,
        r.untame_body,
        r.untame_gravity,
        r.dead_with_fields,
        r.z_kept_in_2d,
        r.partial_chunk,
    ];
    assert!(
        counts.iter().all(|&n| n >= 20),
        "a case is barely reached: {r:?}"
    );
}
