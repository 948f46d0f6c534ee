//! The session's NATS side (docs/reliability.md, "The simulated JetStream"): the host's
//! real publisher machine ([`ostm_protocol::serve::publish::Publisher`]) publishing to the
//! simulated JetStream ([`crate::jetstream`]), and each NATS viewer
//! reading it through the real reader machine ([`ostm_protocol::reader::nats::Reader`]),
//! its arrivals handed to the real verifier through [`Arrival`] as the viewer's driver
//! hands them (viewer/src/live/nats.rs and session.rs), with a spool between them that
//! has a bound.
//!
//! The cluster's faults (a node restarted, the leader killed, every node killed at once, a
//! reader's node killed for good), acknowledgements lost or late, a publish sent twice,
//! messages delivered again and a stray publisher's keyframe are injected from the seed
//! ([`inject`]). The NATS invariants are checked as the run goes: every message id names
//! one content in a session, a repeat is stored once, and the host never publishes a
//! record after a gap it knows of without the keyframe that closes it; at the end
//! ([`crate::check`]) a gap the cluster made (an acknowledged message lost) is named by
//! every viewer it passed.

use crate::jetstream::{self, Cluster};
use crate::viewer::{self, Transport};
use crate::{Fault, Sim, TICK_MS};
use ostm_protocol::reader::nats::{self as reader, Reader};
use ostm_protocol::reader::Arrival;
use ostm_protocol::serve::publish::{self, Kind, Publish, Publisher};
use ostm_protocol::session::{Plant, Stop};
use ostm_protocol::sim::op::decode_input;
use ostm_protocol::wire::nats::{duplicate_window, keyframe, Session};
use ostm_protocol::wire::RecordRef;
use ostm_protocol::wire::{End, HostCodec, Record, SnapshotKind, ToViewer};
use ostm_protocol::World;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Steps between two keyframes (`--keyframe-every`) in most runs; in one run in three
/// (not in liveness mode) [`KEYFRAME_RARELY`], so that the keyframes that close a gap the
/// host knows of are the only ones.
pub const KEYFRAME_EVERY: u64 = 40;
/// Steps between two keyframes in the other runs.
pub const KEYFRAME_RARELY: u64 = 100_000;
/// Items the host's feed holds (its bound: a step that finds it full is dropped) in one
/// run in two (not in liveness mode): a few seconds of an outage fill it. The real host's
/// holds 65 536, minutes at its rate.
pub const FEED_SMALL: usize = 256;
/// Items the host's feed holds in the other runs: more than the steps of the longest
/// outage and the 5 s its acknowledgements then take to time out.
pub const FEED: usize = 4096;
/// Publishes awaiting their acknowledgement at most (the real host's: 1 024).
pub const IN_FLIGHT: usize = 64;
/// Messages the publisher sends a tick at most.
pub const SEND_PER_TICK: usize = 8;
/// Ticks the host tries to hand the end over to a full feed before it gives up (1 s).
pub const END_TRIES: u32 = 100;
/// Messages a reader takes from its consumer a tick at most.
pub const READ_PER_TICK: usize = 32;

/// An acknowledgement on its way to the host.
#[derive(Debug)]
struct AckOnWay {
    at: u64,
    token: u64,
}

/// The NATS side of a run: the cluster, the host's publication, the checks' ledger.
#[derive(Debug)]
pub struct Nats {
    pub cluster: Cluster,
    pub session: Session,
    pub publisher: Publisher,
    /// The end, while the feed has no room for it, and the tries left.
    end: Option<(End, u32)>,
    /// The node the host's client is connected to, or reconnecting until a tick.
    host_node: usize,
    host_reconnect_at: Option<u64>,
    /// The host's connection takes no publish until then (a server slow to read).
    host_stalled_until: u64,
    acks: Vec<AckOnWay>,
    /// The next acknowledgements lost, and made late.
    lose_acks: u32,
    late_acks: u32,
    /// Every message id published: a digest of the content it names.
    ids: BTreeMap<String, u64>,
    /// The host knows steps from this one on may be missing (dropped, failed, a lost
    /// connection): a record at or past it needs a keyframe published first.
    owed_from: Option<u64>,
    /// Record messages published: id → (first step, steps), to name what a loss took.
    records: BTreeMap<String, (u64, u64)>,
    /// Steps of acknowledged messages the cluster lost: a gap the host never dropped.
    pub lost_steps: BTreeSet<u64>,
    lost_seen: usize,
    /// The last message sent, for a publish sent twice.
    last_sent: Option<Publish>,
    /// The end's first publish: its token and tick; its publishes in all.
    end_first: Option<(u64, u64)>,
    end_sends: u32,
    /// What befell the end's first publish, when it was not acknowledged in time (not
    /// stored, or its acknowledgement lost or late): its viewers must still get the end.
    end_trouble: Option<String>,
    /// The tick an acknowledgement of the end reached the host.
    end_acked: Option<u64>,
    /// Each NATS viewer's reading, by the viewer's index.
    pub readings: Vec<Option<Reading>>,
    stray: u64,
}

