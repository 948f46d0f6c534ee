//! Runs one case of the step bench (`protocol/benches/step.rs`) a given number of times, for
//! `scripts/bench-step-instructions`, which counts its instructions under callgrind (a
//! figure that, unlike time, does not move with the machine's load).
//!
//! `cargo run --release -p ostm-protocol --example step_cost -- CASE DIMS BODIES ITERATIONS`
//! with CASE one of `xxhash-rust`, `twox-hash` (XXH3-64 of a buffer the snapshot's size),
//! `hash` (the world hash), `step`, `step+hash`, `scalar+hash`.

use ostm_protocol::sim::world::Dims;
use ostm_protocol::World;
use std::hint::black_box;
use std::process::ExitCode;

#[path = "../benches/support/mod.rs"]
mod support;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [case, dims, bodies, n] = args.as_slice() else {
        eprintln!("usage: step_cost CASE DIMS BODIES ITERATIONS (see the source's header)");
        return ExitCode::from(2);
    };
    let dims = match dims.as_str() {
        "2" => Dims::Two,
        "3" => Dims::Three,
        d => {
            eprintln!("step_cost: expected DIMS 2 or 3, found {d:?}");
            return ExitCode::from(2);
        }
    };
    let (Ok(bodies @ 1..=64), Ok(n)) = (bodies.parse::<u8>(), n.parse::<u32>()) else {
        eprintln!("step_cost: expected BODIES 1..=64 and ITERATIONS a u32, found {bodies:?} {n:?}");
        return ExitCode::from(2);
    };
    // The bench's worlds (`benches/support`).
    let fresh = support::world(dims, bodies);
    let mut phases = support::Phases::new(&fresh);
    let buf: Vec<u8> = (0..fresh.snapshot_len()).map(|i| (i * 31) as u8).collect();
    let run: fn(&mut World, &[u8]) = match case.as_str() {
        "xxhash-rust" => |_, b| {
            black_box(xxhash_rust::xxh3::xxh3_64(black_box(b)));
        },
        "twox-hash" => |_, b| {
            black_box(twox_hash::XxHash3_64::oneshot(black_box(b)));
        },
        "hash" => |w, _| {
            black_box(black_box(&*w).hash());
        },
        "step" => |w, _| w.step(black_box(&[])),
        "step+hash" => |w, _| {
            w.step(black_box(&[]));
            black_box(w.hash());
        },
        "scalar+hash" => |w, _| {
            w.step_scalar(black_box(&[]));
            black_box(w.hash());
        },
        c => {
            eprintln!("step_cost: unknown CASE {c:?} (see the source's header)");
            return ExitCode::from(2);
        }
    };
    for _ in 0..n {
        run(phases.world(), &buf);
    }
    ExitCode::SUCCESS
}
