//! A deterministic simulation of whole live sessions, replayable from a seed
//! (docs/reliability.md, "The simulation of whole sessions").
//!
//! One host and several viewers run on a virtual clock in one thread. The host steps the
//! real world into its real rings ([`host`]); each viewer is the real sans-IO verifier
//! ([`ostm_protocol::session::Verifier`]). Over TCP ([`tcp`]) every connection is the
//! host's real connection machine and the viewer's real reader machine with a simulated
//! network of bytes between them (latency, partial writes, bounded socket buffers, stalls,
//! a slow link, cuts, a host killed and started again); over NATS ([`nats`]) the host's real
//! publisher machine publishing to a simulated JetStream ([`jetstream`]: sequences, the
//! duplicate window, retention, a cluster whose nodes fail) and the viewer's real reader
//! machine reading it. Recordings are written with the real recorder into a scratch
//! directory, crashed with their tail torn and recovered with the real `assemble`. Every
//! choice — rates, delays, which fault and when — comes from the seed, so a run is a pure
//! function of its seed and plant: its trace is the same byte for byte every time.
//!
//! Every seed also runs a pair session ([`run_pair`]): the host's real connection machine
//! and fan-out ring against the real verifier, in memory (`ostm_protocol::serve::pair`).
//!
//! # Layout
//! - [`host`]: the host's world, its rings of records and worlds, its end.
//! - [`tcp`]: the TCP connections: the host's machine, the network, the viewer's reader.
//! - [`nats`]: the NATS side: the host's publisher, the NATS viewers' readers, its faults.
//! - [`jetstream`]: the simulated JetStream and its cluster.
//! - [`viewer`]: a viewer: the verifier, its recording.
//! - [`check`]: the invariants, checked as the run goes and at its end.
//! - this file: the run, its clock and its faults.

pub mod check;
pub mod host;
pub mod jetstream;
pub mod nats;
pub mod tcp;
pub mod viewer;

use host::{Host, Perturb};
use ostm_protocol::reader::tcp::Plant as ReaderPlant;
use ostm_protocol::session::Plant;
use ostm_protocol::sim::rng::Sfc32;
use ostm_protocol::wire::{End, EndReason};
use ostm_protocol::{Dims, Setup};
use std::collections::BTreeMap;
use std::path::PathBuf;
use viewer::{Transport, Viewer};

/// Virtual milliseconds per tick of the clock.
pub const TICK_MS: u64 = 10;
/// Records the host's ring holds for its TCP viewers: one further behind is resynced.
pub const QUEUE: usize = 96;
/// Ticks of silence after which a viewer gives its connection up (10 s).
pub const SILENCE_TICKS: u64 = 10_000 / TICK_MS;
/// Ticks the host runs at least after the faults stop, with `--liveness` (7 s).
pub const LIVENESS_TAIL: u64 = 700;

/// What a run is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// A fault planted in the verifier or the host's machines, to show the run catches it.
    pub plant: Option<Plant>,
    /// A fault planted in the viewer's TCP reader.
    pub reader_plant: Option<ReaderPlant>,
    /// A fault planted in the NATS reader.
    pub nats_plant: Option<ostm_protocol::reader::nats::Plant>,
    /// A fault planted in the host's NATS publisher.
    pub publish_plant: Option<ostm_protocol::serve::publish::Plant>,
    /// A fault planted in the recorder: it assembles a crashed recording without checking
    /// its hash rows (`--plant recover-unverified`).
    pub plant_recover_unverified: bool,
    /// The recorder's finish renames before it syncs (`--plant rename-before-sync`).
    pub plant_rename_before_sync: bool,
    /// Faults stop two thirds of the way; then every viewer must verify again.
    pub liveness: bool,
    /// Keep every event in the trace (otherwise only a digest is kept).
    pub trace: bool,
    /// Where recordings are written (one folder per seed beneath it).
    pub scratch: PathBuf,
}

/// What a run did.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    /// The first invariant broken, if any.
    pub violation: Option<String>,
    /// Every event, one a line (with [`Config::trace`]).
    pub trace: String,
    /// A digest of every event (FNV-1a over the trace lines), kept without `trace` too:
    /// two runs of a seed must give the same.
    pub digest: u64,
    /// Steps the host took, in all its lives.
    pub steps: u64,
    /// Faults injected.
    pub faults: u32,
    /// Steps verified, by all viewers.
    pub verified: u64,
}

