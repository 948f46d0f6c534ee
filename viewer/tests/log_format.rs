//! `--log-format json` (or `OSTM_LOG_FORMAT=json`) on both binaries: every line on stderr
//! is one JSON object with the text log's fields (`timestamp`, `level`, `target`,
//! `fields` with `message` and the event's own fields); the default stays text; an
//! unknown format is bad input. A command's own messages on stderr (`watch: …`,
//! `error: …`) are not log lines and stay text.

mod live_support;

use live_support::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::process::Command;

/// Every stderr line as a JSON object, but the command's own messages (lines starting
/// with one of `own`, which are not log lines).
#[track_caller]
fn json_lines(stderr: &str, own: &[&str]) -> Vec<Value> {
    assert!(!stderr.trim().is_empty(), "no log lines");
    stderr
        .lines()
        .filter(|l| !own.iter().any(|o| l.starts_with(o)))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v.is_object(), "{l}");
            for key in ["timestamp", "level", "target", "fields"] {
                assert!(v.get(key).is_some(), "{key} missing: {l}");
            }
            v
        })
        .collect()
}

#[test]
fn the_host_logs_one_json_object_a_line_with_the_text_logs_fields() {
    let serve = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--rate",
        "max",
        "--steps",
        "20",
        "--status-ms",
        "0",
    ];
    let json = run(Command::new(host_bin())
        .args(serve)
        .args(["--log-format", "json"])
        .env_remove("RUST_LOG"));
    assert_eq!(json.status.code(), Some(0));
    let lines = json_lines(&stderr(&json), &[]);
    let serving = lines
        .iter()
        .find(|v| v["fields"]["message"] == "serving")
        .expect("the serving line");
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["target"], "ostm_host::serve");
    // The same fields as the text line.
    let text = run(Command::new(host_bin()).args(serve).env_remove("RUST_LOG"));
    let line = stderr(&text);
    let line = line
        .lines()
        .find(|l| l.contains("serving"))
        .expect("the text serving line")
        .to_string();
    for field in ["addr", "step", "dims", "bodies", "seed"] {
        assert!(serving["fields"].get(field).is_some(), "{field}: {serving}");
        assert!(line.contains(&format!(" {field}=")), "{field}: {line}");
    }
    assert!(
        serde_json::from_str::<Value>(&line).is_err(),
        "text by default: {line}"
    );
    // From the environment too.
    let env = run(Command::new(host_bin())
        .args(serve)
        .env("OSTM_LOG_FORMAT", "json")
        .env_remove("RUST_LOG"));
    json_lines(&stderr(&env), &[]);
    // An unknown format.
    let bad = run(Command::new(host_bin())
        .args(serve)
        .args(["--log-format", "yaml"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("possible values: text, json"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn the_viewer_logs_one_json_object_a_line() {
    // `watch` on a replay logs at info each request it refuses (here: a foreign Host).
    let mut p = Proc::spawn(
        Command::new(viewer_bin())
            .args(["--log-format", "json", "watch"])
            .arg(testdata("test-2d-600.ostm"))
            .args(["--ui", "127.0.0.1:0"])
            .env("RUST_LOG", "info"),
    );
    let url = p.line().expect("the page's URL");
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: elsewhere.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    p.signal("INT");
    let out = p.finish();
    let lines = json_lines(&stderr(&out), &["watch: "]);
    assert!(
        lines.iter().any(|v| v["level"] == "INFO"
            && v["fields"]["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("refused")
            && v["fields"].get("status").is_some()),
        "{lines:?}"
    );
}
