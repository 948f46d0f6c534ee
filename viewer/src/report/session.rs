//! What a live session prints (`attach`, `check`, `watch`, and the terminal view, which
//! takes the same lines): one line per event, JSON with `--json`, the status rewritten in
//! place on a terminal; then the verdict, the files and the drift bundle.

use super::bundle::{add_bundle_json, written_line, Written};
use super::lines::{gap_text, lost_line, missing_line, reconnected_line};
use super::out;
use super::replay::link_info;
use crate::args::{AttachArgs, BundleArgs};
use crate::exit::Exit;
use crate::live::bundle::{default_bundle_path, write_bundle};
use crate::live::session::{Event, Gap, Outcome, Status, Stop};
use ostm_protocol::sim::fields::{density_decimal, Fields};
use ostm_protocol::World;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

fn status_line(s: &Status) -> String {
    let mut line = format!(
        "host step {} | verified {} | lag {} | {:.1} steps/s",
        s.host_step,
        s.verified,
        s.lag(),
        s.rate
    );
    if s.resyncs > 0 {
        line.push_str(&format!(" | resyncs {}", s.resyncs));
    }
    if s.gaps > 0 {
        line.push_str(&format!(" | gaps {}", s.gaps));
    }
    if s.backlog > 0 {
        line.push_str(&format!(" | backlog {}", s.backlog));
    }
    if let Some((density, occupancy)) = s.fields {
        line.push_str(&format!(
            " | density max {} | occupancy max {occupancy}",
            density_decimal(density)
        ));
    }
    line
}

fn status_json(s: &Status) -> serde_json::Value {
    let mut obj = serde_json::json!({"event": "status", "host_step": s.host_step, "step": s.step, "verified": s.verified,
        "lag": s.lag(), "rate": (s.rate * 10.0).round() / 10.0, "resyncs": s.resyncs, "gaps": s.gaps, "backlog": s.backlog});
    if let Some((density, occupancy)) = s.fields {
        obj["density_max"] = density.into();
        obj["occupancy_max"] = occupancy.into();
    }
    obj
}

/// What a person reads of resyncs (docs/protocol.md, "The tools on each end"): a
/// `resync:` line for the first one, then at most one line per second that counts the
/// resyncs since the line before, and a summary at the end. `--json` prints every resync.
#[derive(Default)]
pub struct ResyncLines {
    /// Resyncs so far.
    pub count: u64,
    /// Steps jumped over by all of them (never sent, so never verified).
    pub skipped: u64,
    /// Resyncs since the last line printed.
    unprinted: u64,
    last_line: Option<Instant>,
}

impl ResyncLines {
    /// How often a `resync:` line may be printed.
    pub const EVERY: Duration = Duration::from_secs(1);

    /// Counts one resync seen at `now`; returns the line to print now, if any.
    pub fn note(
        &mut self,
        now: Instant,
        from: u64,
        to: u64,
        file: Option<&Path>,
    ) -> Option<String> {
        self.count += 1;
        self.skipped += to.saturating_sub(from);
        self.unprinted += 1;
        if self
            .last_line
            .is_some_and(|t| now.saturating_duration_since(t) < Self::EVERY)
        {
            return None;
        }
        self.last_line = Some(now);
        let more = match self.unprinted - 1 {
            0 => String::new(),
            n => format!(
                " ({n} more since the last resync line, {} in all)",
                self.count
            ),
        };
        self.unprinted = 0;
        let cont = file
            .map(|f| format!("; recording continues in {}", f.display()))
            .unwrap_or_default();
        Some(format!(
            "resync: fell behind at step {from}, continuing from the host's snapshot at step {to}{cont}{more}"
        ))
    }

    /// The closing summary, when there was any resync.
    pub fn summary(&self) -> Option<String> {
        (self.count > 0).then(|| {
            format!(
                "resyncs: {} ({} steps jumped over, never verified)",
                self.count, self.skipped
            )
        })
    }
}

/// The fields report at one step: `ostm-viewer fields`' own text or JSON (one line),
/// naming the host's address where that command names its file.
fn fields_report(json: bool, addr: &str, world: &World, f: &Fields) -> String {
    if json {
        let mut obj = super::fields::to_json(addr, world, f);
        if let Some(o) = obj.as_object_mut() {
            o.remove("file");
            o.insert("addr".into(), addr.into());
            o.insert("event".into(), "fields".into());
        }
        format!("{obj}\n")
    } else {
        super::fields::to_text(addr, world, f)
    }
}

