//! `ostm-viewer watch ADDR | FILE.ostm`: a live web view of a session `attach` runs (the
//! same session: options, events, verdict and exit code are attach's), or of a replay with
//! a timeline. docs/watch.md describes the page, its messages and its access rules.

use crate::args::AttachArgs;
use crate::exit::{fail, Exit};
use crate::live::session::Stop;
use crate::render::ghost::GhostCache;
use crate::report::log;
use crate::report::session::{finish, verdict, Lines};
use crate::web::{self, live::Hub, replay::Source, Mode};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments of `watch`.
#[derive(clap::Args)]
#[group(skip)]
#[command(
    mut_arg("addr", |a| a
        .value_name("ADDR|FILE")
        .help("A live host's address, HOST[:PORT] or nats://HOST:PORT/NAME (servers joined by commas: nats://HOST:PORT,HOST:PORT/NAME), as for attach; or a replay file (.ostm) to scrub through")),
    after_help = "Examples:
  # Watch a live host; open the URL printed first in a browser
  ostm-viewer watch 127.0.0.1:7878
  # The same, recording the session, with a ghost drawn beside the live bodies
  ostm-viewer watch 127.0.0.1:7878 --record session.ostm --ghost run.ospc
  # A session on a NATS cluster, through any of its servers
  ostm-viewer watch nats://127.0.0.1:4222,127.0.0.1:4223/demo
  # Scrub through a replay: timeline, play, pause, speed, one step back or forward
  ostm-viewer watch testdata/test-10000.ostm
  # Serve the page to other machines: a token is required, and is part of the URL printed
  ostm-viewer watch 127.0.0.1:7878 --ui 0.0.0.0:8080 --ui-token \"$(openssl rand -hex 16)\"
  # Prometheus metrics too, on http://127.0.0.1:9465/metrics (served as long as the page)
  ostm-viewer watch 127.0.0.1:7878 --metrics 9465

The first line printed is the page's URL (with --json, {\"event\":\"ui\",\"url\":...}),
then with --metrics where the metrics are (`ostm-viewer metrics on http://ADDR/metrics`).
With ADDR the session is exactly attach's: its lines, --json events, recording, drift
report and bundle, and exit code; the page shows each world the viewer verified (at most
one per display refresh, never slowing verification), the status, a strip of the last
4096 steps, and on drift the report with the worlds of both sides. When the session ends
(drift, --steps, the host ending), the page stays until Ctrl-C; the exit code is then
the session's. With FILE the page shows any step through the seek index beside the file
(FILE.seek, `ostm-viewer index`), else keyframes built in memory at start, and marks
each step against the file's hash row.

Exit codes:
  0  as attach (ADDR); served until Ctrl-C (FILE)
  1  drift (ADDR)
  2  bad input: a refused --ui, an unreadable replay or ghost, a connection or protocol
     failure as attach")]
pub struct Args {
    #[command(flatten)]
    pub attach: AttachArgs,
    /// Serve the page on this address, HOST[:PORT] (port 0 or none: a free port). An
    /// address other than loopback requires --ui-token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub ui: String,
    /// Require this token of every page and WebSocket (it is part of the URL printed):
    /// 1 to 255 characters A-Z a-z 0-9 . _ ~ - (also from OSTM_UI_TOKEN).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "OSTM_UI_TOKEN",
        hide_env_values = true
    )]
    pub ui_token: Option<String>,
    /// A pose cache (.ospc) whose bodies are drawn as ghosts, as `render --ghost` draws them.
    #[arg(long, value_name = "FILE.ospc")]
    pub ghost: Option<PathBuf>,
}

/// Runs `watch`.
pub fn run(args: Args) -> Exit {
    if args.attach.tui {
        return fail(
            "--tui draws the session in the terminal (attach --tui); watch serves it as a web page: give one or the other",
        );
    }
    let target = Path::new(&args.attach.addr);
    let is_file = target.is_file()
        || target
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("ostm"));
    if is_file {
        replay(args)
    } else {
        live(args)
    }
}

fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// Prints the URL, first.
fn print_url(json: bool, url: &str) {
    if json {
        out(&serde_json::json!({"event": "ui", "url": url}).to_string());
    } else {
        out(url);
    }
}

/// Binds the page's server on `rt` and prints its URL.
fn start_server(
    rt: &tokio::runtime::Runtime,
    args: &Args,
    mode: Mode,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let ui = web::access::parse_ui(&args.ui)?;
    let server = rt.block_on(web::bind(ui, args.ui_token.clone(), mode))?;
    print_url(args.attach.json, &server.url);
    Ok(rt.spawn(server.serve()))
}

/// The options of attach that mean nothing for a replay file, when given.
fn live_only(a: &AttachArgs) -> Option<&'static str> {
    [
        (a.steps.is_some(), "--steps"),
        (a.until.is_some(), "--until"),
        (a.recording.record.is_some(), "--record"),
        (a.reconnect, "--reconnect"),
        (a.fields || !a.fields_at.is_empty(), "--fields"),
        (a.host.from_step.is_some(), "--from-step"),
        (a.metrics.metrics.is_some(), "--metrics"),
        (
            a.host.token.token.is_some() || a.host.token.token_file.is_some(),
            "--token",
        ),
    ]
    .into_iter()
    .find(|(given, _)| *given)
    .map(|(_, name)| name)
}

fn replay(args: Args) -> Exit {
    let file = PathBuf::from(&args.attach.addr);
    if let Some(opt) = live_only(&args.attach) {
        return fail(format!(
            "{opt} is for a live session; {} is a replay file",
            file.display()
        ));
    }
    let source = match Source::open(&file, args.ghost.as_deref()) {
        Ok(s) => Arc::new(s),
        Err(e) => return fail(e),
    };
    let rt = match web::runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the page's server: {e}")),
    };
    let server = match start_server(&rt, &args, Mode::Replay(source.clone())) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    eprintln!(
        "watch: {} ({}); Ctrl-C stops",
        file.display(),
        source.index_line()
    );
    rt.block_on(ostm_runtime::signal::stop_signal());
    server.abort();
    Exit::Ok
}

fn live(mut args: Args) -> Exit {
    let mut opts = match args.attach.session_options() {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let ghost = match &args.ghost {
        Some(p) => match GhostCache::read(p) {
            Ok(g) => Some(g),
            Err(e) => return fail(e),
        },
        None => None,
    };
    let hub = Arc::new(Hub::new(
        &args.attach.addr,
        args.attach.recording.record.as_deref(),
        ghost,
    ));
    opts.frames = Some(hub.frames.clone());
    let rt = match web::runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the page's server: {e}")),
    };
    // Bound before the page's URL is printed; its line follows the URL.
    let metrics = match args
        .attach
        .metrics
        .start(&args.attach.addr, opts.record_path())
    {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let server = match start_server(&rt, &args, Mode::Live(hub.clone())) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    // Listened for from now on: a Ctrl-C that comes just as the session ends (after the
    // reader stopped listening, before the wait below) is not lost.
    let stopped = rt.spawn(ostm_runtime::signal::stop_signal());
    let mut lines = Lines::new(&args.attach);
    lines.metrics(&metrics);
    let outcome = log::session(&opts, |ev| {
        metrics.on(&ev);
        lines.on(&ev);
        hub.on(&ev);
    });
    // The metrics stay served with the page, the session's end in them.
    metrics.ended(&outcome);
    let (_, _, verdict) = verdict(&outcome);
    hub.ended(&outcome, &verdict);
    let exit = finish(&args.attach, &outcome, lines);
    if !matches!(outcome.stop, Stop::Interrupted) {
        eprintln!("watch: the session has ended; the page stays until Ctrl-C (or SIGTERM)");
        let _ = rt.block_on(stopped);
    }
    server.abort();
    exit
}
