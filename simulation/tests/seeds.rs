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
    // A seed may keep every viewer from attaching while the host runs (stalls and pauses
    // over its whole life): such a seed verifies nothing, and must stay rare.
    let mut idle = Vec::new();
    for seed in 0..40 {
        let o = run(seed, &cfg);
        assert_eq!(o.violation, None, "seed {seed}");
        assert!(o.steps > 0, "seed {seed}: the host stepped");
        if o.verified == 0 {
            idle.push(seed);
        }
    }
    assert!(idle.len() <= 2, "seeds that verified nothing: {idle:?}");
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

/// The full disk is met both ways within the first 80 seeds: a flush that fails
/// (`cannot write the recording`) and a finish that cannot write its assembly (`cannot
/// finish the recording`); each run keeps every invariant, so what the part recovers is
/// exactly what the recorder counted as written.
#[test]
fn a_full_disk_is_met_while_writing_and_while_finishing() {
    let cfg = Config {
        trace: true,
        ..config("disk")
    };
    let (mut writing, mut finishing) = (0, 0);
    for seed in 0..80 {
        let o = run(seed, &cfg);
        assert_eq!(o.violation, None, "seed {seed}");
        writing += o.trace.matches(": cannot write the recording (").count();
        finishing += o.trace.matches(": cannot finish the recording (").count();
    }
    assert!(writing > 0 && finishing > 0, "{writing} {finishing}");
}

#[test]
fn a_planted_reader_fault_is_caught() {
    let cfg = Config {
        reader_plant: Some(ostm_protocol::reader::tcp::Plant::RunCutWrong),
        ..config("reader-plant")
    };
    let caught = (0..50).find_map(|seed| run(seed, &cfg).violation.map(|v| (seed, v)));
    let (seed, why) = caught.expect("some seed catches the plant");
    assert!(
        why.contains("expected a record for step"),
        "seed {seed}: {why}"
    );
}

/// Over TCP the host's connection machine and the viewer's reader machine meet their
/// rules within the first 60 seeds: the host resyncs a viewer that fell behind, drops one
/// whose writes stalled, answers a drift request; readers reconnect, also after a stream
/// cut in the middle of a frame.
#[test]
fn the_tcp_machines_meet_their_rules() {
    let cfg = Config {
        trace: true,
        ..config("tcp")
    };
    let mut trace = String::new();
    for seed in 0..60 {
        let o = run(seed, &cfg);
        assert_eq!(o.violation, None, "seed {seed}");
        trace.push_str(&o.trace);
    }
    for what in [
        "host resyncs viewer",
        "dropped: stalled",
        "host answers viewer",
        "reconnects in",
        "connection closed inside a frame",
        "reader attaches (connection 2)",
    ] {
        assert!(trace.contains(what), "no {what:?} in 60 seeds");
    }
}