/// What the reader delivered, not yet taken by the verifier.
#[derive(Debug)]
struct Spool {
    items: VecDeque<Arrival>,
    /// Records it holds at most (its `--spool-max`).
    max: usize,
    records: usize,
}

/// A NATS viewer's reading: its reader machine, the node it reads through, its consumer
/// and its spool.
#[derive(Debug)]
pub struct Reading {
    reader: Option<Reader>,
    node: usize,
    /// Its client is reconnecting to another node until then.
    reconnect_at: Option<u64>,
    /// The next stream sequence its consumer delivers.
    next_seq: u64,
    spool: Spool,
    /// The reader is stopped (the end taken, a refusal, silence).
    done: bool,
}

impl Reading {
    pub fn new(node: usize, spool_max: usize) -> Reading {
        Reading {
            reader: None,
            node,
            reconnect_at: None,
            next_seq: 0,
            spool: Spool {
                items: VecDeque::new(),
                max: spool_max,
                records: 0,
            },
            done: false,
        }
    }
}

impl Nats {
    /// Whether viewer `i`'s reader took sequences past the stream's last, and so skips
    /// the messages the stream numbers with them now (the cluster lost its tail).
    pub fn stranded(&self, i: usize) -> Option<(u64, u64)> {
        let r = self.readings.get(i)?.as_ref()?;
        let taken = r.reader.as_ref()?.last_seq();
        let last = self.cluster.last_seq();
        (!r.done && taken > last).then_some((taken, last))
    }
}

/// The session's NATS side, when a viewer reads through NATS: the cluster from the seed,
/// each NATS viewer's node and spool bound.
pub fn setup(sim: &mut Sim) {
    if !sim.nats {
        return;
    }
    let every = if !sim.cfg.liveness && sim.one_in(3) {
        KEYFRAME_RARELY
    } else {
        KEYFRAME_EVERY
    };
    let feed = if !sim.cfg.liveness && sim.one_in(2) {
        FEED_SMALL
    } else {
        FEED
    };
    let mut n = new(&mut |k| sim.below(k), every, feed);
    if let Some(p) = sim.cfg.publish_plant {
        n.publisher.plant(p);
    }
    let c = &n.cluster.cfg;
    let what = format!(
        "nats: a feed of {feed}, a keyframe every {every} steps, a cluster of {} nodes, {} replicas on {:?}, max age {} ms, max bytes {}, duplicate window {} ms, flush every {} ms, election {} ms, followers copy {} a tick",
        c.nodes,
        c.replicas,
        n.cluster.replicas(),
        c.max_age,
        c.max_bytes,
        c.duplicate_window,
        c.flush_every,
        c.election,
        c.follow_rate
    );
    let nodes = c.nodes as u64;
    n.readings = sim.viewers.iter().map(|_| None).collect();
    sim.stream = Some(n);
    sim.event(what);
    for i in 0..sim.viewers.len() {
        if sim.viewers[i].transport == Transport::Nats {
            let node = sim.below(nodes) as usize;
            let spool = if !sim.cfg.liveness && sim.one_in(3) {
                40 + sim.below(300) as usize
            } else {
                usize::MAX
            };
            sim.event(format!(
                "viewer {i} reads through node {node}, spool bound {spool} records"
            ));
            if let Some(n) = sim.stream.as_mut() {
                n.readings[i] = Some(Reading::new(node, spool));
            }
        }
    }
}

