//! Golden bytes for every message, every split point, and every refusal by name.

use super::*;
use crate::error::FormatError;
use crate::sim::link::{Link, Role};
use crate::sim::world::{Dims, Setup, World};
use bytes::{Bytes, BytesMut};

fn le64(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// Encodes `msg` with the host side and checks the bytes, then decodes them on the viewer side.
#[track_caller]
fn golden_to_viewer(msg: ToViewer, bytes: &[u8]) {
    let mut out = BytesMut::new();
    HostCodec::new("t").encode(&msg, &mut out).unwrap();
    assert_eq!(&out[..], bytes);
    let mut src = BytesMut::from(bytes);
    assert_eq!(ViewerCodec::new("t").decode(&mut src).unwrap(), Some(msg));
    assert!(src.is_empty());
}

#[track_caller]
fn golden_to_host(msg: ToHost, bytes: &[u8]) {
    let mut out = BytesMut::new();
    ViewerCodec::new("t").encode(&msg, &mut out).unwrap();
    assert_eq!(&out[..], bytes);
    let mut src = BytesMut::from(bytes);
    assert_eq!(HostCodec::new("t").decode(&mut src).unwrap(), Some(msg));
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn hello_bytes() {
    let mut p = vec![0x01];
    p.extend_from_slice(b"OSTMLIVE");
    p.extend_from_slice(&[1, 0, 1, 2, b'a', b'b']);
    assert_eq!(p.len(), 15);
    golden_to_host(
        ToHost::Hello(Hello {
            version: 1,
            role: 1,
            token: b"ab".to_vec(),
        }),
        &frame(&p),
    );
}

#[test]
fn drift_request_and_heartbeats_bytes() {
    golden_to_host(
        ToHost::DriftRequest { step: 0x0102 },
        &frame(&[0x02, 2, 1, 0, 0, 0, 0, 0, 0]),
    );
    golden_to_host(
        ToHost::Heartbeat { viewer_step: 9 },
        &frame(&[0x03, 9, 0, 0, 0, 0, 0, 0, 0]),
    );
    golden_to_viewer(
        ToViewer::Heartbeat { host_step: 5 },
        &[9, 0, 0, 0, 0x84, 5, 0, 0, 0, 0, 0, 0, 0],
    );
}

#[test]
fn welcome_bytes() {
    let mut p = vec![0x81];
    p.extend_from_slice(b"OSTMLIVE");
    p.extend_from_slice(&[1, 0, 2]);
    p.extend_from_slice(&[60, 0, 0, 0, 0xe8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0]);
    let w = Welcome {
        version: 1,
        role: 2,
        rate: 60,
        heartbeat_ms: 1000,
        ring: 512,
        queue: 256,
    };
    golden_to_viewer(ToViewer::Welcome(w), &frame(&p));
}

#[test]
fn record_bytes() {
    let mut p = vec![0x83];
    p.extend(le64(3));
    p.extend(le64(0x1122_3344_5566_7788));
    p.extend_from_slice(&[2, 0, 3, 0]);
    let r = Record {
        step: 3,
        hash: 0x1122_3344_5566_7788,
        input: Bytes::from_static(&[3, 0]),
    };
    golden_to_viewer(ToViewer::Record(r), &frame(&p));
}

#[test]
fn end_bytes() {
    let mut p = vec![0x85, 1];
    p.extend(le64(7));
    p.extend_from_slice(&[2, 0, b'o', b'k']);
    let e = End {
        reason: EndReason::Finished,
        text: "ok".into(),
        host_step: 7,
    };
    golden_to_viewer(ToViewer::End(e), &frame(&p));
}

fn world_2d() -> World {
    World::new(
        Setup {
            dims: Dims::Two,
            bodies: 2,
            seed: 7,
        },
        None,
    )
}

#[test]
fn snapshot_bytes_are_the_probe() {
    let w = world_2d();
    let mut p = vec![0x82, 1, 0];
    p.extend_from_slice(&(6u32 + 12 + 64).to_le_bytes());
    p.extend_from_slice(&[2, 2, 7, 0, 0, 0]);
    p.extend(w.snapshot());
    golden_to_viewer(
        ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world: w,
        },
        &frame(&p),
    );
}

#[test]
fn snapshot_with_link_puts_the_link_block_last() {
    let link = Link {
        role: Role::Sender,
        body: 1,
        transfer_step: 150,
    };
    let w = World::new(
        Setup {
            dims: Dims::Three,
            bodies: 2,
            seed: 1,
        },
        Some(link),
    );
    let mut p = vec![0x82, 0, 1];
    p.extend_from_slice(&(6u32 + 12 + 64 + 4).to_le_bytes());
    p.extend_from_slice(&[3, 2, 1, 0, 0, 0]);
    p.extend(w.snapshot());
    p.extend_from_slice(&[1, 1, 150, 0]);
    golden_to_viewer(
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: w,
        },
        &frame(&p),
    );
}

