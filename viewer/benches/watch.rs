//! What watching costs the proof, and how fast the page is: `scripts/bench-watch` runs
//! this (`cargo bench -p ostm-viewer --bench watch`, release binaries) and prints the
//! figures docs/performance.md quotes. Everything is measured in this one run:
//!
//! 1. Verified steps/s against a fresh `ostm-host serve --rate max` (a generated 3D world
//!    of 64 bodies), `attach` (the baseline) and `watch` with headless Chromium on its page
//!    (occupancy overlay), alternating, RUNS runs of SECS seconds each: the viewer's own
//!    last `--json` status rate.
//! 2. During each watch run, the frames the page drew per second (`window.ostm.drawn`
//!    over the run's second half); then the same with a host serving a replay of 64
//!    bodies that all stay (generated here) at 6000 steps/s; beside the browser's display
//!    refresh measured on the same page (requestAnimationFrame callbacks per second).
//! 3. A replay of SEEK_STEPS steps (generated here, 3D, 24 bodies): how long `watch FILE`
//!    takes to build its keyframes in memory, then for 40 steps spread over the replay the
//!    time from the page's `show` request to the frame in the page (`window.ostm.shownIn`),
//!    with keyframes in memory and from the index file beside it; the baseline is
//!    `ostm-viewer render FILE --step N` for the middle step (which runs from step 0).
//!
//! Environment: OSTM_BENCH_SECS (10), OSTM_BENCH_RUNS (3), OSTM_BENCH_SEEK_STEPS (16777216),
//! OSTM_BENCH_BROWSER_NICE (0: chromedriver and Chromium at this process's priority).

#[path = "../tests/browser/mod.rs"]
mod browser;
#[path = "../tests/live_support/mod.rs"]
mod live_support;

use browser::{watch, Browser};
use live_support::Host;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The generated world both viewers watch: 3D, 64 bodies.
const HOST: [&str; 8] = [
    "--rate", "max", "--dims", "3", "--bodies", "64", "--seed", "64",
];

/// The last `status` rate a `--json` viewer printed before it was stopped.
fn last_rate(stdout: &str) -> f64 {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "status")
        .filter_map(|v| v["rate"].as_f64())
        .next_back()
        .unwrap_or_else(|| panic!("no status line in {stdout}"))
}

fn attach_run(secs: u64) -> f64 {
    let host = Host::start(&HOST);
    let mut p = ostm_testkit::Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_ostm-viewer")).args(["attach", &host.addr, "--json"]),
    );
    p.wait_line(|l| l.contains("\"attached\""));
    std::thread::sleep(Duration::from_secs(secs));
    p.signal("INT");
    let out = p.finish();
    last_rate(&String::from_utf8_lossy(&out.stdout))
}

/// One watch run with the browser on its page, against a host started with `host`:
/// (verified steps/s, page frames/s, alive bodies in the last frame).
async fn watch_run(host: &[&str], secs: u64, b: &Browser) -> (f64, f64, u64) {
    let host = Host::start(host);
    let (mut p, url) = watch(&[&host.addr, "--json"]);
    p.wait_line(|l| l.contains("\"attached\""));
    b.client.goto(&url).await.expect("the page");
    b.until("a frame", "return window.ostm.frame ? 1 : 0;", |v| v == 1)
        .await;
    b.click(r#"input[name="overlay"][value="occupancy"]"#).await;
    tokio::time::sleep(Duration::from_secs(secs / 2)).await;
    let d0 = b.js("return window.ostm.drawn;").await.as_u64().unwrap();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs - secs / 2)).await;
    let d1 = b.js("return window.ostm.drawn;").await.as_u64().unwrap();
    let fps = (d1 - d0) as f64 / t0.elapsed().as_secs_f64();
    let last = b
        .js("return [window.ostm.frame.alive, window.ostm.frame.overlay];")
        .await;
    assert_eq!(last[1], "occupancy");
    p.signal("INT");
    let out = p.finish();
    (
        last_rate(&String::from_utf8_lossy(&out.stdout)),
        fps,
        last[0].as_u64().unwrap_or(0),
    )
}

/// requestAnimationFrame callbacks per second in the page, over 3 s.
async fn refresh_rate(b: &Browser) -> f64 {
    let n = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1]; let n = 0; const t0 = performance.now(); \
             function f(t) { n++; if (t - t0 < 3000) requestAnimationFrame(f); else done(n / ((t - t0) / 1000)); } \
             requestAnimationFrame(f);",
            vec![],
        )
        .await
        .expect("rAF count");
    n.as_f64().unwrap_or(0.0)
}

/// Writes a replay of `steps` steps (3D, `bodies` bodies, an impulse every 100 steps,
/// nothing spawned or removed).
fn long_replay(path: &std::path::Path, bodies: u8, steps: u32) {
    ostm_protocol::testdata::write_moving_replay(path, bodies, steps).expect("the replay");
}

