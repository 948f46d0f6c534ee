//! One CLI style, on the real binary: every command that reports something takes
//! `--json` and prints snake_case keys; `--help` shows defaults as a person reads them and
//! has examples; `trace -o` shows progress on a terminal, ends with a `wrote` line, and
//! leaves no `.part` file when Ctrl-C or SIGTERM stops it.

mod support;

use ostm_protocol::{Dims, Replay, Setup};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::viewer;

fn testdata(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name)
        .display()
        .to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The subcommands `ostm-viewer --help` lists.
fn subcommands() -> Vec<String> {
    let help = viewer(&["--help"]).stdout;
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every key of `v` (nested objects and arrays included) that is not snake_case.
fn not_snake_case(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let snake = k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && k.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                if !snake {
                    out.push(format!("{path}.{k}"));
                }
                not_snake_case(x, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                not_snake_case(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Every JSON value a run printed on stdout (one pretty object, or one object a line).
fn values(stdout: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

#[test]
fn every_command_that_reports_takes_json_with_snake_case_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| s(&dir.path().join(name));
    // A replay with a wrong hash row (its 601 rows follow a short header), for verify's
    // mismatch and replay's bundle.
    let bad = d("bad.ostm");
    let mut bytes = std::fs::read(testdata("test-2d-600.ostm")).unwrap();
    bytes[2000] ^= 1;
    std::fs::write(&bad, bytes).unwrap();
    let bundle = d("bad.ostmb");
    let (ten, flat, ghost) = (
        testdata("test-10000.ostm"),
        testdata("test-2d-600.ostm"),
        testdata("test-2d-ghost.ospc"),
    );
    let (left, right) = (
        testdata("test-link-left.ostm"),
        testdata("test-link-right.ostm"),
    );
    let part = d("cut.ostm.part");
    std::fs::write(&part, b"not a recording").unwrap();
    let (k, seek_index, png, trace_a, cache) = (
        d("k.json"),
        d("ten.seek"),
        d("f.png"),
        d("a.trace"),
        d("g.ospc"),
    );
    let man = d("man");
    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("inspect", vec![&ten]),
        ("verify", vec![&bad, "--bundle", &bundle]),
        ("replay", vec![&bundle]),
        ("fields", vec![&flat, "--step", "10"]),
        ("render", vec![&flat, "--step", "10", "-o", &png]),
        ("follow", vec![&left, &right, "--body", "3"]),
        (
            "ghost",
            vec![
                &flat, "--from", "200", "--frames", "5", "--offset", "400,0", "-o", &cache,
            ],
        ),
        ("compare", vec![&flat, &ghost, "--offset", "400,0"]),
        ("trace", vec![&flat, "--to", "50", "-o", &trace_a]),
        ("first-difference", vec![&trace_a, &flat]),
        ("recover", vec![&part]),
        ("keyframe", vec![&ten, "--step", "300", "-o", &k]),
        ("index", vec![&ten, "--every", "2048", "-o", &seek_index]),
        ("seek", vec![&ten, "--step", "5000", "--index", &seek_index]),
        ("man", vec!["--out", &man]),
    ];
    let mut problems = Vec::new();
    let mut covered: Vec<&str> = Vec::new();
    for (cmd, args) in &runs {
        let mut all = vec![*cmd];
        all.extend(args.iter().copied());
        all.push("--json");
        let run = viewer(&all);
        let vs = values(&run.stdout);
        if vs.is_empty() {
            problems.push(format!(
                "{cmd} --json printed nothing (exit {}): {}",
                run.code, run.stderr
            ));
        }
        for v in &vs {
            let mut bad_keys = Vec::new();
            not_snake_case(v, cmd, &mut bad_keys);
            problems.extend(
                bad_keys
                    .into_iter()
                    .map(|k| format!("{cmd}: key {k} is not snake_case")),
            );
        }
        covered.push(cmd);
    }
    // The live commands (attach, check) are run against a host in the live tests,
    // sessions against a NATS server in nats_sessions.rs, and watch, which serves until
    // stopped, in watch_server.rs; here their help must offer --json like every other
    // command. `completions` prints a shell script, which is its output (tests/shell.rs).
    for cmd in subcommands().into_iter().filter(|c| c != "completions") {
        let help = viewer(&[&cmd, "--help"]).stdout;
        if !help.contains("--json") {
            problems.push(format!("{cmd} has no --json"));
        }
        if !covered.contains(&cmd.as_str())
            && !["attach", "check", "watch", "sessions"].contains(&cmd.as_str())
        {
            problems.push(format!("{cmd}: not run with --json by this test"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The keyframe file itself keeps the format's own names.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&k).unwrap()).unwrap();
    assert!(
        file.get("tickRate").is_some(),
        "the keyframe file keeps tickRate"
    );
    // Planted fault: a camelCase key anywhere is found.
    let mut found = Vec::new();
    not_snake_case(
        &serde_json::json!({"a": [{"b_c": {"tickRate": 1}}]}),
        "x",
        &mut found,
    );
    assert_eq!(found, ["x.a[0].b_c.tickRate"]);
}

/// Problems with one `--help` text: no examples, or a default no person reads at a glance
/// (a plain number of 10 digits or more, such as u64::MAX).
fn help_problems(name: &str, help: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !help.contains("Examples:") {
        out.push(format!("{name}: --help has no examples"));
    }
    for d in help.split("[default: ").skip(1) {
        let value = d.split(']').next().unwrap_or("");
        if value.len() >= 10 && value.chars().all(|c| c.is_ascii_digit()) {
            out.push(format!("{name}: default shown as {value}"));
        }
    }
    out
}

#[test]
fn help_shows_examples_and_defaults_as_a_person_reads_them() {
    let mut problems = help_problems("ostm-viewer", &viewer(&["--help"]).stdout);
    for cmd in subcommands() {
        problems.extend(help_problems(&cmd, &viewer(&[&cmd, "--help"]).stdout));
    }
    let host = ostm_testkit::bin("ostm-host");
    for args in [&["--help"][..], &["serve", "--help"][..]] {
        let out = ostm_testkit::run(std::process::Command::new(&host).args(args));
        let help = String::from_utf8_lossy(&out.stdout);
        problems.extend(help_problems(
            &format!("ostm-host {}", args.join(" ")),
            &help,
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Planted fault: the default the issue saw.
    assert_eq!(
        help_problems("x", "Examples:\n --to <TO> [default: 18446744073709551615]").len(),
        1
    );
}

/// A 2D one-body replay of `steps` empty steps with no hash rows: quick to write, a
/// trace of about 60 bytes a step.
fn long_replay(dir: &Path, steps: usize) -> PathBuf {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 1,
        seed: 7,
    };
    let mut r = Replay::new(setup, None);
    for _ in 0..steps {
        r.inputs.push_ops(&[]);
    }
    let path = dir.join("long.ostm");
    r.write_file(&path).unwrap();
    path
}

#[test]
fn trace_to_a_file_ends_with_a_wrote_line_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let run = viewer(&["trace", &testdata("test-2d-600.ostm"), "-o", &s(&out)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let bytes = std::fs::metadata(&out).unwrap().len();
    assert_eq!(
        run.stdout.trim(),
        format!("wrote {}: 601 rows, {bytes} bytes", out.display())
    );
    let run = viewer(&[
        "trace",
        &testdata("test-2d-600.ostm"),
        "-o",
        &s(&out),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        (v["rows"].as_u64(), v["bytes"].as_u64()),
        (Some(601), Some(bytes))
    );
    // --json without -o: the rows go to stdout, so there is nothing to report.
    let run = viewer(&["trace", &testdata("test-2d-600.ostm"), "--json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
}

#[test]
fn trace_stopped_by_ctrl_c_or_sigterm_leaves_no_part_file() {
    let dir = tempfile::tempdir().unwrap();
    let long = long_replay(dir.path(), 3_000_000);
    for sig in ["INT", "TERM"] {
        let out = dir.path().join(format!("{sig}.trace"));
        let part = dir.path().join(format!("{sig}.trace.part"));
        let p = ostm_testkit::Proc::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_ostm-viewer")).args([
                "trace",
                &s(&long),
                "-o",
                &s(&out),
            ]),
        );
        // Wait until the trace is well under way (its first 64 KiB are on disk).
        let t0 = Instant::now();
        while std::fs::metadata(&part).map_or(0, |m| m.len()) < 64 * 1024 {
            assert!(
                t0.elapsed() < ostm_testkit::LIMIT,
                "{sig}: the trace never got under way"
            );
            assert!(!out.exists(), "{sig}: the trace finished before the signal");
            std::thread::sleep(Duration::from_millis(5));
        }
        p.signal(sig);
        let o = p.finish();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{sig}: {err}");
        assert!(
            err.contains("interrupted") && err.contains(".part removed"),
            "{sig}: {err}"
        );
        assert!(!part.exists(), "{sig}: {} left behind", part.display());
        assert!(!out.exists(), "{sig}: a partial trace was named as whole");
    }
}

#[test]
fn trace_shows_progress_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let long = long_replay(dir.path(), 200_000);
    let out = dir.path().join("t.trace");
    // `script` runs the command on a pseudo-terminal and copies what it showed.
    let cmd = format!(
        "{} trace {} -o {}",
        env!("CARGO_BIN_EXE_ostm-viewer"),
        long.display(),
        out.display()
    );
    let o = ostm_testkit::run(
        std::process::Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .env("TERM", "xterm"),
    );
    let shown = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("trace ") && shown.contains("steps, eta"),
        "no progress: {shown}"
    );
    assert!(shown.contains("wrote "), "{shown}");
    // Off a terminal the same run prints the wrote line alone.
    let run = viewer(&["trace", &s(&long), "-o", &s(&out)]);
    assert_eq!(run.stderr, "", "progress off a terminal");
}

/// A reader that stops taking the output early (`ostm-viewer verify F | head -1`) is no
/// failure: the command finishes with the exit code it would have had, and never panics
/// on the closed pipe (Rust's `println!` does: it ignores SIGPIPE and the write fails).
#[test]
fn a_reader_that_has_gone_is_no_failure() {
    let replay = testdata("test-10000.ostm");
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.trace");
    let cases: Vec<(Vec<String>, i32)> = vec![
        (vec!["inspect".into(), replay.clone()], 0),
        (vec!["inspect".into(), "--json".into(), replay.clone()], 0),
        (vec!["verify".into(), replay.clone()], 0),
        (vec!["verify".into(), "--json".into(), replay.clone()], 0),
        (
            vec![
                "fields".into(),
                replay.clone(),
                "--step".into(),
                "10".into(),
            ],
            0,
        ),
        (
            vec![
                "trace".into(),
                replay.clone(),
                "--to".into(),
                "50".into(),
                "-o".into(),
                s(&trace),
            ],
            0,
        ),
        (vec!["--help".into()], 0),
    ];
    for (args, want) in cases {
        // A pipe whose reading end is closed before the child writes a byte.
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
            .args(&args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("ostm-viewer runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(want), "{args:?}: {err}");
    }
    // The trace's file was written whole though nobody read its `wrote` line.
    assert!(trace.exists(), "trace -o wrote its file");
}
