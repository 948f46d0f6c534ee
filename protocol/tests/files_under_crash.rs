//! Files under crash, proven the way storage engines prove it (docs/reliability.md, "Files
//! under crash"): every file the project writes while running is cut, zeroed, filled with
//! garbage and damaged in the middle, and what reading it then does is checked against
//! what docs/replay-format.md ("The in-progress file"), docs/seek-index.md and
//! docs/bundle-format.md say it must do.
//!
//! The in-progress recording (`FILE.part`, about 68 KiB: 1 300 steps from a start
//! snapshot, most without input, as a live session's): cut at every byte offset of its
//! last 64 KiB and at 1 000 seeded offsets anywhere, its end zeroed or filled with garbage
//! from the whole last 4 KiB and from every seventh offset in it, damaged in the middle,
//! and, recorded with sync, its writes since the last sync lost in every way a disk may
//! lose them. Each time `assemble` must keep exactly
//! the records before the first one the damage touched (a model computed here from the
//! bytes: a record is intact when all its bytes are there unchanged), report the first
//! record not kept at its offset, as a torn tail when no intact record follows and as
//! corruption (with where whole records resume) when one does, and write exactly the
//! finished file the replay writer makes for those steps, which verifies.
//!
//! The files are on tmpfs (`/dev/shm`) where there is one: `assemble` syncs what it
//! writes, and tens of thousands of syncs on a disk would take minutes.

use ostm_protocol::format::bundle::Bundle;
use ostm_protocol::format::recording::journal::{
    assembly_path, finish_order, AssembleError, Finish,
};
use ostm_protocol::format::recording::{assemble, journal_path, DropKind, Durability, Recorder};
use ostm_protocol::format::replay_stream::ReplayStream;
use ostm_protocol::format::seek::{seek, write_index};
use ostm_protocol::format::write_whole;
use ostm_protocol::sim::rng::Sfc32;
use ostm_protocol::{Dims, FormatError, Op, Replay, Setup, Verdict, World};
use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// A replay of `steps` seeded steps from a start snapshot (as a viewer records), seven in
/// ten without input (as most of a live session's) and the others with 1 to `max_ops`
/// ops: records of 14 bytes to a few hundred.
fn lively(steps: usize, seed: u32, max_ops: u32) -> Replay {
    let setup = Setup {
        dims: Dims::Three,
        bodies: 8,
        seed,
    };
    let mut start = World::new(setup, None);
    for _ in 0..40 {
        start.step(&[]);
    }
    let mut r = Replay::new(setup, None);
    r.start = Some(start);
    let mut rng = Sfc32::from_seed(seed);
    for _ in 0..steps {
        let n = if rng.next_u32() % 10 < 7 {
            0
        } else {
            1 + rng.next_u32() % max_ops
        };
        let mut ops = Vec::new();
        for _ in 0..n {
            let body = (rng.next_u32() % 12) as u8;
            let kind = rng.next_u32() % 20;
            let v = [
                rng.range(-90, 10_000),
                rng.range(-90, 10_000),
                rng.range(-90, 10_000),
            ];
            ops.push(match kind {
                0 => Op::Spawn { pos: v },
                1 => Op::Remove { body },
                2 => Op::Gravity { g: rng.range(1, 6) },
                3..=5 => Op::Teleport { body, pos: v },
                _ => Op::Impulse {
                    body,
                    d: v.map(|x| x % 90),
                },
            });
        }
        r.inputs.push_ops(&ops);
    }
    r.compute_hashes();
    r
}

/// A scratch directory on tmpfs where the machine has one.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("files-under-crash")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// An in-progress file of a whole recording, and where its records lie.
struct Journal {
    replay: Replay,
    bytes: Vec<u8>,
    /// `starts[i]`: the offset of record `i` (step `i + 1`); `starts[n]` is the file's
    /// length. `starts[0]` is where the records begin (after the header check).
    starts: Vec<usize>,
    /// The finished file the replay writer makes of the whole replay, and the offsets in
    /// it of the step count, the rows and the inputs, to make the file of any prefix.
    finished: Vec<u8>,
    count_at: usize,
    rows_at: usize,
    inputs_at: usize,
    /// `input_ends[k]`: the end of the first `k` inputs (with their lengths) in `finished`.
    input_ends: Vec<usize>,
}

impl Journal {
    /// Records every step of `replay` with the real recorder (flushing every 97 steps)
    /// into `dir/NAME.part` and leaves it unfinished, as a killed process would.
    fn record(replay: Replay, dir: &Path, name: &str) -> Journal {
        let out = dir.join(name);
        let mut rec = Recorder::create_with(
            &out,
            &replay.start_world(),
            replay.start.is_some(),
            Durability::default(),
        )
        .unwrap();
        let rows = replay.hashes.as_ref().unwrap();
        for i in 0..replay.step_count() {
            rec.push(replay.inputs.get(i), rows[i + 1]).unwrap();
            if i % 97 == 0 {
                rec.flush(Instant::now()).unwrap();
            }
        }
        rec.flush(Instant::now()).unwrap();
        std::mem::forget(rec);
        let bytes = std::fs::read(journal_path(&out)).unwrap();
        Journal::of(replay, bytes)
    }

