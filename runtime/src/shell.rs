//! What a shell needs of a binary, made from its clap definitions: completion scripts
//! (clap_complete) and man pages (clap_mangen). Both binaries take the same two commands:
//! `completions SHELL` and `man --out DIR`.

use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `cmd` with `BIN` in the help of its `completions` and `man` subcommands replaced by
/// `bin`, the binary's name (the examples there are written once for both binaries).
/// Parse with it: `Cli::from_arg_matches(&named(Cli::command(), "ostm-host").get_matches())`.
pub fn named(cmd: clap::Command, bin: &str) -> clap::Command {
    let fill = |c: clap::Command| {
        let help = c
            .get_after_help()
            .map(|h| h.to_string().replace("BIN", bin));
        match help {
            Some(h) => c.after_help(h),
            None => c,
        }
    };
    cmd.mut_subcommand("completions", fill)
        .mut_subcommand("man", fill)
}

/// Arguments of `completions`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "Examples:
  # bash: for this user (bash-completion loads it when the command is first completed)
  mkdir -p ~/.local/share/bash-completion/completions
  BIN completions bash > ~/.local/share/bash-completion/completions/BIN
  # zsh: a directory on $fpath, then restart zsh (compinit)
  mkdir -p ~/.zfunc && BIN completions zsh > ~/.zfunc/_BIN
  echo 'fpath=(~/.zfunc $fpath); autoload -Uz compinit && compinit' >> ~/.zshrc
  # fish
  BIN completions fish > ~/.config/fish/completions/BIN.fish

Prints the script on stdout (it has no --json: the script is the output).")]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: Shell,
}

impl CompletionsArgs {
    /// Prints the completion script of `cmd` (named `bin`) for the shell asked for; a
    /// reader that stops early (`| head`) is no failure.
    pub fn run(&self, cmd: clap::Command, bin: &str) -> ExitCode {
        use std::io::Write;
        let mut script = Vec::new();
        let mut cmd = for_completion(cmd, bin, self.shell);
        clap_complete::generate(self.shell, &mut cmd, bin, &mut script);
        let mut out = std::io::stdout().lock();
        match out.write_all(&script).and_then(|()| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                eprintln!("error: cannot write the completion script: {e}");
                ExitCode::from(2)
            }
            _ => ExitCode::SUCCESS,
        }
    }
}

/// `cmd` as the completion scripts are made from: without the options hidden from
/// `--help` (clap_complete offers every option, hidden or not), and, for bash, with each
/// subcommand's bin name spelt the way clap_complete's bash script spells its state
/// (clap issue 6421: the script's loop escapes the binary's name and each subcommand's
/// name apart, `ostm__host__subcmd__serve`, while its branches escape the whole bin name
/// `ostm-host serve` at once, `ostm__subcmd__host__subcmd__serve`, so with a `-` in the
/// binary's name no branch ever matched and nothing after the first word completed).
fn for_completion(cmd: clap::Command, bin: &str, shell: Shell) -> clap::Command {
    let mut cmd = cmd;
    cmd.set_bin_name(bin);
    cmd.build(); // the `--help`, `--version` and `help` clap adds are offered too
    let mut shown = without_hidden(&cmd);
    shown.set_bin_name(bin);
    shown.build();
    if shell == Shell::Bash {
        spell_bin_names(&mut shown, &bin.replace('-', "__"));
    }
    shown
}

/// A copy of the built `cmd` (names, help, options, subcommands) without its hidden
/// options; the rules between options (requires, conflicts) are left out, as completion
/// does not use them and some name a hidden option.
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    use clap::builder::Resettable::Reset as NO_ID;
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .hide(cmd.is_hide_set())
        .visible_aliases(cmd.get_visible_aliases().map(str::to_string));
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_string());
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        out = out.arg(
            arg.clone()
                .global(false)
                .requires(NO_ID)
                .conflicts_with(NO_ID)
                .overrides_with(NO_ID)
                .required_unless_present(NO_ID)
                .required(false),
        );
    }
    for sub in cmd.get_subcommands() {
        out = out.subcommand(without_hidden(sub));
    }
    out
}

