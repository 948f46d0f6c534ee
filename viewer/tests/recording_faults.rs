//! Recordings under faults, with the real binaries: a disk that fills (a small tmpfs, in a
//! user and mount namespace of the test's own; skipped with a message where the machine
//! does not allow one), a file-size limit (`RLIMIT_FSIZE`, which the kernel enforces with
//! SIGXFSZ), and a damaged in-progress file. Each must end with a clear error naming the
//! file and what to do (exit 2), leave nothing but finished files and `FILE.part`, and
//! what was written must stay recoverable (docs/protocol.md, "Recording a live session";
//! docs/replay-format.md, "The in-progress file").

mod live_support;

use live_support::*;
use ostm_protocol::format::recording::{journal_path, Durability, Recorder};
use ostm_protocol::Replay;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The viewer's end object, last on stdout, after a recording failed: its message holds
/// each of `says`, no file was finished, and `FILE.part` of `rec` is left unfinished.
/// Returns the part's start step and the steps the message counts.
fn left_unfinished(text: &str, rec: &Path, says: &[String]) -> (u64, u64) {
    let end = json(text.lines().last().unwrap());
    let err = end["message"].as_str().unwrap();
    for s in says {
        assert!(err.contains(s.as_str()), "{s:?} in {err}");
    }
    assert_eq!(end["files"].as_array().unwrap().len(), 0, "{end}");
    let left = &end["unfinished"][0];
    assert_eq!(left["part"], journal_path(rec).to_str().unwrap(), "{end}");
    (
        left["start_step"].as_u64().unwrap(),
        left["steps"].as_u64().unwrap(),
    )
}

