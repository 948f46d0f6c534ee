//! `ostm-viewer attach ADDR`: attach to a live host at any step, verify every record by
//! step number, optionally record, and explain the first drift. The arguments are
//! [`AttachArgs`] (`watch` and the terminal view take them too).

use crate::args::AttachArgs;
use crate::exit::Exit;
use crate::report::log;
use crate::report::session::{finish, Lines};

/// Runs `attach` (with `--tui`, [`crate::tui::run`]).
pub fn run(mut args: AttachArgs) -> Exit {
    if args.tui {
        return crate::tui::run(args);
    }
    let opts = match args.session_options() {
        Ok(o) => o,
        Err(e) => return crate::exit::fail(e),
    };
    let metrics = match args.metrics.start(&args.addr, opts.record_path()) {
        Ok(m) => m,
        Err(e) => return crate::exit::fail(e),
    };
    let mut lines = Lines::new(&args);
    lines.metrics(&metrics);
    let outcome = log::session(&opts, |ev| {
        metrics.on(&ev);
        lines.on(&ev);
    });
    metrics.ended(&outcome);
    finish(&args, &outcome, lines)
}
