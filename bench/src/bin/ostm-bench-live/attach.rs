//! One real `ostm-viewer attach` process's CPU time per verified step, beside offline
//! `ostm-viewer verify`'s CPU time per step on the same steps (issue 10's goal of live
//! verification at the offline pace). The host runs `--rate max --steps N
//! --wait-for-viewers 1 --record FILE`: the viewer attaches at step 0, and the host's own
//! recording holds exactly the steps it streamed, which `verify` then checks. Both CPU
//! times come from wait4(2) (user + system, every thread), so the host's share of the
//! cores does not count.

use crate::cpu;
use crate::server;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

fn json_last_line(text: &str) -> serde_json::Value {
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Runs the comparison `runs` times and prints its table.
///
/// # Errors
/// A process cannot be started, the viewer verified no step, or `verify` refused the
/// host's recording: nothing to compare.
pub fn run(host: &Path, viewer: &Path, steps: u64, runs: usize, dir: &Path) -> Result<(), String> {
    println!("one `ostm-viewer attach` process beside offline `ostm-viewer verify` on the same {steps} steps (host --rate max --wait-for-viewers 1)");
    println!();
    println!("| run | attach: steps verified | resyncs | attach CPU (s) | attach CPU per verified step (µs) | attach steps/s (wall) | verify CPU (s) | verify CPU per step (µs) | verify steps/s (wall) | attach / verify CPU per step |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    // CPU per step of each run, attach and verify, for the summary below.
    let (mut attach, mut verify) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let rec = dir.join(format!("attach-bench-{}-{run}.ostm", std::process::id()));
        let _ = std::fs::remove_file(&rec);
        let mut serve = Command::new(host);
        serve
            .args(["serve", "--listen", "127.0.0.1:0", "--rate", "max"])
            .args(["--status-ms", "0", "--steps", &steps.to_string()])
            .args(["--wait-for-viewers", "1", "--record"])
            .arg(&rec);
        let server::Server { child: mut h, addr } =
            server::start(serve, &host.display().to_string())?;
        let started = Instant::now();
        let mut v = match Command::new(viewer)
            .args(["attach", &addr, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(v) => v,
            Err(e) => {
                let _ = h.kill();
                let _ = h.wait();
                return Err(format!("cannot start {}: {e}", viewer.display()));
            }
        };
        let mut text = String::new();
        if let Some(mut o) = v.stdout.take() {
            let _ = o.read_to_string(&mut text);
        }
        let (_, attach_cpu) = cpu::wait_cpu(&mut v);
        let attach_wall = started.elapsed().as_secs_f64();
        let _ = h.wait();
        let end = json_last_line(&text);
        let verified = end["verified"].as_u64().unwrap_or(0);
        let resyncs = end["resyncs"].as_u64().unwrap_or(0);
        if verified == 0 {
            let _ = std::fs::remove_file(&rec);
            return Err(format!(
                "run {run}: `ostm-viewer attach {addr}` verified no step (its last line: {end})"
            ));
        }
        let started = Instant::now();
        let mut o = match Command::new(viewer)
            .arg("verify")
            .arg(&rec)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(o) => o,
            Err(e) => return Err(format!("cannot start {}: {e}", viewer.display())),
        };
        let mut out = String::new();
        if let Some(mut s) = o.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        let (status, verify_cpu) = cpu::wait_cpu(&mut o);
        let verify_wall = started.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(&rec);
        if !status.is_some_and(|s| s.success()) {
            let status = status.map_or_else(|| "status unknown".to_string(), |s| s.to_string());
            return Err(format!(
                "run {run}: `ostm-viewer verify` of the host's recording did not pass \
                 ({status}): {}",
                out.trim()
            ));
        }
        let per = |c: std::time::Duration, n: u64| c.as_secs_f64() * 1e6 / n.max(1) as f64;
        let (a, b) = (per(attach_cpu, verified), per(verify_cpu, steps));
        attach.push(a);
        verify.push(b);
        println!(
            "| {run} | {verified} | {resyncs} | {:.2} | {a:.3} | {:.0} | {:.2} | {b:.3} | {:.0} | {:.2} |",
            attach_cpu.as_secs_f64(),
            verified as f64 / attach_wall,
            verify_cpu.as_secs_f64(),
            steps as f64 / verify_wall,
            a / b,
        );
    }
    // The machine's speed moves from one process to the next by more than the difference
    // measured (verify alone: 0.39 to 0.67 µs a step on the quiet machine), so the medians
    // and the minima over all runs are steadier than any one run's ratio.
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let least = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (la, lv) = (least(&attach), least(&verify));
    let (ma, mv) = (median(&mut attach), median(&mut verify));
    println!();
    println!(
        "over {runs} runs: attach / verify CPU per step, median / median {:.2} ({ma:.3} / {mv:.3} µs), least / least {:.2} ({la:.3} / {lv:.3} µs)",
        ma / mv.max(f64::MIN_POSITIVE),
        la / lv.max(f64::MIN_POSITIVE),
    );
    Ok(())
}
