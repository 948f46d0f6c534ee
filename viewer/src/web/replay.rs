//! The page over a replay file: each tab has its own [`Player`] (its own reading position in
//! the file), which reaches a step by running on from the world it holds when the step is
//! less than one keyframe spacing ahead, else from the seek index's nearest keyframe (the
//! index beside the file, else one built in memory when the viewer starts). Every world
//! shown is checked against the file's hash row at its step.

use super::frame::{self, Check, Look, Shown};
use super::request::Request;
use super::{pace, Requests, Tab};
use crate::render::file_name;
use crate::render::ghost::{read_ghost, GhostCache};
use ostm_protocol::format::replay_stream::ReplayStream;
use ostm_protocol::format::seek::{self, default_index_path, MemoryIndex, Seeked, DEFAULT_EVERY};
use ostm_protocol::{Op, World};
use serde_json::json;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where keyframes come from.
enum Keyframes {
    /// The seek index beside the file (`FILE.seek`, docs/seek-index.md), checked on every
    /// seek.
    File { path: PathBuf, every: u32 },
    /// Built in memory at start.
    Memory(MemoryIndex),
}

/// A replay and its keyframes, shared by every tab.
pub struct Source {
    file: PathBuf,
    name: String,
    keyframes: Keyframes,
    first: u64,
    last: u64,
    dims: u8,
    slots: usize,
    rows: bool,
    ghost: Option<GhostCache>,
}

impl Source {
    /// Opens `file`, uses the index beside it or builds one in memory (with a progress bar
    /// on a terminal), and reads `ghost`.
    ///
    /// # Errors
    /// The sentence to print: the replay, its index or the ghost is unusable.
    pub fn open(file: &Path, ghost: Option<&Path>) -> Result<Source, String> {
        let stream = ReplayStream::open(file).map_err(|e| e.to_string())?;
        let start = stream.start_world();
        let h = stream.header();
        let first = start.step;
        // A replay whose steps pass u64::MAX is shown up to u64::MAX.
        let last = first.saturating_add(h.steps as u64);
        let rows = h.flags & ostm_protocol::format::ostm::FLAG_HASHES != 0;
        let ghost = match ghost {
            Some(p) => Some(read_ghost(p, h.setup.dims)?),
            None => None,
        };
        let index = default_index_path(file);
        let keyframes = if index.exists() {
            let every = index_every(&index)?;
            Keyframes::File { path: index, every }
        } else {
            let bar = crate::progress::bar(
                h.steps as u64,
                crate::progress::MIN_STEPS,
                "building the seek index",
            );
            let built = MemoryIndex::build(file, DEFAULT_EVERY, |rows| bar.set_position(rows));
            bar.finish_and_clear();
            Keyframes::Memory(built.map_err(|e| e.to_string())?)
        };
        Ok(Source {
            file: file.to_path_buf(),
            name: file_name(file),
            keyframes,
            first,
            last,
            dims: start.dims() as u8,
            slots: start.bodies.len(),
            rows,
            ghost,
        })
    }

    fn every(&self) -> u32 {
        match &self.keyframes {
            Keyframes::File { every, .. } => *every,
            Keyframes::Memory(m) => m.every(),
        }
    }

    /// What the start line and the page say of the index.
    pub fn index_line(&self) -> String {
        match &self.keyframes {
            Keyframes::File { path, every } => {
                format!("seek index {} (every {every} steps)", path.display())
            }
            Keyframes::Memory(m) => format!(
                "no seek index beside the file: keyframes every {} steps built in memory",
                m.every()
            ),
        }
    }

    fn hello(&self) -> String {
        json!({"type": "hello", "mode": "replay", "name": self.name, "dims": self.dims,
            "slots": self.slots, "first_step": self.first, "last_step": self.last,
            "every": self.every(), "rows": self.rows, "index": self.index_line(),
            "ghost": self.ghost.as_ref().map(|g| g.name.clone())})
        .to_string()
    }

    /// A player at the replay's first step.
    ///
    /// # Errors
    /// The file cannot be read again.
    pub fn player(&self) -> Result<Player, String> {
        let mut stream = ReplayStream::open(&self.file).map_err(|e| e.to_string())?;
        let world = stream.start_world();
        let row = stream.hash_row(0).map_err(|e| e.to_string())?;
        Ok(Player {
            stream,
            world,
            row,
            ops: Vec::new(),
        })
    }

    /// Checks a step a page asked for.
    fn check_step(&self, step: u64) -> Result<(), String> {
        if step < self.first || step > self.last {
            return Err(format!(
                "show step {step}: expected a step of the replay, {}..={}",
                self.first, self.last
            ));
        }
        Ok(())
    }

