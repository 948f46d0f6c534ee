//! A viewer: the real verifier, fed over TCP by the real reader ([`crate::tcp`]) or over
//! NATS by the real reader ([`crate::nats`]), and its recording written with the real
//! recorder.

use crate::check::{self, FINISH, WRITE};
use crate::{Sim, TICK_MS};
use ostm_protocol::format::recording::journal::{record_check, DropKind, RECORD_OVERHEAD};
use ostm_protocol::format::recording::{assemble, journal_path, numbered, Durability, Recorder};
use ostm_protocol::session::Goal;
use ostm_protocol::session::{Event, Limits, Plant, Restart, Transmit, Verifier};
use ostm_protocol::wire::{DriftReply, RecordRef};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a viewer reaches the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Nats,
}

/// The viewer's recording: one file per unbroken run of verified steps.
pub struct Recording {
    base: PathBuf,
    index: u32,
    current: Option<Recorder>,
    /// The in-progress file's length once its header and start snapshot were written.
    head_len: u64,
    /// The life of the world the current file records.
    life: u32,
    /// Files finished or recovered: (path, life).
    pub files: Vec<(PathBuf, u32)>,
    /// The recorder's clock: one real instant plus the simulated time (the recorder reads
    /// only the time between two instants, so the run stays the seed's).
    clock0: Instant,
    /// The disk under the recording filled (a [`crate::Fault::DiskFull`]).
    disk_full: bool,
}

/// One viewer.
pub struct Viewer {
    pub id: usize,
    pub transport: Transport,
    pub join_at: u64,
    /// Messages it reads a tick.
    pub speed: usize,
    pub core: Verifier,
    /// Its connection's number on NATS (0 before it attaches).
    pub(crate) conn: u64,
    /// Ticks each way on its link.
    pub latency: u64,
    pub paused_until: u64,
    pub slow_until: u64,
    /// A drift reply on its way: (arrival tick, reply or why none).
    reply: Option<(u64, Result<DriftReply, String>)>,
    pub recording: Option<Recording>,
    /// The life of the host whose world the viewer holds.
    pub life: u32,
    /// Every step verified, in order: (life, step).
    pub verified: Vec<(u32, u64)>,
    /// Hashes verified, by (life, step).
    pub hashes: BTreeMap<(u32, u64), u64>,
    /// The viewer met the perturbed record with its world at the step before it.
    pub met_perturbed: bool,
    pub stop_checked: bool,
    /// The tick of its first verified step once the faults stopped (liveness mode).
    pub verifying_again_at: Option<u64>,
    /// The records were stopped (waiting) when the host's end came.
    pub waiting_at_end: bool,
    /// It stopped because its recording's disk filled, as the real viewer does.
    pub stopped_by_full_disk: bool,
    /// The host's end came while its world was behind the end's host step (the end in
    /// place of a resync).
    pub ended_behind: bool,
    /// Its reader stopped for good for a reason the run explains (its reconnection budget
    /// ran out, its first connection met a fault, it came after the host's end).
    pub lost_for_good: bool,
}

impl Viewer {
    /// Whether it reads the session through NATS.
    pub fn reads_nats(&self) -> bool {
        self.transport == Transport::Nats
    }

    /// The files of its recording, each with the host's life it was recorded in, for the
    /// checks.
    pub fn files(&self) -> Vec<(PathBuf, u32)> {
        self.recording
            .as_ref()
            .map(|r| r.files.clone())
            .unwrap_or_default()
    }

    pub fn new(
        id: usize,
        transport: Transport,
        join_at: u64,
        record: bool,
        scratch: &Path,
        plant: Option<Plant>,
    ) -> Viewer {
        let mut core = Verifier::new(Limits::default(), Goal::default(), true);
        if let Some(p) = plant {
            core.plant(p);
        }
        let speed = 2 + (id * 7 + join_at as usize) % 5;
        let latency = 1 + (join_at % 7);
        Viewer {
            id,
            transport,
            join_at,
            speed,
            core,
            conn: 0,
            latency,
            paused_until: 0,
            slow_until: 0,
            reply: None,
            recording: record.then(|| Recording {
                base: scratch.join(format!("viewer-{id}.ostm")),
                index: 0,
                current: None,
                head_len: 0,
                life: 0,
                files: Vec::new(),
                clock0: Instant::now(),
                disk_full: false,
            }),
            life: 0,
            verified: Vec::new(),
            hashes: BTreeMap::new(),
            met_perturbed: false,
            stop_checked: false,
            verifying_again_at: None,
            waiting_at_end: false,
            stopped_by_full_disk: false,
            ended_behind: false,
            lost_for_good: false,
        }
    }
}

