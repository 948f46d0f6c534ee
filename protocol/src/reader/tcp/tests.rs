//! The TCP/TLS reader's rules, one at a time, on a simulated clock and buffer.

use super::*;
use crate::wire::{HostCodec, Record};
use bytes::Bytes;

const ADDR: &str = "127.0.0.1:7000";

use crate::reader::test_world as world;

fn welcome() -> Welcome {
    Welcome {
        version: VERSION,
        role: PeerRole::Host as u8,
        rate: 60,
        heartbeat_ms: HEARTBEAT_MS,
        ring: 8,
        queue: 4,
    }
}

fn put(buf: &mut BytesMut, m: ToViewer) {
    HostCodec::new("t").encode(&m, buf).unwrap();
}

fn record(step: u64) -> ToViewer {
    ToViewer::Record(Record {
        step,
        hash: step * 7,
        input: Bytes::new(),
    })
}

fn reader(reconnect_ms: Option<u64>) -> Reader {
    Reader::new(
        Config {
            addr: ADDR.into(),
            reconnect_ms,
            ..Config::default()
        },
        0,
    )
}

/// Every event waiting, as short words.
fn drain(r: &mut Reader) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(e) = r.poll_event() {
        out.push(match e {
            Event::Connect => "connect".into(),
            Event::Close => "close".into(),
            Event::StreamEnded => "stream ended".into(),
            Event::Done => "done".into(),
            Event::DriftReply(d) => format!("drift reply {}", d.step),
            Event::Reconnecting { wait_ms, .. } => format!("reconnecting in {wait_ms}"),
            Event::AwaitDrain => "await drain".into(),
            Event::Deliver(a) => match a {
                Arrival::Attached {
                    world, connection, ..
                } => format!("attached {} on {connection}", world.step),
                Arrival::Record(r) => format!("record {}", r.step),
                Arrival::Records(run) => {
                    format!("records {} from {}", run.count(), run.first_step())
                }
                Arrival::Resync(w) => format!("resync {}", w.step),
                Arrival::Gap { to, .. } => format!("gap to {to}"),
                Arrival::Missing { why } => format!("missing: {why}"),
                Arrival::End(e) => format!("end {}", e.reason.name()),
                Arrival::Lost { why, last } => {
                    format!("lost{}: {why}", if last { " (last)" } else { "" })
                }
            },
        });
    }
    out
}

/// Connects at `now` and attaches at `step`: the hello went, the welcome and snapshot came
/// in one read.
fn attach(r: &mut Reader, now: Millis, step: u64) -> Vec<String> {
    r.handle_connected(now);
    assert!(matches!(r.poll_transmit(), Some(ToHost::Hello(_))));
    let mut buf = BytesMut::new();
    put(&mut buf, ToViewer::Welcome(welcome()));
    put(
        &mut buf,
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: world(1, step),
        },
    );
    while r.handle_data(now, &mut buf, false) {}
    assert!(buf.is_empty());
    drain(r)
}

#[test]
fn a_handshake_says_hello_and_attaches_at_the_snapshot() {
    let mut r = reader(None);
    assert_eq!(drain(&mut r), ["connect"]);
    assert_eq!(r.poll_timeout(), Some(CONNECT_TIMEOUT_MS));
    assert_eq!(attach(&mut r, 5, 40), ["attached 40 on 1"]);
    assert!(r.is_streaming());
    assert_eq!(r.host_step(), 40);
    assert_eq!(r.poll_timeout(), Some(5 + u64::from(HEARTBEAT_MS)));
}

#[test]
fn a_peer_that_sends_nothing_within_two_seconds_is_not_a_host() {
    let mut r = reader(Some(30_000));
    drain(&mut r);
    r.handle_connected(100);
    assert_eq!(r.poll_timeout(), Some(100 + WELCOME_TIMEOUT_MS));
    r.handle_timeout(100 + WELCOME_TIMEOUT_MS - 1);
    assert!(drain(&mut r).is_empty());
    r.handle_timeout(100 + WELCOME_TIMEOUT_MS);
    // Before the first attach, nothing is tried again, even with --reconnect.
    let want = format!(
        "lost (last): {}",
        Lost::NothingSent {
            addr: ADDR.into(),
            tls: false
        }
    );
    assert_eq!(drain(&mut r), ["close".to_string(), want, "done".into()]);
}

