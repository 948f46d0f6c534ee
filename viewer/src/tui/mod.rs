//! `ostm-viewer attach ADDR --tui`: the session `attach` runs, drawn in the terminal.
//!
//! The session runs on its own thread exactly as `attach` runs it ([`log::session`] with
//! attach's [`Options`](crate::live::session::Options)); its events cross to the main
//! thread over a channel, where the view draws them about ten times a second and asks
//! the verifier for the next world ([`FrameRequest::ask`]) after each picture. The
//! verifier never waits for the view. When the session ends the terminal is restored and
//! [`finish`] prints the verdict and gives the exit code, as without `--tui`.
//!
//! - [`view`]: what is shown and its layout.
//! - [`world`]: the world on a braille canvas.
//! - [`screen`]: taking and restoring the terminal (also on a panic).
//! - [`logs`]: log lines held while the view has the screen.

pub mod logs;
mod screen;
mod view;
mod world;

#[cfg(test)]
mod tests;

use crate::args::AttachArgs;
use crate::exit::{self, Exit};
use crate::live::session::{self, Event, FrameRequest, Outcome, Stop};
use crate::report::log;
use crate::report::session::{finish, Lines};
use ratatui::crossterm::event::{self, Event as Input, KeyCode, KeyEventKind, KeyModifiers};
use screen::Screen;
use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use view::{Msg, View};

/// How often the view draws (and asks for a frame).
const DRAW_EVERY: Duration = Duration::from_millis(100);
/// The lines `attach` prints, kept while the view has the screen (stdout a terminal) to
/// print once it is restored; past this many, they are counted instead.
const KEPT_LINES: usize = 10_000;

type Ended = (Outcome, Lines);

/// Runs `attach` with the terminal view.
pub fn run(mut args: AttachArgs) -> Exit {
    if !std::io::stderr().is_terminal() {
        return exit::fail(
            "--tui draws on the terminal, and stderr is not one: run attach without --tui for lines",
        );
    }
    let mut opts = match args.session_options() {
        Ok(o) => o,
        Err(e) => return exit::fail(e),
    };
    let frames = FrameRequest::default();
    opts.frames = Some(frames.clone());
    let interrupt = opts.interrupt.clone();
    let (tx, rx) = mpsc::channel();
    let to_view = tx.clone();
    let metrics = match args.metrics.start(&args.addr, opts.record_path()) {
        Ok(m) => m,
        Err(e) => return exit::fail(e),
    };
    let mut lines = Lines::for_view(&args, move |l| {
        let _ = to_view.send(Msg::Line(l));
    });
    lines.metrics(&metrics);
    let session = std::thread::Builder::new()
        .name("ostm-session".into())
        .spawn(move || {
            let outcome = log::session(&opts, |ev| {
                if let Some(m) = message(&ev) {
                    let _ = tx.send(m);
                }
                metrics.on(&ev);
                lines.on(&ev);
            });
            metrics.ended(&outcome);
            (outcome, lines)
        });
    let mut session = match session {
        Ok(s) => Some(s),
        Err(e) => return exit::fail(format!("cannot start the session: {e}")),
    };
    let mut out = Printed::new(std::io::stdout().is_terminal());
    let mut ended = None;
    let view = View::new(&args.addr, args.recording.record.clone());
    let shown = match Screen::enter() {
        Ok(mut screen) => {
            let looped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                show(
                    &mut screen,
                    view,
                    &rx,
                    &frames,
                    &interrupt,
                    &mut session,
                    &mut ended,
                    &mut out,
                    args.tui_panic,
                )
            }));
            drop(screen);
            match looped {
                Ok(r) => r.map_err(|e| format!("the terminal failed: {e}")),
                Err(_) => Err("the terminal view failed (see the panic above)".into()),
            }
        }
        Err(e) => Err(format!("cannot take the terminal: {e}")),
    };
    // The terminal is restored: what attach printed meanwhile, then its verdict.
    if ended.is_none() {
        interrupt.interrupt();
        if let Some(s) = session.take() {
            ended = Some(s.join());
        }
    }
    for m in rx.try_iter() {
        if let Msg::Line(l) = m {
            out.line(l);
        }
    }
    out.flush_kept();
    if let Err(e) = &shown {
        exit::fail(e);
    }
    let finished = match ended {
        Some(Ok((outcome, lines))) => finish(&args, &outcome, lines),
        Some(Err(_)) => exit::fail("the session stopped on a panic (see above)"),
        None => exit::fail("the session did not end"),
    };
    match shown {
        Ok(()) => finished,
        Err(_) => Exit::Failure,
    }
}