    fn of(replay: Replay, bytes: Vec<u8>) -> Journal {
        let n = replay.step_count();
        let mut starts = vec![bytes.len()];
        let mut at = bytes.len();
        for i in (0..n).rev() {
            at -= 2 + replay.inputs.get(i).len() + 8 + 4;
            starts.push(at);
        }
        starts.reverse();
        let finished = replay.to_bytes();
        let inputs_at = finished.len()
            - replay
                .inputs
                .iter()
                .map(|input| 2 + input.len())
                .sum::<usize>();
        let rows_at = inputs_at - 8 * (n + 1);
        // The step count follows the setup (and the link block): docs/replay-format.md.
        let count_at = if replay.link.is_some() { 22 } else { 18 };
        assert_eq!(
            u32::from_le_bytes(finished[count_at..count_at + 4].try_into().unwrap()) as usize,
            n,
            "the step count's offset"
        );
        let mut input_ends = vec![inputs_at];
        for input in replay.inputs.iter() {
            input_ends.push(input_ends.last().unwrap() + 2 + input.len());
        }
        Journal {
            replay,
            bytes,
            starts,
            finished,
            count_at,
            rows_at,
            inputs_at,
            input_ends,
        }
    }

    fn steps(&self) -> usize {
        self.starts.len() - 1
    }

    /// The finished file of the first `k` steps, as the replay writer makes it.
    fn finished_prefix(&self, k: usize) -> Vec<u8> {
        let f = &self.finished;
        let mut out = f[..self.rows_at].to_vec();
        out[self.count_at..self.count_at + 4].copy_from_slice(&(k as u32).to_le_bytes());
        out.extend_from_slice(&f[self.rows_at..self.rows_at + 8 * (k + 1)]);
        out.extend_from_slice(&f[self.inputs_at..self.input_ends[k]]);
        out
    }

    /// What `assemble` must do with `damaged`, the file as a crash or damage left it:
    /// keep the records before the first that is not intact (all its bytes there and
    /// unchanged), and call what follows corruption when an intact record follows it.
    fn expect(&self, damaged: &[u8]) -> (usize, Option<(u64, DropKind)>) {
        let intact = |i: usize| {
            let (a, b) = (self.starts[i], self.starts[i + 1]);
            damaged.len() >= b && damaged[a..b] == self.bytes[a..b]
        };
        let n = self.steps();
        let kept = (0..n).find(|&i| !intact(i)).unwrap_or(n);
        // The file ends after a whole record: nothing to drop.
        if damaged.len() == self.starts[kept] {
            return (kept, None);
        }
        assert!(kept < n, "no bytes past the last record");
        let kind = match (kept + 1..n).find(|&j| intact(j)) {
            Some(j) => DropKind::Corruption {
                resumes_at: self.starts[j] as u64,
            },
            None => DropKind::TornTail,
        };
        (kept, Some((self.starts[kept] as u64, kind)))
    }
}

/// Assembles `part` into `out` and checks the result against the model: the steps kept,
/// what was dropped (offset, bytes, kind) and the finished file's bytes. Returns the steps
/// kept.
fn check_assembly(j: &Journal, part: &Path, out: &Path, damaged: &[u8], verify: bool) -> usize {
    let _ = std::fs::remove_file(out);
    let what = format!("{} ({} bytes)", part.display(), damaged.len());
    let got = assemble(part, out, verify).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (kept, dropped) = j.expect(damaged);
    assert_eq!(got.steps as usize, kept, "{what}: steps kept");
    assert_eq!(got.start_step, j.replay.start_step());
    match (&got.dropped, dropped) {
        (None, None) => {}
        (Some(d), Some((offset, kind))) => {
            assert_eq!((d.offset, d.kind), (offset, kind), "{what}: {}", d.why);
            assert_eq!(d.bytes, damaged.len() as u64 - offset, "{what}");
            // The file ends inside the record, its bytes as written: a cut.
            let cut_inside = damaged.len() < j.starts[kept + 1]
                && damaged[j.starts[kept]..] == j.bytes[j.starts[kept]..damaged.len()];
            if cut_inside {
                assert!(d.why.starts_with("a torn last record"), "{what}: {}", d.why);
            }
        }
        (got, want) => panic!("{what}: dropped {got:?}, expected {want:?}"),
    }
    let written = std::fs::read(out).unwrap();
    assert!(
        written == j.finished_prefix(kept),
        "{what}: the finished file is not the replay writer's file of its {kept} steps"
    );
    kept
}

/// Writes `bytes` over `path` from offset `at` and sets its length to `len`.
fn patch(path: &Path, at: usize, bytes: &[u8], len: usize) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at as u64).unwrap();
    f.set_len(len as u64).unwrap();
}

