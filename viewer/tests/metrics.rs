//! `--metrics ADDR` on the viewer's live commands, against a real `ostm-host` on
//! 127.0.0.1: `attach` serves exactly the metrics docs/metrics.md lists and they follow the
//! session; `check` names its endpoint on stderr (its stdout is the verdict) and an address
//! already taken is refused before anything is announced; `watch` keeps serving after a
//! drift, with the drift counted (the planted fault: a perturbed host); a scraper that
//! stalls costs the verifier nothing.

mod live_support;
mod metrics_support;

use live_support::*;
use metrics_support::*;
use ostm_runtime::metrics::MAX_SCRAPERS;
use std::io::{Read, Write};
use std::net::TcpStream;

#[test]
fn attach_serves_the_documented_metrics_and_they_follow_the_session() {
    let host = Host::start(&["--rate", "1000"]);
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("s.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &host.addr,
        "--metrics",
        "127.0.0.1:0",
        "--record",
        record.to_str().unwrap(),
        "--json",
    ]);
    // The endpoint's line comes first, before the attach.
    let addr = metrics_addr(&v.line().expect("the metrics line"));
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let (head, body) = request(&addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(
        body.contains(&format!(
            "ostm_viewer_info{{version=\"{}\",addr=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            host.addr
        )),
        "{body}"
    );
    // Exactly what the docs list (with --record, the recording's too).
    let docs = documented("ostm_viewer_");
    assert!(docs.len() >= 14, "{docs:?}");
    let mut got = samples(&body);
    got.sort();
    let mut want = docs.clone();
    want.sort();
    assert_eq!(got, want, "served and documented differ");
    // They follow the session: steps verified, connected, recording on disk.
    let body = scrape_until(&addr, "200 steps verified", |b| {
        value(b, "ostm_viewer_verified_steps_total").unwrap() >= 200.0
    });
    let get = |n: &str| value(&body, n).unwrap_or_else(|| panic!("no {n}: {body}"));
    assert_eq!(get("ostm_viewer_connected"), 1.0);
    assert_eq!(get("ostm_viewer_ended"), 0.0);
    assert_eq!(get("ostm_viewer_drifts_total"), 0.0);
    assert_eq!(get("ostm_viewer_recording_files"), 1.0);
    assert!(get("ostm_viewer_recording_bytes") > 0.0, "{body}");
    assert!(get("ostm_viewer_host_step") >= get("ostm_viewer_step"));
    assert_eq!(
        get("ostm_viewer_lag_steps"),
        get("ostm_viewer_host_step") - get("ostm_viewer_step")
    );
    // The viewer's step is where it attached plus what it verified.
    let attached: serde_json::Value = serde_json::from_str(&v.line().unwrap()).unwrap();
    assert_eq!(attached["event"], "attached");
    let at = attached["step"].as_f64().unwrap();
    assert!(get("ostm_viewer_step") >= at + 200.0, "{body}");
    v.signal("INT");
    assert_eq!(code(&finish(v)), 0);
}

#[test]
fn check_names_its_endpoint_on_stderr_and_a_taken_address_is_refused() {
    let host = Host::start(&["--rate", "1000"]);
    let out = viewer(&[
        "check",
        &host.addr,
        "--steps",
        "50",
        "--metrics",
        "127.0.0.1:0",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("ostm-viewer metrics on http://127.0.0.1:"),
        "{}",
        stderr(&out)
    );
    // An address in use: exit 2, said in the one line, before any attach.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let out = viewer(&["check", &host.addr, "--steps", "50", "--metrics", &at]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).starts_with("error: cannot listen for metrics on"),
        "{}",
        stdout(&out)
    );
    let out = viewer(&["attach", &host.addr, "--metrics", &at]);
    assert_eq!(code(&out), 2);
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("cannot listen for metrics on {at}")),
        "{}",
        stderr(&out)
    );
    // Not an address at all.
    let out = viewer(&["attach", &host.addr, "--metrics", "localhost"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("PORT or HOST:PORT"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn watch_keeps_serving_after_a_drift_with_the_drift_counted() {
    const STEP: u64 = 300;
    let (body, _) = planted(STEP);
    let planted = format!("{STEP}:{body}");
    let host = Host::start(&[
        "--rate",
        "1000",
        "--steps",
        "3000",
        "--ring",
        "3001",
        "--perturb",
        &planted,
        "--wait-for-viewers",
        "1",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("d.ostmb");
    let mut w = spawn_viewer(&[
        "watch",
        &host.addr,
        "--metrics",
        "127.0.0.1:0",
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    let url = w.line().expect("the page's URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let addr = metrics_addr(&w.line().expect("the metrics line"));
    let body = scrape_until(&addr, "ended", |b| {
        value(b, "ostm_viewer_ended") == Some(1.0)
    });
    let get = |n: &str| value(&body, n).unwrap_or_else(|| panic!("no {n}: {body}"));
    assert_eq!(get("ostm_viewer_drifts_total"), 1.0, "{body}");
    assert_eq!(get("ostm_viewer_connected"), 0.0, "{body}");
    // Attached at step 0 (the host waited for it): the steps to worlds 1 to STEP - 1
    // verified; the world at STEP is the first that differs.
    assert_eq!(
        get("ostm_viewer_verified_steps_total"),
        (STEP - 1) as f64,
        "{body}"
    );
    assert_eq!(get("ostm_viewer_step"), STEP as f64, "{body}");
    w.signal("INT");
    let out = finish(w);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
}

#[test]
fn a_stalled_scraper_costs_the_verifier_nothing() {
    let host = Host::start(&["--rate", "max"]);
    let mut v = spawn_viewer(&["attach", &host.addr, "--metrics", "127.0.0.1:0", "--json"]);
    let addr = metrics_addr(&v.line().expect("the metrics line"));
    // Every slot held by a scraper that sent half a request and never reads.
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
    // Meanwhile the viewer verifies on: 5 000 steps more than when its first status came
    // (at full speed, a second or two on any machine; bounded only by LIMIT).
    let mut verified = || -> u64 {
        let line = v.wait_line(|l| l.contains("\"event\":\"status\""));
        let s: serde_json::Value = serde_json::from_str(&line).unwrap();
        s["verified"].as_u64().unwrap()
    };
    let at = verified();
    while verified() < at + 5_000 {}
    // The stalled scrapers go, and the endpoint answers again.
    drop(stalled);
    let body = scrape_until(&addr, "answered", |_| true);
    assert!(value(&body, "ostm_viewer_verified_steps_total").unwrap() >= (at + 5_000) as f64);
    v.signal("INT");
    assert_eq!(code(&finish(v)), 0);
}
