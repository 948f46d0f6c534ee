//! The drift report, against a host whose world is changed outside a step by the hidden
//! `--perturb STEP:BODY` flag (body BODY's velocity.y gains 1 after step STEP, with no
//! record saying so). The expected values come from running the embedded world here.
//! The failure bundle the viewer writes on drift replays to the same report.

mod live_support;

use live_support::*;
use ostm_protocol::format::bundle::Bundle;
use std::path::Path;

const STEP: u64 = 3000;

fn planted() -> (usize, i32) {
    live_support::planted(STEP)
}

/// A host on the embedded world at 1000 steps/s, perturbed at `STEP` when asked, that
/// takes its first step once `viewers` viewers have attached (so they attach at step 0,
/// before `STEP`, however slowly the machine starts them).
fn host(perturb: bool, viewers: u32) -> Host {
    let (body, _) = planted();
    let planted = format!("{STEP}:{body}");
    let viewers = viewers.to_string();
    let mut args = vec![
        "--rate",
        "1000",
        "--steps",
        "6000",
        // Every world of the run held: a viewer that falls behind on a loaded machine
        // still gets the host's snapshot at the drifting step.
        "--ring",
        "6001",
        "--json",
        "--status-ms",
        "50",
        "--wait-for-viewers",
        &viewers,
    ];
    if perturb {
        args.extend_from_slice(&["--perturb", &planted]);
    }
    Host::start(&args)
}

/// `attach --until 4000 --record DIR/s.ostm`, attached at step 0.
fn attach_from_early(perturb: bool, dir: &Path) -> std::process::Output {
    let host = host(perturb, 1);
    let record = dir.join("s.ostm");
    viewer(&[
        "attach",
        &host.addr,
        "--until",
        "4000",
        "--record",
        record.to_str().unwrap(),
    ])
}

fn bundles_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ostmb"))
        .collect();
    names.sort();
    names
}

#[test]
fn the_report_names_the_planted_step_body_and_field_and_that_every_stage_agrees() {
    let (body, vy) = planted();
    let dir = tempfile::tempdir().unwrap();
    let out = attach_from_early(true, dir.path());
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "drift exits 1: {text}{}", stderr(&out));
    let start = attached_step(&text);
    assert!(start < STEP, "attached before the planted step ({start})");
    assert!(
        text.contains(&format!(
            "drift at step {STEP}: body {body} velocity.y host={} viewer={vy}",
            vy + 1
        )),
        "{text}"
    );
    assert!(
        text.contains("every stage agrees: the host's world was changed outside the step"),
        "{text}"
    );
    // The bundle lands beside the recording, and the line says how to replay it.
    let bundle = dir.path().join(format!("s.drift-{STEP}.ostmb"));
    let b = bundle.to_str().unwrap();
    assert!(
        text.contains(&format!(
            "bundle written: {b} (reproduce: ostm-viewer replay {b})"
        )),
        "{text}"
    );
    // That one command prints the same step, body, field and both values.
    let out = viewer(&["replay", b]);
    assert_eq!(code(&out), 1, "the failure reproduces: {}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "first difference at step {STEP}: body {body} velocity.y: this build {vy}, reference {}",
            vy + 1
        )),
        "{}",
        stdout(&out)
    );
}

/// The same run without the planted change: no drift and no bundle (the test above can fail).
#[test]
fn without_the_planted_change_the_same_run_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let out = attach_from_early(false, dir.path());
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("ok: verified "), "{}", stdout(&out));
    assert_eq!(bundles_in(dir.path()), Vec::<String>::new());
}

