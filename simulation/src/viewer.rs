//! A viewer: the real verifier and NATS feed, fed by a modelled reader, and its recording
//! written with the real recorder.

use crate::check::{self, FINISH, WRITE};
use crate::{snapshot, Sim, Stored, SILENCE_TICKS, SOCKET, TICK_MS};
use ostm_protocol::format::recording::journal::{record_check, DropKind, RECORD_OVERHEAD};
use ostm_protocol::format::recording::{assemble, journal_path, numbered, Durability, Recorder};
use ostm_protocol::session::{Event, Feed, Input, Limits, Plant, Restart, Transmit, Verifier};
use ostm_protocol::session::{Goal, REPLACED};
use ostm_protocol::sim::op::decode_input;
use ostm_protocol::wire::{DriftReply, End, Record, RecordRef, SnapshotKind, ToViewer};
use ostm_protocol::World;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a viewer reaches the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Nats,
}

/// A message and the life of the host that sent it.
type Sent = (u32, ToViewer);

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
    join_at: u64,
    /// Messages it reads a tick.
    pub speed: usize,
    pub core: Verifier,
    feed: Feed,
    /// Its connection's number (0 before the first).
    conn: u64,
    /// The host sends on the connection.
    connected: bool,
    /// The life of the host at the other end of the connection.
    host_life: u32,
    /// At the host, not yet on the wire.
    host_queue: VecDeque<Sent>,
    /// On the wire: (arrival tick, message).
    wire: VecDeque<(u64, Sent)>,
    /// In the viewer's socket, unread.
    arrived: VecDeque<Sent>,
    /// The connection closed: once `arrived` is read, the reader sees it.
    closed: bool,
    reconnect_at: Option<u64>,
    last_heard: u64,
    latency: u64,
    pub stall_until: u64,
    pub paused_until: u64,
    pub slow_until: u64,
    /// NATS: the next stored message to read.
    cursor: usize,
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
    /// The host sent it the end in place of a resync: its world is behind the host's
    /// last step.
    pub ended_behind: bool,
}

impl Viewer {
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
        Viewer {
            id,
            transport,
            join_at,
            speed,
            core,
            feed: Feed::new(),
            conn: 0,
            connected: false,
            host_life: 0,
            host_queue: VecDeque::new(),
            wire: VecDeque::new(),
            arrived: VecDeque::new(),
            closed: false,
            reconnect_at: None,
            last_heard: 0,
            latency: 1 + (join_at % 7),
            stall_until: 0,
            paused_until: 0,
            slow_until: 0,
            cursor: 0,
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
        }
    }

    /// The host sends `m` on this viewer's connection; a record past the queue's bound
    /// resyncs it (the queue dropped, a snapshot at the host's world). Returns whether it
    /// resynced.
    pub fn host_sends(&mut self, m: ToViewer, queue: usize, host_world: &World) -> bool {
        if !self.connected || self.transport != Transport::Tcp {
            return false;
        }
        let life = self.host_life;
        let is_record = matches!(m, ToViewer::Record(_));
        self.host_queue.push_back((life, m));
        if is_record && self.host_queue.len() > queue {
            // The records queued go; a snapshot not yet sent stays.
            self.host_queue
                .retain(|(_, m)| matches!(m, ToViewer::Snapshot { .. }));
            self.host_queue
                .push_back((life, snapshot(SnapshotKind::Resync, host_world)));
            return true;
        }
        false
    }

    /// The host ends the stream on this viewer's connection. A resync still queued, not
    /// yet sent, is one the real host's connection had not taken yet: when it takes, the
    /// stream has ended, and a viewer more than the queue behind gets the end in place of
    /// the resync (docs/protocol.md, "`0x85` end"). Returns whether it did so.
    pub fn host_ends(&mut self, end: End) -> bool {
        if !self.connected || self.transport != Transport::Tcp {
            return false;
        }
        let resync = self.host_queue.iter().position(|(_, m)| {
            matches!(
                m,
                ToViewer::Snapshot {
                    kind: SnapshotKind::Resync,
                    ..
                }
            )
        });
        if let Some(at) = resync {
            self.host_queue.truncate(at);
            self.ended_behind = true;
        }
        self.host_queue
            .push_back((self.host_life, ToViewer::End(end)));
        resync.is_some()
    }

    /// The connection is cut: the host stops sending, what is on the wire is lost, what
    /// arrived is still read. Returns whether there was a connection.
    pub fn cut(&mut self, _now: u64) -> bool {
        if self.transport != Transport::Tcp || !self.connected {
            return false;
        }
        self.connected = false;
        self.host_queue.clear();
        self.wire.clear();
        self.closed = true;
        true
    }
}

