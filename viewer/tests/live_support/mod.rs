//! Helpers for the live tests: start the real `ostm-host` on 127.0.0.1 port 0, read the
//! address it prints first, run the real `ostm-viewer`, and bound every wait.
#![allow(dead_code)]

pub mod tmux;

use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::{Replay, Setup, World};
pub use ostm_testkit::{free_port, nats_bin, signal, Proc, LIMIT};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::time::Instant;

pub fn viewer_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ostm-viewer"))
}

/// `ostm-host`, built by `cargo test --workspace` before any test starts (the host crate's
/// own integration tests make cargo build it), under the workspace's one feature set.
pub fn host_bin() -> PathBuf {
    ostm_testkit::bin("ostm-host")
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

pub fn testdata(name: &str) -> PathBuf {
    workspace().join("testdata").join(name)
}

/// A running host, its output read while it runs; killed when dropped.
/// A host at full speed whose viewers fall more than 64 records behind soon, never
/// dropped as stalled, printing its JSON status every 100 ms: a viewer that stops reading
/// is resynced when it reads again.
pub const RESYNCING_HOST: &[&str] = &[
    "--rate",
    "max",
    "--viewer-queue",
    "64",
    "--stall-ms",
    "600000",
    "--json",
    "--status-ms",
    "100",
];

pub struct Host {
    proc: Proc,
    pub addr: String,
}

impl Host {
    /// Starts `ostm-host serve --listen 127.0.0.1:0 ARGS` and reads the bound address.
    pub fn start(args: &[&str]) -> Host {
        Host::start_env(args, &[])
    }

    /// The host's default `--viewer-queue` (65 536 records) lets a viewer stall for half
    /// a minute at the tests' rates (at most 2 000 steps/s) before it is resynced, so a
    /// viewer descheduled on a loaded machine is not resynced in a test not about resync.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Host {
        Host::start_at("127.0.0.1:0", args, env)
    }

    /// [`Host::start_env`] on a given address (to start a host again on a port a stopped
    /// one used).
    pub fn start_at(listen: &str, args: &[&str], env: &[(&str, &str)]) -> Host {
        let mut proc = Proc::spawn(
            Command::new(host_bin())
                .args(["serve", "--listen", listen])
                .args(args)
                .envs(env.iter().copied()),
        );
        let first = proc.line().expect("the host prints its address first");
        let addr = if first.starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(&first).expect("json line");
            v["addr"].as_str().expect("addr").to_string()
        } else {
            first.rsplit(' ').next().expect("address").to_string()
        };
        assert!(addr.starts_with("127.0.0.1:"), "{first}");
        Host { proc, addr }
    }

    /// The stdout lines read so far.
    pub fn seen(&self) -> &[String] {
        &self.proc.seen
    }

    /// The next stdout line, waiting at most [`LIMIT`].
    pub fn line(&mut self) -> Option<String> {
        self.proc.line()
    }

    /// The host's latest status line (JSON hosts only): the lines it printed before are
    /// read and skipped, so this is its state now, not when the test last looked.
    pub fn status_now(&mut self) -> serde_json::Value {
        let mut last = self.wait_status(|_| true);
        while let Some(l) = self.proc.line_within(std::time::Duration::ZERO) {
            if let Ok(v) = serde_json::from_str(&l) {
                last = v;
            }
        }
        last
    }

    /// Reads status lines until `pred` holds for one (JSON hosts only).
    pub fn wait_status(&mut self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + LIMIT;
        while Instant::now() < deadline {
            let l = self.line().expect("host status line");
            let v: serde_json::Value = serde_json::from_str(&l).expect("json status");
            if pred(&v) {
                return v;
            }
        }
        panic!("no matching status line; saw {:?}", self.proc.seen);
    }

    /// Reads the host's log (started with `--log-format json`) until a line satisfies
    /// `pred`, and returns it.
    pub fn wait_log(&mut self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let line = self.proc.wait_err_line(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| pred(&v))
        });
        serde_json::from_str(&line).expect("a JSON log line")
    }

    /// Waits for the host to exit; returns its status, its last stdout line and its stderr.
    pub fn wait(self) -> (ExitStatus, String, String) {
        let out = self.proc.finish();
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or_default().to_string();
        (
            out.status,
            last,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Sends SIGINT (Ctrl-C).
    pub fn interrupt(&self) {
        self.proc.signal("INT");
    }

    /// Sends a signal by name (`INT`, `TERM`, `KILL`, `STOP`, `CONT`).
    pub fn signal(&self, name: &str) {
        self.proc.signal(name);
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// Sends SIGINT to a process.
pub fn interrupt(pid: u32) {
    signal(pid, "INT");
}

/// Runs `ostm-viewer ARGS` to completion (killed after [`LIMIT`]).
pub fn viewer(args: &[&str]) -> Output {
    finish(spawn_viewer(args))
}

/// `ostm-viewer ARGS` started now, its output read while it runs and `RUST_LOG` unset
/// (finish it with [`finish`]).
pub fn spawn_viewer(args: &[&str]) -> Proc {
    Proc::spawn(Command::new(viewer_bin()).args(args))
}

/// [`spawn_viewer`] run in `dir`.
pub fn spawn_viewer_in(dir: &Path, args: &[&str]) -> Proc {
    Proc::spawn(Command::new(viewer_bin()).args(args).current_dir(dir))
}

/// Starts `ostm-viewer ARGS` and returns once it has printed its `attached` line, with
/// the step it attached at.
pub fn spawn_attached(args: &[&str]) -> (Proc, u64) {
    let mut p = spawn_viewer(args);
    let first = p.line().expect("attached line");
    let step = attached_step(&first);
    (p, step)
}

/// Waits for a child with [`LIMIT`], killing it past that.
pub fn finish(p: Proc) -> Output {
    p.finish()
}

/// Runs any command to its end, its output read while it runs.
pub fn run(cmd: &mut Command) -> Output {
    ostm_testkit::run(cmd)
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The step a viewer attached at, from its `attached to ... at step N` line.
pub fn attached_step(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("attached to "))
        .expect("attached line");
    let rest = line.split(" at step ").nth(1).expect("at step");
    rest.split(' ')
        .next()
        .expect("step")
        .parse()
        .expect("step number")
}

/// The embedded default world's hash at every step `0..=n`, computed here from the
/// scenario (the independent reference for what the host streams).
pub fn default_rows(n: u64) -> Vec<u64> {
    let mut rows = Vec::new();
    default_run(n, |w| rows.push(w.hash()));
    rows
}

/// The default world at step `n`.
pub fn default_world_at(n: u64) -> World {
    default_run(n, |_| {})
}

/// A body alive at `step` in the embedded world, and its velocity.y there: the body the
/// hidden `--perturb STEP:BODY` flag is given in the drift tests.
pub fn planted(step: u64) -> (usize, i32) {
    let w = default_world_at(step);
    let body = (5..w.bodies.len())
        .find(|&i| w.bodies[i].alive)
        .expect("a live body");
    (body, w.bodies[body].vel[1])
}

/// Runs the embedded default world from the scenario to step `n`, showing `each` the
/// world at every step `0..=n`.
fn default_run(n: u64, mut each: impl FnMut(&World)) -> World {
    let setup = Setup {
        dims: ostm_protocol::Dims::Three,
        bodies: 24,
        seed: 10_000,
    };
    let mut world = World::new(setup, None);
    let mut scenario = Scenario::new(setup.seed);
    each(&world);
    for _ in 0..n {
        let ops = scenario.next_input(&world);
        world.step(&ops);
        each(&world);
    }
    world
}

/// Reads a recording and checks it is whole: flag bits 0 and 1, it verifies, and its
/// rows are `rows[start..]`. Returns its start step and step count.
#[track_caller]
pub fn check_recording(path: &Path, rows: &[u64]) -> (u64, usize) {
    let r = Replay::read_file(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.flags() & 0b11, 0b11, "hash rows and start snapshot");
    assert!(
        matches!(r.verify(|_| {}), ostm_protocol::Verdict::Match { .. }),
        "{} verifies",
        path.display()
    );
    let start = r.start_step();
    let got = r.hashes.as_ref().expect("rows");
    let end = start as usize + got.len();
    assert!(end <= rows.len(), "reference rows too short");
    let first = got
        .iter()
        .zip(&rows[start as usize..end])
        .position(|(a, b)| a != b);
    assert_eq!(
        first,
        None,
        "{}: the first row that differs from the reference",
        path.display()
    );
    (start, r.step_count())
}

/// The `n`-th file of a recording, as docs/protocol.md names it: `r.ostm`, `r.1.ostm`, …
pub fn numbered(base: &Path, n: u32) -> PathBuf {
    if n == 0 {
        return base.to_path_buf();
    }
    let stem = base.file_stem().unwrap().to_string_lossy().into_owned();
    let ext = base.extension().unwrap().to_string_lossy().into_owned();
    base.with_file_name(format!("{stem}.{n}.{ext}"))
}

/// Where a recording ends: its start step plus its step count.
pub fn recording_end(path: &Path) -> u64 {
    let r = Replay::read_file(path).unwrap_or_else(|e| panic!("{e}"));
    r.end_step()
}

/// A real `nats-server` with JetStream on 127.0.0.1, a free port and a temporary store;
/// stopped when dropped.
pub struct Nats {
    proc: Option<Proc>,
    pub port: u16,
    pub store: tempfile::TempDir,
    extra: Vec<String>,
    /// Started with `-js`.
    jetstream: bool,
}

impl Nats {
    pub fn start() -> Nats {
        Nats::start_with(&[])
    }

    /// Starts the server with extra arguments (cluster settings).
    pub fn start_with(extra: &[&str]) -> Nats {
        let mut n = Nats {
            proc: None,
            port: free_port(),
            store: tempfile::tempdir().expect("store dir"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            jetstream: true,
        };
        n.run();
        n
    }

    /// Starts a server without JetStream (no `-js`): plain NATS only.
    pub fn start_without_jetstream() -> Nats {
        let mut n = Nats {
            proc: None,
            port: free_port(),
            store: tempfile::tempdir().expect("store dir"),
            extra: Vec::new(),
            jetstream: false,
        };
        n.run();
        n
    }

    fn run(&mut self) {
        let p = Proc::spawn(
            Command::new(nats_bin())
                .args(self.jetstream.then_some("-js"))
                .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
                .arg(self.store.path())
                .args(&self.extra),
        );
        self.proc = Some(p);
        // Ready when it accepts connections (bounded by LIMIT).
        let deadline = Instant::now() + LIMIT;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL), keeping its store.
    pub fn stop(&mut self) {
        if let Some(p) = self.proc.take() {
            let _ = p.kill();
        }
    }

    /// Pauses the server (SIGSTOP): its connections stay open, and it reads, stores and
    /// answers nothing until [`Nats::resume`].
    pub fn pause(&self) {
        if let Some(p) = &self.proc {
            p.signal("STOP");
        }
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        if let Some(p) = &self.proc {
            p.signal("CONT");
        }
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A process's resident set in KiB, from `/proc/PID/status` (Linux).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS line")
}

/// A hello frame built by hand from docs/protocol.md: type 0x01, magic, version, role, token.
pub fn hello(version: u16, role: u8, token: &[u8]) -> Vec<u8> {
    let mut p = vec![0x01];
    p.extend_from_slice(b"OSTMLIVE");
    p.extend_from_slice(&version.to_le_bytes());
    p.push(role);
    p.push(token.len() as u8);
    p.extend_from_slice(token);
    let mut f = (p.len() as u32).to_le_bytes().to_vec();
    f.extend(p);
    f
}

/// A plain TCP connection to `addr` whose reads wait at most [`LIMIT`].
pub fn raw(addr: &str) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s
}

/// The host's welcome frame as a fake host sends it (32 bytes).
pub fn welcome_frame() -> Vec<u8> {
    let w = ostm_protocol::wire::Welcome {
        version: 1,
        role: 2,
        rate: 60,
        heartbeat_ms: 1000,
        ring: 512,
        queue: 256,
    };
    frame_of(&ostm_protocol::wire::ToViewer::Welcome(w))
}

/// The frames of a small 2D world's handshake: welcome (32 bytes), then its attach
/// snapshot at `step`.
pub fn handshake_to(step: u64) -> (Vec<u8>, World) {
    let mut world = World::new(
        Setup {
            dims: ostm_protocol::Dims::Two,
            bodies: 1,
            seed: 7,
        },
        None,
    );
    world.step = step;
    let mut bytes = welcome_frame();
    let snap = ostm_protocol::wire::ToViewer::Snapshot {
        kind: ostm_protocol::wire::SnapshotKind::Attach,
        world: world.clone(),
    };
    bytes.extend(frame_of(&snap));
    (bytes, world)
}

/// One message of the host's as its frame's bytes.
pub fn frame_of(m: &ostm_protocol::wire::ToViewer) -> Vec<u8> {
    ostm_protocol::wire::HostCodec::encode_frame(m)
        .expect("a frame")
        .0
        .to_vec()
}

/// What a scripted fake host does on one connection, in order.
#[derive(Debug, Clone)]
pub enum Act {
    /// Writes these bytes.
    Send(Vec<u8>),
    /// Waits this long.
    Wait(std::time::Duration),
}

/// A fake host on 127.0.0.1 that serves one connection after the other, each by its
/// script: it reads the hello, plays the script, then closes its sending side and reads
/// until the viewer closes. Returns its address.
pub fn scripted_host(connections: Vec<Vec<Act>>) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        for script in connections {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = s.set_read_timeout(Some(LIMIT));
            let mut hello = [0u8; 17];
            let _ = s.read_exact(&mut hello);
            for act in script {
                match act {
                    Act::Send(b) => {
                        let _ = s.write_all(&b);
                    }
                    Act::Wait(d) => std::thread::sleep(d),
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
    });
    addr
}
