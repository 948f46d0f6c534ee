//! Recordings that survive: a recording viewer or host killed with SIGKILL at moments
//! chosen from the run itself leaves a `FILE.part` that `ostm-viewer recover` turns into
//! a replay that verifies, starts at the attach step, and lacks at most the steps of the
//! last second before the kill (known from the viewer's own `--json` status lines, one a
//! second: everything verified before the status line printed one line before the kill
//! is in the file). A planted fault (flushing switched off) turns the check red.
//! Paths are checked before connecting.

mod live_support;

use live_support::*;
use std::path::{Path, PathBuf};

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

/// Every `.part` file in `dir`, sorted.
fn parts(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "part"))
        .collect();
    v.sort();
    v
}

/// When to kill a recording viewer, chosen from what it printed.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// As soon as it printed its `attached` line.
    RightAfterAttach,
    /// Right after its `n`-th status line (a status line follows a flush check).
    AfterStatus(usize),
}

/// What a killed viewer's recording gave after `recover`.
struct Killed {
    attached: u64,
    /// The step of the status line printed one line before the kill (the attach step
    /// when fewer than two were printed).
    safe_step: u64,
    /// `(start, end)` of each recovered or finished file, in step order.
    files: Vec<(u64, u64)>,
    /// `recover` exit codes, one per `.part`.
    recover_codes: Vec<i32>,
}

