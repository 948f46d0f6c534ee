//! The host's real connection machine against the viewer's real [`Verifier`], in memory
//! (docs/reliability.md, "The pair sessions"): a host world stepped into the real ring of
//! records and the real drift ring, the bytes the connection writes decoded by the
//! viewer's codec and verified by step number. The connection's unit tests drive a
//! [`Pair`] by hand; the seeded simulation (`scripts/simulate`) runs one [`session`] per
//! seed, with the host's plants.
//!
//! Compiled for tests and with the `plants` feature only.

use super::conn::{
    Config, Conn, Event, Joined, Left, Millis, Request, Take, HELLO_MS, LINGER_MAX_MS, LINGER_MS,
};
use super::ring::{Records, Worlds};
use crate::session::{Goal, Input, Limits, Verifier};
use crate::sim::op::{encode_input, for_each_op};
use crate::sim::scenario::Scenario;
use crate::wire::{
    DriftStatus, EncodedFrame, End, EndReason, Hello, HostCodec, PeerRole, Record, RecordRef,
    SnapshotKind, ToHost, ToViewer, ViewerCodec, Welcome, VERSION,
};
use crate::{Dims, Setup, World};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, VecDeque};

/// The viewer's address in texts.
pub const PEER: &str = "127.0.0.1:5000";

/// The connection's configuration: heartbeats every second, silence after ten, a write
/// stalled after five.
pub fn config() -> Config {
    Config {
        token: None,
        welcome: Welcome {
            version: VERSION,
            role: PeerRole::Host as u8,
            rate: 60,
            heartbeat_ms: 1000,
            ring: 64,
            queue: 16,
        },
        hello_ms: HELLO_MS,
        stall_ms: 5_000,
        silence_ms: 10_000,
        heartbeat_ms: 1_000,
        linger_ms: LINGER_MS,
        linger_max_ms: LINGER_MAX_MS,
    }
}

/// A viewer's hello, encoded.
pub fn hello(version: u16, token: &[u8]) -> Vec<u8> {
    let h = ToHost::Hello(Hello {
        version,
        role: PeerRole::Viewer as u8,
        token: token.to_vec(),
    });
    frame(&h)
}

/// A viewer's heartbeat, encoded.
pub fn heartbeat(viewer_step: u64) -> Vec<u8> {
    frame(&ToHost::Heartbeat { viewer_step })
}

fn frame(m: &ToHost) -> Vec<u8> {
    ViewerCodec::encode_frame(m)
        .map(|f| f.0.to_vec())
        .unwrap_or_default()
}

/// The host's side around the connection: its world, the real ring of the last `queue`
/// records, the real drift ring and how the stream ended.
pub struct Host {
    pub world: World,
    scenario: Scenario,
    pub records: Records,
    pub worlds: Worlds,
    pub ended: Option<End>,
    /// Records the ring holds.
    pub queue: usize,
}

impl Host {
    pub fn new(queue: usize) -> Host {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 6,
            seed: 7,
        };
        let world = World::new(setup, None);
        Host {
            worlds: Worlds::new(world.clone(), 64),
            world,
            scenario: Scenario::new(7),
            records: Records::new(queue),
            ended: None,
            queue,
        }
    }

    /// `n` steps, each published to the ring.
    pub fn step(&mut self, n: usize) {
        for _ in 0..n {
            let step = self.world.step;
            let ops = self.scenario.next_input(&self.world);
            let input = Bytes::from(encode_input(&ops));
            self.world.step(&ops);
            self.worlds.push(&self.world, input.clone());
            if let Ok(frame) = HostCodec::encode_frame(&ToViewer::Record(Record {
                step,
                hash: self.world.hash(),
                input,
            })) {
                self.records.push(self.world.step, frame);
            }
        }
    }

    fn join(&self, id: u64) -> Option<Joined> {
        self.ended.is_none().then(|| Joined {
            id,
            world: self.world.clone(),
            position: self.records.next(),
        })
    }
}

