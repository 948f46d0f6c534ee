//! The verifier driven by hand: a host world stepped beside it, its records fed in order,
//! faults planted one at a time.

use super::*;
use crate::sim::op::encode_input;
use crate::sim::scenario::Scenario;
use crate::wire::{DriftStatus, End, EndReason, ToViewer};
use crate::{Dims, Setup};

/// A host: its world and the scenario that gives its inputs.
struct Host {
    world: World,
    scenario: Scenario,
}

impl Host {
    fn new(seed: u32) -> Host {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 6,
            seed,
        };
        Host {
            world: World::new(setup, None),
            scenario: Scenario::new(seed),
        }
    }

    /// The next record: (step, hash after it, input, decoded ops).
    fn step(&mut self) -> (u64, u64, Vec<u8>, Vec<Op>) {
        let step = self.world.step;
        let ops = self.scenario.next_input(&self.world);
        self.world.step(&ops);
        (step, self.world.hash(), encode_input(&ops), ops)
    }
}

fn feed(v: &mut Verifier, h: &mut Host, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let (step, hash, input, ops) = h.step();
        let r = RecordRef {
            step,
            hash,
            input: &input,
        };
        if v.handle_record(r, &ops).is_some() {
            ok += 1;
        }
    }
    ok
}

fn attached(h: &Host, goal: Goal, reconnects: bool) -> Verifier {
    let mut v = Verifier::new(Limits::default(), goal, reconnects);
    v.handle(Input::Attached {
        world: h.world.clone(),
        connection: 1,
    });
    assert_eq!(v.poll_event(), Some(Event::Attached { step: h.world.step }));
    v
}

fn end(reason: EndReason) -> End {
    End {
        reason,
        text: "bye".into(),
        host_step: 0,
    }
}

#[test]
fn verifies_every_record_by_step_number_and_stops_at_the_goal() {
    let mut h = Host::new(3);
    let mut v = attached(
        &h,
        Goal {
            steps: Some(50),
            until: None,
        },
        false,
    );
    assert_eq!(feed(&mut v, &mut h, 50), 50);
    assert!(v.is_stopped());
    assert!(matches!(v.stop(), Some(Stop::Asked)));
    assert_eq!(v.verified(), 50);
    assert_eq!(v.world().hash(), h.world.hash());
    // Nothing is verified after the stop.
    assert_eq!(feed(&mut v, &mut h, 3), 0);
    assert_eq!(v.verified(), 50);
}