/// The cluster and the publication, from the seed.
fn new(sim_rng: &mut impl FnMut(u64) -> u64, keyframe_every: u64, feed: usize) -> Nats {
    let nodes = if sim_rng(2) == 0 { 1 } else { 3 };
    let replicas = if nodes == 3 && sim_rng(3) != 0 { 3 } else { 1 };
    let max_age = 2_000 + sim_rng(18_000);
    let max_bytes = if sim_rng(4) == 0 {
        8_192 + sim_rng(57_344)
    } else {
        1 << 20
    };
    let cfg = jetstream::Config {
        nodes,
        replicas,
        max_age,
        max_bytes,
        duplicate_window: duplicate_window(Duration::from_millis(max_age)).as_millis() as u64,
        flush_every: if sim_rng(4) == 0 {
            500 + sim_rng(2_500)
        } else {
            20 + sim_rng(300)
        },
        election: 150 + sim_rng(1_350),
        follow_rate: 1 + sim_rng(8) as usize,
    };
    let first = sim_rng(nodes as u64) as usize;
    let session = Session::new("sim").unwrap_or_else(|_| unreachable!("a valid name"));
    Nats {
        cluster: Cluster::new(cfg, first),
        publisher: Publisher::new(publish::Config {
            feed,
            in_flight: IN_FLIGHT,
            ..publish::Config::new(session.clone(), "run0".into(), keyframe_every, 0)
        }),
        end: None,
        session,
        host_node: sim_rng(nodes as u64) as usize,
        host_reconnect_at: None,
        host_stalled_until: 0,
        acks: Vec::new(),
        lose_acks: 0,
        late_acks: 0,
        ids: BTreeMap::new(),
        owed_from: None,
        records: BTreeMap::new(),
        lost_steps: BTreeSet::new(),
        lost_seen: 0,
        last_sent: None,
        end_first: None,
        end_sends: 0,
        end_trouble: None,
        end_acked: None,
        readings: Vec::new(),
        stray: 0,
    }
}

