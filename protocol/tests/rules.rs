//! The simulation's rules, each checked against values computed by hand from
//! `docs/test-module.md` (the working is in the comments), never copied from a run.

use ostm_protocol::sim::link::{Link, Role};
use ostm_protocol::sim::rng::Sfc32;
use ostm_protocol::sim::world::{Body, Dims, Setup, Stage, World};
use ostm_protocol::Op;

const MIN: i32 = i32::MIN;
const MAX: i32 = i32::MAX;

fn body(pos: [i32; 3], vel: [i32; 3]) -> Body {
    Body::new(true, 0, pos, vel)
}

/// A world holding exactly `bodies`, at step 0, with `gravity`.
fn world(dims: Dims, bodies: &[Body], gravity: i32) -> World {
    let setup = Setup {
        dims,
        bodies: bodies.len() as u8,
        seed: 0,
    };
    let mut w = World::new(setup, None);
    w.bodies = bodies.into();
    w.gravity = gravity;
    w
}

/// One step of a one-body world; returns the body.
fn one_step(dims: Dims, b: Body, gravity: i32, ops: &[Op]) -> Body {
    let mut w = world(dims, &[b], gravity);
    w.step(ops);
    w.bodies[0]
}

#[track_caller]
fn assert_body(b: Body, pos: [i32; 3], vel: [i32; 3]) {
    assert_eq!((b.pos, b.vel), (pos, vel), "body {b:?}");
}

#[test]
fn bounce_off_each_wall_is_damped_by_three_quarters_truncated_toward_zero() {
    // Gravity 0, so only the bounce acts. Reflection: p' = -(p + v) at 0, 2*10000 - (p + v)
    // at 10000; v' = -v * 3 / 4 truncated toward zero.
    // x low: 10 - 25 = -15 -> 15; v' = 75/4 = 18.75 -> 18.
    assert_body(
        one_step(Dims::Three, body([10, 5000, 5000], [-25, 0, 0]), 0, &[]),
        [15, 5000, 5000],
        [18, 0, 0],
    );
    // x high: 9990 + 27 = 10017 -> 20000 - 10017 = 9983; v' = -81/4 = -20.25 -> -20 (not -21).
    assert_body(
        one_step(Dims::Three, body([9990, 5000, 5000], [27, 0, 0]), 0, &[]),
        [9983, 5000, 5000],
        [-20, 0, 0],
    );
    // y low (the floor): 10 - 25 -> 15, 18; x moves 16 and keeps it (no friction off the floor).
    assert_body(
        one_step(Dims::Three, body([5000, 10, 5000], [16, -25, 0]), 0, &[]),
        [5016, 15, 5000],
        [16, 18, 0],
    );
    // y high (the ceiling): 9990 + 27 -> 9983, -20.
    assert_body(
        one_step(Dims::Three, body([5000, 9990, 5000], [0, 27, 0]), 0, &[]),
        [5000, 9983, 5000],
        [0, -20, 0],
    );
    // z low: 10 - 27 = -17 -> 17; v' = 81/4 = 20.25 -> 20.
    assert_body(
        one_step(Dims::Three, body([5000, 5000, 10], [0, 0, -27]), 0, &[]),
        [5000, 5000, 17],
        [0, 0, 20],
    );
    // z high: 9990 + 25 = 10015 -> 9985; v' = -75/4 -> -18.
    assert_body(
        one_step(Dims::Three, body([5000, 5000, 9990], [0, 0, 25]), 0, &[]),
        [5000, 5000, 9985],
        [0, 0, -18],
    );
    // Landing exactly on a wall is not a crossing: 9990 + 10 = 10000, velocity kept.
    assert_body(
        one_step(Dims::Three, body([9990, 5000, 5000], [10, 0, 0]), 0, &[]),
        [10000, 5000, 5000],
        [10, 0, 0],
    );
}