#[test]
fn a_record_for_another_step_stops_the_session() {
    let mut h = Host::new(4);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 5);
    h.step(); // a record the viewer never gets
    feed(&mut v, &mut h, 1);
    match v.stop() {
        Some(Stop::Failed(f)) => assert_eq!(
            f.to_string(),
            "protocol error: a record for step 6, expected step 5"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(v.verified(), 5);
}

#[test]
fn a_duplicate_record_is_never_verified_twice() {
    let mut h = Host::new(5);
    let mut v = attached(&h, Goal::default(), false);
    let (step, hash, input, ops) = h.step();
    let r = RecordRef {
        step,
        hash,
        input: &input,
    };
    assert!(v.handle_record(r, &ops).is_some());
    assert!(v.handle_record(r, &ops).is_none(), "the same step again");
    assert_eq!(v.verified(), 1);
    assert!(matches!(
        v.stop(),
        Some(Stop::Failed(Failure::OutOfStep { .. }))
    ));
}

#[test]
fn a_drift_asks_the_host_and_reports_the_step_body_and_field() {
    let mut h = Host::new(6);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 20);
    // The host's world is changed outside the step: its next hash differs.
    h.world.bodies[2].vel[1] += 1;
    let (step, hash, input, ops) = h.step();
    let r = RecordRef {
        step,
        hash,
        input: &input,
    };
    assert!(v.handle_record(r, &ops).is_none());
    assert!(!v.is_stopped(), "waits for the host's answer");
    assert_eq!(
        v.poll_transmit(),
        Some(Transmit::DriftRequest {
            step: 21,
            connection: 1
        })
    );
    assert_eq!(v.poll_timeout(), Some(0));
    v.handle_timeout(1_000);
    assert_eq!(v.poll_timeout(), Some(6_000));
    v.handle_drift_reply(DriftReply {
        step: 21,
        status: DriftStatus::Held,
        world: Some(h.world.clone()),
        stages: None,
    });
    match v.stop() {
        Some(Stop::Drift(d)) => {
            assert_eq!(d.step, 21);
            let f = d.field.as_ref().expect("a field");
            assert_eq!(
                (f.body, f.field),
                (Some(2), "position.y"),
                "the velocity moved the position in the step"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(v.verified(), 20, "the drifting step is not verified");
}

#[test]
fn a_drift_with_no_answer_says_so_at_the_deadline() {
    let mut h = Host::new(7);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 3);
    h.world.bodies[0].pos[0] += 1;
    let (step, hash, input, ops) = h.step();
    let r = RecordRef {
        step,
        hash,
        input: &input,
    };
    assert!(v.handle_record(r, &ops).is_none());
    v.handle_timeout(10);
    v.handle_timeout(5_009);
    assert!(!v.is_stopped(), "not yet");
    v.handle_timeout(5_010);
    match v.stop() {
        Some(Stop::Drift(d)) => assert_eq!(
            d.note.as_deref(),
            Some("the host did not answer the drift request within 5 s")
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_resync_restarts_the_world_and_another_world_is_refused() {
    let mut h = Host::new(8);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 10);
    for _ in 0..7 {
        h.step();
    }
    v.handle(Input::Resync(h.world.clone()));
    assert_eq!(
        v.poll_event(),
        Some(Event::Restarted {
            from: 10,
            to: 17,
            cause: Restart::Resync
        })
    );
    assert!(!v.stepped(), "a snapshot is not a verified world");
    assert_eq!(feed(&mut v, &mut h, 4), 4);
    assert_eq!(v.resyncs(), 1);
    let other = Host::new(9);
    v.handle(Input::Resync(other.world.clone()));
    assert!(matches!(
        v.stop(),
        Some(Stop::Failed(Failure::ResyncOfAnotherWorld))
    ));
}

#[test]
fn a_reconnection_is_a_gap_and_a_record_while_lost_is_refused() {
    let mut h = Host::new(10);
    let mut v = attached(&h, Goal::default(), true);
    feed(&mut v, &mut h, 10);
    v.handle(Input::Lost {
        why: "reset".into(),
        last: false,
    });
    assert_eq!(
        v.poll_event(),
        Some(Event::Lost {
            step: 10,
            why: "reset".into()
        })
    );
    for _ in 0..5 {
        h.step();
    }
    v.handle(Input::Attached {
        world: h.world.clone(),
        connection: 2,
    });
    let gap = Gap::new(10, 15, "reset");
    assert_eq!(
        v.poll_event(),
        Some(Event::Restarted {
            from: 10,
            to: 15,
            cause: Restart::Reconnect(gap.clone())
        })
    );
    assert_eq!(feed(&mut v, &mut h, 5), 5);
    assert_eq!(v.summary(0).gaps, vec![gap]);
    v.handle(Input::Lost {
        why: "reset".into(),
        last: false,
    });
    assert_eq!(feed(&mut v, &mut h, 1), 0);
    assert!(matches!(
        v.stop(),
        Some(Stop::Failed(Failure::RecordWhileLost))
    ));
}

#[test]
fn a_stream_that_ends_inside_a_gap_reports_the_gap_open() {
    let mut h = Host::new(11);
    let mut v = attached(&h, Goal::default(), true);
    feed(&mut v, &mut h, 5);
    v.handle(Input::Lost {
        why: "steps 5 to 9 are no longer in the stream".into(),
        last: false,
    });
    v.handle(Input::End(end(EndReason::Finished)));
    assert!(matches!(v.stop(), Some(Stop::HostEnded(_))));
    let s = v.summary(40);
    assert_eq!(s.verified, 5);
    assert_eq!(
        s.gaps,
        vec![Gap::new(5, 40, "steps 5 to 9 are no longer in the stream")]
    );
    // A planted fault: without the lost records the verdict would have no gap.
    let mut clean = attached(&Host::new(11), Goal::default(), true);
    clean.handle(Input::End(end(EndReason::Finished)));
    assert!(clean.summary(40).gaps.is_empty());
}

#[test]
fn a_keyframe_after_lost_records_closes_the_gap_there() {
    let mut h = Host::new(12);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 5);
    v.handle(Input::Lost {
        why: "the feed was dropped".into(),
        last: false,
    });
    for _ in 0..9 {
        h.step();
    }
    v.handle(Input::Rejoined {
        world: h.world.clone(),
        why: "a keyframe".into(),
    });
    let _ = v.poll_event();
    assert_eq!(
        v.poll_event(),
        Some(Event::Restarted {
            from: 5,
            to: 14,
            cause: Restart::Rejoin(Gap::new(5, 14, "the feed was dropped; a keyframe"))
        })
    );
    assert_eq!(feed(&mut v, &mut h, 3), 3);
    let other = Host::new(13);
    v.handle(Input::Rejoined {
        world: other.world.clone(),
        why: "a keyframe".into(),
    });
    assert!(matches!(
        v.stop(),
        Some(Stop::Failed(Failure::KeyframeOfAnotherWorld))
    ));
}

#[test]
fn an_end_the_reader_rides_out_is_lost_and_finished_ends() {
    let h = Host::new(14);
    let mut v = attached(&h, Goal::default(), true);
    v.handle(Input::End(end(EndReason::Shutdown)));
    assert!(!v.is_stopped());
    assert!(matches!(v.poll_event(), Some(Event::Lost { .. })));
    let mut v = attached(&h, Goal::default(), false);
    v.handle(Input::End(end(EndReason::Shutdown)));
    assert!(matches!(v.stop(), Some(Stop::HostEnded(_))));
}

#[test]
fn until_at_or_below_the_attach_step_is_refused_and_nothing_before_the_snapshot() {
    let mut h = Host::new(15);
    for _ in 0..10 {
        h.step();
    }
    let mut v = Verifier::new(
        Limits::default(),
        Goal {
            steps: None,
            until: Some(10),
        },
        false,
    );
    v.handle(Input::Attached {
        world: h.world.clone(),
        connection: 1,
    });
    assert_eq!(
        v.stop().map(|s| match s {
            Stop::Failed(f) => f.to_string(),
            _ => String::new(),
        }),
        Some("--until 10 is at or below the step the viewer attached at (10): there is nothing to verify".into())
    );
    let mut v = Verifier::new(Limits::default(), Goal::default(), false);
    v.handle(Input::Resync(h.world.clone()));
    assert!(matches!(
        v.stop(),
        Some(Stop::Failed(Failure::BeforeAttach(_)))
    ));
}

/// The host's records, keyframes and end as a NATS stream holds them, read by the real
/// NATS reader and handed to the verifier as the viewer's driver does
/// (`reader::Arrival::give`, records decoded and verified one by one).
struct Stream {
    reader: crate::reader::nats::Reader,
    session: crate::wire::nats::Session,
    seq: u64,
}

impl Stream {
    /// The stream a verifier attached at `h`'s world reads on from.
    fn new(v: &Verifier) -> Stream {
        let session = crate::wire::nats::Session::new("t").unwrap();
        let name = "nats://127.0.0.1:4222/t".to_string();
        let reader =
            crate::reader::nats::Reader::new(name, session.clone(), v.world().clone(), 0, 0);
        Stream {
            reader,
            session,
            seq: 0,
        }
    }

    /// The next message on the stream: the hash of the last record verified from it.
    fn message(&mut self, v: &mut Verifier, subject: String, m: ToViewer) -> Option<u64> {
        use crate::reader::{nats::Event as ReaderEvent, Arrival};
        let mut payload = bytes::BytesMut::new();
        crate::wire::HostCodec::new("t")
            .encode(&m, &mut payload)
            .unwrap();
        self.seq += 1;
        let _ = self
            .reader
            .handle_message(self.seq, &subject, self.seq, &payload);
        let mut verified = None;
        while let Some(e) = self.reader.poll_event() {
            let ReaderEvent::Deliver(a) = e else { continue };
            match a.give(v) {
                Some(Arrival::Record(r)) => {
                    let ops = crate::sim::op::decode_input("record", &r.input, 0).unwrap();
                    verified = v.handle_record(RecordRef::from(&r), &ops);
                }
                Some(Arrival::Missing { .. }) | None => {}
                Some(other) => panic!("the reader handed over {other:?}"),
            }
        }
        verified
    }

    fn record(&mut self, v: &mut Verifier, r: &(u64, u64, Vec<u8>, Vec<Op>)) -> Option<u64> {
        let rec = crate::wire::Record {
            step: r.0,
            hash: r.1,
            input: r.2.clone().into(),
        };
        self.message(v, self.session.records(), ToViewer::Record(rec))
    }

    fn keyframe(&mut self, v: &mut Verifier, world: World) {
        let m = ToViewer::Snapshot {
            kind: crate::wire::SnapshotKind::Attach,
            world,
        };
        self.message(v, self.session.keyframes(), m);
    }

    fn end(&mut self, v: &mut Verifier, host_step: u64) {
        let m = ToViewer::End(End {
            host_step,
            ..end(EndReason::Finished)
        });
        self.message(v, self.session.end(), m);
    }
}

#[test]
fn a_stream_skips_duplicates_and_verifies_each_step_once() {
    let mut h = Host::new(20);
    let mut v = attached(&h, Goal::default(), false);
    let mut s = Stream::new(&v);
    let rs: Vec<_> = (0..6).map(|_| h.step()).collect();
    // Steps 2 and 3 published twice (a retry stored under another sequence).
    for r in rs.iter().chain(rs[2..4].iter()).chain(rs[5..].iter()) {
        s.record(&mut v, r);
    }
    assert_eq!(v.verified(), 6);
    assert!(!v.is_stopped() && !v.is_waiting());
}

#[test]
fn the_keyframe_before_the_first_record_after_a_dropped_feed_closes_the_gap_there() {
    let mut h = Host::new(21);
    let mut v = attached(&h, Goal::default(), false);
    let mut s = Stream::new(&v);
    for _ in 0..4 {
        let r = h.step();
        s.record(&mut v, &r);
    }
    // The server is away: steps 4 to 9 are never published.
    for _ in 0..6 {
        h.step();
    }
    // Back: the host publishes a keyframe at its step, then its records from there; the
    // keyframe past the viewer's step closes the gap at once (docs/fan-out.md, "Gaps").
    s.keyframe(&mut v, h.world.clone());
    assert!(!v.is_waiting(), "the keyframe closed the gap");
    let r = h.step();
    assert!(s.record(&mut v, &r).is_some(), "verified at once");
    let sum = v.summary(0);
    assert_eq!(
        sum.gaps,
        vec![Gap::new(
            4,
            10,
            "steps 4..10 are not on the stream OSTM_t; continuing from its keyframe at step 10"
        )]
    );
    assert_eq!(sum.verified, 5);
    // A keyframe at or before the viewer's step changes nothing.
    let mut old = h.world.clone();
    old.step -= 1;
    s.keyframe(&mut v, old);
    assert_eq!(v.summary(0).gaps.len(), 1);
}

#[test]
fn records_past_the_next_step_wait_for_a_keyframe_and_a_gap_at_the_end_stays_open() {
    let mut h = Host::new(22);
    let mut v = attached(&h, Goal::default(), false);
    let mut s = Stream::new(&v);
    let r = h.step();
    s.record(&mut v, &r);
    h.step();
    for _ in 0..3 {
        let r = h.step();
        assert!(s.record(&mut v, &r).is_none(), "skipped");
    }
    // A later keyframe closes the gap there.
    for _ in 0..2 {
        h.step();
    }
    s.keyframe(&mut v, h.world.clone());
    assert!(!v.is_waiting());
    let r = h.step();
    assert!(s.record(&mut v, &r).is_some());
    assert_eq!((v.summary(0).gaps[0].from, v.summary(0).gaps[0].to), (1, 7));
    // Another gap, and the stream ends inside it: open from the viewer's step to the
    // host's.
    h.step();
    let r = h.step();
    s.record(&mut v, &r);
    s.end(&mut v, h.world.step);
    assert!(v.is_stopped());
    let sum = v.summary(h.world.step);
    assert_eq!(sum.gaps.len(), 2);
    assert_eq!(sum.gaps[1].from, 8);
    assert_eq!(sum.gaps[1].to, h.world.step);
    assert!(sum.open_gap.is_some());
}

/// Records missing from a NATS stream are not a lost connection: no `Lost` event (nothing
/// reconnects), and the keyframe's gap says the whole gap; an open gap at the end is
/// reported as before.
#[test]
fn missing_records_are_no_lost_connection() {
    let mut h = Host::new(25);
    let mut v = attached(&h, Goal::default(), false);
    while v.poll_event().is_some() {}
    let mut s = Stream::new(&v);
    let r = h.step();
    s.record(&mut v, &r);
    h.step();
    let r = h.step();
    assert!(s.record(&mut v, &r).is_none(), "skipped");
    assert_eq!(v.poll_event(), None);
    s.keyframe(&mut v, h.world.clone());
    let gap = Gap::new(
        1,
        3,
        "steps 1..3 are not on the stream OSTM_t; continuing from its keyframe at step 3",
    );
    assert_eq!(
        v.poll_event(),
        Some(Event::Restarted {
            from: 1,
            to: 3,
            cause: Restart::Rejoin(gap)
        })
    );
    assert_eq!(v.poll_event(), None);
    // The stream ends inside a gap: no `Lost` either; the summary has it open.
    h.step();
    s.end(&mut v, h.world.step);
    let events: Vec<_> = std::iter::from_fn(|| v.poll_event()).collect();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Lost { .. })),
        "{events:?}"
    );
    assert!(v.summary(4).open_gap.is_some());
}

