//! Reading a `/metrics` endpoint and docs/metrics.md, for the metrics tests.
#![allow(dead_code)]

use ostm_testkit::LIMIT;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One HTTP request to `addr`: the response's head and body (both empty for a connection
/// closed unanswered).
pub fn request(addr: &str, req: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let _ = s.write_all(req.as_bytes());
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let all = String::from_utf8_lossy(&all).into_owned();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (head.to_string(), body.to_string())
}

/// `GET /metrics` on `addr`: the exposition.
pub fn scrape(addr: &str) -> String {
    let (head, body) = request(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body
}

/// Scrapes `addr` until it answers with an exposition for which `pred` holds (bounded by
/// [`LIMIT`]; a connection closed unanswered, as when every slot is taken, is tried again).
pub fn scrape_until(addr: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let (head, body) = request(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        if head.starts_with("HTTP/1.1 200 OK") && pred(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "never {what}: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of the sample `name` (no labels) in an exposition.
pub fn value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The sample names of an exposition (labels cut off).
pub fn samples(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split([' ', '{']).next())
        .map(str::to_string)
        .collect()
}

/// The metrics docs/metrics.md lists with `prefix`: the names in backquotes that start
/// its table rows.
pub fn documented(prefix: &str) -> Vec<String> {
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

/// The address in a `… metrics on http://ADDR/metrics` line or a
/// `{"event":"metrics","addr":…}` one.
pub fn metrics_addr(line: &str) -> String {
    if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["event"], "metrics", "{line}");
        return v["addr"].as_str().unwrap().to_string();
    }
    line.split("metrics on http://")
        .nth(1)
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("not a metrics line: {line}"))
        .to_string()
}