fn digest(subject: &str, payload: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in subject.bytes().chain(payload.iter().copied()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Before the host's step from its world: a keyframe when due.
pub fn before_step(sim: &mut Sim) {
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    n.publisher.handle_before_step(&sim.host.world);
}

/// The host's record of a step.
pub fn record(sim: &mut Sim, r: &Record) {
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    let frame = HostCodec::encode_frame(&ToViewer::Record(r.clone()))
        .map(|f| f.0)
        .unwrap_or_default();
    let dropped = n.publisher.counts().dropped;
    n.publisher.handle_record(r.step, frame);
    if n.publisher.counts().dropped > dropped {
        owe(n, r.step + 1);
    }
}

/// The host's end; in one faulty run in four the stream's leader is killed as the host
/// stops (a host stopped while the stream has no leader: its end's first publish is lost).
pub fn end(sim: &mut Sim, end: End) {
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    n.end = Some((end, END_TRIES));
    if !sim.faulty() || !sim.one_in(4) {
        return;
    }
    let down = 50 + sim.below(250);
    let until = sim.until(down) * TICK_MS;
    let lazy = sim.one_in(2);
    let ms = sim.now * TICK_MS;
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    if let Some(l) = n.cluster.leader() {
        n.cluster.kill(l, ms, Some(until), lazy);
        sim.fault(
            Fault::LeaderKilled,
            format!("node {l} for {down} ticks, as the host stops"),
        );
    }
}

fn owe(n: &mut Nats, step: u64) {
    n.owed_from = Some(n.owed_from.map_or(step, |s| s.min(step)));
}

/// One tick of the NATS side's host half: the client's connection, the publishes, the
/// acknowledgements, the cluster's time.
pub fn host_tick(sim: &mut Sim) {
    let now = sim.now;
    let ms = now * TICK_MS;
    let host_step = sim.host.world.step;
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    n.cluster.tick(ms);
    // The host's client: its node gone, it reconnects to another after a while.
    if n.host_reconnect_at.is_none() && !n.cluster.is_up(n.host_node) {
        n.host_reconnect_at = Some(now + 20 + (now % 80));
        n.publisher.handle_disconnected();
        owe(n, host_step);
        n.acks.clear();
    }
    if let Some(t) = n.host_reconnect_at {
        // Answers to the connection that dropped are lost.
        while n.cluster.poll_ack().is_some() {}
        if now < t {
            return;
        }
        let Some(up) = (0..n.cluster.nodes())
            .find(|&k| n.cluster.is_up((n.host_node + 1 + k) % n.cluster.nodes()))
        else {
            return;
        };
        n.host_node = (n.host_node + 1 + up) % n.cluster.nodes();
        n.host_reconnect_at = None;
    }
    // The end, once the feed has room for it (a second at most), then nothing more.
    if let Some((e, tries)) = n.end.take() {
        if n.publisher.handle_end(e.clone()) || tries == 0 {
            n.publisher.handle_feed_closed();
        } else {
            n.end = Some((e, tries - 1));
        }
    }
    // Acknowledgements made, on their way (lost, answered with an error, or late, as
    // the faults say).
    while let Some(a) = n.cluster.poll_ack() {
        let first_end = n.end_first.is_some_and(|(t, _)| t == a.token);
        if first_end && n.lose_acks + n.late_acks > 0 && n.end_trouble.is_none() {
            let what = if n.lose_acks > 0 { "lost" } else { "late" };
            n.end_trouble = Some(format!("was stored, its acknowledgement {what}"));
        }
        if n.lose_acks > 0 {
            n.lose_acks -= 1;
            if n.lose_acks % 2 == 1 {
                n.publisher
                    .handle_ack_failed(a.token, "the stream answered 503: no responders".into());
            }
            continue;
        }
        let delay = if n.late_acks > 0 {
            n.late_acks -= 1;
            publish::ACK_TIMEOUT_MS / TICK_MS + 20
        } else {
            1 + a.seq % 3
        };
        n.acks.push(AckOnWay {
            at: now + delay,
            token: a.token,
        });
    }
    let mut k = 0;
    while k < n.acks.len() {
        if n.acks[k].at <= now {
            let a = n.acks.remove(k);
            if n.end_acked.is_none() && n.publisher.is_repeating_end() {
                n.publisher.handle_acked(a.token);
                if !n.publisher.is_repeating_end() {
                    n.end_acked = Some(now);
                }
            } else {
                n.publisher.handle_acked(a.token);
            }
        } else {
            k += 1;
        }
    }
    if n.publisher.poll_timeout().is_some_and(|t| t <= ms) {
        n.publisher.handle_timeout(ms);
    }
    // The end's first publish not acknowledged in time (whatever became of it).
    if let Some((_, at)) = n.end_first {
        let due = at + publish::ACK_TIMEOUT_MS / TICK_MS;
        if now > due && n.end_trouble.is_none() && n.end_acked.is_none_or(|t| t > due) {
            n.end_trouble = Some("was not acknowledged within 5 s".into());
        }
    }
    // A failed message: the host knows its steps may be missing.
    while let Some(e) = n.publisher.poll_event() {
        if let publish::Event::Failed { .. } = e {
            owe(n, host_step);
        }
    }
    let sends = if now < n.host_stalled_until {
        0
    } else {
        SEND_PER_TICK
    };
    for _ in 0..sends {
        let Some(m) = sim
            .stream
            .as_mut()
            .and_then(|n| n.publisher.poll_transmit(ms))
        else {
            break;
        };
        sent(sim, m);
        if sim.violation.is_some() {
            return;
        }
    }
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    // What the cluster lost of what it acknowledged: the steps those messages held.
    let fresh = &n.cluster.lost_acked[n.lost_seen..];
    let said = fresh.first().zip(fresh.last()).map(|(a, b)| {
        format!(
            "the cluster lost {} acknowledged messages, at sequences {} to {}",
            fresh.len(),
            a.seq,
            b.seq
        )
    });
    for lost in fresh {
        if let Some(&(first, steps)) = n.records.get(&lost.id) {
            n.lost_steps.extend(first..first + steps);
        }
    }
    n.lost_seen = n.cluster.lost_acked.len();
    if let Some(line) = said {
        sim.event(line);
    }
    if let Some(why) = sim.stream.as_mut().and_then(|n| n.cluster.violations.pop()) {
        sim.violate(why);
    }
}

/// A message the publisher sent: checked, then to the cluster.
fn sent(sim: &mut Sim, m: Publish) {
    let ms = sim.now * TICK_MS;
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    let d = digest(&m.subject, &m.payload);
    let mut why = None;
    match n.ids.get(&m.id) {
        Some(&had) if had != d => {
            why = Some(format!(
                "the host published the message id {} for two contents (the second on {}, step {})",
                m.id, m.subject, m.step
            ));
        }
        _ => {
            n.ids.insert(m.id.clone(), d);
        }
    }
    let key = m.kind == Kind::Keyframe;
    let closes = key && n.owed_from.is_some_and(|s| m.step >= s);
    if closes {
        n.owed_from = None;
    }
    if m.steps > 0 {
        if let Some(s) = n.owed_from.filter(|&s| m.step + m.steps > s) {
            why = why.or(Some(format!(
                "the host published step {} after a gap it knew of from step {s} without the keyframe that closes it",
                (m.step + m.steps - 1).max(s)
            )));
        }
        n.records.insert(m.id.clone(), (m.step, m.steps));
    }
    if m.kind == Kind::End {
        n.end_sends += 1;
        if n.end_first.is_none() {
            n.end_first = Some((m.token, sim.now));
            if n.host_reconnect_at.is_some() || n.cluster.leader().is_none() {
                n.end_trouble = Some(format!(
                    "was not stored ({})",
                    if n.host_reconnect_at.is_some() {
                        "the host's client was reconnecting"
                    } else {
                        "the stream had no leader"
                    }
                ));
            }
        }
    }
    if n.host_reconnect_at.is_none() {
        n.cluster
            .publish(ms, m.token, &m.subject, &m.id, m.payload.clone());
    }
    let step = m.step;
    n.last_sent = Some(m);
    if let Some(why) = why {
        sim.violate(why);
        return;
    }
    // A stray publisher on the session: a keyframe of another world at the same step,
    // after the host's.
    if closes && sim.faulty() && all_attached(sim) && sim.one_in(12) {
        stray_keyframe(sim, step, "after the host's");
    }
}

fn all_attached(sim: &Sim) -> bool {
    sim.viewers
        .iter()
        .all(|v| v.transport != Transport::Nats || v.core.attached_at().is_some())
}

fn stray_keyframe(sim: &mut Sim, step: u64, detail: &str) {
    let mut setup = sim.host.setup;
    setup.seed ^= 0x2545;
    let mut w = World::new(setup, None);
    w.step = step;
    let ms = sim.now * TICK_MS;
    let Some(n) = sim.stream.as_mut() else {
        return;
    };
    n.stray += 1;
    let payload = HostCodec::encode_frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: w,
    })
    .map(|f| f.0)
    .unwrap_or_default();
    let id = format!("stray-key-{}", n.stray);
    n.cluster
        .publish(ms, u64::MAX - n.stray, &n.session.keyframes(), &id, payload);
    sim.foreign_keyframes += 1;
    sim.fault(Fault::ForeignKeyframe, format!("at step {step}, {detail}"));
}