#[test]
fn a_slow_welcome_has_the_silence_timeout_from_the_connection() {
    let mut r = reader(None);
    drain(&mut r);
    r.handle_connected(0);
    let mut buf = BytesMut::new();
    put(&mut buf, ToViewer::Welcome(welcome()));
    let mut part = buf.split_to(5);
    assert!(!r.handle_data(1_000, &mut part, false));
    r.handle_timeout(WELCOME_TIMEOUT_MS);
    assert!(drain(&mut r).is_empty(), "bytes came: the wait goes on");
    assert_eq!(r.poll_timeout(), Some(SILENCE_MS));
    r.handle_timeout(SILENCE_MS);
    let want = Lost::NoWholeWelcome {
        addr: ADDR.into(),
        bytes: 5,
    };
    assert_eq!(drain(&mut r)[1], format!("lost (last): {want}"));
}

#[test]
fn the_attach_snapshot_has_the_silence_timeout_from_the_welcome() {
    let mut r = reader(None);
    drain(&mut r);
    r.handle_connected(0);
    let mut buf = BytesMut::new();
    put(&mut buf, ToViewer::Welcome(welcome()));
    assert!(r.handle_data(1_500, &mut buf, false));
    assert_eq!(r.poll_timeout(), Some(1_500 + SILENCE_MS));
    r.handle_timeout(1_500 + SILENCE_MS);
    let want = Lost::NoAttachSnapshot { addr: ADDR.into() };
    assert_eq!(drain(&mut r)[1], format!("lost (last): {want}"));
}

#[test]
fn a_stranger_is_named_by_what_it_sent() {
    let mut r = reader(Some(30_000));
    drain(&mut r);
    r.handle_connected(0);
    let mut buf = BytesMut::from(&b"SSH-2.0-OpenSSH_9.2\r\n"[..]);
    assert!(r.handle_data(10, &mut buf, false));
    let got = drain(&mut r);
    assert!(
        got[1].starts_with(&format!("lost (last): {ADDR} is not an ostm host: it sent \"SSH-2.0-OpenSSH_9.2\\r\\n\" ({ADDR}: at offset 0: ")),
        "{got:?}"
    );
}

#[test]
fn records_in_one_read_are_taken_as_one_run_and_the_step_goes_on() {
    let mut r = reader(None);
    drain(&mut r);
    attach(&mut r, 0, 10);
    let mut buf = BytesMut::new();
    for s in 10..15 {
        put(&mut buf, record(s));
    }
    put(&mut buf, ToViewer::Heartbeat { host_step: 30 });
    put(&mut buf, record(15));
    while r.handle_data(50, &mut buf, false) {}
    assert_eq!(drain(&mut r), ["records 5 from 10", "records 1 from 15"]);
    assert_eq!(r.host_step(), 30);
    // A record out of step is a protocol error naming its offset.
    put(&mut buf, record(17));
    assert!(r.handle_data(60, &mut buf, false));
    let got = drain(&mut r);
    assert!(
        got.iter()
            .any(|e| e.contains("expected a record for step 16, found a record for step 17")),
        "{got:?}"
    );
    assert_eq!(got.last().map(String::as_str), Some("done"));
}

#[test]
fn one_at_a_time_takes_each_record_alone() {
    let mut r = Reader::new(
        Config {
            addr: ADDR.into(),
            one_at_a_time: true,
            ..Config::default()
        },
        0,
    );
    drain(&mut r);
    attach(&mut r, 0, 3);
    let mut buf = BytesMut::new();
    put(&mut buf, record(3));
    put(&mut buf, record(4));
    assert!(r.handle_data(1, &mut buf, false));
    assert_eq!(drain(&mut r), ["record 3"]);
    assert!(r.handle_data(1, &mut buf, false));
    assert!(!r.handle_data(1, &mut buf, false));
    assert_eq!(drain(&mut r), ["record 4"]);
}

#[test]
fn a_resync_of_another_world_is_refused_with_its_offset() {
    let mut r = reader(Some(30_000));
    drain(&mut r);
    attach(&mut r, 0, 0);
    let mut buf = BytesMut::new();
    put(
        &mut buf,
        ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world: world(1, 90),
        },
    );
    put(
        &mut buf,
        ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world: world(2, 95),
        },
    );
    while r.handle_data(1, &mut buf, false) {}
    let got = drain(&mut r);
    assert_eq!(got[0], "resync 90");
    let at = {
        let mut b = BytesMut::new();
        put(&mut b, ToViewer::Welcome(welcome()));
        put(
            &mut b,
            ToViewer::Snapshot {
                kind: SnapshotKind::Attach,
                world: world(1, 0),
            },
        );
        put(
            &mut b,
            ToViewer::Snapshot {
                kind: SnapshotKind::Resync,
                world: world(1, 90),
            },
        );
        b.len()
    };
    // A broken stream is final, even with --reconnect.
    assert_eq!(
        got[3],
        format!("lost (last): {ADDR}: at offset {at}: expected a resync snapshot of the attached world (2D, 3 bodies, seed 1, no link), found one of another world (2D, 3 bodies, seed 2, no link)")
    );
}