/// The kinds of fault the seed chooses among, for the trace and the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A viewer's connection holds its bytes both ways for a while (no cut).
    Stall,
    /// A viewer's connection is reset and its link refuses new ones for a while; it
    /// reconnects.
    Cut,
    /// The host is killed and started again (its world from step 0).
    HostRestart,
    /// A viewer stops reading for a while (as under SIGSTOP), then goes on.
    Pause,
    /// A viewer's link delivers fewer bytes than the host sends for a while: the host
    /// resyncs it.
    Slow,
    /// A node of the NATS cluster is killed (losing what it had not flushed) and started
    /// again.
    NodeRestart,
    /// The stream's leader is killed and started again: another replica leads.
    LeaderKilled,
    /// Every node of the cluster is killed at once and started again: acknowledged
    /// messages not flushed are lost.
    AllNodesKilled,
    /// The node a NATS viewer reads through is killed for good: it moves to another.
    NodeGone,
    /// The next acknowledgements of the stream never reach the host.
    AckLost,
    /// The next acknowledgements reach the host after it gave them up.
    AckLate,
    /// The host's connection to the server takes no publish for a while (a server slow
    /// to read): its feed fills.
    PublishStall,
    /// A publish is sent twice with its message id: the stream stores it once.
    Duplicate,
    /// A NATS viewer's consumer delivers again from an earlier sequence.
    Redelivery,
    /// A keyframe of another world is published on the session (a stray publisher).
    ForeignKeyframe,
    /// A recording crashes with its tail torn; it is recovered and recording goes on in a
    /// new file.
    RecordingCrash,
    /// The disk under a viewer's recording fills: the file takes a few bytes more (0 to
    /// 2 KiB, a write cut part way), then every write fails. The viewer stops as the real
    /// one does, its `FILE.part` kept, and what `recover` gives is checked.
    DiskFull,
}

/// The run.
pub struct Sim {
    pub rng: Sfc32,
    pub cfg: Config,
    pub now: u64,
    pub host: Host,
    /// The host is down until this tick (killed, to be started again).
    pub host_down_until: Option<u64>,
    /// The tick the host ended the stream.
    pub end_tick: Option<u64>,
    /// The host has exited after the end.
    pub host_gone: bool,
    pub viewers: Vec<Viewer>,
    /// Each TCP viewer's connections, the host's machine at their other end, and its
    /// reader (by viewer).
    pub links: Vec<Option<tcp::Link>>,
    /// The NATS side: the stream on its cluster and the host's publisher (when a viewer
    /// reads through NATS).
    pub stream: Option<nats::Nats>,
    pub faults: u32,
    pub steps: u64,
    pub violation: Option<String>,
    trace: String,
    digest: u64,
    keep_trace: bool,
    /// No fault after this tick (liveness mode).
    pub quiet_after: u64,
    /// The host ends the stream at this tick.
    pub end_at: u64,
    pub ended: bool,
    pub scratch: PathBuf,
    /// Every hash the host published, by (life, step of the record).
    pub hashes: BTreeMap<(u32, u64), u64>,
    /// The drift planted in the host's world, once applied: (life, where).
    pub planted: Option<(u32, Perturb)>,
    /// Keyframes of another world published on the session.
    pub foreign_keyframes: u32,
    /// Whether any viewer reads through NATS (the host is then not restarted: a host
    /// started again on the same session is another stream).
    pub nats: bool,
}

impl Sim {
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            u64::from(self.rng.next_u32()) % n
        }
    }

    /// True once in `n` times.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Notes an event: in the trace (with `--trace`) and in the digest.
    pub fn event(&mut self, what: impl AsRef<str>) {
        let line = format!("{:>6} {}", self.now, what.as_ref());
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.digest ^= u64::from(b);
            self.digest = self.digest.wrapping_mul(0x0100_0000_01b3);
        }
        if self.keep_trace {
            self.trace.push_str(&line);
            self.trace.push('\n');
        }
    }

    /// The first invariant broken is kept, with the tick.
    pub fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.event(format!("VIOLATION {what}"));
            self.violation = Some(what);
        }
    }

    pub(crate) fn fault(&mut self, kind: Fault, detail: String) {
        self.faults += 1;
        self.event(format!("fault {kind:?} {detail}"));
    }

    /// Whether faults may still happen.
    pub(crate) fn faulty(&self) -> bool {
        self.now < self.quiet_after
    }

    /// The tick a fault of `ticks` from now ends: in liveness mode never after the faults
    /// stop.
    pub(crate) fn until(&self, ticks: u64) -> u64 {
        (self.now + ticks).min(self.quiet_after)
    }
}