/// Maybe a fault of the NATS side (`kind` in 0..4), chosen by the seed.
pub fn inject(sim: &mut Sim, kind: u64) {
    if sim.stream.is_none() {
        return;
    }
    let now = sim.now;
    let ms = now * TICK_MS;
    match kind {
        0 => {
            let down = 3 + sim.below(150);
            let until = sim.until(down) * TICK_MS;
            let which = sim.below(8);
            let Some(n) = sim.stream.as_mut() else {
                return;
            };
            let nodes = n.cluster.nodes();
            let up: Vec<usize> = (0..nodes).filter(|&k| n.cluster.is_up(k)).collect();
            if up.is_empty() {
                return;
            }
            match which {
                0 if up.len() == nodes => {
                    for k in 0..nodes {
                        n.cluster.kill(k, ms, Some(until), true);
                    }
                    sim.fault(Fault::AllNodesKilled, format!("for {down} ticks"));
                }
                1 | 2 if n.cluster.leader().is_some() => {
                    let l = n.cluster.leader().unwrap_or(0);
                    n.cluster.kill(l, ms, Some(until), which == 1);
                    sim.fault(Fault::LeaderKilled, format!("node {l} for {down} ticks"));
                }
                3 if nodes == 3 => {
                    // A reader's node, for good: the reader moves to another.
                    let readers: Vec<usize> = n.readings.iter().flatten().map(|r| r.node).collect();
                    let Some(&node) = readers.first() else {
                        return;
                    };
                    let Some(n) = sim.stream.as_mut() else {
                        return;
                    };
                    if n.cluster.is_up(node) && n.cluster.can_lose_for_good(node) {
                        n.cluster.kill(node, ms, None, false);
                        sim.fault(Fault::NodeGone, format!("node {node}"));
                    }
                }
                _ => {
                    let k = up[(now as usize) % up.len()];
                    n.cluster.kill(k, ms, Some(until), which == 7);
                    sim.fault(Fault::NodeRestart, format!("node {k} for {down} ticks"));
                }
            }
        }
        1 => {
            let what = sim.below(4);
            let count = 1 + sim.below(4) as u32;
            let stall = 20 + sim.below(280);
            let until = sim.until(stall);
            let Some(n) = sim.stream.as_mut() else {
                return;
            };
            match what {
                0 => {
                    n.lose_acks += count;
                    sim.fault(Fault::AckLost, format!("the next {count}"));
                }
                1 => {
                    n.late_acks += count;
                    sim.fault(Fault::AckLate, format!("the next {count}"));
                }
                2 => {
                    n.host_stalled_until = until;
                    sim.fault(Fault::PublishStall, format!("for {stall} ticks"));
                }
                _ => {
                    // The last publish sent again with its id: stored once.
                    if let Some(m) = n.last_sent.clone() {
                        if n.host_reconnect_at.is_none() {
                            n.cluster.publish(
                                ms,
                                u64::MAX / 2 + m.token,
                                &m.subject,
                                &m.id,
                                m.payload,
                            );
                            sim.fault(Fault::Duplicate, format!("message {}", m.id));
                        }
                    }
                }
            }
        }
        2 => {
            // A consumer delivers again from an earlier sequence (a new consumer's).
            let who = sim.below(sim.viewers.len() as u64) as usize;
            let back = 1 + sim.below(6);
            if let Some(r) = reading(sim, who) {
                if r.reader.is_some() && r.next_seq > back {
                    r.next_seq -= back;
                    sim.fault(Fault::Redelivery, format!("viewer {who}, {back} messages"));
                }
            }
        }
        _ => {
            if sim.one_in(3) && all_attached(sim) {
                let step = sim.host.world.step + 1;
                stray_keyframe(sim, step, "anywhere");
            }
        }
    }
}