#[test]
fn heartbeats_go_every_second_with_the_viewers_step() {
    let mut r = reader(None);
    drain(&mut r);
    attach(&mut r, 0, 0);
    r.handle_viewer_step(7);
    r.handle_timeout(999);
    assert_eq!(r.poll_transmit(), None);
    r.handle_timeout(1_000);
    assert_eq!(
        r.poll_transmit(),
        Some(ToHost::Heartbeat { viewer_step: 7 })
    );
    assert_eq!(r.poll_timeout(), Some(2_000));
    // The verifier's drift request goes on the stream.
    r.send(ToHost::DriftRequest { step: 5 });
    assert_eq!(r.poll_transmit(), Some(ToHost::DriftRequest { step: 5 }));
}

#[test]
fn silence_loses_the_connection_and_reconnection_starts_at_once() {
    let mut r = reader(Some(30_000));
    drain(&mut r);
    attach(&mut r, 0, 0);
    let mut buf = BytesMut::new();
    put(&mut buf, ToViewer::Heartbeat { host_step: 3 });
    assert!(r.handle_data(4_000, &mut buf, false));
    assert!(!r.silent(4_000 + SILENCE_MS - 1));
    for t in (5_000..4_000 + SILENCE_MS).step_by(1_000) {
        r.handle_timeout(t);
    }
    assert!(drain(&mut r).is_empty());
    assert!(r.silent(4_000 + SILENCE_MS));
    r.handle_timeout(4_000 + SILENCE_MS);
    assert_eq!(
        drain(&mut r),
        [
            "stream ended".to_string(),
            "close".into(),
            format!("lost: {}", Lost::Silent),
            "connect".into()
        ]
    );
}

#[test]
fn a_stream_closed_inside_a_frame_is_a_lost_connection() {
    // A host killed (or dropping the viewer) in the middle of a write: the bytes it had
    // sent end inside a record's frame. With --reconnect the reader connects again, and
    // says where the frame was cut; without, that sentence is its last word.
    for reconnect in [Some(30_000), None] {
        let mut r = reader(reconnect);
        drain(&mut r);
        attach(&mut r, 0, 5);
        let mut buf = BytesMut::new();
        put(&mut buf, record(5));
        let whole = buf.len();
        put(&mut buf, record(6));
        buf.truncate(whole + 7);
        while r.handle_data(100, &mut buf, true) {}
        let got = drain(&mut r);
        let lost = if reconnect.is_some() {
            "lost"
        } else {
            "lost (last)"
        };
        let cut = format!("{lost}: protocol error: {ADDR}: at offset ");
        assert!(
            got.get(3).is_some_and(|l| l.starts_with(&cut)
                && l.ends_with(
                    "connection closed inside a frame: expected 19 frame bytes, found 3 bytes"
                )),
            "{got:?}"
        );
        let last = if reconnect.is_some() {
            "connect"
        } else {
            "done"
        };
        let want = ["records 1 from 5", "stream ended", "close", &got[3], last];
        assert_eq!(got, want, "reconnect {reconnect:?}");
    }
}

#[test]
fn the_reconnection_budget_runs_from_the_end_of_the_latest_connection() {
    let mut r = reader(Some(3_000));
    drain(&mut r);
    attach(&mut r, 0, 0);
    // The first connection ends at 100 000; attempts fail, waiting 250 ms doubling.
    let mut buf = BytesMut::new();
    assert!(r.handle_data(100_000, &mut buf, true));
    drain(&mut r);
    let mut now = 100_000;
    let mut waits = Vec::new();
    loop {
        r.handle_connect_failed(now, "connection refused".into());
        let got = drain(&mut r);
        if let Some(w) = got.iter().find_map(|e| e.strip_prefix("reconnecting in ")) {
            waits.push(w.parse::<u64>().unwrap());
            now = r.poll_timeout().unwrap();
            r.handle_timeout(now);
            assert_eq!(drain(&mut r), ["connect"]);
        } else {
            assert_eq!(
                got[1],
                format!("lost (last): gave up reconnecting after 3 s: cannot connect to {ADDR}: connection refused")
            );
            break;
        }
    }
    assert_eq!(waits, [250, 500, 1_000, 2_000]);
    assert_eq!(now, 103_750);
}