/// Runs the seed's pair session: the host's real connection and rings against the real
/// verifier, in memory ([`ostm_protocol::serve::pair::session`]), with the plant.
pub fn run_pair(seed: u64, cfg: &Config) -> ostm_protocol::serve::pair::Outcome {
    match cfg.plant {
        Some(plant) => ostm_protocol::serve::pair::planted_session(seed, plant, cfg.trace),
        None => ostm_protocol::serve::pair::session(seed, cfg.trace),
    }
}

/// Runs one seed's session of a host and several viewers.
pub fn run(seed: u64, cfg: &Config) -> Outcome {
    let mut rng = Sfc32::from_seed((seed as u32) ^ ((seed >> 32) as u32).rotate_left(7));
    let setup = Setup {
        dims: if rng.next_u32() & 1 == 0 {
            Dims::Two
        } else {
            Dims::Three
        },
        bodies: 2 + (rng.next_u32() % 11) as u8,
        seed: rng.next_u32() % 100_000,
    };
    let end_at = 300 + u64::from(rng.next_u32() % 500);
    let perturb = rng.next_u32().is_multiple_of(4).then(|| Perturb {
        step: 30 + u64::from(rng.next_u32()) % (end_at * 2),
        body: (rng.next_u32() % u32::from(setup.bodies)) as u8,
    });
    // With --liveness the faults stop two thirds of the way, and the host runs on for at
    // least 7 s after: longer than the TCP reader's longest wait between two attempts (5 s)
    // and its handshake.
    let quiet_after = if cfg.liveness {
        end_at * 2 / 3
    } else {
        u64::MAX
    };
    let end_at = if cfg.liveness {
        end_at.max(quiet_after + LIVENESS_TAIL)
    } else {
        end_at
    };
    let scratch = cfg.scratch.join(format!("seed-{seed}"));
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::create_dir_all(&scratch);
    let mut sim = Sim {
        rng,
        cfg: cfg.clone(),
        now: 0,
        host: Host::new(setup, 0, perturb),
        host_down_until: None,
        end_tick: None,
        host_gone: false,
        viewers: Vec::new(),
        links: Vec::new(),
        stream: None,
        faults: 0,
        steps: 0,
        violation: None,
        trace: String::new(),
        digest: 0xcbf2_9ce4_8422_2325,
        keep_trace: cfg.trace,
        quiet_after,
        end_at,
        ended: false,
        scratch: scratch.clone(),
        hashes: BTreeMap::new(),
        planted: None,
        foreign_keyframes: 0,
        nats: false,
    };
    if let Some(p) = cfg.plant {
        sim.host.plant(p);
    }
    sim.event(format!(
        "seed {seed} world {:?} {} bodies seed {} end at tick {end_at} perturb {:?}",
        setup.dims, setup.bodies, setup.seed, perturb
    ));
    let n = 2 + sim.below(3) as usize;
    for i in 0..n {
        let transport = if sim.one_in(3) {
            Transport::Nats
        } else {
            Transport::Tcp
        };
        let join_at = sim.below(end_at / 2);
        let record = !sim.one_in(3);
        // The reconnection budget: `--reconnect-for`'s default, or 2 to 5 s (longer than
        // a cut refuses connections, shorter than a run).
        let budget_ms = if sim.one_in(2) {
            300_000
        } else {
            2_000 + sim.below(3_000)
        };
        let v = Viewer::new(i, transport, join_at, record, &sim.scratch, cfg.plant);
        let link = (transport == Transport::Tcp).then(|| tcp::Link::new(v.latency, budget_ms));
        sim.links.push(link);
        sim.event(format!(
            "viewer {i} {transport:?} joins at tick {join_at} speed {} record {record} budget {budget_ms} ms",
            v.speed
        ));
        sim.nats |= transport == Transport::Nats;
        sim.viewers.push(v);
    }
    nats::setup(&mut sim);
    // The run, then time for the end to reach every viewer.
    let last = end_at + SILENCE_TICKS * 2 + 50;
    while sim.now < last && sim.violation.is_none() {
        tick(&mut sim);
        sim.now += 1;
        if sim.viewers.iter().all(|v| v.core.is_stopped()) && sim.ended {
            break;
        }
    }
    for i in 0..sim.viewers.len() {
        viewer::finish(&mut sim, i);
    }
    if sim.violation.is_none() {
        check::at_end(&mut sim);
    }
    if sim.violation.is_none() {
        nats::end_reached(&mut sim);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let verified = sim.viewers.iter().map(|v| v.core.verified()).sum();
    Outcome {
        seed,
        violation: sim.violation.take(),
        trace: std::mem::take(&mut sim.trace),
        digest: sim.digest,
        steps: sim.steps,
        faults: sim.faults,
        verified,
    }
}

/// One tick: faults, the host, the network, the viewers.
fn tick(sim: &mut Sim) {
    if sim.faulty() && !sim.ended {
        inject(sim);
    }
    host_tick(sim);
    tcp::host_tick(sim);
    nats::host_tick(sim);
    for i in 0..sim.viewers.len() {
        if sim.viewers[i].transport == Transport::Tcp {
            // Its connections close once it has stopped.
            tcp::tick(sim, i);
        } else if !sim.viewers[i].core.is_stopped() {
            nats::viewer_tick(sim, i);
        }
        viewer::tick(sim, i);
        if sim.violation.is_some() {
            return;
        }
    }
}

/// Maybe a fault, chosen by the seed.
fn inject(sim: &mut Sim) {
    if !sim.one_in(25) {
        return;
    }
    let n = sim.viewers.len() as u64;
    let who = sim.below(n) as usize;
    match sim.below(10) {
        0 => {
            let ticks = 5 + sim.below(SILENCE_TICKS * 2);
            let until = sim.until(ticks);
            if tcp::stall(sim, who, until) {
                sim.fault(Fault::Stall, format!("viewer {who} for {ticks} ticks"));
            }
        }
        1 => {
            let down = sim.below(150);
            if tcp::cut(sim, who, down) {
                sim.fault(
                    Fault::Cut,
                    format!("viewer {who}, connections refused for {down} ticks"),
                );
            }
        }
        2 if sim.host_down_until.is_none() && !sim.nats && sim.one_in(4) => {
            let down = 1 + sim.below(60);
            sim.host_down_until = Some(sim.until(down));
            tcp::kill(sim);
            sim.fault(Fault::HostRestart, format!("down {down} ticks"));
        }
        3 => {
            let ticks = 5 + sim.below(SILENCE_TICKS * 2);
            sim.viewers[who].paused_until = sim.until(ticks);
            sim.fault(Fault::Pause, format!("viewer {who} for {ticks} ticks"));
        }
        4 => {
            let ticks = 20 + sim.below(200);
            sim.viewers[who].slow_until = sim.until(ticks);
            sim.fault(Fault::Slow, format!("viewer {who} for {ticks} ticks"));
        }
        k @ 5..=8 => nats::inject(sim, k - 5),
        9 if sim.one_in(8) && viewer::fill_disk(sim, who) => {
            sim.fault(Fault::DiskFull, format!("viewer {who}"));
        }
        9 if viewer::crash_recording(sim, who) => {
            sim.fault(Fault::RecordingCrash, format!("viewer {who}"));
        }
        _ => {}
    }
}

/// The host: started again after a kill, a step or a few, published to every connection
/// and to the NATS stream; the end.
fn host_tick(sim: &mut Sim) {
    if let Some(t) = sim.host_down_until {
        if sim.now < t {
            return;
        }
        sim.host_down_until = None;
        let life = sim.host.life + 1;
        let setup = sim.host.setup;
        sim.host = Host::new(setup, life, None);
        if let Some(p) = sim.cfg.plant {
            sim.host.plant(p);
        }
        sim.event(format!("host started again, life {life}, at step 0"));
    }
    if sim.ended {
        return;
    }
    if sim.now >= sim.end_at {
        sim.ended = true;
        let end = End {
            reason: EndReason::Finished,
            text: "the host finished".into(),
            host_step: sim.host.world.step,
        };
        sim.event(format!("host ends at step {}", sim.host.world.step));
        sim.host.ended = Some(end.clone());
        sim.end_tick = Some(sim.now);
        nats::end(sim, end);
        return;
    }
    let n = 1 + sim.below(3);
    for _ in 0..n {
        nats::before_step(sim);
        let r = sim.host.step();
        sim.hashes.insert((sim.host.life, r.step), r.hash);
        sim.steps += 1;
        nats::record(sim, &r);
        if let Some(p) = sim.host.perturbed.take() {
            sim.event(format!("host perturbed body {} at step {}", p.body, p.step));
            sim.host.perturb = None;
            sim.planted = Some((sim.host.life, p));
        }
    }
}