/// What the view takes of a session event (the lines come through [`Lines`]).
fn message(ev: &Event<'_>) -> Option<Msg> {
    Some(match *ev {
        Event::Attached { welcome, world } => Msg::Attached {
            world: Box::new(world.clone()),
            host_rate: welcome.rate,
        },
        Event::Status(s) => Msg::Status(s),
        Event::Frame { world, verified } => Msg::Frame {
            world: Box::new(world.clone()),
            verified,
        },
        Event::Resync { from, to, file } => Msg::Gap {
            from,
            to,
            file: file.cloned(),
        },
        Event::Reconnected { gap, file } | Event::Gap { gap, file } => Msg::Gap {
            from: gap.from,
            to: gap.to,
            file: file.cloned(),
        },
        Event::Lost { .. } => Msg::Lost,
        Event::Fields { .. } | Event::Missing { .. } => return None,
    })
}

/// The lines `attach` prints while the view is up: straight to stdout when stdout is not
/// the terminal, else kept for after it is restored.
struct Printed {
    keep: bool,
    kept: Vec<String>,
    dropped: u64,
}

impl Printed {
    fn new(stdout_is_terminal: bool) -> Printed {
        Printed {
            keep: stdout_is_terminal,
            kept: Vec::new(),
            dropped: 0,
        }
    }

    fn line(&mut self, l: String) {
        if !self.keep {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{l}");
            let _ = o.flush();
        } else if self.kept.len() < KEPT_LINES {
            self.kept.push(l);
        } else {
            self.dropped += 1;
        }
    }

    /// Prints what was kept (the terminal is restored by now).
    fn flush_kept(&mut self) {
        let mut o = std::io::stdout().lock();
        for l in self.kept.drain(..) {
            let _ = writeln!(o, "{l}");
        }
        if self.dropped > 0 {
            let _ = writeln!(
                o,
                "({} more lines while the terminal view was up; not kept)",
                self.dropped
            );
            self.dropped = 0;
        }
        let _ = o.flush();
    }
}

/// Hands one event to the view, and a line also to stdout (or keeps it for later).
fn deliver(view: &mut View, out: &mut Printed, m: Msg) {
    if let Msg::Line(l) = &m {
        out.line(l.clone());
    }
    view.on(m);
}

/// Draws the session until it ends (and, on drift, until the user quits), taking its
/// events from `rx`; `ended` gets the session's end.
#[allow(clippy::too_many_arguments)]
fn show(
    screen: &mut Screen,
    mut view: View,
    rx: &Receiver<Msg>,
    frames: &FrameRequest,
    interrupt: &session::Interrupt,
    session: &mut Option<JoinHandle<Ended>>,
    ended: &mut Option<std::thread::Result<Ended>>,
    out: &mut Printed,
    test_panic: bool,
) -> std::io::Result<()> {
    let mut next_draw = Instant::now();
    loop {
        for m in rx.try_iter() {
            deliver(&mut view, out, m);
        }
        if session.as_ref().is_some_and(JoinHandle::is_finished) {
            let joined = session.take().map(JoinHandle::join);
            // The events sent before the end are all in the channel by now.
            for m in rx.try_iter() {
                deliver(&mut view, out, m);
            }
            let drift = match &joined {
                Some(Ok((o, _))) => {
                    view.ended(o);
                    matches!(o.stop, Stop::Drift(_))
                }
                _ => false,
            };
            *ended = joined;
            if !drift {
                return Ok(());
            }
            next_draw = Instant::now();
        }
        if Screen::panicked() {
            return Ok(());
        }
        let now = Instant::now();
        if now >= next_draw {
            screen.terminal.draw(|f| view.draw(f))?;
            frames.ask();
            next_draw = now + DRAW_EVERY;
            if test_panic {
                panic!("--tui-panic: a panic after the first picture, as asked");
            }
        }
        let wait = next_draw.saturating_duration_since(Instant::now());
        if event::poll(wait.min(Duration::from_millis(50)))? {
            match event::read()? {
                Input::Key(k) if k.kind == KeyEventKind::Press => {
                    let quit = matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                        || (k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL));
                    if quit {
                        if ended.is_some() {
                            return Ok(());
                        }
                        interrupt.interrupt();
                        view.stopping();
                        next_draw = Instant::now();
                    }
                }
                Input::Resize(..) => next_draw = Instant::now(),
                _ => {}
            }
        }
    }
}