#[test]
fn a_bounce_slower_than_settle_speed_settles_on_the_wall() {
    // SETTLE_SPEED is 8: the damped outgoing speed must be >= 8 to bounce.
    // 5 - 15 = -10 -> 10; v' = 45/4 = 11 >= 8: bounces.
    assert_body(
        one_step(Dims::Three, body([5, 5000, 5000], [-15, 0, 0]), 0, &[]),
        [10, 5000, 5000],
        [11, 0, 0],
    );
    // 5 - 11 = -6 -> 6; v' = 33/4 = 8.25 -> 8, not below 8: bounces.
    assert_body(
        one_step(Dims::Three, body([5, 5000, 5000], [-11, 0, 0]), 0, &[]),
        [6, 5000, 5000],
        [8, 0, 0],
    );
    // 5 - 10 = -5; v' = 30/4 = 7 < 8: settles at the wall with velocity 0.
    let b = one_step(Dims::Three, body([5, 5000, 5000], [-10, 0, 0]), 0, &[]);
    assert_body(b, [0, 5000, 5000], [0, 0, 0]);
    assert_eq!(b.still, 1, "the step ended with zero velocity");
    // The far wall: 9995 + 10 = 10005; v' = -7: settles at 10000.
    assert_body(
        one_step(Dims::Three, body([9995, 5000, 5000], [10, 0, 0]), 0, &[]),
        [10000, 5000, 5000],
        [0, 0, 0],
    );
}

#[test]
fn floor_friction_takes_an_eighth_of_horizontal_velocity_truncated() {
    // Gravity 3: vy = -3; y: 0 - 3 -> 3, v' = 9/4 = 2 < 8: settles at y = 0, vy = 0.
    // x: 1000 + 40 = 1040, then friction 40 * 7/8 = 35. z: 5000 - 9 = 4991, -63/8 = -7.875 -> -7.
    let mut w = world(Dims::Three, &[body([1000, 0, 5000], [40, 0, -9])], 3);
    w.step(&[]);
    assert_body(w.bodies[0], [1040, 0, 4991], [35, 0, -7]);
    // Next: x 1040 + 35 = 1075, 245/8 = 30.625 -> 30; z 4991 - 7 = 4984, -49/8 -> -6.
    w.step(&[]);
    assert_body(w.bodies[0], [1075, 0, 4984], [30, 0, -6]);
    // 2D: only x feels friction (z does not exist). 1000 + 40, 35.
    assert_body(
        one_step(Dims::Two, body([1000, 0, 0], [40, 0, 0]), 3, &[]),
        [1040, 0, 0],
        [35, 0, 0],
    );
}

#[test]
fn gravity_saturates_at_the_i32_limits() {
    // Stage 2 alone: (MIN + 1) - 5 saturates to MIN; 0 - MIN saturates to MAX.
    let mut w = world(
        Dims::Three,
        &[body([5000; 3], [0, MIN + 1, 0]), body([5000; 3], [0, 0, 0])],
        5,
    );
    w.run_stage(Stage::Gravity, &[]);
    assert_eq!(w.bodies[0].vel[1], MIN);
    w.gravity = MIN;
    w.bodies[0].vel[1] = 0;
    w.run_stage(Stage::Gravity, &[]);
    assert_eq!(w.bodies[0].vel[1], MAX);

    // A whole step with vy = MIN + 1, gravity 5: vy = MIN; 5000 + MIN = -2147478648 < 0:
    // p' = 2147478648, v' = 2^31 * 3/4 = 1610612736; clamped into the box: y = 10000.
    let b = one_step(Dims::Three, body([5000; 3], [0, MIN + 1, 0]), 5, &[]);
    assert_body(b, [5000, 10000, 5000], [0, 1_610_612_736, 0]);
    // Gravity MIN, vy 0, vx 16: vy = MAX; 5000 + MAX = 2147488647 > 10000:
    // p' = 20000 - 2147488647 < 0, v' = -(2^31 - 1) * 3/4 = -1610612735.25 -> -1610612735;
    // clamped: y = 0, so friction acts: x 5000 + 16 = 5016, vx 16 * 7/8 = 14.
    let b = one_step(Dims::Three, body([5000; 3], [16, 0, 0]), MIN, &[]);
    assert_body(b, [5016, 0, 5000], [14, -1_610_612_735, 0]);
}