/// What `attach` prints while the session runs: one line per event, JSON with `--json`,
/// the status rewritten in place on a terminal.
pub struct Lines {
    addr: String,
    json: bool,
    terminal: bool,
    last_plain: Instant,
    resyncs: ResyncLines,
    /// A view that draws the screen ([`Lines::for_view`]): it takes every line instead
    /// of stdout, and shows the status itself.
    view: Option<ViewSink>,
}

/// Where a view takes the lines.
type ViewSink = Box<dyn FnMut(String) + Send>;

impl Lines {
    pub fn new(args: &AttachArgs) -> Lines {
        Lines {
            addr: args.addr.clone(),
            json: args.json,
            terminal: !args.json && std::io::stderr().is_terminal(),
            last_plain: Instant::now(),
            resyncs: ResyncLines::default(),
            view: None,
        }
    }

    /// The lines for a view that has the screen (`--tui`): each line goes to `to` (text,
    /// never JSON), and no status line is made (the view draws the status).
    pub fn for_view(args: &AttachArgs, to: impl FnMut(String) + Send + 'static) -> Lines {
        Lines {
            json: false,
            terminal: false,
            view: Some(Box::new(to)),
            ..Lines::new(args)
        }
    }

    /// Prints one line (or hands it to the view).
    fn put(&mut self, line: &str) {
        match &mut self.view {
            Some(to) => to(line.to_string()),
            None => out(line),
        }
    }

    /// Prints text of whole lines as it is (or hands each line to the view).
    fn put_text(&mut self, text: &str) {
        match &mut self.view {
            Some(to) => text.lines().for_each(|l| to(l.to_string())),
            None => {
                let mut o = std::io::stdout().lock();
                let _ = write!(o, "{text}");
                let _ = o.flush();
            }
        }
    }

    /// Prints where the metrics are served (`--metrics`), before the session's lines.
    pub fn metrics(&mut self, metrics: &crate::metrics::Metrics) {
        let Some(addr) = metrics.addr() else {
            return;
        };
        if self.json {
            self.put(
                &serde_json::json!({"event": "metrics", "addr": addr.to_string()}).to_string(),
            );
        } else {
            self.put(&format!("ostm-viewer metrics on http://{addr}/metrics"));
        }
    }

    /// Prints what `ev` tells a person or a script.
    pub fn on(&mut self, ev: &Event<'_>) {
        let (json, terminal) = (self.json, self.terminal);
        match *ev {
            Event::Attached { welcome, world } => {
                let s = world.setup();
                let link = world.link().map(|l| link_info(&l));
                if json {
                    self.put(&serde_json::json!({"event": "attached", "addr": self.addr, "step": world.step, "dims": s.dims as u8,
                        "slots": world.bodies.len(), "alive": world.alive_count(), "seed": s.seed, "host_rate": welcome.rate,
                        "link": link}).to_string());
                } else {
                    let rate = if welcome.rate == 0 {
                        "as fast as it can".to_string()
                    } else {
                        format!("{}/s", welcome.rate)
                    };
                    self.put(&format!("attached to {} at step {} ({}D, seed {}, {} live bodies in {} slots; host rate {rate})", self.addr, world.step, s.dims as u8, s.seed, world.alive_count(), world.bodies.len()));
                    if let Some(l) = link {
                        self.put(&format!("link: {}", l.describe()));
                    }
                }
            }
            Event::Fields { world, fields } => {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                let text = fields_report(json, &self.addr, world, fields);
                self.put_text(&text);
            }
            Event::Resync { from, to, file } => {
                if json {
                    self.put(&serde_json::json!({"event": "resync", "from": from, "to": to, "file": file.map(|f| f.display().to_string())}).to_string());
                } else {
                    // Cleared even with no line: the session's log line follows.
                    if terminal {
                        eprint!("\r\x1b[2K");
                    }
                    if let Some(line) =
                        self.resyncs
                            .note(Instant::now(), from, to, file.map(|f| f.as_path()))
                    {
                        self.put(&line);
                    }
                }
            }
            Event::Lost { step, why } => {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                if json {
                    self.put(
                        &serde_json::json!({"event": "lost", "step": step, "why": why}).to_string(),
                    );
                } else {
                    self.put(&lost_line(step, why));
                }
            }
            Event::Missing { step, why } => {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                if json {
                    self.put(
                        &serde_json::json!({"event": "missing", "step": step, "why": why})
                            .to_string(),
                    );
                } else {
                    self.put(&missing_line(why));
                }
            }
            Event::Reconnected { gap, file } | Event::Gap { gap, file } => {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                if json {
                    let mut obj = gap_json(gap);
                    obj["event"] = "gap".into();
                    obj["file"] = file.map(|f| f.display().to_string()).into();
                    self.put(&obj.to_string());
                } else if matches!(ev, Event::Reconnected { .. }) {
                    self.put(&reconnected_line(gap, file.map(|f| f.as_path())));
                } else {
                    let cont = file
                        .map(|f| format!("; recording continues in {}", f.display()))
                        .unwrap_or_default();
                    self.put(&format!("gap: {}{cont}", gap_text(gap)));
                }
            }
            Event::Status(_) if self.view.is_some() => {}
            Event::Status(s) => {
                if terminal {
                    eprint!("\r\x1b[2K{}", status_line(&s));
                } else if self.last_plain.elapsed() >= Duration::from_secs(1) {
                    self.last_plain = Instant::now();
                    if json {
                        self.put(&status_json(&s).to_string());
                    } else {
                        self.put(&status_line(&s));
                    }
                }
            }
            Event::Frame { .. } => {}
        }
    }
}

