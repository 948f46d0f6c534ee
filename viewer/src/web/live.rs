//! The page over a live session: the [`Hub`] takes the session's events on the verifier's
//! thread (a few stores, a world clone per frame asked for) and the tabs read it on the
//! server's runtime. The verifier never waits for a tab: a tab asks for a frame through
//! the session's [`FrameRequest`], and the newest world replaces any the tabs have not
//! drawn yet.

use super::frame::{self, Check, Look, Shown};
use super::request::{DriftWorld, Request};
use super::yield_to_proof::Yield;
use super::{pace, Requests, Tab, STATUS_EVERY};
use crate::live::session::{Event, FrameRequest, Outcome, Status, Stop};
use crate::render::ghost::GhostCache;
use crate::strip::{Strip, PAGE_STEPS};
use ostm_protocol::session::DriftReport;
use ostm_protocol::World;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// A world to draw.
pub struct Shot {
    world: World,
    check: Check,
}

/// After a drift: the report and the worlds the page can flip between.
pub struct Drift {
    report: serde_json::Value,
    marked: Option<u8>,
    step: u64,
    last_verified: World,
    viewer: Option<World>,
    host: Option<World>,
}

impl Drift {
    fn from_report(r: &DriftReport) -> Option<Drift> {
        let bundle = r.bundle.as_ref().ok()?;
        Some(Drift {
            report: r.to_json(),
            marked: r
                .field
                .as_ref()
                .and_then(|f| f.body)
                .and_then(|b| u8::try_from(b).ok()),
            step: r.step,
            last_verified: bundle.replay.start_world(),
            viewer: bundle.writer.clone(),
            host: bundle.reference.clone(),
        })
    }

    fn world(&self, w: DriftWorld) -> Option<&World> {
        match w {
            DriftWorld::LastVerified => Some(&self.last_verified),
            DriftWorld::Viewer => self.viewer.as_ref(),
            DriftWorld::Host => self.host.as_ref(),
        }
    }

    fn message(&self) -> String {
        let worlds: Vec<&str> = [
            DriftWorld::LastVerified,
            DriftWorld::Viewer,
            DriftWorld::Host,
        ]
        .into_iter()
        .filter(|w| self.world(*w).is_some())
        .map(DriftWorld::name)
        .collect();
        json!({"type": "drift", "report": self.report, "worlds": worlds, "marked": self.marked})
            .to_string()
    }
}

/// Where the session is.
pub enum Phase {
    Running,
    /// The session has ended: the `end` message, and the drift when it stopped on one.
    Ended {
        end: String,
        drift: Option<Arc<Drift>>,
    },
}

/// What the tabs read besides frames.
#[derive(Default)]
struct Board {
    /// `(dims, slots, step)` once attached.
    attached: Option<(u8, usize, u64)>,
    status: Option<Status>,
    strip: Strip,
    recording: Option<PathBuf>,
    /// Why the ghost is not drawn, when the cache does not fit the world.
    ghost_note: Option<String>,
    /// Why the connection was lost, while the reader connects again.
    lost: Option<String>,
}

/// The live session as the tabs see it.
pub struct Hub {
    /// The host's address (the pictures' title).
    name: String,
    /// Given to the session as `Options::frames`.
    pub frames: FrameRequest,
    ghost: Option<Arc<GhostCache>>,
    latest: watch::Sender<Option<Arc<Shot>>>,
    phase: watch::Sender<Arc<Phase>>,
    board: Mutex<Board>,
    /// How far apart frames go while the verifier waits for a CPU.
    yielding: Yield,
}

impl Hub {
    /// A hub for the session with the host at `name`, recording to `recording`.
    pub fn new(name: &str, recording: Option<&Path>, ghost: Option<GhostCache>) -> Hub {
        Hub {
            name: name.to_string(),
            frames: FrameRequest::default(),
            ghost: ghost.map(Arc::new),
            latest: watch::Sender::new(None),
            phase: watch::Sender::new(Arc::new(Phase::Running)),
            board: Mutex::new(Board {
                recording: recording.map(Path::to_path_buf),
                ..Board::default()
            }),
            yielding: Yield::default(),
        }
    }

