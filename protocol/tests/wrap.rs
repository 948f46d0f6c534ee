//! The step counter at 2^64 (`docs/test-module.md`, "The step counter at 2^64"): a replay
//! whose start snapshot is at step `u64::MAX - 3` runs 8 steps through the wrap, with a link
//! whose transfer step (1) comes after it. The steps, hash rows, transfer, traces, the
//! first difference, step lookups, bundles and recovery all count modulo 2^64, and nothing
//! panics (these tests run with overflow checks on).

use ostm_protocol::format::bundle::Bundle;
use ostm_protocol::format::compare::{compare, Outcome, RowSource};
use ostm_protocol::format::keyframe;
use ostm_protocol::format::ostm::row_of;
use ostm_protocol::format::replay_stream::ReplayStream;
use ostm_protocol::format::trace::{trace_replay, TraceReader};
use ostm_protocol::sim::link::{Link, Role};
use ostm_protocol::sim::world::{Dims, Setup, World};
use ostm_protocol::{Replay, Verdict};

const START: u64 = u64::MAX - 3;

/// 2D, 2 bodies, seed 7, link body 1 at transfer step 1, from step `u64::MAX - 3`, 8 empty
/// steps, hash rows.
fn replay(role: Role) -> Replay {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 2,
        seed: 7,
    };
    let link = Some(Link {
        role,
        body: 1,
        transfer_step: 1,
    });
    let mut start = World::new(setup, link);
    start.step = START;
    let mut r = Replay::new(setup, link);
    r.start = Some(start);
    for _ in 0..8 {
        r.inputs.push_ops(&[]);
    }
    r.compute_hashes();
    r
}

/// The worlds at hash rows 0..=8.
fn worlds(r: &Replay) -> Vec<World> {
    let mut w = r.start_world();
    let mut out = vec![w.clone()];
    for i in 0..r.step_count() {
        w.step(&r.inputs.ops(i));
        out.push(w.clone());
    }
    out
}

#[test]
fn the_step_after_u64_max_is_0_and_the_transfer_fires_after_the_wrap() {
    let steps: Vec<u64> = (0..=8).map(|i| START.wrapping_add(i)).collect();
    assert_eq!(steps[3], u64::MAX);
    assert_eq!(&steps[4..], &[0, 1, 2, 3, 4]);
    for role in [Role::Sender, Role::Receiver] {
        let r = replay(role);
        let ws = worlds(&r);
        assert_eq!(ws.iter().map(|w| w.step).collect::<Vec<_>>(), steps);
        // The snapshot holds the wrapped step; each row is the hash of its snapshot.
        assert_eq!(&ws[4].snapshot()[..8], &[0; 8]);
        for (w, h) in ws.iter().zip(r.hashes.as_ref().expect("rows")) {
            assert_eq!(xxhash_rust::xxh3::xxh3_64(&w.snapshot()), *h);
        }
        // The transfer happens in the bookkeeping of the step numbered 1 (row 5 -> 6).
        let present: Vec<bool> = ws.iter().map(|w| w.bodies[1].alive).collect();
        match role {
            Role::Sender => assert_eq!(
                present,
                [true, true, true, true, true, true, false, false, false]
            ),
            _ => {
                assert_eq!(
                    present,
                    [false, false, false, false, false, false, true, true, true]
                );
                assert_eq!(ws[6].bodies[1].pos, [5000, 5000, 0]);
                assert_eq!(ws[6].bodies[1].vel, [40, 0, 0]);
            }
        }
        assert_eq!(r.end_step(), 4);
        assert!(matches!(
            r.verify(|_| {}),
            Verdict::Match {
                rows_checked: 9,
                ..
            }
        ));
    }
}

#[test]
fn a_step_of_the_replay_is_its_row_counted_modulo_2_64() {
    let r = replay(Role::Receiver);
    assert_eq!(row_of(START, 8, START), Some(0));
    assert_eq!(row_of(START, 8, u64::MAX), Some(3));
    assert_eq!(row_of(START, 8, 0), Some(4));
    assert_eq!(row_of(START, 8, 4), Some(8));
    assert_eq!(row_of(START, 8, 5), None);
    assert_eq!(row_of(START, 8, START - 1), None);
    // Without a wrap, the plain range.
    assert_eq!(row_of(10, 5, 9), None);
    assert_eq!(row_of(10, 5, 15), Some(5));
    assert_eq!(row_of(10, 5, 16), None);
    let ws = worlds(&r);
    for (i, w) in ws.iter().enumerate() {
        assert_eq!(r.row_of(w.step), Some(i));
        assert_eq!(&r.world_at(w.step, |_| {}).expect("held"), w);
    }
    assert!(r
        .world_at(5, |_| {})
        .unwrap_err()
        .contains("holds steps 18446744073709551612..=4"));
    // A keyframe of a world after the wrap belongs to the replay at its row.
    assert_eq!(keyframe::row_in(&r, &ws[5]), Ok(5));
    match keyframe::verify_from(&r, ws[5].clone()) {
        Ok(Verdict::Match { rows_checked, .. }) => assert_eq!(rows_checked, 4),
        other => panic!("{other:?}"),
    }
}