/// One tick of viewer `i`.
pub fn tick(sim: &mut Sim, i: usize) {
    if sim.viewers[i].core.is_stopped() {
        return;
    }
    if sim.viewers[i].transport == Transport::Nats {
        // Its reader and spool ran already (`crate::nats::viewer_tick`).
        drift_tick(sim, i);
    }
    events(sim, i);
    flush_recording(sim, i);
}

/// The recording is flushed as the real viewer flushes it: when its flush interval has
/// passed on the simulated clock.
fn flush_recording(sim: &mut Sim, i: usize) {
    let now = sim.now;
    if sim.viewers[i].core.poll_timeout().is_some() {
        // The session waits for a drift reply: it flushes nothing meanwhile.
        return;
    }
    let Some(rec) = sim.viewers[i].recording.as_mut() else {
        return;
    };
    let at = rec.clock0 + Duration::from_millis(now * TICK_MS);
    let Some(cur) = rec.current.as_mut() else {
        return;
    };
    if let Err(e) = cur.flush_due(at) {
        write_failed(sim, i, WRITE, e);
    }
}

/// The viewer met the perturbed record with its world at the step before it.
pub fn note_perturbed(sim: &mut Sim, i: usize, step: u64, world_step: u64) {
    if let Some((life, p)) = sim.planted {
        let v = &mut sim.viewers[i];
        if v.life == life && step + 1 == p.step && world_step == step && !v.core.is_waiting() {
            v.met_perturbed = true;
        }
    }
}

/// A record verified: checked, then recorded.
pub fn verified(sim: &mut Sim, i: usize, r: RecordRef<'_>, hash: u64) {
    // A restart the feed made on the way (a keyframe that closed a gap) starts its new
    // file before this step goes in.
    events(sim, i);
    let life = sim.viewers[i].life;
    check::on_verified(sim, i, life, r.step, hash);
    let now = sim.now;
    let quiet = sim.quiet_after;
    let v = &mut sim.viewers[i];
    if now >= quiet && v.verifying_again_at.is_none() {
        v.verifying_again_at = Some(now);
    }
    v.verified.push((life, r.step));
    v.hashes.insert((life, r.step), hash);
    let pushed = v
        .recording
        .as_mut()
        .and_then(|rec| rec.current.as_mut())
        .map_or(Ok(()), |cur| cur.push(r.input, hash));
    if let Err(e) = pushed {
        write_failed(sim, i, WRITE, e);
    }
}

/// A write to the recording failed (`what`: [`check::WRITE`] or [`check::FINISH`]). Only a full disk
/// may make it fail: the viewer stops as the real one does (`WHAT: …`, naming
/// `FILE.part`, which is kept), and `recover`, once there is room again, must give exactly
/// the steps the recorder counted as written (what the real viewer's message states), each
/// verified.
fn write_failed(sim: &mut Sim, i: usize, what: &str, e: std::io::Error) {
    let Some(rec) = sim.viewers[i].recording.as_mut() else {
        return;
    };
    let (full, life) = (rec.disk_full, rec.life);
    let Some(cur) = rec.current.take() else {
        return;
    };
    let (written, path) = (cur.flushed(), cur.path().to_path_buf());
    drop(cur);
    let journal = journal_path(&path);
    if !full {
        sim.violate(format!("viewer {i}: the recording refused a step: {e}"));
        return;
    }
    sim.event(format!("viewer {i}: {what} ({written} steps written): {e}"));
    let named = e.to_string().contains(&journal.display().to_string());
    if e.kind() != std::io::ErrorKind::StorageFull || !named {
        sim.violate(format!("viewer {i}: a full disk reported as {e:?}"));
        return;
    }
    sim.viewers[i].stopped_by_full_disk = true;
    sim.viewers[i].core.fail(format!("{what}: {e}"));
    events(sim, i);
    let verify = !sim.cfg.plant_recover_unverified;
    match assemble(&journal, &path, verify) {
        Ok(a) if a.steps == written && a.dropped.as_ref().is_none_or(|d| d.kind == DropKind::TornTail) => {
            recovered(sim, i, path, &journal, life)
        }
        Ok(a) => sim.violate(format!(
            "viewer {i}: the part a full disk left recovers {} steps ({:?}), {written} were written",
            a.steps,
            a.dropped.as_ref().map(|d| d.kind)
        )),
        Err(e) => sim.violate(format!(
            "viewer {i}: recover refused the part a full disk left: {e}"
        )),
    }
}