/// Opens `url` and shows 40 steps spread over `0..=steps`; returns the times (ms) from each
/// show to its frame in the page, sorted.
async fn seek_times(b: &Browser, url: &str, steps: u64) -> Vec<f64> {
    b.client.goto(url).await.expect("the page");
    b.until(
        "the first frame",
        "return window.ostm.frame ? 1 : 0;",
        |v| v == 1,
    )
    .await;
    let mut times = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let step = x % (steps + 1);
        b.js(&format!(
            "const i = document.getElementById('step-input'); i.value = '{step}'; \
             i.dispatchEvent(new Event('change')); return true;"
        ))
        .await;
        let v = b
            .until(
                "the step",
                "const s = window.ostm; return s.frame && !s.pending ? [s.frame.step, s.shownIn, s.frame.check] : null;",
                |v| v[0] == step,
            )
            .await;
        assert_eq!(v[2], "matches_row", "step {step}");
        times.push(v[1].as_f64().unwrap());
    }
    times.sort_by(f64::total_cmp);
    times
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let secs = env("OSTM_BENCH_SECS", 10).max(2);
    let runs = env("OSTM_BENCH_RUNS", 3).max(1);
    let seek_steps = env("OSTM_BENCH_SEEK_STEPS", 16_777_216) as u32;
    let nice = env("OSTM_BENCH_BROWSER_NICE", 0) as u32;
    println!("the browser runs {nice} nice steps down");
    let b = Browser::start_nice(1500, 1150, nice).await;
    let (mut attach, mut watched, mut fps_max, mut alive) = (vec![], vec![], vec![], vec![]);
    for r in 0..runs {
        let a = attach_run(secs);
        let (w, f, n) = watch_run(&HOST, secs, &b).await;
        println!("run {r}: attach {a:.0} steps/s, watch {w:.0} steps/s, page {f:.1} frames/s, {n} bodies alive");
        attach.push(a);
        watched.push(w);
        fps_max.push(f);
        alive.push(n);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // 64 bodies that all stay: a replay served at 6000 steps/s (100 worlds a refresh).
    let all = dir.path().join("sixty-four.ostm");
    long_replay(&all, 64, (secs * 6000 * 2) as u32);
    let all = all.to_str().unwrap().to_string();
    let served = ["--replay", &all, "--rate", "6000"];
    let (mut fps64, mut alive64) = (vec![], vec![]);
    for r in 0..runs {
        let (_, f, n) = watch_run(&served, secs, &b).await;
        println!("run {r}: 64-body replay at 6000 steps/s: page {f:.1} frames/s, {n} bodies alive");
        fps64.push(f);
        alive64.push(n);
    }
    let refresh = refresh_rate(&b).await;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let tenth = |v: &[f64]| {
        v.iter()
            .map(|f| (f * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    };
    println!(
        "\nverified steps/s (mean of {runs} runs of {secs} s): attach {:.0}, watch {:.0}: watch/attach = {:.3}",
        mean(&attach),
        mean(&watched),
        mean(&watched) / mean(&attach)
    );
    println!(
        "page frames/s, occupancy overlay, --rate max host: {:.1} (runs {:?}; live bodies {alive:?})",
        mean(&fps_max),
        tenth(&fps_max)
    );
    println!(
        "page frames/s, occupancy overlay, 64-body replay at 6000 steps/s: {:.1} (runs {:?}; live bodies {alive64:?})",
        mean(&fps64),
        tenth(&fps64)
    );
    println!("display refresh (requestAnimationFrame callbacks/s on the page): {refresh:.1}");

    let path = dir.path().join("long.ostm");
    let t = Instant::now();
    long_replay(&path, 24, seek_steps);
    println!(
        "\nreplay of {seek_steps} steps written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let file = path.to_str().unwrap().to_string();
    let t = Instant::now();
    let (p, url) = watch(&[&file]);
    let built = t.elapsed().as_secs_f64();
    let mem = seek_times(&b, &url, seek_steps as u64).await;
    p.signal("INT");
    p.finish();
    let out = Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
        .args(["index", &file])
        .output()
        .expect("index");
    assert!(out.status.success());
    let (p, url) = watch(&[&file]);
    let disk = seek_times(&b, &url, seek_steps as u64).await;
    p.signal("INT");
    p.finish();
    let mid = seek_steps as u64 / 2 + 4000;
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
        .args(["render", &file, "--step", &mid.to_string(), "-o"])
        .arg(dir.path().join("mid.svg"))
        .output()
        .expect("render");
    assert!(out.status.success());
    let render = t.elapsed().as_secs_f64() * 1000.0;
    println!("watch FILE: keyframes built in memory and the URL printed after {built:.2} s");
    for (name, t) in [("in memory", &mem), ("index file", &disk)] {
        println!(
            "show a step, {name}: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms (40 steps)",
            pct(t, 0.5),
            pct(t, 0.9),
            pct(t, 1.0)
        );
    }
    println!("baseline: render FILE --step {mid} (runs from step 0): {render:.0} ms");
    b.close().await;
}
