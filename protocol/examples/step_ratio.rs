//! Step + hash against XXH3-64 of a buffer the snapshot's size, timed in turn in one process:
//! the ratio of the speed work's first goal (docs/performance.md, "Where the speed goals
//! stand"), measured so that the machine's changing speed moves both sides alike.
//!
//! `cargo bench -p ostm-protocol --bench step` times each case for seconds on end, one after
//! the other; on a shared machine one case can run while the core is fast and the next while
//! it is slow, which moves a single run's ratio by 20 % and more. Here each round times
//! each case (step + hash, xxhash-rust's XXH3, the aim's baseline, and twox-hash's) is timed
//! in slices of `CALLS` calls, `TURN` slices of a case in a row, the cases in turn, and the
//! figures are the tenth percentile over all slices of the time per call of each, and the
//! median over the turns of the ratio of their tenth percentiles. Step + hash is timed with
//! every kernel this CPU has (`World::step_with` and `World::hash_with`, so that a row is
//! what a CPU with only that kernel would run; `World::step` uses the first row's), each on
//! its own copy of the worlds. A fifth row, `3D 64 inputs`, steps the same world through a
//! run that takes the scenario's inputs (`Phases::with_inputs`), as a live stream does: an
//! input that writes a body makes the kernel's lanes of its chunk stale for a step.
//!
//! A case runs `TURN` slices in a row, not one, because code that ran just before can
//! slow it: timed a slice each in turn with step + hash on 512-bit vectors, xxhash-rust's
//! XXH3 took 82 to 85 ns where it takes 76 on its own, and the ratio came out 0.1 too low
//! (docs/performance.md, "Sixteen bodies in 32-bit lanes, and XXH3, on AVX-512").
//!
//! `cargo run --release -p ostm-protocol --example step_ratio -- [SLICES]` (default 10 000
//! slices of 200 calls of each case, ten turns, a few seconds a world; `--json` prints one
//! JSON object per line, snake_case keys).
//! Exit 0, or 2 on a bad argument.

use ostm_protocol::sim::world::{Dims, Kernel};
use ostm_protocol::World;
use std::hint::black_box;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

#[path = "../benches/support/mod.rs"]
mod support;

/// Calls per timed slice.
const CALLS: u32 = 200;
/// Slices of one case in a row (a turn): about 3 to 60 ms, long past the time a core takes
/// to leave the state that 512-bit code puts it in.
const TURN: u32 = 1_000;

