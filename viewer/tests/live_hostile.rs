//! Hostile and heavy peers: garbage and truncated frames both ways, wrong versions and
//! roles, tokens, the viewer cap (connections without a hello hold no slot), 100 viewers at
//! once, and a viewer that never reads. Each costs only its own connection; the host keeps
//! stepping and serving.

mod live_support;

use bytes::BytesMut;
use live_support::*;
use ostm_protocol::wire::{EndReason, HostCodec, ToViewer, ViewerCodec, Welcome};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// Reads everything the host sends until it closes, and decodes it.
fn read_all(mut s: TcpStream) -> Vec<ToViewer> {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let mut src = BytesMut::from(&buf[..]);
    let mut dec = ViewerCodec::new("host");
    let mut out = Vec::new();
    while let Ok(Some(m)) = dec.decode_eof(&mut src) {
        out.push(m);
    }
    out
}

#[track_caller]
fn ended_with(msgs: &[ToViewer], reason: EndReason, text: &str) {
    match msgs.last() {
        Some(ToViewer::End(e)) => {
            assert_eq!(e.reason, reason, "{e:?}");
            assert!(
                e.text.contains(text),
                "{:?} does not contain {text:?}",
                e.text
            );
        }
        other => panic!("expected an end message, found {other:?}"),
    }
}

