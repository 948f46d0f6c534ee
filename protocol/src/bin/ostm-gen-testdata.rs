//! `ostm-gen-testdata [DIR]`: writes every generated replay into DIR (default `testdata`).

use ostm_protocol::sim::testdata;
use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
Writes the generated test replays (testdata/*.ostm) into DIR.

Usage: ostm-gen-testdata [DIR]

DIR defaults to `testdata`. The files are a pure function of the source: running this
twice gives identical bytes. See docs/testdata.md for what each file holds.

Exit codes: 0 written, 2 bad arguments or a file could not be written.

Examples:
  ostm-gen-testdata
  ostm-gen-testdata /tmp/fresh && cmp /tmp/fresh/test-10000.ostm testdata/test-10000.ostm
  scripts/gen-testdata";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return ExitCode::SUCCESS;
    }
    if args.len() > 1 || args.iter().any(|a| a.starts_with('-')) {
        eprintln!("error: expected at most one argument, DIR\n\n{HELP}");
        return ExitCode::from(2);
    }
    let dir = PathBuf::from(args.first().map_or("testdata", String::as_str));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    for (name, bytes) in testdata::files() {
        let path = dir.join(&name);
        if let Err(e) = std::fs::write(&path, &bytes) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    ExitCode::SUCCESS
}
