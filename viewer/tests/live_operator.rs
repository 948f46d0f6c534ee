//! The host for an operator: at its default log level (RUST_LOG unset) `ostm-host serve`
//! logs one line when a viewer attaches (its address and step) and one when it leaves (its
//! address, the step it had been sent, and why: closed by the viewer, the stream ended, a
//! protocol error, a stall), and a resync is named. Real binaries, real sockets.

mod live_support;

use bytes::BytesMut;
use live_support::*;
use ostm_protocol::wire::{SnapshotKind, ToViewer, ViewerCodec};
use std::io::{Read, Write};
use std::net::TcpStream;

/// The host's log lines about the viewer at `addr` (`viewer ADDR …`).
fn lines_of<'a>(log: &'a str, addr: &str) -> Vec<&'a str> {
    let tag = format!("viewer {addr} ");
    log.lines().filter(|l| l.contains(&tag)).collect()
}

/// Checks that the viewer at `addr` has exactly an attached line and a left line, the
/// left one at `level` and saying `why`; returns (attach step, leave step).
#[track_caller]
fn attached_then_left(log: &str, addr: &str, level: &str, why: &str) -> (u64, u64) {
    let lines: Vec<&str> = lines_of(log, addr)
        .into_iter()
        .filter(|l| l.contains(" attached at step ") || l.contains(" left at step "))
        .collect();
    assert_eq!(lines.len(), 2, "{addr}: {lines:#?}\n{log}");
    let step_after = |l: &str, key: &str| -> u64 {
        let at = l.find(key).unwrap_or_else(|| panic!("{key:?} in {l}")) + key.len();
        l[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("a step after {key:?} in {l}"))
    };
    assert!(lines[0].contains(" INFO "), "{}", lines[0]);
    let attached = step_after(lines[0], " attached at step ");
    assert!(lines[1].contains(&format!(" {level} ")), "{}", lines[1]);
    assert!(
        lines[1].contains(why),
        "{addr}: expected {why:?} in {}",
        lines[1]
    );
    let left = step_after(lines[1], " left at step ");
    assert!(left >= attached, "{}", lines[1]);
    (attached, left)
}

/// Sends a hello and reads until the attach snapshot has come.
fn attach_raw(addr: &str) -> TcpStream {
    attach_raw_with_rest(addr).0
}

/// [`attach_raw`], with the bytes read past the attach snapshot: the start of what the
/// host sent after it (a fast host's first records can come in the same read).
fn attach_raw_with_rest(addr: &str) -> (TcpStream, BytesMut) {
    let mut s = raw(addr);
    s.write_all(&hello(1, 1, b"")).unwrap();
    let (mut src, mut dec, mut buf) = (BytesMut::new(), ViewerCodec::new("host"), [0u8; 4096]);
    loop {
        let n = s.read(&mut buf).expect("the host answers");
        assert!(n > 0, "closed before the attach snapshot");
        src.extend_from_slice(&buf[..n]);
        while let Some(m) = dec.decode(&mut src).expect("frames") {
            if matches!(m, ToViewer::Snapshot { .. }) {
                return (s, src);
            }
        }
    }
}