/// A NATS viewer still reading at the run's end got the host's end, when the end's first
/// publish was not acknowledged in time (no leader as the host stopped, its
/// acknowledgement lost or late): the host publishes the end again until the stream
/// acknowledges it (docs/fan-out.md, "The end").
pub fn end_reached(sim: &mut Sim) {
    let Some(n) = sim.stream.as_ref() else {
        return;
    };
    let (Some(trouble), Some((_, first))) = (n.end_trouble.as_ref(), n.end_first) else {
        return;
    };
    // A viewer paused or slow within the last SILENCE_TICKS had no time to read on.
    let since = sim.now.saturating_sub(crate::SILENCE_TICKS);
    let waiting = (0..sim.viewers.len()).find(|&i| {
        let v = &sim.viewers[i];
        v.reads_nats()
            && v.core.attached_at().is_some()
            && v.paused_until.max(v.slow_until) < since
            && matches!(v.core.stop(), None | Some(Stop::Interrupted))
    });
    if let Some(i) = waiting {
        let why = format!(
            "viewer {i} never got the host's end: its first publish at tick {first} {trouble}; it was published {} times{}",
            n.end_sends,
            n.end_acked
                .map_or(", never acknowledged".into(), |t| format!(", acknowledged at tick {t}"))
        );
        sim.violate(why);
    }
}

/// One tick of NATS viewer `i`: its client's connection, the reader taking what its
/// consumer delivers into the spool, the reader's timers, the verifier taking from the
/// spool.
pub fn viewer_tick(sim: &mut Sim, i: usize) {
    let now = sim.now;
    let ms = now * TICK_MS;
    if now < sim.viewers[i].join_at || now < sim.viewers[i].paused_until {
        return;
    }
    let Some(Nats {
        cluster, readings, ..
    }) = sim.stream.as_mut()
    else {
        return;
    };
    let nodes = cluster.nodes();
    let Some(r) = readings.get_mut(i).and_then(Option::as_mut) else {
        return;
    };
    // The client: its node down, it reconnects to another (up) after a while.
    if r.reconnect_at.is_none() && !cluster.is_up(r.node) {
        r.reconnect_at = Some(now + 20 + (i as u64 * 7 + now) % 60);
    }
    if let Some(t) = r.reconnect_at {
        if now >= t {
            if let Some(k) = (1..=nodes)
                .map(|k| (r.node + k) % nodes)
                .find(|&k| cluster.is_up(k))
            {
                r.node = k;
                r.reconnect_at = None;
            }
        }
    }
    let connected = r.reconnect_at.is_none();
    if r.reader.is_none() {
        if connected {
            attach(sim, i);
        }
        return;
    }
    if connected && !r.done {
        read(sim, i, ms);
    }
    timers(sim, i, ms, connected);
    verify(sim, i);
}