/// A probe whose snapshot holds what the contract allows and the module never writes (a
/// dead slot with fields set, a 2D z, a link body index with no slot) is read with every
/// field kept, and written back byte for byte.
#[test]
fn a_probe_keeps_a_dead_slot_a_2d_z_and_a_link_index_with_no_slot() {
    let link = Link {
        role: Role::Receiver,
        body: 200,
        transfer_step: 9,
    };
    let mut w = World::new(
        Setup {
            dims: Dims::Two,
            bodies: 2,
            seed: 7,
        },
        Some(link),
    );
    w.bodies[0].alive = false; // position and velocity left set
    w.bodies[1].pos[2] = 5;
    w.bodies[1].vel[2] = -7;
    let mut p = vec![0x82, 0, 1];
    p.extend_from_slice(&(6u32 + 12 + 64 + 4).to_le_bytes());
    p.extend_from_slice(&[2, 2, 7, 0, 0, 0]);
    p.extend(w.snapshot());
    p.extend_from_slice(&[2, 200, 9, 0]);
    // The snapshot starts at 13 (type, kind, flags, length u32, setup): body 0's alive
    // word at 25 is 0 and its position x at 33 is not, a dead slot with fields set.
    assert_eq!(&p[25..29], &[0u8; 4]);
    assert_ne!(&p[33..37], &[0u8; 4]);
    golden_to_viewer(
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: w,
        },
        &frame(&p),
    );
}

#[test]
fn drift_reply_bytes() {
    let w = world_2d();
    let mut p = vec![0x86];
    p.extend(le64(40));
    p.push(0);
    p.push(0);
    p.extend_from_slice(&(6u32 + 12 + 64).to_le_bytes());
    p.extend_from_slice(&[2, 2, 7, 0, 0, 0]);
    p.extend(w.snapshot());
    p.push(1);
    for h in [1u64, 2, 3, 4] {
        p.extend(le64(h));
    }
    let d = DriftReply {
        step: 40,
        status: DriftStatus::Held,
        world: Some(w),
        stages: Some([1, 2, 3, 4]),
    };
    golden_to_viewer(ToViewer::DriftReply(d), &frame(&p));
    let mut p = vec![0x86];
    p.extend(le64(40));
    p.push(1);
    let d = DriftReply {
        step: 40,
        status: DriftStatus::TooOld,
        world: None,
        stages: None,
    };
    golden_to_viewer(ToViewer::DriftReply(d), &frame(&p));
}

