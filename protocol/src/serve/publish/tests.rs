//! The publisher machine's rules, one test each: driven as the host drives it, its
//! messages decoded as a viewer decodes them.

use super::*;
use crate::reader::test_world;
use crate::wire::nats::frames;
use crate::wire::{EndReason, Record};
use std::collections::BTreeSet;

fn session() -> Session {
    Session::new("demo").expect("a valid session name")
}

fn config(every: u64, feed: usize, in_flight: usize) -> Config {
    Config {
        feed,
        in_flight,
        ..Config::new(session(), "R1".into(), every, 60)
    }
}

/// The record frame of `step`, `input` bytes of input.
fn frame(step: u64, input: usize) -> Bytes {
    HostCodec::encode_frame(&ToViewer::Record(Record {
        step,
        hash: step.wrapping_mul(0x9e37_79b9),
        input: Bytes::from(vec![0u8; input]),
    }))
    .expect("a record frame")
    .0
}

/// Takes the steps `from..to` as the stepping loop does.
fn step(p: &mut Publisher, from: u64, to: u64) {
    for s in from..to {
        p.handle_before_step(&test_world(1, s));
        p.handle_record(s, frame(s, 0));
    }
}

/// Every message there is to send now.
fn drain(p: &mut Publisher, now: Millis) -> Vec<Publish> {
    std::iter::from_fn(|| p.poll_transmit(now)).collect()
}

/// What each message is: `k5` the keyframe of step 5, `r5+3` records 5, 6 and 7, `end`.
fn kinds(msgs: &[Publish]) -> Vec<String> {
    msgs.iter()
        .map(|m| match m.kind {
            Kind::Keyframe => format!("k{}", m.step),
            Kind::Records => format!("r{}+{}", m.step, m.steps),
            Kind::End => "end".into(),
        })
        .collect()
}

/// The steps of the record frames in a `rec` message's payload, as a viewer decodes them.
fn record_steps(m: &Publish) -> Vec<u64> {
    frames("test", &m.payload)
        .expect("frames")
        .map(|f| match f.expect("a frame").1 {
            ToViewer::Record(r) => r.step,
            other => panic!("not a record: {other:?}"),
        })
        .collect()
}

fn ack_all(p: &mut Publisher, msgs: &[Publish]) {
    for m in msgs {
        p.handle_acked(m.token);
    }
}

fn end(step: u64) -> End {
    End {
        reason: EndReason::Finished,
        text: "done".into(),
        host_step: step,
    }
}

#[test]
fn a_keyframe_at_the_first_step_and_every_keyframe_every_steps_before_its_record() {
    let mut p = Publisher::new(config(4, 100, 100));
    // The host starts at step 5 (a replay served from there): its first step gets one.
    step(&mut p, 5, 13);
    let msgs = drain(&mut p, 0);
    assert_eq!(kinds(&msgs), ["k5", "r5+3", "k8", "r8+4", "k12", "r12+1"]);
    let world = crate::wire::nats::keyframe("test", &msgs[2].payload).expect("a keyframe");
    assert_eq!(world, test_world(1, 8));
    assert_eq!(
        msgs[2].headers,
        [
            (RATE_HEADER, "60".to_string()),
            (STEP_HEADER, "8".to_string())
        ]
    );
    assert_eq!(msgs[2].subject, "ostm.demo.key");
    assert_eq!(msgs[2].id, "R1-key-8");
}

#[test]
fn records_waiting_one_after_the_other_go_in_one_message_within_the_limits() {
    // 300 small records: 256 in the first message, 44 in the next.
    let mut p = Publisher::new(config(1_000_000, 1_000, 10));
    step(&mut p, 1, 301);
    let msgs = drain(&mut p, 0);
    assert_eq!(kinds(&msgs), ["k1", "r1+256", "r257+44"]);
    assert_eq!(record_steps(&msgs[1]), (1..257).collect::<Vec<_>>());
    assert_eq!(
        msgs[1].headers,
        [
            (COUNT_HEADER, "256".to_string()),
            (STEP_HEADER, "1".to_string())
        ]
    );
    assert_eq!(
        (msgs[1].subject.as_str(), msgs[1].id.as_str()),
        ("ostm.demo.rec", "R1-rec-1")
    );

    // Records of 20 000 bytes: three fit in 65 536 bytes; one larger travels alone.
    let mut p = Publisher::new(config(1_000_000, 1_000, 10));
    p.handle_before_step(&test_world(1, 0));
    for s in 0..7 {
        p.handle_record(s, frame(s, if s == 3 { 65_535 } else { 20_000 }));
    }
    let msgs = drain(&mut p, 0);
    assert_eq!(kinds(&msgs), ["k0", "r0+3", "r3+1", "r4+3"]);
    for m in &msgs[1..] {
        assert!(m.payload.len() <= MAX_BATCH_BYTES || m.steps == 1);
    }

    // Records that do not follow one another are never in one message.
    let mut p = Publisher::new(config(1_000_000, 1_000, 10));
    p.handle_before_step(&test_world(1, 0));
    for s in [0, 1, 3, 4] {
        p.handle_record(s, frame(s, 0));
    }
    assert_eq!(kinds(&drain(&mut p, 0)), ["k0", "r0+2", "r3+2"]);
}