#[test]
fn the_host_logs_each_viewer_that_attaches_and_why_it_left() {
    let mut host = Host::start(&["--rate", "500", "--json", "--status-ms", "100"]);
    // A: a viewer that verifies 100 steps and closes.
    let out = viewer(&["attach", &host.addr, "--steps", "100", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let a_step = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "attached")
        .and_then(|v| v["step"].as_u64())
        .expect("attached event");
    // B: a peer that sends a frame of no known type after its hello.
    let mut b = attach_raw(&host.addr);
    let b_addr = b.local_addr().unwrap().to_string();
    b.write_all(&[1, 0, 0, 0, 0x7f]).unwrap();
    let mut rest = Vec::new();
    let _ = b.read_to_end(&mut rest);
    // C: a peer that stays until the host stops.
    let c = attach_raw(&host.addr);
    let c_addr = c.local_addr().unwrap().to_string();
    let reader = std::thread::spawn(move || {
        let mut c = c;
        let mut all = Vec::new();
        let _ = c.read_to_end(&mut all);
    });
    host.wait_status(|v| v["viewers"] == 1 && v["protocol_errors"] == 1);
    host.interrupt();
    let (status, _, log) = host.wait();
    assert!(status.success(), "{log}");
    reader.join().unwrap();

    // A's lines: the viewer's own address is not known here; its attach step is.
    let a_line = log
        .lines()
        .find(|l| {
            l.contains(&format!(" attached at step {a_step} "))
                && !l.contains(&b_addr)
                && !l.contains(&c_addr)
        })
        .unwrap_or_else(|| panic!("no attached line at step {a_step}:\n{log}"));
    let a_addr = a_line
        .split("viewer ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .expect("an address")
        .to_string();
    assert!(a_addr.starts_with("127.0.0.1:"), "{a_line}");
    let (s, left) = attached_then_left(&log, &a_addr, "INFO", ": closed by the viewer");
    assert_eq!(s, a_step);
    assert!(
        left >= a_step + 100,
        "it verified 100 steps, left at step {left}"
    );
    attached_then_left(&log, &b_addr, "WARN", ": ended protocol-error: ");
    attached_then_left(&log, &c_addr, "INFO", ": ended shutdown: ");
    // Planted fault: an address that never connected has no lines, so the check above
    // cannot pass on lines of another viewer.
    assert!(lines_of(&log, "127.0.0.1:1").is_empty());
}

#[test]
fn a_resync_is_named_and_counted_in_the_leave_line() {
    let mut host = Host::start(RESYNCING_HOST);
    let (mut slow, rest) = attach_raw_with_rest(&host.addr);
    let addr = slow.local_addr().unwrap().to_string();
    let start = host.wait_status(|v| v["viewers"] == 1)["step"]
        .as_u64()
        .unwrap();
    // It stops reading while the host runs on far past the queue, then reads until the
    // resync snapshot comes and closes.
    host.wait_status(|v| v["step"].as_u64().unwrap_or(0) >= start + 100_000);
    // The stream goes on from the bytes read past the attach snapshot.
    let (mut src, mut dec, mut buf) = (rest, ViewerCodec::new("host"), vec![0u8; 65536]);
    'read: loop {
        let n = slow.read(&mut buf).expect("the host sends on");
        assert!(n > 0, "the host closed the slow viewer");
        src.extend_from_slice(&buf[..n]);
        while let Some(m) = dec.decode(&mut src).expect("frames") {
            if matches!(
                m,
                ToViewer::Snapshot {
                    kind: SnapshotKind::Resync,
                    ..
                }
            ) {
                break 'read;
            }
        }
    }
    drop(slow);
    host.wait_status(|v| v["viewers"] == 0);
    host.interrupt();
    let (status, _, log) = host.wait();
    assert!(status.success(), "{log}");
    let resync: Vec<&str> = lines_of(&log, &addr)
        .into_iter()
        .filter(|l| l.contains(" fell more than the queue behind at step "))
        .collect();
    assert_eq!(
        resync.len(),
        1,
        "one resync line, later ones counted: {log}"
    );
    assert!(
        resync[0].contains("resynced from the host's snapshot at step "),
        "{}",
        resync[0]
    );
    let (_, _) = attached_then_left(&log, &addr, "INFO", ": closed by the viewer (resynced ");
}

#[test]
fn a_viewer_dropped_for_a_stall_is_named_with_the_stall() {
    let mut host = Host::start(&[
        "--rate",
        "max",
        "--stall-ms",
        "300",
        "--json",
        "--status-ms",
        "100",
    ]);
    // Attached, then never reads: its socket fills and the host's write makes no progress.
    let never = attach_raw(&host.addr);
    let addr = never.local_addr().unwrap().to_string();
    host.wait_status(|v| v["stalled"] == 1);
    host.interrupt();
    let (status, _, log) = host.wait();
    assert!(status.success(), "{log}");
    attached_then_left(
        &log,
        &addr,
        "WARN",
        ": dropped: stalled: no write progress for 300 ms",
    );
    drop(never);
}