/// Attaches a recording viewer (`extra` added to its arguments) to `host`, kills it with
/// SIGKILL at `moment`, then recovers every `.part` it left.
fn kill_viewer(host: &Host, dir: &Path, moment: Moment, extra: &[&str]) -> Killed {
    let rec = dir.join("k.ostm");
    let mut args = vec![
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let mut v = spawn_viewer(&args);
    let first = json(&v.line().expect("attached line"));
    assert_eq!(first["event"], "attached", "{first}");
    let attached = first["step"].as_u64().unwrap();
    let mut statuses: Vec<u64> = Vec::new();
    if let Moment::AfterStatus(n) = moment {
        while statuses.len() < n {
            let l = json(&v.line().expect("a status line"));
            if l["event"] == "status" {
                statuses.push(l["step"].as_u64().unwrap());
            }
        }
    }
    let out = v.kill();
    assert!(!out.status.success(), "killed");
    let safe_step = if statuses.len() >= 2 {
        statuses[statuses.len() - 2]
    } else {
        attached
    };
    let mut recover_codes = Vec::new();
    for p in parts(dir) {
        let o = viewer(&["recover", p.to_str().unwrap(), "--json"]);
        recover_codes.push(code(&o));
    }
    let mut files: Vec<(u64, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ostm"))
        .map(|p| {
            let rows = default_rows(recording_end(&p));
            let (start, n) = check_recording(&p, &rows);
            (start, start + n as u64)
        })
        .collect();
    files.sort();
    Killed {
        attached,
        safe_step,
        files,
        recover_codes,
    }
}

/// The property: every file verifies (checked while reading them), the first starts at
/// the attach step, and the last reaches at least the safe step.
fn holds(k: &Killed) -> Result<(), String> {
    if k.recover_codes.iter().any(|&c| c != 0) {
        return Err(format!("recover failed: {:?}", k.recover_codes));
    }
    let (Some(first), Some(last)) = (k.files.first(), k.files.last()) else {
        return Err("no recording at all".into());
    };
    if first.0 != k.attached {
        return Err(format!("starts at {}, attached at {}", first.0, k.attached));
    }
    if last.1 < k.safe_step {
        return Err(format!(
            "ends at step {}, but step {} was verified a second before the kill",
            last.1, k.safe_step
        ));
    }
    Ok(())
}

#[test]
fn a_killed_recording_viewer_is_recovered_at_every_moment() {
    let host = Host::start(&["--rate", "600", "--status-ms", "0"]);
    for (moment, extra) in [
        (Moment::RightAfterAttach, &[][..]),
        (Moment::AfterStatus(1), &[][..]),
        (Moment::AfterStatus(2), &["--sync"][..]),
        (Moment::AfterStatus(5), &[][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let k = kill_viewer(&host, dir.path(), moment, extra);
        holds(&k).unwrap_or_else(|e| panic!("{moment:?} {extra:?}: {e}"));
        assert_eq!(k.files.len(), 1, "{moment:?}: one file");
        if let Moment::AfterStatus(n) = moment {
            if n >= 2 {
                assert!(k.safe_step > k.attached, "{moment:?}: the check has teeth");
            }
        }
    }
}

/// Killed while its recording rotates files at every resync (a viewer that reads too
/// slowly for the host): every file and every `.part` left is recovered and verifies.
#[test]
fn a_viewer_killed_during_resyncs_leaves_files_that_all_verify() {
    let host = Host::start(&["--rate", "max", "--viewer-queue", "8", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("k.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
        "--throttle-read",
        "2000",
    ]);
    let first = json(&v.line().expect("attached"));
    let attached = first["step"].as_u64().unwrap();
    // Kill right after the third resync's rotation was announced.
    let mut resyncs = 0;
    while resyncs < 3 {
        if json(&v.line().expect("a line"))["event"] == "resync" {
            resyncs += 1;
        }
    }
    v.kill();
    for p in parts(dir.path()) {
        let o = viewer(&["recover", p.to_str().unwrap()]);
        assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    }
    let mut starts = Vec::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "ostm") {
            let (start, _) = check_recording(&p, &default_rows(recording_end(&p)));
            starts.push(start);
        }
    }
    starts.sort();
    assert!(starts.len() >= 3, "a file per resync: {starts:?}");
    assert_eq!(starts[0], attached);
}

/// The planted fault: with flushing switched off, the same kill late in the run loses
/// the steps the flushes would have kept, and the check above turns red.
#[test]
fn without_flushing_the_recovery_check_fails() {
    let host = Host::start(&["--rate", "600", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let k = kill_viewer(
        &host,
        dir.path(),
        Moment::AfterStatus(2),
        &["--no-flush-for-tests"],
    );
    assert!(
        holds(&k).is_err(),
        "flushing off, yet the recording held every step verified a second before the kill"
    );
}

/// The host killed while recording its own session: `recover` gives a replay from step 0
/// that holds at least every step the host said it had flushed, and its flushes kept up
/// with its steps (the planted fault leaves the count at 0).
#[test]
fn a_killed_recording_host_is_recovered() {
    for (extra, faulty) in [(&[][..], false), (&["--no-flush-for-tests"][..], true)] {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("h.ostm");
        let mut args = vec![
            "--rate",
            "600",
            "--json",
            "--status-ms",
            "200",
            "--record",
            rec.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let mut host = Host::start(&args);
        let mut steps = Vec::new();
        let mut flushed = 0;
        while steps.len() < 12 {
            let v = host.wait_status(|v| v["event"] == "status");
            steps.push(v["step"].as_u64().unwrap());
            flushed = v["recorded"].as_u64().unwrap();
        }
        host.signal("KILL");
        let _ = host.wait();
        let o = viewer(&["recover", &format!("{}.part", rec.display()), "--json"]);
        if faulty {
            // Nothing reached the file, or far less than the host stepped.
            let reached = if code(&o) == 0 {
                recording_end(&rec)
            } else {
                0
            };
            assert!(
                reached < steps[steps.len() - 6] || flushed < steps[steps.len() - 6],
                "flushing off, yet step {reached} was kept"
            );
            continue;
        }
        assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
        let r = ostm_protocol::Replay::read_file(&rec).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            r.verify(|_| {}),
            ostm_protocol::Verdict::Match { .. }
        ));
        let (start, n) = (r.start_step(), r.step_count());
        assert_eq!(start, 0);
        assert_eq!(r.hashes.as_deref(), Some(&default_rows(n as u64)[..]));
        assert!(
            n as u64 >= flushed,
            "kept {n} steps, the host had flushed {flushed}"
        );
        // Five status lines (a second) before the kill, the host's step was flushed.
        assert!(
            flushed >= steps[steps.len() - 6],
            "flushed {flushed}, the step a second before was {}",
            steps[steps.len() - 6]
        );
    }
}

#[test]
fn recover_reports_what_it_kept_and_dropped_and_refuses_what_holds_nothing() {
    let host = Host::start(&["--rate", "600", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let k = kill_viewer(&host, dir.path(), Moment::AfterStatus(1), &[]);
    holds(&k).unwrap();
    // Make a torn copy by hand: the finished file's own in-progress form is gone, so
    // record again and cut the .part in the middle of a record.
    let rec = dir.path().join("t.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ]);
    v.line().expect("attached");
    v.wait_line(|l| l.contains("\"status\""));
    v.kill();
    let part = dir.path().join("t.ostm.part");
    let len = std::fs::metadata(&part).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    let o = viewer(&["recover", part.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!("recovered {}: ", rec.display())),
        "{text}"
    );
    assert!(
        text.contains("dropped ") && text.contains("a torn last record"),
        "{text}"
    );
    assert!(!part.exists(), "the .part is removed once recovered");
    // Recovering again: nothing there.
    let o = viewer(&["recover", part.to_str().unwrap()]);
    assert_eq!(code(&o), 2);
    // A .part whose header is cut: exit 2, why, at which offset.
    std::fs::write(&part, b"OSTMPAR2OSTM\x01\x00").unwrap();
    let o = viewer(&["recover", part.to_str().unwrap(), "--force"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("nothing recoverable") && stderr(&o).contains("at offset 14"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn record_paths_are_checked_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens here: a path refusal must come first, without a connection attempt.
    let nowhere = "127.0.0.1:9";
    let d = dir.path().to_str().unwrap().to_string();
    let o = viewer(&["attach", nowhere, "--record", &d]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
    let missing = dir.path().join("no/such/dir/s.ostm");
    let o = viewer(&["attach", nowhere, "--record", missing.to_str().unwrap()]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    let o = viewer(&["attach", nowhere, "--record", "/proc/s.ostm"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("cannot record to /proc/s.ostm"),
        "{}",
        stderr(&o)
    );
    let existing = dir.path().join("e.ostm");
    std::fs::write(&existing, b"keep me").unwrap();
    let o = viewer(&["attach", nowhere, "--record", existing.to_str().unwrap()]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("exists; --force overwrites it"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(&existing).unwrap(),
        b"keep me",
        "nothing lost"
    );
    // With --force the path passes; the connection then fails, and nothing is left.
    let o = viewer(&[
        "attach",
        nowhere,
        "--record",
        existing.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
    assert_eq!(parts(dir.path()), Vec::<PathBuf>::new());
    // The host checks the same before it listens.
    let o = run(std::process::Command::new(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--record",
        existing.to_str().unwrap(),
    ]));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("exists; --force overwrites it"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A host at full speed and a recording viewer, with the host's default queue: the
/// viewer reads as fast as the bytes come (its verification may trail, the records wait
/// in its spool), so it is never resynced and one file holds every step from its attach
/// step to the host's last, all verified.
#[test]
fn a_full_speed_host_is_recorded_in_one_file_without_a_gap() {
    // Enough steps for a debug host at full speed to run far ahead of a debug verifier
    // (it does on any machine: the test holds however slow verification is).
    const STEPS: u64 = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("fast.ostm");
    let host = Host::start(&[
        "--rate",
        "max",
        "--steps",
        &STEPS.to_string(),
        "--status-ms",
        "0",
        "--wait-for-viewers",
        "1",
    ]);
    let out = viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    assert_eq!(end["stop"], "host-ended", "{end}");
    assert_eq!(end["resyncs"], 0, "{end}");
    assert_eq!(end["files"].as_array().unwrap().len(), 1, "{end}");
    assert_eq!(end["verified"], STEPS, "{end}");
    let (start, n) = check_recording(&rec, &default_rows(STEPS));
    assert_eq!((start, start + n as u64), (0, STEPS));
    let (status, _, _) = host.wait();
    assert!(status.success());
}

/// Reads a `--json` viewer's lines until `pred` holds for one.
fn until_event(v: &mut Proc, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let l = v.wait_line(|l| pred(&json(l)));
    json(&l)
}

/// A viewer stopped (SIGSTOP) for 15 s, longer than the host's stall and silence
/// timeouts, then resumed: it reads what waited in its socket, finds the connection
/// dropped, reconnects, and carries on verifying and recording; every file verifies.
#[test]
fn a_paused_viewer_reconnects_and_carries_on() {
    let host = Host::start(&["--rate", "300", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("p.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--reconnect",
        "--json",
    ]);
    until_event(&mut v, |e| e["event"] == "status");
    v.signal("STOP");
    std::thread::sleep(std::time::Duration::from_secs(15));
    v.signal("CONT");
    let gap = until_event(&mut v, |e| e["event"] == "gap" || e["event"] == "resync");
    let after = until_event(&mut v, |e| e["event"] == "status");
    let resumed_at = gap["to"].as_u64().unwrap();
    until_event(&mut v, |e| {
        e["event"] == "status" && e["step"].as_u64().unwrap() > resumed_at + 300
    });
    v.signal("INT");
    let out = v.finish();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    assert_eq!(end["stop"], "interrupted", "{end}");
    assert!(after["verified"].as_u64().unwrap() > 0);
    let files = end["files"].as_array().unwrap();
    assert!(files.len() >= 2, "a new file after the gap: {end}");
    for f in files {
        let p = PathBuf::from(f["path"].as_str().unwrap());
        check_recording(&p, &default_rows(recording_end(&p)));
    }
}

/// A viewer stopped (SIGSTOP) for longer than the 10 s silence timeout while the host
/// runs to its end: every record and the end message wait in the viewer's socket, and the
/// resumed viewer reads them before it judges the host silent (docs/protocol.md,
/// "Heartbeats and timeouts"): it verifies and records every step and ends as the host
/// did, rather than `the host sent nothing for 10000 ms`.
#[test]
fn a_viewer_paused_past_the_silence_timeout_reads_what_waited_in_its_socket() {
    // 600 records of the default world (about 30 KiB) fit in the sockets' buffers.
    let host = Host::start(&["--rate", "100", "--steps", "600", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("paused.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ]);
    let attached = until_event(&mut v, |e| e["event"] == "attached");
    until_event(&mut v, |e| e["event"] == "status");
    v.signal("STOP");
    let stopped = std::time::Instant::now();
    // The host sends its last record and its end while the viewer is stopped.
    let (status, _, _) = host.wait();
    assert!(status.success());
    // Past the viewer's silence timeout (counted from its last frame, before the stop).
    let pause = std::time::Duration::from_secs(11);
    std::thread::sleep(pause.saturating_sub(stopped.elapsed()));
    v.signal("CONT");
    let out = v.finish();
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}");
    let end = json(text.lines().last().unwrap());
    assert_eq!(end["stop"], "host-ended", "{end}");
    assert_eq!(end["reason"], "finished", "{end}");
    let from = attached["step"].as_u64().unwrap();
    assert_eq!(end["step"], 600, "{end}");
    assert_eq!(end["verified"].as_u64().unwrap(), 600 - from, "{end}");
    assert_eq!(end["files"].as_array().unwrap().len(), 1, "{end}");
    assert_eq!(
        check_recording(&rec, &default_rows(600)),
        (from, 600 - from as usize)
    );
}

/// A viewer stopped (SIGSTOP) shortly before a `--rate max --steps N` host ends and
/// resumed once the host has run its last step: more than the host's queue behind, it is
/// sent the end in place of a resync. It reads what the host sent it (no reset: the host
/// lingers while the viewer takes what it is owed) and names the steps from its world to
/// the host's last as a gap left open, exit 1 (docs/protocol.md, "The verdict's count"),
/// in its events, its end object and its last line.
#[test]
fn a_viewer_paused_as_a_host_at_full_speed_ends_names_the_steps_it_never_reached() {
    const N: u64 = 400_000;
    let dir = tempfile::tempdir().unwrap();
    let host_rec = dir.path().join("host.ostm");
    let rec = dir.path().join("paused.ostm");
    let mut host = Host::start(&[
        "--rate",
        "max",
        "--steps",
        &N.to_string(),
        "--viewer-queue",
        "64",
        "--json",
        "--status-ms",
        "20",
        "--record",
        host_rec.to_str().unwrap(),
    ]);
    let mut v = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ]);
    until_event(&mut v, |e| e["event"] == "attached");
    // Shortly before the end (well within the host's 10 s silence timeout at any speed
    // this machine runs it): the host's status past N - 40 000, or its end.
    loop {
        let l = host.line().expect("the host's status lines");
        let s = json(&l);
        if s["event"] == "end" || s["step"].as_u64().unwrap_or(0) >= N - 40_000 {
            break;
        }
    }
    v.signal("STOP");
    // The host has run its last step once its recording is finished.
    let deadline = std::time::Instant::now() + LIMIT;
    while !host_rec.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the host never finished its recording"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    v.signal("CONT");
    let out = v.finish();
    let text = stdout(&out);
    assert!(
        !text.contains("reset") && !stderr(&out).contains("reset"),
        "{text}\n{}",
        stderr(&out)
    );
    let end = json(text.lines().last().unwrap());
    assert_eq!(end["stop"], "host-ended", "{end}");
    assert_eq!(end["reason"], "finished", "{end}");
    assert_eq!(end["host_step"], N, "{end}");
    let step = end["step"].as_u64().unwrap();
    let from = end["attached_at"].as_u64().unwrap();
    // Every step from the attach to N is counted: verified, or in a gap or resync named.
    assert_eq!(end["total"], N - from, "{end}");
    assert_eq!(end["end_step"], N, "{end}");
    assert_eq!(
        end["verified"].as_u64().unwrap() + end["not_verified"].as_u64().unwrap(),
        N - from,
        "{end}"
    );
    let message = end["message"].as_str().unwrap();
    if step == N {
        // The host's status came late (a host starved of the CPU): the viewer was
        // stopped too late to fall behind, and it verified everything.
        assert_eq!(code(&out), 0, "{text}");
        assert_eq!(end["verdict"], "ok", "{end}");
        assert_eq!(end["open_gap"], false, "{end}");
        return;
    }
    // A queue of 64 records: the viewer stopped while the host ran on is behind it.
    assert!(step < N, "{end}");
    assert_eq!(code(&out), 1, "{text}");
    assert_eq!(end["verdict"], "incomplete", "{end}");
    assert_eq!(end["open_gap"], true, "{end}");
    let gaps = end["gaps"].as_array().unwrap();
    let last = gaps.last().expect("the open gap");
    assert_eq!(
        (last["from"].as_u64(), last["to"].as_u64()),
        (Some(step), Some(N)),
        "{end}"
    );
    assert_eq!(last["steps"], N - step, "{end}");
    assert!(
        message.starts_with("incomplete: the host ended the stream (finished: ")
            && message.contains(&format!(
                "of the {} steps from {from} to {N}; {} in 1 gap",
                N - from,
                N - step
            )),
        "{message}"
    );
    // The gap was an event as it was found, as any gap is.
    assert!(
        text.lines()
            .any(|l| json(l)["event"] == "gap" && json(l)["to"] == N),
        "{text}"
    );
    let (status, _, _) = host.wait();
    assert!(status.success());
}

/// The host killed and started again on the same port: a `--reconnect` viewer reports
/// the gap, joins the new host at its step, and its two files verify.
#[test]
fn a_reconnecting_viewer_rides_out_a_restarted_host() {
    let host = Host::start(&["--rate", "300", "--status-ms", "0"]);
    let addr = host.addr.clone();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &addr,
        "--record",
        rec.to_str().unwrap(),
        "--reconnect",
        "--json",
    ]);
    until_event(&mut v, |e| e["event"] == "status");
    host.signal("KILL");
    let _ = host.wait();
    // Said at once, while no host is there yet.
    let lost = until_event(&mut v, |e| e["event"] == "lost" || e["event"] == "gap");
    assert_eq!(
        lost["event"], "lost",
        "the loss is said before the reconnection: {lost}"
    );
    let again = Host::start_at(&addr, &["--rate", "300", "--status-ms", "0"], &[]);
    let gap = until_event(&mut v, |e| e["event"] == "gap");
    assert!(gap["why"].as_str().unwrap().len() > 5, "{gap}");
    assert_eq!(
        gap["why"], lost["why"],
        "the gap says why, as the loss did: {gap} {lost}"
    );
    assert_eq!(gap["from"], lost["step"], "{gap} {lost}");
    assert_eq!(gap["file"], numbered(&rec, 1).to_str().unwrap());
    let to = gap["to"].as_u64().unwrap();
    until_event(&mut v, |e| {
        e["event"] == "status" && e["step"].as_u64().unwrap() > to + 100
    });
    v.signal("INT");
    let out = v.finish();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    assert_eq!(end["gaps"].as_array().unwrap().len(), 1, "{end}");
    for n in 0..2 {
        let p = numbered(&rec, n);
        check_recording(&p, &default_rows(recording_end(&p)));
    }
    drop(again);
}

/// Attaches a `--reconnect` recording viewer to a host (the default world, 1 000 steps/s),
/// lets it pass step 2 000, kills the host and starts `again` on the same port (slow, so
/// that it is still far below step 2 000 when the viewer rejoins). Returns the viewer's
/// gap event, its end object and the recording's base path.
fn rejoin_restarted(dir: &Path, again: &[&str]) -> (serde_json::Value, serde_json::Value, PathBuf) {
    let host = Host::start(&["--rate", "1000", "--status-ms", "0"]);
    let addr = host.addr.clone();
    let rec = dir.join("r.ostm");
    let mut v = spawn_viewer(&[
        "attach",
        &addr,
        "--record",
        rec.to_str().unwrap(),
        "--reconnect",
        "--json",
    ]);
    let attached = until_event(&mut v, |e| e["event"] == "attached");
    let attached = attached["step"].as_u64().unwrap();
    until_event(&mut v, |e| {
        e["event"] == "status" && e["step"].as_u64().unwrap() > 2000
    });
    host.signal("KILL");
    let _ = host.wait();
    let mut args = vec!["--rate", "50", "--status-ms", "0"];
    args.extend_from_slice(again);
    let restarted = Host::start_at(&addr, &args, &[]);
    let gap = until_event(&mut v, |e| e["event"] == "gap");
    let to = gap["to"].as_u64().unwrap();
    // Past the first file's first step too (a loaded machine may attach late), so that
    // the files of one world overlap where the steps ran again.
    until_event(&mut v, |e| {
        e["event"] == "status" && e["step"].as_u64().unwrap() > to.max(attached) + 20
    });
    v.signal("INT");
    let out = v.finish();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    drop(restarted);
    (gap, end, rec)
}

/// A host restarted with the same world comes back behind the viewer's step: the gap says
/// so (no `steps F..T not seen` with T before F, no `"steps": 0`: the steps the old stream
/// held past F are not known), and the two files overlap where the new host runs the
/// same steps again, which `verify` of the set compares and accepts.
#[test]
fn a_host_restarted_behind_the_viewer_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let (gap, end, rec) = rejoin_restarted(dir.path(), &[]);
    let (from, to) = (gap["from"].as_u64().unwrap(), gap["to"].as_u64().unwrap());
    assert!(to < from, "{gap}");
    assert!(gap["steps"].is_null(), "{gap}");
    assert_eq!(gap["behind"], from - to, "{gap}");
    assert!(gap.get("world").is_none(), "{gap}");
    assert_eq!(end["gaps"][0]["steps"], serde_json::Value::Null, "{end}");
    assert_eq!(end["gaps"][0]["behind"], from - to, "{end}");
    let o = viewer(&[
        "verify",
        rec.to_str().unwrap(),
        numbered(&rec, 1).to_str().unwrap(),
        "--no-bundle",
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("every row agrees"),
        "the files overlap where the steps ran again: {}",
        stdout(&o)
    );
}

/// A host restarted with another world: the gap names both worlds, the recording's next
/// file is of the new world and verifies alone, and `verify` of both files refuses them
/// as the docs say, with the explanation.
#[test]
fn a_host_restarted_with_another_world_starts_a_set_of_that_world() {
    let dir = tempfile::tempdir().unwrap();
    let (gap, end, rec) = rejoin_restarted(
        dir.path(),
        &["--dims", "2", "--bodies", "8", "--seed", "42"],
    );
    assert_eq!(
        gap["world"], "setup dims=2 bodies=8 seed=42 link=none",
        "{gap}"
    );
    assert_eq!(
        gap["was"], "setup dims=3 bodies=24 seed=10000 link=none",
        "{gap}"
    );
    assert!(gap["steps"].is_null(), "{gap}");
    assert_eq!(end["gaps"][0]["world"], gap["world"], "{end}");
    let next = numbered(&rec, 1);
    let o = viewer(&["verify", next.to_str().unwrap(), "--no-bundle"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let o = viewer(&[
        "verify",
        rec.to_str().unwrap(),
        next.to_str().unwrap(),
        "--no-bundle",
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("not files of one world")
            && stderr(&o).contains("verify the files of each world apart"),
        "{}",
        stderr(&o)
    );
}