    fn board(&self) -> MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn show(&self, world: &World, check: Check) {
        self.latest.send_replace(Some(Arc::new(Shot {
            world: world.clone(),
            check,
        })));
    }

    /// Takes one event of the session (on the verifier's thread).
    pub fn on(&self, ev: &Event<'_>) {
        self.yielding.note_verifier_thread();
        match *ev {
            Event::Attached { world, .. } => {
                {
                    let mut b = self.board();
                    b.attached = Some((world.dims() as u8, world.bodies.len(), world.step));
                    b.strip.start(world.step);
                    if let Some(g) = &self.ghost {
                        if let Err(e) = g.fits(world.dims()) {
                            tracing::warn!("{e}: the page draws no ghost");
                            b.ghost_note = Some(e);
                        }
                    }
                }
                self.show(world, Check::Snapshot);
            }
            Event::Frame { world, verified } => {
                let check = if verified {
                    Check::Verified
                } else {
                    Check::Snapshot
                };
                self.show(world, check);
            }
            Event::Status(s) => {
                self.yielding.note_backlog(s.backlog);
                let mut b = self.board();
                b.strip.reached(s.step);
                b.status = Some(s);
            }
            Event::Resync { from, to, file } => {
                let mut b = self.board();
                b.strip.gap(from, to);
                if let Some(f) = file {
                    b.recording = Some(f.clone());
                }
            }
            Event::Lost { why, .. } => self.board().lost = Some(why.to_string()),
            Event::Reconnected { gap, file } | Event::Gap { gap, file } => {
                let mut b = self.board();
                b.lost = None;
                b.strip.gap(gap.from, gap.to);
                if let Some(f) = file {
                    b.recording = Some(f.clone());
                }
            }
            Event::Fields { .. } | Event::Missing { .. } => {}
        }
    }

    /// The session has ended with `outcome` (`verdict`: attach's verdict object).
    pub fn ended(&self, outcome: &Outcome, verdict: &serde_json::Value) {
        let drift = match &outcome.stop {
            Stop::Drift(r) => Drift::from_report(r).map(Arc::new),
            _ => None,
        };
        {
            let mut b = self.board();
            let end = if drift.is_some() {
                outcome.step.saturating_sub(1)
            } else {
                outcome.step
            };
            b.strip.reached(end);
            if let Some(d) = &drift {
                b.strip.drift(d.step);
            }
            // The last status line's counts, as the session ended.
            if let Some(s) = b.status.as_mut() {
                s.host_step = outcome.host_step;
                s.step = outcome.step;
                s.verified = outcome.verified;
                s.resyncs = outcome.resyncs;
                s.gaps = outcome.gaps.len() as u64;
                s.backlog = 0;
            }
        }
        let end = json!({"type": "end", "verdict": verdict["verdict"], "stop": verdict["stop"],
            "message": verdict["message"], "step": outcome.step, "verified": outcome.verified})
        .to_string();
        self.phase
            .send_replace(Arc::new(Phase::Ended { end, drift }));
    }

    fn hello(&self) -> String {
        let b = self.board();
        let (dims, slots, step) = match b.attached {
            Some((d, s, st)) => (Some(d), Some(s), Some(st)),
            None => (None, None, None),
        };
        let ghost = self
            .ghost
            .as_ref()
            .filter(|_| b.ghost_note.is_none())
            .map(|g| g.name.clone());
        json!({"type": "hello", "mode": "live", "name": self.name, "dims": dims, "slots": slots,
            "attached_at": step, "ghost": ghost, "ghost_note": b.ghost_note, "strip_steps": PAGE_STEPS})
        .to_string()
    }