#[test]
fn a_full_feed_drops_steps_and_the_next_keyframe_closes_the_gap_exactly() {
    let mut p = Publisher::new(config(1_000_000, 4, 100));
    // The keyframe and records 0..3 fill the feed; 3..6 are dropped.
    step(&mut p, 0, 6);
    assert_eq!(p.counts().dropped, 3);
    // Room again, but step 6 still finds a full feed: dropped too (its keyframe asked).
    step(&mut p, 6, 7);
    assert_eq!(p.counts().dropped, 4);
    let first = drain(&mut p, 0);
    ack_all(&mut p, &first);
    // The first step with room gets the keyframe that closes the gap, then its record.
    step(&mut p, 7, 9);
    let then = drain(&mut p, 0);
    ack_all(&mut p, &then);
    assert_eq!(kinds(&first), ["k0", "r0+3"]);
    assert_eq!(kinds(&then), ["k7", "r7+2"]);
    // The gap a viewer sees (3..7) is exactly the steps dropped.
    let c = p.counts();
    assert_eq!((c.steps, c.published, c.dropped, c.failed), (9, 5, 4, 0));

    // A keyframe that finds no room drops the records until one fits.
    let mut p = Publisher::new(config(1_000_000, 2, 100));
    step(&mut p, 0, 1); // k0, r0: full
    step(&mut p, 1, 3); // dropped
    assert_eq!(p.counts().dropped, 2);
    let _ = p.poll_transmit(0); // room for one: the keyframe, not its record
    step(&mut p, 3, 4);
    assert_eq!(p.counts().dropped, 3);
    assert_eq!(kinds(&drain(&mut p, 0)), ["r0+1", "k3"]);
    step(&mut p, 4, 5);
    assert_eq!(kinds(&drain(&mut p, 0)), ["k4", "r4+1"]);
}

#[test]
fn every_message_has_an_id_of_its_own_and_the_end_is_last() {
    let mut p = Publisher::new(config(3, 8, 1_000));
    let mut msgs = Vec::new();
    for s in 0..200 {
        step(&mut p, s, s + 1);
        if s % 7 == 0 {
            msgs.extend(drain(&mut p, s));
        }
        if s % 50 == 0 {
            p.handle_disconnected();
        }
    }
    assert!(p.handle_end(end(200)));
    step(&mut p, 200, 203); // after the end: nothing
    p.handle_feed_closed();
    msgs.extend(drain(&mut p, 300));
    let ids: BTreeSet<_> = msgs.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids.len(), msgs.len(), "{:?}", kinds(&msgs));
    let tokens: BTreeSet<_> = msgs.iter().map(|m| m.token).collect();
    assert_eq!(tokens.len(), msgs.len());
    let last = msgs.last().expect("messages");
    assert_eq!(
        (last.kind, last.id.as_str(), last.subject.as_str()),
        (Kind::End, "R1-end", "ostm.demo.end")
    );
    assert_eq!(last.headers, [(STEP_HEADER, "200".to_string())]);
    assert_eq!(p.counts().steps, 200);
    assert!(!p.is_done(), "acknowledgements are awaited");
    ack_all(&mut p, &msgs);
    assert!(p.is_done());
    let c = p.counts();
    assert_eq!(c.published + c.dropped + c.failed, c.steps);
}

