//! The step counter at 2^64, through every tool: the example of `docs/test-module.md`
//! ("The step counter at 2^64", "An example"), a replay whose start snapshot is at step
//! `u64::MAX - 3` and whose receiver's transfer at step 1 happens after the wrap. The
//! commands and their output are read from the page, so the page cannot drift from what
//! the tools print.

use ostm_protocol::sim::link::{Link, Role};
use ostm_protocol::sim::world::{Dims, Setup, World};
use ostm_protocol::Replay;
use std::path::Path;
use std::process::Command;

const DOC: &str = include_str!("../../docs/test-module.md");

/// `wrap.ostm` as the page describes it.
fn wrap_replay() -> Replay {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 2,
        seed: 7,
    };
    let link = Some(Link {
        role: Role::Receiver,
        body: 1,
        transfer_step: 1,
    });
    let mut start = World::new(setup, link);
    start.step = u64::MAX - 3;
    let mut r = Replay::new(setup, link);
    r.start = Some(start);
    for _ in 0..8 {
        r.inputs.push_ops(&[]);
    }
    r.compute_hashes();
    r
}

/// The in-progress file of the same recording (docs/replay-format.md): `OSTMPAR2`, the
/// header with step count 0, row 0 and the header check, then per step its input, the
/// hash row after it and the record check.
fn in_progress(r: &Replay) -> Vec<u8> {
    use ostm_protocol::format::recording::journal::{header_check, record_check, JOURNAL_MAGIC};
    let bytes = r.to_bytes();
    let rows = r.hashes.as_ref().expect("rows");
    let inputs: usize = r.inputs.iter().map(|i| 2 + i.len()).sum();
    let head = bytes.len() - rows.len() * 8 - inputs;
    let mut header = bytes[..head].to_vec();
    // The step count: after the setup (6) and link block (4) behind the 12-byte prefix.
    header[22..26].copy_from_slice(&0u32.to_le_bytes());
    let mut out = JOURNAL_MAGIC.to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&rows[0].to_le_bytes());
    let check = header_check(&out);
    out.extend_from_slice(&check.to_le_bytes());
    for (i, input) in r.inputs.iter().enumerate() {
        let mut record = (input.len() as u16).to_le_bytes().to_vec();
        record.extend_from_slice(input);
        record.extend_from_slice(&rows[i + 1].to_le_bytes());
        out.extend_from_slice(&record);
        out.extend_from_slice(&record_check(check, &record).to_le_bytes());
    }
    out
}

fn make_files(dir: &Path) {
    let wrap = wrap_replay();
    assert_eq!(wrap.end_step(), 4);
    wrap.write_file(&dir.join("wrap.ostm")).expect("write");
    wrap.write_file(&dir.join("copy.ostm")).expect("write");
    let mut bad = wrap.clone();
    bad.hashes.as_mut().expect("rows")[6] ^= 1;
    bad.write_file(&dir.join("wrap-bad.ostm")).expect("write");
    std::fs::write(dir.join("rec.ostm.part"), in_progress(&wrap)).expect("write");
    // The same world recorded from step 1 (row 5): its last three inputs.
    let mut after = Replay::new(wrap.setup, wrap.link);
    let at_1 = wrap.world_at(1, |_| {}).expect("step 1 is held");
    assert_eq!(at_1.step, 1);
    after.start = Some(at_1);
    for i in 5..8 {
        after.inputs.push(wrap.inputs.get(i)).expect("input");
    }
    after.compute_hashes();
    after.write_file(&dir.join("after.ostm")).expect("write");
}

/// The page's example block: `(command line, exit code, expected output)` in order.
fn doc_commands() -> Vec<(String, i32, String)> {
    let start = DOC.find("**An example.**").expect("the example paragraph");
    let block = &DOC[start..];
    let block = &block[block.find("```text\n").expect("its block") + 8..];
    let block = &block[..block.find("\n```").expect("the block's end")];
    let mut out: Vec<(String, i32, String)> = Vec::new();
    for line in block.lines() {
        if let Some(cmd) = line.strip_prefix("$ ostm-viewer ") {
            let (cmd, code) = match cmd.split_once("  # exit ") {
                Some((c, n)) => (c, n.parse().expect("exit code")),
                None => (cmd, 0),
            };
            out.push((cmd.to_string(), code, String::new()));
        } else {
            let last = out.last_mut().expect("a command before its output");
            last.2.push_str(line);
            last.2.push('\n');
        }
    }
    out
}

