//! `ostm-write-golden [--check] [DIR]`: recomputes DIR/golden.json from DIR's replays and
//! prints every number that changed.

use ostm_protocol::sim::testdata::{self, Golden, GOLDEN_FILE};
use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
Recomputes testdata/golden.json (each replay's final hash, and every body's final
alive flag, position, velocity and first rest step) from the replays in DIR, prints
every number that changed as `NAME: old -> new` (or `no change`), and writes the file.

Usage: ostm-write-golden [--check] [DIR]

DIR defaults to `testdata`.
  --check   print the changes but do not write; exit 1 if there are any

Exit codes: 0 written (or, with --check, no change), 1 --check found changes,
2 bad arguments, an unreadable replay or an unwritable file.

Examples:
  ostm-write-golden
  ostm-write-golden --check
  scripts/write-golden";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let check = args.iter().any(|a| a == "--check");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--check").collect();
    if rest.len() > 1 || rest.iter().any(|a| a.starts_with('-')) {
        eprintln!("error: expected [--check] [DIR]\n\n{HELP}");
        return ExitCode::from(2);
    }
    let dir = PathBuf::from(rest.first().map_or("testdata", |s| s.as_str()));
    let new = match testdata::golden_of_dir(&dir) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let path = dir.join(GOLDEN_FILE);
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<Golden>(&text) {
            Ok(g) => g,
            Err(e) => {
                eprintln!(
                    "warning: {} is not a golden file ({e}); every number counts as new",
                    path.display()
                );
                Golden {
                    format: String::new(),
                    replays: Vec::new(),
                }
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Golden {
            format: String::new(),
            replays: Vec::new(),
        },
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let changes = testdata::golden_changes(&old, &new);
    if changes.is_empty() {
        println!("no change");
    }
    for c in &changes {
        println!("{c}");
    }
    if check {
        return if changes.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    if let Err(e) = std::fs::write(&path, testdata::golden_json(&new)) {
        eprintln!("error: cannot write {}: {e}", path.display());
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