#[test]
fn every_acknowledgement_awaited_times_out_from_its_own_publish() {
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    let mut msgs = Vec::new();
    // 100 messages, one every 10 ms, none acknowledged.
    for s in 0..100 {
        step(&mut p, s, s + 1);
        msgs.extend(drain(&mut p, s * 10));
    }
    assert_eq!(p.in_flight(), 101);
    assert_eq!(p.poll_timeout(), Some(ACK_TIMEOUT_MS));
    // At 5 s past the 50th record's publish, the keyframe and 50 records have failed.
    p.handle_timeout(49 * 10 + ACK_TIMEOUT_MS);
    assert_eq!((p.in_flight(), p.counts().failed), (50, 50));
    assert_eq!(p.poll_timeout(), Some(50 * 10 + ACK_TIMEOUT_MS));
    let events: Vec<_> = std::iter::from_fn(|| p.poll_event()).collect();
    assert_eq!(events.len(), 51);
    assert_eq!(
        events[1],
        Event::Failed {
            step: 0,
            steps: 1,
            why: format!("no acknowledgement within {ACK_TIMEOUT_MS} ms")
        }
    );
    // A late acknowledgement of one that timed out is not counted again.
    p.handle_acked(msgs[1].token);
    assert_eq!(p.counts().published, 0);
}

#[test]
fn an_acknowledgement_counts_when_it_comes_whatever_came_before() {
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    p.handle_before_step(&test_world(1, 0));
    p.handle_record(0, frame(0, 0));
    let a = drain(&mut p, 0); // k0, r0+1
    step(&mut p, 1, 4);
    let b = drain(&mut p, 0); // r1+3
                              // The second one fails while the first is still awaited.
    p.handle_ack_failed(b[0].token, "the stream refused it".into());
    assert_eq!((p.counts().failed, p.in_flight()), (3, 2));
    p.handle_acked(a[1].token);
    assert_eq!(p.counts().published, 1);
    // Unknown and repeated tokens change nothing.
    for t in [b[0].token, a[1].token, 0, 999] {
        p.handle_acked(t);
        p.handle_ack_failed(t, "again".into());
    }
    assert_eq!(
        p.counts(),
        Counts {
            steps: 4,
            published: 1,
            dropped: 0,
            failed: 3
        }
    );
}

#[test]
fn failed_counts_each_step_once_and_no_keyframe_or_end_and_asks_a_keyframe() {
    // A server away: a message of two records fails, then the keyframe sent after the
    // failure and the record of that keyframe's step fail too, then the end. Three steps
    // failed, so failed is 3: not one more for the keyframe and the end.
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    step(&mut p, 0, 2);
    let r = drain(&mut p, 0);
    assert_eq!(kinds(&r), ["k0", "r0+2"]);
    p.handle_acked(r[0].token);
    p.handle_ack_failed(r[1].token, "timed out".into());
    step(&mut p, 2, 3);
    let after = drain(&mut p, 0);
    assert_eq!(kinds(&after), ["k2", "r2+1"], "the failure asks a keyframe");
    for m in &after {
        p.handle_ack_failed(m.token, "timed out".into());
    }
    assert!(p.handle_end(end(3)));
    p.handle_feed_closed();
    let e = drain(&mut p, 0);
    p.handle_ack_failed(e[0].token, "no responders".into());
    let c = p.counts();
    assert_eq!((c.steps, c.published, c.failed), (3, 0, 3));
    assert!(!p.is_done(), "the end is published again");
    p.handle_timeout(END_WAIT_MS);
    let again = drain(&mut p, END_WAIT_MS);
    p.handle_ack_failed(again[0].token, "no responders".into());
    assert_eq!(p.counts(), c, "an end that fails again adds nothing");
    assert!(p.is_done(), "given up");
    // A keyframe that failed asks for another at the next step too.
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    step(&mut p, 0, 1);
    let m = drain(&mut p, 0);
    p.handle_ack_failed(m[0].token, "timed out".into());
    p.handle_acked(m[1].token);
    step(&mut p, 1, 2);
    assert_eq!(kinds(&drain(&mut p, 0)), ["k1", "r1+1"]);
}

#[test]
fn a_lost_connection_asks_a_keyframe_and_drops_nothing() {
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    step(&mut p, 0, 3);
    let _ = drain(&mut p, 0);
    p.handle_disconnected();
    step(&mut p, 3, 5);
    assert_eq!(kinds(&drain(&mut p, 0)), ["k3", "r3+2"]);
    step(&mut p, 5, 6);
    assert_eq!(kinds(&drain(&mut p, 0)), ["r5+1"], "once");
    assert_eq!(p.counts().dropped, 0);
}

#[test]
fn no_more_than_in_flight_acknowledgements_are_awaited() {
    let mut p = Publisher::new(config(1, 1_000, 3));
    step(&mut p, 0, 5); // k0 r0 k1 r1 … : ten messages
    let first = drain(&mut p, 0);
    assert_eq!(kinds(&first), ["k0", "r0+1", "k1"]);
    assert!(p.poll_transmit(0).is_none());
    p.handle_acked(first[1].token);
    assert_eq!(kinds(&drain(&mut p, 0)), ["r1+1"]);
    p.handle_timeout(ACK_TIMEOUT_MS);
    assert_eq!(kinds(&drain(&mut p, ACK_TIMEOUT_MS)), ["k2", "r2+1", "k3"]);
}