/// Prints the session's end (files, the verdict, the drift bundle) and gives the exit code.
pub fn finish(args: &AttachArgs, outcome: &Outcome, lines: Lines) -> Exit {
    if lines.terminal {
        eprintln!();
    }
    let (exit, plain, mut obj) = verdict(outcome);
    let bundle = drift_bundle(outcome, &args.bundle, args.recording.record.as_deref());
    obj["event"] = "end".into();
    obj["recorded"] = match recorded_span(outcome) {
        Some((from, to)) => serde_json::json!({"from": from, "to": to}),
        None => serde_json::Value::Null,
    };
    add_bundle_json(&mut obj, bundle.as_ref());
    if lines.json {
        out(&obj.to_string());
    } else {
        for (step, why) in &outcome.fields_missed {
            out(&format!("note: no fields at step {step}: {why}"));
        }
        if let Some(line) = lines.resyncs.summary() {
            out(&line);
        }
        for w in &outcome.files {
            out(&format!(
                "recorded {} ({} steps from step {})",
                w.path.display(),
                w.steps,
                w.start_step
            ));
        }
        for u in &outcome.unfinished {
            out(&format!(
                "left {} unfinished ({} steps from step {}): ostm-viewer recover {}",
                u.part.display(),
                u.steps,
                u.start_step,
                u.part.display()
            ));
        }
        if let Some(line) = recorded_short(outcome) {
            out(&line);
        }
        if exit == Exit::Failure {
            eprintln!("error: {plain}");
        } else {
            out(&plain);
        }
        match &bundle {
            Some(w @ Ok(_)) => out(&written_line(w)),
            Some(w @ Err(_)) => eprintln!("{}", written_line(w)),
            None => {}
        }
    }
    super::log::end(&args.addr, &obj);
    exit
}

/// The steps the recording's files hold, finished or left for `recover`: from the first
/// file's start to the last step any of them reaches; `None` without a recording.
pub fn recorded_span(o: &Outcome) -> Option<(u64, u64)> {
    let spans = o
        .files
        .iter()
        .map(|w| (w.start_step, w.steps))
        .chain(o.unfinished.iter().map(|u| (u.start_step, u.steps)));
    spans
        .map(|(start, steps)| (start, start.saturating_add(u64::from(steps))))
        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
}

/// When the recording stopped before the viewer's world did (a write that failed), the
/// line that says where: the verdict's range is then not what the files hold.
fn recorded_short(o: &Outcome) -> Option<String> {
    let (from, to) = recorded_span(o)?;
    (to < o.step).then(|| {
        format!(
            "recorded steps {from} to {to} only: the recording stopped there, and the steps from {to} to {} are in no file",
            o.step
        )
    })
}

