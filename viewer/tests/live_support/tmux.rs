//! A private tmux server with one pane, read with `capture-pane`: the terminal view's
//! tests (live_tui.rs) and the zsh completion test (shell.rs) drive a real terminal with it.

use super::LIMIT;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A private tmux server with one pane; killed when dropped.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Starts a server on a socket in `dir`, with one `width` x `height` pane running
    /// `sh script`.
    pub fn start(dir: &Path, width: u16, height: u16, script: &Path) -> Tmux {
        let t = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let (w, h) = (width.to_string(), height.to_string());
        let sh = format!("sh {}", script.display());
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            &w,
            "-y",
            &h,
            &sh,
        ]);
        t
    }

    pub fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run tmux ({e}): run scripts/test, which installs it")
            });
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's screen as text, one line per row.
    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p"])
    }

    /// Captures the pane until `pred` holds for the screen, and returns that screen.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "no {what} on the pane:\n{s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn keys(&self, keys: &str) {
        self.run(&["send-keys", keys]);
    }

    pub fn display(&self, format: &str) -> String {
        self.run(&["display-message", "-p", format])
            .trim()
            .to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}