/// Every message type, back to back, fed split at every byte, decodes the same.
#[test]
fn decodes_split_at_every_byte() {
    let msgs = vec![
        ToViewer::Welcome(Welcome {
            version: 1,
            role: 2,
            rate: 0,
            heartbeat_ms: 1000,
            ring: 8,
            queue: 8,
        }),
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: world_2d(),
        },
        ToViewer::Record(Record {
            step: 0,
            hash: 1,
            input: Bytes::from_static(&[4, 1, 0, 0, 0]),
        }),
        ToViewer::Heartbeat { host_step: 1 },
        ToViewer::End(End {
            reason: EndReason::Shutdown,
            text: "bye".into(),
            host_step: 1,
        }),
    ];
    let mut bytes = BytesMut::new();
    let mut enc = HostCodec::new("t");
    for m in &msgs {
        enc.encode(m, &mut bytes).unwrap();
    }
    for cut in 0..=bytes.len() {
        let mut dec = ViewerCodec::new("t");
        let mut got = Vec::new();
        let mut src = BytesMut::from(&bytes[..cut]);
        while let Some(m) = dec.decode(&mut src).unwrap() {
            got.push(m);
        }
        src.extend_from_slice(&bytes[cut..]);
        while let Some(m) = dec.decode_eof(&mut src).unwrap() {
            got.push(m);
        }
        assert_eq!(got, msgs, "cut at {cut}");
        assert_eq!(dec.consumed(), bytes.len() as u64);
    }
}

fn decode_err_host(bytes: &[u8]) -> FormatError {
    let mut src = BytesMut::from(bytes);
    let mut dec = HostCodec::new("peer");
    loop {
        match dec.decode_eof(&mut src) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error for {bytes:02x?}"),
            Err(e) => return e,
        }
    }
}

fn heartbeat_frame() -> Vec<u8> {
    frame(&[0x03, 0, 0, 0, 0, 0, 0, 0, 0])
}

#[test]
fn refuses_a_zero_length_frame_at_its_offset() {
    let mut b = heartbeat_frame();
    b.extend_from_slice(&[0, 0, 0, 0]);
    let e = decode_err_host(&b);
    assert_eq!(e.offset, 13);
    assert!(e.message.contains("frame length 1..=65554, found 0"), "{e}");
}

#[test]
fn refuses_an_oversized_length_before_buffering() {
    // "GET " read as a length: what an HTTP client sends first.
    let mut src = BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]);
    let cap = src.capacity();
    let e = HostCodec::new("peer").decode(&mut src).unwrap_err();
    assert!(
        e.to_string()
            .contains("expected frame length 1..=65554, found 542393671"),
        "{e}"
    );
    assert_eq!(src.capacity(), cap, "nothing reserved for a refused length");
}

#[test]
fn refuses_an_unknown_type() {
    let mut b = heartbeat_frame();
    b.extend(frame(&[0x7f]));
    let e = decode_err_host(&b);
    assert_eq!(e.offset, 13 + 4);
    assert!(e.message.contains("found 0x7f"), "{e}");
}

#[test]
fn refuses_trailing_bytes_in_a_frame() {
    let e = decode_err_host(&frame(&[0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0xAA]));
    assert_eq!(e.offset, 13);
    assert!(e.message.contains("1 trailing bytes"), "{e}");
}

#[test]
fn refuses_a_body_too_short() {
    let e = decode_err_host(&frame(&[0x02, 1, 2]));
    assert!(
        e.message
            .contains("expected 8-byte drift request step, found 2 bytes"),
        "{e}"
    );
    assert_eq!(e.offset, 5);
}

#[test]
fn refuses_wrong_magic() {
    let mut p = vec![0x01];
    p.extend_from_slice(b"HTTPLIVE");
    p.extend_from_slice(&[1, 0, 1, 0]);
    let e = decode_err_host(&frame(&p));
    assert_eq!(e.offset, 5);
    assert!(e.message.contains("expected magic \"OSTMLIVE\""), "{e}");
}

#[test]
fn a_hello_of_another_version_decodes_to_its_version() {
    let mut p = vec![0x01];
    p.extend_from_slice(b"OSTMLIVE");
    p.extend_from_slice(&[9, 0, 0xde, 0xad, 0xbe, 0xef]);
    let mut src = BytesMut::from(&frame(&p)[..]);
    let got = HostCodec::new("t").decode(&mut src).unwrap();
    assert_eq!(
        got,
        Some(ToHost::Hello(Hello {
            version: 9,
            role: 0,
            token: vec![]
        }))
    );
}

