//! Seek against a full replay, in the same run, on a long replay generated here.
//!
//! `cargo bench -p ostm-protocol --bench seek` (OSTM_BENCH_SEEK_STEPS sets the length,
//! default 1 048 576; the replay and its index are written to a temporary directory and
//! removed afterwards). Both measure reaching the same step, the middle of the replay:
//! `full_replay` runs it from step 0, `seek` restores the nearest indexed keyframe
//! (every 4096 steps) and runs on.

use criterion::{criterion_group, criterion_main, Criterion};
use ostm_protocol::format::seek::{default_index_path, run_to, seek, write_index, DEFAULT_EVERY};
use std::hint::black_box;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let steps: u32 = std::env::var("OSTM_BENCH_SEEK_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("long.ostm");
    // 3D, 24 bodies, an impulse on one body every 100 steps so the world keeps moving.
    ostm_protocol::sim::testdata::write_moving_replay(&path, 24, steps).expect("the replay");
    let index = default_index_path(&path);
    write_index(&path, &index, DEFAULT_EVERY, |_| {}).expect("index");
    // The middle, plus a little so the seek runs on from its keyframe.
    let target = steps as u64 / 2 + 4000;
    assert_eq!(
        seek(&path, &index, target).expect("seek").world,
        run_to(&path, target).expect("run")
    );

    let mut g = c.benchmark_group(format!("seek_{steps}_steps"));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("full_replay", |b| {
        b.iter(|| black_box(run_to(&path, target).expect("run")))
    });
    g.bench_function("seek", |b| {
        b.iter(|| black_box(seek(&path, &index, target).expect("seek")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
