//! Completions and man pages of both binaries, made from their command-line definitions:
//! `completions bash|zsh|fish` prints a script naming every command; once loaded in the
//! shell itself (bash: its completion function called as on Tab; fish: `complete -C`;
//! zsh: Tab pressed in a tmux pane) it completes commands, subcommands, options and their
//! values, offering exactly the options `--help` lists (none hidden from it). The script
//! stops quietly when its reader does (`| head`), and `man --out DIR` writes one page per
//! command that man can read. bash, zsh, fish and tmux must be installed (`scripts/test`
//! installs them with apt-get when they are missing).

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

/// The options `BIN WORDS… --help` lists (long names, and `-h`-like short ones).
fn options_in_help(bin: &std::path::Path, words: &[&str]) -> Vec<String> {
    let help = stdout(&run(Command::new(bin).args(words).arg("--help")));
    let mut opts = Vec::new();
    for raw in help.lines() {
        // An option's own line (a description's next lines are indented further).
        let line = raw.trim_start();
        if !line.starts_with('-') || raw.len() - line.len() > 6 {
            continue;
        }
        for word in line.split_whitespace() {
            let word = word.trim_end_matches(',');
            if word.starts_with('-') {
                opts.push(word.split('=').next().unwrap_or(word).to_string());
            } else {
                break;
            }
        }
    }
    opts.sort();
    opts.dedup();
    opts
}

