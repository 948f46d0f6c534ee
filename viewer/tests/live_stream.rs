//! The live stream end to end: the real `ostm-host` on 127.0.0.1 port 0 and the real
//! `ostm-viewer`. Late join, recordings that verify and agree, the host's own recording,
//! replays served, the host ending mid-stream, Ctrl-C on either side, `check`, resync.

mod live_support;

use live_support::*;
use ostm_protocol::Replay;

/// The embedded world is test-10000's world: the committed file's rows are the reference.
#[test]
fn the_embedded_world_is_test_10000() {
    let file = Replay::read_file(&testdata("test-10000.ostm")).expect("test-10000");
    let rows = default_rows(10_000);
    assert!(
        file.hashes.as_deref() == Some(&rows[..]),
        "test-10000's rows are the embedded world's"
    );
}

/// A viewer's exit code and everything it printed on stdout.
fn rest(p: Proc) -> (i32, String) {
    let out = finish(p);
    (code(&out), stdout(&out))
}

#[test]
fn late_joiners_record_files_that_verify_and_whose_overlap_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.ostm");
    let b = dir.path().join("b.ostm");
    // No --steps: the host runs until the test drops it, so however late a viewer starts
    // on a loaded machine, the steps it is asked for are still ahead of it.
    let mut host = Host::start(&["--rate", "1000", "--json", "--status-ms", "50"]);
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= 100);
    // a runs until it is stopped, once b has attached and a has verified past b's attach
    // step (read from a's own status lines, so the two recordings overlap however the
    // machine schedules them); b verifies 2 000 steps.
    let mut ca = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        a.to_str().unwrap(),
        "--json",
    ]);
    let first: serde_json::Value = serde_json::from_str(&ca.line().expect("attached")).unwrap();
    assert_eq!(first["event"], "attached", "{first}");
    let step_a = first["step"].as_u64().unwrap();
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= step_a + 200);
    let (cb, step_b) = spawn_attached(&[
        "attach",
        &host.addr,
        "--record",
        b.to_str().unwrap(),
        "--steps",
        "2000",
    ]);
    ca.wait_line(|l| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        v["event"] == "status" && v["step"].as_u64().unwrap() >= step_b + 100
    });
    ca.signal("INT");
    assert!(step_a >= 100, "late join: attached at step {step_a}");
    assert!(
        step_b > step_a,
        "the second viewer attached later ({step_b} > {step_a})"
    );
    let (code_a, out_a) = rest(ca);
    let (code_b, out_b) = rest(cb);
    assert_eq!(code_a, 0, "{out_a}");
    assert_eq!(code_b, 0, "{out_b}");
    let end: serde_json::Value = serde_json::from_str(out_a.lines().last().unwrap()).unwrap();
    assert_eq!(end["stop"], "interrupted", "{end}");
    let end_a = end["step"].as_u64().unwrap();
    assert_eq!(end["verified"].as_u64().unwrap(), end_a - step_a, "{end}");
    let end_b = step_b + 2000;
    assert!(
        out_b.contains(&format!(
            "ok: verified 2000 of the 2000 steps from {step_b} to {end_b}"
        )),
        "{out_b}"
    );

    let rows = default_rows(end_a.max(end_b));
    let (sa, na) = check_recording(&a, &rows);
    let (sb, nb) = check_recording(&b, &rows);
    assert_eq!(
        (sa, sa + na as u64),
        (step_a, end_a),
        "a's recording starts at its attach step and holds every verified step"
    );
    assert_eq!((sb, sb + nb as u64), (step_b, end_b));
    // The overlap (at least 100 steps), compared directly between the two files by step
    // number.
    let ra = Replay::read_file(&a).unwrap().hashes.unwrap();
    let rb = Replay::read_file(&b).unwrap().hashes.unwrap();
    let overlap = (sb..=end_a.min(end_b)).collect::<Vec<_>>();
    assert!(
        overlap.len() > 100,
        "b attached at {sb}, a ended at {end_a}"
    );
    for s in overlap {
        assert_eq!(ra[(s - sa) as usize], rb[(s - sb) as usize], "step {s}");
    }
    // The start snapshot's first 8 bytes are the host's step at attach.
    let bytes = std::fs::read(&b).unwrap();
    let snap_at = 4 + 2 + 2 + 4 + 6 + 4 + 4; // header, setup, step count, snapshot length
    assert_eq!(
        u64::from_le_bytes(bytes[snap_at..snap_at + 8].try_into().unwrap()),
        step_b
    );
}