#[test]
fn garbage_truncation_wrong_version_and_wrong_role_cost_only_their_connection() {
    let mut host = Host::start(&["--rate", "500", "--json", "--status-ms", "50"]);
    // An HTTP client: its first four bytes read as a length far above the maximum.
    let mut s = raw(&host.addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    ended_with(
        &read_all(s),
        EndReason::NotAViewer,
        "at offset 0: expected frame length 1..=65554, found 542393671",
    );
    // A version this host does not speak.
    let mut s = raw(&host.addr);
    s.write_all(&hello(9, 1, b"")).unwrap();
    ended_with(
        &read_all(s),
        EndReason::VersionMismatch,
        "the host speaks protocol version 1, the viewer sent version 9",
    );
    // A host, not a viewer.
    let mut s = raw(&host.addr);
    s.write_all(&hello(1, 2, b"")).unwrap();
    ended_with(
        &read_all(s),
        EndReason::NotAViewer,
        "expected role 1 (viewer), found role 2",
    );
    // A viewer that attaches, then sends half a frame and closes its side.
    let mut s = raw(&host.addr);
    s.write_all(&hello(1, 1, b"")).unwrap();
    s.write_all(&[9, 0, 0, 0, 0x03, 1, 2]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let msgs = read_all(s);
    assert!(
        matches!(
            msgs.first(),
            Some(ToViewer::Welcome(Welcome { version: 1, .. }))
        ),
        "{msgs:?}"
    );
    // A hello with no token is 4 + 1 + 8 + 2 + 1 + 1 = 17 bytes: the cut frame starts there.
    ended_with(
        &msgs,
        EndReason::ProtocolError,
        "at offset 17: connection closed inside a frame: expected 9 frame bytes, found 3 bytes",
    );
    // A viewer that sends an unknown message type after attaching.
    let mut s = raw(&host.addr);
    s.write_all(&hello(1, 1, b"")).unwrap();
    s.write_all(&[1, 0, 0, 0, 0x7e]).unwrap();
    ended_with(
        &read_all(s),
        EndReason::ProtocolError,
        "at offset 21: expected a viewer message type 0x01..=0x03, found 0x7e",
    );
    // The host still serves.
    let out = viewer(&["check", &host.addr, "--steps", "100"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v = host.wait_status(|v| v["protocol_errors"].as_u64().unwrap_or(0) >= 3);
    assert!(v["refused"].as_u64().unwrap() >= 3);
}

/// A fake host that answers the hello with `bytes`, then closes.
fn fake_host(bytes: Vec<u8>) -> String {
    fake_host_then(bytes, true)
}

/// A fake host that answers the hello with `bytes`, then closes its side or stays silent.
fn fake_host_then(bytes: Vec<u8>, close: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            s.set_read_timeout(Some(LIMIT)).unwrap();
            let mut hello = [0u8; 16];
            let _ = s.read(&mut hello);
            let _ = s.write_all(&bytes);
            if close {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
    });
    addr
}

#[test]
fn garbage_and_truncated_frames_from_a_host_give_the_viewer_clear_errors() {
    let addr = fake_host(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec());
    let out = viewer(&["attach", &addr]);
    assert_eq!(code(&out), 2);
    // Not an ostm host: it says so, with what the peer sent, and the frame error.
    assert!(
        stderr(&out).contains(&format!(
            "{addr} is not an ostm host: it sent \"HTTP/1.1 400 Bad Request\\r\\n\\r\\n\" ({addr}: at offset 0: expected frame length 1..=65554, found"
        )),
        "{}",
        stderr(&out)
    );

    // A whole welcome (32 bytes), then a snapshot frame cut after 10 bytes.
    let mut bytes = welcome_frame();
    assert_eq!(bytes.len(), 32);
    bytes.extend_from_slice(&[100, 0, 0, 0, 0x82, 0, 0, 70, 0, 0]);
    let addr = fake_host(bytes);
    let out = viewer(&["attach", &addr]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains(&format!("{addr}: at offset 32: connection closed inside a frame: expected 100 frame bytes, found 6 bytes")),
        "{}",
        stderr(&out)
    );

    // A whole welcome, then a snapshot whose probe holds a bad dimension byte.
    let mut bytes = welcome_frame();
    let mut p = vec![0x82, 0, 0];
    p.extend_from_slice(&50u32.to_le_bytes());
    p.extend_from_slice(&[7, 1, 0, 0, 0, 0]);
    p.extend_from_slice(&[0u8; 44]);
    bytes.extend_from_slice(&(p.len() as u32).to_le_bytes());
    bytes.extend(p);
    let addr = fake_host(bytes);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    // 32 (welcome) + 4 (length) + 1 (type) + 1 (kind) + 1 (flags) + 4 (probe length) = 43.
    // A host that sent a good welcome is an ostm host: its bad snapshot is a protocol
    // error, not a stranger's bytes.
    assert!(
        stdout(&out).contains(&format!(
            "protocol error: {addr}: at offset 43: expected dimensions 2 or 3, found 7"
        )),
        "{}",
        stdout(&out)
    );
    assert!(
        !stdout(&out).contains("not an ostm host"),
        "{}",
        stdout(&out)
    );
}

/// A host that attaches the viewer and then sends nothing at all: the viewer's own
/// heartbeats do not keep it waiting; it gives up after the silence timeout.
#[test]
fn a_silent_host_is_given_up_on() {
    let (bytes, _) = handshake_to(0);
    let addr = fake_host_then(bytes, false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains("the host sent nothing for 10000 ms"),
        "{}",
        stdout(&out)
    );
}

/// The viewer's heartbeats carry the step its world has reached (docs/protocol.md, `0x03`
/// heartbeat): a host that attached it at step 0 and sent three records hears of step 3
/// (the viewer's heartbeats said 0 whatever it had verified before).
#[test]
fn heartbeats_carry_the_viewers_step() {
    use ostm_protocol::wire::{Record, ToHost};
    let (mut bytes, mut world) = handshake_to(0);
    for _ in 0..3 {
        let step = world.step;
        world.step(&[]);
        let record = ToViewer::Record(Record {
            step,
            hash: world.hash(),
            input: bytes::Bytes::new(),
        });
        bytes.extend(frame_of(&record));
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    // Answers the hello with the handshake and the records, then reports the step of each
    // heartbeat until the connection closes.
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        s.set_read_timeout(Some(LIMIT)).unwrap();
        let mut dec = HostCodec::new("viewer");
        let mut src = BytesMut::new();
        let mut sent = false;
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut chunk) {
            src.extend_from_slice(&chunk[..n]);
            while let Ok(Some(m)) = dec.decode(&mut src) {
                match m {
                    ToHost::Hello(_) if !sent => {
                        sent = true;
                        s.write_all(&bytes).unwrap();
                    }
                    // The test has heard enough.
                    ToHost::Heartbeat { viewer_step } if tx.send(viewer_step).is_err() => return,
                    _ => {}
                }
            }
        }
    });
    let _viewer = spawn_viewer(&["attach", &addr]);
    // A heartbeat a second, from the attach: one of the first five says step 3 (the
    // records are verified within moments, however loaded the machine).
    let mut steps = Vec::new();
    while steps.len() < 5 && steps.last() != Some(&3) {
        match rx.recv_timeout(LIMIT) {
            Ok(step) => steps.push(step),
            Err(_) => break,
        }
    }
    assert_eq!(steps.last(), Some(&3), "heartbeats heard: {steps:?}");
}

/// A host whose snapshot is at step u64::MAX and whose record is for that step: the
/// viewer verifies it (the world's step wraps to 0, as `World::step` does) rather than
/// overflowing on the host's step.
#[test]
fn a_host_at_the_last_step_number_is_verified_without_overflow() {
    let (mut bytes, mut world) = handshake_to(u64::MAX);
    world.step(&[]);
    let record = ToViewer::Record(ostm_protocol::wire::Record {
        step: u64::MAX,
        hash: world.hash(),
        input: bytes::Bytes::new(),
    });
    bytes.extend_from_slice(&HostCodec::encode_frame(&record).unwrap().0);
    let addr = fake_host_then(bytes, false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).starts_with("ok: verified 1 of the 1 step "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_token_is_required_and_never_logged() {
    let host = Host::start_env(
        &[
            "--rate",
            "500",
            "--status-ms",
            "0",
            "--token",
            "s3cr3t-t0ken",
        ],
        &[("RUST_LOG", "debug")],
    );
    let out = viewer(&["check", &host.addr, "--steps", "10"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(
            "the host refused the viewer (bad-token): this host requires a token; none was sent"
        ),
        "{}",
        stdout(&out)
    );
    let out = viewer(&["check", &host.addr, "--steps", "10", "--token", "wrong"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains("(bad-token): the token does not match"),
        "{}",
        stdout(&out)
    );
    let out = viewer(&[
        "check",
        &host.addr,
        "--steps",
        "10",
        "--token",
        "s3cr3t-t0ken",
    ]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    host.interrupt();
    let (status, _, err) = host.wait();
    assert!(status.success());
    assert!(err.contains("refused"), "debug logs were written: {err}");
    assert!(!err.contains("s3cr3t"), "the token appears in the logs");
}

#[test]
fn max_viewers_refuses_the_one_too_many() {
    let mut host = Host::start(&[
        "--rate",
        "500",
        "--max-viewers",
        "1",
        "--json",
        "--status-ms",
        "50",
    ]);
    let mut first = raw(&host.addr);
    first.write_all(&hello(1, 1, b"")).unwrap();
    host.wait_status(|v| v["viewers"] == 1);
    let out = viewer(&["check", &host.addr, "--steps", "10"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains("the host refused the viewer (full)"),
        "{}",
        stdout(&out)
    );
    drop(first);
    host.wait_status(|v| v["viewers"] == 0);
    let out = viewer(&["check", &host.addr, "--steps", "10"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

/// Connections that send no whole hello (nothing, or half of one) hold no viewer slot: with
/// `--max-viewers 1` and both waiting, a viewer's hello is welcomed, not refused as full.
/// Past their 2 000 ms they are closed with no end message and counted as refused
/// (docs/protocol.md, "Connections before their hello"). Tried again until the viewer was
/// welcomed while both still waited, however slow the machine.
#[test]
fn connections_without_a_hello_hold_no_slot_and_are_closed_with_no_end_message() {
    let mut host = Host::start(&[
        "--rate",
        "500",
        "--max-viewers",
        "1",
        "--json",
        "--status-ms",
        "50",
    ]);
    let still_open = |s: &TcpStream| {
        s.set_nonblocking(true).unwrap();
        let open =
            matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        s.set_nonblocking(false).unwrap();
        open
    };
    let mut refused = 0;
    for _ in 0..20 {
        let idle = raw(&host.addr);
        let mut half = raw(&host.addr);
        half.write_all(&hello(1, 1, b"")[..9]).unwrap();
        host.wait_status(|v| v["waiting"] == 2);
        // A viewer's hello, its first frame read: a welcome, not end reason 5.
        let mut viewer = raw(&host.addr);
        viewer.write_all(&hello(1, 1, b"")).unwrap();
        let mut first = [0u8; 5];
        viewer.read_exact(&mut first).unwrap();
        assert_eq!(first[4], 0x81, "a welcome, not an end (0x85): {first:?}");
        let waited = still_open(&idle) && still_open(&half);
        drop(viewer);
        for mut s in [idle, half] {
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            assert!(got.is_empty(), "no end message: {got:?}");
        }
        refused += 2;
        host.wait_status(|v| v["waiting"] == 0 && v["refused"].as_u64() >= Some(refused));
        if waited {
            return;
        }
    }
    panic!("the viewer was never welcomed while the two connections still waited");
}

#[test]
fn a_hundred_viewers_at_once() {
    let mut host = Host::start(&["--rate", "1000", "--json", "--status-ms", "100"]);
    let children: Vec<_> = (0..100)
        .map(|_| spawn_viewer(&["check", &host.addr, "--steps", "300"]))
        .collect();
    let mut ok = 0;
    for c in children {
        let out = finish(c);
        assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).starts_with("ok: verified 300 of the "));
        ok += 1;
    }
    assert_eq!(ok, 100);
    let v =
        host.wait_status(|v| v["viewers_total"].as_u64().unwrap_or(0) >= 100 && v["viewers"] == 0);
    assert_eq!(v["refused"], 0);
}

/// A viewer that handshakes and then stops reading: the host keeps stepping, another
/// viewer verifies meanwhile, and no viewer is ever further behind than the cap when its
/// connection takes records. When the slow viewer reads again it is far more than the cap
/// behind: its connection sends a resync snapshot (kind 1) of the host's world, after
/// records that run contiguously from its attach step.
#[test]
fn a_viewer_that_stops_reading_neither_slows_the_host_nor_grows_its_memory_and_is_resynced() {
    const STEPS: u64 = 300_000;
    let mut host = Host::start(RESYNCING_HOST);
    let mut slow = raw(&host.addr);
    slow.write_all(&hello(1, 1, b"")).unwrap();
    let start = host.wait_status(|v| v["viewers"] == 1)["step"]
        .as_u64()
        .unwrap();
    let out = viewer(&["check", &host.addr, "--steps", "500"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let mut statuses = vec![host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= start + STEPS)];
    // The slow viewer reads again: whatever its socket held, then a resync snapshot.
    let mut src = BytesMut::new();
    let mut dec = ViewerCodec::new("host");
    let mut buf = vec![0u8; 64 * 1024];
    let (mut next, mut records) = (None::<u64>, 0u64);
    let resync = 'read: loop {
        let n = slow.read(&mut buf).expect("the host sends on");
        assert!(n > 0, "the host closed the slow viewer's connection");
        src.extend_from_slice(&buf[..n]);
        while let Some(m) = dec.decode(&mut src).expect("frames") {
            match m {
                ToViewer::Snapshot { kind, world } => match kind {
                    ostm_protocol::wire::SnapshotKind::Attach => next = Some(world.step),
                    ostm_protocol::wire::SnapshotKind::Resync => break 'read world,
                },
                ToViewer::Record(r) => {
                    assert_eq!(Some(r.step), next, "records run on from the attach step");
                    next = Some(r.step + 1);
                    records += 1;
                }
                _ => {}
            }
        }
    };
    assert!(
        resync.step > next.unwrap() + 64,
        "resynced at step {} after {records} records up to {next:?}",
        resync.step
    );
    host.interrupt();
    while let Some(l) = host.line() {
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        statuses.push(v.clone());
        if v["event"] == "end" {
            break;
        }
    }
    let end = statuses.last().unwrap();
    assert_eq!(end["event"], "end", "{end}");
    assert!(end["resyncs"].as_u64().unwrap() >= 1, "{end}");
    for s in &statuses {
        assert!(
            s["queue_max"].as_u64().unwrap() <= 64,
            "a viewer was taken records from further behind than the cap: {s}"
        );
    }
    drop(slow);
    let (status, _, _) = host.wait();
    assert!(status.success());
}

/// A viewer that keeps up is written to by the host's fan-out directly, without its
/// connection's task; one whose socket is full is written to by the task, from the byte
/// where the fan-out's write stopped (docs/protocol.md, "Slow viewers and resync"). A
/// reader with a small receive buffer that stops reading again and again (long enough for
/// both kernel buffers to fill) and then reads everything moves its connection from one
/// path to the other and back each time: every frame it receives must be whole, every
/// record the next step's, with the host's hash for that step, and none resent.
#[test]
fn a_reader_that_pauses_again_and_again_receives_every_record_once_and_whole() {
    const PAUSES: usize = 6;
    let mut host = Host::start(&["--rate", "3000", "--json", "--status-ms", "100"]);
    let mut s = small_receive_buffer(&host.addr);
    s.write_all(&hello(1, 1, b"")).unwrap();
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 4096];
    for _ in 0..PAUSES {
        // Read what arrives for a while (the connection catches up), then stop reading
        // for long enough that at 3 000 steps/s the host's 32 KiB of send buffer and the
        // reader's few KiB fill (however slowly the host steps, the next pause goes on).
        let until = std::time::Instant::now() + std::time::Duration::from_millis(400);
        while std::time::Instant::now() < until {
            let n = s.read(&mut buf).expect("the host sends on");
            assert!(n > 0, "the host closed the connection");
            bytes.extend_from_slice(&buf[..n]);
        }
        std::thread::sleep(std::time::Duration::from_millis(1200));
    }
    let mut src = BytesMut::from(&bytes[..]);
    let mut dec = ViewerCodec::new("host");
    let (mut next, mut records, mut ahead) = (None::<u64>, Vec::new(), 0);
    while let Some(m) = dec.decode(&mut src).expect("whole frames") {
        match m {
            ToViewer::Snapshot { kind, world } => {
                assert_eq!(kind, ostm_protocol::wire::SnapshotKind::Attach, "no resync");
                next = Some(world.step);
            }
            ToViewer::Record(r) => {
                assert_eq!(Some(r.step), next, "each record the next step's, once");
                next = Some(r.step + 1);
                records.push((r.step, r.hash));
            }
            ToViewer::Heartbeat { host_step } if next.is_some_and(|n| host_step > n + 64) => {
                ahead += 1
            }
            _ => {}
        }
    }
    let last = next.expect("an attach snapshot");
    assert!(records.len() > 1000, "{} records", records.len());
    assert!(
        ahead >= 1,
        "the pauses never put the reader behind the host: its connection never left the fan-out's writes"
    );
    let rows = default_rows(last);
    for (step, hash) in records {
        assert_eq!(
            hash,
            rows[step as usize + 1],
            "the host's hash at step {step}"
        );
    }
    // The host's latest status line: one read earlier would miss a later resync or stall.
    let v = host.status_now();
    assert_eq!(
        (&v["resyncs"], &v["stalled"]),
        (&0.into(), &0.into()),
        "{v}"
    );
}

/// A connection to `addr` whose socket asks for a 2 KiB receive buffer, so that a pause
/// in reading fills it within a few records.
fn small_receive_buffer(addr: &str) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt
        .block_on(async {
            let sock = tokio::net::TcpSocket::new_v4()?;
            sock.set_recv_buffer_size(2048)?;
            sock.connect(addr.parse().expect("an address")).await
        })
        .expect("connect");
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s
}

/// Steps the host runs after its viewers are attached before the first sample (their
/// queues and socket buffers have long filled by then: a few thousand steps do that).
const WARM_STEPS: u64 = 20_000;
/// Steps between the first and the last sample.
const RUN_STEPS: u64 = 200_000;
/// How much the host's resident set may grow between the two samples, in KiB.
const RSS_BOUND_KIB: u64 = 8 * 1024;

/// Runs a host at `--rate max` with `viewers` connections that send their hello and
/// heartbeats but never read, and returns its resident set (KiB) after [`WARM_STEPS`]
/// and again [`RUN_STEPS`] later.
fn rss_with_viewers_that_never_read(viewers: usize, extra: &[&str]) -> (u64, u64) {
    let mut args = vec![
        "--rate",
        "max",
        "--viewer-queue",
        "256",
        "--stall-ms",
        "600000",
        "--json",
        "--status-ms",
        "20",
    ];
    args.extend_from_slice(extra);
    let mut host = Host::start(&args);
    let socks: Vec<TcpStream> = (0..viewers)
        .map(|_| {
            let mut s = raw(&host.addr);
            s.write_all(&hello(1, 1, b"")).unwrap();
            s
        })
        .collect();
    // Heartbeats (type 0x03, the viewer's step 0) keep the host from dropping them as
    // silent; they never read a byte.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beat = {
        let stop = stop.clone();
        let mut socks: Vec<TcpStream> = socks.iter().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            let frame = [9, 0, 0, 0, 0x03, 0, 0, 0, 0, 0, 0, 0, 0];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &mut socks {
                    let _ = s.write_all(&frame);
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        })
    };
    let n = viewers as u64;
    let start = host.wait_status(|v| v["viewers"] == n)["step"]
        .as_u64()
        .unwrap();
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= start + WARM_STEPS);
    let first = rss_kib(host.pid());
    let v = host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= start + WARM_STEPS + RUN_STEPS);
    let last = rss_kib(host.pid());
    assert_eq!(v["viewers"], n, "every slow viewer is still attached: {v}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = beat.join();
    drop(socks);
    (first, last)
}

/// A host with 1 and then 8 viewers that never read runs 200 000 steps at full speed: its
/// resident set (VmRSS, Linux) stays within 8 MiB of what it was 20 000 steps after they
/// attached. The host holds one ring of the last 256 records for every viewer; each viewer
/// costs its position in it, one write batch and the kernel's socket buffers (not in the
/// host's resident set).
#[test]
fn the_hosts_memory_stays_bounded_with_viewers_that_never_read() {
    for viewers in [1, 8] {
        let (first, last) = rss_with_viewers_that_never_read(viewers, &[]);
        eprintln!("{viewers} viewers: VmRSS {first} KiB, then {last} KiB");
        assert!(
            last <= first + RSS_BOUND_KIB,
            "{viewers} viewers that never read: VmRSS grew from {first} KiB to {last} KiB \
             over {RUN_STEPS} steps (bound {RSS_BOUND_KIB} KiB)"
        );
    }
}

/// The host's one record ring, full at its default length (65 536 records), costs the host
/// a few MiB: with no viewer, its resident set after 200 000 steps at full speed (the ring
/// filled three times over) stays under 32 MiB. (With one allocation per record, as the
/// ring first held them, it took about 140 MiB.)
#[test]
fn a_full_record_ring_costs_the_host_a_few_mib() {
    let mut host = Host::start(&["--rate", "max", "--json", "--status-ms", "20"]);
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= 200_000);
    let rss = rss_kib(host.pid());
    eprintln!("a full ring of 65 536 records: VmRSS {rss} KiB");
    assert!(rss < 32 * 1024, "VmRSS {rss} KiB with a full record ring");
}

/// The same measurement catches a host whose record ring has no bound (the hidden planted
/// fault `--unbounded-queue-for-tests`): it then holds every one of the 200 000 records, 40
/// bytes for its slot and at least 32 for its frame (200 000 x 72 B = 14 MiB), past the
/// bound.
#[test]
fn the_memory_measurement_catches_unbounded_queues() {
    let (first, last) = rss_with_viewers_that_never_read(4, &["--unbounded-queue-for-tests"]);
    eprintln!("unbounded queues, 4 viewers: VmRSS {first} KiB, then {last} KiB");
    assert!(
        last > first + RSS_BOUND_KIB,
        "unbounded queues went unnoticed: VmRSS {first} KiB, then {last} KiB"
    );
}

/// The codec is what refuses: a frame longer than the maximum is an error naming offset 0
/// before any of its bytes are buffered (the unit tests hold the rest).
#[test]
fn the_stated_maximum_is_the_codecs() {
    let mut src = BytesMut::from(&[0xff, 0xff, 0xff, 0x7f][..]);
    match HostCodec::new("x").decode(&mut src) {
        Err(e) => assert_eq!(e.offset, 0),
        other => panic!("{other:?}"),
    }
}

/// Every error the viewer reports about a host's stream names the host and the offset of
/// the frame at fault (docs/protocol.md, "Errors").
#[test]
fn the_viewers_errors_name_the_host_and_the_offset() {
    let record = |step: u64| {
        ToViewer::Record(ostm_protocol::wire::Record {
            step,
            hash: 0,
            input: bytes::Bytes::new(),
        })
    };
    // A record where the attach snapshot belongs (offset 32, after the welcome).
    let mut b = welcome_frame();
    b.extend(frame_of(&record(0)));
    let addr = fake_host_then(b, false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(&format!(
            "{addr}: at offset 32: expected the host's attach snapshot (0x82, kind 0), found a record (0x83)"
        )),
        "{}",
        stdout(&out)
    );
    // A second welcome after the snapshot.
    let (mut b, _) = handshake_to(5);
    let at = b.len();
    b.extend(welcome_frame());
    let addr = fake_host_then(b, false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(&format!(
            "{addr}: at offset {at}: expected a record, heartbeat, resync snapshot, end or drift reply, found a welcome (0x81)"
        )),
        "{}",
        stdout(&out)
    );
    // A record for the wrong step.
    let (mut b, _) = handshake_to(5);
    let at = b.len();
    b.extend(frame_of(&record(7)));
    let addr = fake_host_then(b, false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(&format!(
            "{addr}: at offset {at}: expected a record for step 5, found a record for step 7"
        )),
        "{}",
        stdout(&out)
    );
    // A resync snapshot of another world.
    let (mut b, _) = handshake_to(5);
    let at = b.len();
    let other = ostm_protocol::World::new(
        ostm_protocol::Setup {
            dims: ostm_protocol::Dims::Three,
            bodies: 2,
            seed: 9,
        },
        None,
    );
    b.extend(frame_of(&ToViewer::Snapshot {
        kind: ostm_protocol::wire::SnapshotKind::Resync,
        world: other,
    }));
    let addr = fake_host_then(b, false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(&format!(
            "{addr}: at offset {at}: expected a resync snapshot of the attached world (2D, 1 bodies, seed 7, no link), found one of another world (3D, 2 bodies, seed 9, no link)"
        )),
        "{}",
        stdout(&out)
    );
}

/// A record with a bad op among good ones that came in one read: the viewer verifies the
/// records before it, then stops with the codec's error at the op's offset in the stream
/// (the reader takes the run whole, the verifier decodes it: docs/protocol.md, "The
/// viewer's reader and verifier").
#[test]
fn a_bad_op_inside_a_run_of_records_is_refused_at_its_offset() {
    let (mut b, mut world) = handshake_to(5);
    for _ in 0..3 {
        let step = world.step;
        world.step(&[]);
        b.extend(frame_of(&ToViewer::Record(ostm_protocol::wire::Record {
            step,
            hash: world.hash(),
            input: bytes::Bytes::new(),
        })));
    }
    // Frame length, type, step, hash, input length: the input starts 4 + 19 bytes in.
    let op_at = b.len() + 4 + 19;
    b.extend(frame_of(&ToViewer::Record(ostm_protocol::wire::Record {
        step: world.step,
        hash: 0,
        input: bytes::Bytes::from_static(&[0xee]),
    })));
    let addr = fake_host_then(b, false);
    let out = viewer(&["attach", &addr, "--json"]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "protocol error: {addr}: at offset {op_at}: expected opcode 1..=5, found 238"
        )),
        "{text}"
    );
    let end: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(end["verified"], 3, "{end}");
}