/// What bash's completion offers for the command line `WORDS…` (the last word being the
/// one completed), as a user meets it: the script `BIN completions bash` prints, sourced
/// in bash, its function called as `complete -F` calls it (with `COMP_WORDS` and
/// `COMP_CWORD` set), `COMPREPLY` read.
fn bash_offers(bin: &std::path::Path, words: &[&str]) -> Vec<String> {
    let probe = r#"bin="$1"; shift
source <("$bin" completions bash) || exit 3
COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
spec=$(complete -p "$1") || exit 4
fn=${spec#*-F }; fn=${fn%% *}
"$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}""#;
    let out = run(Command::new("bash")
        .args(["-c", probe, "probe"])
        .arg(bin)
        .args(words));
    assert_eq!(code(&out), 0, "{words:?}: {}", stderr(&out));
    stdout(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The options hidden from `--help`: for tests and benchmarks, never offered.
const HIDDEN: [&str; 5] = [
    "--perturb",
    "--stamps",
    "--stamp-every",
    "--unbounded-queue-for-tests",
    "--no-flush-for-tests",
];

#[test]
fn bash_completes_the_options_and_subcommands_of_every_command_and_no_hidden_option() {
    assert!(has_bash(), "bash is needed to test its completion");
    let host = host_bin();
    let viewer = viewer_bin();
    // The options of a subcommand (here a word's start).
    assert_eq!(
        bash_offers(&host, &["ostm-host", "serve", "--tls"]),
        ["--tls-cert", "--tls-key"]
    );
    assert_eq!(
        bash_offers(&viewer, &["ostm-viewer", "attach", "--tls"]),
        ["--tls", "--tls-ca", "--tls-name"]
    );
    // The subcommands of a subcommand, and the options of those.
    assert_eq!(
        bash_offers(&host, &["ostm-host", "cert", "create-"]),
        ["create-ca", "create-host"]
    );
    assert!(
        bash_offers(&host, &["ostm-host", "cert", "create-host", "--"])
            .contains(&"--ca-key".to_string())
    );
    // An option's values.
    assert_eq!(
        bash_offers(&viewer, &["ostm-viewer", "attach", "--log-format", ""]),
        ["text", "json"]
    );
    // Every command: `--<TAB>` offers exactly the options its --help lists (so none
    // hidden from it).
    for (bin, name) in [(&host, "ostm-host"), (&viewer, "ostm-viewer")] {
        let mut paths: Vec<Vec<String>> = commands(bin).into_iter().map(|c| vec![c]).collect();
        paths.push(vec!["cert".into(), "create-ca".into()]);
        paths.push(vec!["cert".into(), "create-host".into()]);
        for path in paths
            .iter()
            .filter(|p| name == "ostm-host" || p[0] != "cert")
        {
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            let mut line = vec![name];
            line.extend(&words);
            line.push("--");
            let mut offered = bash_offers(bin, &line);
            offered.sort();
            let listed: Vec<String> = options_in_help(bin, &words)
                .into_iter()
                .filter(|o| o.starts_with("--"))
                .collect();
            assert_eq!(offered, listed, "{name} {path:?} --<TAB>");
            for hidden in HIDDEN {
                assert!(
                    !offered.iter().any(|o| o == hidden),
                    "{name} {path:?}: {hidden}"
                );
            }
        }
    }
}

/// What fish offers for the command line `LINE` (`complete -C`), the script
/// `BIN completions fish` loaded: the candidates, without their descriptions.
fn fish_offers(bin: &std::path::Path, line: &str) -> Vec<String> {
    let out = run(Command::new("fish")
        .args([
            "--no-config",
            "-c",
            "$argv[1] completions fish | source; and complete -C $argv[2]",
        ])
        .arg(bin)
        .arg(line));
    assert_eq!(code(&out), 0, "fish {line}: {}", stderr(&out));
    let mut offered: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split('\t').next())
        .map(str::to_string)
        .collect();
    offered.sort();
    offered
}

#[test]
fn fish_completes_the_options_and_subcommands_and_no_hidden_option() {
    let host = host_bin();
    assert_eq!(
        fish_offers(&host, "ostm-host serve --tls"),
        ["--tls-cert", "--tls-key"]
    );
    assert_eq!(
        fish_offers(&viewer_bin(), "ostm-viewer attach --tls"),
        ["--tls", "--tls-ca", "--tls-name"]
    );
    assert_eq!(
        fish_offers(&host, "ostm-host cert create-"),
        ["create-ca", "create-host"]
    );
    let offered = fish_offers(&host, "ostm-host serve --");
    assert!(offered.contains(&"--publish".to_string()), "{offered:?}");
    for hidden in HIDDEN {
        assert!(
            !offered.iter().any(|o| o == hidden),
            "{hidden}: {offered:?}"
        );
    }
    let offered = fish_offers(&viewer_bin(), "ostm-viewer attach --");
    for hidden in HIDDEN {
        assert!(
            !offered.iter().any(|o| o == hidden),
            "{hidden}: {offered:?}"
        );
    }
}

#[test]
fn zsh_completes_the_options_of_a_subcommand_and_no_hidden_option() {
    use live_support::tmux::Tmux;
    // An interactive zsh in a tmux pane, with nothing of the machine's configuration:
    // the script `ostm-host completions zsh` on $fpath, compinit, then Tab pressed.
    let dir = tempfile::tempdir().unwrap();
    let out = run(Command::new(host_bin()).args(["completions", "zsh"]));
    std::fs::write(dir.path().join("_ostm-host"), &out.stdout).unwrap();
    let script = dir.path().join("zsh.sh");
    std::fs::write(
        &script,
        format!(
            "exec env -i TERM=xterm HOME='{d}' PATH=/usr/bin:/bin zsh -f\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    let tmux = Tmux::start(dir.path(), 160, 40, &script);
    tmux.keys(&format!(
        "fpath=('{}' $fpath); autoload -Uz compinit && compinit -u && echo READY",
        dir.path().display()
    ));
    tmux.keys("Enter");
    tmux.wait_for("zsh ready", |s| s.lines().any(|l| l.trim() == "READY"));
    // `--tls<TAB>` completes the common start, a second Tab lists both options.
    tmux.keys("ostm-host serve --tls");
    tmux.keys("Tab");
    tmux.wait_for("--tls- completed", |s| s.contains("serve --tls-"));
    tmux.keys("Tab");
    let screen = tmux.wait_for("the TLS options listed", |s| {
        s.contains("--tls-cert") && s.contains("--tls-key")
    });
    assert!(
        screen.contains("Serve TLS with this certificate"),
        "{screen}"
    );
    // `--p<TAB>`: --publish is the one option left once the hidden --perturb is not
    // offered, so zsh completes it on the line at once.
    tmux.keys("C-u");
    tmux.keys("C-l");
    tmux.keys("ostm-host serve --p");
    tmux.keys("Tab");
    let screen = tmux.wait_for("--publish completed", |s| s.contains("serve --publish"));
    assert!(!screen.contains("--perturb"), "{screen}");
    tmux.keys("C-u");
    tmux.keys("C-l");
    tmux.keys("ostm-host serve --st");
    tmux.keys("Tab");
    let screen = tmux.wait_for("--steps or --stall-ms offered", |s| {
        s.contains("--steps") && s.contains("--stall-ms")
    });
    assert!(!screen.contains("--stamp"), "{screen}");
}