/// `ostm-viewer recover` of `rec`'s `FILE.part`: exit 0, and `rec` a replay that
/// verifies. Returns recover's JSON line.
fn recovered(rec: &Path) -> serde_json::Value {
    let part = journal_path(rec);
    let o = viewer(&["recover", part.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let r = Replay::read_file(rec).unwrap();
    assert!(matches!(
        r.verify(|_| {}),
        ostm_protocol::Verdict::Match { .. }
    ));
    json(stdout(&o).lines().next().unwrap())
}

/// A viewer recording a fast host under a file-size limit of 32 KiB: the limit is reached
/// within a second. SIGXFSZ does not kill it: the write fails with EFBIG, and the viewer
/// says which `.part` it left, what that holds for sure and that `recover` is next (exit
/// 2). `recover` then makes a file that verifies and holds at least what was said.
#[test]
fn a_file_size_limit_is_an_error_that_names_the_part_and_recover() {
    let host = Host::start(&["--rate", "max", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.ostm");
    let mut cmd = Command::new(viewer_bin());
    cmd.args([
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ]);
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 32 * 1024,
                rlim_max: 32 * 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = run(&mut cmd);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "not killed by SIGXFSZ, and an error: {:?}\n{text}{}",
        out.status,
        stderr(&out)
    );
    let part = journal_path(&rec);
    let (from, sure) = left_unfinished(
        &text,
        &rec,
        &[
            format!(
                "cannot write the recording: {}: File too large",
                part.display()
            ),
            "a file-size limit is reached".into(),
            format!("ostm-viewer recover {}", part.display()),
        ],
    );
    assert_eq!(names(dir.path()), ["s.ostm.part"], "nothing else is left");
    // Without the limit, `recover` keeps at least the steps said to be there.
    let got = recovered(&rec);
    assert_eq!(got["start_step"].as_u64().unwrap(), from);
    assert_eq!(
        got["steps"].as_u64().unwrap(),
        sure,
        "the message counts what the file holds: {got}"
    );
}

/// Runs `script` (sh) in a user and mount namespace of its own, with a tmpfs of `size`
/// mounted on `$1` (`mnt`) and `$2` the viewer; `$3`.. are `args`. `None` when the
/// machine allows no such namespace (the test then says so and passes).
fn in_small_tmpfs(
    size: &str,
    mnt: &Path,
    script: &str,
    args: &[&str],
) -> Option<std::process::Output> {
    let probe = Command::new("unshare")
        .args([
            "-rm",
            "sh",
            "-c",
            "mount -t tmpfs -o size=4k tmpfs \"$1\"",
            "sh",
        ])
        .arg(mnt)
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!(
            "skipped: this machine allows no user and mount namespace with a tmpfs (unshare -rm): {probe:?}"
        );
        return None;
    }
    let full = format!("mount -t tmpfs -o size={size} tmpfs \"$1\" || exit 99\n{script}");
    let out = run(Command::new("unshare")
        .args(["-rm", "sh", "-c", &full, "sh"])
        .arg(mnt)
        .arg(viewer_bin())
        .args(args));
    assert_ne!(out.status.code(), Some(99), "{}", stderr(&out));
    Some(out)
}

/// A recording whose in-progress file fits on a small tmpfs but whose finished copy does
/// not: the viewer's finish fails naming `FILE.part.tmp` and the full disk, keeps
/// `FILE.part` with every step and says `recover` is next (exit 2); `recover` on the same
/// full disk fails the same way; neither leaves a partial `FILE.part.tmp`. With room
/// again, `recover` gives every step.
#[test]
fn a_full_disk_at_the_finish_leaves_the_part_and_no_partial_file() {
    let host = Host::start(&["--rate", "max", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let keep = dir.path().join("keep");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&keep).unwrap();
    // 4 500 steps of the default world: about 72 KB in progress, 54 KB finished; 96 KiB
    // of tmpfs hold the first and not both.
    let script = r#"
"$2" attach "$3" --record "$1/s.ostm" --steps 4500 --json
echo "viewer $?"
"$2" recover "$1/s.ostm.part" --json
echo "recover $?"
ls -A "$1" | sed 's/^/left /'
cp "$1/s.ostm.part" "$4/"
"#;
    let Some(out) = in_small_tmpfs("96k", &mnt, script, &[&host.addr, keep.to_str().unwrap()])
    else {
        return;
    };
    let text = stdout(&out);
    assert!(text.contains("\nviewer 2\n"), "{text}{}", stderr(&out));
    let end = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "end")
        .expect("the viewer's end object");
    let err = end["message"].as_str().unwrap();
    let part = mnt.join("s.ostm.part");
    assert!(
        err.contains(&format!(
            "cannot finish the recording: cannot write {}.tmp: No space left on device",
            part.display()
        )) && err.contains("(the disk is full)")
            && err.contains(&format!(
                "{} is kept with all its 4500 steps: `ostm-viewer recover {}`",
                part.display(),
                part.display()
            )),
        "{err}"
    );
    assert!(text.contains("\nrecover 2\n"), "{text}");
    let left: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("left "))
        .collect();
    assert_eq!(left, ["s.ostm.part"], "no partial file: {text}");
    // With room again.
    let kept = keep.join("s.ostm.part");
    let o = viewer(&["recover", kept.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let got = json(stdout(&o).lines().next().unwrap());
    assert_eq!(got["steps"], 4500, "{got}");
    assert!(got["dropped"].is_null(), "{got}");
}

/// A recording of `n` steps of a test file left unfinished in `dir` as `NAME.part`; the
/// offsets at which its records start, and the file's length last.
fn unfinished(dir: &Path, name: &str, n: usize) -> (PathBuf, Vec<usize>) {
    let r = Replay::read_file(&testdata("test-2d-600.ostm")).unwrap();
    let out = dir.join(name);
    let mut rec =
        Recorder::create_with(&out, &r.start_world(), false, Durability::default()).unwrap();
    let rows = r.hashes.as_ref().unwrap();
    for i in 0..n {
        rec.push(r.inputs.get(i), rows[i + 1]).unwrap();
    }
    rec.flush(std::time::Instant::now()).unwrap();
    std::mem::forget(rec);
    let part = journal_path(&out);
    let len = std::fs::metadata(&part).unwrap().len() as usize;
    let mut starts = vec![len];
    let mut at = len;
    for i in (0..n).rev() {
        at -= 2 + r.inputs.get(i).len() + 8 + 4;
        starts.push(at);
    }
    starts.reverse();
    (part, starts)
}

/// One byte changed in the middle of a `.part`: `recover` keeps the steps before it,
/// says it is corruption (not a torn tail) at its offset and where whole records resume,
/// keeps the `.part` and exits 2; its JSON tells the two apart. A torn tail is still
/// dropped quietly, exit 0.
#[test]
fn recover_tells_corruption_from_a_torn_tail_and_keeps_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let (part, starts) = unfinished(dir.path(), "c.ostm", 100);
    let out = dir.path().join("c.ostm");
    let mut bytes = std::fs::read(&part).unwrap();
    // A bit of the hash row of the record of step 50.
    bytes[starts[50] + 2 + 3] ^= 0x10;
    std::fs::write(&part, &bytes).unwrap();
    let o = viewer(&["recover", part.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    let got = json(stdout(&o).lines().next().unwrap());
    assert_eq!(got["steps"], 50, "{got}");
    assert_eq!(got["dropped"]["kind"], "corruption", "{got}");
    assert_eq!(got["dropped"]["offset"], starts[50], "{got}");
    assert_eq!(got["dropped"]["resumes_at"], starts[51], "{got}");
    assert_eq!(got["removed"], false, "{got}");
    assert!(part.exists(), "the evidence is kept");
    assert!(
        stderr(&o).contains(&format!(
            "holds only the 50 steps before offset {}",
            starts[50]
        )),
        "{}",
        stderr(&o)
    );
    // The text says the same.
    let o = viewer(&["recover", part.to_str().unwrap(), "--force"]);
    assert_eq!(code(&o), 2);
    assert!(
        stdout(&o).contains(&format!(
            "corruption at offset {}: the check of the record of step 50 is ",
            starts[50]
        )) && stdout(&o).contains(&format!(
            "a whole record follows at offset {}: not a torn tail",
            starts[51]
        )) && stdout(&o).contains(&format!("kept {}", part.display())),
        "{}",
        stdout(&o)
    );
    // The same file torn in its last record instead: a torn tail, exit 0, removed.
    bytes[starts[50] + 2 + 3] ^= 0x10;
    bytes.truncate(starts[100] - 5);
    std::fs::write(&part, &bytes).unwrap();
    let o = viewer(&["recover", part.to_str().unwrap(), "--json", "--force"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let got = json(stdout(&o).lines().next().unwrap());
    assert_eq!(got["steps"], 99, "{got}");
    assert_eq!(got["dropped"]["kind"], "torn_tail", "{got}");
    assert!(!part.exists());
    let _ = out;
}

/// A command that runs `bin` so that a directory's write permission binds it: as itself,
/// or, when the tests run as root (whom permissions do not stop), through `setpriv
/// --bounding-set -all`, which leaves it no capability to override them.
fn bound_by_permissions(bin: PathBuf) -> Command {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Command::new(bin);
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--bounding-set", "-all"]).arg(bin);
    cmd
}

/// A temporary directory and the directory `rec` in it, where a recording will go.
fn recording_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let rec_dir = dir.path().join("rec");
    std::fs::create_dir(&rec_dir).unwrap();
    (dir, rec_dir)
}

/// Sets `dir`'s mode (0o555: read-only).
fn set_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// A directory made read-only while a viewer records into it: appending to the open
/// `FILE.part` goes on, the finish cannot create `FILE.part.tmp`, and the viewer says so,
/// keeps `FILE.part` with every step and names `recover` (exit 2), leaving nothing else.
/// Writable again, `recover` gives a replay that verifies and holds at least the steps the
/// message counted.
#[test]
fn a_directory_made_read_only_while_recording_is_an_error_and_the_part_recovers() {
    let host = Host::start(&["--rate", "300", "--status-ms", "0"]);
    let (_dir, rec_dir) = recording_dir();
    let rec = rec_dir.join("s.ostm");
    let mut cmd = bound_by_permissions(viewer_bin());
    cmd.args([
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
    ]);
    let mut v = ostm_testkit::Proc::spawn(&mut cmd);
    let first = json(&v.wait_line(|l| json(l)["event"] == "status"));
    let set = |mode| set_mode(&rec_dir, mode);
    set(0o555).unwrap();
    // Still recording after the change: a status at least 300 steps later.
    let before = first["step"].as_u64().unwrap();
    v.wait_line(|l| {
        let e = json(l);
        e["event"] == "status" && e["step"].as_u64().unwrap_or(0) > before + 300
    });
    v.signal("INT");
    let out = v.finish();
    set(0o755).unwrap();
    let text = stdout(&out);
    assert_eq!(code(&out), 2, "{text}{}", stderr(&out));
    let part = journal_path(&rec);
    let (_, sure) = left_unfinished(
        &text,
        &rec,
        &[
            format!(
                "cannot finish the recording: cannot write {}.tmp: Permission denied",
                part.display()
            ),
            "(no permission to write there)".into(),
            format!("`ostm-viewer recover {}`", part.display()),
        ],
    );
    assert!(sure > 300, "the steps recorded after the change are kept");
    assert_eq!(names(&rec_dir), ["s.ostm.part"], "nothing else is left");
    let got = recovered(&rec);
    assert!(got["steps"].as_u64().unwrap() >= sure, "{got}");
}

/// The host's own `--record` under the same fault: its directory made read-only while it
/// records, then Ctrl-C. The host says it cannot finish, names `FILE.part` and `recover`
/// (exit 2); the part holds every step the host stepped and recovers to a replay that
/// verifies.
#[test]
fn a_hosts_recording_in_a_directory_made_read_only_is_an_error_and_recovers() {
    let (_dir, rec_dir) = recording_dir();
    let rec = rec_dir.join("h.ostm");
    let mut cmd = bound_by_permissions(host_bin());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--rate",
        "500",
        "--json",
    ])
    .args(["--status-ms", "50", "--record", rec.to_str().unwrap()]);
    let mut host = ostm_testkit::Proc::spawn(&mut cmd);
    let step = |l: &str| json(l)["step"].as_u64().unwrap_or(0);
    let first = step(&host.wait_line(|l| step(l) > 0));
    let set = |mode| set_mode(&rec_dir, mode);
    set(0o555).unwrap();
    host.wait_line(|l| step(l) > first + 200);
    host.signal("INT");
    let out = host.finish();
    set(0o755).unwrap();
    let text = stdout(&out);
    assert_eq!(code(&out), 2, "{text}{}", stderr(&out));
    let end = json(text.lines().last().unwrap());
    let steps = end["step"].as_u64().unwrap();
    let part = journal_path(&rec);
    assert_eq!(end["reason"], "host-error", "{end}");
    let why = end["text"].as_str().unwrap();
    assert!(
        why.starts_with(&format!(
            "cannot finish the recording {}: cannot write {}.tmp: Permission denied",
            rec.display(),
            part.display()
        )) && why.contains("(no permission to write there)")
            && why.ends_with(&format!(
                "{} is kept with all its {steps} steps: `ostm-viewer recover {}` turns it into {}",
                part.display(),
                part.display(),
                rec.display()
            )),
        "{why}"
    );
    assert_eq!(names(&rec_dir), ["h.ostm.part"], "nothing else is left");
    assert_eq!(recovered(&rec)["steps"], steps);
    let r = Replay::read_file(&rec).unwrap();
    assert_eq!(r.step_count() as u64, steps, "every step the host stepped");
    assert_eq!(r.hashes.as_deref(), Some(&default_rows(steps)[..]));
}

/// The JSON objects among `text`'s lines.
fn objects(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect()
}

/// A viewer whose verifier trails a fast host (a test throttle) with a small spool bound:
/// when a record would take the spool's file past `--spool-max`, the viewer says so, lets
/// the verifier take what it holds, and joins the host again: a named gap (the `lost` and
/// `gap` events, the end object's `gaps`), the recording continued in the next numbered
/// file, and no failure (exit 0). Before `--spool-max` the file grew without bound until
/// the disk was full.
#[test]
fn a_spool_bound_reached_is_a_named_gap_and_a_rejoin_not_a_failure() {
    let host = Host::start(&["--rate", "20000", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.ostm");
    let out = viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
        "--throttle",
        "4000",
        "--spool-memory",
        "16K",
        "--spool-max",
        "64K",
        "--steps",
        "8000",
    ]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    let all = objects(&text);
    let lost = all
        .iter()
        .find(|v| v["event"] == "lost")
        .unwrap_or_else(|| panic!("a lost event: {text}"));
    let why = lost["why"].as_str().unwrap();
    assert!(
        why.contains(
            "spool of records not yet verified reached --spool-max 64.0 KiB (65536 bytes)"
        ) && why.contains(&dir.path().display().to_string()),
        "{why}"
    );
    let gap = all
        .iter()
        .find(|v| v["event"] == "gap")
        .unwrap_or_else(|| panic!("a gap event: {text}"));
    assert_eq!(gap["from"], lost["step"], "{gap} {lost}");
    assert!(
        gap["to"].as_u64().unwrap() > gap["from"].as_u64().unwrap(),
        "{gap}"
    );
    let end = all.last().unwrap();
    assert_eq!(end["verdict"], "ok", "{end}");
    assert!(!end["gaps"].as_array().unwrap().is_empty(), "{end}");
    assert!(end["backlog_peak_on_disk"].as_u64().unwrap() > 0, "{end}");
    let files = end["files"].as_array().unwrap();
    assert!(files.len() >= 2, "the recording went on in s.1.ostm: {end}");
    let o = viewer(&[
        "verify",
        rec.to_str().unwrap(),
        numbered(&rec, 1).to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

/// A recording on a small tmpfs whose spool (beside it, by default) fills the disk: the
/// error names how much the spool held and where (it is an unlinked file that `ls` does
/// not show), and what to do.
#[test]
fn a_full_disk_error_names_the_spools_size_and_directory() {
    let host = Host::start(&["--rate", "20000", "--status-ms", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let script = r#"
"$2" attach "$3" --record "$1/s.ostm" --json --throttle 4000 --spool-memory 16K
echo "viewer $?"
"#;
    let Some(out) = in_small_tmpfs("512k", &mnt, script, &[&host.addr]) else {
        return;
    };
    let text = stdout(&out);
    assert!(text.contains("\nviewer 2\n"), "{text}{}", stderr(&out));
    let end = objects(&text)
        .into_iter()
        .find(|v| v["event"] == "end")
        .expect("the viewer's end object");
    let err = end["message"].as_str().unwrap();
    assert!(
        err.contains("(the disk is full)")
            && err.contains("the spool of records not yet verified held ")
            && err.contains(&format!(
                "an unlinked file in {} (--spool-dir puts it elsewhere, --spool-max bounds it)",
                mnt.display()
            )),
        "{err}"
    );
}

/// The unlinked files process `pid` holds open: the directories they were in.
fn deleted_files_of(pid: u32) -> Vec<PathBuf> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            t.strip_suffix(" (deleted)").map(PathBuf::from)
        })
        .collect()
}

/// With `--spool-dir` the spool's file is there, and the recording's directory holds
/// none: read from the viewer's open files while its verifier trails.
#[test]
fn with_spool_dir_the_recordings_directory_holds_no_spool() {
    let host = Host::start(&["--rate", "20000", "--status-ms", "0"]);
    let (rec_dir, spool_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rec = rec_dir.path().join("s.ostm");
    let mut p = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--json",
        "--throttle",
        "2000",
        "--spool-memory",
        "16K",
        "--spool-dir",
        spool_dir.path().to_str().unwrap(),
    ]);
    p.wait_line(|l| l.contains("\"event\":\"attached\""));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let spooled = loop {
        let files = deleted_files_of(p.pid());
        if !files.is_empty() {
            break files;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the viewer spooled nothing to disk"
        );
        if p.line_within(std::time::Duration::from_millis(100))
            .is_none()
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let (here, there): (Vec<_>, Vec<_>) = spooled
        .iter()
        .partition(|f| f.parent() == Some(spool_dir.path()));
    assert_eq!((here.len(), there.len()), (1, 0), "{spooled:?}");
    assert!(deleted_files_of(p.pid())
        .iter()
        .all(|f| f.parent() != Some(rec_dir.path())));
    let out = p.interrupt_expecting_exit_0();
    assert!(
        stdout(&out).contains("\"event\":\"end\""),
        "{}",
        stdout(&out)
    );
}

/// Finishing a file at a gap fails (its directory made read-only, as a full disk does):
/// the `gap:` line is still printed, the error names what failed, and the last lines say
/// what the files hold apart from the verdict's range, which runs on to the step joined.
/// Before, the gap went untold and only the verdict's range, past the file's end, was said.
#[test]
fn a_failed_finish_at_a_gap_still_names_the_gap_and_what_was_recorded() {
    let host = Host::start(&["--rate", "20000", "--status-ms", "0"]);
    let (dir, rec_dir) = recording_dir();
    let rec = rec_dir.join("s.ostm");
    let mut cmd = bound_by_permissions(viewer_bin());
    cmd.args([
        "attach",
        &host.addr,
        "--record",
        rec.to_str().unwrap(),
        "--spool-dir",
        dir.path().to_str().unwrap(),
        "--throttle",
        "4000",
        "--spool-memory",
        "16K",
        "--spool-max",
        "64K",
    ]);
    let mut v = ostm_testkit::Proc::spawn(&mut cmd);
    v.wait_line(|l| l.starts_with("attached to "));
    set_mode(&rec_dir, 0o555).unwrap();
    let out = v.finish();
    set_mode(&rec_dir, 0o755).unwrap();
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(code(&out), 2, "{text}{err}");
    assert!(
        err.contains("error: cannot continue the recording after reconnecting: ")
            && err.contains("(no permission to write there)"),
        "{err}"
    );
    let gap = text
        .lines()
        .rfind(|l| l.starts_with("gap: "))
        .unwrap_or_else(|| panic!("the gap is told: {text}"));
    let to: u64 = gap
        .split("reconnected at step ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{gap}"));
    let short = text
        .lines()
        .find(|l| l.starts_with("recorded steps "))
        .unwrap_or_else(|| panic!("what was recorded: {text}"));
    assert!(
        short.ends_with(&format!(" to {to} are in no file")),
        "{short} / {gap}"
    );
}