/// The longest valid prefix at every cut: each byte offset of the last 64 KiB of a
/// recording of 1 300 steps (about 68 KiB), and 1 000 seeded offsets anywhere (in the
/// header too: nothing recoverable, an error naming the file at an offset not past the
/// cut, nothing written). The file is written once per thread and cut shorter and shorter
/// in place (`ftruncate`); the seeded cuts are also assembled as `recover` does,
/// verifying, and the result read back and verified.
#[test]
fn a_cut_anywhere_keeps_exactly_the_longest_whole_prefix() {
    let dir = scratch();
    let j = Journal::record(lively(1300, 1, 20), dir.path(), "cut.ostm");
    let len = j.bytes.len();
    assert!(
        (64 * 1024 + 1024..80 * 1024).contains(&len),
        "the recording is {len} bytes"
    );
    let mut rng = Sfc32::from_seed(0x0f11e5);
    let seeded: BTreeSet<usize> = (0..1000).map(|_| rng.next_u32() as usize % len).collect();
    let mut cuts: Vec<usize> = (len - 64 * 1024..=len)
        .chain(seeded.iter().copied())
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.reverse();
    // Two threads (CI has two cores), each with its own copy, every other cut.
    let threads = 2;
    let counts: Vec<(usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (j, cuts, seeded, dir) = (&j, &cuts, &seeded, dir.path());
                s.spawn(move || {
                    let mine = cuts.iter().copied().skip(t).step_by(threads);
                    cut_each(j, dir, &format!("c{t}.ostm"), mine, seeded)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let header_cuts: usize = counts.iter().map(|c| c.0).sum();
    let verified: usize = counts.iter().map(|c| c.1).sum();
    assert!(
        header_cuts > 0 && verified > 900,
        "{header_cuts} {verified}"
    );
    let left: Vec<_> = dir
        .path()
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "no FILE.part.tmp is left: {left:?}");
}

/// Cuts `dir/NAME.part`, a copy of `j`'s file, at each of `cuts` (longest first) and
/// checks each assembly; returns the cuts inside the header and those verified.
fn cut_each(
    j: &Journal,
    dir: &Path,
    name: &str,
    cuts: impl Iterator<Item = usize>,
    seeded: &BTreeSet<usize>,
) -> (usize, usize) {
    let out = dir.join(name);
    let part = journal_path(&out);
    std::fs::write(&part, &j.bytes).unwrap();
    let f = OpenOptions::new().write(true).open(&part).unwrap();
    let (mut header_cuts, mut verified) = (0, 0);
    for cut in cuts {
        f.set_len(cut as u64).unwrap();
        if cut < j.starts[0] {
            let _ = std::fs::remove_file(&out);
            match assemble(&part, &out, true) {
                Err(AssembleError::Input(e)) => {
                    assert_eq!(e.input, part.display().to_string());
                    assert!(e.offset as usize <= cut, "cut {cut}: {e}");
                }
                other => panic!("cut {cut} inside the header: {other:?}"),
            }
            assert!(!out.exists(), "cut {cut}: nothing is written");
            header_cuts += 1;
            continue;
        }
        let kept = check_assembly(j, &part, &out, &j.bytes[..cut], false);
        assert_eq!(
            kept,
            j.starts.iter().rposition(|&s| s <= cut).unwrap(),
            "cut {cut}: the records whose last byte is before the cut"
        );
        if seeded.contains(&cut) {
            check_assembly(j, &part, &out, &j.bytes[..cut], true);
            let back = Replay::read_file(&out).unwrap();
            assert!(
                matches!(back.verify(|_| {}), Verdict::Match { .. }),
                "cut {cut}"
            );
            verified += 1;
        }
    }
    (header_cuts, verified)
}

/// The end of the file zeroed or filled with garbage from every seventh offset of its
/// last 4 KiB, the whole last 4 KiB first (a lost write: a page never synced, or synced
/// with other bytes): a torn tail, every record before the damage kept, never taken for
/// corruption.
#[test]
fn a_zeroed_or_garbage_end_is_a_torn_tail() {
    let dir = scratch();
    let j = Journal::record(lively(1300, 2, 20), dir.path(), "tail.ostm");
    let len = j.bytes.len();
    let part = dir.path().join("t.ostm.part");
    let out = dir.path().join("t.ostm");
    std::fs::write(&part, &j.bytes).unwrap();
    let mut rng = Sfc32::from_seed(4096);
    let mut damaged = j.bytes.clone();
    for from in (len - 4096..len).step_by(7) {
        for garbage in [false, true] {
            for b in &mut damaged[from..] {
                *b = if garbage { rng.next_u32() as u8 } else { 0 };
            }
            patch(&part, from, &damaged[from..], len);
            let kept = check_assembly(&j, &part, &out, &damaged, from % 64 == 0);
            // Every record before the one the damage starts in is kept; that one is lost
            // unless the damage left its bytes as they were (a zero over a zero).
            let before = j.starts.iter().rposition(|&s| s <= from).unwrap();
            assert!(kept == before || kept == before + 1, "from {from}: {kept}");
            damaged[from..].copy_from_slice(&j.bytes[from..]);
            patch(&part, from, &j.bytes[from..], len);
        }
    }
}

/// Damage followed by whole records (one changed byte, a 4 KiB page of the file zeroed or
/// filled with garbage, at 600 seeded places in the middle): corruption at the offset of
/// the first record it touched, with the first intact record after it as where whole
/// records resume; never silently cut off as a torn tail.
#[test]
fn damage_in_the_middle_is_corruption_at_its_offset() {
    let dir = scratch();
    let j = Journal::record(lively(1300, 3, 20), dir.path(), "mid.ostm");
    let len = j.bytes.len();
    let part = dir.path().join("m.ostm.part");
    let out = dir.path().join("m.ostm");
    std::fs::write(&part, &j.bytes).unwrap();
    let mut rng = Sfc32::from_seed(275);
    let first = j.starts[0];
    // Damage must end before the last record, so that a whole record follows it.
    let last = j.starts[j.steps() - 1];
    let mut damaged = j.bytes.clone();
    for i in 0..600 {
        let (from, to) = match i % 3 {
            0 => {
                let at = first + rng.next_u32() as usize % (last - first);
                (at, at + 1)
            }
            _ => {
                // A page of the file (4 KiB-aligned offsets).
                let page =
                    (first / 4096 + 1 + rng.next_u32() as usize % (last / 4096 - first / 4096 - 1))
                        * 4096;
                (page, (page + 4096).min(last))
            }
        };
        for b in &mut damaged[from..to] {
            *b = match i % 3 {
                0 => *b ^ (1 << (rng.next_u32() % 8)),
                1 => 0,
                _ => rng.next_u32() as u8,
            };
        }
        patch(&part, from, &damaged[from..to], len);
        let kept = check_assembly(&j, &part, &out, &damaged, i % 20 == 0);
        let touched = j.starts.iter().rposition(|&s| s <= from).unwrap();
        assert!(kept <= touched, "damage at {from}");
        match j.expect(&damaged).1 {
            Some((_, DropKind::Corruption { .. })) => {}
            other => panic!("damage at {from}..{to}: {other:?}"),
        }
        damaged[from..to].copy_from_slice(&j.bytes[from..to]);
        patch(&part, from, &j.bytes[from..to], len);
    }
}

/// A lost fsync: a recording with `--sync` (`Durability { sync: true }`) flushes and syncs
/// at seeded moments, and between them its 64 KiB buffer also fills and is written out
/// unsynced. A crash loses what was written since the last sync, in every way a disk may
/// lose it: all of it (the file reverts to its length at the sync), torn anywhere in it,
/// its end zeroed or garbage, or any of its 4 KiB pages reverting to zeros while later
/// ones stay. Recovery always keeps every step up to the sync, and exactly the records
/// before the first one the loss touched.
#[test]
fn a_lost_fsync_recovers_every_step_up_to_the_sync() {
    let dir = scratch();
    let r = lively(5000, 4, 20);
    let rows = r.hashes.clone().unwrap();
    let base = dir.path().join("sync.ostm");
    let durability = Durability {
        sync: true,
        no_flush: false,
    };
    let mut rec = Recorder::create_with(&base, &r.start_world(), true, durability).unwrap();
    // The file the whole recording makes, for the model.
    let mut model = Recorder::create_with(
        &dir.path().join("all.ostm"),
        &r.start_world(),
        true,
        Durability::default(),
    )
    .unwrap();
    for i in 0..r.step_count() {
        model.push(r.inputs.get(i), rows[i + 1]).unwrap();
    }
    model.flush(Instant::now()).unwrap();
    std::mem::forget(model);
    let all = std::fs::read(dir.path().join("all.ostm.part")).unwrap();
    let j = Journal::of(r.clone(), all);
    let part = journal_path(&base);
    let crashed = dir.path().join("crashed.ostm.part");
    let out = dir.path().join("crashed.ostm");
    let mut rng = Sfc32::from_seed(0xf5_1c);
    // (file length, steps) at the last sync.
    let mut synced = (j.starts[0], 0usize);
    let (mut crashes, mut unsynced_seen) = (0, 0);
    for step in 0..r.step_count() {
        let before = rec.flushed();
        rec.push(r.inputs.get(step), rows[step + 1]).unwrap();
        // Crash after a push that filled the buffer (written out, not synced), and at
        // seeded moments.
        if rec.flushed() != before || rng.next_u32().is_multiple_of(250) {
            crashes += crash(&j, &part, synced, &rec, &mut rng, &crashed, &out);
            if std::fs::metadata(&part).unwrap().len() as usize > synced.0 {
                unsynced_seen += 1;
            }
        }
        if rng.next_u32().is_multiple_of(700) {
            rec.flush(Instant::now()).unwrap();
            assert_eq!(rec.flushed(), rec.steps(), "a flush writes out every step");
            synced = (
                std::fs::metadata(&part).unwrap().len() as usize,
                rec.steps() as usize,
            );
            assert_eq!(synced.0, j.starts[synced.1]);
        }
    }
    std::mem::forget(rec);
    assert!(
        crashes > 20 && unsynced_seen > 3,
        "{crashes} crashes, {unsynced_seen} with unsynced bytes"
    );
}

/// Crashes the recording `rec` now, whose last sync left `synced` (file length, steps),
/// in each way a disk can lose what was written since, and checks what `assemble` makes
/// of each (into `crashed`, `out`). Returns the crashes tried.
fn crash(
    j: &Journal,
    part: &Path,
    synced: (usize, usize),
    rec: &Recorder,
    rng: &mut Sfc32,
    crashed: &Path,
    out: &Path,
) -> usize {
    // The file as the operating system holds it: what was synced, and whatever was
    // written out since (a flush, or the buffer filling).
    let now = std::fs::read(part).unwrap();
    assert_eq!(now[..], j.bytes[..now.len()], "the file only grows");
    assert_eq!(
        now.len(),
        j.starts[rec.flushed() as usize],
        "flushed() counts exactly the whole records the file holds"
    );
    let lost = now.len() - synced.0;
    for way in 0..6 {
        let mut disk = now.clone();
        let pick = |rng: &mut Sfc32| synced.0 + rng.next_u32() as usize % (lost + 1);
        match way {
            // All of it: the file reverts to its length at the sync.
            0 => disk.truncate(synced.0),
            // Torn anywhere in it.
            1 => disk.truncate(pick(rng)),
            // Its end zeroed, or garbage.
            2 | 3 => {
                let from = pick(rng);
                for b in &mut disk[from..] {
                    *b = if way == 2 { 0 } else { rng.next_u32() as u8 };
                }
            }
            // Each 4 KiB page past the sync kept, zeroed or garbage, whatever the others.
            _ => {
                let mut page = synced.0 / 4096 * 4096;
                while page < disk.len() {
                    let (from, to) = (page.max(synced.0), (page + 4096).min(disk.len()));
                    match rng.next_u32() % 3 {
                        0 => {}
                        1 => disk[from..to].fill(0),
                        _ => disk[from..to].fill_with(|| rng.next_u32() as u8),
                    }
                    page += 4096;
                }
            }
        }
        std::fs::write(crashed, &disk).unwrap();
        let kept = check_assembly(j, crashed, out, &disk, way == 0);
        assert!(
            kept >= synced.1,
            "way {way}: {kept} steps kept, {} were synced",
            synced.1
        );
        if way == 0 {
            assert_eq!(
                kept, synced.1,
                "the file at the sync holds exactly the synced steps"
            );
        }
    }
    6
}

/// Every proper prefix of `bytes`, read by `read`, is refused naming `name` at an offset
/// not past the cut; `except` lists the lengths a reader may accept. Returns the cuts.
fn every_cut_refused<T: std::fmt::Debug>(
    name: &str,
    bytes: &[u8],
    except: &[usize],
    read: impl Fn(&[u8]) -> Result<T, FormatError>,
) -> usize {
    for cut in 0..bytes.len() {
        if except.contains(&cut) {
            continue;
        }
        match read(&bytes[..cut]) {
            Err(e) => {
                assert_eq!(e.input, name, "cut {cut}: {e}");
                assert!(e.offset as usize <= cut, "cut {cut}: {e}");
                assert_eq!(
                    e.to_string(),
                    format!("{name}: at offset {}: {}", e.offset, e.message)
                );
            }
            Ok(v) => panic!(
                "{name} cut to {cut} of {} bytes was read: {v:?}",
                bytes.len()
            ),
        }
    }
    bytes.len()
}

/// Reads a replay to its end with the streaming reader (`verify`, `seek` and `watch` read
/// files so), as `Replay::from_bytes` reads it whole.
fn stream_all(name: &str, bytes: &[u8]) -> Result<u32, FormatError> {
    let mut s = ReplayStream::new(name, std::io::Cursor::new(bytes))?;
    let mut ops = Vec::new();
    let mut n = 0;
    while s.next_ops(&mut ops)? {
        n += 1;
    }
    Ok(n)
}

/// What `assemble` writes to `OUT.part.tmp` before it seeks back to set the step count,
/// in the order it writes it: `OUT.part.tmp` is made a named pipe, read by a thread; the
/// seek fails on a pipe, and the assembly fails and removes what it made.
fn written_before_the_count(part: &Path, out: &Path) -> Vec<u8> {
    let tmp = assembly_path(out);
    let made = std::process::Command::new("mkfifo").arg(&tmp).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", tmp.display());
    let reader = std::thread::spawn({
        let tmp = tmp.clone();
        move || std::fs::read(tmp).unwrap()
    });
    let e = assemble(part, out, true).unwrap_err();
    let bytes = reader.join().unwrap();
    assert!(matches!(e, AssembleError::Output { .. }), "{e}");
    assert!(
        std::fs::symlink_metadata(&tmp).is_err(),
        "the pipe is removed"
    );
    assert!(!out.exists());
    bytes
}

/// A finished recording is never mistaken for another when cut: its header holds its
/// step count, so every proper prefix is refused by both readers, naming the file and
/// an offset not past the cut. `FILE.part.tmp`, the assembly, holds step count 0 until
/// its last write (what `assemble` writes before it, read through a pipe, is the finished
/// file with step count 0), so a cut one is refused too, at the first byte after row 0,
/// except cut exactly there: then it is the replay of no steps, which is true.
#[test]
fn a_cut_finished_file_or_assembly_is_refused_naming_the_file() {
    let dir = scratch();
    let j = Journal::record(lively(150, 5, 20), dir.path(), "f.ostm");
    let name = "f.ostm";
    let whole = j.finished_prefix(j.steps());
    assert_eq!(whole, j.finished);
    let n = every_cut_refused(name, &whole, &[], |b| Replay::from_bytes(name, b));
    every_cut_refused(name, &whole, &[], |b| stream_all(name, b));
    // Before its last write: the step count still 0.
    let before_count = written_before_the_count(
        &journal_path(&dir.path().join("f.ostm")),
        &dir.path().join("f.ostm"),
    );
    let mut want = whole.clone();
    want[j.count_at..j.count_at + 4].fill(0);
    assert!(
        before_count == want,
        "the assembly is written with step count 0, the count last"
    );
    let empty = j.rows_at + 8;
    every_cut_refused(name, &before_count, &[empty], |b| {
        Replay::from_bytes(name, b)
    });
    every_cut_refused(name, &before_count, &[empty], |b| stream_all(name, b));
    let e = Replay::from_bytes(name, &before_count).unwrap_err();
    assert_eq!(e.offset as usize, empty, "{e}");
    assert!(e.message.contains("trailing bytes"), "{e}");
    let zero = Replay::from_bytes(name, &before_count[..empty]).unwrap();
    assert_eq!(zero.step_count(), 0);
    assert!(n > 7_000, "{n} bytes");
}

/// The steps of finishing a recording, in the order `Recorder::finish` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `assemble` writes `FILE.part.tmp` (step count 0, then the count).
    Write,
    /// [`finish_order`]: sync it, rename it over `FILE`.
    Finish(Finish),
    /// `FILE.part` is removed.
    RemovePart,
}

/// A crash after any step of finishing a recording, with everything not yet synced lost
/// in any way (the assembly cut at 60 seeded offsets, whole before its count, whole):
/// what is left is either `FILE.part`, whole, beside what may be a partial
/// `FILE.part.tmp` (which `recover`, like the next clean finish, replaces), or the whole
/// finished `FILE` (beside `FILE.part` when the crash came before its removal, and
/// recovering again then gives the same bytes). The order of the middle steps is the
/// code's own ([`finish_order`]); a finish that renamed before it synced would leave
/// `FILE` on bytes a crash can lose, which this test refuses.
#[test]
fn a_crash_while_finishing_leaves_the_in_progress_file_or_the_whole_replay() {
    let dir = scratch();
    let out = dir.path().join("fin.ostm");
    let j = Journal::record(lively(400, 6, 20), dir.path(), "fin.ostm");
    let part = journal_path(&out);
    let tmp = assembly_path(&out);
    let journal = j.bytes.clone();
    let whole = j.finished.clone();
    let mut before_count = whole.clone();
    before_count[j.count_at..j.count_at + 4].fill(0);
    let mut rng = Sfc32::from_seed(0xf15);
    // What the assembly can hold on the disk before it is synced.
    let mut unsynced = vec![Vec::new(), before_count.clone(), whole.clone()];
    for _ in 0..60 {
        let cut = rng.next_u32() as usize % whole.len();
        unsynced.push(before_count[..cut].to_vec());
    }
    let mut steps = vec![Step::Write];
    steps.extend(finish_order().map(Step::Finish));
    steps.push(Step::RemovePart);
    let mut checked = 0;
    for crash in 0..=steps.len() {
        let done = &steps[..crash];
        let synced = done.contains(&Step::Finish(Finish::SyncTemp));
        let renamed = done.contains(&Step::Finish(Finish::RenameOver));
        let removed = done.contains(&Step::RemovePart);
        let assembly: Vec<Option<&Vec<u8>>> = if !done.contains(&Step::Write) {
            vec![None]
        } else if synced {
            vec![Some(&whole)]
        } else {
            unsynced.iter().map(Some).collect()
        };
        for left in assembly {
            // The directory as the crash left it.
            for p in [&out, &part, &tmp] {
                let _ = std::fs::remove_file(p);
            }
            if !removed {
                std::fs::write(&part, &journal).unwrap();
            }
            if let Some(bytes) = left {
                std::fs::write(if renamed { &out } else { &tmp }, bytes).unwrap();
            }
            let what = format!(
                "a crash after {done:?}, the assembly {} bytes",
                left.map_or(0, |b| b.len())
            );
            if out.exists() {
                let r = Replay::read_file(&out)
                    .unwrap_or_else(|e| panic!("{what}: FILE is not whole: {e}"));
                assert!(r.to_bytes() == whole, "{what}");
                if !removed {
                    assemble(&part, &out, true).unwrap();
                    assert!(std::fs::read(&out).unwrap() == whole, "{what}");
                }
            } else {
                assert!(part.exists(), "{what}: neither FILE nor FILE.part");
                let got = assemble(&part, &out, true).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(
                    (got.steps as usize, got.dropped),
                    (j.steps(), None),
                    "{what}"
                );
                assert!(std::fs::read(&out).unwrap() == whole, "{what}");
            }
            assert!(!tmp.exists(), "{what}: the partial assembly is replaced");
            checked += 1;
        }
    }
    assert!(checked >= unsynced.len() + 4, "{checked}");
    // A clean finish over a partial assembly left by a crash: the same.
    let _ = std::fs::remove_file(&out);
    let mut rec = Recorder::create(&out, &j.replay.start_world(), true).unwrap();
    let rows = j.replay.hashes.as_ref().unwrap();
    for i in 0..j.steps() {
        rec.push(j.replay.inputs.get(i), rows[i + 1]).unwrap();
    }
    std::fs::write(&tmp, &before_count[..before_count.len() / 2]).unwrap();
    assert_eq!(rec.finish().unwrap() as usize, j.steps());
    assert!(std::fs::read(&out).unwrap() == whole);
    assert!(!tmp.exists() && !part.exists());
}

/// A failure bundle is written whole (`PATH.PID.part`, synced, renamed). Every proper prefix
/// of a bundle (a verify bundle, a live one with both snapshots) is refused naming it at
/// an offset not past the cut, never a panic (its replay length must be the bytes that
/// remain: docs/bundle-format.md). A write over an old bundle that fails part way (a full
/// disk: `PATH.PID.part` made a link to `/dev/full`) leaves the old one whole and no
/// `PATH.PID.part`; a partial `PATH.PID.part` a killed writer left is refused when read by hand,
/// and replaced by the next write.
#[test]
fn a_cut_bundle_is_refused_and_a_failed_write_leaves_the_old_one() {
    let r = lively(120, 7, 20);
    let mut world = r.start_world();
    for i in 0..60 {
        world.step(&r.inputs.ops(i));
    }
    let rows = r.hashes.as_ref().unwrap();
    let verify = Bundle::from_mismatch(
        &r,
        60,
        rows[60] ^ 1,
        Some(world.clone()),
        None,
        "verify r.ostm: row 60 differs",
    )
    .unwrap();
    let mut after = world.clone();
    after.step(&r.inputs.ops(60));
    let live = Bundle::from_drift(
        &world,
        r.inputs.get(60),
        after.hash() ^ 1,
        &after,
        Some(after.clone()),
        "live drift",
    )
    .unwrap();
    for b in [&verify, &live] {
        let bytes = b.to_bytes();
        every_cut_refused("b.ostmb", &bytes, &[], |x| Bundle::from_bytes("b.ostmb", x));
        assert_eq!(&Bundle::from_bytes("b.ostmb", &bytes).unwrap(), b);
    }
    let dir = scratch();
    let path = dir.path().join("s.drift-61.ostmb");
    let tmp = ostm_protocol::format::part_path(&path);
    verify.write_file(&path).unwrap();
    assert!(!tmp.exists(), "nothing left beside it");
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
    let e = live.write_file(&path).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
    assert_eq!(
        Bundle::read_file(&path).unwrap(),
        verify,
        "the old bundle, whole"
    );
    assert!(
        std::fs::symlink_metadata(&tmp).is_err(),
        "no PATH.part is left"
    );
    let new = live.to_bytes();
    std::fs::write(&tmp, &new[..new.len() / 3]).unwrap();
    let e = Bundle::read_file(&tmp).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}: at offset ", tmp.display()))
            && e.offset as usize <= new.len() / 3,
        "{e}"
    );
    live.write_file(&path).unwrap();
    assert_eq!(Bundle::read_file(&path).unwrap(), live);
    assert!(!tmp.exists(), "the partial file was replaced");
}

