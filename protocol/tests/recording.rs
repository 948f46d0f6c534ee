//! The crash-safe recorder: what a killed process leaves in `FILE.part` is assembled into
//! a valid replay holding every whole step; a cut anywhere in a record drops that record
//! alone and says where; a clean finish writes exactly the bytes `Replay::to_bytes`
//! writes. A planted fault (flushing switched off) loses what the flushes would have kept.

use ostm_protocol::format::recording::journal::AssembleError;
use ostm_protocol::format::recording::{assemble, journal_path, DropKind, Durability, Recorder};
use ostm_protocol::{Replay, Verdict};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn read(name: &str) -> Replay {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name);
    Replay::read_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Records `r`'s first `n` steps from its start world (with a start snapshot when it has
/// one), flushing after each, and returns the recorder unfinished.
fn record(r: &Replay, path: &Path, n: usize, d: Durability) -> Recorder {
    let start = r.start_world();
    let mut rec = Recorder::create_with(path, &start, r.start.is_some(), d).unwrap();
    let rows = r.hashes.as_ref().unwrap();
    for i in 0..n {
        rec.push(r.inputs.get(i), rows[i + 1]).unwrap();
        rec.flush(Instant::now()).unwrap();
    }
    rec
}

/// `r` cut to its first `n` steps.
fn prefix(r: &Replay, n: usize) -> Replay {
    let mut p = Replay::new(r.setup, r.link);
    p.start = r.start.clone();
    for i in 0..n {
        p.inputs.push(r.inputs.get(i)).unwrap();
    }
    p.hashes = Some(r.hashes.as_ref().unwrap()[..=n].to_vec());
    p
}

#[test]
fn a_clean_finish_writes_the_same_bytes_as_the_replay_writer() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "test-2d-600.ostm",
        "test-start-snapshot.ostm",
        "test-link-left.ostm",
    ] {
        let r = read(name);
        let out = dir.path().join(name);
        let rec = record(&r, &out, r.step_count(), Durability::default());
        assert!(journal_path(&out).exists());
        assert_eq!(rec.finish().unwrap() as usize, r.step_count());
        assert!(
            !journal_path(&out).exists(),
            "the in-progress file is removed"
        );
        assert_eq!(std::fs::read(&out).unwrap(), r.to_bytes(), "{name}");
    }
}

#[test]
fn a_killed_recording_is_recovered_to_every_flushed_step() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-start-snapshot.ostm");
    let out = dir.path().join("k.ostm");
    let rec = record(&r, &out, 400, Durability::default());
    // A killed process runs no destructor: nothing more reaches the file.
    std::mem::forget(rec);
    let got = assemble(&journal_path(&out), &out, true).unwrap();
    assert_eq!((got.start_step, got.steps), (r.start_step(), 400));
    assert_eq!(got.dropped, None);
    let back = Replay::read_file(&out).unwrap();
    assert_eq!(back, prefix(&r, 400));
    assert!(matches!(back.verify(|_| {}), Verdict::Match { .. }));
}

/// Every cut inside the last records: the longest whole prefix is kept, the torn record
/// is reported at its first byte.
#[test]
fn a_cut_anywhere_keeps_the_longest_whole_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-2d-600.ostm");
    let out = dir.path().join("c.ostm");
    std::mem::forget(record(&r, &out, 30, Durability::default()));
    let whole = std::fs::read(journal_path(&out)).unwrap();
    // Record boundaries: after the header, each record is 2 + n + 8 + 4 bytes.
    let mut ends = vec![whole.len()];
    let mut end = whole.len();
    for i in (0..30).rev() {
        end -= 2 + r.inputs.get(i).len() + 8 + 4;
        ends.push(end);
    }
    ends.reverse();
    let header_end = ends[0];
    for cut in header_end..whole.len() {
        let j = dir.path().join("cut.ostm.part");
        std::fs::write(&j, &whole[..cut]).unwrap();
        let o = dir.path().join("cut.ostm");
        let got = assemble(&j, &o, true).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let kept = ends.iter().rposition(|&e| e <= cut).unwrap();
        assert_eq!(got.steps as usize, kept, "cut at {cut}");
        match &got.dropped {
            None => assert_eq!(cut, ends[kept], "nothing dropped only at a boundary"),
            Some(d) => {
                assert_eq!(d.offset as usize, ends[kept], "cut at {cut}");
                assert_eq!(d.bytes as usize, cut - ends[kept]);
                assert!(d.why.starts_with("a torn last record"), "{}", d.why);
                assert_eq!(d.kind, DropKind::TornTail, "cut at {cut}");
            }
        }
        assert_eq!(Replay::read_file(&o).unwrap(), prefix(&r, kept));
    }
}