    fn status(&self) -> String {
        let b = self.board();
        let recording = b
            .recording
            .as_ref()
            .map(|p| json!({"path": p.display().to_string(), "bytes": recording_bytes(p)}));
        match &b.status {
            Some(s) => json!({"type": "status", "host_step": s.host_step, "step": s.step,
                "verified": s.verified, "lag": s.lag(), "rate": (s.rate * 10.0).round() / 10.0,
                "resyncs": s.resyncs, "gaps": s.gaps, "backlog": s.backlog,
                "recording": recording, "strip": b.strip.page_json(s.step), "lost": b.lost,
                "frame_gap_ms": self.yielding.gap().as_millis() as u64}),
            None => {
                let step = b.attached.map(|a| a.2);
                json!({"type": "status", "host_step": step, "step": step, "verified": 0,
                "lag": 0, "rate": 0.0, "resyncs": 0, "gaps": 0, "backlog": 0,
                "recording": recording, "strip": step.map(|s| b.strip.page_json(s)), "lost": b.lost,
                "frame_gap_ms": self.yielding.gap().as_millis() as u64})
            }
        }
        .to_string()
    }

    fn ghost_for(&self, look: Look) -> Option<&GhostCache> {
        self.ghost.as_deref().filter(|_| look.ghost)
    }

    fn has_ghost(&self) -> bool {
        self.ghost.is_some() && self.board().ghost_note.is_none()
    }
}

/// The size of the recording file being written (`FILE.part` while it runs), or of the
/// finished file.
fn recording_bytes(path: &Path) -> Option<u64> {
    let part = ostm_protocol::format::recording::journal_path(path);
    std::fs::metadata(&part)
        .or_else(|_| std::fs::metadata(path))
        .ok()
        .map(|m| m.len())
}

/// Draws `world` for one tab, off the runtime's worker threads.
async fn draw(
    hub: &Arc<Hub>,
    world: Arc<Shot>,
    which: &'static str,
    marked: Option<u8>,
    look: Look,
) -> Option<String> {
    let h = hub.clone();
    tokio::task::spawn_blocking(move || {
        let shown = Shown {
            name: &h.name,
            world: &world.world,
            check: world.check,
            which,
            marked,
        };
        frame::message(&shown, look, h.ghost_for(look))
    })
    .await
    .ok()
}

/// What one tab is looking at.
struct View {
    look: Look,
    drift_world: DriftWorld,
    /// Set by `ready`: the tab can draw the next frame.
    wants: bool,
    /// `ready` came and the verifier has not been asked yet: it is, once the frame gap
    /// has passed since the last frame.
    ask: bool,
}

/// Serves one tab until it goes.
pub async fn tab(hub: Arc<Hub>, tab: &Tab, requests: &mut Requests) {
    let mut latest = hub.latest.subscribe();
    let mut phase = hub.phase.subscribe();
    let mut status = tokio::time::interval(STATUS_EVERY);
    let mut last_frame = tokio::time::Instant::now() - super::MIN_FRAME_GAP;
    let mut view = View {
        look: Look {
            ghost: hub.has_ghost(),
            ..Look::default()
        },
        drift_world: DriftWorld::LastVerified,
        wants: true,
        ask: false,
    };
    if !tab.send(hub.hello()).await {
        return;
    }
    // The world there is now, at once; the phase as it is.
    latest.mark_changed();
    phase.mark_changed();
    let mut ended: Option<Arc<Phase>> = None;
    loop {
        tokio::select! {
            r = requests.next() => match r {
                None => return,
                Some(Err(e)) => tab.error(&e),
                Some(Ok(req)) => {
                    let redraw = match handle(&hub, &mut view, ended.as_deref(), req) {
                        Ok(redraw) => redraw,
                        Err(e) => {
                            tab.error(&e);
                            false
                        }
                    };
                    if redraw && !send_current(&hub, tab, &view, &latest, ended.as_deref(), &mut last_frame).await {
                        return;
                    }
                }
            },
            () = tokio::time::sleep_until(last_frame + hub.yielding.gap()), if view.ask => {
                view.ask = false;
                hub.frames.ask();
            },
            changed = latest.changed(), if view.wants && !view.ask && ended.is_none() => {
                if changed.is_err() {
                    return;
                }
                if latest.borrow().is_none() {
                    // Not attached yet: the attach snapshot will be the first frame.
                    continue;
                }
                view.wants = false;
                tracing::debug!("a new world for a tab that asked");
                if !send_current(&hub, tab, &view, &latest, None, &mut last_frame).await {
                    return;
                }
                latest.borrow_and_update();
            },
            changed = phase.changed(), if ended.is_none() => {
                if changed.is_err() {
                    return;
                }
                let p = phase.borrow_and_update().clone();
                if let Phase::Ended { end, drift } = &*p {
                    if let Some(d) = drift {
                        if !tab.send(d.message()).await {
                            return;
                        }
                    }
                    if !tab.send(end.clone()).await {
                        return;
                    }
                    ended = Some(p.clone());
                    if !send_current(&hub, tab, &view, &latest, Some(&p), &mut last_frame).await {
                        return;
                    }
                }
            },
            _ = status.tick() => {
                hub.yielding.sample();
                tab.offer(hub.status());
            }
        }
    }
}