fn main() -> ExitCode {
    let mut rounds = 10_000u32; // slices of each case
    let mut json = false;
    for a in std::env::args().skip(1) {
        match (a.as_str(), a.parse::<u32>()) {
            ("--json", _) => json = true,
            (_, Ok(n @ 1..)) => rounds = n,
            _ => {
                eprintln!(
                    "step_ratio: expected SLICES (a whole number, at least 1) or --json, found {a:?}"
                );
                return ExitCode::from(2);
            }
        }
    }
    // A reader that has gone (`| head`) ends the run quietly.
    let mut out = std::io::stdout().lock();
    if !json {
        let header = "world | kernel | xxhash-rust ns | twox-hash ns | step + hash ns \
            | ÷ xxhash-rust (p10s) | ÷ xxhash-rust (median of turns) | ÷ twox-hash (p10s)\n\
            ---|---|---|---|---|---|---|---";
        if writeln!(out, "{header}").is_err() {
            return ExitCode::SUCCESS;
        }
    }
    let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.available()).collect();
    for (dims, bodies, inputs) in [
        (Dims::Three, 64u8, false),
        (Dims::Three, 24, false),
        (Dims::Two, 64, false),
        (Dims::Two, 24, false),
        (Dims::Three, 64, true),
    ] {
        let r = measure(dims, bodies, inputs, rounds, &kernels);
        let with = if inputs { " inputs" } else { "" };
        let name = format!("{}D {bodies}{with}", dims.axes());
        for k in &r.kernels {
            let (x, m, t) = (
                k.step_hash / r.xxhash_rust,
                k.median_ratio,
                k.step_hash / r.twox,
            );
            let kernel = k.kernel.name();
            let line = if json {
                format!(
                    "{{\"world\":\"{name}\",\"kernel\":\"{kernel}\",\"slices\":{rounds},\
                     \"calls\":{CALLS},\"xxhash_rust_ns\":{:.1},\"twox_hash_ns\":{:.1},\
                     \"step_hash_ns\":{:.1},\"ratio_xxhash_rust\":{x:.3},\
                     \"median_turn_ratio_xxhash_rust\":{m:.3},\"ratio_twox_hash\":{t:.3}}}",
                    r.xxhash_rust, r.twox, k.step_hash
                )
            } else {
                format!(
                    "{name} | {kernel} | {:.1} | {:.1} | {:.1} | {x:.2} | {m:.2} | {t:.2}",
                    r.xxhash_rust, r.twox, k.step_hash
                )
            };
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return ExitCode::SUCCESS;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Tenth-percentile ns per call of each baseline, and of step + hash with each kernel.
struct Figures {
    xxhash_rust: f64,
    twox: f64,
    kernels: Vec<KernelFigures>,
}

/// Step + hash with one kernel: its tenth-percentile ns per call, and the median of the
/// turns' ratios of it to xxhash-rust.
struct KernelFigures {
    kernel: Kernel,
    step_hash: f64,
    median_ratio: f64,
}

fn measure(dims: Dims, bodies: u8, inputs: bool, rounds: u32, kernels: &[Kernel]) -> Figures {
    // The bench's worlds (`benches/support`), one set for each kernel; with `inputs`, the
    // run's steps take the scenario's inputs, as a live stream's do.
    let fresh = support::world(dims, bodies);
    let mut phases: Vec<support::Phases> = kernels
        .iter()
        .map(|_| {
            if inputs {
                support::Phases::with_inputs(&fresh, 1)
            } else {
                support::Phases::new(&fresh)
            }
        })
        .collect();
    let buf: Vec<u8> = (0..fresh.snapshot_len()).map(|i| (i * 31) as u8).collect();
    let per_call = |t: Instant| t.elapsed().as_nanos() as f64 / f64::from(CALLS);
    // Each case's slices, all and in the current turn.
    let (mut xr, mut tw) = (vec![], vec![]);
    let mut sh: Vec<Vec<f64>> = kernels.iter().map(|_| vec![]).collect();
    let mut ratio: Vec<Vec<f64>> = kernels.iter().map(|_| vec![]).collect();
    for turn in 0..rounds.div_ceil(TURN) {
        let slices = TURN.min(rounds - turn * TURN) as usize;
        let (at_x, at_s) = (xr.len(), sh[0].len());
        for (i, &k) in kernels.iter().enumerate() {
            for _ in 0..slices {
                let t = Instant::now();
                for _ in 0..CALLS {
                    let (w, ops): (&mut World, _) = phases[i].turn();
                    w.step_with(k, black_box(ops));
                    black_box(w.hash_with(k));
                }
                sh[i].push(per_call(t));
            }
        }
        for _ in 0..slices {
            let t = Instant::now();
            for _ in 0..CALLS {
                black_box(xxhash_rust::xxh3::xxh3_64(black_box(&buf)));
            }
            xr.push(per_call(t));
        }
        for _ in 0..slices {
            let t = Instant::now();
            for _ in 0..CALLS {
                black_box(twox_hash::XxHash3_64::oneshot(black_box(&buf)));
            }
            tw.push(per_call(t));
        }
        let x = quantile(&mut xr[at_x..].to_vec(), 0.1);
        for (r, s) in ratio.iter_mut().zip(&sh) {
            r.push(quantile(&mut s[at_s..].to_vec(), 0.1) / x);
        }
    }
    Figures {
        xxhash_rust: quantile(&mut xr, 0.1),
        twox: quantile(&mut tw, 0.1),
        kernels: kernels
            .iter()
            .zip(sh.iter_mut().zip(ratio.iter_mut()))
            .map(|(&kernel, (s, r))| KernelFigures {
                kernel,
                step_hash: quantile(s, 0.1),
                median_ratio: quantile(r, 0.5),
            })
            .collect(),
    }
}

/// The `q` quantile of `v` (sorted in place), the element at index `floor(q * len)`.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}