#[test]
fn the_end_waits_for_room_and_nothing_follows_it() {
    let mut p = Publisher::new(config(1_000_000, 2, 10));
    step(&mut p, 0, 1);
    assert!(!p.handle_end(end(1)), "the feed is full");
    assert_eq!(p.counts().dropped, 0, "an end refused is no step");
    let _ = p.poll_transmit(0);
    assert!(p.handle_end(end(1)));
    assert!(p.handle_end(end(1)), "handed over once");
    step(&mut p, 1, 3);
    p.handle_feed_closed();
    let msgs = drain(&mut p, 0);
    assert_eq!(kinds(&msgs), ["r0+1", "end"]);
    assert_eq!(p.counts().steps, 1);
    let mut p = Publisher::new(config(1_000_000, 2, 10));
    p.handle_feed_closed();
    assert!(
        p.is_done(),
        "an end never handed over leaves nothing to wait for"
    );
}

#[test]
fn a_failed_end_is_published_again_under_its_id_until_acknowledged() {
    // No leader at the stop: the end's first attempts are answered with an error or not at
    // all; each is repeated a second later under the same id, until one is acknowledged.
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    step(&mut p, 0, 2);
    let m = drain(&mut p, 0);
    ack_all(&mut p, &m);
    assert!(p.handle_end(end(2)));
    p.handle_feed_closed();
    let first = drain(&mut p, 100);
    assert_eq!(kinds(&first), ["end"]);
    assert!(p.is_repeating_end());
    p.handle_ack_failed(first[0].token, "no responders".into());
    assert!(matches!(
        p.poll_event(),
        Some(Event::Failed { steps: 0, .. })
    ));
    assert!(
        p.poll_transmit(100 + END_AGAIN_MS - 1).is_none(),
        "not before its time"
    );
    assert_eq!(p.poll_timeout(), Some(100 + END_AGAIN_MS));
    let second = drain(&mut p, 100 + END_AGAIN_MS);
    assert_eq!(kinds(&second), ["end"]);
    assert_eq!(second[0].id, first[0].id, "the same Nats-Msg-Id");
    assert_eq!(second[0].payload, first[0].payload);
    assert_eq!(second[0].subject, first[0].subject);
    assert_ne!(second[0].token, first[0].token);
    // Not answered: it times out, and goes again.
    let t = 100 + END_AGAIN_MS + ACK_TIMEOUT_MS;
    assert_eq!(p.poll_timeout(), Some(t));
    p.handle_timeout(t);
    assert!(!p.is_done());
    let third = drain(&mut p, t + END_AGAIN_MS);
    assert_eq!(third[0].id, first[0].id);
    // A late answer to an attempt given up counts for nothing; the latest's does.
    p.handle_acked(second[0].token);
    assert!(p.is_repeating_end());
    p.handle_acked(third[0].token);
    assert!(!p.is_repeating_end());
    assert!(p.is_done());
    while let Some(e) = p.poll_event() {
        if let Event::EndAcknowledged { attempts } = e {
            assert_eq!(attempts, 3);
            return;
        }
    }
    panic!("no EndAcknowledged event");
}

#[test]
fn the_end_is_given_up_once_its_wait_has_passed() {
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    assert!(p.handle_end(end(0)));
    p.handle_feed_closed();
    let mut now = 0;
    let mut attempts = 0;
    while let Some(m) = p.poll_transmit(now) {
        attempts += 1;
        assert!(now < END_WAIT_MS, "published again at {now} ms");
        p.handle_ack_failed(m.token, "no responders".into());
        now = p.poll_timeout().unwrap_or(now);
        p.handle_timeout(now);
    }
    assert_eq!(attempts, END_WAIT_MS / END_AGAIN_MS);
    assert!(p.is_done());
    let lost: Vec<_> = std::iter::from_fn(|| p.poll_event())
        .filter(|e| matches!(e, Event::EndLost { .. }))
        .collect();
    assert_eq!(
        lost,
        [Event::EndLost {
            attempts: attempts as u32,
            why: "no responders".into()
        }]
    );
    // An end acknowledged at once is published once, and says nothing.
    let mut p = Publisher::new(config(1_000_000, 1_000, 1_000));
    assert!(p.handle_end(end(0)));
    p.handle_feed_closed();
    let m = drain(&mut p, 0);
    ack_all(&mut p, &m);
    assert!(p.is_done());
    assert!(p.poll_event().is_none());
    assert!(p.poll_transmit(END_WAIT_MS).is_none());
}

