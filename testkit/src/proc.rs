//! A child process read while it runs, with bounded waits.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest any single wait may take before the test fails. It bounds a hang, it is
/// not a measure of speed: nothing in a test asserts how long a wait took.
pub const LIMIT: Duration = Duration::from_secs(180);

/// A binary of this workspace (`ostm-host`, `ostm-viewer`), from the target directory of
/// the test that runs: cargo puts test executables in `target/PROFILE/deps/` and the
/// binaries it built for the run in `target/PROFILE/`.
///
/// # Panics
/// The binary is not there (it is built by `cargo test --workspace`, or by
/// `cargo build -p PACKAGE` before a narrower test run).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("the test's directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace`, which builds every binary of the \
         workspace before the tests start",
        path.display()
    );
    path
}

/// A running child whose stdout and stderr are being read line by line; killed when
/// dropped.
pub struct Proc {
    child: Child,
    label: String,
    out: Receiver<String>,
    err: Receiver<String>,
    pumps: Vec<JoinHandle<()>>,
    /// The stdout lines read so far by [`Proc::line`] and its kin.
    pub seen: Vec<String>,
    /// The stderr lines read so far by [`Proc::wait_err_line`].
    pub seen_err: Vec<String>,
}

fn pump(r: impl Read + Send + 'static) -> (Receiver<String>, JoinHandle<()>) {
    let (tx, rx) = channel();
    let handle = std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if buf.last() == Some(&b'\n') {
                        buf.pop();
                    }
                    // Whatever the child prints is kept, even if it is not UTF-8.
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    (rx, handle)
}

impl Proc {
    /// Starts `cmd` with stdin closed and both output pipes read from now on; `RUST_LOG`
    /// is unset unless `cmd` sets it.
    ///
    /// # Panics
    /// The process cannot be started.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let label = format!("{:?}", cmd.get_program());
        if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
            cmd.env_remove("RUST_LOG");
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {label}: {e}"));
        let (out, a) = pump(child.stdout.take().expect("piped stdout"));
        let (err, b) = pump(child.stderr.take().expect("piped stderr"));
        Proc {
            child,
            label,
            out,
            err,
            pumps: vec![a, b],
            seen: Vec::new(),
            seen_err: Vec::new(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line, waiting at most [`LIMIT`]; `None` once stdout has ended.
    pub fn line(&mut self) -> Option<String> {
        self.line_within(LIMIT)
    }

    /// The next stdout line, waiting at most `wait`; `None` if none came or stdout ended.
    pub fn line_within(&mut self, wait: Duration) -> Option<String> {
        match self.out.recv_timeout(wait) {
            Ok(l) => {
                self.seen.push(l.clone());
                Some(l)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Reads stdout lines until one satisfies `pred` and returns it.
    ///
    /// # Panics
    /// No such line within [`LIMIT`], or stdout ended first.
    pub fn wait_line(&mut self, mut pred: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.line_within(left) {
                Some(l) if pred(&l) => return l,
                Some(_) => {}
                None => panic!(
                    "{}: no matching line on stdout; saw {:#?}",
                    self.label, self.seen
                ),
            }
        }
    }

    /// Reads stderr lines (a log, read while the process runs) until one satisfies
    /// `pred` and returns it.
    ///
    /// # Panics
    /// No such line within [`LIMIT`], or stderr ended first.
    pub fn wait_err_line(&mut self, mut pred: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.err.recv_timeout(left) {
                Ok(l) => {
                    self.seen_err.push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "{}: no matching line on stderr; saw {:#?}",
                    self.label, self.seen_err
                ),
            }
        }
    }

    /// Sends a signal by name (`INT`, `TERM`, `KILL`, `STOP`, `CONT`).
    ///
    /// # Panics
    /// `kill` fails (the process is gone and reaped).
    pub fn signal(&self, name: &str) {
        signal(self.pid(), name);
    }

    /// Waits for the process to exit (at most [`LIMIT`]) and returns its status and
    /// everything it printed: the stdout lines already read by [`Proc::line`] first, then
    /// the rest.
    ///
    /// # Panics
    /// The process has not exited within [`LIMIT`] (it is killed, and the panic shows
    /// what it printed).
    pub fn finish(mut self) -> Output {
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) | Err(_) => {
                    let _ = self.child.kill();
                    let status = self.child.wait().ok();
                    let out = self.collect(status);
                    panic!(
                        "{} did not exit within {:?}\nstdout:\n{}\nstderr:\n{}",
                        self.label,
                        LIMIT,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        };
        self.collect(Some(status))
    }

    /// Interrupts the process (SIGINT, as Ctrl-C) and waits for it: it must exit 0.
    /// Returns what it printed.
    ///
    /// # Panics
    /// It exits otherwise (the panic shows its stderr), or not within [`LIMIT`].
    pub fn interrupt_expecting_exit_0(self) -> Output {
        self.signal("INT");
        let out = self.finish();
        assert_eq!(
            out.status.code(),
            Some(0),
            "interrupted, it should exit 0; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Kills the process (SIGKILL), reaps it and returns what it printed.
    pub fn kill(mut self) -> Output {
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        self.collect(status)
    }

    /// Reads both pipes to their end (the pumps stop at end of file) and builds the output.
    fn collect(&mut self, status: Option<ExitStatus>) -> Output {
        for p in self.pumps.drain(..) {
            let _ = p.join();
        }
        let mut stdout = String::new();
        for l in self.seen.iter().cloned().chain(self.out.try_iter()) {
            stdout.push_str(&l);
            stdout.push('\n');
        }
        let mut stderr = String::new();
        for l in self.seen_err.iter().cloned().chain(self.err.try_iter()) {
            stderr.push_str(&l);
            stderr.push('\n');
        }
        Output {
            status: status.unwrap_or_else(failed_status),
            stdout: stdout.into_bytes(),
            stderr: stderr.into_bytes(),
        }
    }
}

/// The status of a process that could not be reaped (reported as `signal 9`).
fn failed_status() -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus::from_raw(9)
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to its end (see [`Proc::finish`]).
pub fn run(cmd: &mut Command) -> Output {
    Proc::spawn(cmd).finish()
}

/// Sends a signal by name (`INT`, `TERM`, `KILL`, `STOP`, `CONT`) to a process.
///
/// # Panics
/// `kill` cannot be run or fails.
pub fn signal(pid: u32, name: &str) {
    let mut cmd = Command::new("kill");
    cmd.args([format!("-{name}"), pid.to_string()]);
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}
