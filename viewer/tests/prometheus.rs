//! The real Prometheus (Debian's `prometheus`, which scripts/test installs) scraping a real
//! `ostm-host serve --metrics` and a real `ostm-viewer attach --metrics`, all on 127.0.0.1:
//! its HTTP API gives back the host's step and the viewer's verified steps, both targets
//! up, and the values are plausible: the viewer verified some steps, never more than the
//! host had taken when it was scraped. And docs/metrics.md's alert rules, loaded from the
//! doc, fire on a drift caused with `ostm-host serve --drift-at`.

mod live_support;
mod metrics_support;

use live_support::*;
use metrics_support::metrics_addr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Debian's prometheus, if installed.
fn prometheus_bin() -> Option<PathBuf> {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// `q` with every byte but letters, digits and `_` percent-encoded, for a query string.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` of Prometheus's HTTP API: the answer's JSON, or `None` while it does not
/// answer (it is starting).
fn api(prom: &str, path: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect(prom).ok()?;
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {prom}\r\n\r\n").as_bytes())
        .ok()?;
    let mut all = Vec::new();
    s.read_to_end(&mut all).ok()?;
    let all = String::from_utf8_lossy(&all);
    let (_, body) = all.split_once("\r\n\r\n")?;
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    assert_eq!(v["status"], "success", "{path}: {body}");
    Some(v)
}

/// Prometheus's instant query `q` (at `time`, seconds since the epoch, else now): the
/// first sample's value, or `None` while the result is empty.
fn query(prom: &str, q: &str, time: Option<f64>) -> Option<f64> {
    let mut path = format!("/api/v1/query?query={}", encode(q));
    if let Some(t) = time {
        path.push_str(&format!("&time={t:.3}"));
    }
    let v = api(prom, &path)?;
    let data = &v["data"];
    let sample = if data["resultType"] == "scalar" {
        &data["result"]
    } else {
        &data["result"][0]["value"]
    };
    sample[1].as_str()?.parse().ok()
}

/// Polls `q` until it has a value for which `pred` holds (bounded by [`LIMIT`]).
fn query_until(prom: &str, q: &str, pred: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(v) = query(prom, q, None).filter(|&v| pred(v)) {
            return v;
        }
        assert!(Instant::now() < deadline, "Prometheus never gave {q}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Prometheus on a free port of 127.0.0.1 with `config` (YAML) in a directory of its
/// own; its address, and the process (stopped when dropped).
fn start_prometheus(prometheus: &Path, dir: &Path, config: &str) -> (String, Proc) {
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let proc = Proc::spawn(
        Command::new(prometheus)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .current_dir(dir),
    );
    (web, proc)
}

/// The scrape configuration of a host and a viewer, every second.
fn scrape_configs(host_metrics: &str, viewer_metrics: &str) -> String {
    format!(
        "scrape_configs:\n\
         \x20 - job_name: ostm-host\n    static_configs:\n      - targets: [\"{host_metrics}\"]\n\
         \x20 - job_name: ostm-viewer\n    static_configs:\n      - targets: [\"{viewer_metrics}\"]\n"
    )
}

#[test]
fn prometheus_scrapes_the_host_and_the_viewer() {
    let Some(prometheus) = prometheus_bin() else {
        eprintln!(
            "skipped: prometheus is not installed (scripts/test installs it: apt-get install prometheus)"
        );
        return;
    };
    let mut host = Host::start(&["--rate", "200", "--metrics", "127.0.0.1:0"]);
    let host_metrics = metrics_addr(&host.line().expect("the host's metrics line"));
    let mut viewer = spawn_viewer(&["attach", &host.addr, "--metrics", "127.0.0.1:0"]);
    let viewer_metrics = metrics_addr(&viewer.line().expect("the viewer's metrics line"));

    let dir = tempfile::tempdir().unwrap();
    let (web, _prom) = start_prometheus(
        &prometheus,
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n{}",
            scrape_configs(&host_metrics, &viewer_metrics)
        ),
    );

    // Both targets up, and a sample of each with values.
    for job in ["ostm-host", "ostm-viewer"] {
        query_until(&web, &format!("up{{job=\"{job}\"}}"), |v| v == 1.0);
    }
    query_until(&web, "ostm_host_step", |v| v > 0.0);
    query_until(&web, "ostm_viewer_verified_steps_total", |v| v > 0.0);
    // The viewer's latest sample at a moment `past` (two seconds gone, so no scrape of
    // one second at most can still add one before it): at t_v, then the host's first sample at or after t_v: the host's step
    // only grows, and what the viewer verified is at most the host's step when it was
    // scraped, so the viewer's count is at most the host's step then.
    let past = query(&web, "time()", None).expect("time()");
    query_until(&web, "time()", |now| now >= past + 2.0);
    let t_v = query(
        &web,
        "timestamp(ostm_viewer_verified_steps_total)",
        Some(past),
    )
    .expect("the viewer's sample time");
    let verified = query(&web, "ostm_viewer_verified_steps_total", Some(past))
        .expect("the viewer's verified steps");
    let t_h = query_until(&web, "timestamp(ostm_host_step)", |t| t >= t_v);
    let host_step = query(&web, "ostm_host_step", Some(t_h)).expect("the host's step");
    assert!(
        verified > 0.0 && verified <= host_step,
        "the viewer verified {verified} steps at {t_v}, the host was at step {host_step} at {t_h}"
    );
    // The viewer's own view of the host agrees: never past the host's step.
    let heard = query(&web, "ostm_viewer_host_step", Some(past)).expect("the viewer's host step");
    assert!(heard <= host_step, "{heard} > {host_step}");

    viewer.signal("INT");
    assert_eq!(code(&finish(viewer)), 0);
    host.interrupt();
}

/// docs/metrics.md's alert rules: the YAML block of its section "Example alert rules".
fn documented_alert_rules() -> String {
    let doc = std::fs::read_to_string(workspace().join("docs/metrics.md")).unwrap();
    let section = doc
        .split_once("## Example alert rules")
        .expect("docs/metrics.md has its alert rules")
        .1;
    let block = section.split_once("```yaml\n").expect("a YAML block").1;
    block
        .split_once("```")
        .expect("the block's end")
        .0
        .to_string()
}

/// The state of alert `name` (`pending`, `firing`), if Prometheus has it active.
fn alert_state(prom: &str, name: &str) -> Option<String> {
    let v = api(prom, "/api/v1/alerts")?;
    v["data"]["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["labels"]["alertname"] == name)
        .and_then(|a| a["state"].as_str())
        .map(str::to_string)
}

/// What docs/metrics.md, "Testing the alerts", tells an operator to do: a host with
/// `--drift-at` (held at step 0 until the viewer attaches, so Prometheus has scraped it
/// before the drift), a `watch` viewer that keeps serving after it, and the doc's own
/// rules: `OstmDriftRequested` (the host's side) and `OstmDrift` (the viewer's) fire, and
/// the host's log names the step and the body it took.
#[test]
fn the_documented_drift_alerts_fire_after_drift_at() {
    let Some(prometheus) = prometheus_bin() else {
        eprintln!(
            "skipped: prometheus is not installed (scripts/test installs it: apt-get install prometheus)"
        );
        return;
    };
    let mut host = Host::start(&[
        "--rate",
        "200",
        "--metrics",
        "127.0.0.1:0",
        "--wait-for-viewers",
        "1",
        "--drift-at",
        "400",
    ]);
    let host_metrics = metrics_addr(&host.line().expect("the host's metrics line"));
    let viewer_metrics = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ostm-alerts.yml"), documented_alert_rules()).unwrap();
    let (web, _prom) = start_prometheus(
        &prometheus,
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files: [ostm-alerts.yml]\n{}",
            scrape_configs(&host_metrics, &viewer_metrics)
        ),
    );
    // The rules are loaded (every one the doc gives), the host scraped before its drift.
    let deadline = Instant::now() + LIMIT;
    let rules = loop {
        let n = api(&web, "/api/v1/rules").map_or(0, |v| {
            v["data"]["groups"][0]["rules"]
                .as_array()
                .map_or(0, |r| r.len())
        });
        if n > 0 {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never loaded the rules"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        rules,
        documented_alert_rules().matches("- alert:").count(),
        "every documented rule is loaded"
    );
    query_until(&web, "ostm_host_drift_requests_total", |v| v == 0.0);
    assert_eq!(alert_state(&web, "OstmDriftRequested"), None);

    // In the test's directory: the drift bundle goes there.
    let viewer = spawn_viewer_in(
        dir.path(),
        &["watch", &host.addr, "--metrics", &viewer_metrics],
    );
    let deadline = Instant::now() + LIMIT;
    for name in ["OstmDriftRequested", "OstmDrift"] {
        while alert_state(&web, name).as_deref() != Some("firing") {
            assert!(Instant::now() < deadline, "{name} never fired");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    viewer.signal("INT");
    let out = finish(viewer);
    assert!(
        stdout(&out).contains("drift at step 400: body "),
        "{}",
        stdout(&out)
    );
    host.interrupt();
    let (status, _, log) = host.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("drift-at: perturbed body ")
            && l.contains("at step 400")),
        "{log}"
    );
}