/// Writes the drift bundle when the session stopped on drift, unless `--no-bundle`: to
/// `--bundle`, else [`default_bundle_path`] (beside `record` when recording) or, when that
/// name is taken, the next free one; the result names the file written.
pub fn drift_bundle(o: &Outcome, opts: &BundleArgs, record: Option<&Path>) -> Option<Written> {
    let Stop::Drift(report) = &o.stop else {
        return None;
    };
    let to = opts.target(|| default_bundle_path(record, report.step))?;
    let written = write_bundle(report, &to);
    match &written {
        Ok(p) => tracing::info!(path = %p.display(), "drift bundle written"),
        Err(e) => tracing::warn!("no drift bundle written: {e}"),
    }
    Some(written)
}

/// The verdict of a session: its exit code, one human line (a drift report is several),
/// and the same as a JSON object.
pub fn verdict(o: &Outcome) -> (Exit, String, serde_json::Value) {
    let tally = o.tally();
    let span = tally.to_string();
    let (mut exit, stop, mut line, reason) = match &o.stop {
        Stop::Asked => (Exit::Ok, "asked", format!("ok: {span}"), None),
        Stop::Interrupted => (Exit::Ok, "interrupted", format!("stopped: {span}"), None),
        // The viewer's world never reached the host's last step: exit 1, not ok
        // (docs/protocol.md, "The verdict's count").
        Stop::HostEnded(e) if e.reason.is_clean() && tally.open => (
            Exit::Different,
            "host-ended",
            format!(
                "incomplete: the host ended the stream ({}: {}); {span}",
                e.reason.name(),
                e.text
            ),
            Some(e.reason.name()),
        ),
        Stop::HostEnded(e) if e.reason.is_clean() => (
            Exit::Ok,
            "host-ended",
            format!(
                "ok: the host ended the stream ({}: {}); {span}",
                e.reason.name(),
                e.text
            ),
            Some(e.reason.name()),
        ),
        Stop::HostEnded(e) => (
            Exit::Failure,
            "host-ended",
            format!(
                "the host ended the stream ({}: {}); {span}",
                e.reason.name(),
                e.text
            ),
            Some(e.reason.name()),
        ),
        Stop::Drift(r) => (Exit::Different, "drift", r.to_string(), None),
        Stop::Failed(m) => (Exit::Failure, "failed", format!("{m}; {span}"), None),
    };
    if let Some(e) = &o.record_error {
        exit = Exit::Failure;
        line = format!("{e}; {line}");
    }
    let verdict = match exit {
        Exit::Ok => "ok",
        Exit::Different if matches!(o.stop, Stop::Drift(_)) => "drift",
        Exit::Different => "incomplete",
        Exit::Failure => "error",
    };
    let obj = serde_json::json!({
        "verdict": verdict,
        "stop": stop,
        "reason": reason,
        "attached_at": o.attached_at,
        "step": o.step,
        "verified": o.verified,
        "end_step": tally.to,
        "total": tally.total,
        "not_verified": tally.not_verified(),
        "not_verified_in_gaps": tally.in_gaps,
        "not_verified_in_resyncs": tally.resynced,
        "gap_count": tally.gaps + tally.unknown_gaps,
        "open_gap": tally.open,
        "resyncs": o.resyncs,
        "gaps": o.gaps.iter().map(gap_json).collect::<Vec<_>>(),
        "resynced": o.resynced.iter().map(|g| serde_json::json!({"from": g.from, "to": g.to, "steps": g.to.saturating_sub(g.from)})).collect::<Vec<_>>(),
        "backlog_peak": o.backlog_peak.records,
        "backlog_peak_on_disk": o.backlog_peak.on_disk,
        "files": o.files.iter().map(|w| serde_json::json!({"path": w.path.display().to_string(), "steps": w.steps, "start_step": w.start_step})).collect::<Vec<_>>(),
        "unfinished": o.unfinished.iter().map(|u| serde_json::json!({"part": u.part.display().to_string(), "steps": u.steps, "start_step": u.start_step})).collect::<Vec<_>>(),
        "drift": match &o.stop { Stop::Drift(r) => r.to_json(), _ => serde_json::Value::Null },
        "host_step": o.host_step,
        "lag": o.host_step.saturating_sub(o.step),
        "fields_missed": o.fields_missed.iter().map(|(step, why)| serde_json::json!({"step": step, "why": why})).collect::<Vec<_>>(),
        "message": line,
    });
    (exit, line, obj)
}

