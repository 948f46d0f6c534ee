//! One step plus the world hash for 64 bodies in 3D, with its baselines measured in the
//! same run (hashing a 2060-byte buffer alone, encoding and hashing, a step alone), and
//! `Replay::verify` on `testdata/test-10000.ostm`.
//!
//! Run: `cargo bench -p ostm-protocol --bench step`. Results go in `docs/performance.md`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ostm_protocol::world::{Dims, Setup, MAX_SNAPSHOT_BYTES};
use ostm_protocol::{Replay, World};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

/// A 3D world with all 64 slots alive, run 100 steps so bodies are mid-flight.
fn world_64() -> World {
    let mut w = World::new(
        Setup {
            dims: Dims::Three,
            bodies: 64,
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
    let mut g = c.benchmark_group("step_64_bodies_3d");
    g.throughput(Throughput::Elements(1));

    let buf: Vec<u8> = (0..MAX_SNAPSHOT_BYTES).map(|i| (i * 31) as u8).collect();
    assert_eq!(buf.len(), 2060);
    g.bench_function("baseline: xxh3_64 of 2060 bytes", |b| {
        b.iter(|| xxhash_rust::xxh3::xxh3_64(black_box(&buf)))
    });

    let w = world_64();
    g.bench_function("baseline: world hash (encode + xxh3)", |b| {
        b.iter(|| black_box(&w).hash())
    });

    // The world keeps stepping across iterations; every tenth thousand steps it is put
    // back to its mid-flight state so that bodies do not all come to rest.
    let fresh = world_64();
    let mut w = fresh.clone();
    let mut n = 0u32;
    g.bench_function("step without hash", |b| {
        b.iter(|| {
            n += 1;
            if n % 10_000 == 0 {
                w.clone_from(&fresh);
            }
            w.step(black_box(&[]));
        })
    });
    let mut w = fresh.clone();
    g.bench_function("step + hash", |b| {
        b.iter(|| {
            n += 1;
            if n % 10_000 == 0 {
                w.clone_from(&fresh);
            }
            w.step(black_box(&[]));
            black_box(w.hash())
        })
    });
    g.finish();
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
