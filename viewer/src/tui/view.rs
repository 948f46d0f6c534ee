//! What the terminal view shows, and how it is laid out:
//!
//! ```text
//! ┌ 3D, from above · step 1234 ───────┐┌ attach 127.0.0.1:7878 · verifying ┐
//! │ the world (braille canvas)        ││ host step / verified / lag /       │
//! │                                   ││ steps/s / resyncs / gaps / ...     │
//! │                                   │└────────────────────────────────────┘
//! │                                   │┌ events (or: drift at step S) ──────┐
//! │                                   ││ the lines attach prints            │
//! └───────────────────────────────────┘└────────────────────────────────────┘
//! ┌ recent steps A..B · N per cell ────────────────────────────────────────┐
//! │ █████████████░░░████████▓                                              │
//! └────────────────────────────────────────────────────────────────────────┘
//!  q or Ctrl-C: stop · █ verified ░ not seen ▓ drift
//! ```
//!
//! [`View::on`] takes the session's events as [`Msg`]s; [`View::draw`] draws into any
//! frame (the terminal's, or a test backend's).

use super::world::{self, Mark};
use crate::live::session::{Outcome, Status, Stop};
use crate::strip::{Kind, Strip};
use ostm_protocol::session::DriftReport;
use ostm_protocol::sim::fields::density_decimal;
use ostm_protocol::{Dims, World};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;
use std::collections::VecDeque;
use std::path::PathBuf;

/// What the session tells the view (owned: it crosses from the session's thread).
#[derive(Debug, Clone)]
pub enum Msg {
    /// The viewer attached; its world is the host's snapshot.
    Attached {
        world: Box<World>,
        host_rate: u32,
    },
    Status(Status),
    /// The viewer's world now; `verified` when reached by verified steps.
    Frame {
        world: Box<World>,
        verified: bool,
    },
    /// Steps from `from` to `to` were not seen (a resync, or a reconnection); the
    /// recording continues in `file`.
    Gap {
        from: u64,
        to: u64,
        file: Option<PathBuf>,
    },
    /// The connection was lost; the reader is connecting again (a `Gap` follows).
    Lost,
    /// A line `attach` prints (the attach, a link, a resync, a gap, fields).
    Line(String),
}

/// Event lines kept for the events panel.
const LOG_LINES: usize = 200;
/// Below this size only a one-line summary is drawn.
pub const MIN_WIDTH: u16 = 40;
/// See [`MIN_WIDTH`].
pub const MIN_HEIGHT: u16 = 12;
/// The width the side panels get, at least.
const PANEL: u16 = 36;

/// The glyph and colour of a strip cell.
pub fn cell_look(kind: Option<Kind>) -> (&'static str, Color) {
    match kind {
        None => (" ", Color::Reset),
        Some(Kind::Verified) => ("█", Color::Green),
        Some(Kind::Gap) => ("░", Color::Yellow),
        Some(Kind::Drift) => ("▓", Color::Red),
    }
}

/// How the session stands, for the status panel's title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Verifying,
    /// The connection was lost; the reader is connecting again (`--reconnect`).
    Reconnecting,
    /// The user asked to stop; the session is finishing its files.
    Stopping,
    Drift,
}

/// Everything the view shows.
pub struct View {
    addr: String,
    phase: Phase,
    /// The setup, as the attach line says it.
    about: Option<String>,
    world: Option<Box<World>>,
    verified: bool,
    status: Option<Status>,
    recording: Option<PathBuf>,
    strip: Strip,
    log: VecDeque<String>,
    /// The report, and the body it names.
    drift: Option<(DriftReport, Option<Mark>)>,
}

impl View {
    /// The view of a session with the host at `addr`, recording to `recording` if given.
    pub fn new(addr: &str, recording: Option<PathBuf>) -> View {
        View {
            addr: addr.to_string(),
            phase: Phase::Connecting,
            about: None,
            world: None,
            verified: false,
            status: None,
            recording,
            strip: Strip::default(),
            log: VecDeque::new(),
            drift: None,
        }
    }