/// A seek index is written whole (`INDEX.part`, synced, renamed), and one cut short (a
/// copy interrupted, a disk that lost its end) is refused whatever step is asked for,
/// naming the index at an offset not past the cut: at every line boundary, every offset
/// of its last 64 KiB and 1 000 seeded offsets (docs/seek-index.md, step 1). A write over
/// an old index that fails part way (`INDEX.part` a link to `/dev/full`) leaves the old
/// one whole and no `INDEX.part`; a partial `INDEX.part` is refused when read by hand.
#[test]
fn a_cut_seek_index_is_refused_and_a_failed_write_leaves_the_old_one() {
    let dir = scratch();
    let replay = dir.path().join("r.ostm");
    lively(1000, 8, 20).write_file(&replay).unwrap();
    let index = dir.path().join("r.ostm.seek");
    write_index(&replay, &index, 64, |_| {}).unwrap();
    let whole = std::fs::read(&index).unwrap();
    let len = whole.len();
    let lines: Vec<usize> = whole
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        lines.len(),
        1 + 1000 / 64 + 1,
        "a header and an entry per 64 rows"
    );
    let mut rng = Sfc32::from_seed(0x5eec);
    let mut cuts: BTreeSet<usize> = lines[..lines.len() - 1].iter().copied().collect();
    cuts.extend(len.saturating_sub(64 * 1024)..len);
    cuts.extend((0..1000).map(|_| rng.next_u32() as usize % len));
    cuts.insert(0);
    let cut = dir.path().join("cut.seek");
    std::fs::write(&cut, &whole).unwrap();
    let f = OpenOptions::new().write(true).open(&cut).unwrap();
    let name = cut.display().to_string();
    for &at in cuts.iter().rev() {
        f.set_len(at as u64).unwrap();
        // The first step's entry is there in every cut past the header; the last step's
        // is not.
        for step in [40, 1040] {
            match seek(&replay, &cut, step) {
                Err(e) => {
                    assert_eq!(e.input, name, "cut {at}: {e}");
                    assert!(e.offset as usize <= at, "cut {at}: {e}");
                    assert!(e.message.contains("cut short"), "cut {at}: {e}");
                }
                Ok(s) => {
                    panic!("an index cut to {at} of {len} bytes was read for step {step}: {s:?}")
                }
            }
        }
    }
    assert_eq!(seek(&replay, &index, 1040).unwrap().world.step, 1040);
    // Its last 4 KiB zeroed, or garbage (a disk that lost its end): refused the same way.
    let tail = len - 4096;
    let mut garbage = vec![0u8; 4096];
    garbage.iter_mut().for_each(|b| *b = rng.next_u32() as u8);
    for end in [vec![0u8; 4096], garbage] {
        let mut bytes = whole.clone();
        bytes[tail..].copy_from_slice(&end);
        std::fs::write(&cut, &bytes).unwrap();
        for step in [40, 1040] {
            let e = seek(&replay, &cut, step).expect_err("a damaged end is refused");
            assert!(
                e.message.contains("cut short") && e.offset as usize <= len,
                "{e}"
            );
        }
    }
    // A write that fails part way leaves the old index.
    let part = dir.path().join("r.ostm.seek.part");
    std::os::unix::fs::symlink("/dev/full", &part).unwrap();
    let e = write_index(&replay, &index, 64, |_| {}).unwrap_err();
    assert!(e.to_string().contains("No space left on device"), "{e}");
    assert!(
        std::fs::symlink_metadata(&part).is_err(),
        "no INDEX.part is left"
    );
    assert!(
        std::fs::read(&index).unwrap() == whole,
        "the old index, whole"
    );
    assert_eq!(seek(&replay, &index, 999).unwrap().world.step, 999);
    std::fs::write(&part, &whole[..len / 2]).unwrap();
    let e = seek(&replay, &part, 999).unwrap_err();
    assert!(e.message.contains("cut short"), "{e}");
    write_index(&replay, &index, 64, |_| {}).unwrap();
    assert!(!part.exists(), "the partial index was replaced");
    assert!(std::fs::read(&index).unwrap() == whole);
}

