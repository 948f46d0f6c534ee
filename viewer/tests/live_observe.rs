//! What a viewer reports about the stream it follows: its lag behind the host (which the
//! host tells it apart from the records), the link block of the world it attached to, and
//! the fields of that world at chosen steps, equal to what the offline `fields` command
//! prints for the same file. The real `ostm-host` on 127.0.0.1 port 0, the real
//! `ostm-viewer`.

mod live_support;

use live_support::*;
use std::process::Command;

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn lags(lines: &[serde_json::Value]) -> Vec<u64> {
    lines
        .iter()
        .filter(|l| l["event"] == "status")
        .map(|l| l["lag"].as_u64().expect("lag"))
        .collect()
}

/// A viewer that verifies 500 steps/s behind a host stepping 2 000/s falls behind by up to
/// 1 500 steps every second; the host's queue for it (64 Ki records) does not fill in the
/// test's 6 s, so no resync resets the lag. Records alone would say the host is at the
/// viewer's own step (lag 0): the lag it reports comes from the host's step carried ahead
/// of the records (without it every reported lag is 0 and this test fails).
///
/// What is asserted holds whatever the machine's load: the viewer hears the host's step
/// only when a step heartbeat arrives, so between two heartbeats its lag shrinks as it
/// catches up on records, and records in the kernel's buffers are not counted
/// (docs/protocol.md, "Lag"); the lag need not grow from one status line to the next. But
/// it must become positive, and at its largest be hundreds of steps, since the host is at
/// least hundreds of steps ahead for most of the run.
#[test]
fn a_throttled_viewer_reports_a_lag_that_grows() {
    let host = Host::start(&[
        "--rate",
        "2000",
        "--viewer-queue",
        "65536",
        "--status-ms",
        "0",
    ]);
    let out = viewer(&[
        "attach",
        &host.addr,
        "--throttle",
        "500",
        "--steps",
        "3000",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let lines = json_lines(&stdout(&out));
    let end = lines.last().expect("end object");
    assert_eq!(end["resyncs"], 0, "{end}");
    let lag = lags(&lines);
    assert!(lag.len() >= 4, "a status line a second for 6 s: {lag:?}");
    let largest = lag.iter().copied().max().unwrap_or(0);
    assert!(
        largest >= 200,
        "a viewer thousands of steps behind reports a lag of hundreds at least: {lag:?}"
    );
    // The end object carries the lag too: the host step heard of minus the step.
    assert_eq!(
        end["lag"].as_u64().unwrap(),
        end["host_step"].as_u64().unwrap() - end["step"].as_u64().unwrap()
    );
}

/// A viewer that keeps up with a host at 60 steps/s is at most a few steps behind: every
/// reported lag stays within two seconds of steps (120), a bound wide enough for a loaded
/// machine yet far below what the throttled viewer above reports.
#[test]
fn a_viewer_that_keeps_up_reports_a_small_lag() {
    let host = Host::start(&["--rate", "60", "--status-ms", "0"]);
    let out = viewer(&["attach", &host.addr, "--steps", "240", "--json"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let lines = json_lines(&stdout(&out));
    let lag = lags(&lines);
    assert!(lag.len() >= 2, "a status line a second for 4 s: {lag:?}");
    assert!(lag.iter().all(|&l| l <= 120), "{lag:?}");
    assert!(lines.last().unwrap()["lag"].as_u64().unwrap() <= 120);
    // The plain status line says the same: `... | lag L | ...`.
    let out = viewer(&["attach", &host.addr, "--steps", "150"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let text = stdout(&out);
    let plain: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("host step "))
        .map(|l| {
            let lag = l.split(" | lag ").nth(1).expect("lag field");
            lag.split(' ').next().unwrap().parse().expect("lag number")
        })
        .collect();
    assert!(!plain.is_empty(), "{text}");
    assert!(plain.iter().all(|&l| l <= 120), "{text}");
}

/// The offline report of a replay's fields at a step, as the `fields` command prints it.
fn offline_fields(file: &str, step: u64, json: bool) -> String {
    let mut args = vec![
        "fields".to_string(),
        testdata(file).to_string_lossy().into_owned(),
        "--step".into(),
        step.to_string(),
    ];
    if json {
        args.push("--json".into());
    }
    let out = run(Command::new(viewer_bin()).args(&args));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
}

/// A host serving the fields world; a viewer attached to it prints the fields at step 300
/// exactly as `ostm-viewer fields testdata/test-field-3d.ostm --step 300` does, the host's
/// address standing where that command names its file.
#[test]
fn a_live_viewer_computes_the_same_fields_as_the_file() {
    const STEP: u64 = 300;
    let file = testdata("test-field-3d.ostm");
    let host = Host::start(&[
        "--replay",
        file.to_str().unwrap(),
        "--rate",
        "200",
        "--status-ms",
        "0",
        "--wait-for-viewers",
        "2",
    ]);
    let at = STEP.to_string();
    // The host takes no step until both viewers have attached: both attach at step 0.
    let spawn = |json: bool| {
        let mut args = vec!["attach", &host.addr, "--fields-at", &at, "--until", &at];
        if json {
            args.push("--json");
        }
        spawn_viewer(&args)
    };
    let (plain, json) = (spawn(false), spawn(true));
    let out = finish(plain);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(attached_step(&text) < STEP, "attached before step {STEP}");
    let want = offline_fields("test-field-3d.ostm", STEP, false).replacen(
        &testdata("test-field-3d.ostm")
            .to_string_lossy()
            .into_owned(),
        &host.addr,
        1,
    );
    assert!(
        want.starts_with(&format!("{} at step {STEP}: 3D", host.addr)),
        "{want}"
    );
    assert!(
        text.contains(&want),
        "the live report:\n{text}\nthe file's report:\n{want}"
    );
    assert!(!text.contains("note: no fields"), "{text}");

    // The same in JSON: the `fields` event is the file's report with `addr` for `file`.
    let out = finish(json);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let lines = json_lines(&stdout(&out));
    let mut live = lines
        .iter()
        .find(|l| l["event"] == "fields")
        .unwrap_or_else(|| panic!("no fields event: {lines:?}"))
        .clone();
    assert_eq!(live["addr"], host.addr.as_str());
    let mut want: serde_json::Value =
        serde_json::from_str(&offline_fields("test-field-3d.ostm", STEP, true)).unwrap();
    for (obj, keys) in [
        (&mut live, ["event", "addr"]),
        (&mut want, ["file", "file"]),
    ] {
        for k in keys {
            obj.as_object_mut().unwrap().remove(k);
        }
    }
    assert_eq!(live, want);
}

/// `--fields` alone adds each field's largest value to the status; a step asked for that
/// the viewer cannot show (before it attached) is named in a note, not silently dropped.
#[test]
fn fields_in_the_status_and_a_step_before_attaching_is_named() {
    let file = testdata("test-field-2d.ostm");
    let mut host = Host::start(&[
        "--replay",
        file.to_str().unwrap(),
        "--rate",
        "50",
        "--json",
        "--status-ms",
        "20",
    ]);
    // Attached past step 1 with 100 steps (2 s, two status lines) to go: the replay's 600
    // steps leave 10 s for the viewer to start.
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= 10);
    let out = viewer(&["attach", &host.addr, "--fields-at", "1", "--steps", "100"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let text = stdout(&out);
    let attached = attached_step(&text);
    assert!(
        text.contains(&format!(
            "note: no fields at step 1: the viewer attached at step {attached}, after it"
        )),
        "{text}"
    );
    let status = text
        .lines()
        .find(|l| l.starts_with("host step "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        status.contains(" | density max ") && status.contains(" | occupancy max "),
        "{status}"
    );
}

/// A viewer attached to a linked world says which side it is on: role, declaration and
/// keys as test-module.md states them (the sender declares `ContinuedBy` with key
/// `tm-left`, the receiver `Continues` with key `tm-right`; body 3 moves at step 150).
#[test]
fn attach_names_the_link_role_declaration_and_keys() {
    for (file, role, name, decl, key, peer, verb) in [
        (
            "test-link-left.ostm",
            1,
            "sender",
            "ContinuedBy",
            "tm-left",
            "tm-right",
            "leaves",
        ),
        (
            "test-link-right.ostm",
            2,
            "receiver",
            "Continues",
            "tm-right",
            "tm-left",
            "arrives",
        ),
    ] {
        let path = testdata(file);
        let host = Host::start(&[
            "--replay",
            path.to_str().unwrap(),
            // The replay's 300 steps last 30 s: both viewers attach before its end.
            "--rate",
            "10",
            "--status-ms",
            "0",
        ]);
        let out = viewer(&["attach", &host.addr, "--steps", "1"]);
        assert_eq!(code(&out), 0, "{}", stdout(&out));
        let text = stdout(&out);
        let want = format!(
            "link: role {role} ({name}): body 3 {verb} at step 150; declares {decl}, key {key}, peer key {peer}"
        );
        assert_eq!(text.lines().nth(1), Some(want.as_str()), "{text}");

        let out = viewer(&["attach", &host.addr, "--steps", "1", "--json"]);
        assert_eq!(code(&out), 0, "{}", stdout(&out));
        let lines = json_lines(&stdout(&out));
        let link = &lines[0]["link"];
        assert_eq!(lines[0]["event"], "attached");
        assert_eq!(link["role"], role, "{link}");
        assert_eq!(link["role_name"], name);
        assert_eq!(link["body"], 3);
        assert_eq!(link["transfer_step"], 150);
        assert_eq!(link["declaration"], decl);
        assert_eq!(link["key"], key);
        assert_eq!(link["peer_key"], peer);
    }
    // A world without a link block: no link line, `link` null.
    let host = Host::start(&["--rate", "100", "--status-ms", "0"]);
    let out = viewer(&["attach", &host.addr, "--steps", "1", "--json"]);
    let lines = json_lines(&stdout(&out));
    assert!(lines[0]["link"].is_null(), "{}", lines[0]);
    let out = viewer(&["attach", &host.addr, "--steps", "1"]);
    assert!(!stdout(&out).contains("link:"), "{}", stdout(&out));
}
