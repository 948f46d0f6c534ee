//! The simulation itself, as `cargo test` runs it: a few seeds pass, a seed replays to the
//! same trace byte for byte, and a planted fault is caught.

use ostm_protocol::session::Plant;
use ostm_simulation::{run, Config};

fn config(name: &str) -> Config {
    Config {
        scratch: std::env::temp_dir().join(format!(
            "ostm-simulation-test-{name}-{}",
            std::process::id()
        )),
        ..Config::default()
    }
}

#[test]
fn forty_seeds_keep_every_invariant() {
    let cfg = config("pass");
    for seed in 0..40 {
        let o = run(seed, &cfg);
        assert_eq!(o.violation, None, "seed {seed}");
        assert!(o.steps > 0 && o.verified > 0, "seed {seed} did something");
    }
}

#[test]
fn a_seed_replays_to_the_same_trace_byte_for_byte() {
    let cfg = Config {
        trace: true,
        ..config("trace")
    };
    let a = run(7, &cfg);
    let b = run(7, &cfg);
    assert!(a.trace.lines().count() > 20, "{}", a.trace);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.digest, b.digest);
    let c = run(8, &cfg);
    assert_ne!(a.digest, c.digest, "another seed, other events");
}

#[test]
fn a_planted_duplicate_is_caught() {
    let cfg = Config {
        plant: Some(Plant::AcceptDuplicate),
        ..config("plant")
    };
    let caught = (0..200).find_map(|seed| run(seed, &cfg).violation.map(|v| (seed, v)));
    let (seed, why) = caught.expect("some seed catches the plant");
    assert!(why.contains("twice"), "seed {seed}: {why}");
}