/// The viewer's side: its codec and the real verifier, with what it checks of the
/// drift replies.
pub struct Viewer {
    codec: ViewerCodec,
    buf: BytesMut,
    pub verifier: Verifier,
    /// Every message, by its name, in order.
    pub got: Vec<String>,
    pub ended: Option<End>,
    /// The drift requests sent and not yet answered, oldest first.
    pub asked: VecDeque<u64>,
    /// The hash of the host's world at each step, from the records.
    hashes: BTreeMap<u64, u64>,
    /// The first thing that went wrong.
    pub violation: Option<String>,
}

impl Default for Viewer {
    fn default() -> Self {
        Viewer::new()
    }
}

impl Viewer {
    pub fn new() -> Viewer {
        Viewer {
            codec: ViewerCodec::new("host"),
            buf: BytesMut::new(),
            verifier: Verifier::new(Limits::default(), Goal::default(), false),
            got: Vec::new(),
            ended: None,
            asked: VecDeque::new(),
            hashes: BTreeMap::new(),
            violation: None,
        }
    }

    fn violate(&mut self, what: String) {
        self.violation.get_or_insert(what);
    }

    pub fn read(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        loop {
            let msg = match self.codec.decode(&mut self.buf) {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(e) => return self.violate(format!("the viewer could not read: {e}")),
            };
            match msg {
                ToViewer::Welcome(_) => self.got.push("welcome".into()),
                ToViewer::Snapshot { kind, world } => {
                    self.got.push(format!("snapshot {:?} {}", kind, world.step));
                    self.verifier.handle(match kind {
                        SnapshotKind::Attach => Input::Attached {
                            world,
                            connection: 1,
                        },
                        SnapshotKind::Resync => Input::Resync(world),
                    });
                }
                ToViewer::Record(r) => {
                    self.got.push(format!("record {}", r.step));
                    let mut ops = Vec::new();
                    if let Err(e) = for_each_op("input", &r.input, 0, |op| ops.push(op)) {
                        self.violate(format!("record {}: {e}", r.step));
                        continue;
                    }
                    self.hashes.insert(r.step + 1, r.hash);
                    let rec = RecordRef {
                        step: r.step,
                        hash: r.hash,
                        input: &r.input,
                    };
                    if self.verifier.handle_record(rec, &ops).is_none() {
                        self.violate(format!(
                            "record {} not verified (the viewer's world is at step {}): out of order or twice",
                            r.step,
                            self.verifier.world().step
                        ));
                    }
                }
                ToViewer::Heartbeat { host_step } => {
                    self.got.push(format!("heartbeat {host_step}"))
                }
                ToViewer::End(e) => {
                    self.got.push(format!("end {}", e.reason.name()));
                    self.ended = Some(e.clone());
                    self.verifier.handle(Input::End(e));
                }
                ToViewer::DriftReply(r) => {
                    self.got.push(format!("drift reply {}", r.step));
                    match self.asked.pop_front() {
                        Some(s) if s != r.step => self.violate(format!(
                            "the drift reply names step {}, the request step {s}",
                            r.step
                        )),
                        None => {
                            self.violate(format!("a drift reply for step {} never asked", r.step))
                        }
                        Some(_) => {}
                    }
                    if r.status == DriftStatus::Held {
                        match &r.world {
                            Some(w) if w.step != r.step => self.violate(format!(
                                "the drift reply for step {} holds the world at step {}",
                                r.step, w.step
                            )),
                            Some(w) => {
                                if let Some(&h) = self.hashes.get(&w.step) {
                                    if w.hash() != h {
                                        self.violate(format!(
                                            "the drift reply for step {} holds a world whose hash is not the host's",
                                            r.step
                                        ));
                                    }
                                }
                            }
                            None => self.violate(format!(
                                "the drift reply for step {} holds no world",
                                r.step
                            )),
                        }
                    }
                }
            }
        }
    }
}