/// Viewer `i`'s reading, if it reads through NATS.
fn reading(sim: &mut Sim, i: usize) -> Option<&mut Reading> {
    sim.stream.as_mut()?.readings.get_mut(i)?.as_mut()
}

/// The viewer joins at the stream's last keyframe (a direct get), as the real one does.
fn attach(sim: &mut Sim, i: usize) {
    let ms = sim.now * TICK_MS;
    let Some(n) = sim.stream.as_ref() else {
        return;
    };
    let keys = n.session.keyframes();
    let Some((seq, payload)) = n.cluster.last_on(&keys) else {
        // No keyframe yet (the real viewer says so and exits 2): it tries again.
        return;
    };
    let name = format!("nats://sim/{}", n.session.name());
    let place = format!("{name}: subject {keys}, stream sequence {seq}");
    let world = match keyframe(&place, &payload) {
        Ok(w) => w,
        Err(e) => {
            sim.violate(format!(
                "viewer {i}: the stream's last keyframe is refused: {e}"
            ));
            return;
        }
    };
    let mut reader = Reader::new(name, n.session.clone(), world.clone(), seq, ms);
    // The verifier's plants that skip a check the reader holds too plant its half.
    let half = match sim.cfg.plant {
        Some(Plant::AcceptDuplicate) => Some(reader::Plant::PassRepeats),
        Some(Plant::SkipGapCheck) => Some(reader::Plant::PassSkips),
        Some(Plant::AcceptForeignKeyframe) => Some(reader::Plant::PassForeignKeyframes),
        _ => None,
    };
    if let Some(p) = sim.cfg.nats_plant.or(half) {
        reader.plant(p);
    }
    let life = sim.host.life;
    let step = world.step;
    let v = &mut sim.viewers[i];
    v.conn = 1;
    v.life = life;
    let Some(r) = sim
        .stream
        .as_mut()
        .and_then(|n| n.readings.get_mut(i))
        .and_then(Option::as_mut)
    else {
        return;
    };
    r.reader = Some(reader);
    r.next_seq = seq + 1;
    r.spool.items.push_back(reader::joined(world, 0, 1));
    sim.event(format!(
        "viewer {i} attaches on nats at the keyframe at step {step} (sequence {seq})"
    ));
}

/// The reader takes what the consumer delivers, into the spool (its bound a gap).
fn read(sim: &mut Sim, i: usize, ms: u64) {
    let Some(Nats {
        cluster, readings, ..
    }) = sim.stream.as_mut()
    else {
        return;
    };
    let Some(r) = readings.get_mut(i).and_then(Option::as_mut) else {
        return;
    };
    let Some(reader) = r.reader.as_mut() else {
        return;
    };
    let mut refused = None;
    for e in cluster.read(r.next_seq, READ_PER_TICK) {
        r.next_seq = e.seq + 1;
        let taken = reader.handle_message(ms, &e.subject, e.seq, &e.payload);
        let mut batch = Vec::new();
        while let Some(ev) = reader.poll_event() {
            if let reader::Event::Deliver(a) = ev {
                batch.push(a);
            }
        }
        spool(&mut r.spool, reader, &mut batch);
        match taken {
            Ok(None) => {}
            Ok(Some(_)) => {
                r.done = true;
                break;
            }
            Err(e) => {
                r.done = true;
                refused = Some(e.to_string());
                break;
            }
        }
    }
    if let Some(why) = refused {
        if let Some(r) = reading(sim, i) {
            r.spool.items.push_back(Arrival::Lost {
                why: why.clone(),
                last: true,
            });
        }
        sim.event(format!("viewer {i}'s reader refuses a message: {why}"));
    }
}

/// A batch of arrivals into the spool, as the viewer's driver pushes them: past the
/// spool's bound the reader is told, and what it says then goes in (the end, last, is
/// kept whatever the spool refused before it).
fn spool(sp: &mut Spool, reader: &mut Reader, batch: &mut Vec<Arrival>) {
    let end = match batch.last() {
        Some(Arrival::End(_)) => batch.pop(),
        _ => None,
    };
    let records = batch
        .iter()
        .filter(|a| matches!(a, Arrival::Record(_)))
        .count();
    if records > 0 && sp.records + records > sp.max {
        batch.clear();
        reader.handle_spool_full(format!(
            "the viewer's spool of records not yet verified reached --spool-max ({} records), {} records behind the host",
            sp.max, sp.records
        ));
        while let Some(ev) = reader.poll_event() {
            if let reader::Event::Deliver(a) = ev {
                batch.push(a);
            }
        }
    }
    for a in batch.drain(..).chain(end) {
        if matches!(a, Arrival::Record(_)) {
            sp.records += 1;
        }
        sp.items.push_back(a);
    }
}

