//! The world hash's XXH3-64 written here (`xxh3_64_with`: the long-input loop on 512-bit and
//! on 256-bit vectors) against twox-hash's (`XxHash3_64::oneshot`, AVX2 or SSE2 chosen at run
//! time), on the snapshot bytes of the bench's 3D world of 64 bodies (2 060 bytes), in one
//! criterion run with the cases alternated: `ROUNDS` rounds, each timing every case in turn
//! (criterion's warm-up and samples of one case, then the next), so that a machine whose
//! speed changes moves every case alike. Each sample is timed by its fastest slice
//! (`support::fastest_slice`). A control case times twox-hash a second time in each round:
//! its ratio to the first is the noise.
//!
//! The 256-bit path is chosen by `xxh3_64_with(Kernel::Avx2, ..)`, which runs it on any CPU
//! with AVX2, whether or not it also has AVX-512F, as a CPU with AVX2 only runs the world
//! hash. twox-hash has no 512-bit path: it takes AVX2 on both.
//!
//! At the end the bench prints, for each case, its median time per call over the rounds
//! and its ratio to twox-hash's in the same round: the median of the rounds' ratios and
//! their spread (quartiles, lowest and highest). Below 1 is faster than twox-hash.
//!
//! Run: `cargo bench -p ostm-protocol --bench xxh3` (about three minutes).

use criterion::{criterion_group, criterion_main, Criterion};
use ostm_protocol::sim::world::{xxh3_64_with, Dims, Kernel};
use std::cell::RefCell;
use std::hint::black_box;
use std::time::Duration;
use support::{fastest_slice, world};

#[allow(dead_code)] // Only the world and the sample timing are used here.
mod support;

/// Rounds of every case in turn.
const ROUNDS: usize = 30;
/// Criterion's samples of a case in a round.
const SAMPLES: usize = 20;

/// A way to compute XXH3-64 of the bytes: twox-hash's (the baseline), twox-hash's again
/// (the control: its ratio to the baseline is the noise), or the one written here on the
/// vectors of a kernel.
#[derive(Clone, Copy)]
enum Case {
    TwoxHash,
    Control,
    Written(Kernel),
}

impl Case {
    fn name(self) -> String {
        match self {
            Case::TwoxHash => "twox-hash".to_string(),
            Case::Control => "twox-hash again (the noise)".to_string(),
            Case::Written(k) => format!("written here, {}", k.name()),
        }
    }

    fn hash(self, bytes: &[u8]) -> u64 {
        match self {
            Case::TwoxHash | Case::Control => twox_hash::XxHash3_64::oneshot(bytes),
            Case::Written(k) => xxh3_64_with(k, bytes),
        }
    }
}

/// The median of `v` (sorted in place); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The value at fraction `q` of sorted, non-empty `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

fn xxh3(c: &mut Criterion) {
    let bytes = world(Dims::Three, 64).snapshot();
    let mut cases = vec![Case::TwoxHash, Case::Control];
    cases.extend(
        [Kernel::Avx512, Kernel::Avx2]
            .into_iter()
            .filter(|k| k.available())
            .map(Case::Written),
    );
    let want = twox_hash::XxHash3_64::oneshot(&bytes);
    for &case in &cases {
        assert_eq!(case.hash(&bytes), want, "{}", case.name());
    }
    if cases.len() == 2 {
        println!("xxh3: this CPU has neither AVX-512F nor AVX2: nothing written here to time");
    }

    // ns a call of each sample, by round and case.
    let samples = RefCell::new(vec![vec![Vec::<f64>::new(); cases.len()]; ROUNDS]);
    let mut g = c.benchmark_group(format!("xxh3_64 of {} bytes", bytes.len()));
    for round in 0..ROUNDS {
        for (i, &case) in cases.iter().enumerate() {
            g.bench_function(format!("round {round:02}, {}", case.name()), |b| {
                b.iter_custom(|n| {
                    let t = fastest_slice(n, || {
                        black_box(case.hash(black_box(&bytes)));
                    });
                    samples.borrow_mut()[round][i].push(t.as_nanos() as f64 / n as f64);
                    t
                })
            });
        }
    }
    g.finish();

    // Criterion's warm-up calls `iter_custom` too, with few calls at first: only the last
    // `SAMPLES` calls, the measured samples, count.
    let per_round: Vec<Vec<Option<f64>>> = samples
        .into_inner()
        .into_iter()
        .map(|round| {
            round
                .into_iter()
                .map(|mut s| {
                    let kept = s.len().saturating_sub(SAMPLES);
                    median(&mut s[kept..])
                })
                .collect()
        })
        .collect();
    println!();
    println!(
        "case | ns a call (median of the rounds) | ÷ twox-hash: median of the rounds \
         | quartiles | lowest, highest | rounds"
    );
    println!("---|---|---|---|---|---");
    for (i, case) in cases.iter().enumerate() {
        let mut ns: Vec<f64> = per_round.iter().filter_map(|r| r[i]).collect();
        let mut ratios: Vec<f64> = per_round
            .iter()
            .filter_map(|r| Some(r[i]? / r[0]?))
            .collect();
        let (Some(ns), Some(ratio)) = (median(&mut ns), median(&mut ratios)) else {
            continue; // Filtered out by the command line.
        };
        println!(
            "{} | {ns:.1} | {ratio:.3} | {:.3} to {:.3} | {:.3}, {:.3} | {}",
            case.name(),
            quantile(&ratios, 0.25),
            quantile(&ratios, 0.75),
            ratios[0],
            ratios[ratios.len() - 1],
            ratios.len()
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(SAMPLES)
        .nresamples(10_000)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(500));
    targets = xxh3
}
criterion_main!(benches);