#[test]
fn a_cut_header_recovers_nothing_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-start-snapshot.ostm");
    let out = dir.path().join("h.ostm");
    std::mem::forget(record(&r, &out, 3, Durability::default()));
    let whole = std::fs::read(journal_path(&out)).unwrap();
    let j = dir.path().join("h2.ostm.part");
    for (cut, offset, text) in [
        (0, 0, "expected 8-byte magic, found 0 bytes"),
        (5, 0, "expected 8-byte magic, found 5 bytes"),
        (8, 8, "expected 4-byte magic, found 0 bytes"),
        // 8 + 18: the step count; 8 + 22: the snapshot length; 8 + 26: the snapshot.
        (
            8 + 24,
            8 + 22,
            "expected 4-byte start snapshot length, found 2 bytes",
        ),
        (8 + 40, 8 + 26, "-byte start snapshot, found 14 bytes"),
    ] {
        std::fs::write(&j, &whole[..cut]).unwrap();
        match assemble(&j, &dir.path().join("h2.ostm"), true) {
            Err(AssembleError::Input(e)) => {
                assert_eq!(e.offset, offset, "cut {cut}: {e}");
                assert!(e.message.contains(text), "cut {cut}: {e}");
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    let mut bad = whole.clone();
    bad[0] = b'X';
    std::fs::write(&j, &bad).unwrap();
    let e = assemble(&j, &dir.path().join("h2.ostm"), true).unwrap_err();
    assert!(e.to_string().contains("expected magic \"OSTMPAR2\""), "{e}");
}

/// The recorder always sets flag bit 0: a header without it is refused at the flags (it
/// would assemble into a replay whose rows are read as inputs). Found by the `journal`
/// fuzz target (fixtures/fuzz/journal/).
#[test]
fn a_header_without_hash_rows_recovers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-2d-600.ostm");
    let out = dir.path().join("n.ostm");
    std::mem::forget(record(&r, &out, 5, Durability::default()));
    let mut bytes = std::fs::read(journal_path(&out)).unwrap();
    assert_eq!(bytes[8 + 6], 1, "flags 0x0001");
    bytes[8 + 6] = 0;
    std::fs::write(journal_path(&out), &bytes).unwrap();
    for verify in [true, false] {
        match assemble(&journal_path(&out), &out, verify) {
            Err(AssembleError::Input(e)) => {
                assert_eq!(e.offset, 14, "{e}");
                assert_eq!(
                    e.message,
                    "expected flag bit 0 (hash rows) set in an in-progress recording, found flags 0x0000"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(!out.exists(), "nothing is written");
    }
}

#[test]
fn a_row_the_replay_does_not_reproduce_ends_what_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-2d-600.ostm");
    let out = dir.path().join("v.ostm");
    let mut rec = Recorder::create(&out, &r.start_world(), false).unwrap();
    let rows = r.hashes.as_ref().unwrap();
    for i in 0..20 {
        let row = if i == 12 {
            rows[i + 1] ^ 1
        } else {
            rows[i + 1]
        };
        rec.push(r.inputs.get(i), row).unwrap();
    }
    rec.flush(Instant::now()).unwrap();
    std::mem::forget(rec);
    let got = assemble(&journal_path(&out), &out, true).unwrap();
    assert_eq!(got.steps, 12);
    let d = got.dropped.unwrap();
    assert!(d.why.contains("the hash row of step 13"), "{}", d.why);
    assert_eq!(
        d.kind,
        DropKind::NotReproduced,
        "a whole record: not a tear"
    );
    // Without verification the row is kept as it was written.
    let got = assemble(&journal_path(&out), &out, false).unwrap();
    assert_eq!((got.steps, got.dropped), (20, None));
}

/// The planted fault: with flushing switched off, a killed recording keeps nothing past
/// its header (the steps were still in the buffer), so the tests above can fail.
#[test]
fn without_flushing_a_killed_recording_loses_its_steps() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-start-snapshot.ostm");
    let out = dir.path().join("f.ostm");
    let d = Durability {
        sync: false,
        no_flush: true,
    };
    std::mem::forget(record(&r, &out, 400, d));
    match assemble(&journal_path(&out), &out, true) {
        Err(AssembleError::Input(e)) => assert_eq!(e.offset, 0, "{e}"),
        Ok(a) => assert!(a.steps < 400, "{a:?}"),
        Err(e) => panic!("{e}"),
    }
    // And with sync at every flush, everything is kept as without it.
    let d = Durability {
        sync: true,
        no_flush: false,
    };
    std::mem::forget(record(&r, &out, 50, d));
    assert_eq!(assemble(&journal_path(&out), &out, true).unwrap().steps, 50);
}

/// `FILE.part` appears only once it holds its header and row 0: the header is written to
/// `FILE.part.new`, which is renamed. A `FILE.part.new` left by a writer killed before the
/// rename is replaced by the next recording, and no `.part.new` stays beside a `.part`.
#[test]
fn a_part_file_appears_with_its_header_and_a_stray_new_file_is_replaced() {
    let r = read("test-10000.ostm");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fresh.ostm");
    let fresh = ostm_protocol::format::recording::journal::fresh_path(&out);
    assert_eq!(fresh, dir.path().join("fresh.ostm.part.new"));
    std::fs::write(&fresh, b"left by a killed writer").unwrap();
    let rec = record(&r, &out, 0, Durability::default());
    assert!(
        !fresh.exists(),
        "the header's file was renamed to FILE.part"
    );
    let part = std::fs::read(journal_path(&out)).unwrap();
    assert_eq!(&part[..8], b"OSTMPAR2");
    // What FILE.part holds before any step assembles to a replay of no steps.
    let a = assemble(&journal_path(&out), &out, true).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(a.steps, 0);
    drop(rec);
}

/// The offsets at which each record of an in-progress file of `r`'s first `n` steps starts,
/// and the file's length: after the header, each record is `2 + n + 8 + 4` bytes.
fn record_starts(r: &Replay, whole: &[u8], n: usize) -> Vec<usize> {
    let mut starts = vec![whole.len()];
    let mut at = whole.len();
    for i in (0..n).rev() {
        at -= 2 + r.inputs.get(i).len() + 8 + 4;
        starts.push(at);
    }
    starts.reverse();
    starts
}

/// One changed byte in the middle of the records, anywhere in a record (its length, input,
/// row or check), is damage followed by whole records: corruption at that record's
/// offset, with the next record named as where whole records resume; never a torn tail.
#[test]
fn damage_in_the_middle_is_corruption_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-2d-600.ostm");
    let out = dir.path().join("m.ostm");
    std::mem::forget(record(&r, &out, 60, Durability::default()));
    let whole = std::fs::read(journal_path(&out)).unwrap();
    let starts = record_starts(&r, &whole, 60);
    let j = dir.path().join("d.ostm.part");
    let o = dir.path().join("d.ostm");
    for k in [0, 1, 29, 58] {
        for at in starts[k]..starts[k + 1] {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = whole.clone();
                bad[at] ^= flip;
                std::fs::write(&j, &bad).unwrap();
                let got = assemble(&j, &o, true).unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(got.steps as usize, k, "byte {at} ^ {flip:#x}");
                assert!(!got.whole());
                let d = got.dropped.expect("dropped");
                assert_eq!(d.offset as usize, starts[k], "byte {at}");
                assert_eq!(
                    d.kind,
                    DropKind::Corruption {
                        resumes_at: starts[k + 1] as u64
                    },
                    "byte {at} ^ {flip:#x}: {}",
                    d.why
                );
                assert_eq!(Replay::read_file(&o).unwrap(), prefix(&r, k));
            }
        }
    }
}

