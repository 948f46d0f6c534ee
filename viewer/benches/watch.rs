//! What watching costs the proof, and how fast the page is: `scripts/bench-watch` runs
//! this (`cargo bench -p ostm-viewer --bench watch`, release binaries) and prints the
//! figures docs/performance.md quotes. Everything is measured in this one run:
//!
//! 1. Verified steps/s against a fresh `ostm-host serve --rate max` (a generated 3D world
//!    of 64 bodies), `attach` (the baseline) and `watch` with headless Chromium on its page
//!    (occupancy overlay), alternating, RUNS runs of SECS seconds each: the viewer's own
//!    last `--json` status rate. watch / attach is given as the ratio of the means, of
//!    the medians, and for each pair of runs (with their median), since one run of
//!    `attach` alone differs from the next by 15 to 35 % on this machine.
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
//! OSTM_BENCH_BROWSER_NICE (0: chromedriver and Chromium at this process's priority),
//! OSTM_BENCH_VERIFIER_NICE (unset: each viewer's default `--verifier-nice`; set: that
//! value for both `attach` and `watch`).

#[path = "../tests/browser/mod.rs"]
mod browser;
#[path = "../tests/live_support/mod.rs"]
mod live_support;

use browser::{watch, Browser};
use live_support::Host;
use ostm_testkit::Proc;
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

/// `--verifier-nice N` for both viewers when OSTM_BENCH_VERIFIER_NICE is set (else each
/// runs with its default).
fn verifier_nice() -> Vec<String> {
    match std::env::var("OSTM_BENCH_VERIFIER_NICE") {
        Ok(n) => vec!["--verifier-nice".into(), n],
        Err(_) => vec![],
    }
}

/// Reads a `--json` viewer's lines as they come, for `secs`, on a thread of its own; gives
/// the viewer back with its verified steps per second over the second half of that time
/// (from the first status line after the half to the last, by when each came), like the
/// page's frames: the steady pace, not the session's average since its start.
fn steady_rate(mut p: Proc, secs: u64) -> std::thread::JoinHandle<(Proc, f64)> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let (half, end) = (
            start + Duration::from_secs(secs) / 2,
            start + Duration::from_secs(secs),
        );
        let mut first: Option<(Instant, u64)> = None;
        let mut last: Option<(Instant, u64)> = None;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            let Some(line) = p.line_within(left) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let (Some("status"), Some(n)) = (v["event"].as_str(), v["verified"].as_u64()) else {
                continue;
            };
            let now = Instant::now();
            if now >= half {
                first.get_or_insert((now, n));
                last = Some((now, n));
            }
        }
        let rate = match (first, last) {
            (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
            }
            _ => panic!("fewer than two status lines in the second half of {secs} s"),
        };
        (p, rate)
    })
}

fn attach_run(secs: u64) -> f64 {
    let host = Host::start(&HOST);
    let mut p = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
            .args(["attach", &host.addr, "--json"])
            .args(verifier_nice()),
    );
    p.wait_line(|l| l.contains("\"attached\""));
    let (p, rate) = steady_rate(p, secs).join().expect("the reading thread");
    p.signal("INT");
    p.finish();
    rate
}

/// CPU seconds used so far by the process or thread whose /proc stat file is `stat`.
fn cpu_in(stat: &str) -> f64 {
    let stat = std::fs::read_to_string(stat).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// CPU seconds used so far by the process `pid` (all its threads).
fn cpu_of(pid: u32) -> f64 {
    cpu_in(&format!("/proc/{pid}/stat"))
}

/// The parent of process `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds used so far by `root` and every process under it (the browser's processes
/// under chromedriver).
fn tree_cpu(root: u32) -> f64 {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.into_iter()
        .filter(|&p| {
            let mut at = Some(p);
            while let Some(q) = at {
                if q == root {
                    return true;
                }
                at = parent_of(q).filter(|&up| up > 1);
            }
            false
        })
        .map(cpu_of)
        .sum()
}

/// CPU seconds used so far by the threads of `pid` whose name starts with `prefix`.
fn threads_cpu(pid: u32, prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|c| c.starts_with(prefix))
        })
        .map(|tid| cpu_in(&format!("/proc/{pid}/task/{tid}/stat")))
        .sum()
}