    /// Moves `p` to `step` (which [`Source::check_step`] accepted).
    ///
    /// # Errors
    /// The file turned out malformed there, or its index does not fit it.
    pub fn show(&self, p: &mut Player, step: u64) -> Result<(), String> {
        let at = p.world.step;
        if step >= at && step - at < self.every() as u64 {
            for _ in at..step {
                if !p.stream.next_ops(&mut p.ops).map_err(|e| e.to_string())? {
                    break;
                }
                p.world.step(&p.ops);
            }
            let row = (p.world.step - self.first) as u32;
            p.row = p.stream.hash_row(row).map_err(|e| e.to_string())?;
            return Ok(());
        }
        let s: Seeked = match &self.keyframes {
            Keyframes::File { path, .. } => {
                seek::seek_stream(&self.file, &mut p.stream, path, step)
            }
            Keyframes::Memory(m) => m.seek(&mut p.stream, step),
        }
        .map_err(|e| e.to_string())?;
        p.world = s.world;
        p.row = s.recorded_hash;
        Ok(())
    }
}

/// The spacing of the index at `path`, from its header line.
fn index_every(path: &Path) -> Result<u32, String> {
    use std::io::BufRead;
    let f = File::open(path).map_err(|e| format!("{}: cannot open: {e}", path.display()))?;
    let mut line = Vec::new();
    std::io::BufReader::new(f)
        .take(seek::MAX_INDEX_LINE as u64)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let h: seek::IndexHeader = serde_json::from_slice(line.trim_ascii_end())
        .map_err(|e| format!("{}: line 1: expected the index header: {e}", path.display()))?;
    if h.every == 0 {
        return Err(format!(
            "{}: line 1: expected every >= 1, found 0",
            path.display()
        ));
    }
    Ok(h.every)
}

/// One tab's position in the replay.
pub struct Player {
    stream: ReplayStream<File>,
    world: World,
    /// The file's hash row at the world's step.
    row: Option<u64>,
    ops: Vec<Op>,
}

/// Draws the player's world for one tab, off the runtime's worker threads; moves it to
/// `step` first when given.
async fn draw(
    source: &Arc<Source>,
    player: &Arc<Mutex<Player>>,
    step: Option<u64>,
    look: Look,
) -> Result<String, String> {
    let (s, p) = (source.clone(), player.clone());
    tokio::task::spawn_blocking(move || {
        let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(step) = step {
            s.show(&mut p, step)?;
        }
        let shown = Shown {
            name: &s.name,
            world: &p.world,
            check: Check::of_row(&p.world, p.row),
            which: "replay",
            marked: None,
        };
        let ghost = s.ghost.as_ref().filter(|_| look.ghost);
        Ok(frame::message(&shown, look, ghost))
    })
    .await
    .map_err(|e| format!("drawing failed: {e}"))?
}

/// Serves one tab until it goes.
pub async fn tab(source: Arc<Source>, tab: &Tab, requests: &mut Requests) {
    let player = match source.player() {
        Ok(p) => Arc::new(Mutex::new(p)),
        Err(e) => {
            tab.error(&e);
            return;
        }
    };
    let mut look = Look {
        ghost: source.ghost.is_some(),
        ..Look::default()
    };
    let mut last_frame = tokio::time::Instant::now() - super::MIN_FRAME_GAP;
    if !tab.send(source.hello()).await {
        return;
    }
    let mut step = None;
    loop {
        pace(&mut last_frame).await;
        match draw(&source, &player, step, look).await {
            Ok(m) => {
                if !tab.send(m).await {
                    return;
                }
            }
            Err(e) => tab.error(&e),
        }
        // Wait for a request that changes the picture.
        loop {
            let r = match requests.next().await {
                None => return,
                Some(r) => r,
            };
            let asked = r.and_then(|req| match req {
                Request::Show { step: s } => source.check_step(s).map(|()| Some(s)),
                Request::Overlay { overlay } => {
                    look.overlay = overlay.into();
                    Ok(None)
                }
                Request::Ghost { on } if on && source.ghost.is_none() => {
                    Err("no ghost to draw: the viewer was started without --ghost".to_string())
                }
                Request::Ghost { on } => {
                    look.ghost = on;
                    Ok(None)
                }
                Request::Ready {} => Err(
                    "ready is for a live view: a replay shows the step a show request names".into(),
                ),
                Request::World { world } => Err(format!(
                    "world {} is for a live view's drift report",
                    world.name()
                )),
            });
            match asked {
                Ok(s) => {
                    step = s;
                    break;
                }
                Err(e) => tab.error(&e),
            }
        }
    }
}
