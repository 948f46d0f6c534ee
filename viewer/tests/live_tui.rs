//! `attach --tui` end to end: the real `ostm-host` and `ostm-viewer` in a tmux pane
//! (a private server on its own socket, killed at the end), read with `capture-pane`.
//! The pane runs a script that saves the terminal's settings (`stty -g`) before and after
//! the viewer, and its exit code; stdout goes to a file (the view draws on stderr, the
//! pane). Checked: the world, status and strip drawn; a resize followed; the drift report
//! naming the planted step, body and field; q, Ctrl-C and a panic each leaving the
//! terminal as it was (same settings, main screen, cursor shown), with attach's lines,
//! verdict and exit code.
//!
//! tmux must be installed (`scripts/test` installs it with apt-get when it is missing).

mod live_support;

use live_support::tmux::Tmux;
use live_support::*;
use std::time::{Duration, Instant};

/// A run of the viewer in a pane: its script's files in a temporary directory.
struct Run {
    dir: tempfile::TempDir,
    tmux: Tmux,
}

impl Run {
    /// Starts `ostm-viewer ARGS` in a `width` x `height` pane.
    fn start(args: &[&str], width: u16, height: u16) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let quoted: Vec<String> = std::iter::once(viewer_bin().display().to_string())
            .chain(args.iter().map(|a| a.to_string()))
            .map(|a| format!("'{a}'"))
            .collect();
        let script = d.join("run.sh");
        std::fs::write(
            &script,
            format!(
                "cd '{dir}'\nstty -g > before\n{viewer} > out\necho $? > rc.part\nstty -g > after\nmv rc.part rc\nexec sleep 3600\n",
                dir = d.display(),
                viewer = quoted.join(" "),
            ),
        )
        .unwrap();
        let tmux = Tmux::start(d, width, height, &script);
        Run { dir, tmux }
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Waits for the viewer to exit; its exit code and stdout.
    fn exited(&self) -> (i32, String) {
        let deadline = Instant::now() + LIMIT;
        while !self.dir.path().join("rc").exists() {
            assert!(
                Instant::now() < deadline,
                "the viewer did not exit; the pane:\n{}",
                self.tmux.screen()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let rc = self.file("rc").trim().parse().expect("an exit code");
        (rc, self.file("out"))
    }

    /// The terminal is as the viewer found it: the same settings, the main screen, the
    /// cursor shown.
    fn assert_terminal_restored(&self) {
        let (before, after) = (self.file("before"), self.file("after"));
        assert!(!before.trim().is_empty(), "stty -g printed nothing");
        assert_eq!(before, after, "the terminal's settings changed");
        assert_eq!(
            self.tmux.display("#{alternate_on}"),
            "0",
            "still on the alternate screen"
        );
        assert_eq!(
            self.tmux.display("#{cursor_flag}"),
            "1",
            "the cursor is hidden"
        );
    }
}

/// The strip's row of cells: the row under its title.
fn strip_row(screen: &str) -> Option<&str> {
    let mut rows = screen.lines().skip_while(|r| !r.contains("recent steps "));
    rows.next();
    rows.next()
}

/// attach's last line after a stop asked for (q, Ctrl-C).
#[track_caller]
fn assert_stopped(out: &str) {
    let last = out.lines().last().unwrap_or_default();
    assert!(last.starts_with("stopped: verified "), "{out}");
}

const STEP: u64 = 3000;

#[test]
fn the_view_draws_the_session_follows_a_resize_and_shows_the_drift_until_q() {
    let (body, vy) = live_support::planted(STEP);
    let planted = format!("{STEP}:{body}");
    let host = Host::start(&[
        "--rate",
        "300",
        "--steps",
        "6000",
        "--ring",
        "6001",
        "--wait-for-viewers",
        "1",
        "--perturb",
        &planted,
    ]);
    let run = Run::start(
        &["attach", &host.addr, "--tui", "--record", "s.ostm"],
        120,
        40,
    );
    let t = &run.tmux;
    // The status panel always shows; the world and strip once the viewer attached.
    let s = t.wait_for("verified steps in the strip", |s| {
        strip_row(s).is_some_and(|r| r.contains('█'))
    });
    assert!(s.contains(&format!("attach {}", host.addr)), "{s}");
    assert!(s.contains("3D, from above · step "), "{s}");
    assert!(s.contains("recording  s.ostm"), "{s}");
    assert!(s.contains("host step  "), "{s}");
    assert!(
        s.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)),
        "braille on the canvas:\n{s}"
    );
    // The drift, its report naming the planted step, body and field.
    // Both in one screen: tmux may capture a frame the view is still writing (top to
    // bottom), with the report drawn and the strip below not yet.
    let s = t.wait_for("the drift report and its cell in the strip", |s| {
        s.contains("DRIFT") && strip_row(s).is_some_and(|r| r.trim_end().ends_with("▓│"))
    });
    let headline = format!("drift at step {STEP}: body {body} velocity.y");
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&headline), "{s}");
    assert!(s.contains(&format!("body {body} is drawn red")), "{s}");
    assert!(
        strip_row(&s).is_some_and(|r| r.trim_end().ends_with("▓│")),
        "the drift cell ends the strip:\n{s}"
    );
    // The view stays on the report until q; a resize redraws it at the new size.
    t.run(&["resize-window", "-x", "90", "-y", "30"]);
    let s = t.wait_for("the view redrawn at 90x30", |s| {
        let rows: Vec<&str> = s.lines().collect();
        rows.first()
            .is_some_and(|r| r.chars().count() == 90 && r.ends_with('┐'))
            && rows.len() == 30
            && rows[29].contains("q: quit")
    });
    assert!(s.contains("DRIFT"), "{s}");
    assert!(
        !run.dir.path().join("rc").exists(),
        "the viewer waits for q"
    );
    t.keys("q");
    let (rc, out) = run.exited();
    run.assert_terminal_restored();
    assert_eq!(rc, 1, "drift exits 1:\n{out}");
    // attach's own lines, in attach's order, after the view.
    assert!(
        out.starts_with(&format!("attached to {} at step 0", host.addr)),
        "{out}"
    );
    assert!(
        out.contains(&format!("{headline} host={} viewer={vy}", vy + 1)),
        "{out}"
    );
    assert!(out.contains("recorded s.ostm ("), "{out}");
    assert!(out.contains("bundle written: s.drift-3000.ostmb"), "{out}");
    assert!(run.dir.path().join("s.drift-3000.ostmb").exists());
}

