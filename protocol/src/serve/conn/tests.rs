//! The host's connection machine against the viewer's real [`Verifier`], in memory: a
//! host world stepped into a ring of records as the host's hub keeps them, the bytes the
//! connection writes decoded by the viewer's codec and verified by step number.

use super::*;
use crate::serve::pair::{config, finished, heartbeat, hello, session, Pair, Viewer, PEER};
use crate::wire::ViewerCodec;

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

/// The seeded pair sessions the simulation runs for every seed (`serve::pair::session`),
/// a few here: each passes and gives the same events twice.
#[test]
fn seeded_pair_sessions_pass_and_are_deterministic() {
    for seed in 0..20u64 {
        let a = session(seed, false);
        assert_eq!(a.violation, None, "seed {seed}");
        assert_eq!(a.digest, session(seed, false).digest, "seed {seed}");
        assert!(a.verified > 0, "seed {seed}");
    }
}