/// The end of the file zeroed or filled with garbage (a lost write, a page never
/// synced), from any point in the last records on: a torn tail, the records before it
/// kept, never taken for corruption.
#[test]
fn a_zeroed_or_garbage_tail_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-2d-600.ostm");
    let out = dir.path().join("z.ostm");
    std::mem::forget(record(&r, &out, 300, Durability::default()));
    let whole = std::fs::read(journal_path(&out)).unwrap();
    let starts = record_starts(&r, &whole, 300);
    let j = dir.path().join("z2.ostm.part");
    let o = dir.path().join("z2.ostm");
    let mut rng = ostm_protocol::sim::rng::Sfc32::from_seed(27);
    let tail = 4096.min(whole.len() - starts[0]);
    for from in (whole.len() - tail..whole.len()).step_by(61) {
        for garbage in [false, true] {
            let mut bad = whole.clone();
            for b in &mut bad[from..] {
                *b = if garbage { rng.next_u32() as u8 } else { 0 };
            }
            std::fs::write(&j, &bad).unwrap();
            let got = assemble(&j, &o, true).unwrap_or_else(|e| panic!("{from}: {e}"));
            let kept = starts.iter().rposition(|&s| s <= from).unwrap();
            // The record the damage starts in is lost; a record the garbage happens to
            // leave whole (an unchanged byte) is kept.
            assert!(got.steps as usize >= kept - 1 && got.steps as usize <= kept);
            assert!(got.whole());
            let d = got.dropped.expect("dropped");
            assert_eq!(d.kind, DropKind::TornTail, "from {from}: {}", d.why);
        }
    }
}