/// One tick of viewer `i`.
pub fn tick(sim: &mut Sim, i: usize) {
    if sim.viewers[i].core.is_stopped() {
        return;
    }
    match sim.viewers[i].transport {
        Transport::Tcp => tcp_tick(sim, i),
        Transport::Nats => nats_tick(sim, i),
    }
    drift_tick(sim, i);
    events(sim, i);
    flush_recording(sim, i);
}

/// The recording is flushed as the real viewer flushes it: when its flush interval has
/// passed on the simulated clock.
fn flush_recording(sim: &mut Sim, i: usize) {
    let now = sim.now;
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

fn tcp_tick(sim: &mut Sim, i: usize) {
    let now = sim.now;
    let host_up = sim.host_down_until.is_none() && !sim.ended;
    let life = sim.host.life;
    let v = &mut sim.viewers[i];
    // Connect: the first time at its join tick, again after a lost connection.
    let due = if v.conn == 0 {
        now >= v.join_at
    } else {
        v.reconnect_at.is_some_and(|t| now >= t)
    };
    if due && !v.connected && v.arrived.is_empty() && !v.closed && host_up {
        v.conn += 1;
        v.connected = true;
        v.reconnect_at = None;
        v.last_heard = now;
        v.host_life = life;
        v.host_queue
            .push_back((life, snapshot(SnapshotKind::Attach, &sim.host.world)));
        let (id, conn, step) = (v.id, v.conn, sim.host.world.step);
        sim.event(format!(
            "viewer {id} connects (connection {conn}) at host step {step}"
        ));
    }
    let v = &mut sim.viewers[i];
    // The network: the host's queue onto the wire, in order, unless stalled.
    if now >= v.stall_until {
        let mut last = v.wire.back().map_or(0, |(t, _)| *t);
        for _ in 0..8 {
            if v.wire.len() + v.arrived.len() >= SOCKET {
                break;
            }
            let Some(m) = v.host_queue.pop_front() else {
                break;
            };
            last = last.max(now + v.latency);
            v.wire.push_back((last, m));
        }
    }
    while v.wire.front().is_some_and(|(t, _)| *t <= now) {
        if let Some((_, m)) = v.wire.pop_front() {
            v.arrived.push_back(m);
        }
    }
    if now < v.paused_until {
        return;
    }
    // The reader reads what waits in its socket before it judges silence.
    let speed = if now < v.slow_until { 1 } else { v.speed };
    for _ in 0..speed {
        let Some((life, m)) = sim.viewers[i].arrived.pop_front() else {
            break;
        };
        sim.viewers[i].last_heard = now;
        take(sim, i, life, m);
        if sim.viewers[i].core.is_stopped() || sim.violation.is_some() {
            return;
        }
    }
    let v = &mut sim.viewers[i];
    if !v.arrived.is_empty() || v.conn == 0 || v.reconnect_at.is_some() {
        return;
    }
    let why = if v.closed {
        Some("the connection was closed".to_string())
    } else if v.connected && now.saturating_sub(v.last_heard) > SILENCE_TICKS {
        Some(format!(
            "the host sent nothing for {} ms",
            SILENCE_TICKS * TICK_MS
        ))
    } else {
        None
    };
    if let Some(why) = why {
        v.connected = false;
        v.closed = false;
        v.host_queue.clear();
        v.wire.clear();
        v.reconnect_at = Some(now + 3 + (v.id as u64 % 5));
        let id = v.id;
        // Before its first snapshot the reader only connects again.
        if v.core.attached_at().is_some() {
            v.core.handle(Input::Lost {
                why: why.clone(),
                last: false,
            });
        }
        sim.event(format!("viewer {id} lost its connection: {why}"));
    }
}

fn nats_tick(sim: &mut Sim, i: usize) {
    let now = sim.now;
    if now < sim.viewers[i].join_at || now < sim.viewers[i].paused_until {
        return;
    }
    if sim.server_away_until.is_some() {
        return;
    }
    if sim.viewers[i].core.attached_at().is_none() {
        // The latest keyframe, then the stream from there.
        let Some(k) = sim.stream.iter().rposition(|m| matches!(m, Stored::Key(_))) else {
            return;
        };
        let Stored::Key(world) = sim.stream[k].clone() else {
            return;
        };
        let v = &mut sim.viewers[i];
        v.cursor = k + 1;
        v.conn = 1;
        v.life = sim.host.life;
        let step = world.step;
        v.core.handle(Input::Attached {
            world,
            connection: 1,
        });
        sim.event(format!(
            "viewer {i} attaches on nats at the keyframe at step {step}"
        ));
        return;
    }
    let speed = if now < sim.viewers[i].slow_until {
        1
    } else {
        sim.viewers[i].speed
    };
    for _ in 0..speed {
        let c = sim.viewers[i].cursor;
        let Some(m) = sim.stream.get(c).cloned() else {
            break;
        };
        sim.viewers[i].cursor += 1;
        let life = sim.host.life;
        match m {
            Stored::Key(world) => {
                let v = &mut sim.viewers[i];
                let waiting = v.core.is_waiting();
                v.feed.keyframe(&mut v.core, world);
                if waiting && !v.core.is_waiting() {
                    v.life = life;
                }
            }
            Stored::Rec(records) => {
                for r in records {
                    nats_record(sim, i, life, &r);
                    if sim.viewers[i].core.is_stopped() || sim.violation.is_some() {
                        return;
                    }
                }
            }
            Stored::End(e) => {
                let v = &mut sim.viewers[i];
                v.feed.end(&mut v.core, e.host_step);
                v.waiting_at_end = v.core.is_waiting();
                v.core.handle(Input::End(e));
            }
        }
        events(sim, i);
        if sim.viewers[i].core.is_stopped() {
            return;
        }
    }
}

fn nats_record(sim: &mut Sim, i: usize, life: u32, r: &Record) {
    let ops = decode_input("record", &r.input, 0).unwrap_or_default();
    let v = &mut sim.viewers[i];
    let at = v.core.world().step;
    let rr = RecordRef::from(r);
    let waiting = v.core.is_waiting();
    note_perturbed(sim, i, r, at);
    let v = &mut sim.viewers[i];
    let fed = v.feed.record(&mut v.core, rr, &ops);
    if waiting && !v.core.is_waiting() {
        v.life = life;
    }
    if let Some(hash) = fed {
        verified(sim, i, r, hash);
    }
}

/// The viewer met the perturbed record with its world at the step before it.
fn note_perturbed(sim: &mut Sim, i: usize, r: &Record, world_step: u64) {
    if let Some((life, p)) = sim.planted {
        let v = &mut sim.viewers[i];
        if v.life == life && r.step + 1 == p.step && world_step == r.step && !v.core.is_waiting() {
            v.met_perturbed = true;
        }
    }
}

/// A TCP message read by the viewer.
fn take(sim: &mut Sim, i: usize, life: u32, m: ToViewer) {
    match m {
        ToViewer::Snapshot { kind, world } => {
            let v = &mut sim.viewers[i];
            v.life = life;
            let step = world.step;
            let input = match kind {
                SnapshotKind::Attach => Input::Attached {
                    world,
                    connection: v.conn,
                },
                SnapshotKind::Resync => Input::Resync(world),
            };
            v.core.handle(input);
            let what = match kind {
                SnapshotKind::Attach => "attach",
                SnapshotKind::Resync => "resync",
            };
            sim.event(format!(
                "viewer {i} takes the {what} snapshot at step {step}"
            ));
        }
        ToViewer::Record(r) => {
            let ops = decode_input("record", &r.input, 0).unwrap_or_default();
            let at = sim.viewers[i].core.world().step;
            note_perturbed(sim, i, &r, at);
            let v = &mut sim.viewers[i];
            if let Some(hash) = v.core.handle_record(RecordRef::from(&r), &ops) {
                verified(sim, i, &r, hash);
            }
        }
        ToViewer::End(e) => {
            let v = &mut sim.viewers[i];
            v.waiting_at_end = v.core.is_waiting();
            v.core.handle(Input::End(e));
        }
        ToViewer::Welcome(_) | ToViewer::Heartbeat { .. } | ToViewer::DriftReply(_) => {}
    }
    events(sim, i);
}

/// A record verified: checked, then recorded.
fn verified(sim: &mut Sim, i: usize, r: &Record, hash: u64) {
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
        .map_or(Ok(()), |cur| cur.push(&r.input, hash));
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

/// The drift request's round trip.
fn drift_tick(sim: &mut Sim, i: usize) {
    let now = sim.now;
    if let Some(Transmit::DriftRequest { step, connection }) = sim.viewers[i].core.poll_transmit() {
        let v = &sim.viewers[i];
        let reply = if v.transport == Transport::Tcp && (connection != v.conn || !v.connected) {
            Err(REPLACED.to_string())
        } else if sim.host_down_until.is_some() || sim.host.life != v.life {
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