#[test]
fn ctrl_c_stops_the_session_and_a_panic_still_restores_the_terminal() {
    let host = Host::start(&["--rate", "100"]);
    let run = Run::start(&["attach", &host.addr, "--tui"], 100, 32);
    run.tmux.wait_for("a verifying session", |s| {
        s.contains("verifying") && strip_row(s).is_some_and(|r| r.contains('█'))
    });
    run.tmux.keys("C-c");
    let (rc, out) = run.exited();
    run.assert_terminal_restored();
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("attached to "), "{out}");
    assert_stopped(&out);

    // Tall enough for the panic's message, the backtrace and the session's log lines
    // written after the view.
    let run = Run::start(&["attach", &host.addr, "--tui", "--tui-panic"], 100, 60);
    let (rc, out) = run.exited();
    run.assert_terminal_restored();
    assert_eq!(rc, 2, "{out}");
    // The panic's message and the error come after the terminal was given back.
    let s = run
        .tmux
        .wait_for("the panic's message", |s| s.contains("error: "));
    assert!(
        s.contains("--tui-panic: a panic after the first picture"),
        "{s}"
    );
    assert!(s.contains("error: the terminal view failed"), "{s}");
    assert_stopped(&out);
}

#[test]
fn without_a_terminal_on_stderr_or_with_json_tui_is_refused() {
    // The test's pipes are not terminals; nothing is dialled.
    let out = viewer(&["attach", "127.0.0.1:9", "--tui"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error: --tui draws on the terminal, and stderr is not one"),
        "{}",
        stderr(&out)
    );
    let out = viewer(&["attach", "127.0.0.1:9", "--tui", "--json"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--json"), "{}", stderr(&out));
}
