//! A world run for ever stays alive: the scenario's lively phase (docs/testdata.md, "The
//! lively phase") keeps the host's embedded default world full of moving bodies at steps
//! 10^5, 10^6 and 10^7, where the schedule alone left it empty from step 100 000 on.

use ostm_protocol::sim::scenario::{Scenario, LIVELY_FROM};
use ostm_protocol::{Dims, Setup, World};

/// The host's embedded default world (`ostm-host serve` with no world options).
const DEFAULT: Setup = Setup {
    dims: Dims::Three,
    bodies: 24,
    seed: 10_000,
};

/// At least this many live bodies: as many as the default world starts with.
const MIN_LIVE: usize = 24;

/// `Ok` when the world has at least [`MIN_LIVE`] live bodies and at least half of them
/// are moving (some velocity component is not 0); else what it lacks.
fn lively(w: &World) -> Result<(), String> {
    let live = w.alive_count();
    let moving = w
        .bodies
        .iter()
        .filter(|b| b.alive && b.vel != [0; 3])
        .count();
    if live < MIN_LIVE || moving * 2 < live {
        return Err(format!(
            "step {}: {live} live bodies, {moving} of them moving (want at least {MIN_LIVE} live, half of them moving)",
            w.step
        ));
    }
    Ok(())
}

/// Runs `scenario` on `world` until `world.step == to`.
fn run_to(world: &mut World, scenario: &mut Scenario, to: u64) {
    while world.step < to {
        let ops = scenario.next_input(world);
        world.step(&ops);
    }
}

#[test]
fn the_default_world_is_alive_and_moving_at_steps_1e5_1e6_1e7() {
    let mut world = World::new(DEFAULT, None);
    let mut scenario = Scenario::new(DEFAULT.seed);
    run_to(&mut world, &mut scenario, LIVELY_FROM);
    // The first 10 000 steps are the schedule's: they end quiet, nearly every body at rest
    // (the moving half of the check can fail).
    assert!(
        lively(&world).is_err(),
        "the schedule's quiet end at step 10 000 passed the liveliness check"
    );
    let live_at_start = world.alive_count();
    for to in [100_000, 1_000_000, 10_000_000] {
        run_to(&mut world, &mut scenario, to);
        lively(&world).unwrap_or_else(|e| panic!("the default world is not lively: {e}"));
        assert_eq!(
            world.alive_count(),
            live_at_start,
            "the lively phase removed a body by step {to}"
        );
        assert_eq!(world.bodies.len(), 64, "all 64 slots are in use");
    }
}

#[test]
fn a_2d_world_of_another_seed_is_alive_at_step_1e5() {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 12,
        seed: 600,
    };
    let mut world = World::new(setup, None);
    let mut scenario = Scenario::new(setup.seed);
    for to in (LIVELY_FROM + 1000..=100_000).step_by(1000) {
        run_to(&mut world, &mut scenario, to);
        lively(&world).unwrap_or_else(|e| panic!("the 2D world of seed 600 is not lively: {e}"));
    }
}

/// Planted fault: the old rule (the 2000-step schedule for ever, its removes included)
/// must fail the check at step 10^5.
#[test]
fn the_old_rule_fails_the_check_at_step_1e5() {
    let mut world = World::new(DEFAULT, None);
    let mut scenario = Scenario::with_lively_from(DEFAULT.seed, u64::MAX);
    run_to(&mut world, &mut scenario, 100_000);
    let err = lively(&world).expect_err("the old rule passed the liveliness check");
    assert!(err.contains("0 live bodies"), "{err}");
}

/// The lively phase leaves the first 10 000 calls alone: the same ops as a scenario whose
/// lively phase never starts, call for call (the committed `test-10000.ostm` pins them too).
#[test]
fn the_first_10000_calls_are_the_schedule() {
    let mut world = World::new(DEFAULT, None);
    let mut new = Scenario::new(DEFAULT.seed);
    let mut old = Scenario::with_lively_from(DEFAULT.seed, u64::MAX);
    let mut differ = 0;
    for _ in 0..LIVELY_FROM + 2000 {
        let ops = new.next_input(&world);
        let before = world.step;
        if old.next_input(&world) != ops {
            assert!(
                before >= LIVELY_FROM,
                "call {before} differs from the schedule"
            );
            differ += 1;
        }
        world.step(&ops);
    }
    assert!(differ > 100, "the lively phase changed only {differ} calls");
}