#[test]
fn impulses_saturate_at_the_i32_limits() {
    let mut w = world(Dims::Three, &[body([5000; 3], [100, -100, 0])], 0);
    w.apply_input(&[Op::Impulse {
        body: 0,
        d: [MAX, MIN, MAX],
    }]);
    assert_eq!(w.bodies[0].vel, [MAX, MIN, MAX]);
    // MAX + MIN = -1 on every axis.
    w.apply_input(&[Op::Impulse {
        body: 0,
        d: [MIN, MAX, MIN],
    }]);
    assert_eq!(w.bodies[0].vel, [-1, -1, -1]);
    // -1 + MIN saturates to MIN; -1 + MAX = MAX - 1.
    w.apply_input(&[Op::Impulse {
        body: 0,
        d: [MIN, MAX, MIN],
    }]);
    assert_eq!(w.bodies[0].vel, [MIN, MAX - 1, MIN]);
}

#[test]
fn a_teleport_to_the_i32_limits_then_a_move_lands_in_the_box() {
    // Velocity 0, gravity 0. x: MIN < 0, reflected, v' = 0 < 8: settles at 0.
    // y: MAX > 10000, v' = 0: settles at 10000. z: MIN -> 0.
    let b = one_step(
        Dims::Three,
        body([5000; 3], [0; 3]),
        0,
        &[Op::Teleport {
            body: 0,
            pos: [MIN, MAX, MIN],
        }],
    );
    assert_body(b, [0, 10000, 0], [0, 0, 0]);
    // Velocity (100, -100, 0). x: MAX + 100 = 2147483747 > 10000: p' = 20000 - 2147483747 < 0,
    // v' = -75 (fast enough to bounce), clamped to 0. y: MIN - 100 < 0: p' = 2147483748,
    // v' = 300/4 = 75, clamped to 10000. z: MAX, v' = 0: settles at 10000.
    let mut w = world(Dims::Three, &[body([5000; 3], [100, -100, 0])], 0);
    w.step(&[Op::Teleport {
        body: 0,
        pos: [MAX, MIN, MAX],
    }]);
    assert_body(w.bodies[0], [0, 10000, 10000], [-75, 75, 0]);
    // And on from there: x 0 - 75 -> 75, v' = 225/4 = 56; y 10075 -> 9925, -56; z stays.
    w.step(&[]);
    assert_body(w.bodies[0], [75, 9925, 10000], [56, -56, 0]);
}

#[test]
fn remove_zeroes_the_slot_and_keeps_it() {
    let mut w = world(
        Dims::Three,
        &[body([1, 2, 3], [4, 5, 6]), body([7, 8, 9], [1, 1, 1])],
        3,
    );
    w.bodies[0].still = 9;
    w.apply_input(&[Op::Remove { body: 0 }]);
    assert_eq!(w.bodies.len(), 2, "the slot stays");
    assert_eq!(w.bodies[0], Body::default());
    assert_eq!(
        &w.snapshot()[12..44],
        &[0u8; 32],
        "a removed body is 32 zero bytes"
    );
    w.step(&[]);
    assert_eq!(
        w.bodies[0],
        Body::default(),
        "gravity, move and bookkeeping skip it"
    );
}

#[test]
fn ops_on_removed_or_missing_bodies_do_nothing() {
    let mut w = world(
        Dims::Three,
        &[
            body([1000; 3], [1; 3]),
            body([2000; 3], [2; 3]),
            body([3000; 3], [3; 3]),
        ],
        3,
    );
    w.apply_input(&[Op::Remove { body: 1 }]);
    let before = w.snapshot();
    w.apply_input(&[
        Op::Impulse {
            body: 1,
            d: [5, 5, 5],
        },
        Op::Teleport {
            body: 1,
            pos: [5, 5, 5],
        },
        Op::Remove { body: 1 },
        Op::Impulse {
            body: 3,
            d: [MAX; 3],
        },
        Op::Teleport {
            body: 64,
            pos: [MIN; 3],
        },
        Op::Remove { body: 255 },
    ]);
    assert_eq!(w.snapshot(), before);
}

