//! One step plus the world hash, beside its baselines measured in the same run: XXH3-64 of
//! a buffer the size of the world's snapshot, by two implementations (xxhash-rust, SSE2
//! chosen at compile time; twox-hash, AVX2 or SSE2 chosen at run time, which the world
//! hash uses), the world hash alone (snapshot bytes + XXH3), the step alone, and step +
//! hash with the vector kernel and with the scalar pass. Four worlds: 64 and 24 bodies,
//! 3D and 2D. Then `Replay::verify` on `testdata/test-10000.ostm`.
//!
//! Run: `cargo bench -p ostm-protocol --bench step`. Results go in `docs/performance.md`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ostm_protocol::world::{Dims, Setup};
use ostm_protocol::{Replay, World};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

/// A world with `bodies` slots alive, run 100 steps so bodies are mid-flight.
fn world(dims: Dims, bodies: u8) -> World {
    let mut w = World::new(
        Setup {
            dims,
            bodies,
            seed: 1,
        },
        None,
    );
    for _ in 0..100 {
        w.step(&[]);
    }
    w
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
            |b| b.iter(|| xxhash_rust::xxh3::xxh3_64(black_box(&buf))),
        );
        g.bench_function(
            format!("baseline: xxh3_64 of {len} bytes (twox-hash)"),
            |b| b.iter(|| twox_hash::XxHash3_64::oneshot(black_box(&buf))),
        );
        g.bench_function("world hash (snapshot bytes + xxh3)", |b| {
            b.iter(|| black_box(&fresh).hash())
        });

        // The world keeps stepping across iterations; every ten thousandth step it is put
        // back to its mid-flight state so that bodies do not all come to rest.
        let mut n = 0u32;
        let mut run = |name: &str, g: &mut criterion::BenchmarkGroup<_>, f: fn(&mut World)| {
            let mut w = fresh.clone();
            g.bench_function(name, |b| {
                b.iter(|| {
                    n += 1;
                    if n.is_multiple_of(10_000) {
                        w.clone_from(&fresh);
                    }
                    f(&mut w);
                })
            });
        };
        run("step without hash", &mut g, |w| w.step(black_box(&[])));
        run("step + hash", &mut g, |w| {
            w.step(black_box(&[]));
            black_box(w.hash());
        });
        run("step + hash, scalar step", &mut g, |w| {
            w.step_scalar(black_box(&[]));
            black_box(w.hash());
        });
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
        b.iter(|| black_box(replay.verify(|_| {})))
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