/// Gives every subcommand of `cmd` the bin name `LABEL SUB…` with the binary's name
/// escaped as bash's script escapes it in its loop (see [`for_completion`]).
fn spell_bin_names(cmd: &mut clap::Command, label: &str) {
    for sub in cmd.get_subcommands_mut() {
        let name = format!("{label} {}", sub.get_name());
        sub.set_bin_name(name.clone());
        spell_bin_names(sub, &name);
    }
}

/// Arguments of `man`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "Examples:
  # For this user (man finds ~/.local/share/man through $PATH's ~/.local/bin)
  BIN man --out ~/.local/share/man/man1 && man BIN
  # For everyone
  sudo BIN man --out /usr/local/share/man/man1 && sudo mandb

Writes one page per command, BIN.1 and BIN-COMMAND.1 (e.g. man BIN-COMMAND), creating DIR
if missing and replacing pages already there; ends with a `wrote DIR: N pages` line.

Exit codes: 0 written, 2 a page cannot be written")]
pub struct ManArgs {
    /// The directory to write the pages to (section 1).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Print what was written as one JSON object (`dir`, `pages`).
    #[arg(long)]
    pub json: bool,
}

impl ManArgs {
    /// Writes the man pages of `cmd` and every subcommand that is not hidden; 0 when
    /// written, 2 (with the reason on stderr) when not.
    pub fn run(&self, cmd: clap::Command) -> ExitCode {
        match write_man_pages(cmd, &self.out) {
            Ok(pages) => {
                if self.json {
                    let names: Vec<String> =
                        pages.iter().map(|p| p.display().to_string()).collect();
                    println!(
                        "{}",
                        serde_json::json!({"dir": self.out.display().to_string(), "pages": names})
                    );
                } else {
                    println!("wrote {}: {} pages", self.out.display(), pages.len());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        }
    }
}

/// Writes `NAME.1` for `cmd` and `NAME-SUB.1` for each subcommand (recursively, hidden
/// ones and `help` left out) into `dir`, created if missing; returns the files written.
///
/// # Errors
/// The directory or a page cannot be written, in a sentence naming it.
pub fn write_man_pages(cmd: clap::Command, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create the directory {}: {e}", dir.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    // Every page's footer names the program and its version, as the binary's own does
    // (a subcommand has no version of its own).
    let source = format!(
        "{} {}",
        cmd.get_name(),
        cmd.get_version().unwrap_or_default()
    );
    let mut written = Vec::new();
    write_one(cmd, source.trim(), dir, &mut written)?;
    Ok(written)
}

fn write_one(
    cmd: clap::Command,
    source: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), String> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_one(sub.clone(), source, dir, written)?;
    }
    let man = clap_mangen::Man::new(cmd).source(source);
    let path = dir.join(man.get_filename());
    man.generate_to(dir)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    written.push(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::write_man_pages;

    #[derive(clap::Parser)]
    #[command(name = "demo", version = "1.2.3")]
    struct Demo {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        /// One.
        One {
            /// An option.
            #[arg(long)]
            flag: bool,
        },
        #[command(hide = true)]
        Hidden,
    }

    #[test]
    fn one_page_per_command_and_none_for_hidden_ones() {
        use clap::CommandFactory;
        let dir = tempfile::tempdir().unwrap();
        let mut pages = write_man_pages(Demo::command(), dir.path()).unwrap();
        pages.sort();
        let names: Vec<_> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["demo-one.1", "demo.1"]);
        let one = std::fs::read_to_string(&pages[0]).unwrap();
        assert!(one.contains("\\-\\-flag"), "{one}");
        // A subcommand's page names the program and its version, as the program's does.
        assert!(one.contains(".TH demo-one 1  \"demo 1.2.3\""), "{one}");
    }
}