/// A slot with `alive = 0` whose other fields are set (a snapshot may hold one: another
/// implementation's remove may clear `alive` only): no op and no stage touches it.
#[test]
fn a_dead_slot_with_fields_set_is_never_touched() {
    let dead = Body::new(false, 9, [1, -2, 3], [4, -5, 6]);
    let mut w = world(Dims::Three, &[dead, body([5000; 3], [0; 3])], 3);
    for _ in 0..20 {
        w.step(&[
            Op::Impulse {
                body: 0,
                d: [7, 7, 7],
            },
            Op::Teleport {
                body: 0,
                pos: [9, 9, 9],
            },
            Op::Remove { body: 0 },
        ]);
    }
    assert_eq!(
        w.bodies[0], dead,
        "ops, gravity, move and bookkeeping skip it"
    );
    assert_eq!(
        &w.snapshot()[12..44],
        &dead.to_bytes(),
        "and it is hashed as it is"
    );
    // The live body fell meanwhile (so the steps ran): after k steps under gravity 3,
    // vy = -3k and y = 5000 - 3 (1 + ... + k); k = 20: vy = -60, y = 5000 - 630 = 4370.
    assert_body(w.bodies[1], [5000, 4370, 5000], [0, -60, 0]);
}

/// A link transfer overwrites a dead slot whatever it holds: the sender's leaves the empty
/// slot, the receiver's the arriving body.
#[test]
fn a_transfer_overwrites_a_dead_slot_with_fields_set() {
    let dead = Body::new(false, 9, [1, -2, 3], [4, -5, 6]);
    for (role, after) in [
        (Role::Sender, Body::default()),
        (Role::Receiver, body([5000; 3], [40, 0, 0])),
    ] {
        let mut w = linked(Dims::Three, role);
        w.bodies[3] = dead;
        for _ in 0..5 {
            w.step(&[]);
        }
        assert_eq!(w.bodies[3], dead, "{role:?}: untouched before the transfer");
        w.step(&[]); // step 5
        assert_eq!(w.bodies[3], after, "{role:?}");
    }
}

/// The link's body index may be any u8: the receiver's start empties its slot only if it
/// exists, and the transfer acts only on a slot that exists at that moment.
#[test]
fn a_link_body_index_acts_only_on_a_slot_that_exists_then() {
    let setup = Setup {
        dims: Dims::Three,
        bodies: 5,
        seed: 7,
    };
    for role in [Role::Sender, Role::Receiver] {
        // Index 200: never a slot; the linked world runs exactly like an unlinked one.
        let link = |body| {
            Some(Link {
                role,
                body,
                transfer_step: 2,
            })
        };
        let mut w = World::new(setup, link(200));
        let mut plain = World::new(setup, None);
        for _ in 0..4 {
            assert_eq!(w.bodies, plain.bodies, "{role:?}");
            w.step(&[]);
            plain.step(&[]);
        }
        assert_eq!(w.bodies, plain.bodies, "{role:?}");
        // Index 5 (the body count): no slot at the start, so the receiver's start empties
        // nothing; a spawn at step 0 makes slot 5, so the transfer at step 2 acts on it.
        let mut w = World::new(setup, link(5));
        assert_eq!(w.bodies, World::new(setup, None).bodies, "{role:?}");
        w.step(&[Op::Spawn {
            pos: [100, 9000, 200],
        }]);
        w.step(&[]);
        assert!(w.bodies[5].alive, "{role:?}: spawned");
        w.step(&[]); // step 2
        let arrived = body([5000; 3], [40, 0, 0]);
        let want = if role == Role::Sender {
            Body::default()
        } else {
            arrived
        };
        assert_eq!(w.bodies[5], want, "{role:?}");
    }
}

#[test]
fn spawn_appends_at_rest_until_64_slots_then_does_nothing() {
    let mut w = world(Dims::Three, &vec![body([5000; 3], [0; 3]); 62], 3);
    w.apply_input(&[Op::Remove { body: 0 }]);
    w.apply_input(&[
        Op::Spawn { pos: [1, 2, 3] },
        Op::Spawn { pos: [4, 5, 6] },
        Op::Spawn { pos: [7, 8, 9] },
    ]);
    assert_eq!(w.bodies.len(), 64);
    assert_eq!(w.bodies[0], Body::default(), "a removed slot is not reused");
    assert_eq!(w.bodies[62], body([1, 2, 3], [0; 3]));
    assert_eq!(w.bodies[63], body([4, 5, 6], [0; 3]));
    let before = w.snapshot();
    w.apply_input(&[Op::Spawn { pos: [7, 8, 9] }]);
    assert_eq!(w.snapshot(), before, "a spawn at 64 slots does nothing");
}

