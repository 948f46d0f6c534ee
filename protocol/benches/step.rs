//! One step plus the world hash, beside its baselines measured in the same run: XXH3-64 of
//! a buffer the size of the world's snapshot by two implementations (xxhash-rust, SSE2
//! chosen at compile time; twox-hash, AVX2 or SSE2 chosen at run time, which the world
//! hash uses on CPUs with neither AVX-512F nor AVX2; `benches/xxh3.rs` times the world
//! hash's own XXH3 against it), the world hash alone (snapshot bytes + XXH3),
//! the step alone, step + hash with the fastest kernel (what `World::step` runs) and with
//! each other kernel this CPU has (down to the scalar pass). Four worlds: 64 and 24
//! bodies, 3D and 2D. Then `Replay::verify` on `testdata/test-10000.ostm`.
//!
//! The machine is shared with other work, which takes the core away now and then: each of
//! criterion's samples is therefore timed by its fastest slice of at most 256 iterations,
//! scaled to the sample's iterations (`fastest_slice`), so that a slice that was preempted
//! does not count. Every benchmark here, baselines included, is timed that way.
//!
//! Run: `cargo bench -p ostm-protocol --bench step`. Results go in `docs/performance.md`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ostm_protocol::sim::world::{Dims, Kernel};
use ostm_protocol::{Replay, World};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;
use support::{fastest_slice, world, Phases};

mod support;

/// Times `f`, one step of the world whose turn it is (see [`Phases`]).
fn bench_steps(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    fresh: &World,
    name: &str,
    f: impl Fn(&mut World),
) {
    let mut phases = Phases::new(fresh);
    g.bench_function(name, |b| {
        b.iter_custom(|iters| fastest_slice(iters, || f(phases.world())))
    });
}

fn step(c: &mut Criterion) {
    for (dims, bodies) in [
        (Dims::Three, 64),
        (Dims::Three, 24),
        (Dims::Two, 64),
        (Dims::Two, 24),
    ] {
        let fresh = world(dims, bodies);
        let len = fresh.snapshot_len();
        let mut g = c.benchmark_group(format!("step_{bodies}_bodies_{}d", dims as u8));
        g.throughput(Throughput::Elements(1));

        let buf: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
        assert_eq!(
            xxhash_rust::xxh3::xxh3_64(&buf),
            twox_hash::XxHash3_64::oneshot(&buf)
        );
        g.bench_function(
            format!("baseline: xxh3_64 of {len} bytes (xxhash-rust)"),
            |b| {
                b.iter_custom(|n| {
                    fastest_slice(n, || {
                        black_box(xxhash_rust::xxh3::xxh3_64(black_box(&buf)));
                    })
                })
            },
        );
        g.bench_function(
            format!("baseline: xxh3_64 of {len} bytes (twox-hash)"),
            |b| {
                b.iter_custom(|n| {
                    fastest_slice(n, || {
                        black_box(twox_hash::XxHash3_64::oneshot(black_box(&buf)));
                    })
                })
            },
        );
        g.bench_function("world hash (snapshot bytes + xxh3)", |b| {
            b.iter_custom(|n| {
                fastest_slice(n, || {
                    black_box(black_box(&fresh).hash());
                })
            })
        });

        bench_steps(&mut g, &fresh, "step without hash", |w| {
            w.step(black_box(&[]))
        });
        bench_steps(&mut g, &fresh, "step + hash", |w| {
            w.step(black_box(&[]));
            black_box(w.hash());
        });
        // The kernels `step` does not use, slowest last (the scalar pass on every CPU).
        for k in Kernel::ALL {
            if k == Kernel::best() || !k.available() {
                continue;
            }
            bench_steps(
                &mut g,
                &fresh,
                &format!("step + hash, {} kernel", k.name()),
                |w| {
                    w.step_with(k, black_box(&[]));
                    black_box(w.hash_with(k));
                },
            );
        }
        g.finish();
    }
}

fn verify(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/test-10000.ostm");
    let replay = Replay::read_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Elements(replay.step_count() as u64));
    g.sample_size(20);
    g.bench_function("test-10000.ostm (10 000 steps, 24..64 bodies)", |b| {
        b.iter_custom(|n| {
            fastest_slice(n, || {
                black_box(replay.verify(|_| {}));
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = step, verify
}
criterion_main!(benches);