/// The pair: the host's connection machine and a viewer, joined by a wire that delivers
/// every write whole, or holds it while the viewer does not read (`blocked`).
pub struct Pair {
    pub conn: Conn,
    pub host: Host,
    pub viewer: Viewer,
    pub now: Millis,
    pub events: Vec<Event>,
    /// Writes the socket does not take (a viewer that stopped reading).
    pub blocked: bool,
    /// The write the socket has not taken yet.
    pub held: Option<Vec<EncodedFrame>>,
    /// The bytes the viewer has not acknowledged at a time (none: it took everything).
    pub unacked: Option<fn(Millis) -> u64>,
}

impl Pair {
    pub fn new(queue: usize) -> Pair {
        Pair {
            conn: Conn::new(config(), PEER, 0),
            host: Host::new(queue),
            viewer: Viewer::new(),
            now: 0,
            events: Vec::new(),
            blocked: false,
            held: None,
            unacked: None,
        }
    }

    /// Plants a fault in the connection, both rings and the verifier.
    #[cfg(feature = "plants")]
    pub fn plant(&mut self, plant: crate::session::Plant) {
        self.viewer.verifier.plant(plant);
        self.conn.plant(plant);
        self.host.records.plant(plant);
        self.host.worlds.plant(plant);
    }

    /// Sends the hello and runs: admitted, welcome and snapshot read.
    pub fn attach(&mut self) {
        self.conn.handle_bytes(&hello(VERSION, b""), self.now);
        self.run();
    }

    /// An attached pair.
    pub fn attached(queue: usize) -> Pair {
        let mut p = Pair::new(queue);
        p.attach();
        p
    }

    /// The viewer sends a drift request for `step`.
    pub fn ask_drift(&mut self, step: u64) {
        self.viewer.asked.push_back(step);
        let req = frame(&ToHost::DriftRequest { step });
        self.conn.handle_bytes(&req, self.now);
    }

    /// Runs the connection until it waits: events kept, requests answered from the host,
    /// writes delivered to the viewer.
    pub fn run(&mut self) {
        for _ in 0..10_000 {
            while let Some(e) = self.conn.poll_event() {
                if matches!(e, Event::Accepted) {
                    match self.host.join(1) {
                        Some(j) => self.conn.handle_join(Some(j)),
                        None => self.conn.handle_stream_over(self.host.ended.clone()),
                    }
                }
                self.events.push(e);
            }
            if self.conn.is_closed() {
                return;
            }
            if !self.blocked {
                let t = match self.held.take() {
                    Some(frames) if self.conn.is_writing() => Some(frames),
                    _ => self
                        .conn
                        .poll_transmit(self.now, self.host.world.step)
                        .map(|t| t.frames),
                };
                if let Some(frames) = t {
                    for f in &frames {
                        self.viewer.read(&f.0);
                    }
                    self.conn.handle_sent(frames, self.now);
                    continue;
                }
            } else if self.conn.is_writing() {
                return;
            } else if let Some(t) = self.conn.poll_transmit(self.now, self.host.world.step) {
                // Handed out, not taken while the viewer does not read: the write waits.
                self.held = Some(t.frames);
                return;
            }
            match self.conn.poll_request() {
                Some(Request::Take { wait }) => {
                    let mut position = self.conn.position();
                    let mut out = std::mem::take(self.conn.take_buffer());
                    let take = self
                        .host
                        .records
                        .take(
                            &mut position,
                            super::BATCH,
                            self.host.ended.as_ref(),
                            &mut out,
                        )
                        .take;
                    *self.conn.take_buffer() = out;
                    let nothing = matches!(take, Take::Nothing);
                    self.conn.handle_take(take, position, self.host.world.step);
                    if nothing && wait {
                        // Caught up: waits for records, bytes or the time.
                        return;
                    }
                }
                Some(Request::Join) => {
                    let j = self.host.join(self.conn.id());
                    self.conn.handle_join(j);
                }
                Some(Request::Drift(step)) => {
                    let reply = self.host.worlds.held(step).answer();
                    self.conn.handle_drift_reply(reply);
                }
                // In memory the viewer has taken every byte sent.
                Some(Request::Unacknowledged) => {
                    let left = self.unacked.map_or(0, |f| f(self.now));
                    self.conn.handle_unacknowledged(left, self.now)
                }
                None => return,
            }
        }
        self.viewer
            .violate("the connection never waited (10 000 turns)".into());
    }