#[test]
fn two_d_ignores_z_in_every_op() {
    let mut w = World::new(
        Setup {
            dims: Dims::Two,
            bodies: 1,
            seed: 42,
        },
        None,
    );
    assert_eq!((w.bodies[0].pos[2], w.bodies[0].vel[2]), (0, 0));
    w.apply_input(&[
        Op::Teleport {
            body: 0,
            pos: [7, 8, 9],
        },
        Op::Impulse {
            body: 0,
            d: [1, 2, 3],
        },
        Op::Spawn { pos: [4, 5, 6] },
    ]);
    assert_eq!(w.bodies[0].pos[2], 0);
    assert_eq!(w.bodies[0].vel[2], 0);
    assert_eq!(w.bodies[1].pos, [4, 5, 0]);
    w.step(&[]);
    assert!(w.bodies.iter().all(|b| b.pos[2] == 0 && b.vel[2] == 0));
}

/// A 2D body whose z and velocity z are set (a snapshot may hold them): nothing reads or
/// writes them. They stay as read, and the still count looks at x and y only.
#[test]
fn a_2d_body_keeps_its_z_as_read_and_rests_on_x_and_y() {
    let mut w = world(Dims::Two, &[body([5000, 0, 5], [16, 0, -7])], 3);
    w.step(&[
        Op::Impulse {
            body: 0,
            d: [0, 0, 100],
        },
        Op::Teleport {
            body: 0,
            pos: [5000, 0, 99],
        },
    ]);
    // y: 0 - 3 = -3 reflects to 3 with v = trunc(9 / 4) = 2 < 8: settles at 0. x: 5016,
    // then friction 16 * 7 / 8 = 14. z and velocity z: untouched, ops' z ignored.
    assert_body(w.bodies[0], [5016, 0, 5], [14, 0, -7]);
    assert_eq!(w.bodies[0].still, 0);
    // Friction: 14 -> 12 -> 10 -> 8 -> 7 -> 6 -> 5 -> 4 -> 3 -> 2 -> 1 -> 0 over 11 steps,
    // x moving 14 + 12 + ... + 1 = 72 to 5088; the eleventh ends at rest in x and y.
    for _ in 0..11 {
        w.step(&[]);
    }
    assert_body(w.bodies[0], [5088, 0, 5], [0, 0, -7]);
    assert_eq!(
        w.bodies[0].still, 1,
        "velocity z is not read for rest in 2D"
    );
    w.step(&[]);
    assert_eq!(w.bodies[0].still, 2);
    let snap = w.snapshot();
    assert_eq!(
        &snap[28..32],
        &5i32.to_le_bytes(),
        "position z in the snapshot"
    );
    assert_eq!(
        &snap[40..44],
        &(-7i32).to_le_bytes(),
        "velocity z in the snapshot"
    );
    // In 3D velocity z is read: z 5000 - 7, friction -7 * 7 / 8 = -6, so it is not at rest.
    let mut w3 = world(Dims::Three, &[body([5000, 0, 5000], [0, 0, -7])], 3);
    w3.step(&[]);
    assert_body(w3.bodies[0], [5000, 0, 4993], [0, 0, -6]);
    assert_eq!(w3.bodies[0].still, 0);
}

#[test]
fn still_count_counts_steps_ending_at_rest_and_resets_on_motion() {
    // At rest on the floor under gravity 3: each step vy = -3 settles back to 0.
    let mut w = world(Dims::Three, &[body([5000, 0, 5000], [0; 3])], 3);
    for expected in 1..=3 {
        w.step(&[]);
        assert_eq!(w.bodies[0].still, expected);
    }
    // An impulse of 1: x moves to 5001, then friction 1 * 7/8 = 0: the step still ends at
    // rest, so the count goes on.
    w.step(&[Op::Impulse {
        body: 0,
        d: [1, 0, 0],
    }]);
    assert_eq!((w.bodies[0].pos[0], w.bodies[0].still), (5001, 4));
    // An impulse of 10: x 5011, friction 70/8 = 8: the step ends moving, the count resets.
    w.step(&[Op::Impulse {
        body: 0,
        d: [10, 0, 0],
    }]);
    assert_eq!(
        (w.bodies[0].pos[0], w.bodies[0].vel[0], w.bodies[0].still),
        (5011, 8, 0)
    );
    // Friction: 8 -> 7 -> 6 -> 5 -> 4 -> 3 -> 2 -> 1 -> 0 (each * 7/8, truncated), moving
    // 8 + 7 + ... + 1 = 36 more: the eighth step ends at rest at x = 5047.
    for _ in 0..7 {
        w.step(&[]);
        assert_eq!(w.bodies[0].still, 0);
    }
    w.step(&[]);
    assert_body(w.bodies[0], [5047, 0, 5000], [0; 3]);
    assert_eq!(w.bodies[0].still, 1);
}

