//! `ostm-host serve --from-keyframe`: a host started from a keyframe exported with
//! `ostm-viewer keyframe` streams exactly the hashes the original run has from the
//! keyframe's tick on. Real binaries, real TCP on 127.0.0.1.

mod live_support;

use live_support::*;
use ostm_protocol::Replay;
use std::path::{Path, PathBuf};

/// `ostm-viewer keyframe FILE --step STEP -o DIR/k-STEP.json`.
fn export(file: &Path, step: u64, dir: &Path) -> PathBuf {
    let out = dir.join(format!("k-{step}.json"));
    let o = viewer(&[
        "keyframe",
        file.to_str().unwrap(),
        "--step",
        &step.to_string(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    out
}

/// A recording's start step and hash rows.
fn rows_of(path: &Path) -> (u64, Vec<u64>) {
    let r = Replay::read_file(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.flags() & 0b11, 0b11, "hash rows and a start snapshot");
    (r.start_step(), r.hashes.expect("rows"))
}

/// `ostm-host serve [--replay REPLAY] --from-keyframe K --rate max --steps STEPS --record
/// DIR/host.ostm`, run to its end: the recording's start step and rows, and the host's
/// stderr.
fn serve_to_end(
    replay: Option<&Path>,
    k: &Path,
    steps: u64,
    dir: &Path,
) -> (u64, Vec<u64>, String) {
    let rec = dir.join("host.ostm");
    let steps = steps.to_string();
    let mut args = vec![];
    if let Some(r) = replay {
        args.extend(["--replay", r.to_str().unwrap()]);
    }
    args.extend([
        "--from-keyframe",
        k.to_str().unwrap(),
        "--rate",
        "max",
        "--steps",
        &steps,
        "--record",
        rec.to_str().unwrap(),
    ]);
    let (status, last, err) = Host::start(&args).wait();
    assert!(status.success(), "{last}{err}");
    let (start, got) = rows_of(&rec);
    (start, got, err)
}

#[test]
fn a_keyframe_served_with_its_replay_streams_the_replays_rows_from_its_tick() {
    const N: u64 = 4000;
    let dir = tempfile::tempdir().unwrap();
    let file = testdata("test-10000.ostm");
    let rows = Replay::read_file(&file).unwrap().hashes.unwrap();
    let k = export(&file, N, dir.path());
    let (host_rec, viewer_rec) = (dir.path().join("host.ostm"), dir.path().join("viewer.ostm"));
    let host = Host::start(&[
        "--replay",
        file.to_str().unwrap(),
        "--from-keyframe",
        k.to_str().unwrap(),
        "--rate",
        "2000",
        "--record",
        host_rec.to_str().unwrap(),
        "--json",
        "--status-ms",
        "50",
        "--wait-for-viewers",
        "1",
    ]);
    let out = viewer(&[
        "attach",
        &host.addr,
        "--record",
        viewer_rec.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let attached = attached_step(&stdout(&out));
    assert_eq!(
        attached, N,
        "the host waited for the viewer at the keyframe's step"
    );
    let (status, last, err) = host.wait();
    assert!(status.success(), "{last}{err}");

    // The viewer's recording: from the step it attached at to the replay's end, the
    // replay's own rows.
    let (start, steps) = check_recording(&viewer_rec, &rows);
    assert_eq!((start, start + steps as u64), (attached, 10_000));
    // The host's own recording starts exactly at the keyframe's tick.
    let (start, got) = rows_of(&host_rec);
    assert_eq!(start, N);
    assert_eq!(got, rows[N as usize..]);
    assert!(!err.contains("differs"), "{err}");
}

/// The same run from a keyframe one unit off: the host's rows part from the replay's at
/// once, and it says so (the test above can fail).
#[test]
fn a_keyframe_one_unit_off_streams_other_rows() {
    const N: u64 = 4000;
    let dir = tempfile::tempdir().unwrap();
    let file = testdata("test-10000.ostm");
    let rows = Replay::read_file(&file).unwrap().hashes.unwrap();
    let k = export(&file, N, dir.path());
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&k).unwrap()).unwrap();
    let order: Vec<String> = serde_json::from_value(doc["entityOrder"].clone()).unwrap();
    let live = order
        .iter()
        .find(|b| doc["entities"][b.as_str()]["body"]["alive"] == true)
        .expect("a live body")
        .clone();
    let vel = &mut doc["entities"][live.as_str()]["body"]["vel"][0];
    *vel = (vel.as_i64().unwrap() + 1).into();
    std::fs::write(&k, doc.to_string()).unwrap();
    let (start, got, err) = serve_to_end(Some(&file), &k, 100, dir.path());
    assert_eq!(start, N);
    assert_eq!(got.len(), 101);
    let first = got
        .iter()
        .zip(&rows[N as usize..])
        .position(|(a, b)| a != b);
    assert_eq!(first, Some(0), "the keyframe's own row already differs");
    assert!(
        err.contains("the replay's hash row differs from the host's world"),
        "{err}"
    );
}

/// Without `--replay`, the scenario of the keyframe's seed drives it. `test-10000.ostm` is
/// the embedded world, so a keyframe from it continues the embedded stream exactly, also
/// past the file's last step: against the rows the scenario gives here.
#[test]
fn a_keyframe_of_the_embedded_world_served_alone_continues_the_embedded_stream() {
    const N: u64 = 9000;
    let dir = tempfile::tempdir().unwrap();
    let k = export(&testdata("test-10000.ostm"), N, dir.path());
    let (start, got, _) = serve_to_end(None, &k, 3000, dir.path());
    assert_eq!(start, N);
    assert_eq!(got, default_rows(N + 3000)[N as usize..]);
}

#[test]
fn a_keyframe_that_is_not_the_replays_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let k = export(&testdata("test-10000.ostm"), 300, dir.path());
    let host = run(std::process::Command::new(host_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--replay"])
        .arg(testdata("test-2d-600.ostm"))
        .arg("--from-keyframe")
        .arg(&k));
    assert_eq!(host.status.code(), Some(2));
    let err = String::from_utf8_lossy(&host.stderr);
    assert!(
        err.contains("k-300.json") && err.contains("is not the replay's"),
        "{err}"
    );
    // A keyframe brings its own setup.
    let host = run(std::process::Command::new(host_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--seed", "5"])
        .arg("--from-keyframe")
        .arg(&k));
    assert_eq!(host.status.code(), Some(2));
}
