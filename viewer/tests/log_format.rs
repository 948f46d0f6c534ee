//! `--log-format json` (or `OSTM_LOG_FORMAT=json`) on both binaries: every line on stderr
//! is one JSON object with the text log's fields (`timestamp`, `level`, `target`,
//! `fields` with `message` and the event's own fields); the default stays text; an
//! unknown format is bad input. A command's own messages on stderr (`watch: …`,
//! `error: …`) are not log lines and stay text. A live session logs each of its events
//! (docs/protocol.md, "The viewer's log") with its fields, in JSON and in text; the host
//! logs the end of its stream.

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

/// The host logs the end of its stream: a `--steps` run that finishes says so at info,
/// with the reason and the steps it ran.
#[test]
fn the_host_logs_the_end_of_a_steps_run() {
    let out = run(Command::new(host_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--rate", "max"])
        .args(["--steps", "20", "--status-ms", "0", "--log-format", "json"]));
    assert_eq!(out.status.code(), Some(0));
    let lines = json_lines(&stderr(&out), &[]);
    let end = lines
        .iter()
        .find(|v| v["fields"]["reason"] == "finished")
        .unwrap_or_else(|| panic!("no end line: {lines:?}"));
    assert_eq!(end["level"], "INFO", "{end}");
    assert_eq!(end["fields"]["steps"], 20, "{end}");
    assert_eq!(end["fields"]["step"], 20, "{end}");
    assert_eq!(
        end["fields"]["message"],
        "the stream ended: finished: the host ran its 20 steps"
    );
}

/// The viewer's session events as a log shipper reads them from stderr, in `format`: the
/// line of event `event` (with `session` = `addr`) at `level` that has every field of
/// `fields`; for JSON its `fields` object, for text the line.
#[track_caller]
fn session_event(
    stderr: &str,
    format: &str,
    level: &str,
    event: &str,
    addr: &str,
    fields: &[&str],
) -> Value {
    let found = if format == "json" {
        json_lines(stderr, &[])
            .into_iter()
            .filter(|v| v["target"] == "ostm_viewer::session")
            .find(|v| v["fields"]["event"] == event)
            .map(|v| {
                assert_eq!(v["level"], level, "{v}");
                assert_eq!(v["fields"]["session"], addr, "{v}");
                for f in fields {
                    assert!(v["fields"].get(f).is_some(), "{f} missing: {v}");
                }
                v["fields"].clone()
            })
    } else {
        stderr
            .lines()
            .find(|l| {
                l.contains(" ostm_viewer::session: ") && l.contains(&format!(" event=\"{event}\""))
            })
            .map(|l| {
                assert!(
                    l.contains(&format!(" {level} ostm_viewer::session: ")),
                    "{l}"
                );
                assert!(l.contains(&format!(" session=\"{addr}\"")), "{l}");
                for f in fields {
                    assert!(l.contains(&format!(" {f}=")), "{f} missing: {l}");
                }
                Value::String(l.to_string())
            })
    };
    found.unwrap_or_else(|| panic!("no {event} event on stderr ({format}):\n{stderr}"))
}

/// A viewer in `dir` with `--log-format format`, attached to `addr` with `args`; its stdout
/// events in JSON.
fn logging_viewer(dir: &std::path::Path, format: &str, addr: &str, args: &[&str]) -> Proc {
    Proc::spawn(
        Command::new(viewer_bin())
            .args(["--log-format", format, "attach", addr, "--json"])
            .args(args)
            .current_dir(dir),
    )
}

/// Reads the viewer's stdout until an event for which `pred` holds.
fn until(v: &mut Proc, pred: impl Fn(&Value) -> bool) -> Value {
    let l = v.wait_line(|l| serde_json::from_str::<Value>(l).is_ok_and(|e| pred(&e)));
    serde_json::from_str(&l).unwrap()
}

/// A session that attaches, is resynced, records two files and is stopped: on stderr
/// (the default log filter) the attach, the resync, each recording file and the end with
/// its verdict, each with the session's address and its step. (On a machine so loaded
/// that the paused viewer is silent for the host's 10 s, the host closes it instead and
/// it reconnects: then the reconnection is what is logged.)
#[test]
fn the_viewer_logs_attach_resync_recording_and_end() {
    for format in ["json", "text"] {
        let mut host = Host::start(RESYNCING_HOST);
        let dir = tempfile::tempdir().unwrap();
        let args = ["--record", "r.ostm", "--reconnect"];
        let mut v = logging_viewer(dir.path(), format, &host.addr, &args);
        until(&mut v, |e| e["event"] == "attached");
        // Paused while the host runs far past its queue: resynced when it reads again.
        v.signal("STOP");
        // From the host's step now (a status line read earlier is older).
        let at = host.status_now()["step"].as_u64().unwrap();
        host.wait_status(|s| s["step"].as_u64().unwrap() > at + 1_000_000);
        v.signal("CONT");
        let restart = until(&mut v, |e| e["event"] == "resync" || e["event"] == "gap");
        v.signal("INT");
        let out = finish(v);
        assert_eq!(code(&out), 0, "{}", stdout(&out));
        let log = stderr(&out);
        let addr = host.addr.as_str();
        session_event(&log, format, "INFO", "attached", addr, &["step"]);
        let fields = ["step", "from", "to", "file"];
        if restart["event"] == "resync" {
            session_event(&log, format, "INFO", "resync", addr, &fields);
        } else {
            session_event(&log, format, "WARN", "reconnected", addr, &fields);
        }
        session_event(
            &log,
            format,
            "INFO",
            "recording_finished",
            addr,
            &["file", "steps", "start_step"],
        );
        let end = session_event(
            &log,
            format,
            "INFO",
            "end",
            addr,
            &["verdict", "stop", "step", "verified"],
        );
        if format == "json" {
            assert_eq!(
                (end["verdict"].as_str(), end["stop"].as_str()),
                (Some("ok"), Some("interrupted")),
                "{end}"
            );
        } else {
            assert!(end.as_str().unwrap().contains(" verdict=\"ok\""), "{end}");
        }
        host.interrupt();
    }
}

/// A `--reconnect` viewer whose host is killed and started again: the loss (at warn, with
/// the step and the reason) and the reconnection (from, to) are logged.
#[test]
fn the_viewer_logs_a_loss_and_a_reconnection() {
    for format in ["json", "text"] {
        let host = Host::start(&["--rate", "300", "--status-ms", "0"]);
        let addr = host.addr.clone();
        let dir = tempfile::tempdir().unwrap();
        let mut v = logging_viewer(dir.path(), format, &addr, &["--reconnect"]);
        until(&mut v, |e| e["event"] == "status");
        host.signal("KILL");
        let _ = host.wait();
        until(&mut v, |e| e["event"] == "lost");
        let again = Host::start_at(&addr, &["--rate", "300", "--status-ms", "0"], &[]);
        until(&mut v, |e| e["event"] == "gap");
        v.signal("INT");
        let out = finish(v);
        assert_eq!(code(&out), 0, "{}", stdout(&out));
        let log = stderr(&out);
        session_event(&log, format, "WARN", "lost", &addr, &["step", "reason"]);
        session_event(
            &log,
            format,
            "WARN",
            "reconnected",
            &addr,
            &["step", "from", "to", "reason"],
        );
        session_event(&log, format, "INFO", "end", &addr, &["verdict"]);
        drop(again);
    }
}

/// A drift (`--drift-at`): logged at error with the step, the body and the field, and the
/// end with the verdict `drift`.
#[test]
fn the_viewer_logs_a_drift() {
    for format in ["json", "text"] {
        let host = Host::start(&[
            "--rate",
            "1000",
            "--status-ms",
            "0",
            "--wait-for-viewers",
            "1",
            "--drift-at",
            "300",
        ]);
        let dir = tempfile::tempdir().unwrap();
        let out = finish(logging_viewer(dir.path(), format, &host.addr, &[]));
        assert_eq!(code(&out), 1, "{}", stdout(&out));
        let log = stderr(&out);
        let addr = host.addr.as_str();
        session_event(&log, format, "INFO", "attached", addr, &["step"]);
        let drift = session_event(
            &log,
            format,
            "ERROR",
            "drift",
            addr,
            &["step", "body", "field", "bundle"],
        );
        let end = session_event(&log, format, "ERROR", "end", addr, &["verdict", "step"]);
        if format == "json" {
            assert_eq!(drift["step"], 300, "{drift}");
            assert_eq!(end["verdict"], "drift", "{end}");
        } else {
            assert!(drift.as_str().unwrap().contains(" step=300 "), "{drift}");
            assert!(
                end.as_str().unwrap().contains(" verdict=\"drift\""),
                "{end}"
            );
        }
        host.interrupt();
    }
}

/// A person watching `attach` on a terminal sees each session line once: with stdout and
/// stderr both the pane, the text log leaves out the session's `info` events (each would
/// repeat the line just printed); the same run with stderr to a file logs them.
#[test]
fn a_terminal_shows_each_session_line_once_and_a_redirected_stderr_has_the_events() {
    let host = Host::start(&["--rate", "300", "--steps", "600", "--status-ms", "0"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let viewer = viewer_bin();
    let script = d.join("run.sh");
    std::fs::write(
        &script,
        format!(
            "'{v}' attach {a} --steps 200; echo \"rc=$?\"\n\
             '{v}' attach {a} --steps 200 2>'{log}'; echo \"rc2=$?\"\nsleep 600\n",
            v = viewer.display(),
            a = host.addr,
            log = d.join("stderr.log").display(),
        ),
    )
    .expect("script");
    let tmux = live_support::tmux::Tmux::start(d, 200, 50, &script);
    let screen = tmux.wait_for("both runs' exit codes", |s| s.contains("rc2="));
    assert!(
        screen.contains("rc=0") && screen.contains("rc2=0"),
        "{screen}"
    );
    // The first run's session lines, each once: no log line repeats them.
    assert_eq!(screen.matches("attached to ").count(), 2, "{screen}");
    assert!(!screen.contains("ostm_viewer::session"), "{screen}");
    // The second run's stderr, a file: the session's events as log lines.
    let log = std::fs::read_to_string(d.join("stderr.log")).expect("stderr.log");
    for event in ["event=\"attached\"", "event=\"end\""] {
        assert!(log.contains(event), "{event} in:\n{log}");
    }
}