#[test]
fn a_reconnection_is_a_new_connection_with_a_fresh_wait_and_budget() {
    let mut r = reader(Some(3_000));
    drain(&mut r);
    attach(&mut r, 0, 0);
    let mut buf = BytesMut::new();
    assert!(r.handle_data(10, &mut buf, true));
    drain(&mut r);
    r.handle_connect_failed(10, "refused".into());
    drain(&mut r);
    r.handle_timeout(260);
    drain(&mut r);
    assert_eq!(attach(&mut r, 300, 50), ["attached 50 on 2"]);
    assert_eq!(r.host_step(), 50);
    // Lost again at 60 000: the budget counts from there, not from 10.
    assert!(r.handle_data(60_000, &mut buf, true));
    drain(&mut r);
    r.handle_connect_failed(62_000, "refused".into());
    assert_eq!(drain(&mut r), ["close", "reconnecting in 250"]);
}

#[test]
fn an_end_other_than_finished_is_ridden_out_with_reconnect() {
    let mut r = reader(Some(3_000));
    drain(&mut r);
    attach(&mut r, 0, 0);
    let mut buf = BytesMut::new();
    put(
        &mut buf,
        ToViewer::End(End {
            reason: EndReason::Shutdown,
            text: "bye".into(),
            host_step: 9,
        }),
    );
    assert!(r.handle_data(5, &mut buf, false));
    assert_eq!(
        drain(&mut r),
        ["end shutdown", "stream ended", "close", "connect"]
    );
    let mut r = reader(Some(3_000));
    drain(&mut r);
    attach(&mut r, 0, 0);
    put(
        &mut buf,
        ToViewer::End(End {
            reason: EndReason::Finished,
            text: "done".into(),
            host_step: 9,
        }),
    );
    assert!(r.handle_data(5, &mut buf, false));
    assert_eq!(
        drain(&mut r),
        ["end finished", "stream ended", "close", "done"]
    );
}

/// A TLS alert or handshake record (what a TLS host answers a plaintext hello with) is
/// told apart from other bytes, which `describe` reads as text or hex.
#[test]
fn a_tls_record_is_told_apart_from_a_stranger_s_bytes() {
    assert_eq!(
        tls_record(&[0x15, 3, 3, 0, 2, 2, 0x46]).as_deref(),
        Some("15 03 03 00 02 02 46")
    );
    let long = [&[0x16u8, 3, 1][..], &[0u8; 60][..]].concat();
    assert!(tls_record(&long).unwrap().ends_with("00…"));
    for not in [
        &b"SSH-2.0-OpenSSH_9.2p1\r\n"[..],
        &[0x15, 3, 5],
        &[0x18, 3, 3],
        &[0x16, 3],
    ] {
        assert_eq!(tls_record(not), None, "{not:?}");
    }
    assert_eq!(describe(b"SSH-2.0\r\n"), "\"SSH-2.0\\r\\n\"");
    assert_eq!(describe(&[0, 0xff]), "the bytes 00 ff");
}

#[test]
fn a_full_spool_closes_the_connection_and_joins_again_once_drained() {
    let mut r = reader(None);
    drain(&mut r);
    attach(&mut r, 0, 0);
    r.handle_spool_full(50, "the spool is full".into());
    assert_eq!(
        drain(&mut r),
        [
            "stream ended",
            "close",
            "lost: the spool is full",
            "await drain"
        ]
    );
    assert_eq!(r.poll_timeout(), None);
    r.handle_spool_drained(900);
    assert_eq!(drain(&mut r), ["connect"]);
    assert_eq!(attach(&mut r, 950, 70), ["attached 70 on 2"]);
}