#[test]
fn traces_count_through_the_wrap_and_compare_by_step() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("wrap.ostm");
    let r = replay(Role::Receiver);
    r.write_file(&path).expect("write");
    let trace = |from, to| {
        let mut out = Vec::new();
        let rows = trace_replay(ReplayStream::open(&path).expect("open"), &mut out, from, to)
            .expect("trace");
        (rows, String::from_utf8(out).expect("utf-8"))
    };
    let (rows, text) = trace(0, u64::MAX);
    assert_eq!(rows, 9);
    assert!(text.contains("\ns=18446744073709551615 h="));
    assert!(text.contains("\ns=0 h="));
    // Read back: the row after u64::MAX is step 0.
    let mut reader = TraceReader::new("t", text.as_bytes()).expect("header");
    let mut read = Vec::new();
    while let Some((w, _)) = reader.next_row().expect("row") {
        read.push(w.step);
    }
    assert_eq!(
        read,
        (0..=8).map(|i| START.wrapping_add(i)).collect::<Vec<_>>()
    );
    // Rows after the wrap are kept by number (the early stop waits for the wrap).
    let (rows, after) = trace(0, 2);
    assert_eq!(rows, 3);
    assert!(after.contains("\ns=0 h=") && after.contains("\ns=2 h="));
    let (rows, _) = trace(u64::MAX - 1, u64::MAX);
    assert_eq!(rows, 2);
    // A trace of the whole run is identical to the run, through the wrap.
    let tpath = dir.path().join("wrap.trace");
    std::fs::write(&tpath, &text).expect("write");
    let mut a = RowSource::open(&path).expect("A");
    let mut b = RowSource::open(&tpath).expect("B");
    let c = compare(&mut a, &mut b).expect("compare");
    assert_eq!(c.outcome, Outcome::Identical);
    let compared = c.compared.expect("compared");
    assert_eq!(
        (compared.first, compared.last, compared.rows),
        (START, 4, 9)
    );
    assert_eq!((c.a.first, c.a.last), (Some(START), Some(4)));
    // One that starts after the wrap comes first by number: no step in common.
    let apath = dir.path().join("after.trace");
    std::fs::write(&apath, &after).expect("write");
    let mut a = RowSource::open(&path).expect("A");
    let mut b = RowSource::open(&apath).expect("B");
    assert_eq!(
        compare(&mut a, &mut b).expect("compare").outcome,
        Outcome::NoCommonStep
    );
}

#[test]
fn a_bundle_and_a_recovered_recording_keep_the_wrapped_steps() {
    let r = replay(Role::Sender);
    let mut bad = r.clone();
    bad.hashes.as_mut().expect("rows")[6] ^= 1;
    let Verdict::Mismatch { step, row, .. } = bad.verify(|_| {}) else {
        panic!("row 6 differs");
    };
    assert_eq!((step, row), (2, 6));
    let world = bad.world_at(2, |_| {}).expect("held");
    let actual = world.hash();
    let bundle =
        Bundle::from_mismatch(&bad, row, actual, Some(world), None, "wrap").expect("a bundle");
    let back = Bundle::from_bytes("b", &bundle.to_bytes()).expect("reads back");
    assert_eq!(back, bundle);

    // The in-progress file of the same recording assembles to the same replay.
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = r.to_bytes();
    let rows = r.hashes.as_ref().expect("rows");
    let inputs: usize = r.inputs.iter().map(|i| 2 + i.len()).sum();
    let mut header = bytes[..bytes.len() - rows.len() * 8 - inputs].to_vec();
    header[22..26].copy_from_slice(&0u32.to_le_bytes());
    // The in-progress layout (docs/replay-format.md): magic, header, row 0, header check,
    // then per step the length, input, row and the record's check.
    let in_progress = |rows: &[u64]| {
        use ostm_protocol::format::recording::journal::{header_check, record_check};
        let mut part = b"OSTMPAR2".to_vec();
        part.extend_from_slice(&header);
        part.extend_from_slice(&rows[0].to_le_bytes());
        let check = header_check(&part);
        part.extend_from_slice(&check.to_le_bytes());
        for (i, input) in r.inputs.iter().enumerate() {
            let mut rec = (input.len() as u16).to_le_bytes().to_vec();
            rec.extend_from_slice(input);
            rec.extend_from_slice(&rows[i + 1].to_le_bytes());
            part.extend_from_slice(&rec);
            part.extend_from_slice(&record_check(check, &rec).to_le_bytes());
        }
        part
    };
    let part = in_progress(rows);
    let journal = dir.path().join("rec.ostm.part");
    std::fs::write(&journal, &part).expect("write");
    let out = dir.path().join("rec.ostm");
    let done = ostm_protocol::format::recording::assemble(&journal, &out, true).expect("assembles");
    assert_eq!(
        (done.start_step, done.steps, done.end_step()),
        (START, 8, 4)
    );
    assert!(done.dropped.is_none());
    assert_eq!(std::fs::read(&out).expect("read"), bytes);
    // A row after the wrap that the run does not reproduce is dropped there, by its step.
    let mut changed = rows.clone();
    changed[5] ^= 1;
    std::fs::write(&journal, in_progress(&changed)).expect("write");
    let done = ostm_protocol::format::recording::assemble(&journal, &out, true).expect("assembles");
    assert_eq!(done.steps, 4);
    let why = done.dropped.expect("dropped").why;
    assert!(why.starts_with("the hash row of step 1 is "), "{why}");
}
