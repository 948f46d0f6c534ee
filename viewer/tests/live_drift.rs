//! The drift report, against a host whose world is changed outside a step by the hidden
//! `--perturb STEP:BODY` flag (body BODY's velocity.y gains 1 after step STEP, with no
//! record saying so). The expected values come from running the embedded world here.

mod live_support;

use live_support::*;

const STEP: u64 = 3000;

/// A body alive at `STEP` in the embedded world, and its velocity.y there.
fn planted() -> (usize, i32) {
    let w = default_world_at(STEP);
    let body = (5..w.bodies.len())
        .find(|&i| w.bodies[i].alive)
        .expect("a live body");
    (body, w.bodies[body].vel[1])
}

fn attach_from_early(perturb: bool) -> std::process::Output {
    let (body, _) = planted();
    let planted = format!("{STEP}:{body}");
    let mut args = vec![
        "--rate",
        "1500",
        "--steps",
        "6000",
        "--json",
        "--status-ms",
        "50",
    ];
    if perturb {
        args.extend_from_slice(&["--perturb", &planted]);
    }
    let mut host = Host::start(&args);
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= 10);
    viewer(&["attach", &host.addr, "--until", "4000"])
}

#[test]
fn the_report_names_the_planted_step_body_and_field_and_that_every_stage_agrees() {
    let (body, vy) = planted();
    let out = attach_from_early(true);
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
}

/// The same run without the planted change: no drift (the test above can fail).
#[test]
fn without_the_planted_change_the_same_run_verifies() {
    let out = attach_from_early(false);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("ok: verified "), "{}", stdout(&out));
}

#[test]
fn the_report_as_json() {
    let (body, vy) = planted();
    let (body_s, step_s) = (body.to_string(), STEP.to_string());
    let mut host = Host::start(&[
        "--rate",
        "1500",
        "--steps",
        "6000",
        "--json",
        "--status-ms",
        "50",
        "--perturb",
        &format!("{step_s}:{body_s}"),
    ]);
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= 10);
    let out = viewer(&["check", &host.addr, "--steps", "5000", "--json"]);
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
    // The host answered the drift request.
    host.interrupt();
    let (_, last, _) = host.wait();
    let end: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(end["drift_requests"], 1);
}