fn linked(dims: Dims, role: Role) -> World {
    let setup = Setup {
        dims,
        bodies: 5,
        seed: 7,
    };
    World::new(
        setup,
        Some(Link {
            role,
            body: 3,
            transfer_step: 5,
        }),
    )
}

#[test]
fn a_sender_removes_its_body_at_the_transfer_step() {
    let mut w = linked(Dims::Three, Role::Sender);
    for _ in 0..5 {
        w.step(&[]);
    }
    assert!(w.bodies[3].alive, "alive through step 4");
    w.step(&[]); // step 5
    assert_eq!(w.bodies[3], Body::default());
    assert_eq!(w.bodies.len(), 5);
}

#[test]
fn a_receiver_gains_its_body_at_the_transfer_step() {
    for (dims, center) in [
        (Dims::Three, [5000, 5000, 5000]),
        (Dims::Two, [5000, 5000, 0]),
    ] {
        let mut w = linked(dims, Role::Receiver);
        assert_eq!(w.bodies[3], Body::default(), "absent before the transfer");
        for _ in 0..5 {
            w.step(&[Op::Impulse {
                body: 3,
                d: [9, 9, 9],
            }]);
        }
        assert_eq!(
            w.bodies[3],
            Body::default(),
            "ops on it before the transfer do nothing"
        );
        w.step(&[]); // step 5: appears after the move, at the centre, ARRIVAL_VELOCITY (40, 0, 0)
        assert_eq!(w.bodies[3], body(center, [40, 0, 0]));
        // Step 6, gravity 3: vy = -3; x 5000 + 40, y 5000 - 3.
        w.step(&[]);
        assert_body(w.bodies[3], [5040, 4997, center[2]], [40, -3, 0]);
    }
}

/// sfc32 written out again from the formula in the docs, independently of `rng.rs`
/// (the rotation spelled out with shifts on purpose).
#[allow(clippy::manual_rotate)]
fn sfc32(state: &mut [u32; 4]) -> u32 {
    let [a, b, c, d] = *state;
    let t = a.wrapping_add(b).wrapping_add(d);
    state[3] = d.wrapping_add(1);
    state[0] = b ^ (b >> 9);
    state[1] = c.wrapping_add(c << 3);
    state[2] = ((c << 21) | (c >> 11)).wrapping_add(t);
    t
}

fn seeded(seed: u32) -> [u32; 4] {
    let mut s = [0x9E37_79B9, 0x243F_6A88, 0xB7E1_5162, seed];
    for _ in 0..12 {
        sfc32(&mut s);
    }
    s
}

#[test]
fn sfc32_follows_its_formula() {
    // By hand, the first raw output of seed 0 is a + b + d = 0x9E3779B9 + 0x243F6A88 + 0
    // = 0xC276E441 (B9+88 = 141, 79+6A+1 = E4, 37+3F = 76, 9E+24 = C2).
    let mut raw = [0x9E37_79B9, 0x243F_6A88, 0xB7E1_5162, 0];
    assert_eq!(sfc32(&mut raw), 0xC276_E441);
    let mut code = Sfc32 {
        state: [0x9E37_79B9, 0x243F_6A88, 0xB7E1_5162, 0],
    };
    assert_eq!(code.next_u32(), 0xC276_E441);
    for seed in [0, 1, 1234, u32::MAX] {
        let mut mine = seeded(seed);
        let mut code = Sfc32::from_seed(seed);
        assert_eq!(
            code.state, mine,
            "seed {seed}: state after the 12 discarded outputs"
        );
        for i in 0..16 {
            assert_eq!(code.next_u32(), sfc32(&mut mine), "seed {seed} output {i}");
        }
    }
}