#[test]
fn the_report_as_json_and_its_bundle_replays_to_the_same_report() {
    let (body, vy) = planted();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.ostmb");
    let host = host(true, 1);
    let out = viewer(&[
        "check",
        &host.addr,
        "--steps",
        "5000",
        "--json",
        "--bundle",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 1);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["verdict"], "drift");
    let d = &v["drift"];
    assert_eq!(d["step"], STEP);
    assert_eq!(d["body"], body);
    assert_eq!(d["field"], "velocity.y");
    assert_eq!(d["host"], vy as i64 + 1);
    assert_eq!(d["viewer"], vy as i64);
    assert_eq!(d["every_stage_agrees"], true);
    assert_eq!(v["bundle"], path.to_str().unwrap());
    // The host answered the drift request.
    host.interrupt();
    let (_, last, _) = host.wait();
    let end: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(end["drift_requests"], 1);

    // Replayed: the same step, both hashes, and the same body, field and values.
    let replay = |p: &Path| {
        let out = viewer(&["replay", p.to_str().unwrap(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        (code(&out), v)
    };
    let (rc, r) = replay(&path);
    assert_eq!(rc, 1, "the failure reproduces: {r}");
    assert_eq!(r["mismatch"]["step"], d["step"]);
    assert_eq!(r["mismatch"]["expected"], d["host_hash"]);
    assert_eq!(r["mismatch"]["computed"], d["viewer_hash"]);
    let f = &r["difference"];
    assert_eq!(
        (&f["step"], &f["body"], &f["field"], &f["value"], &f["this"]),
        (
            &d["step"],
            &d["body"],
            &d["field"],
            &d["host"],
            &d["viewer"]
        ),
        "{r}"
    );
    assert_eq!(f["other"], "reference");

    // The bundle really carries the failure. Without the host's snapshot the hash row
    // still differs but no field difference is named ...
    let bundle = Bundle::read_file(&path).unwrap();
    assert!(bundle.reference.is_some() && bundle.writer.is_some());
    let mut stripped = bundle.clone();
    stripped.reference = None;
    let p = dir.path().join("stripped.ostmb");
    stripped.write_file(&p).unwrap();
    let (rc, r) = replay(&p);
    assert_eq!(rc, 1, "{r}");
    assert_eq!(r["difference"], serde_json::Value::Null, "{r}");
    // ... and the same step on an unperturbed host (its world and hash are the viewer's)
    // reproduces nothing at all.
    let viewer_world = bundle.writer.clone().unwrap();
    let start = bundle.replay.start.clone().unwrap();
    let clean = Bundle::from_drift(
        &start,
        bundle.replay.inputs.get(0),
        viewer_world.hash(),
        &viewer_world,
        Some(viewer_world.clone()),
        "unperturbed",
    )
    .unwrap();
    let p = dir.path().join("clean.ostmb");
    clean.write_file(&p).unwrap();
    let (rc, r) = replay(&p);
    assert_eq!(rc, 0, "{r}");
    assert_eq!(r["reproduces"], false);
    assert_eq!(r["difference"], serde_json::Value::Null, "{r}");
}

/// Without `--bundle` (and no recording) the bundle is `drift-STEP.ostmb` in the current
/// directory; `--no-bundle` writes none.
#[test]
fn the_default_bundle_path_and_no_bundle() {
    let (with, without) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = host(true, 2);
    let a = spawn_viewer_in(with.path(), &["check", &host.addr, "--steps", "5000"]);
    let b = spawn_viewer_in(
        without.path(),
        &["check", &host.addr, "--steps", "5000", "--no-bundle"],
    );
    let (a, b) = (finish(a), finish(b));
    assert_eq!((code(&a), code(&b)), (1, 1));
    let name = format!("drift-{STEP}.ostmb");
    assert!(
        stdout(&a).ends_with(&format!(
            "; bundle written: {name} (reproduce: ostm-viewer replay {name})\n"
        )),
        "{}",
        stdout(&a)
    );
    assert_eq!(bundles_in(with.path()), vec![name]);
    assert!(!stdout(&b).contains("bundle"), "{}", stdout(&b));
    assert_eq!(bundles_in(without.path()), Vec::<String>::new());
}

/// Two viewers in one directory on one perturbed host both pick `drift-STEP.ostmb`: each
/// writes a file of its own (the second the next free name, `drift-STEP-2.ostmb`), says
/// which, and both bundles reproduce. (Before, the second replaced the first's file, or
/// the two wrote one `PATH.part` and one of them reported it missing.)
#[test]
fn two_viewers_in_one_directory_write_two_bundles_and_name_each() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(true, 2);
    let a = spawn_viewer_in(dir.path(), &["attach", &host.addr, "--until", "4000"]);
    let b = spawn_viewer_in(
        dir.path(),
        &["attach", &host.addr, "--until", "4000", "--json"],
    );
    let (a, b) = (finish(a), finish(b));
    assert_eq!((code(&a), code(&b)), (1, 1), "{}{}", stderr(&a), stderr(&b));
    let name = format!("drift-{STEP}.ostmb");
    let second = format!("drift-{STEP}-2.ostmb");
    assert_eq!(bundles_in(dir.path()), vec![second.clone(), name.clone()]);
    let text = stdout(&a);
    let line = text
        .lines()
        .find(|l| l.starts_with("bundle written: "))
        .unwrap_or_else(|| panic!("{text}{}", stderr(&a)));
    let end: serde_json::Value = serde_json::from_str(stdout(&b).lines().last().unwrap()).unwrap();
    let from_json = end["bundle"].as_str().unwrap_or_else(|| panic!("{end}"));
    let from_text = line
        .strip_prefix("bundle written: ")
        .and_then(|l| l.split(' ').next())
        .unwrap();
    let mut named = vec![from_text.to_string(), from_json.to_string()];
    named.sort();
    assert_eq!(named, vec![second, name], "{line} / {end}");
    for b in named {
        let out = finish(spawn_viewer_in(dir.path(), &["replay", &b]));
        assert_eq!(code(&out), 1, "{b} reproduces: {}", stdout(&out));
    }
    assert!(
        !std::fs::read_dir(dir.path()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".part")),
        "no part file is left"
    );
}