/// The reader's timers: a quiet stream read on with a new consumer (from the stream's
/// last message, when its sequence is at or below the reader's last), silence.
fn timers(sim: &mut Sim, i: usize, ms: u64, connected: bool) {
    let Some(Nats {
        cluster, readings, ..
    }) = sim.stream.as_mut()
    else {
        return;
    };
    let last = (connected && cluster.available()).then(|| cluster.last_seq());
    let Some(r) = readings.get_mut(i).and_then(Option::as_mut) else {
        return;
    };
    let Some(reader) = r.reader.as_mut() else {
        return;
    };
    if reader.poll_timeout().is_none_or(|t| ms < t) {
        return;
    }
    reader.handle_timeout(ms);
    let mut silent = false;
    let mut batch = Vec::new();
    while let Some(ev) = reader.poll_event() {
        match ev {
            reader::Event::Deliver(a) => batch.push(a),
            reader::Event::Resume { from_seq } => {
                r.next_seq = last.map_or(from_seq, |l| reader.handle_stream_last(l));
                reader.handle_wake(ms);
            }
            reader::Event::Silent => silent = true,
        }
    }
    spool(&mut r.spool, reader, &mut batch);
    if silent {
        r.done = true;
        r.spool.items.push_back(Arrival::Lost {
            why: "the session sim on nats://sim sent nothing for 30000 ms".into(),
            last: true,
        });
        sim.event(format!("viewer {i}'s reader gives the session up: silent"));
    }
}

/// The verifier takes what waits in the spool, at the viewer's pace.
fn verify(sim: &mut Sim, i: usize) {
    let now = sim.now;
    let pace = if now < sim.viewers[i].slow_until {
        1
    } else {
        sim.viewers[i].speed * 2
    };
    for _ in 0..pace {
        let Some(a) = reading(sim, i).and_then(|r| r.spool.items.pop_front()) else {
            break;
        };
        take(sim, i, a);
        viewer::events(sim, i);
        if sim.viewers[i].core.is_stopped() || sim.violation.is_some() {
            return;
        }
    }
    // The spool has room again once the verifier has taken what it held.
    if let Some(r) = reading(sim, i) {
        if r.spool.items.is_empty() {
            r.spool.records = 0;
            if let Some(reader) = r.reader.as_mut().filter(|m| m.is_draining()) {
                reader.handle_spool_drained();
            }
        }
    }
}

/// One arrival into the verifier, as the viewer's driver gives it.
fn take(sim: &mut Sim, i: usize, a: Arrival) {
    let life = sim.host.life;
    match a {
        Arrival::Record(r) => {
            if let Some(n) = reading(sim, i) {
                n.spool.records = n.spool.records.saturating_sub(1);
            }
            let ops = decode_input("record", &r.input, 0).unwrap_or_default();
            let at = sim.viewers[i].core.world().step;
            viewer::note_perturbed(sim, i, r.step, at);
            let v = &mut sim.viewers[i];
            if let Some(hash) = v.core.handle_record(RecordRef::from(&r), &ops) {
                viewer::verified(sim, i, RecordRef::from(&r), hash);
            }
        }
        Arrival::Missing { why } => {
            let step = sim.viewers[i].core.world().step;
            sim.event(format!("viewer {i} misses records at step {step}: {why}"));
        }
        Arrival::Gap { to, world, why } => {
            let closed = world.is_some();
            let v = &mut sim.viewers[i];
            let _ = Arrival::Gap { to, world, why }.give(&mut v.core);
            if closed {
                v.life = life;
            }
            sim.event(format!("viewer {i} is given a gap to step {to}"));
        }
        Arrival::End(e) => {
            let v = &mut sim.viewers[i];
            v.waiting_at_end = v.core.is_waiting();
            let _ = Arrival::End(e).give(&mut v.core);
        }
        other => {
            let v = &mut sim.viewers[i];
            let _ = other.give(&mut v.core);
        }
    }
}