    /// Moves the clock to `now`, firing what is due on the way.
    pub fn advance(&mut self, now: Millis) {
        while let Some(at) = self.conn.poll_timeout().filter(|&at| at <= now) {
            self.now = self.now.max(at);
            self.conn.handle_timeout(self.now);
            self.run();
        }
        self.now = now;
        self.run();
    }

    /// How the connection left, once it has.
    pub fn left(&self) -> Option<&Left> {
        self.events.iter().find_map(|e| match e {
            Event::Left(l) => Some(l),
            _ => None,
        })
    }
}

/// The stream's end after `step` steps.
pub fn finished(step: u64) -> End {
    End {
        reason: EndReason::Finished,
        text: format!("the host ran its {step} steps"),
        host_step: step,
    }
}

/// What one seeded session did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The first invariant broken, if any.
    pub violation: Option<String>,
    /// An FNV-1a digest of the session's events: two runs of a seed give the same.
    pub digest: u64,
    /// The session's events, one a line (with `trace`).
    pub trace: String,
    /// Steps the host took.
    pub steps: u64,
    /// Steps the viewer verified.
    pub verified: u64,
}

/// The turns of a session before its finale.
const TURNS: usize = 250;

/// A tiny xorshift: the session's every choice, from its seed.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

struct Log {
    digest: u64,
    trace: Option<String>,
}

impl Log {
    fn event(&mut self, now: Millis, what: std::fmt::Arguments<'_>) {
        let line = format!("{now:>8} {what}");
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.digest ^= u64::from(b);
            self.digest = self.digest.wrapping_mul(0x0100_0000_01b3);
        }
        if let Some(t) = &mut self.trace {
            t.push_str(&line);
            t.push('\n');
        }
    }
}

/// One seeded session of the real connection and the real verifier: the host steps in
/// bursts, the viewer stops reading for up to 4 s (under the stall timeout), sends its
/// heartbeat at least once a second and now and then a drift request, and time moves on
/// in steps up to 0.7 s; a queue of 16 (resyncs) or 200 (batches of 64 with more behind
/// them). Then either the viewer goes silent, or the host steps a last burst and ends the
/// stream. Checked: every record the viewer receives is verified (none out of order,
/// none twice), every drift reply answers its request with the host's world at that
/// step, a viewer that keeps its heartbeats is never judged silent, once the host has
/// stopped stepping the viewer is brought to its step, a silent viewer is ended `silent`
/// when its silence timeout is over and not before, and the end comes after every record
/// owed.
pub fn session(seed: u64, trace: bool) -> Outcome {
    session_with(seed, trace, |_| {})
}

/// [`session`] with a fault planted in the connection and the rings.
#[cfg(feature = "plants")]
pub fn planted_session(seed: u64, plant: crate::session::Plant, trace: bool) -> Outcome {
    session_with(seed, trace, |p| p.plant(plant))
}

fn session_with(seed: u64, trace: bool, prepare: impl FnOnce(&mut Pair)) -> Outcome {
    let mut log = Log {
        digest: 0xcbf2_9ce4_8422_2325,
        trace: trace.then(String::new),
    };
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let queue = if seed.is_multiple_of(2) { 16 } else { 200 };
    let mut p = Pair::new(queue);
    prepare(&mut p);
    log.event(0, format_args!("pair seed {seed} queue {queue}"));
    p.attach();
    let violation = drive(&mut p, &mut x, &mut log).err();
    if let Some(v) = &violation {
        log.event(p.now, format_args!("VIOLATION {v}"));
    }
    Outcome {
        violation,
        digest: log.digest,
        trace: log.trace.unwrap_or_default(),
        steps: p.host.world.step,
        verified: p.viewer.verifier.verified(),
    }
}