/// Applies a request; true when the picture must be drawn again.
fn handle(hub: &Hub, view: &mut View, ended: Option<&Phase>, req: Request) -> Result<bool, String> {
    let drift = match ended {
        Some(Phase::Ended { drift, .. }) => drift.as_deref(),
        _ => None,
    };
    match req {
        Request::Ready {} => {
            if ended.is_none() {
                tracing::debug!("a tab is ready for a frame");
                view.wants = true;
                view.ask = true;
            }
            Ok(false)
        }
        Request::Show { step } => Err(format!(
            "show (step {step}) is for a replay: a live view shows the latest verified world"
        )),
        Request::Overlay { overlay } => {
            view.look.overlay = overlay.into();
            Ok(true)
        }
        Request::Ghost { on } => {
            if on && !hub.has_ghost() {
                return Err(match &hub.board().ghost_note {
                    Some(n) => format!("no ghost to draw: {n}"),
                    None => "no ghost to draw: the viewer was started without --ghost".into(),
                });
            }
            view.look.ghost = on;
            Ok(true)
        }
        Request::World { world } => {
            let Some(d) = drift else {
                return Err(format!(
                    "world {} is for a drift report, and there is none",
                    world.name()
                ));
            };
            if d.world(world).is_none() {
                return Err(format!(
                    "world host: the host sent no world at step {}",
                    d.step
                ));
            }
            view.drift_world = world;
            Ok(true)
        }
    }
}

/// Draws what the tab should see now and sends it: the latest world while the session
/// runs, the chosen drift world after a drift, the last world after any other end.
async fn send_current(
    hub: &Arc<Hub>,
    tab: &Tab,
    view: &View,
    latest: &watch::Receiver<Option<Arc<Shot>>>,
    ended: Option<&Phase>,
    last_frame: &mut tokio::time::Instant,
) -> bool {
    let drift = match ended {
        Some(Phase::Ended { drift: Some(d), .. }) => Some(d),
        _ => None,
    };
    let (shot, which, marked) = match drift {
        Some(d) => {
            let w = d.world(view.drift_world).unwrap_or(&d.last_verified);
            let check = match view.drift_world {
                DriftWorld::LastVerified => Check::Verified,
                _ => Check::Drift,
            };
            let shot = Arc::new(Shot {
                world: w.clone(),
                check,
            });
            (shot, view.drift_world.name(), d.marked)
        }
        None => match latest.borrow().clone() {
            Some(s) => (s, "live", None),
            None => return true,
        },
    };
    pace(last_frame).await;
    tracing::debug!(step = shot.world.step, which, "drawing a frame for a tab");
    match draw(hub, shot, which, marked, view.look).await {
        Some(m) => tab.send(m).await,
        None => true,
    }
}