/// An assembly that cannot write its result (a full disk: `FILE.part.tmp` is made a link
/// to `/dev/full`) fails naming the file and leaves nothing but the in-progress file,
/// which still holds every step; the same in a recorder's clean finish.
#[test]
fn a_failed_assembly_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-start-snapshot.ostm");
    let out = dir.path().join("full.ostm");
    let rec = record(&r, &out, 200, Durability::default());
    let tmp = dir.path().join("full.ostm.part.tmp");
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
    let e = rec.finish().unwrap_err();
    assert!(
        e.to_string().contains("full.ostm.part.tmp") && e.to_string().contains("disk is full"),
        "{e}"
    );
    assert!(
        !tmp.exists() && std::fs::symlink_metadata(&tmp).is_err(),
        "nothing left of the assembly"
    );
    assert!(!out.exists());
    // `recover` meets the same full disk: the same.
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
    match assemble(&journal_path(&out), &out, true) {
        Err(AssembleError::Output { path, err }) => {
            assert_eq!(path, tmp);
            assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
        }
        other => panic!("{other:?}"),
    }
    assert!(std::fs::symlink_metadata(&tmp).is_err(), "no partial file");
    // With room again, everything is there.
    let got = assemble(&journal_path(&out), &out, true).unwrap();
    assert_eq!((got.steps, got.dropped), (200, None));
}

/// The header fields nothing else checks: with a start snapshot the replay runs from the
/// snapshot, so a changed seed or body count would give a file of another world that
/// verifies; the header check refuses it. A step count other than 0 is refused at it.
#[test]
fn a_changed_header_field_recovers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = read("test-start-snapshot.ostm");
    assert!(r.start.is_some() && r.link.is_none());
    let out = dir.path().join("hd.ostm");
    std::mem::forget(record(&r, &out, 20, Durability::default()));
    let whole = std::fs::read(journal_path(&out)).unwrap();
    let snapshot_len = u32::from_le_bytes(whole[8 + 22..8 + 26].try_into().unwrap()) as usize;
    let check_at = 8 + 26 + snapshot_len + 8;
    // 8 + 13: the body count; 8 + 14..18: the seed.
    for at in [8 + 13, 8 + 14, 8 + 17] {
        let mut bad = whole.clone();
        bad[at] = bad[at].wrapping_add(1).max(1);
        std::fs::write(journal_path(&out), &bad).unwrap();
        match assemble(&journal_path(&out), &out, true) {
            Err(AssembleError::Input(e)) => {
                assert_eq!(e.offset as usize, check_at, "{e}");
                assert!(e.message.contains("the header or row 0 is damaged"), "{e}");
            }
            other => panic!("byte {at}: {other:?}"),
        }
        assert!(!out.exists());
    }
    let mut bad = whole.clone();
    bad[8 + 18] = 3;
    std::fs::write(journal_path(&out), &bad).unwrap();
    match assemble(&journal_path(&out), &out, true) {
        Err(AssembleError::Input(e)) => {
            assert_eq!(e.offset, 8 + 18, "{e}");
            assert_eq!(
                e.message,
                "expected step count 0 in an in-progress recording, found 3"
            );
        }
        other => panic!("{other:?}"),
    }
    // An in-progress file of an earlier version is named as such.
    let mut old = whole.clone();
    old[..8].copy_from_slice(b"OSTMPART");
    std::fs::write(journal_path(&out), &old).unwrap();
    let e = assemble(&journal_path(&out), &out, true).unwrap_err();
    assert!(e.to_string().contains("an earlier version"), "{e}");
}
