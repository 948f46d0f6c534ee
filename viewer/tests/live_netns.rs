//! The real kernel and the real binaries: `ostm-host serve` and `ostm-viewer attach --record
//! F --reconnect` in a network namespace this test makes (`unshare -n`), talking over that
//! namespace's own loopback at 127.0.0.1, shaped by `tc`'s token bucket (`tbf`) to
//! 200 kbit/s; the link is cut (`ip link set lo down`) and restored twice mid-session, once
//! for 2 s (less than the viewer's 10 s silence) and once for 12 s (more). After each
//! restore the viewer must be verifying again past the host's step at that moment, whether
//! the connection survived the cut or the viewer reconnected. Then the whole truth is
//! checked: no drift, the verdict `ok`, each loss followed by a gap that names it, the files
//! and the gaps together covering every step from the attach step to the last (so that a
//! step never verified is named), the steps verified equal to the steps recorded, and every
//! file verifying (`ostm-viewer verify`) with every hash row equal to the reference computed
//! here from the scenario.
//!
//! Where namespaces, `ip` or `tc` are not allowed (a container without the capability, a
//! user without user namespaces) the test prints `skipped: …` with the reason and passes.

mod live_support;

use live_support::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The shaping: 200 kbit/s, a bucket of a few packets; loopback's MTU is lowered to
/// Ethernet's so that no segment is larger than the bucket (`tbf` drops those).
const TBF: &[&str] = &["tbf", "rate", "200kbit", "burst", "8kb", "latency", "400ms"];

/// Steps a second: about 40 bytes a record, a quarter of the shaped link.
const RATE: &str = "200";

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