#[test]
fn initial_bodies_come_from_the_seed_in_the_documented_order() {
    // Per body: x, y, (z) in 500 + r % 9001, then vx, vy, (vz) in -40 + r % 81.
    let mut s = seeded(77);
    let mut next = |lo: i64, hi: i64| (lo + sfc32(&mut s) as i64 % (hi - lo + 1)) as i32;
    let mut expect = Vec::new();
    for _ in 0..3 {
        let pos = [next(500, 9500), next(500, 9500), next(500, 9500)];
        let vel = [next(-40, 40), next(-40, 40), next(-40, 40)];
        expect.push(body(pos, vel));
    }
    let w = World::new(
        Setup {
            dims: Dims::Three,
            bodies: 3,
            seed: 77,
        },
        None,
    );
    assert_eq!(w.bodies, expect);
    assert_eq!((w.step, w.gravity), (0, 3));
}

#[test]
fn the_hash_is_xxh3_64_of_the_snapshot_bytes() {
    // XXH3-64 with seed 0 of no bytes is 0x2D06800538D394C2 (the reference's test vector),
    // which pins the function itself.
    assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2D06_8005_38D3_94C2);
    let mut w = world(
        Dims::Three,
        &[body([1, 2, 3], [-4, 5, -6]), body([9; 3], [9; 3])],
        -2,
    );
    w.bodies[0].still = 3;
    w.bodies[1] = Body::default();
    w.step = 7;
    #[rustfmt::skip]
    let bytes: Vec<u8> = [
        &[7, 0, 0, 0, 0, 0, 0, 0][..],  // step u64
        &[0xFE, 0xFF, 0xFF, 0xFF],       // gravity -2
        &[1, 0, 0, 0], &[3, 0, 0, 0],    // alive, still
        &[1, 0, 0, 0], &[2, 0, 0, 0], &[3, 0, 0, 0],                   // position
        &[0xFC, 0xFF, 0xFF, 0xFF], &[5, 0, 0, 0], &[0xFA, 0xFF, 0xFF, 0xFF], // velocity
        &[0; 32],                        // the removed body
    ]
    .concat();
    assert_eq!(w.snapshot(), bytes);
    assert_eq!(w.hash(), xxhash_rust::xxh3::xxh3_64(&bytes));
    let back = World::from_snapshot(w.setup(), None, "hand", &bytes, 0).expect("canonical");
    assert_eq!(back, w);
}

/// `World::step` runs stages 2..4 body by body in one pass; it must equal running the four
/// stages one after another, on every step of a busy scenario in 2D and 3D, links included.
#[test]
fn fused_step_equals_the_four_stages_in_order() {
    use ostm_protocol::sim::scenario::Scenario;
    let setups = [
        (
            Setup {
                dims: Dims::Three,
                bodies: 24,
                seed: 7,
            },
            None,
        ),
        (
            Setup {
                dims: Dims::Two,
                bodies: 5,
                seed: 8,
            },
            Some(Link {
                role: Role::Receiver,
                body: 3,
                transfer_step: 150,
            }),
        ),
        (
            Setup {
                dims: Dims::Three,
                bodies: 9,
                seed: 9,
            },
            Some(Link {
                role: Role::Sender,
                body: 3,
                transfer_step: 150,
            }),
        ),
    ];
    for (setup, link) in setups {
        let mut fused = World::new(setup, link);
        let mut staged = fused.clone();
        let mut scenario = Scenario::new(setup.seed);
        let mut planted_caught = 0;
        for _ in 0..2300 {
            let ops = scenario.next_input(&fused);
            // Planted fault: the same step without the move stage must not compare equal
            // whenever some body is moving.
            let mut skipped = staged.clone();
            for stage in [Stage::ApplyInput, Stage::Gravity, Stage::Bookkeeping] {
                skipped.run_stage(stage, &ops);
            }
            fused.step(&ops);
            for stage in Stage::ALL {
                staged.run_stage(stage, &ops);
            }
            assert_eq!(
                fused, staged,
                "fused and staged steps part at step {}",
                fused.step
            );
            if skipped != staged {
                planted_caught += 1;
            }
        }
        assert!(
            planted_caught > 100,
            "a step without its move stage was not told apart"
        );
    }
}
