//! Completions and man pages of both binaries, made from their command-line definitions:
//! `completions bash|zsh|fish` prints a script naming every command (bash loads it and
//! completes the binary's commands), stops quietly when its reader does (`| head`), and
//! `man --out DIR` writes one page per command that man can read.

mod live_support;

use live_support::*;
use std::process::{Command, Stdio};

/// The commands `BIN --help` lists.
fn commands(bin: &std::path::Path) -> Vec<String> {
    let help = stdout(&run(Command::new(bin).arg("--help")));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

fn has_bash() -> bool {
    Command::new("bash")
        .args(["-c", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `cmd` with `input` on its stdin.
fn run_with_input(cmd: &mut Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn completion_scripts_name_every_command_and_bash_completes_them() {
    for (bin, name) in [(host_bin(), "ostm-host"), (viewer_bin(), "ostm-viewer")] {
        let cmds = commands(&bin);
        assert!(cmds.len() >= 4, "{name}: {cmds:?}");
        for shell in ["bash", "zsh", "fish"] {
            let out = run(Command::new(&bin).args(["completions", shell]));
            assert_eq!(code(&out), 0, "{name} {shell}: {}", stderr(&out));
            let script = stdout(&out);
            for c in &cmds {
                assert!(script.contains(c.as_str()), "{name} {shell}: no {c}");
            }
        }
        // bash itself (every CI machine has it; elsewhere this part is skipped, said so):
        // the script parses (`bash -n`), and once loaded it completes `BIN <TAB>` with
        // every command.
        if !has_bash() {
            eprintln!("bash is not installed: its checks of the completion script are skipped");
            continue;
        }
        let mut parse = Command::new("bash");
        parse.arg("-n").stdin(Stdio::piped());
        let script = stdout(&run(Command::new(&bin).args(["completions", "bash"])));
        let out = run_with_input(&mut parse, script.as_bytes());
        assert_eq!(code(&out), 0, "{name}: bash -n: {}", stderr(&out));
        let probe = format!(
            "source <('{}' completions bash) && COMP_WORDS=({name} '') && COMP_CWORD=1 && \
             _{}  {name} '' {name} && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            bin.display(),
            name.replace('-', "__")
        );
        let out = run(Command::new("bash").args(["-c", &probe]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let offered: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
        for c in &cmds {
            assert!(
                offered.contains(c),
                "{name}: bash does not offer {c}: {offered:?}"
            );
        }
    }
    // An unknown shell is bad input.
    let out = run(Command::new(viewer_bin()).args(["completions", "tcsh"]));
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("possible values"), "{}", stderr(&out));
}

#[test]
fn the_help_of_both_commands_shows_examples_with_the_binary_s_name() {
    for (bin, name) in [(host_bin(), "ostm-host"), (viewer_bin(), "ostm-viewer")] {
        for cmd in ["completions", "man"] {
            let help = stdout(&run(Command::new(&bin).args([cmd, "--help"])));
            assert!(
                help.contains("Examples:") && help.contains(&format!("{name} {cmd} ")),
                "{name} {cmd}: {help}"
            );
            assert!(!help.contains("BIN"), "{name} {cmd}: {help}");
        }
    }
}

#[test]
fn a_reader_that_stops_early_is_no_failure() {
    let mut child = Command::new(host_bin())
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the pipe at once, as `| head -0` would.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn man_writes_one_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    for (bin, name) in [(host_bin(), "ostm-host"), (viewer_bin(), "ostm-viewer")] {
        let out = run(Command::new(&bin)
            .args(["man", "--out"])
            .arg(dir.path().join("man1")));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).starts_with("wrote "), "{}", stdout(&out));
        let cmds = commands(&bin);
        let mut want = vec![format!("{name}.1")];
        want.extend(cmds.iter().map(|c| format!("{name}-{c}.1")));
        for page in &want {
            let text = std::fs::read_to_string(dir.path().join("man1").join(page))
                .unwrap_or_else(|e| panic!("{page}: {e}"));
            // A title line naming the page and section 1, a NAME section, a SYNOPSIS.
            let stem = page.trim_end_matches(".1");
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!(".TH {stem} 1 "))),
                "{page} has no .TH {stem} 1 line"
            );
            assert!(
                text.contains(".SH NAME") && text.contains(".SH SYNOPSIS"),
                "{page}"
            );
        }
        // The binary's page points to every command's page (man's `\-` for `-`).
        let top =
            std::fs::read_to_string(dir.path().join("man1").join(format!("{name}.1"))).unwrap();
        for c in &cmds {
            let see = format!("{name}-{c}(1)").replace('-', "\\-");
            assert!(top.contains(&see), "{name}.1 does not name {see}");
        }
    }
    // A nested command has its own page, with its options and examples.
    let page =
        std::fs::read_to_string(dir.path().join("man1/ostm-host-cert-create-host.1")).unwrap();
    assert!(
        page.contains("certs\\-dir") && page.contains("Examples:"),
        "{page}"
    );
    // man reads them.
    if Command::new("man").arg("--version").output().is_ok() {
        let out = run(Command::new("man")
            .arg("-l")
            .arg(dir.path().join("man1/ostm-viewer-check.1"))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80"));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).contains("--steps"), "{}", stdout(&out));
    }
}