/// `recover` made `path` of the host's life `life` from `journal`: the part goes, the file
/// joins the recording's files (checked at the end), and its finish must be durable.
fn recovered(sim: &mut Sim, i: usize, path: PathBuf, journal: &Path, life: u32) {
    check::finish_is_durable(sim, &path.display().to_string());
    let _ = std::fs::remove_file(journal);
    if let Some(rec) = sim.viewers[i].recording.as_mut() {
        rec.files.push((path, life));
    }
}

/// The disk under viewer `i`'s recording fills: the file takes a seeded number of bytes
/// more (0 to 2 KiB), then every write fails. Returns whether there was a recording.
pub fn fill_disk(sim: &mut Sim, i: usize) -> bool {
    let room = sim.below(2048);
    let stopped = sim.viewers[i].core.is_stopped();
    let Some(rec) = sim.viewers[i].recording.as_mut() else {
        return false;
    };
    if rec.disk_full || stopped {
        return false;
    }
    let Some(cur) = rec.current.as_mut() else {
        return false;
    };
    cur.fill_disk_after(room);
    rec.disk_full = true;
    true
}

/// The drift request's round trip on NATS.
fn drift_tick(sim: &mut Sim, i: usize) {
    let now = sim.now;
    if let Some(Transmit::DriftRequest { step, .. }) = sim.viewers[i].core.poll_transmit() {
        let v = &sim.viewers[i];
        let reply = if sim.host_down_until.is_some() || sim.host.life != v.life {
            Err("the host that sent the step is gone".to_string())
        } else {
            Ok(sim.host.drift_reply(step))
        };
        let at = now + 2 * v.latency;
        sim.event(format!("viewer {i} asks the host about step {step}"));
        sim.viewers[i].reply = Some((at, reply));
    }
    let v = &mut sim.viewers[i];
    if v.core.poll_timeout().is_some() {
        if let Some((at, _)) = &v.reply {
            if *at <= now {
                match v.reply.take().map(|(_, r)| r) {
                    Some(Ok(reply)) => v.core.handle_drift_reply(reply),
                    Some(Err(why)) => v.core.handle_drift_unanswered(why),
                    None => {}
                }
            }
        }
        v.core.handle_timeout(now * TICK_MS);
    }
}

/// What the verifier said: restarts start a new file; a stop is checked.
pub fn events(sim: &mut Sim, i: usize) {
    while let Some(e) = sim.viewers[i].core.poll_event() {
        match e {
            Event::Attached { step } => {
                sim.event(format!("viewer {i} attached at step {step}"));
                start_file(sim, i);
            }
            Event::Restarted { from, to, cause } => {
                let what = match &cause {
                    Restart::Resync => "resync",
                    Restart::Reconnect(_) => "reconnection",
                    Restart::Rejoin(_) => "gap",
                };
                sim.event(format!(
                    "viewer {i} restarts ({what}) from step {from} at step {to}"
                ));
                finish_file(sim, i);
                start_file(sim, i);
            }
            Event::Lost { step, why } => {
                sim.event(format!("viewer {i} stops at step {step}: {why}"))
            }
            Event::Stopped => {
                let stop = format!("{:?}", sim.viewers[i].core.stop().map(short));
                sim.event(format!("viewer {i} stopped: {stop}"));
                check::on_stop(sim, i);
            }
        }
    }
}

fn short(s: &ostm_protocol::session::Stop) -> String {
    use ostm_protocol::session::Stop;
    match s {
        Stop::Drift(d) => format!(
            "drift at step {} {:?} {}",
            d.step,
            d.field.as_ref().map(|f| (f.body, f.field)),
            d.stage_line()
        ),
        Stop::Failed(f) => format!("failed: {f}"),
        Stop::HostEnded(e) => format!("ended: {}", e.reason.name()),
        other => format!("{other:?}"),
    }
}

fn start_file(sim: &mut Sim, i: usize) {
    let v = &mut sim.viewers[i];
    if v.stopped_by_full_disk {
        // The viewer stopped at its full disk: no file after it.
        return;
    }
    let life = v.life;
    let world = v.core.world().clone();
    let Some(rec) = v.recording.as_mut() else {
        return;
    };
    let path = numbered(&rec.base, rec.index);
    rec.index += 1;
    match Recorder::create_with(&path, &world, true, Durability::default()) {
        Ok(r) => {
            rec.head_len = std::fs::metadata(journal_path(&path)).map_or(0, |m| m.len());
            rec.current = Some(r);
            rec.life = life;
        }
        Err(e) => sim.violate(format!("viewer {i}: cannot start a recording: {e}")),
    }
}