fn drive(p: &mut Pair, x: &mut u64, log: &mut Log) -> Result<(), String> {
    let silence = config().silence_ms;
    let mut last_beat = 0;
    let mut blocked_until = None;
    let check = |p: &Pair| -> Result<(), String> {
        match &p.viewer.violation {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    };
    for _ in 0..TURNS {
        let r = next(x);
        let now = p.now;
        match r % 8 {
            0 | 1 => {
                let n = 1 + (r >> 8) as usize % 24;
                log.event(now, format_args!("host steps {n}"));
                p.host.step(n);
            }
            2 => {
                let n = 1 + (r >> 8) as usize % 150;
                log.event(now, format_args!("host steps {n}"));
                p.host.step(n);
            }
            3 | 4 => p.advance(now + (r >> 8) % 700),
            5 if blocked_until.is_none() => {
                let until = now + (r >> 8) % 4_000;
                log.event(now, format_args!("viewer stops reading until {until}"));
                p.blocked = true;
                blocked_until = Some(until);
            }
            6 if (r >> 8).is_multiple_of(16) => {
                let step = (r >> 12) % (p.host.world.step + 1);
                log.event(now, format_args!("viewer asks for drift at step {step}"));
                p.ask_drift(step);
            }
            _ => {}
        }
        if blocked_until.is_some_and(|t| p.now >= t) {
            blocked_until = None;
            p.blocked = false;
        }
        if p.now >= last_beat + 900 {
            p.conn.handle_bytes(&heartbeat(p.conn.step()), p.now);
            last_beat = p.now;
        }
        p.run();
        check(p)?;
        if p.conn.is_closed() || p.viewer.ended.is_some() {
            return Err(format!(
                "a viewer that kept its heartbeats was ended: {:?}, {:?}",
                p.viewer.ended.as_ref().map(|e| e.reason.name()),
                p.left().map(|l| l.to_string())
            ));
        }
    }
    p.blocked = false;
    p.run();
    check(p)?;
    let host = p.host.world.step;
    if p.conn.step() != host || p.viewer.verifier.world().step != host {
        return Err(format!(
            "the viewer was not brought to the host's step {host}: the connection at {}, the viewer's world at {}",
            p.conn.step(),
            p.viewer.verifier.world().step
        ));
    }
    log.event(p.now, format_args!("viewer at the host's step {host}"));
    let r = next(x);
    if r.is_multiple_of(3) {
        // The viewer goes silent: ended `silent` at its last message plus the timeout.
        p.conn.handle_bytes(&heartbeat(p.conn.step()), p.now);
        let last = p.now;
        log.event(last, format_args!("viewer goes silent"));
        p.advance(last + silence - 1);
        check(p)?;
        if let Some(e) = &p.viewer.ended {
            return Err(format!(
                "the viewer was ended {} before its silence timeout",
                e.reason.name()
            ));
        }
        p.advance(last + silence + 100);
        check(p)?;
        match &p.viewer.ended {
            Some(e) if e.reason == EndReason::Silent => {}
            other => {
                return Err(format!(
                    "a viewer silent for {} ms was not ended silent (got {:?})",
                    silence + 100,
                    other.as_ref().map(|e| e.reason.name())
                ))
            }
        }
        log.event(p.now, format_args!("viewer ended silent"));
    } else {
        // A last burst, then the end: after every record owed.
        let n = 1 + (r >> 8) as usize % p.host.queue;
        p.host.step(n);
        let host = p.host.world.step;
        p.host.ended = Some(finished(host));
        log.event(
            p.now,
            format_args!("host steps {n} and ends at step {host}"),
        );
        p.run();
        check(p)?;
        match &p.viewer.ended {
            Some(e) if e.reason == EndReason::Finished => {}
            other => {
                return Err(format!(
                    "the host's end did not reach the viewer (got {:?})",
                    other.as_ref().map(|e| e.reason.name())
                ))
            }
        }
        let at = p.viewer.verifier.world().step;
        if at != host {
            return Err(format!(
                "the end came before the records owed: the viewer's world at step {at}, the host's at {host}"
            ));
        }
        log.event(p.now, format_args!("viewer ended at step {at}"));
    }
    Ok(())
}