/// The host's refusals name the peer and the offset: the role byte of the hello (15), a
/// first message that is not a hello (0), a second hello (its frame's offset).
#[test]
fn the_hosts_refusals_name_the_peer_and_the_offset() {
    let host = Host::start(&["--rate", "500", "--status-ms", "0"]);
    for role in [0u8, 2] {
        let mut s = raw(&host.addr);
        let me = s.local_addr().unwrap().to_string();
        s.write_all(&hello(1, role, b"")).unwrap();
        ended_with(
            &read_all(s),
            EndReason::NotAViewer,
            &format!("{me}: at offset 15: expected role 1 (viewer), found role {role}"),
        );
    }
    // A heartbeat first.
    let mut s = raw(&host.addr);
    let me = s.local_addr().unwrap().to_string();
    s.write_all(&[9, 0, 0, 0, 0x03, 0, 0, 0, 0, 0, 0, 0, 0])
        .unwrap();
    ended_with(
        &read_all(s),
        EndReason::NotAViewer,
        &format!("{me}: at offset 0: expected a hello (0x01) first, found a heartbeat (0x03)"),
    );
    // A second hello, after the first (17 bytes).
    let mut s = raw(&host.addr);
    let me = s.local_addr().unwrap().to_string();
    s.write_all(&hello(1, 1, b"")).unwrap();
    s.write_all(&hello(1, 1, b"")).unwrap();
    ended_with(
        &read_all(s),
        EndReason::ProtocolError,
        &format!("{me}: at offset 17: expected a drift request (0x02) or heartbeat (0x03), found a second hello (0x01)"),
    );
}

/// A peer that accepts the connection and never answers (an HTTP server waiting for a
/// request): the viewer says within its 2 s deadline for the host's first byte that this
/// is not an ostm host, rather than waiting for the 10 s silence.
#[test]
fn a_peer_that_never_answers_is_named_not_an_ostm_host() {
    let addr = fake_host_then(Vec::new(), false);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(&format!(
            "{addr} sent nothing within 2000 ms of the hello: it is not an ostm host"
        )),
        "{}",
        stdout(&out)
    );
}
