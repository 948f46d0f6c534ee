//! The terminal while the view has it: raw mode, the alternate screen, no cursor; drawn
//! on stderr (stdout keeps the lines `attach` prints). [`restore`] gives the terminal
//! back as it was, and runs however the view ends: when the [`Screen`] is dropped (the
//! user quit, or any error), and from the panic hook on a panic in any thread, before
//! the panic's message is printed. It runs once; later calls do nothing.

use super::logs;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;
use std::io::Stderr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// The terminal is in the view's state (raw, alternate screen).
static TAKEN: AtomicBool = AtomicBool::new(false);
/// A thread panicked while the view was up: the view stops drawing.
static PANICKED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// The terminal, taken for the view.
pub struct Screen {
    pub terminal: Terminal<CrosstermBackend<Stderr>>,
}

impl Screen {
    /// Takes the terminal: raw mode, the alternate screen, cursor hidden; log lines are
    /// held until [`restore`].
    ///
    /// # Errors
    /// The terminal refused one of these (what was done is undone first).
    pub fn enter() -> std::io::Result<Screen> {
        HOOK.call_once(|| {
            let earlier = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                PANICKED.store(true, Ordering::SeqCst);
                restore();
                earlier(info);
            }));
        });
        logs::hold();
        TAKEN.store(true, Ordering::SeqCst);
        let taken = enable_raw_mode()
            .and_then(|()| execute!(std::io::stderr(), EnterAlternateScreen, Hide))
            .and_then(|()| Terminal::new(CrosstermBackend::new(std::io::stderr())));
        match taken {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Whether a thread panicked since the view took the terminal.
    pub fn panicked() -> bool {
        PANICKED.load(Ordering::SeqCst)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Gives the terminal back: leaves the alternate screen, shows the cursor, ends raw mode,
/// then writes the held log lines. Does nothing when the view does not have it.
pub fn restore() {
    if !TAKEN.swap(false, Ordering::SeqCst) {
        return;
    }
    let _ = execute!(std::io::stderr(), LeaveAlternateScreen, Show);
    let _ = disable_raw_mode();
    logs::release();
}