/// The host's end in place of a resync, to a viewer behind the host's step: the steps
/// from the viewer's world to the end's host step were never verified, an open gap
/// (docs/protocol.md, "The verdict's count"); none when the viewer reached it.
#[test]
fn an_end_past_the_viewers_step_leaves_the_steps_to_it_open() {
    let mut h = Host::new(24);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 7);
    for _ in 0..93 {
        h.step();
    }
    let mut e = end(EndReason::Finished);
    e.host_step = h.world.step;
    v.handle(Input::End(e.clone()));
    assert!(matches!(v.stop(), Some(Stop::HostEnded(_))));
    // The driver heard of no host step past the viewer's: the end's counts.
    let s = v.summary(7);
    assert_eq!(s.gaps.len(), 1, "{:?}", s.gaps);
    assert_eq!((s.gaps[0].from, s.gaps[0].to), (7, 100));
    assert!(s.open_gap.is_some());
    let t = s.tally();
    assert!(t.open);
    assert_eq!(
        t.to_string(),
        "verified 7 of the 100 steps from 0 to 100; 93 in 1 gap not verified"
    );
    // The same end to a viewer that reached the host's step: nothing open.
    let mut h = Host::new(24);
    let mut done = attached(&h, Goal::default(), false);
    feed(&mut done, &mut h, 100);
    done.handle(Input::End(e.clone()));
    let s = done.summary(100);
    assert!(s.gaps.is_empty() && s.open_gap.is_none(), "{:?}", s.gaps);
    assert_eq!(
        s.tally().to_string(),
        "verified 100 of the 100 steps from 0 to 100"
    );
    // The old behaviour, planted (the simulation's build): no gap.
    #[cfg(feature = "plants")]
    {
        let mut h = Host::new(24);
        let mut planted = attached(&h, Goal::default(), false);
        planted.plant(Plant::OkAtEndBehind);
        feed(&mut planted, &mut h, 7);
        planted.handle(Input::End(e));
        assert!(planted.summary(7).gaps.is_empty());
    }
}

/// A connection lost for good: the steps from the viewer's world to the latest host step
/// heard of are named; none when it had heard of nothing past its world.
#[test]
fn a_connection_lost_for_good_names_the_steps_to_the_last_host_step_heard_of() {
    let mut h = Host::new(25);
    let mut v = attached(&h, Goal::default(), false);
    feed(&mut v, &mut h, 5);
    v.handle(Input::Lost {
        why: "connection lost: reset".into(),
        last: true,
    });
    assert!(matches!(v.stop(), Some(Stop::Failed(_))));
    assert_eq!(
        v.summary(40).gaps,
        vec![Gap::new(5, 40, "connection lost: reset")]
    );
    assert!(v.summary(5).gaps.is_empty());
    // Lost while waiting for a reconnection, which never came: open as well.
    let mut h = Host::new(25);
    let mut v = attached(&h, Goal::default(), true);
    feed(&mut v, &mut h, 5);
    v.handle(Input::Lost {
        why: "connection lost: reset".into(),
        last: false,
    });
    v.handle(Input::Lost {
        why: "gave up reconnecting".into(),
        last: true,
    });
    assert_eq!(
        v.summary(9).gaps,
        vec![Gap::new(5, 9, "connection lost: reset")]
    );
}