fn finish_file(sim: &mut Sim, i: usize) {
    let Some(rec) = sim.viewers[i].recording.as_mut() else {
        return;
    };
    if rec.disk_full {
        // The buffered steps meet the full disk first, as the real finish's do; then the
        // assembly (`FILE.part.tmp`) cannot be written either.
        let at = rec.clock0 + Duration::from_millis(sim.now * TICK_MS);
        let (what, e) = match rec.current.as_mut() {
            None => return,
            Some(cur) => match cur.flush(at) {
                Err(e) => (WRITE, e),
                Ok(()) => {
                    let tmp = format!("{}.tmp", journal_path(cur.path()).display());
                    let full = std::io::Error::from_raw_os_error(28);
                    let e = std::io::Error::new(full.kind(), format!("cannot write {tmp}: {full}"));
                    (FINISH, e)
                }
            },
        };
        write_failed(sim, i, what, e);
        return;
    }
    let Some(cur) = rec.current.take() else {
        return;
    };
    let path = cur.path().to_path_buf();
    match cur.finish() {
        Ok(_) => {
            rec.files.push((path.clone(), rec.life));
            check::finish_is_durable(sim, &path.display().to_string());
        }
        Err(e) => sim.violate(format!("viewer {i}: cannot finish {}: {e}", path.display())),
    }
}

/// A recording crashes: its in-progress file is left with the last writes torn (cut, or
/// its tail zeroed or filled with garbage), or with its last whole record holding a hash
/// row no step had (a record whole by its check, wrong in its content); `recover` must
/// give the whole steps before the damage, every one verified. Recording goes on in a new
/// file. Returns whether there was a recording to crash.
pub fn crash_recording(sim: &mut Sim, i: usize) -> bool {
    let tear = sim.below(4);
    let amount = 1 + sim.below(4096);
    let garbage_seed = sim.rng.next_u32();
    let verify = !sim.cfg.plant_recover_unverified;
    let Some(rec) = sim.viewers[i].recording.as_mut().filter(|r| !r.disk_full) else {
        return false;
    };
    let Some(mut cur) = rec.current.take() else {
        return false;
    };
    let _ = cur.flush(Instant::now());
    let path = cur.path().to_path_buf();
    let journal = journal_path(&path);
    drop(cur);
    let head = rec.head_len;
    let life = rec.life;
    let Ok(mut bytes) = std::fs::read(&journal) else {
        sim.violate(format!(
            "viewer {i}: the crashed recording left no {}",
            journal.display()
        ));
        return true;
    };
    let len = bytes.len() as u64;
    let from = len.saturating_sub(amount).max(head);
    match tear {
        0 => bytes.truncate(from as usize),
        1 => bytes[from as usize..].fill(0),
        2 => wrong_last_row(&mut bytes, head as usize),
        _ => {
            let mut g = ostm_protocol::sim::rng::Sfc32::from_seed(garbage_seed);
            for b in &mut bytes[from as usize..] {
                *b = g.next_u32() as u8;
            }
        }
    }
    if std::fs::write(&journal, &bytes).is_err() {
        sim.violate(format!("viewer {i}: cannot tear {}", journal.display()));
        return true;
    }
    match assemble(&journal, &path, verify) {
        Ok(_) => recovered(sim, i, path, &journal, life),
        Err(e) => sim.violate(format!(
            "viewer {i}: recover refused a recording torn only in its last {} bytes: {e}",
            len - from
        )),
    }
    start_file(sim, i);
    true
}

/// Changes the hash row of the last whole record of an in-progress file whose header
/// (with its check) is `head` bytes, and makes the record's check hold again
/// (docs/replay-format.md, "The in-progress file").
fn wrong_last_row(bytes: &mut [u8], head: usize) {
    let Some(check) = bytes.get(head.saturating_sub(8)..head) else {
        return;
    };
    let check = u64::from_le_bytes(check.try_into().unwrap_or([0; 8]));
    let mut at = head;
    let mut last = None;
    while let Some(&[a, b]) = bytes.get(at..at + 2) {
        let end = at + u16::from_le_bytes([a, b]) as usize + RECORD_OVERHEAD;
        if end > bytes.len() {
            break;
        }
        last = Some((at, end));
        at = end;
    }
    if let Some((at, end)) = last {
        bytes[end - 12] ^= 1;
        let sum = record_check(check, &bytes[at..end - 4]);
        bytes[end - 4..end].copy_from_slice(&sum.to_le_bytes());
    }
}

/// The end of the run for viewer `i`: stopped where it is, its last file finished.
pub fn finish(sim: &mut Sim, i: usize) {
    if !sim.viewers[i].core.is_stopped() {
        sim.viewers[i].core.interrupt();
        events(sim, i);
    }
    finish_file(sim, i);
}
