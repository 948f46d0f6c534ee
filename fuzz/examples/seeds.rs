//! Writes the seed corpus of every fuzz target: `seeds OUT` fills `OUT/<target>/` with
//! the files of `testdata/` and `fixtures/` that fit the target, and inputs made from them
//! with `ostm-protocol`'s own writers (wire sessions, keyframes, bundles, pose caches,
//! traces, a seek index, in-progress recordings), plus every kept crash under
//! `fixtures/fuzz/<target>/`. Run by `scripts/fuzz` before fuzzing.

use ostm_protocol::format::bundle::Bundle;
use ostm_protocol::format::keyframe;
use ostm_protocol::sim::link::Link;
use ostm_protocol::sim::op::{encode_input, Op};
use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::format::seek::write_index;
use ostm_protocol::format::replay_stream::ReplayStream;
use ostm_protocol::format::trace::trace_replay;
use ostm_protocol::wire::{
    DriftReply, DriftStatus, End, EndReason, Hello, HostCodec, Record, SnapshotKind, ToHost,
    ToViewer, ViewerCodec, Welcome, VERSION,
};
use ostm_protocol::sim::world::{Dims, Setup, World};
use ostm_protocol::Replay;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn replay(rel: &str) -> Replay {
    Replay::from_bytes(rel, &read(rel)).unwrap_or_else(|e| panic!("{e}"))
}

struct Out {
    dir: PathBuf,
    written: usize,
}

impl Out {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.dir.join(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        std::fs::write(dir.join(name), bytes).expect("write a seed");
        self.written += 1;
    }

    /// Every file of `rel` (a directory of the repository) whose name ends in `ext`.
    fn copy_dir(&mut self, target: &str, rel: &str, ext: &str) {
        let Ok(entries) = std::fs::read_dir(root().join(rel)) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.expect("entry").path()).collect();
        paths.sort();
        for p in paths {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            if p.is_file() && name.ends_with(ext) {
                let bytes = std::fs::read(&p).expect("read");
                self.put(target, &format!("{}-{name}", rel.replace('/', "-")), &bytes);
            }
        }
    }
}

/// The first `steps` steps of `r` (hash rows computed).
fn cut(r: &Replay, steps: usize) -> Replay {
    let mut c = Replay::new(r.setup, r.link);
    c.start = r.start.clone();
    for i in 0..steps.min(r.step_count()) {
        c.inputs.push(r.inputs.get(i)).expect("valid input");
    }
    c.compute_hashes();
    c
}

/// The in-progress file a recorder would leave for `r` (which has hash rows).
fn journal(r: &Replay) -> Vec<u8> {
    let rows = r.hashes.as_ref().expect("hash rows");
    let mut head = Replay::new(r.setup, r.link);
    head.start = r.start.clone();
    head.hashes = Some(vec![rows[0]]);
    let mut out = b"OSTMPAR2".to_vec();
    out.extend_from_slice(&head.to_bytes());
    let check = ostm_protocol::format::recording::journal::header_check(&out);
    out.extend_from_slice(&check.to_le_bytes());
    for (i, input) in r.inputs.iter().enumerate() {
        let mut rec = (input.len() as u16).to_le_bytes().to_vec();
        rec.extend_from_slice(input);
        rec.extend_from_slice(&rows[i + 1].to_le_bytes());
        let rc = ostm_protocol::format::recording::journal::record_check(check, &rec);
        out.extend_from_slice(&rec);
        out.extend_from_slice(&rc.to_le_bytes());
    }
    out
}

/// A wire seed: no cut points (byte 0 = 0), or `cuts` cut points, then the stream.
fn wire_seed(cuts: &[u16], stream: &[u8]) -> Vec<u8> {
    let mut out = vec![cuts.len() as u8];
    for c in cuts {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out.extend_from_slice(stream);
    out
}

fn to_viewer(msgs: &[ToViewer]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&HostCodec::encode_frame(m).expect("frame").0);
    }
    out
}