/// What the page did over the second half of a watch run.
struct Page {
    /// Frames drawn per second.
    fps: f64,
    /// Milliseconds per frame spent putting the picture into the page (picture.js).
    set_ms: f64,
    /// Frames patched into the picture shown, and frames that replaced it whole.
    patched: u64,
    replaced: u64,
    /// Live bodies in the last frame.
    alive: u64,
    /// CPU of the browser's processes, per second and per frame drawn (ms).
    browser_cores: f64,
    browser_ms: f64,
    /// CPU of the viewer's page server threads (making frames), per frame (ms).
    server_ms: f64,
    /// The frame gap the status bar showed at the end (docs/watch.md, "Frames yield to
    /// the proof"; 0: none).
    gap_ms: u64,
}

impl Page {
    fn line(&self) -> String {
        format!(
            "{:.1} frames/s, {} bodies alive; per frame: {:.2} ms in picture.set ({} patched, {} replaced), \
             browser CPU {:.1} ms ({:.2} cores), frame-making {:.2} ms, frame gap {} ms",
            self.fps,
            self.alive,
            self.set_ms,
            self.patched,
            self.replaced,
            self.browser_ms,
            self.browser_cores,
            self.server_ms,
            self.gap_ms
        )
    }
}

/// The page's counters: frames drawn, ms in picture.set, frames patched, replaced.
const COUNTERS: &str = "const s = window.ostm; \
    return [s.drawn, s.setMs, s.picture.patched, s.picture.replaced];";