/// A tool of the system, looked up on `PATH` and in the `sbin` directories (not on a
/// user's `PATH` on Debian).
fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs a short command to its end; `Err` says what failed, with its stderr.
fn attempt(cmd: &mut Command) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("{what} could not start: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A network namespace held open by a `sleep` that lives in it; its processes are started
/// with `nsenter`. Everything in it goes when the holder and they are killed.
struct Netns {
    holder: Proc,
    nsenter: PathBuf,
    /// With user namespaces (not root): the holder's user namespace is entered too.
    user: bool,
    ip: PathBuf,
}

impl Netns {
    /// A namespace with loopback up at Ethernet's MTU and shaped by [`TBF`], or why not.
    fn make() -> Result<Netns, String> {
        let need = |n: &str| tool(n).ok_or(format!("`{n}` is not installed"));
        let (unshare, nsenter) = (need("unshare")?, need("nsenter")?);
        let (ip, tc) = (need("ip")?, need("tc")?);
        // Root makes a network namespace; a user, a user namespace with one in it.
        let user = attempt(Command::new(&unshare).args(["-n", "true"])).is_err();
        if user {
            attempt(Command::new(&unshare).args(["-r", "-n", "true"])).map_err(|e| {
                format!(
                    "no network namespace for this user (neither root nor user namespaces): {e}"
                )
            })?;
        }
        let mut holder = Proc::spawn(
            Command::new(&unshare)
                .args(if user { &["-r", "-n"][..] } else { &["-n"][..] })
                .args(["sh", "-c", "echo ready && exec sleep 3600"]),
        );
        // Once it prints, the holder is in its namespace (before, `/proc/PID/ns/net`
        // would still be the test's).
        if holder.line().as_deref() != Some("ready") {
            return Err(format!("{unshare:?} -n did not start: {:?}", holder.kill()));
        }
        let ns = Netns {
            holder,
            nsenter,
            user,
            ip,
        };
        ns.run(&ns.ip, &["link", "set", "lo", "mtu", "1500", "up"])?;
        ns.run(
            &tc,
            &[&["qdisc", "add", "dev", "lo", "root"][..], TBF].concat(),
        )?;
        let shown = ns.run(&tc, &["qdisc", "show", "dev", "lo"])?;
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        if !shown.contains("tbf") {
            return Err(format!("tc shows no tbf on lo: {shown}"));
        }
        Ok(ns)
    }

    /// `program` to be run inside the namespace.
    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(&self.nsenter);
        c.args(["-t", &self.holder.pid().to_string(), "-n"]);
        if self.user {
            c.args(["-U", "--preserve-credentials"]);
        }
        c.arg("--").arg(program);
        c
    }

    /// Runs a short command inside the namespace.
    fn run(&self, program: &Path, args: &[&str]) -> Result<Output, String> {
        attempt(self.command(program).args(args))
    }

    /// Takes loopback down (the link cut) or up again.
    fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        self.run(&self.ip, &["link", "set", "lo", state])
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The step of the host's next status line (the lines it printed before are passed over).
fn host_step_now(host: &mut Proc) -> u64 {
    while host.line_within(Duration::ZERO).is_some() {}
    let l = host.wait_line(|l| json(l)["event"] == "status");
    json(&l)["step"].as_u64().expect("the host's step")
}

/// Reads the viewer's lines until one is a status past `step`.
fn verifying_past(viewer: &mut Proc, step: u64) {
    viewer.wait_line(|l| {
        let e = json(l);
        assert_ne!(e["event"], "drift", "a drift where there is none: {l}");
        e["event"] == "status" && e["step"].as_u64().is_some_and(|s| s > step)
    });
}

#[test]
fn a_shaped_link_cut_and_restored_in_a_namespace_keeps_the_verdict_true() {
    let ns = match Netns::make() {
        Ok(ns) => ns,
        Err(why) => {
            println!("skipped: this test needs a network namespace with ip and tc: {why}");
            return;
        }
    };
    let mut host = Proc::spawn(ns.command(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--rate",
        RATE,
        "--json",
        "--status-ms",
        "200",
    ]));
    let first = json(&host.line().expect("the host prints its address first"));
    let addr = first["addr"].as_str().expect("addr").to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{first}");

    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("cut.ostm");
    let mut viewer = Proc::spawn(ns.command(viewer_bin()).args([
        "attach",
        &addr,
        "--record",
        rec.to_str().unwrap(),
        "--reconnect",
        "--json",
    ]));
    verifying_past(&mut viewer, 0);

    for cut in [Duration::from_secs(2), Duration::from_secs(12)] {
        ns.link(false);
        std::thread::sleep(cut);
        ns.link(true);
        let now = host_step_now(&mut host);
        verifying_past(&mut viewer, now);
        println!("cut of {cut:?}: verifying again past step {now}");
    }

    viewer.signal("INT");
    let out = viewer.finish();
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    let events: Vec<serde_json::Value> = text.lines().map(json).collect();
    let end = events.last().expect("an end line").clone();
    assert_eq!(end["event"], "end", "{end}");
    assert_eq!(end["stop"], "interrupted", "{end}");
    assert_eq!(end["verdict"], "ok", "{end}");
    assert!(end["drift"].is_null(), "{end}");
    assert!(events.iter().all(|e| e["event"] != "drift"), "{text}");

    // Each loss is followed by its gap, from the step where it was lost.
    let kind = |k: &str| -> Vec<&serde_json::Value> {
        events.iter().filter(|e| e["event"] == k).collect()
    };
    let (lost, gaps) = (kind("lost"), kind("gap"));
    assert_eq!(lost.len(), gaps.len(), "{text}");
    for (l, g) in lost.iter().zip(&gaps) {
        assert_eq!(g["from"], l["step"], "{l} {g}");
        assert_eq!(g["why"], l["why"], "{l} {g}");
    }
    let end_gaps = end["gaps"].as_array().expect("gaps");
    assert_eq!(end_gaps.len(), gaps.len(), "{end}");

    // The files, the gaps and any resyncs (the two ways a viewer jumps over steps, each
    // starting a new file) cover every step from the attach step to the last: each file
    // ends where the next jump starts, and the next file starts where it lands.
    let jumps: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "gap" || e["event"] == "resync")
        .collect();
    assert_eq!(
        end["resyncs"].as_u64(),
        Some((jumps.len() - gaps.len()) as u64),
        "{text}"
    );
    let files = end["files"].as_array().expect("files");
    assert_eq!(files.len(), jumps.len() + 1, "{text}");
    let mut at = end["attached_at"].as_u64().expect("attached_at");
    let mut recorded = 0;
    for (i, f) in files.iter().enumerate() {
        let (start, steps) = (
            f["start_step"].as_u64().unwrap(),
            f["steps"].as_u64().unwrap(),
        );
        assert_eq!(
            start, at,
            "file {i} starts where the last file or jump ended: {text}"
        );
        at = start + steps;
        recorded += steps;
        if let Some(j) = jumps.get(i) {
            assert_eq!(j["from"].as_u64(), Some(at), "{j}: {text}");
            at = j["to"].as_u64().expect("to");
        }
    }
    assert_eq!(end["step"].as_u64(), Some(at), "{end}");
    assert_eq!(end["verified"].as_u64(), Some(recorded), "{end}");

    // Every file verifies, and every one of its rows is the world's true hash.
    let rows = default_rows(at);
    for f in files {
        let path = f["path"].as_str().unwrap();
        let v = ostm_testkit::run(Command::new(viewer_bin()).args(["verify", path]));
        assert_eq!(code(&v), 0, "verify {path}: {}{}", stdout(&v), stderr(&v));
        check_recording(Path::new(path), &rows);
    }
    println!(
        "{recorded} steps verified and recorded in {} files; gaps: {}; resyncs: {}",
        files.len(),
        serde_json::Value::Array(end_gaps.clone()),
        end["resyncs"]
    );

    host.signal("INT");
    let host_out = host.finish();
    let last = stdout(&host_out);
    let host_end = json(last.lines().last().expect("the host's end line"));
    assert_eq!(host_end["event"], "end", "{host_end}");
    assert_eq!(host_end["protocol_errors"], 0, "{host_end}");
}