/// A gap as JSON (docs/protocol.md, "Reconnecting"): `from`, `to`, `steps` (null when not
/// known: a host that came back behind the viewer or with another world), `why`; with
/// `behind` (the steps verified again) or `world` and `was` (the setup lines) when so.
pub fn gap_json(g: &Gap) -> serde_json::Value {
    let mut obj = serde_json::json!({"from": g.from, "to": g.to, "steps": g.steps(), "why": g.why});
    if g.behind {
        obj["behind"] = g.from.wrapping_sub(g.to).into();
    }
    if let Some((world, was)) = &g.world {
        obj["world"] = world.as_str().into();
        obj["was"] = was.as_str().into();
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::{gap_json, reconnected_line, ResyncLines};
    use crate::live::session::Gap;
    use std::path::Path;
    use std::time::{Duration, Instant};

    /// How each kind of reconnection reads (docs/protocol.md, "Reconnecting").
    #[test]
    fn a_reconnection_says_how_the_host_came_back() {
        let gap = |from, to, behind, world: Option<(&str, &str)>| Gap {
            from,
            to,
            why: "WHY".into(),
            behind,
            world: world.map(|(a, b)| (a.to_string(), b.to_string())),
        };
        let f = Some(Path::new("r.1.ostm"));
        let on = gap(2583, 3000, false, None);
        assert_eq!(
            reconnected_line(&on, f),
            "gap: WHY; reconnected at step 3000 (steps 2583..3000 not seen); recording continues in r.1.ostm"
        );
        assert_eq!(gap_json(&on)["steps"], 417);
        let back = gap(2583, 451, true, None);
        assert_eq!(
            reconnected_line(&back, None),
            "gap: WHY; reconnected at step 451, behind the viewer's step 2583: the host was restarted (what its old stream held after step 2583 was not seen; steps 451..2583 are verified again)"
        );
        let j = gap_json(&back);
        assert!(j["steps"].is_null(), "{j}");
        assert_eq!(j["behind"], 2132);
        let other = gap(2583, 7, true, Some(("setup NEW", "setup OLD")));
        assert_eq!(
            reconnected_line(&other, f),
            "gap: WHY; reconnected at step 7 to another world (setup NEW; it was setup OLD): the host was restarted with it, and what the old stream held after step 2583 was not seen; recording continues in r.1.ostm, the first file of that world (verify it apart from the files before)"
        );
        let j = gap_json(&other);
        assert_eq!(
            (j["world"].as_str(), j["was"].as_str()),
            (Some("setup NEW"), Some("setup OLD"))
        );
        assert!(j["steps"].is_null(), "{j}");
    }

    #[test]
    fn resync_lines_are_at_most_one_a_second_and_count_every_resync() {
        let t0 = Instant::now();
        let mut r = ResyncLines::default();
        let mut printed = Vec::new();
        // 1 000 resyncs over 2.5 s: one line at 0, 1 and 2 s.
        for i in 0..1000u64 {
            let now = t0 + Duration::from_micros(i * 2500);
            if let Some(l) = r.note(now, i * 10, i * 10 + 4, Some(Path::new("r.1.ostm"))) {
                printed.push(l);
            }
        }
        assert_eq!(printed.len(), 3, "{printed:#?}");
        assert!(printed[0].starts_with("resync: fell behind at step 0, continuing from the host's snapshot at step 4; recording continues in r.1.ostm"));
        assert!(printed[0].ends_with("r.1.ostm"), "{}", printed[0]);
        assert!(
            printed[1].ends_with("(399 more since the last resync line, 401 in all)"),
            "{}",
            printed[1]
        );
        assert_eq!(r.count, 1000);
        assert_eq!(
            r.summary().as_deref(),
            Some("resyncs: 1000 (4000 steps jumped over, never verified)")
        );
        assert_eq!(ResyncLines::default().summary(), None);
    }
}