#[test]
fn the_host_ending_mid_stream_leaves_the_recording_valid() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c.ostm");
    let host = Host::start(&[
        "--rate",
        "1000",
        "--steps",
        "3000",
        "--status-ms",
        "0",
        "--wait-for-viewers",
        "1",
    ]);
    let out = viewer(&["attach", &host.addr, "--record", c.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out)
            .contains("ok: the host ended the stream (finished: the host ran its 3000 steps)"),
        "{}",
        stdout(&out)
    );
    let (start, n) = check_recording(&c, &default_rows(3000));
    assert_eq!(start + n as u64, 3000, "recorded to the host's last step");
    let (status, last, _) = host.wait();
    assert!(status.success());
    assert!(last.starts_with("end: finished"), "{last}");
}

#[test]
fn the_host_records_its_own_session() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.ostm");
    let host = Host::start(&[
        "--rate",
        "max",
        "--steps",
        "2500",
        "--status-ms",
        "0",
        "--record",
        h.to_str().unwrap(),
    ]);
    let (status, _, _) = host.wait();
    assert!(status.success());
    let r = Replay::read_file(&h).unwrap();
    assert_eq!(
        r.flags(),
        1,
        "hash rows, no start snapshot: the host started at step 0"
    );
    let rows = default_rows(2500);
    let got = r.hashes.unwrap();
    assert_eq!(got.len(), rows.len());
    assert_eq!(
        got.iter().zip(&rows).position(|(a, b)| a != b),
        None,
        "first differing row"
    );
}

#[test]
fn a_replay_is_served_with_its_own_hashes_and_the_host_records_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = testdata("test-start-snapshot.ostm");
    let src = Replay::read_file(&file).unwrap();
    let h = dir.path().join("h.ostm");
    let v = dir.path().join("v.ostm");
    let mut host = Host::start(&[
        "--replay",
        file.to_str().unwrap(),
        // The replay's 1 000 steps last 10 s: the viewer joins late, before the end.
        "--rate",
        "100",
        "--json",
        "--status-ms",
        "50",
        "--record",
        h.to_str().unwrap(),
    ]);
    let start = src.start_step();
    host.wait_status(|s| s["step"].as_u64().unwrap_or(0) >= start + 50);
    let out = viewer(&["attach", &host.addr, "--record", v.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("the replay's last step was served"),
        "{}",
        stdout(&out)
    );
    let (status, _, _) = host.wait();
    assert!(status.success());
    // The host's recording is the file again: same start world, inputs and rows.
    let back = Replay::read_file(&h).unwrap();
    assert_eq!(back, src);
    // The viewer's rows are the file's rows at the same steps.
    let rv = Replay::read_file(&v).unwrap();
    let rows = src.hashes.as_ref().unwrap();
    let off = (rv.start_step() - start) as usize;
    assert!(off >= 50, "joined late");
    assert_eq!(rv.hashes.as_deref(), Some(&rows[off..]));
}

#[test]
fn check_prints_a_one_line_verdict() {
    let host = Host::start(&["--rate", "1000", "--status-ms", "0"]);
    let out = viewer(&["check", &host.addr, "--steps", "200"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("ok: verified 200 of the 200 steps from "),
        "{text}"
    );
    let out = viewer(&["check", &host.addr, "--steps", "50", "--json"]);
    assert_eq!(code(&out), 0);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["verdict"], "ok");
    assert_eq!(v["verified"], 50);
    // Nothing listening: exit 2 with a one-line error.
    let gone = host.addr.clone();
    drop(host);
    let out = viewer(&["check", &gone, "--steps", "5"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).starts_with("error: cannot connect to "),
        "{}",
        stdout(&out)
    );
}

/// Ctrl-C (SIGINT) or SIGTERM on the host: every viewer is told the stream ended and why,
/// and the viewer's recording runs up to the host's last step.
#[test]
fn ctrl_c_or_sigterm_on_the_host_ends_every_stream_with_a_reason() {
    for sig in ["INT", "TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().join("r.ostm");
        let mut host = Host::start(&["--rate", "500", "--json", "--status-ms", "50"]);
        let (child, _) = spawn_attached(&["attach", &host.addr, "--record", r.to_str().unwrap()]);
        host.wait_status(|v| v["viewers"] == 1);
        host.signal(sig);
        let (c, out) = rest(child);
        assert_eq!(c, 0, "SIG{sig}: {out}");
        assert!(
            out.contains("ok: the host ended the stream (shutdown: the host was stopped)"),
            "SIG{sig}: {out}"
        );
        let (status, last, _) = host.wait();
        assert!(status.success(), "SIG{sig}");
        assert!(last.contains("\"reason\":\"shutdown\""), "SIG{sig}: {last}");
        let end: serde_json::Value = serde_json::from_str(&last).unwrap();
        let (start, n) = check_recording(&r, &default_rows(end["step"].as_u64().unwrap()));
        assert_eq!(
            start + n as u64,
            end["step"].as_u64().unwrap(),
            "SIG{sig}: recorded up to the host's last step"
        );
    }
}

