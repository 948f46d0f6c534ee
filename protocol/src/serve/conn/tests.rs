//! The host's connection machine against the viewer's real [`Verifier`], in memory: a
//! host world stepped into a ring of records as the host's hub keeps them, the bytes the
//! connection writes decoded by the viewer's codec and verified by step number.

use super::*;
use crate::serve::ring::Records;
use crate::session::{Goal, Input, Limits, Verifier};
use crate::sim::op::{encode_input, for_each_op};
use crate::sim::scenario::Scenario;
use crate::wire::{Hello, Record, ViewerCodec};
use crate::{Dims, Setup};
use bytes::Bytes;

const PEER: &str = "127.0.0.1:5000";

fn config() -> Config {
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

fn hello(version: u16, token: &[u8]) -> Vec<u8> {
    let h = ToHost::Hello(Hello {
        version,
        role: PeerRole::Viewer as u8,
        token: token.to_vec(),
    });
    crate::wire::ViewerCodec::encode_frame(&h)
        .unwrap()
        .0
        .to_vec()
}

fn heartbeat(viewer_step: u64) -> Vec<u8> {
    ViewerCodec::encode_frame(&ToHost::Heartbeat { viewer_step })
        .unwrap()
        .0
        .to_vec()
}

/// The host's side around the connection: its world, the real ring of the last `queue`
/// records and how the stream ended.
struct Host {
    world: World,
    scenario: Scenario,
    records: Records,
    ended: Option<End>,
}

impl Host {
    fn new(queue: usize) -> Host {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 6,
            seed: 7,
        };
        Host {
            world: World::new(setup, None),
            scenario: Scenario::new(7),
            records: Records::new(queue),
            ended: None,
        }
    }

    fn step(&mut self, n: usize) {
        for _ in 0..n {
            let step = self.world.step;
            let ops = self.scenario.next_input(&self.world);
            self.world.step(&ops);
            let frame = HostCodec::encode_frame(&ToViewer::Record(Record {
                step,
                hash: self.world.hash(),
                input: Bytes::from(encode_input(&ops)),
            }))
            .unwrap();
            self.records.push(self.world.step, frame);
        }
    }

    fn join(&self, id: u64) -> Option<Joined> {
        self.ended.is_none().then(|| Joined {
            id,
            world: self.world.clone(),
            position: self.records.next(),
        })
    }

    /// The hub's take: at most `max` records from `position` on.
    fn take(&self, position: &mut u64, max: usize, out: &mut Vec<EncodedFrame>) -> Take {
        self.records
            .take(position, max, self.ended.as_ref(), out)
            .take
    }
}

/// The viewer's side: its codec and the real verifier.
struct Viewer {
    codec: ViewerCodec,
    buf: BytesMut,
    verifier: Verifier,
    /// Every message, by its name, in order.
    got: Vec<String>,
    ended: Option<End>,
}

impl Viewer {
    fn new() -> Viewer {
        Viewer {
            codec: ViewerCodec::new("host"),
            buf: BytesMut::new(),
            verifier: Verifier::new(Limits::default(), Goal::default(), false),
            got: Vec::new(),
            ended: None,
        }
    }

    fn read(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        while let Some(msg) = self.codec.decode(&mut self.buf).expect("a valid frame") {
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
                    for_each_op("input", &r.input, 0, |op| ops.push(op)).unwrap();
                    let rec = crate::wire::RecordRef {
                        step: r.step,
                        hash: r.hash,
                        input: &r.input,
                    };
                    assert!(
                        self.verifier.handle_record(rec, &ops).is_some(),
                        "record {} verified",
                        r.step
                    );
                }
                ToViewer::Heartbeat { host_step } => {
                    self.got.push(format!("heartbeat {host_step}"))
                }
                ToViewer::End(e) => {
                    self.got.push(format!("end {}", e.reason.name()));
                    self.ended = Some(e.clone());
                    self.verifier.handle(Input::End(e));
                }
                ToViewer::DriftReply(r) => self.got.push(format!("drift reply {}", r.step)),
            }
        }
    }
}