/// The files written in one piece (replays written whole, pose caches, failure bundles,
/// keyframes and pictures from `ostm-viewer keyframe`, `render`) go through
/// `format::write_whole`: a write over an old file that fails part way (`PATH.PID.part` a
/// link to `/dev/full`) leaves the old file as it was and no `PATH.PID.part`; one that
/// succeeds replaces a partial `PATH.PID.part` a killed writer of the same id left.
#[test]
fn a_file_written_whole_is_the_old_or_the_new_never_a_part() {
    let dir = scratch();
    let path = dir.path().join("ghost.ospc");
    let part = ostm_protocol::format::part_path(&path);
    write_whole(&path, b"the old file").unwrap();
    assert!(!part.exists());
    std::os::unix::fs::symlink("/dev/full", &part).unwrap();
    let e = write_whole(&path, &[7; 100_000]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"the old file");
    assert!(
        std::fs::symlink_metadata(&part).is_err(),
        "no PATH.part is left"
    );
    std::fs::write(&part, b"half of a new").unwrap();
    write_whole(&path, b"the new file").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"the new file");
    assert!(!part.exists());
    // A replay's and a bundle's writer are this one.
    let r = lively(10, 9, 3);
    let rp = dir.path().join("r.ostm");
    let rpart = ostm_protocol::format::part_path(&rp);
    std::os::unix::fs::symlink("/dev/full", &rpart).unwrap();
    assert!(r.write_file(&rp).is_err() && !rp.exists());
    assert!(std::fs::symlink_metadata(&rpart).is_err());
}