/// Ctrl-C (SIGINT) or SIGTERM on the viewer: it stops and its recording is whole.
#[test]
fn ctrl_c_or_sigterm_on_the_viewer_finishes_its_recording() {
    for sig in ["INT", "TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().join("r.ostm");
        let mut host = Host::start(&["--rate", "500", "--json", "--status-ms", "50"]);
        let (child, step) =
            spawn_attached(&["attach", &host.addr, "--record", r.to_str().unwrap()]);
        host.wait_status(|v| v["step"].as_u64().unwrap_or(0) > step + 100);
        child.signal(sig);
        let (c, out) = rest(child);
        assert_eq!(c, 0, "SIG{sig}: {out}");
        assert!(out.contains("stopped: verified "), "SIG{sig}: {out}");
        let (start, n) = check_recording(&r, &default_rows(recording_end(&r)));
        assert_eq!(start, step, "SIG{sig}");
        assert!(n > 0, "SIG{sig}");
    }
}

/// SIGTERM on a host that records its own session finishes that recording too.
#[test]
fn sigterm_on_a_recording_host_leaves_a_whole_recording() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("host.ostm");
    let mut host = Host::start(&[
        "--rate",
        "500",
        "--json",
        "--status-ms",
        "50",
        "--record",
        r.to_str().unwrap(),
    ]);
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) > 100);
    host.signal("TERM");
    let (status, last, _) = host.wait();
    assert!(status.success(), "{last}");
    let end: serde_json::Value = serde_json::from_str(&last).unwrap();
    let steps = end["step"].as_u64().unwrap();
    let rec = ostm_protocol::Replay::read_file(&r).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rec.start_step(), 0);
    assert_eq!(rec.step_count() as u64, steps, "recorded every step");
    assert!(matches!(
        rec.verify(|_| {}),
        ostm_protocol::Verdict::Match { .. }
    ));
    assert_eq!(rec.hashes.as_deref(), Some(&default_rows(steps)[..]));
}

/// A viewer that reads far slower than the host sends (the hidden `--throttle-read`) is
/// resynced, not failed; its recording closes at each gap and continues in a numbered
/// file, and every file verifies on its own.
#[test]
fn a_slow_viewer_is_resynced_and_its_recording_continues_in_numbered_files() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.ostm");
    // No --steps: the host steps at full speed until the test drops it, so the viewer's
    // 20 000 steps are ahead of it however late it starts.
    let host = Host::start(&["--rate", "max", "--viewer-queue", "8", "--status-ms", "0"]);
    let out = viewer(&[
        "attach",
        &host.addr,
        "--record",
        r.to_str().unwrap(),
        "--throttle-read",
        "3000",
        "--steps",
        "20000",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let end = lines.last().unwrap();
    let files = end["files"].as_array().unwrap();
    let resyncs = lines.iter().filter(|l| l["event"] == "resync").count();
    assert!(
        resyncs >= 1,
        "a viewer reading 3000 records/s behind a host at full speed is resynced"
    );
    assert_eq!(files.len(), resyncs + 1, "one file per unbroken run");
    let last_step = files
        .iter()
        .map(|f| f["start_step"].as_u64().unwrap() + f["steps"].as_u64().unwrap())
        .max()
        .unwrap();
    let rows = default_rows(last_step);
    let mut prev_end = 0;
    for (i, f) in files.iter().enumerate() {
        let path = std::path::PathBuf::from(f["path"].as_str().unwrap());
        let want = numbered(&r, i as u32);
        assert_eq!(path, want);
        let (start, n) = check_recording(&path, &rows);
        assert!(
            start >= prev_end,
            "files follow each other, gaps between them"
        );
        prev_end = start + n as u64;
    }
}

/// `--wait-for-viewers 1`: the host takes no step while nobody is attached, then the
/// viewer attaches at the start step and is sent every step.
#[test]
fn a_host_that_waits_for_a_viewer_holds_its_start_step() {
    let mut host = Host::start(&[
        "--rate",
        "max",
        "--steps",
        "500",
        "--wait-for-viewers",
        "1",
        "--json",
        "--status-ms",
        "20",
    ]);
    for _ in 0..5 {
        let v = host.wait_status(|v| v["event"] == "status");
        assert_eq!(v["step"], 0, "no step before a viewer attached: {v}");
    }
    let out = viewer(&["check", &host.addr, "--steps", "500"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("ok: verified 500 of the 500 steps from 0 to 500"),
        "{}",
        stdout(&out)
    );
    let (status, last, _) = host.wait();
    assert!(status.success());
    assert!(last.contains("\"reason\":\"finished\""), "{last}");
}

/// `--until` at or below the attach step has nothing to verify: refused, exit 2.
#[test]
fn until_at_or_below_the_attach_step_is_refused() {
    let host = Host::start(&["--rate", "100", "--status-ms", "0"]);
    let out = viewer(&["attach", &host.addr, "--until", "0"]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("--until 0 is at or below the step the viewer attached at"),
        "{}",
        stderr(&out)
    );
}