/// The texts the verdict gives, byte for byte as they were written by hand at each site
/// before [`Lost`].
#[test]
fn the_tcp_readers_reasons_read_as_they_always_have() {
    let a = || ADDR.to_string();
    let addr = a();
    let io = || "reset by peer".to_string();
    let bad = FormatError::new(a(), 9, "unknown message type 0x99");
    let end = End {
        reason: EndReason::BadToken,
        text: "the token does not match".into(),
        host_step: 3,
    };
    let bad_token = EndReason::BadToken.name();
    let cases: Vec<(Lost, String)> = vec![
        (Lost::ConnectTimedOut { addr: a() }, format!("cannot connect to {addr}: timed out")),
        (
            Lost::Connect { addr: a(), err: io() },
            format!("cannot connect to {addr}: reset by peer"),
        ),
        (
            Lost::NothingSent { addr: a(), tls: false },
            format!(
                "{addr} sent nothing within 2000 ms of the hello: it is not an ostm host, or not answering (a host that serves TLS waits for a TLS client: try --tls)",
            ),
        ),
        (
            Lost::NothingSent { addr: a(), tls: true },
            format!(
                "{addr} sent nothing within 2000 ms of the hello: it is not an ostm host, or not answering",
            ),
        ),
        (
            Lost::NoWholeWelcome { addr: a(), bytes: 12 },
            format!("{addr} sent no whole welcome within {SILENCE_TIMEOUT_MS} ms of the hello (12 bytes arrived): the link is too slow, or the host has stalled"),
        ),
        (
            Lost::NoAttachSnapshot { addr: a() },
            format!("{addr} sent its welcome but no attach snapshot within {SILENCE_TIMEOUT_MS} ms: the link is too slow, or the host has stalled"),
        ),
        (
            Lost::EndedBeforeSnapshot(end.clone()),
            format!("the host ended the stream before its snapshot ({bad_token}): the token does not match"),
        ),
        (
            Lost::NotAttachSnapshot { addr: a(), at: 40, found: "a record (0x83)" },
            format!("{addr}: at offset 40: expected the host's attach snapshot (0x82, kind 0), found a record (0x83)"),
        ),
        (Lost::Tls("the TLS handshake failed".into()), "the TLS handshake failed".into()),
        (
            Lost::SendHello { addr: a(), err: format!("connection failed: {}", io()) },
            format!("cannot send the hello to {addr}: connection failed: reset by peer"),
        ),
        (
            Lost::RefusedByHost(end),
            format!("the host refused the viewer ({bad_token}): the token does not match"),
        ),
        (
            Lost::NotWelcome { addr: a(), at: 0, found: "a heartbeat (0x84)" },
            format!("{addr}: at offset 0: expected the host's welcome (0x81), found a heartbeat (0x84)"),
        ),
        (
            Lost::Version(99),
            format!("the host speaks protocol version 99, this viewer speaks {VERSION}"),
        ),
        (
            Lost::ClosedInHandshake { addr: a(), tls: false },
            format!("{addr} closed the connection during the handshake (a host that serves TLS closes a plaintext connection: try --tls)"),
        ),
        (
            Lost::ClosedInHandshake { addr: a(), tls: true },
            format!("{addr} closed the connection during the handshake"),
        ),
        (
            Lost::NotOstm { addr: a(), seen: "\"SSH-2.0\"".into(), err: bad.clone() },
            format!("{addr} is not an ostm host: it sent \"SSH-2.0\" ({bad})"),
        ),
        (
            Lost::ServesTls { addr: a(), record: "15 03 03 00 02 02 46".into() },
            format!("{addr} serves TLS (it answered with a TLS record: 15 03 03 00 02 02 46): connect with --tls, and with --tls-ca CA.pem too when a private CA signed its certificate (as `ostm-host cert` makes)"),
        ),
        (Lost::Protocol(bad.clone()), format!("protocol error: {bad}")),
        (Lost::Connection(io()), "connection lost: reset by peer".into()),
        (
            Lost::GaveUp { secs: 30, why: Box::new(Lost::ConnectTimedOut { addr: a() }) },
            format!("gave up reconnecting after 30 s: cannot connect to {addr}: timed out"),
        ),
        (Lost::Spool(io()), "cannot spool the host's records to disk: reset by peer".into()),
        (Lost::SpoolEnd, "cannot spool the host's end message".into()),
        (
            Lost::ClosedWithoutEnd,
            "the host closed the connection without an end message".into(),
        ),
        (
            Lost::OutOfStep { addr: a(), at: 80, expected: 5, found: 7 },
            format!("{addr}: at offset 80: expected a record for step 5, found a record for step 7"),
        ),
        (
            Lost::ResyncOfAnotherWorld {
                addr: a(),
                at: 80,
                attached: "3D, 24 bodies, seed 1, no link".into(),
                found: "3D, 24 bodies, seed 2, no link".into(),
            },
            format!("{addr}: at offset 80: expected a resync snapshot of the attached world (3D, 24 bodies, seed 1, no link), found one of another world (3D, 24 bodies, seed 2, no link)"),
        ),
        (
            Lost::Unexpected { addr: a(), at: 80, found: "a welcome (0x81)" },
            format!("{addr}: at offset 80: expected a record, heartbeat, resync snapshot, end or drift reply, found a welcome (0x81)"),
        ),
        (Lost::Silent, format!("the host sent nothing for {SILENCE_TIMEOUT_MS} ms")),
    ];
    for (why, text) in cases {
        assert_eq!(why.to_string(), text);
    }
}