    /// Takes one event of the session.
    pub fn on(&mut self, msg: Msg) {
        match msg {
            Msg::Attached { world, host_rate } => {
                let s = world.setup();
                let rate = match host_rate {
                    0 => "as fast as it can".to_string(),
                    r => format!("{r}/s"),
                };
                self.about = Some(format!(
                    "{}D · seed {} · host rate {rate}",
                    s.dims as u8, s.seed
                ));
                self.strip.start(world.step);
                if self.phase == Phase::Connecting {
                    self.phase = Phase::Verifying;
                }
                self.world = Some(world);
                self.verified = false;
            }
            Msg::Status(s) => {
                self.strip.reached(s.step);
                self.status = Some(s);
            }
            Msg::Frame { world, verified } => {
                if verified {
                    self.strip.reached(world.step);
                }
                self.world = Some(world);
                self.verified = verified;
            }
            Msg::Lost => {
                if self.phase == Phase::Verifying {
                    self.phase = Phase::Reconnecting;
                }
            }
            Msg::Gap { from, to, file } => {
                if self.phase == Phase::Reconnecting {
                    self.phase = Phase::Verifying;
                }
                self.strip.gap(from, to);
                if file.is_some() {
                    self.recording = file;
                }
            }
            Msg::Line(l) => {
                if self.log.len() == LOG_LINES {
                    self.log.pop_front();
                }
                self.log.push_back(l);
            }
        }
    }

    /// The user asked to stop; the session is finishing.
    pub fn stopping(&mut self) {
        if self.phase != Phase::Drift {
            self.phase = Phase::Stopping;
        }
    }

    /// The session ended with `o`: the status takes its final numbers; on drift the view
    /// shows the report ([`View::drift`]).
    pub fn ended(&mut self, o: &Outcome) {
        let last = self.status;
        self.status = Some(Status {
            host_step: o.host_step,
            step: o.step,
            verified: o.verified,
            resyncs: o.resyncs,
            gaps: o.gaps.len() as u64,
            backlog: 0,
            rate: last.map_or(0.0, |s| s.rate),
            fields: last.and_then(|s| s.fields),
        });
        if let Stop::Drift(report) = &o.stop {
            self.drift(report);
        }
    }

    /// The session ended on drift: shows the report, and the viewer's world at the
    /// drifting step with the body the report names marked.
    pub fn drift(&mut self, report: &DriftReport) {
        self.phase = Phase::Drift;
        self.strip.drift(report.step);
        let bundle = report.bundle.as_ref().ok();
        if let Some(w) = bundle.and_then(|b| b.writer.clone()) {
            self.world = Some(Box::new(w));
            self.verified = false;
        }
        let mark = report.field.as_ref().and_then(|f| f.body).map(|body| Mark {
            body,
            host_pos: bundle
                .and_then(|b| b.reference.as_ref())
                .and_then(|w| w.bodies.get(body))
                .map(|b| b.pos),
        });
        self.drift = Some((report.clone(), mark));
    }