/// The moves the machine asks for (how long nothing was acknowledged), taking them out
/// of its events.
fn moves(p: &mut Publisher) -> Vec<u64> {
    std::iter::from_fn(|| p.poll_event())
        .filter_map(|e| match e {
            Event::MoveServer { unacknowledged_ms } => Some(unacknowledged_ms),
            _ => None,
        })
        .collect()
}

/// Steps `from..to` taken and published at `t`, a step every 100 ms, every message
/// timing out (a server that takes them and stores none); the moves asked, with when.
fn unstored(p: &mut Publisher, from: u64, to: u64, t: &mut Millis) -> Vec<(Millis, u64)> {
    let mut asked = Vec::new();
    for s in from..to {
        step(p, s, s + 1);
        drain(p, *t);
        *t += 100;
        p.handle_timeout(*t);
        asked.extend(moves(p).into_iter().map(|m| (*t, m)));
    }
    asked
}

#[test]
fn publishes_unacknowledged_for_ten_seconds_while_connected_ask_for_another_server() {
    let mut p = Publisher::new(config(1_000, 1_000, 1_000));
    step(&mut p, 0, 2);
    let first = drain(&mut p, 0);
    ack_all(&mut p, &first);
    // From 1 s on nothing is stored: the first publish unacknowledged is at 1 s, the
    // first to time out at 6 s; the move is asked at 11 s, once, and again 10 s after
    // the first publish that follows it.
    let mut t = 1_000;
    let asked = unstored(&mut p, 2, 260, &mut t);
    assert_eq!(asked, vec![(11_000, 10_000), (21_000, 10_000)]);
    // The driver is woken for it: a machine failing is due at the move's time.
    let mut p = Publisher::new(config(1_000, 1_000, 1_000));
    step(&mut p, 0, 1);
    for m in drain(&mut p, 0) {
        p.handle_ack_failed(m.token, "no responders".into());
    }
    step(&mut p, 1, 2);
    drain(&mut p, 9_000);
    assert_eq!(
        p.poll_timeout(),
        Some(10_000),
        "the move is due before the 14 s timeout"
    );
    p.handle_timeout(9_999);
    assert_eq!(moves(&mut p), Vec::<u64>::new());
    p.handle_timeout(10_000);
    assert_eq!(
        moves(&mut p),
        vec![10_000],
        "failures the client reports count too"
    );
}

#[test]
fn no_move_while_acknowledgements_come_nothing_fails_or_the_connection_is_down() {
    // Slow acknowledgements that come: no move, however long each publish waits.
    let mut p = Publisher::new(config(1_000, 1_000, 1_000));
    let mut t = 0;
    for s in 0..100 {
        step(&mut p, s, s + 1);
        let m = drain(&mut p, t);
        t += 4_000;
        p.handle_timeout(t);
        ack_all(&mut p, &m);
        assert_eq!(moves(&mut p), Vec::<u64>::new(), "at {t} ms");
    }
    // Unacknowledged but none failed yet: no move.
    let mut p = Publisher::new(config(1_000, 1_000, 1_000));
    step(&mut p, 0, 1);
    drain(&mut p, 0);
    step(&mut p, 1, 2);
    drain(&mut p, 4_000);
    p.handle_timeout(4_999);
    assert_eq!(moves(&mut p), Vec::<u64>::new());
    // Failing while the connection is down: the client is failing over on its own; from
    // the connection on, counted afresh.
    let mut p = Publisher::new(config(1_000, 1_000, 1_000));
    p.handle_disconnected();
    let mut t = 0;
    assert_eq!(unstored(&mut p, 0, 200, &mut t), Vec::new());
    p.handle_connected();
    let asked = unstored(&mut p, 200, 350, &mut t);
    assert_eq!(
        asked,
        vec![(30_000, 10_000)],
        "10 s after the first publish at 20 s"
    );
    // An acknowledgement counts afresh from the next publish.
    let mut p = Publisher::new(config(1_000, 1_000, 1_000));
    let mut t = 0;
    assert_eq!(unstored(&mut p, 0, 90, &mut t), Vec::new(), "9 s");
    step(&mut p, 90, 91);
    let m = drain(&mut p, t);
    ack_all(&mut p, &m);
    assert_eq!(unstored(&mut p, 91, 185, &mut t), Vec::new(), "9.4 s more");
    assert_eq!(unstored(&mut p, 185, 200, &mut t), vec![(19_000, 10_000)]);
}