#[test]
fn every_tool_prints_the_wrapped_steps_the_page_shows() {
    let dir = tempfile::tempdir().expect("temp dir");
    make_files(dir.path());
    let commands = doc_commands();
    assert!(commands.len() >= 15, "the example's commands");
    for (cmd, code, want) in &commands {
        let out = ostm_testkit::run(
            Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
                .current_dir(dir.path())
                .env_remove("RUST_LOG")
                .args(cmd.split(' ')),
        );
        let got = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(got, *want, "ostm-viewer {cmd}");
        assert_eq!(out.status.code(), Some(*code), "ostm-viewer {cmd}: {got}");
    }
    // What the commands left: a bundle that reproduces at the wrapped step, the recovered
    // file equal to the original, and the JSON step numbers the page names.
    assert!(dir.path().join("wrap-bad.ostm.ostmb").exists());
    assert_eq!(
        std::fs::read(dir.path().join("rec.ostm")).expect("recovered"),
        std::fs::read(dir.path().join("wrap.ostm")).expect("original")
    );
    let json = |args: &[&str]| -> serde_json::Value {
        let out = ostm_testkit::run(
            Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
                .current_dir(dir.path())
                .args(args),
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let inspect = json(&["inspect", "--json", "wrap.ostm"]);
    assert_eq!(inspect["start_step"], u64::MAX - 3);
    assert_eq!(inspect["end_step"], 4);
    assert_eq!(inspect["hashes"]["last"]["step"], 4);
    let verify = json(&["verify", "--json", "wrap.ostm"]);
    assert_eq!(verify["start_step"], u64::MAX - 3);
    assert_eq!(verify["end_step"], 4);
    let bad = json(&["verify", "--json", "--no-bundle", "wrap-bad.ostm"]);
    assert_eq!(bad["mismatch"]["step"], 2);
    assert_eq!(bad["mismatch"]["row"], 6);
    let replay = json(&["replay", "--json", "wrap-bad.ostm.ostmb"]);
    assert_eq!(replay["mismatch"]["step"], 2);
    assert_eq!(replay["reproduces"], true);
    let set = json(&["verify", "--json", "wrap.ostm", "copy.ostm"]);
    assert_eq!(set["first_step"], u64::MAX - 3);
    assert_eq!(set["end_step"], 4);
    assert_eq!(set["overlaps"][0]["from"], u64::MAX - 3);
    assert_eq!(set["overlaps"][0]["to"], 4);
    assert_eq!(set["overlaps"][0]["rows"], 9);
}

#[test]
fn one_step_of_a_wrapping_replay_is_found_by_its_wrapped_number() {
    let dir = tempfile::tempdir().expect("temp dir");
    make_files(dir.path());
    let run = |args: &[&str]| {
        let out = ostm_testkit::run(
            Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
                .current_dir(dir.path())
                .args(args),
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // Row 1 (before the wrap) and row 6 (after it, the arrived body in the world).
    for (step, live) in [("18446744073709551613", 1), ("2", 2)] {
        let (code, out) = run(&["fields", "wrap.ostm", "--step", step, "--json"]);
        assert_eq!(code, Some(0), "fields --step {step}: {out}");
        let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(doc["step"].to_string(), step);
        let total: u64 = doc["occupancy"]["values"]
            .as_array()
            .expect("rows")
            .iter()
            .flat_map(|r| r.as_array().expect("row"))
            .flat_map(|c| c.as_array().expect("cell"))
            .map(|v| v.as_u64().expect("count"))
            .sum();
        assert_eq!(total, live, "live bodies at step {step}");
        let (code, _) = run(&["render", "wrap.ostm", "--step", step, "-o", "f.svg"]);
        assert_eq!(code, Some(0), "render --step {step}");
    }
    // A pose cache of steps after the wrap, and compare against it.
    let (code, out) = run(&[
        "ghost",
        "wrap.ostm",
        "--from",
        "0",
        "--frames",
        "5",
        "--offset",
        "0,0",
        "-o",
        "g.ospc",
    ]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = run(&["compare", "wrap.ostm", "g.ospc", "--offset", "0,0"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("all 5 frames within 0 mm"), "{out}");
    // One frame too many runs past the replay's end step.
    let (code, _) = run(&[
        "ghost",
        "wrap.ostm",
        "--from",
        "0",
        "--frames",
        "6",
        "--offset",
        "0,0",
        "-o",
        "h.ospc",
    ]);
    assert_eq!(code, Some(2));
    // follow refuses a pair whose steps wrap, with a reason, and does not panic.
    let mut left = wrap_replay();
    left.link = Some(Link {
        role: Role::Sender,
        ..left.link.expect("link")
    });
    let mut start = World::new(left.setup, left.link);
    start.step = u64::MAX - 3;
    left.start = Some(start);
    left.compute_hashes();
    left.write_file(&dir.path().join("left.ostm"))
        .expect("write");
    let (code, out) = run(&["follow", "left.ostm", "wrap.ostm"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("whose step numbers wrap to 0 after 18446744073709551615"),
        "{out}"
    );
}