#[test]
fn refuses_a_frame_cut_off_at_eof_naming_its_offset() {
    let mut b = heartbeat_frame();
    b.extend_from_slice(&heartbeat_frame()[..6]);
    let e = decode_err_host(&b);
    assert_eq!(e.offset, 13);
    assert!(
        e.message
            .contains("connection closed inside a frame: expected 9 frame bytes, found 2 bytes"),
        "{e}"
    );
    let e = decode_err_host(&[9, 0]);
    assert!(
        e.message
            .contains("expected a 4-byte frame length, found 2 bytes"),
        "{e}"
    );
}

#[test]
fn refuses_a_record_with_a_bad_op_at_the_op_offset() {
    let mut p = vec![0x83];
    p.extend(le64(0));
    p.extend(le64(0));
    p.extend_from_slice(&[2, 0, 9, 0]);
    let mut src = BytesMut::from(&frame(&p)[..]);
    let e = ViewerCodec::new("host").decode(&mut src).unwrap_err();
    // 4 (length) + 1 (type) + 16 (step, hash) + 2 (input length) = 23.
    assert!(
        e.to_string()
            .starts_with("host: at offset 23: expected opcode 1..=5, found 9"),
        "{e}"
    );
}

#[test]
fn refuses_a_probe_with_a_bad_snapshot() {
    let w = world_2d();
    let mut p = vec![0x82, 0, 0];
    p.extend_from_slice(&(6u32 + 12 + 64).to_le_bytes());
    p.extend_from_slice(&[2, 2, 7, 0, 0, 0]);
    let mut snap = w.snapshot();
    snap[12] = 5; // body 0 alive = 5
    p.extend(snap);
    let mut src = BytesMut::from(&frame(&p)[..]);
    let e = ViewerCodec::new("host").decode(&mut src).unwrap_err();
    // 4 + 1 + 1 + 1 + 4 + 6 + 12 = 29: body 0's first byte.
    assert!(
        e.to_string()
            .starts_with("host: at offset 29: body 0: expected alive 0 or 1"),
        "{e}"
    );
}

/// A probe length is refused at its own field (offset 7: the frame's length, type, kind
/// and flags come first) unless it is `6 + 12 + 32 x n (+ 4 with a link block)`, `n` in
/// 1..=64; 49 and 51 fail there, not later under another rule.
#[test]
fn refuses_a_probe_length_of_the_wrong_shape_at_its_own_offset() {
    for (flags, len, range) in [
        (0u8, 100_000u32, "50..=2066, without"),
        (0, 49, "50..=2066, without"),
        (0, 51, "50..=2066, without"),
        (0, 2098, "50..=2066, without"),
        (1, 50, "54..=2070, with"),
        (1, 2074, "54..=2070, with"),
    ] {
        let mut p = vec![0x82, 0, flags];
        p.extend_from_slice(&len.to_le_bytes());
        p.extend(vec![0u8; 60]);
        let mut src = BytesMut::from(&frame(&p)[..]);
        let e = ViewerCodec::new("host").decode(&mut src).unwrap_err();
        assert!(
            e.to_string().contains(
                "host: at offset 7: expected probe snapshot length 6 + 12 + 32 x (1..=64)"
            ) && e
                .to_string()
                .contains(&format!("({range} a link block), found {len}")),
            "{len}: {e}"
        );
    }
}

#[test]
fn an_oversized_message_is_refused_when_encoding() {
    let r = Record {
        step: 0,
        hash: 0,
        input: Bytes::from(vec![3u8; 70_000]),
    };
    let mut out = BytesMut::new();
    assert!(HostCodec::new("t")
        .encode(&ToViewer::Record(r), &mut out)
        .is_err());
    assert!(out.is_empty());
}