/// One watch run with the browser on its page, against a host started with `host`:
/// verified steps/s, and what the page did.
/// `whole`: the page replaces the whole picture at every frame (`picture.whole`, the
/// drawing before patching) instead of patching it.
async fn watch_run(host: &[&str], secs: u64, b: &Browser, whole: bool) -> (f64, Page) {
    let host = Host::start(host);
    let nice = verifier_nice();
    let mut args = vec![host.addr.as_str(), "--json"];
    args.extend(nice.iter().map(String::as_str));
    let (mut p, url) = watch(&args);
    p.wait_line(|l| l.contains("\"attached\""));
    b.client.goto(&url).await.expect("the page");
    b.until("a frame", "return window.ostm.frame ? 1 : 0;", |v| v == 1)
        .await;
    b.js(&format!(
        "window.ostm.picture.whole = {whole}; return true;"
    ))
    .await;
    b.click(r#"input[name="overlay"][value="occupancy"]"#).await;
    // The verified steps are counted over the same second half as the page's frames.
    let pid = p.pid();
    let rate = steady_rate(p, secs);
    tokio::time::sleep(Duration::from_secs(secs / 2)).await;
    let c0 = b.js(COUNTERS).await;
    let (b0, s0) = (tree_cpu(b.driver_pid()), threads_cpu(pid, "ostm-web"));
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs - secs / 2)).await;
    let c1 = b.js(COUNTERS).await;
    let (b1, s1) = (tree_cpu(b.driver_pid()), threads_cpu(pid, "ostm-web"));
    let elapsed = t0.elapsed().as_secs_f64();
    let delta = |i: usize| c1[i].as_f64().unwrap_or(0.0) - c0[i].as_f64().unwrap_or(0.0);
    let frames = delta(0);
    let last = b
        .js(
            "return [window.ostm.frame.alive, window.ostm.frame.overlay, \
             document.getElementById('yield-item').hidden ? 0 : \
             Number(document.getElementById('frame-gap').textContent.replace(/\\D/g, ''))];",
        )
        .await;
    assert_eq!(last[1], "occupancy");
    let (p, rate) = tokio::task::block_in_place(|| rate.join()).expect("the reading thread");
    p.signal("INT");
    p.finish();
    let page = Page {
        fps: frames / elapsed,
        set_ms: delta(1) / frames.max(1.0),
        patched: delta(2) as u64,
        replaced: delta(3) as u64,
        alive: last[0].as_u64().unwrap_or(0),
        browser_cores: (b1 - b0) / elapsed,
        browser_ms: (b1 - b0) * 1000.0 / frames.max(1.0),
        server_ms: (s1 - s0) * 1000.0 / frames.max(1.0),
        gap_ms: last[2].as_u64().unwrap_or(0),
    };
    (rate, page)
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
    ostm_protocol::sim::testdata::write_moving_replay(path, bodies, steps).expect("the replay");
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
    let mut pages_max = vec![];
    for r in 0..runs {
        let a = attach_run(secs);
        let (w, pg) = watch_run(&HOST, secs, &b, false).await;
        println!(
            "run {r}: attach {a:.0} steps/s, watch {w:.0} steps/s, page {}",
            pg.line()
        );
        attach.push(a);
        watched.push(w);
        fps_max.push(pg.fps);
        alive.push(pg.alive);
        pages_max.push(pg);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // 64 bodies that all stay: a replay served at 6000 steps/s (100 worlds a refresh).
    let all = dir.path().join("sixty-four.ostm");
    long_replay(&all, 64, (secs * 6000 * 2) as u32);
    let all = all.to_str().unwrap().to_string();
    let served = ["--replay", &all, "--rate", "6000"];
    let (mut fps64, mut alive64) = (vec![], vec![]);
    let (mut pages64, mut pages_whole) = (vec![], vec![]);
    for r in 0..runs {
        let (_, pg) = watch_run(&served, secs, &b, false).await;
        println!(
            "run {r}: 64-body replay at 6000 steps/s: page {}",
            pg.line()
        );
        fps64.push(pg.fps);
        alive64.push(pg.alive);
        pages64.push(pg);
        let (_, pg) = watch_run(&served, secs, &b, true).await;
        println!(
            "run {r}: the same, baseline (whole picture replaced at each frame): page {}",
            pg.line()
        );
        pages_whole.push(pg);
    }
    let refresh = refresh_rate(&b).await;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let tenth = |v: &[f64]| {
        v.iter()
            .map(|f| (f * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    };
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let pairs: Vec<f64> = watched.iter().zip(&attach).map(|(w, a)| w / a).collect();
    println!(
        "\nverified steps/s (mean of {runs} runs of {secs} s): attach {:.0}, watch {:.0}: watch/attach = {:.3}",
        mean(&attach),
        mean(&watched),
        mean(&watched) / mean(&attach)
    );
    println!(
        "watch/attach: median / median {:.3}; per run (attach, then watch) {:?}, their median {:.3}",
        median(&watched) / median(&attach),
        pairs.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>(),
        median(&pairs)
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
    let whole_fps: Vec<f64> = pages_whole.iter().map(|p| p.fps).collect();
    println!(
        "baseline, whole picture replaced at each frame, 64-body replay: {:.1} frames/s (runs {:?}): patched / whole = {:.2}",
        mean(&whole_fps),
        tenth(&whole_fps),
        mean(&fps64) / mean(&whole_fps)
    );
    for (name, pages) in [
        ("--rate max host", &pages_max),
        ("64-body replay", &pages64),
        ("64-body replay, baseline", &pages_whole),
    ] {
        let m = |f: fn(&Page) -> f64| mean(&pages.iter().map(f).collect::<Vec<_>>());
        println!(
            "{name}, mean per frame: {:.2} ms in picture.set, browser CPU {:.1} ms ({:.2} cores), frame-making {:.2} ms",
            m(|p| p.set_ms),
            m(|p| p.browser_ms),
            m(|p| p.browser_cores),
            m(|p| p.server_ms)
        );
    }

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