    /// Draws everything into `f`.
    pub fn draw(&self, f: &mut Frame<'_>) {
        let area = f.area();
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            self.draw_small(f, area);
            return;
        }
        let [main, strip, help] = Layout::vertical([
            Constraint::Min(6),
            Constraint::Length(3),
            Constraint::Length(1),
        ])
        .areas(area);
        // The box is square: braille dots are about square, two columns per row.
        let world_w = main
            .height
            .saturating_mul(2)
            .min(main.width.saturating_sub(PANEL).max(main.width / 2));
        let [world_area, side] =
            Layout::horizontal([Constraint::Length(world_w), Constraint::Min(0)]).areas(main);
        let status_lines = self.status_lines();
        let [status_area, lower] = Layout::vertical([
            Constraint::Length(status_lines.len() as u16 + 2),
            Constraint::Min(0),
        ])
        .areas(side);
        self.draw_world(f, world_area);
        f.render_widget(
            Paragraph::new(status_lines).block(self.status_block()),
            status_area,
        );
        match &self.drift {
            Some((report, _)) => self.draw_drift(f, lower, report),
            None => self.draw_log(f, lower),
        }
        self.draw_strip(f, strip);
        f.render_widget(Paragraph::new(self.help()), help);
    }

    fn draw_small(&self, f: &mut Frame<'_>, area: Rect) {
        let mut text = vec![Line::from(format!(
            "terminal too small ({}x{}); at least {MIN_WIDTH}x{MIN_HEIGHT}",
            area.width, area.height
        ))];
        if let Some(s) = &self.status {
            text.push(Line::from(format!(
                "host step {} · verified {} · lag {}",
                s.host_step,
                s.verified,
                s.lag()
            )));
        }
        if let Some((r, _)) = &self.drift {
            text.push(Line::styled(r.headline(), Color::Red));
        }
        f.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
    }

    fn draw_world(&self, f: &mut Frame<'_>, area: Rect) {
        let Some(w) = &self.world else {
            let block = Block::bordered().title(" world ");
            f.render_widget(
                Paragraph::new(format!("waiting for {} ...", self.addr)).block(block),
                area,
            );
            return;
        };
        let view = match w.dims() {
            Dims::Two => "2D, from the side",
            Dims::Three => "3D, from above",
        };
        let seen = match (&self.drift, self.verified) {
            (Some(_), _) => " the viewer's world ",
            (None, true) => " verified ",
            (None, false) => " the host's snapshot ",
        };
        let mut block = Block::bordered()
            .title(format!(
                " {view} · step {} · {} live ",
                w.step,
                w.alive_count()
            ))
            .title_bottom(Line::from(seen).right_aligned());
        if w.dims() == Dims::Three {
            let mut spans = vec![Span::raw(" height ")];
            for (c, name) in world::HEIGHTS.iter().zip(["low", "", "", "high"]) {
                spans.push(Span::styled("■", *c));
                if !name.is_empty() {
                    spans.push(Span::raw(format!(" {name} ")));
                }
            }
            block = block.title_bottom(Line::from(spans));
        }
        let mark = self.drift.as_ref().and_then(|(_, m)| *m);
        f.render_widget(world::canvas(w, mark, block, area), area);
    }

    fn status_block(&self) -> Block<'_> {
        let (phase, colour) = match self.phase {
            Phase::Connecting => ("connecting", Color::Yellow),
            Phase::Verifying => ("verifying", Color::Green),
            Phase::Reconnecting => ("reconnecting", Color::Yellow),
            Phase::Stopping => ("stopping", Color::Yellow),
            Phase::Drift => ("DRIFT", Color::Red),
        };
        Block::bordered().title(Line::from(vec![
            Span::raw(format!(" attach {} · ", self.addr)),
            Span::styled(phase, Style::new().fg(colour).add_modifier(Modifier::BOLD)),
            Span::raw(" "),
        ]))
    }

    /// The status panel: one `label  value` row each, the numbers of attach's status line.
    fn status_lines(&self) -> Vec<Line<'static>> {
        let row = |label: &str, value: String| {
            Line::from(vec![
                Span::styled(format!("{label:<11}"), Color::Gray),
                Span::styled(value, Style::new().add_modifier(Modifier::BOLD)),
            ])
        };
        let mut rows = Vec::new();
        if let Some(a) = &self.about {
            rows.push(Line::styled(a.clone(), Color::Gray));
        }
        let s = self.status;
        let num = |f: fn(&Status) -> u64| s.as_ref().map_or("-".into(), |s| f(s).to_string());
        rows.push(row("host step", num(|s| s.host_step)));
        rows.push(row("verified", num(|s| s.verified)));
        rows.push(row("lag", num(Status::lag)));
        rows.push(row(
            "steps/s",
            s.as_ref().map_or("-".into(), |s| format!("{:.1}", s.rate)),
        ));
        rows.push(row("resyncs", num(|s| s.resyncs)));
        rows.push(row("gaps", num(|s| s.gaps)));
        rows.push(row("backlog", num(|s| s.backlog)));
        if let Some((density, occupancy)) = s.and_then(|s| s.fields) {
            rows.push(row("density", format!("max {}", density_decimal(density))));
            rows.push(row("occupancy", format!("max {occupancy}")));
        }
        rows.push(row(
            "recording",
            self.recording
                .as_ref()
                .map_or("off".into(), |p| p.display().to_string()),
        ));
        rows
    }

    fn draw_log(&self, f: &mut Frame<'_>, area: Rect) {
        let block = Block::bordered().title(" events ");
        let inner = block.inner(area);
        // The newest lines that fit, wrapped at the panel's width.
        let width = usize::from(inner.width.max(1));
        let mut rows = 0usize;
        let mut shown = Vec::new();
        for l in self.log.iter().rev() {
            rows += l.chars().count().max(1).div_ceil(width);
            if rows > usize::from(inner.height) && !shown.is_empty() {
                break;
            }
            shown.push(Line::from(l.clone()));
        }
        shown.reverse();
        let scroll =
            u16::try_from(rows.saturating_sub(usize::from(inner.height))).unwrap_or(u16::MAX);
        f.render_widget(
            Paragraph::new(shown)
                .wrap(Wrap { trim: false })
                .scroll((scroll, 0))
                .block(block),
            area,
        );
    }

    fn draw_drift(&self, f: &mut Frame<'_>, area: Rect, report: &DriftReport) {
        let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        let block = Block::bordered()
            .border_style(Style::new().fg(Color::Red))
            .title(Span::styled(
                format!(" drift at step {} ", report.step),
                red,
            ));
        let mut text = vec![Line::styled(report.headline(), red)];
        text.push(Line::from(report.stage_line()));
        if let Some(n) = &report.note {
            text.push(Line::from(format!("note: {n}")));
        }
        text.push(Line::raw(""));
        match report.field.as_ref().and_then(|d| d.body) {
            Some(b) => {
                let host = match self
                    .drift
                    .as_ref()
                    .and_then(|(_, m)| m.and_then(|m| m.host_pos))
                {
                    Some(_) => "; × is where the host has it",
                    None => "",
                };
                text.push(Line::from(format!(
                    "body {b} is drawn red and ringed on the world{host}"
                )));
            }
            None => text.push(Line::from(
                "no body to mark: the difference is not a body's",
            )),
        }
        text.push(Line::from(
            "q: quit; attach then prints the report and writes the failure bundle",
        ));
        f.render_widget(
            Paragraph::new(text).wrap(Wrap { trim: false }).block(block),
            area,
        );
    }

    fn draw_strip(&self, f: &mut Frame<'_>, area: Rect) {
        let mut block = Block::bordered().title(" recent steps ");
        let inner = block.inner(area);
        let rate = self.status.map_or(0.0, |s| s.rate);
        let mut spans = Vec::new();
        if let Some(c) = self.strip.cells(usize::from(inner.width), rate) {
            block = Block::bordered().title(format!(
                " recent steps {}..{} · {} per cell ",
                c.first, c.last, c.per_cell
            ));
            for k in &c.kinds {
                let (glyph, colour) = cell_look(*k);
                spans.push(Span::styled(glyph, colour));
            }
        }
        f.render_widget(Paragraph::new(Line::from(spans)).block(block), area);
    }

    fn help(&self) -> Line<'static> {
        let keys = match self.phase {
            Phase::Drift => " q: quit · ",
            Phase::Stopping => " stopping: finishing the files · ",
            _ => " q or Ctrl-C: stop · ",
        };
        let mut spans = vec![Span::styled(keys, Color::Gray)];
        for (k, name) in [
            (Kind::Verified, " verified  "),
            (Kind::Gap, " not seen (resync, reconnection)  "),
            (Kind::Drift, " drift"),
        ] {
            let (glyph, colour) = cell_look(Some(k));
            spans.push(Span::styled(glyph, colour));
            spans.push(Span::styled(name, Color::Gray));
        }
        Line::from(spans)
    }
}