/// The pair: the host's connection machine and a viewer, joined by a wire that delivers
/// every write whole (or, with `room`, at most that many bytes of a write per turn before
/// the write stalls).
struct Pair {
    conn: Conn,
    host: Host,
    viewer: Viewer,
    now: Millis,
    events: Vec<Event>,
    /// Writes the socket does not take (a viewer that stopped reading).
    blocked: bool,
    /// The write the socket has not taken yet.
    held: Option<Vec<EncodedFrame>>,
    /// The bytes the viewer has not acknowledged at a time (none: it took everything).
    unacked: Option<fn(Millis) -> u64>,
}

impl Pair {
    fn new(queue: usize) -> Pair {
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

    /// An attached pair: hello sent, admitted, welcome and snapshot read.
    fn attached(queue: usize) -> Pair {
        let mut p = Pair::new(queue);
        p.conn.handle_bytes(&hello(VERSION, b""), 0);
        p.run();
        p
    }

    /// Runs the connection until it waits: events kept, requests answered from the host,
    /// writes delivered to the viewer.
    fn run(&mut self) {
        for _ in 0..10_000 {
            while let Some(e) = self.conn.poll_event() {
                if matches!(e, Event::Accepted) {
                    let joined = self.host.join(1);
                    match joined {
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
                    let take = self.host.take(&mut position, super::super::BATCH, &mut out);
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
                Some(Request::Drift(step)) => self.conn.handle_drift_reply(DriftReply {
                    step,
                    status: crate::wire::DriftStatus::NotReached,
                    world: None,
                    stages: None,
                }),
                // In memory the viewer has taken every byte sent.
                Some(Request::Unacknowledged) => {
                    let left = self.unacked.map_or(0, |f| f(self.now));
                    self.conn.handle_unacknowledged(left, self.now)
                }
                None => return,
            }
        }
        panic!("the connection never waited");
    }

    /// Moves the clock to `now`, firing what is due on the way.
    fn advance(&mut self, now: Millis) {
        while let Some(at) = self.conn.poll_timeout().filter(|&at| at <= now) {
            self.now = self.now.max(at);
            self.conn.handle_timeout(self.now);
            self.run();
        }
        self.now = now;
        self.run();
    }

    fn left(&self) -> Option<&Left> {
        self.events.iter().find_map(|e| match e {
            Event::Left(l) => Some(l),
            _ => None,
        })
    }
}

#[test]
fn refusals_and_departures_read_as_they_always_have() {
    let p = PEER;
    let cases = [
        (HelloRefused::Closed, format!("{p}: at offset 0: closed before its hello")),
        (
            HelloRefused::Failed(std::io::Error::other("reset")),
            format!("{p}: at offset 0: failed before its hello: reset"),
        ),
        (
            HelloRefused::NotOstm(FormatError::new(p, 4, "expected magic")),
            format!("not an ostm viewer: {p}: at offset 4: expected magic"),
        ),
        (
            HelloRefused::NotHello("a heartbeat (0x03)"),
            format!("{p}: at offset 0: expected a hello (0x01) first, found a heartbeat (0x03)"),
        ),
        (
            HelloRefused::Version(9),
            format!(
                "{p}: at offset 13: the host speaks protocol version {VERSION}, the viewer sent version 9"
            ),
        ),
        (
            HelloRefused::Role(2),
            format!("{p}: at offset 15: expected role 1 (viewer), found role 2"),
        ),
        (
            HelloRefused::NoToken,
            "this host requires a token; none was sent".to_string(),
        ),
        (HelloRefused::BadToken, "the token does not match".to_string()),
    ];
    for (why, text) in cases {
        assert_eq!(why.text(p, 0), text);
    }
    assert_eq!(
        HelloRefused::Role(2).text(p, 100),
        format!("{p}: at offset 115: expected role 1 (viewer), found role 2")
    );
    assert_eq!(
        Misbehaved::Silent(10_000).to_string(),
        "nothing received for 10000 ms"
    );
    let bad = FormatError::new(p, 40, "unknown message type 0x09");
    assert_eq!(
        Misbehaved::Malformed(bad.clone()).to_string(),
        bad.to_string()
    );
    assert_eq!(
        Misbehaved::SecondHello { peer: p.into(), at: 40 }.to_string(),
        format!(
            "{p}: at offset 40: expected a drift request (0x02) or heartbeat (0x03), found a second hello (0x01)"
        )
    );
    let end = End {
        reason: EndReason::Finished,
        text: "the host ran its 5 steps".into(),
        host_step: 5,
    };
    assert_eq!(
        Why::Ended(end).to_string(),
        format!(
            "ended {}: the host ran its 5 steps",
            EndReason::Finished.name()
        )
    );
    assert_eq!(Why::Closed.to_string(), "closed by the viewer");
    assert_eq!(
        Why::Stalled(2500).to_string(),
        "dropped: stalled: no write progress for 2500 ms"
    );
    assert_eq!(
        Why::WriteFailed(std::io::Error::other("broken")).to_string(),
        "dropped: write failed: broken"
    );
    assert_eq!(
        Why::WriterLost.to_string(),
        "dropped: the connection lost its writer"
    );
    let left = Left {
        id: 1,
        step: 7,
        resyncs: 2,
        why: Why::Closed,
    };
    assert_eq!(
        left.to_string(),
        "left at step 7: closed by the viewer (resynced 2 times)"
    );
}

#[test]
fn a_hello_of_another_version_is_refused_with_its_offset_then_lingers() {
    let mut p = Pair::new(16);
    // The hello cut anywhere is the same hello.
    let bytes = hello(9, b"");
    for b in &bytes {
        p.conn.handle_bytes(std::slice::from_ref(b), 0);
    }
    p.run();
    assert!(
        matches!(&p.events[..], [Event::Refused { reason: Some(EndReason::VersionMismatch), log }]
        if log == &format!("{PEER}: at offset 13: the host speaks protocol version {VERSION}, the viewer sent version 9"))
    );
    assert_eq!(p.viewer.got, vec!["end version-mismatch"]);
    assert!(!p.conn.is_closed(), "lingers for the viewer to close");
    p.advance(LINGER_MS - 1);
    assert!(!p.conn.is_closed());
    p.conn.handle_eof(LINGER_MS - 1);
    assert!(p.conn.is_closed());
    assert!(p.left().is_none(), "never attached");
}

#[test]
fn a_token_is_checked_and_a_missing_one_named() {
    for (sent, reason, log) in [
        (
            &b""[..],
            EndReason::BadToken,
            "this host requires a token; none was sent",
        ),
        (b"nope", EndReason::BadToken, "the token does not match"),
    ] {
        let mut cfg = config();
        cfg.token = Some(b"secret".to_vec());
        let mut c = Conn::new(cfg, PEER, 0);
        c.handle_bytes(&hello(VERSION, sent), 0);
        assert!(
            matches!(c.poll_event(), Some(Event::Refused { reason: Some(r), log: l }) if r == reason && l == log)
        );
    }
    let mut cfg = config();
    cfg.token = Some(b"secret".to_vec());
    let mut c = Conn::new(cfg, PEER, 0);
    c.handle_bytes(&hello(VERSION, b"secret"), 0);
    assert!(matches!(c.poll_event(), Some(Event::Accepted)));
}

#[test]
fn no_whole_hello_in_time_is_closed_at_once_without_an_end() {
    let mut p = Pair::new(16);
    p.conn.handle_bytes(&hello(VERSION, b"")[..10], 0);
    p.advance(HELLO_MS - 1);
    assert!(!p.conn.is_closed());
    p.advance(HELLO_MS);
    assert!(p.conn.is_closed());
    assert!(
        matches!(&p.events[..], [Event::Refused { reason: None, log }] if log == "no hello within 2000 ms")
    );
    assert!(
        p.viewer.got.is_empty(),
        "no end for a peer that never spoke"
    );
}

#[test]
fn a_viewer_verifies_every_record_it_is_sent_with_the_heartbeat_ahead_when_behind() {
    let mut p = Pair::attached(1_000);
    assert_eq!(p.viewer.got, vec!["welcome", "snapshot Attach 0"]);
    assert!(matches!(
        p.events[..],
        [Event::Accepted, Event::Attached { id: 1, step: 0 }]
    ));
    // One step at a time: records alone.
    for _ in 0..5 {
        p.host.step(1);
        p.run();
    }
    // 150 steps at once: batches of 64, the first two behind the host's step.
    p.host.step(150);
    p.run();
    assert_eq!(p.viewer.verifier.verified(), 155);
    assert_eq!(p.conn.step(), 155);
    let beats: Vec<&String> = p
        .viewer
        .got
        .iter()
        .filter(|g| g.starts_with("heartbeat"))
        .collect();
    assert_eq!(beats, vec!["heartbeat 155", "heartbeat 155"]);
    let i = p
        .viewer
        .got
        .iter()
        .position(|g| g == "heartbeat 155")
        .unwrap();
    assert_eq!(
        p.viewer.got[i + 1],
        "record 5",
        "the heartbeat goes ahead of its batch"
    );
}

#[test]
fn a_quiet_host_sends_heartbeats_and_a_quiet_viewer_is_closed_silent() {
    let mut p = Pair::attached(16);
    p.advance(999);
    assert!(!p.viewer.got.iter().any(|g| g.starts_with("heartbeat")));
    p.advance(1_000);
    assert_eq!(p.viewer.got.last().unwrap(), "heartbeat 0");
    // A record sent moves the next heartbeat a full interval on.
    p.advance(1_500);
    p.host.step(1);
    p.run();
    p.advance(2_499);
    assert_eq!(p.viewer.got.last().unwrap(), "record 0");
    p.advance(2_500);
    assert_eq!(p.viewer.got.last().unwrap(), "heartbeat 1");
    // The viewer's heartbeats keep it; ten seconds without one closes it.
    p.conn.handle_bytes(&heartbeat(1), 5_000);
    p.advance(14_999);
    assert!(p.viewer.ended.is_none());
    p.advance(15_000);
    let end = p.viewer.ended.clone().unwrap();
    assert_eq!(
        (end.reason, end.text.as_str()),
        (EndReason::Silent, "nothing received for 10000 ms")
    );
    p.conn.handle_eof(15_001);
    p.run();
    let left = p.left().unwrap();
    assert_eq!(
        left.to_string(),
        "left at step 1: ended silent: nothing received for 10000 ms"
    );
    assert!(left.why.bad());
}

#[test]
fn a_viewer_more_than_the_queue_behind_is_resynced_and_verifies_on() {
    let mut p = Pair::attached(16);
    p.host.step(3);
    p.run();
    p.host.step(17);
    p.run();
    assert!(p.viewer.got.contains(&"snapshot Resync 20".to_string()));
    assert!(p.events.iter().any(|e| matches!(
        e,
        Event::Resynced {
            from: 3,
            to: 20,
            count: 1
        }
    )));
    p.host.step(2);
    p.run();
    assert_eq!(p.viewer.verifier.verified(), 5);
    assert_eq!(p.viewer.verifier.resyncs(), 1);
}

#[test]
fn the_end_comes_after_the_records_owed() {
    let mut p = Pair::attached(16);
    p.blocked = true;
    p.host.step(10);
    p.run();
    p.host.ended = Some(End {
        reason: EndReason::Finished,
        text: "the host ran its 10 steps".into(),
        host_step: 10,
    });
    p.blocked = false;
    // The write handed out is lost to this driver: give the records back by taking again.
    p.conn.writing = None;
    p.conn.out.clear();
    p.conn.position = 0;
    p.conn.want = Want::Take;
    p.run();
    assert_eq!(p.viewer.verifier.verified(), 10);
    assert_eq!(p.viewer.got.last().unwrap(), "end finished");
    p.conn.handle_eof(p.now);
    p.run();
    assert_eq!(
        p.left().unwrap().to_string(),
        "left at step 10: ended finished: the host ran its 10 steps"
    );
}

#[test]
fn a_write_with_no_progress_for_the_stall_timeout_drops_the_viewer() {
    let mut p = Pair::attached(16);
    p.blocked = true;
    p.host.step(2);
    p.run();
    assert!(p.conn.is_writing());
    p.advance(4_999);
    assert!(!p.conn.is_closed());
    p.advance(5_000);
    assert!(p.conn.is_closed());
    assert!(p.events.iter().any(|e| matches!(e, Event::Stalled)));
    assert_eq!(
        p.left().unwrap().to_string(),
        "left at step 0: dropped: stalled: no write progress for 5000 ms"
    );
}

#[test]
fn drift_requests_are_answered_and_a_second_hello_is_a_protocol_error() {
    let mut p = Pair::attached(16);
    let req = ViewerCodec::encode_frame(&ToHost::DriftRequest { step: 3 }).unwrap();
    p.conn.handle_bytes(&req.0, 10);
    p.run();
    assert_eq!(p.viewer.got.last().unwrap(), "drift reply 3");
    let at = p.conn.codec.consumed();
    p.conn.handle_bytes(&hello(VERSION, b""), 20);
    p.run();
    let end = p.viewer.ended.clone().unwrap();
    assert_eq!(end.reason, EndReason::ProtocolError);
    assert_eq!(
        end.text,
        format!("{PEER}: at offset {at}: expected a drift request (0x02) or heartbeat (0x03), found a second hello (0x01)")
    );
    assert!(p.events.iter().any(|e| matches!(e, Event::ProtocolError)));
    // The viewer does not close: the linger ends it.
    p.advance(20 + LINGER_MS);
    assert!(p.conn.is_closed());
}

#[test]
fn a_full_host_refuses_with_full_and_an_ended_stream_sends_its_end() {
    let mut c = Conn::new(config(), PEER, 0);
    c.handle_bytes(&hello(VERSION, b""), 0);
    assert!(matches!(c.poll_event(), Some(Event::Accepted)));
    c.handle_full();
    assert!(
        matches!(c.poll_event(), Some(Event::Refused { reason: Some(EndReason::Full), log }) if log == "the host is full")
    );
    let t = c.poll_transmit(0, 42).unwrap();
    assert!(t.shutdown);
    let mut v = Viewer::new();
    v.read(&t.frames[0].0);
    let end = v.ended.unwrap();
    assert_eq!(
        (end.reason, end.text.as_str(), end.host_step),
        (
            EndReason::Full,
            "the host serves its maximum number of viewers",
            42
        )
    );
}

fn finished(step: u64) -> End {
    End {
        reason: EndReason::Finished,
        text: format!("the host ran its {step} steps"),
        host_step: step,
    }
}

#[test]
fn an_ended_viewer_is_waited_for_while_it_takes_what_it_was_sent_ten_seconds_at_most() {
    // Still taking: one byte fewer unacknowledged at every look.
    let mut p = Pair::attached(16);
    p.unacked = Some(|now| 1_000_000 - now);
    p.host.step(3);
    p.host.ended = Some(finished(3));
    p.advance(100);
    assert_eq!(p.viewer.got.last().unwrap(), "end finished");
    p.advance(100 + LINGER_MAX_MS - 1);
    assert!(!p.conn.is_closed(), "taking: waited for");
    p.advance(100 + LINGER_MAX_MS + LINGER_LOOK_MS);
    assert!(p.conn.is_closed(), "ten seconds at most");
    // Taking nothing more: two seconds.
    let mut p = Pair::attached(16);
    p.unacked = Some(|_| 500);
    p.host.ended = Some(finished(0));
    p.advance(100);
    p.advance(100 + LINGER_MS - 1);
    assert!(!p.conn.is_closed());
    p.advance(100 + LINGER_MS + LINGER_LOOK_MS);
    assert!(p.conn.is_closed());
    assert_eq!(
        p.left().unwrap().to_string(),
        "left at step 0: ended finished: the host ran its 0 steps"
    );
}

#[test]
fn a_connection_still_writing_when_the_time_to_deliver_is_over_is_dropped() {
    let mut p = Pair::attached(16);
    p.blocked = true;
    p.host.step(2);
    p.host.ended = Some(finished(2));
    p.run();
    assert!(p.conn.is_writing());
    p.conn.handle_delivery_over();
    p.run();
    assert!(p.conn.is_closed());
    assert!(p.events.iter().any(|e| matches!(e, Event::Stalled)));
    assert_eq!(
        p.left().unwrap().to_string(),
        "left at step 0: dropped: the stream ended and the viewer did not take its records and end in time"
    );
}

#[test]
fn an_end_that_comes_with_a_heartbeat_due_and_a_drift_reply_waiting_still_lingers_and_closes() {
    let mut p = Pair::attached(16);
    p.unacked = Some(|_| 0);
    // A drift request answered but not yet sent, a heartbeat due and the viewer silent,
    // all at once: the end goes, and the linger still ends.
    p.conn.handle_drift_reply(DriftReply {
        step: 1,
        status: crate::wire::DriftStatus::NotReached,
        world: None,
        stages: None,
    });
    p.conn.handle_timeout(10_000);
    assert!(p.conn.beat_due);
    p.now = 10_000;
    p.run();
    assert_eq!(p.viewer.got.last().unwrap(), "end silent");
    p.advance(10_000 + LINGER_MS + LINGER_LOOK_MS);
    assert!(p.conn.is_closed());
}

/// A tiny xorshift for the seeded sessions below.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Seeded sessions of the real connection and the real verifier: the host steps in bursts,
/// the viewer stops reading for up to 4 s (under the stall timeout), sends its heartbeat
/// at least once a second and now and then a drift request, and time moves on in steps up
/// to 0.7 s. Every record the viewer receives is verified (none out of order, none twice:
/// the verifier refuses both), a viewer that keeps its heartbeats is never judged silent,
/// and once the host has stopped stepping the viewer is brought to its step.
#[test]
fn seeded_sessions_deliver_every_record_in_order_and_never_judge_a_beating_viewer_silent() {
    for seed in 1..=300u64 {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        // Queues of 16 (resyncs) or 200 (batches of 64 with more behind them).
        let mut p = Pair::attached(if seed.is_multiple_of(2) { 16 } else { 200 });
        let mut last_beat = 0;
        let mut blocked_until = None;
        for _ in 0..600 {
            let r = next(&mut x);
            let now = p.now;
            match r % 8 {
                0 | 1 => p.host.step(1 + (r >> 8) as usize % 24),
                2 => p.host.step(1 + (r >> 8) as usize % 150),
                3 | 4 => p.advance(now + (r >> 8) % 700),
                5 if blocked_until.is_none() => {
                    p.blocked = true;
                    blocked_until = Some(now + (r >> 8) % 4_000);
                }
                6 if (r >> 8).is_multiple_of(16) => {
                    let req = ViewerCodec::encode_frame(&ToHost::DriftRequest {
                        step: (r >> 8) % (p.host.world.step + 1),
                    })
                    .unwrap();
                    p.conn.handle_bytes(&req.0, now);
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
            assert!(!p.conn.is_closed(), "seed {seed}: closed: {:?}", p.left());
            assert!(
                p.viewer.ended.is_none(),
                "seed {seed}: {:?}",
                p.viewer.ended
            );
        }
        p.blocked = false;
        p.run();
        assert_eq!(
            p.conn.step(),
            p.host.world.step,
            "seed {seed}: brought to the host's step"
        );
        assert_eq!(
            p.viewer.verifier.world().step,
            p.host.world.step,
            "seed {seed}"
        );
    }
}