fn to_host(msgs: &[ToHost]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&ViewerCodec::encode_frame(m).expect("frame").0);
    }
    out
}

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .expect("usage: seeds OUT_DIR");
    let mut out = Out { dir, written: 0 };

    let r2d = replay("testdata/test-2d-600.ostm");
    let left = replay("testdata/test-link-left.ostm");
    let start = replay("testdata/test-start-snapshot.ostm");
    let accepted = replay("testdata/accepted/dead-slot-2d-z-link-slot.ostm");

    // .ostm: the test data, the accepted and the malformed files, and short cuts.
    for t in ["replay", "replay_stream"] {
        out.copy_dir(t, "testdata", ".ostm");
        out.copy_dir(t, "testdata/accepted", ".ostm");
        out.copy_dir(t, "testdata/malformed", ".ostm");
        for (name, r) in [("2d", &r2d), ("link", &left), ("start", &start)] {
            out.put(t, &format!("cut-{name}-40.ostm"), &cut(r, 40).to_bytes());
        }
        let mut bare = cut(&r2d, 10);
        bare.hashes = None;
        out.put(t, "no-rows.ostm", &bare.to_bytes());
    }

    // The wire: a whole session each way, each message alone, and one cut session.
    let world = cut(&r2d, 5).world_at(5, |_| {}).expect("step 5");
    let linked = left.world_at(10, |_| {}).expect("step 10");
    let mut input = Vec::new();
    for op in [
        Op::Impulse {
            body: 1,
            d: [40, -3, 0],
        },
        Op::Teleport {
            body: 0,
            pos: [100, 200, 0],
        },
        Op::Remove { body: 2 },
        Op::Gravity { g: 4 },
        Op::Spawn { pos: [5, 6, 0] },
    ] {
        op.encode(&mut input);
    }
    let host_msgs = vec![
        ToViewer::Welcome(Welcome {
            version: VERSION,
            role: 2,
            rate: 60,
            heartbeat_ms: 1000,
            ring: 512,
            queue: 256,
        }),
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: world.clone(),
        },
        ToViewer::Record(Record {
            step: 5,
            hash: 0x1234_5678_9abc_def0,
            input: input.clone().into(),
        }),
        ToViewer::Record(Record {
            step: 6,
            hash: 7,
            input: encode_input(&[]).into(),
        }),
        ToViewer::Heartbeat { host_step: 7 },
        ToViewer::Snapshot {
            kind: SnapshotKind::Resync,
            world: linked.clone(),
        },
        ToViewer::DriftReply(DriftReply {
            step: 5,
            status: DriftStatus::Held,
            world: Some(world.clone()),
            stages: Some([1, 2, 3, 4]),
        }),
        ToViewer::DriftReply(DriftReply {
            step: 5,
            status: DriftStatus::Held,
            world: Some(linked),
            stages: None,
        }),
        ToViewer::DriftReply(DriftReply {
            step: 1,
            status: DriftStatus::TooOld,
            world: None,
            stages: None,
        }),
        ToViewer::DriftReply(DriftReply {
            step: 99,
            status: DriftStatus::NotReached,
            world: None,
            stages: None,
        }),
        ToViewer::End(End {
            reason: EndReason::Finished,
            text: "the host ran its 8 steps".into(),
            host_step: 8,
        }),
    ];
    let session = to_viewer(&host_msgs);
    out.put("wire_viewer", "session", &wire_seed(&[], &session));
    out.put(
        "wire_viewer",
        "session-cut",
        &wire_seed(&[3, 40, 41, 200, 1000], &session),
    );
    for (i, m) in host_msgs.iter().enumerate() {
        out.put(
            "wire_viewer",
            &format!("msg-{i}"),
            &wire_seed(&[], &to_viewer(std::slice::from_ref(m))),
        );
    }
    let mut old = to_viewer(&host_msgs[..1]);
    old[13] = 2; // a welcome of version 2
    out.put("wire_viewer", "welcome-v2", &wire_seed(&[], &old));
    let viewer_msgs = vec![
        ToHost::Hello(Hello {
            version: VERSION,
            role: 1,
            token: b"s3cret".to_vec(),
        }),
        ToHost::Heartbeat { viewer_step: 5 },
        ToHost::DriftRequest { step: 6 },
        ToHost::Heartbeat { viewer_step: 7 },
    ];
    let session = to_host(&viewer_msgs);
    out.put("wire_host", "session", &wire_seed(&[], &session));
    out.put(
        "wire_host",
        "session-cut",
        &wire_seed(&[2, 17, 30], &session),
    );
    for (i, m) in viewer_msgs.iter().enumerate() {
        out.put(
            "wire_host",
            &format!("msg-{i}"),
            &wire_seed(&[], &to_host(std::slice::from_ref(m))),
        );
    }
    let hello2 = to_host(&[ToHost::Hello(Hello {
        version: 2,
        role: 1,
        token: Vec::new(),
    })]);
    out.put("wire_host", "hello-v2", &wire_seed(&[], &hello2));

    // Keyframes: worlds of the test data, pretty and on one line.
    let mut kf = |name: &str, w: &World| {
        let line = keyframe::to_json_line(w, 60).expect("export");
        let pretty = keyframe::to_json_pretty(w, 30).expect("export");
        out.put("keyframe", &format!("{name}.json"), line.as_bytes());
        out.put(
            "keyframe",
            &format!("{name}-pretty.json"),
            pretty.as_bytes(),
        );
    };
    kf("2d-300", &r2d.world_at(300, |_| {}).expect("step"));
    kf("link-150", &left.world_at(150, |_| {}).expect("step"));
    kf("start", &start.start_world());
    kf("accepted", &accepted.start_world());

    // Bundles: the committed one, a verify-style one and a live-drift one.
    out.copy_dir("bundle", "fixtures/corpus", ".ostmb");
    let mut planted = cut(&r2d, 60);
    if let Some(rows) = planted.hashes.as_mut() {
        rows[30] ^= 1;
    }
    let writer = planted.world_at(30, |_| {}).expect("step");
    let b = Bundle::from_mismatch(&planted, 30, writer.hash(), Some(writer), None, "seed")
        .expect("bundle");
    out.put("bundle", "verify.ostmb", &b.to_bytes());
    let before = left.world_at(20, |_| {}).expect("step");
    let mut after = before.clone();
    after.step(&left.inputs.ops(20));
    let mut host = after.clone();
    host.bodies[0].vel[0] += 1;
    let b = Bundle::from_drift(
        &before,
        left.inputs.get(20),
        host.hash(),
        &after,
        Some(host),
        "live drift seed",
    )
    .expect("bundle");
    out.put("bundle", "drift.ostmb", &b.to_bytes());

    // Pose caches: short ghosts of a 2D and a 3D run (the committed one is 33 KB).
    for (name, r, offset) in [("2d", &r2d, [400, 0, 0]), ("3d", &left, [0, 0, 250])] {
        let g = PoseCache::from_replay(r, 100, 6, offset).expect("ghost");
        out.put("pose_cache", &format!("{name}.ospc"), &g.to_bytes());
    }

    // Traces: a few rows of the test data.
    for (name, r, steps, from, to) in [
        ("2d", &r2d, 12, 0, 12),
        ("link", &left, 156, 145, 155),
        ("start", &start, 6, 0, u64::MAX),
        ("accepted", &accepted, 30, 0, u64::MAX),
    ] {
        let short = cut(r, steps);
        let bytes = short.to_bytes();
        let stream = ReplayStream::new(name, std::io::Cursor::new(&bytes[..])).expect("reads");
        let mut text = Vec::new();
        trace_replay(stream, &mut text, from, to)
            .map_err(|_| "trace")
            .expect("trace");
        out.put("trace", &format!("{name}.trace"), &text);
    }

    // A seek index of the seek target's replay (steps prefixed as the target reads them).
    let tmp = std::env::temp_dir().join(format!("ostm-fuzz-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let rpath = tmp.join("test-2d-600.ostm");
    std::fs::write(&rpath, read("testdata/test-2d-600.ostm")).expect("write");
    let ipath = tmp.join("test-2d-600.ostm.seek");
    write_index(&rpath, &ipath, 200, |_| {}).expect("index");
    let index = std::fs::read(&ipath).expect("read index");
    for step in [0u16, 199, 250, 600, 650] {
        let mut seed = step.to_le_bytes().to_vec();
        seed.extend_from_slice(&index);
        out.put("seek", &format!("every-200-step-{step}"), &seed);
    }
    let _ = std::fs::remove_dir_all(&tmp);

    // In-progress recordings: whole, torn, with a row the run does not reproduce.
    for (name, r) in [
        ("2d", &r2d),
        ("link", &left),
        ("start", &start),
        ("accepted", &accepted),
    ] {
        let j = journal(&cut(r, 25));
        out.put("journal", &format!("{name}.part"), &j);
        out.put("journal", &format!("{name}-torn.part"), &j[..j.len() - 5]);
    }
    let mut bad = cut(&r2d, 25);
    if let Some(rows) = bad.hashes.as_mut() {
        rows[12] ^= 1 << 40;
    }
    out.put("journal", "2d-bad-row.part", &journal(&bad));
    let empty = Replay::new(
        Setup {
            dims: Dims::Three,
            bodies: 1,
            seed: 1,
        },
        Some(Link {
            role: ostm_protocol::Role::Receiver,
            body: 0,
            transfer_step: 3,
        }),
    );
    out.put("journal", "no-records.part", &journal(&cut(&empty, 0)));

    // Every kept crash seeds its own target again.
    for (t, _) in ostm_fuzz::TARGETS {
        out.copy_dir(t, &format!("fixtures/fuzz/{t}"), "");
    }
    println!("wrote {} seeds under {}", out.written, out.dir.display());
}
