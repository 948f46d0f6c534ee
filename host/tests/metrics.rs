//! `ostm-host serve --metrics` on 127.0.0.1: `GET /metrics` answers OpenMetrics text
//! holding exactly the metrics docs/metrics.md lists, and they move as the host steps; a
//! scraper that stalls costs the stepping nothing (the host steps on at full speed while
//! every scraper slot is held), connections past the slots are closed at once, and the
//! endpoint answers again once the stalled ones time out.

use ostm_runtime::metrics::MAX_SCRAPERS;
use ostm_testkit::{Proc, LIMIT};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn host(args: &[&str]) -> (Proc, String) {
    let mut p = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_ostm-host"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics",
                "127.0.0.1:0",
            ])
            .args(args),
    );
    let metrics = p.wait_line(|l| l.contains("metrics"));
    let addr = if metrics.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(&metrics).unwrap();
        v["addr"].as_str().unwrap().to_string()
    } else {
        metrics
            .trim_start_matches("ostm-host metrics on http://")
            .trim_end_matches("/metrics")
            .to_string()
    };
    (p, addr)
}

/// One request to `addr`: the response's head and body.
fn request(addr: &str, req: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (head.to_string(), body.to_string())
}

fn scrape(addr: &str) -> String {
    let (head, body) = request(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body
}

/// The value of the sample `name` (no labels) in an exposition.
fn value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The sample names of an exposition (labels cut off).
fn samples(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split([' ', '{']).next())
        .map(str::to_string)
        .collect()
}

/// The host's metrics docs/metrics.md lists: the names in backquotes that start its
/// table rows.
fn documented(prefix: &str) -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md"))
            .unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_endpoint_serves_the_documented_metrics_in_openmetrics_text() {
    let (_host, addr) = host(&["--rate", "200", "--status-ms", "0"]);
    let (head, body) = request(&addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(
        body.contains("ostm_host_info{version=\"")
            && body.contains("dims=\"3\",bodies=\"24\",seed=\"10000\"} 1"),
        "{body}"
    );
    // Exactly what the docs list (NATS's and the recording's only with --publish and
    // --record), and no metric the docs do not.
    let docs = documented("ostm_host_");
    let got = samples(&body);
    for name in &got {
        assert!(docs.contains(name), "{name} is not in docs/metrics.md");
    }
    for name in &docs {
        let conditional = name.contains("_nats_") || name.contains("_recorded_");
        assert!(
            conditional || got.contains(name),
            "{name} is not served: {body}"
        );
    }
    assert!(docs.len() > 15, "{docs:?}");
    // The step moves on.
    let first = value(&body, "ostm_host_step").unwrap();
    let deadline = Instant::now() + LIMIT;
    while value(&scrape(&addr), "ostm_host_step").unwrap() <= first {
        assert!(Instant::now() < deadline, "the step never moved");
        std::thread::sleep(Duration::from_millis(20));
    }
    let body = scrape(&addr);
    assert_eq!(
        value(&body, "ostm_host_target_steps_per_second"),
        Some(200.0)
    );
    assert!(value(&body, "ostm_host_steps_total").unwrap() >= 1.0);
    // Other paths and methods.
    assert!(request(&addr, "GET /nope HTTP/1.1\r\n\r\n")
        .0
        .starts_with("HTTP/1.1 404"));
    assert!(request(&addr, "POST /metrics HTTP/1.1\r\n\r\n")
        .0
        .starts_with("HTTP/1.1 405"));
}

#[test]
fn a_stalled_scraper_costs_the_stepping_nothing() {
    let (mut host, addr) = host(&["--rate", "max", "--json", "--status-ms", "50"]);
    let step = |host: &mut Proc| -> u64 {
        let line = host.wait_line(|l| l.contains("\"event\":\"status\""));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v["step"].as_u64().unwrap()
    };
    // Every slot held by a scraper that sent half a request and waits.
    let stalled: Vec<TcpStream> = (0..MAX_SCRAPERS)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // One more is closed at once, unanswered.
    let mut extra = TcpStream::connect(&addr).unwrap();
    extra.set_read_timeout(Some(LIMIT)).unwrap();
    let _ = extra.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
    let mut buf = Vec::new();
    let _ = extra.read_to_end(&mut buf);
    assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    // Meanwhile the host steps on: 5 000 steps past where it was (at full speed, a
    // fraction of a second on any machine; bounded only by LIMIT).
    let at = step(&mut host);
    while step(&mut host) < at + 5_000 {}
    // The stalled scrapers time out, and the endpoint answers again.
    for mut s in stalled {
        s.set_read_timeout(Some(LIMIT)).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.is_empty(), "a stalled scraper was answered");
    }
    assert!(value(&scrape(&addr), "ostm_host_step").unwrap() > at as f64);
}

/// `ostm_host_step` is the step of the host's world and `ostm_host_steps_total` the steps
/// taken since the start (docs/metrics.md): for a host that starts at step 0 they are
/// equal at every scrape, whatever moment the scrape falls on.
#[test]
fn the_step_and_the_steps_taken_agree_at_every_scrape() {
    for rate in ["60", "max"] {
        let (_host, addr) = host(&["--rate", rate, "--status-ms", "0"]);
        let mut last = -1.0;
        for _ in 0..4 {
            // A scrape with the step past the last one's.
            let deadline = Instant::now() + LIMIT;
            let body = loop {
                let body = scrape(&addr);
                if value(&body, "ostm_host_step").unwrap() > last {
                    break body;
                }
                assert!(Instant::now() < deadline, "the step never moved");
                std::thread::sleep(Duration::from_millis(50));
            };
            let step = value(&body, "ostm_host_step").unwrap();
            let taken = value(&body, "ostm_host_steps_total").unwrap();
            assert_eq!(
                step, taken,
                "--rate {rate}: the step is not the steps taken from step 0: {body}"
            );
            assert!(
                body.contains("# HELP ostm_host_step The step of the host's world"),
                "{body}"
            );
            last = step;
        }
    }
}

/// The last `end:` line's `recorded` is every step the finished file holds, not the
/// count of the last flush while it ran.
#[test]
fn the_end_line_counts_every_step_of_the_finished_recording() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.ostm");
    for (steps, rate, json) in [("2000", "max", true), ("1200", "600", false)] {
        let out = ostm_testkit::run(
            Command::new(env!("CARGO_BIN_EXE_ostm-host"))
                .args(["serve", "--listen", "127.0.0.1:0", "--status-ms", "0"])
                .args(["--rate", rate, "--steps", steps, "--force", "--record"])
                .arg(&file)
                .args(if json { &["--json"][..] } else { &[][..] }),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        let end = stdout.lines().last().unwrap_or_default();
        let recorded: u64 = if json {
            let v: serde_json::Value = serde_json::from_str(end).unwrap();
            assert_eq!(v["event"], "end", "{end}");
            v["recorded"].as_u64().unwrap()
        } else {
            assert!(end.starts_with("end: finished"), "{end}");
            let (_, rest) = end
                .split_once(" recorded ")
                .expect("recorded on the end line");
            rest.split(' ').next().unwrap().parse().unwrap()
        };
        let inspect = ostm_testkit::run(
            Command::new(ostm_testkit::bin("ostm-viewer"))
                .args(["inspect", "--json"])
                .arg(&file),
        );
        let v: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
        assert_eq!(
            v["step_count"].as_u64(),
            Some(steps.parse().unwrap()),
            "{v}"
        );
        assert_eq!(recorded, v["step_count"].as_u64().unwrap(), "{end}");
    }
}
