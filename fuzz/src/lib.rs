//! The checks behind every fuzz target, one function per target.
//!
//! Each function takes the fuzzer's bytes, runs them through one reader of
//! `ostm-protocol`, and panics (an `assert!`) when a property the docs promise does not
//! hold: an accepted input is written back byte for byte, two readers of one format agree,
//! a refused input is refused with an error that names the input and a byte offset inside
//! it. A panic inside the library is a finding as well.
//!
//! The same file is compiled twice: as this crate's library for `cargo +nightly fuzz`
//! (`fuzz/fuzz_targets/*.rs` call these functions), and as a module of
//! `protocol/tests/fuzz_regressions.rs`, which runs every input kept under
//! `fixtures/fuzz/<target>/` through the same function on the stable toolchain. It uses
//! only `ostm-protocol` and its own dependencies (`bytes`), so both builds see
//! the same code. `docs/reliability.md` lists the targets and what was found.

use bytes::BytesMut;
use ostm_protocol::cursor::Cursor;
use ostm_protocol::format::bundle::Bundle;
use ostm_protocol::format::keyframe;
use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::format::ostm::{start_world, Header, Replay, Verdict, FLAG_HASHES, MAX_STEPS};
use ostm_protocol::format::recording::journal::AssembleError;
use ostm_protocol::format::recording::{assemble, Assembled, JOURNAL_MAGIC};
use ostm_protocol::format::replay_stream::{ReplayStream, ReplayTracer};
use ostm_protocol::format::seek;
use ostm_protocol::format::trace::{format_row, setup_line, TraceReader};
use ostm_protocol::sim::op::{decode_input, encode_input, Op};
use ostm_protocol::sim::world::World;
use ostm_protocol::wire::msg::Message;
use ostm_protocol::wire::{
    Codec, HostCodec, ToHost, ToViewer, ViewerCodec, MAX_FRAME_LEN, VERSION,
};
use ostm_protocol::FormatError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The name every input is read under, so errors can be checked to carry it.
pub const NAME: &str = "fuzz-input";

/// A target's check: the fuzzer's bytes in, a panic for a finding.
pub type Check = fn(&[u8]);

/// The targets, by name: `fuzz/fuzz_targets/<name>.rs` and `fixtures/fuzz/<name>/`.
pub const TARGETS: [(&str, Check); 15] = [
    ("replay", replay),
    ("replay_stream", replay_stream),
    ("wire_viewer", wire_viewer),
    ("wire_host", wire_host),
    ("keyframe", keyframe),
    ("bundle", bundle),
    ("pose_cache", pose_cache),
    ("trace", trace),
    ("seek", seek),
    ("journal", journal),
    ("session", session),
    ("host_conn", host_conn),
    ("tcp_reader", tcp_reader),
    ("nats_reader", nats_reader),
    ("publisher", publisher),
];

/// Steps above which a target does not also run the replay (the run is not what is
/// fuzzed, and a long one only slows the fuzzer down).
const RUN_AT_MOST: usize = 4096;

/// A refusal names `input`, points inside the `len` bytes it read, says something, and
/// prints as `<input>: at offset <offset>: <message>`.
fn check_error(e: &FormatError, input: &str, len: usize) {
    assert_eq!(e.input, input, "the error names the input: {e}");
    assert!(
        e.offset <= len as u64,
        "the error's offset {} lies inside the {len}-byte input: {e}",
        e.offset
    );
    assert!(!e.message.is_empty(), "the error says what was expected");
    assert_eq!(
        e.to_string(),
        format!("{input}: at offset {}: {}", e.offset, e.message)
    );
}

/// Runs a replay (when short enough) and checks that `verify` stops at the first row
/// that `compute_hashes` disagrees with.
fn run_replay(r: &Replay) {
    if r.step_count() > RUN_AT_MOST {
        return;
    }
    let mut computed = r.clone();
    computed.compute_hashes();
    let rows = computed.hashes.as_deref().unwrap_or(&[]);
    let first_bad = r
        .hashes
        .as_deref()
        .and_then(|stored| (0..stored.len()).find(|&i| stored[i] != rows[i]));
    match (r.verify(|_| {}), first_bad) {
        (Verdict::Match { final_hash, .. }, None) => {
            assert_eq!(
                Some(&final_hash),
                rows.last(),
                "the final hash is the last row"
            )
        }
        (Verdict::Mismatch { row, actual, .. }, Some(bad)) => {
            assert_eq!(row, bad, "verify stops at the first differing row");
            assert_eq!(actual, rows[bad]);
        }
        (v, bad) => panic!("verify says {v:?}, the computed rows differ first at {bad:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// .ostm

/// `Replay::from_bytes`: an accepted replay is written back byte for byte by `to_bytes`,
/// runs without panicking, and `verify` agrees with `compute_hashes`.
pub fn replay(data: &[u8]) {
    match Replay::from_bytes(NAME, data) {
        Ok(r) => {
            assert!(
                r.to_bytes() == data,
                "an accepted replay writes back byte for byte"
            );
            for i in 0..r.step_count() {
                assert_eq!(encode_input(&r.inputs.ops(i)), r.inputs.get(i));
            }
            let _ = r.op_counts();
            run_replay(&r);
        }
        Err(e) => check_error(&e, NAME, data.len()),
    }
}

/// `replay_stream::ReplayStream` (a step at a time, hash rows on demand) against
/// `Replay::from_bytes` (the whole file): both accept exactly the same files, with the
/// same error (input, offset, message) for a refused one, and the same header, ops and
/// hash rows for an accepted one; `ReplayTracer`'s worlds hash to the computed rows.
pub fn replay_stream(data: &[u8]) {
    let whole = Replay::from_bytes(NAME, data);
    let streamed = read_streamed(data);
    match (whole, streamed) {
        (Ok(r), Ok((header, steps, rows))) => {
            assert_eq!(header.setup, r.setup);
            assert_eq!(header.link, r.link);
            assert_eq!(header.start, r.start);
            assert_eq!(header.steps as usize, r.step_count());
            assert_eq!(steps.len(), r.step_count());
            for (i, ops) in steps.iter().enumerate() {
                assert_eq!(*ops, r.inputs.ops(i), "step {i}'s ops");
            }
            assert_eq!(rows, r.hashes, "hash rows read one at a time");
            if r.step_count() <= RUN_AT_MOST {
                let stream =
                    ReplayStream::new(NAME, std::io::Cursor::new(data)).expect("read once already");
                let mut t = ReplayTracer::new(stream);
                let mut computed = r.clone();
                computed.compute_hashes();
                let mut n = 0;
                while let Some(w) = t.next_world().expect("read once already") {
                    assert_eq!(Some(w.hash()), computed.hashes.as_ref().map(|h| h[n]));
                    n += 1;
                }
                assert_eq!(n, r.step_count() + 1);
            }
        }
        (Err(a), Err(b)) => {
            check_error(&a, NAME, data.len());
            assert_eq!(a, b, "both readers refuse with the same error");
        }
        (a, b) => panic!(
            "the whole-file reader says {:?}, the streaming reader {:?}",
            a.map(|_| "ok"),
            b.map(|_| "ok")
        ),
    }
}

type Streamed = (Header, Vec<Vec<Op>>, Option<Vec<u64>>);

fn read_streamed(data: &[u8]) -> Result<Streamed, FormatError> {
    let mut s = ReplayStream::new(NAME, std::io::Cursor::new(data))?;
    let header = s.header().clone();
    let mut steps = Vec::new();
    let mut ops = Vec::new();
    while s.next_ops(&mut ops)? {
        steps.push(ops.clone());
    }
    assert_eq!(s.next_index(), header.steps);
    assert_eq!(s.offset(), data.len() as u64, "the last step ends the file");
    let rows = match s.hash_row(0)? {
        None => None,
        Some(_) => Some(
            (0..=header.steps)
                .map(|r| s.hash_row(r).map(|h| h.expect("rows are present")))
                .collect::<Result<Vec<u64>, FormatError>>()?,
        ),
    };
    assert_eq!(s.hash_row(header.steps.saturating_add(1))?, None);
    Ok((header, steps, rows))
}

// ---------------------------------------------------------------------------------------
// The wire codec

/// The fuzz input of a wire target: byte 0 says how many cut points follow (`b % 8`), each
/// a u16 (little endian, taken modulo the stream's length + 1); the rest is the byte
/// stream, fed to the decoder in the pieces the cuts make.
fn split_stream(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let n = (n % 8) as usize;
    let take = (n * 2).min(rest.len());
    let (cuts, stream) = rest.split_at(take);
    let mut at: Vec<usize> = cuts
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as usize % (stream.len() + 1))
        .collect();
    at.sort_unstable();
    (at, stream)
}

/// What decoding a stream gave: each message with the offsets of its frame, and the error
/// that ended it (if any).
struct Decoded<D> {
    msgs: Vec<(D, u64, u64)>,
    error: Option<FormatError>,
}

/// Feeds `stream` to a fresh codec in pieces cut at `cuts`, as tokio-util's `FramedRead`
/// does over `ostm-runtime`'s `FrameCodec`: `decode` until it wants more bytes after each
/// piece, `decode_eof` until it has nothing more at the end, stopping at the first error.
fn decode_stream<D: Message, E: Message>(stream: &[u8], cuts: &[usize]) -> Decoded<D> {
    let mut codec: Codec<D, E> = Codec::new("stream");
    let mut buf = BytesMut::new();
    let mut out = Decoded {
        msgs: Vec::new(),
        error: None,
    };
    let mut from = 0;
    let ends = cuts.iter().copied().chain([stream.len()]);
    for end in ends {
        buf.extend_from_slice(&stream[from..end]);
        from = end;
        loop {
            let before = codec.consumed();
            match codec.decode(&mut buf) {
                Ok(Some(m)) => out.msgs.push((m, before, codec.consumed())),
                Ok(None) => break,
                Err(e) => {
                    out.error = Some(e);
                    return out;
                }
            }
            assert!(
                buf.capacity() <= 2 * (4 + MAX_FRAME_LEN + stream.len()),
                "the decoder buffers at most one frame ahead"
            );
        }
    }
    loop {
        let before = codec.consumed();
        match codec.decode_eof(&mut buf) {
            Ok(Some(m)) => out.msgs.push((m, before, codec.consumed())),
            Ok(None) => break,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        }
    }
    assert!(buf.is_empty(), "decode_eof leaves no bytes behind");
    assert_eq!(codec.consumed(), stream.len() as u64);
    out
}

/// Decodes one whole frame.
fn decode_one<D: Message, E: Message>(frame: &[u8]) -> D {
    let mut codec: Codec<D, E> = Codec::new("stream");
    let mut buf = BytesMut::from(frame);
    let m = codec
        .decode_eof(&mut buf)
        .unwrap_or_else(|e| panic!("a re-encoded frame decodes: {e}"))
        .expect("a whole frame");
    assert!(buf.is_empty());
    m
}

/// A wire target: the stream decodes to the same messages and the same error however it
/// is cut; the error names the stream at an offset inside it; each message re-encodes to
/// exactly its frame (`exact`), or, where the decoder keeps less than the bytes said (a
/// handshake of another version, end text that is not UTF-8), to a frame that decodes and
/// re-encodes to itself.
fn wire<D, E>(data: &[u8], encode: fn(&D) -> Vec<u8>, exact: fn(&D, &[u8]) -> bool)
where
    D: Message + PartialEq + std::fmt::Debug,
    E: Message,
{
    let (cuts, stream) = split_stream(data);
    let whole = decode_stream::<D, E>(stream, &[]);
    let pieces = decode_stream::<D, E>(stream, &cuts);
    assert_eq!(
        whole.msgs, pieces.msgs,
        "the same messages whatever the cuts"
    );
    assert_eq!(
        whole.error, pieces.error,
        "the same error whatever the cuts"
    );
    if let Some(e) = &whole.error {
        check_error(e, "stream", stream.len());
    }
    for (m, from, to) in &whole.msgs {
        let frame = &stream[*from as usize..*to as usize];
        let again = encode(m);
        if exact(m, frame) {
            assert!(again == frame, "{m:?} re-encodes to its frame");
        } else {
            let m2 = decode_one::<D, E>(&again);
            assert!(encode(&m2) == again, "{m2:?} re-encodes to itself");
        }
    }
}

fn encode_to_viewer(m: &ToViewer) -> Vec<u8> {
    HostCodec::encode_frame(m).expect("fits a frame").0.to_vec()
}

fn encode_to_host(m: &ToHost) -> Vec<u8> {
    ViewerCodec::encode_frame(m)
        .expect("fits a frame")
        .0
        .to_vec()
}

/// The host's messages as a viewer decodes them (`ViewerCodec`).
pub fn wire_viewer(data: &[u8]) {
    wire::<ToViewer, ToHost>(data, encode_to_viewer, |m, frame| match m {
        ToViewer::Welcome(w) => w.version == VERSION,
        // length 4, type 1, reason 1, step 8, text length 2: the text's bytes follow.
        ToViewer::End(e) => frame.get(16..) == Some(e.text.as_bytes()),
        _ => true,
    });
}

/// The viewer's messages as a host decodes them (`HostCodec`).
pub fn wire_host(data: &[u8]) {
    wire::<ToHost, ToViewer>(data, encode_to_host, |m, _| match m {
        ToHost::Hello(h) => h.version == VERSION,
        _ => true,
    });
}

// ---------------------------------------------------------------------------------------
// Keyframes, bundles, pose caches

/// `keyframe::parse`: an accepted keyframe exports (pretty and one-line) and imports back
/// to the same world and tick rate, and its export is stable.
pub fn keyframe(data: &[u8]) {
    match keyframe::parse(NAME, data) {
        Ok(k) => {
            let line = keyframe::to_json_line(&k.world, k.tick_rate)
                .unwrap_or_else(|e| panic!("an imported keyframe exports: {e}"));
            let pretty = keyframe::to_json_pretty(&k.world, k.tick_rate)
                .unwrap_or_else(|e| panic!("an imported keyframe exports: {e}"));
            for text in [&line, &pretty] {
                let back = keyframe::parse(NAME, text.as_bytes())
                    .unwrap_or_else(|e| panic!("an exported keyframe imports: {e}"));
                assert_eq!(back.world, k.world);
                assert_eq!(back.tick_rate, k.tick_rate);
                assert_eq!(
                    keyframe::to_json_line(&back.world, back.tick_rate).ok(),
                    Some(line.clone())
                );
            }
            let snap = k.world.snapshot();
            let w = World::from_snapshot(k.world.setup(), k.world.link(), NAME, &snap, 0)
                .unwrap_or_else(|e| panic!("a keyframe's world is a snapshot: {e}"));
            assert_eq!(w, k.world);
        }
        Err(e) => check_error(&e, NAME, data.len()),
    }
}

/// `Bundle::from_bytes`: an accepted bundle is written back byte for byte and its check
/// runs; the embedded replay has its row at the failing step.
pub fn bundle(data: &[u8]) {
    match Bundle::from_bytes(NAME, data) {
        Ok(b) => {
            assert!(
                b.to_bytes() == data,
                "an accepted bundle writes back byte for byte"
            );
            let rows = b.replay.hashes.as_ref().expect("checked by the reader");
            assert_eq!(rows.get(b.row as usize), Some(&b.expected));
            if b.replay.step_count() <= RUN_AT_MOST {
                let report = b.check();
                assert_eq!(report.rows as usize, rows.len());
                run_replay(&b.replay);
            }
        }
        Err(e) => check_error(&e, NAME, data.len()),
    }
}

/// `PoseCache::from_bytes`: an accepted cache is written back byte for byte, and its frames
/// are where its header says.
pub fn pose_cache(data: &[u8]) {
    match PoseCache::from_bytes(NAME, data) {
        Ok(c) => {
            assert!(
                c.to_bytes() == data,
                "an accepted pose cache writes back byte for byte"
            );
            let (first, last) = (c.start_step(), c.last_step());
            assert_eq!(last - first + 1, c.frame_count() as u64);
            assert_eq!(c.frame_at_step(first), c.frame(0));
            assert_eq!(c.frame_at_step(last).map(<[_]>::len), Some(c.body_count()));
            if let Some(after) = last.checked_add(1) {
                assert_eq!(c.frame_at_step(after), None);
            }
            if let Some(before) = first.checked_sub(1) {
                assert_eq!(c.frame_at_step(before), None);
            }
        }
        Err(e) => check_error(&e, NAME, data.len()),
    }
}

// ---------------------------------------------------------------------------------------
// Traces

/// `TraceReader`: a trace read to its `end` line is written back byte for byte from the
/// worlds and hashes read (the format has one spelling for everything); a refused one is
/// refused at the first byte of a line, naming the line.
pub fn trace(data: &[u8]) {
    let mut out = String::new();
    let result = (|| -> Result<(), FormatError> {
        let mut t = TraceReader::new(NAME, data)?;
        out.push_str("ostm-trace 1\n");
        out.push_str(&setup_line(&t.setup(), t.link()));
        out.push('\n');
        let mut rows = 0u64;
        while let Some((w, hash)) = t.next_row()? {
            format_row(&mut out, w, hash);
            rows += 1;
        }
        out.push_str(&format!("end rows={rows}\n"));
        Ok(())
    })();
    match result {
        Ok(()) => assert!(
            out.as_bytes() == data,
            "an accepted trace writes back byte for byte"
        ),
        Err(e) => {
            check_error(&e, NAME, data.len());
            assert!(
                e.message.starts_with("line "),
                "the error names its line: {e}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Files on disk: the seek index and the in-progress recording

/// The replay the seek target's indexes are for.
pub const SEEK_REPLAY: &[u8] = include_bytes!("../../testdata/test-2d-600.ostm");

static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

/// A directory of this process for the files the targets write (under `$OSTM_FUZZ_TMP`,
/// else `/dev/shm` when it exists, else the temp dir), removed by [`remove_scratch`].
fn scratch() -> &'static Path {
    SCRATCH.get_or_init(|| {
        let base = std::env::var_os("OSTM_FUZZ_TMP")
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("ostm-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

/// Removes the scratch directory, if a target made one (the regression test calls this
/// when it is done; a fuzzer is stopped by a signal and `scripts/fuzz` removes
/// `$OSTM_FUZZ_TMP`).
pub fn remove_scratch() {
    if let Some(dir) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A fresh file name in the scratch directory (tests call the targets from several threads).
fn scratch_file(what: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    scratch().join(format!("{what}-{}", N.fetch_add(1, Ordering::Relaxed)))
}

struct SeekReplay {
    path: PathBuf,
    /// The world at every step of the replay, by stepping it in memory.
    worlds: Vec<World>,
}

fn seek_replay() -> &'static SeekReplay {
    static R: OnceLock<SeekReplay> = OnceLock::new();
    R.get_or_init(|| {
        let r = Replay::from_bytes("test-2d-600.ostm", SEEK_REPLAY).expect("testdata reads");
        let mut worlds = vec![r.start_world()];
        for i in 0..r.step_count() {
            let mut w = worlds[i].clone();
            w.step(&r.inputs.ops(i));
            worlds.push(w);
        }
        let path = scratch().join("test-2d-600.ostm");
        std::fs::write(&path, SEEK_REPLAY).expect("write the seek replay");
        SeekReplay { path, worlds }
    })
}

/// `seek::seek` on `testdata/test-2d-600.ostm` with the fuzzer's index. Input: a u16 step
/// (little endian, taken modulo 700, so some steps lie past the replay's 600), then the
/// index file's bytes. A seek that succeeds reached the step asked for, from a keyframe
/// at or before it, and its world is the replay's world there or differs from it in hash
/// (a wrong `inputOffset` is caught by the hash row, docs/seek-index.md step 4); a refusal
/// names the index or the replay at an offset inside it.
pub fn seek(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let step = u16::from_le_bytes([data[0], data[1]]) as u64 % 700;
    let index_bytes = &data[2..];
    let r = seek_replay();
    let index = scratch_file("index.seek");
    std::fs::write(&index, index_bytes).expect("write the index");
    let got = seek::seek(&r.path, &index, step);
    let _ = std::fs::remove_file(&index);
    let iname = index.display().to_string();
    match got {
        Ok(s) => {
            let want = r
                .worlds
                .get(step as usize)
                .expect("a step the replay holds");
            assert_eq!(s.world.step, step);
            assert!(s.keyframe_step <= step);
            assert_eq!(s.keyframe_step + s.steps_run, step);
            assert_eq!(s.recorded_hash, Some(want.hash()));
            assert!(
                s.world == *want || s.world.hash() != want.hash(),
                "a wrong world is told apart by its hash"
            );
        }
        Err(e) => {
            let rname = r.path.display().to_string();
            let len = if e.input == rname {
                SEEK_REPLAY.len()
            } else {
                assert!(e.input.starts_with(&iname), "the error names a file: {e}");
                index_bytes.len()
            };
            let input = e.input.clone();
            check_error(&e, &input, len);
        }
    }
}

/// What `assemble` should make of an in-progress file, worked out from
/// docs/replay-format.md ("The in-progress file", "Reading the records", "Assembling")
/// alone.
struct Expected {
    bytes: Vec<u8>,
    start_step: u64,
    steps: u32,
    /// The offset of the first record not kept, the first words of why, and its kind.
    dropped: Option<(u64, &'static str, &'static str)>,
}

/// The header check: XXH3-64, seed 0 (the protocol's XXH3, which other targets test).
fn header_check(bytes: &[u8]) -> u64 {
    ostm_protocol::sim::world::xxh3_64(bytes)
}

/// A record check: the low 32 bits of XXH3-64 seeded with the header check.
fn record_check(check: u64, bytes: &[u8]) -> u32 {
    ostm_protocol::format::recording::journal::record_check(check, bytes)
}

/// Whether a whole record (all its bytes there, its check holds, its input decodes)
/// starts at `at`.
fn whole_at(name: &str, data: &[u8], at: usize, check: u64) -> bool {
    let Some(&[a, b]) = data.get(at..at + 2) else {
        return false;
    };
    let n = u16::from_le_bytes([a, b]) as usize;
    let Some(stored) = data.get(at + 2 + n + 8..at + 2 + n + 12) else {
        return false;
    };
    let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
    record_check(check, &data[at..at + 2 + n + 8]) == stored
        && decode_input(name, &data[at + 2..at + 2 + n], 0).is_ok()
}

fn expected_assembly(name: &str, data: &[u8], verify: bool) -> Result<Expected, FormatError> {
    let mut c = Cursor::new(name, data, 0);
    let magic = c.take(8, "magic")?;
    if magic != JOURNAL_MAGIC {
        return Err(c.error_at(0, "magic"));
    }
    let mut c = Cursor::new(name, &data[8..], 8);
    let header = Header::read(name, &mut c)?;
    if header.flags & FLAG_HASHES == 0 {
        return Err(c.error_at(14, "flag bit 0 always set"));
    }
    let count_at = if header.link.is_some() { 22 } else { 18 };
    if header.steps != 0 {
        return Err(c.error_at(8 + count_at as u64, "step count 0"));
    }
    let h = (c.offset() - 8) as usize;
    let row0 = c.u64("hash row 0")?;
    let check = c.u64("header check")?;
    if header_check(&data[..16 + h]) != check {
        return Err(c.error_at(16 + h as u64, "the header check"));
    }
    let mut world = start_world(header.setup, header.link, header.start.as_ref());
    if verify && world.hash() != row0 {
        return Err(c.error_at(8 + h as u64, "hash row 0"));
    }
    let mut at = 24 + h;
    let mut rows = vec![row0];
    let mut inputs = Vec::new();
    let mut dropped = None;
    while at < data.len() {
        let rest = &data[at..];
        let n = rest
            .get(..2)
            .map(|l| u16::from_le_bytes([l[0], l[1]]) as usize);
        let whole = n.is_some_and(|n| {
            rest.len() >= 2 + n + 12
                && record_check(check, &rest[..2 + n + 8])
                    == u32::from_le_bytes(rest[2 + n + 8..2 + n + 12].try_into().expect("4"))
        });
        let (Some(n), true) = (n, whole) else {
            let torn = rest.len() < 2 || n.is_some_and(|n| rest.len() < 2 + n + 12);
            let why = if torn {
                "a torn last record"
            } else {
                "the check of the record of step"
            };
            let kind = if (at + 1..data.len()).any(|c| whole_at(name, data, c, check)) {
                "corruption"
            } else {
                "torn_tail"
            };
            dropped = Some((at as u64, why, kind));
            break;
        };
        if rows.len() - 1 == MAX_STEPS as usize {
            dropped = Some((at as u64, "a replay holds at most", "refused"));
            break;
        }
        let input = &rest[2..2 + n];
        let hash = u64::from_le_bytes(rest[2 + n..2 + n + 8].try_into().expect("8 bytes"));
        let Ok(ops) = decode_input(name, input, at as u64 + 2) else {
            dropped = Some((at as u64, "the input of step", "refused"));
            break;
        };
        if verify {
            world.step(&ops);
            if world.hash() != hash {
                dropped = Some((at as u64, "the hash row of step", "not_reproduced"));
                break;
            }
        }
        rows.push(hash);
        inputs.push(input);
        at += 2 + n + 12;
    }
    let steps = inputs.len() as u32;
    let mut bytes = data[8..8 + h].to_vec();
    bytes[count_at..count_at + 4].copy_from_slice(&steps.to_le_bytes());
    for r in &rows {
        bytes.extend_from_slice(&r.to_le_bytes());
    }
    for i in &inputs {
        bytes.extend_from_slice(&(i.len() as u16).to_le_bytes());
        bytes.extend_from_slice(i);
    }
    Ok(Expected {
        bytes,
        start_step: header.start.as_ref().map_or(0, |w| w.step),
        steps,
        dropped,
    })
}

/// The fuzzer's in-progress file with its header check and every record check it can
/// find made right (records walked by their lengths from where the header ends), so that
/// mutations reach the records and the replay rather than stopping at a check.
fn with_checks_made_right(name: &str, data: &[u8]) -> Option<Vec<u8>> {
    let mut c = Cursor::new(name, data.get(8..)?, 8);
    Header::read(name, &mut c).ok()?;
    let h = (c.offset() - 8) as usize;
    let mut out = data.to_vec();
    let head = out.get(..16 + h)?.to_vec();
    let check = header_check(&head);
    out.get_mut(16 + h..24 + h)?
        .copy_from_slice(&check.to_le_bytes());
    let mut at = 24 + h;
    while let Some(&[a, b]) = out.get(at..at + 2) {
        let n = u16::from_le_bytes([a, b]) as usize;
        if out.len() < at + 2 + n + 12 {
            break;
        }
        let rc = record_check(check, &out[at..at + 2 + n + 8]);
        out[at + 2 + n + 8..at + 2 + n + 12].copy_from_slice(&rc.to_le_bytes());
        at += 2 + n + 12;
    }
    Some(out)
}

/// `recording::assemble` on the fuzzer's bytes as an in-progress file (`X.part`), with and
/// without `verify`. It must make exactly the replay the docs describe (the header with
/// its step count set, row 0 and the kept records' rows, then their inputs), keeping the
/// longest prefix of whole, decodable (and, verifying, reproduced) records; that replay
/// must read back, write back byte for byte, and, verified, verify; a refusal is the
/// header's, at the same offset.
pub fn journal(data: &[u8]) {
    let part = scratch_file("rec.ostm.part");
    let pname = part.display().to_string();
    journal_as_is(data);
    // The same bytes with their checks made right: mutations reach the records.
    if let Some(fixed) = with_checks_made_right(&pname, data) {
        journal_as_is(&fixed);
    }
}

fn journal_as_is(data: &[u8]) {
    let part = scratch_file("rec.ostm.part");
    let out = scratch_file("rec.ostm");
    std::fs::write(&part, data).expect("write the in-progress file");
    let pname = part.display().to_string();
    for verify in [false, true] {
        let got = assemble(&part, &out, verify);
        let written = std::fs::read(&out).ok();
        let _ = std::fs::remove_file(&out);
        let mut tmp = out.clone().into_os_string();
        tmp.push(".part.tmp");
        let _ = std::fs::remove_file(&tmp);
        let want = expected_assembly(&pname, data, verify);
        match (got, want) {
            (Ok(a), Ok(want)) => {
                let Assembled {
                    start_step,
                    steps,
                    dropped,
                    ..
                } = a;
                let bytes = written.expect("the replay was written");
                assert_eq!((start_step, steps), (want.start_step, want.steps));
                match (&dropped, want.dropped) {
                    (None, None) => {}
                    (Some(d), Some((offset, why, kind))) => {
                        assert_eq!(d.offset, offset, "dropped from {}", d.why);
                        assert_eq!(d.bytes, data.len() as u64 - offset);
                        assert!(d.why.starts_with(why), "{} should start {why:?}", d.why);
                        assert_eq!(d.kind.name(), kind, "{}", d.why);
                    }
                    (d, w) => panic!("assemble dropped {d:?}, the docs say {w:?}"),
                }
                assert!(
                    bytes == want.bytes,
                    "the assembled replay is the documented bytes"
                );
                let r = Replay::from_bytes("assembled", &bytes)
                    .unwrap_or_else(|e| panic!("an assembled replay reads back: {e}"));
                assert!(r.to_bytes() == bytes);
                assert_eq!(r.step_count(), steps as usize);
                assert_eq!(r.start_step(), start_step);
                if verify && r.step_count() <= RUN_AT_MOST {
                    assert!(
                        matches!(r.verify(|_| {}), Verdict::Match { .. }),
                        "a verified assembly verifies"
                    );
                }
            }
            (Err(AssembleError::Input(e)), Err(w)) => {
                check_error(&e, &pname, data.len());
                assert_eq!(e.offset, w.offset, "refused at the documented offset: {e}");
                assert!(written.is_none(), "a refused file writes nothing");
            }
            (Err(e), Err(w)) => panic!("assemble failed with {e}, expected {w}"),
            (Ok(a), Err(w)) => panic!("assemble made {a:?}, the docs refuse it: {w}"),
            (Err(e), Ok(_)) => panic!("assemble refused with {e}, the docs accept it"),
        }
    }
    let _ = std::fs::remove_file(&part);
}

// ---------------------------------------------------------------------------------------
// The session core

/// The viewer's sans-IO verifier (`ostm_protocol::session::Verifier`) fed a hostile
/// sequence of inputs: each byte of the fuzzer's is one event beside a real host world
/// (a record, a record withheld, a duplicate, a record with another hash, a resync of this
/// world or another, a lost connection, a reconnection, a keyframe after lost records, an
/// end, time passing, a drift reply). Whatever the order: no panic; a record is verified
/// only when the host's hash for its step number equals the viewer's; no step is verified
/// twice; the verified count is the number of records verified; a stopped session stays
/// stopped; every restart's step is the world's; the summary's gaps run forward.
pub fn session(data: &[u8]) {
    use ostm_protocol::session::{Event, Goal, Input, Limits, Restart, Transmit, Verifier};
    use ostm_protocol::sim::op::encode_input;
    use ostm_protocol::sim::scenario::Scenario;
    use ostm_protocol::wire::{DriftReply, DriftStatus, End, EndReason, RecordRef};
    use ostm_protocol::{Dims, Setup};
    use std::collections::{BTreeMap, BTreeSet};

    let Some((&head, body)) = data.split_first() else {
        return;
    };
    let setup = Setup {
        dims: if head & 1 == 0 {
            Dims::Two
        } else {
            Dims::Three
        },
        bodies: 1 + (head >> 1) % 8,
        seed: u32::from(head),
    };
    let mut host = World::new(setup, None);
    let mut scenario = Scenario::new(setup.seed);
    let other = World::new(
        Setup {
            seed: setup.seed ^ 0x5555,
            ..setup
        },
        None,
    );
    let limits = Limits {
        drift_reply_ms: 100,
        checkpoint_every: 1 + usize::from(head % 7),
    };
    let goal = Goal {
        steps: (head % 5 == 0).then_some(u64::from(head) * 3),
        until: None,
    };
    let mut v = Verifier::new(limits, goal, head & 2 == 0);
    // The host's hash after each step, by the step the record carries.
    let mut hashes: BTreeMap<u64, u64> = BTreeMap::new();
    // Every record sent so far: (step, hash, input, ops).
    let mut sent: Vec<(u64, u64, Vec<u8>, Vec<Op>)> = Vec::new();
    let mut verified: BTreeSet<u64> = BTreeSet::new();
    let mut connection = 0u64;
    let mut now = 0u64;
    let mut stopped = false;
    let mut rejoins = 0usize;
    for &b in body {
        let mut record = None;
        match b % 16 {
            0..=6 => {
                let step = host.step;
                let ops = scenario.next_input(&host);
                host.step(&ops);
                hashes.insert(step, host.hash());
                sent.push((step, host.hash(), encode_input(&ops), ops));
                if b % 16 != 6 {
                    record = sent.last().cloned();
                }
            }
            7 => record = sent.get(usize::from(b >> 4) % sent.len().max(1)).cloned(),
            8 => {
                if let Some(mut r) = sent.last().cloned() {
                    r.1 ^= 1 << (b >> 4);
                    record = Some(r);
                }
            }
            9 => v.handle(Input::Resync(host.clone())),
            10 => v.handle(Input::Resync(other.clone())),
            11 if b >> 4 < 8 => v.handle(Input::Missing {
                why: "missing".into(),
            }),
            11 => v.handle(Input::Lost {
                why: "lost".into(),
                last: b >> 4 == 15,
            }),
            12 => {
                connection += 1;
                v.handle(Input::Attached {
                    world: host.clone(),
                    connection,
                })
            }
            13 => v.handle(Input::Rejoined {
                world: if b >> 4 == 0 {
                    other.clone()
                } else {
                    host.clone()
                },
                why: "a keyframe".into(),
            }),
            14 => v.handle(Input::End(End {
                reason: EndReason::from_byte(b >> 4).unwrap_or(EndReason::Finished),
                text: "end".into(),
                host_step: host.step,
            })),
            _ => {
                now += u64::from(b >> 4) * 10;
                match v.poll_transmit() {
                    Some(Transmit::DriftRequest { step, .. }) if b >> 4 < 4 => v
                        .handle_drift_reply(DriftReply {
                            step,
                            status: DriftStatus::Held,
                            world: Some(host.clone()),
                            stages: None,
                        }),
                    Some(_) => v.handle_drift_unanswered("gone"),
                    None => v.handle_timeout(now),
                }
            }
        }
        if let Some((step, hash, input, ops)) = record {
            let before = v.verified();
            let r = RecordRef {
                step,
                hash,
                input: &input,
            };
            match v.handle_record(r, &ops) {
                Some(h) => {
                    assert!(!stopped, "a record verified after the session stopped");
                    assert_eq!(h, hash, "the verified hash is the record's");
                    assert_eq!(
                        hashes.get(&step),
                        Some(&h),
                        "verified against another hash than the host's for step {step}"
                    );
                    assert!(verified.insert(step), "step {step} verified twice");
                    assert_eq!(v.world().step, step + 1);
                    assert_eq!(v.verified(), before + 1);
                }
                None => assert_eq!(v.verified(), before, "not verified, yet counted"),
            }
        }
        while let Some(e) = v.poll_event() {
            match e {
                Event::Restarted { to, cause, .. } => {
                    assert_eq!(to, v.world().step, "the restart's step is the world's");
                    if cause != Restart::Resync {
                        rejoins += 1;
                    }
                }
                Event::Stopped => {
                    assert!(!stopped, "stopped twice");
                    stopped = true;
                }
                _ => {}
            }
        }
        assert_eq!(
            stopped,
            v.is_stopped(),
            "the stop was not reported as an event"
        );
        assert_eq!(v.verified(), verified.len() as u64);
    }
    let summary = v.summary(host.step);
    assert_eq!(
        summary.gaps.len(),
        rejoins + usize::from(summary.open_gap.is_some()),
        "every rejoin is a gap, and an open one last"
    );
    assert_eq!(summary.verified, verified.len() as u64);
}

// ---------------------------------------------------------------------------------------
// The host's connection

/// A refusal's `at offset N`, if it names one, lies within the `sent` bytes.
fn check_offset(text: &str, sent: u64) {
    if let Some(at) = text.split("at offset ").nth(1) {
        let n: u64 = at
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .expect("an offset is a number");
        assert!(n <= sent, "offset {n} past the {sent} bytes sent: {text}");
    }
}

/// A small 2D world of three bodies from `seed`, at `step`: what the readers' targets
/// attach to and refuse as another world.
fn small_world(seed: u32, step: u64) -> World {
    let mut w = World::new(
        ostm_protocol::Setup {
            dims: ostm_protocol::Dims::Two,
            bodies: 3,
            seed,
        },
        None,
    );
    w.step = step;
    w
}

/// The host's sans-IO connection (`ostm_protocol::serve::Conn`) driven by hostile bytes
/// and hostile timings: byte 0 chooses a token and whether a valid hello comes first; then
/// each byte is one event: bytes from the viewer (the next 1 to 16 of the input, so the
/// viewer's stream is cut anywhere), the clock moved on by up to 20 s (timers fired late)
/// or `handle_timeout` called before the deadline it asked for (early), host steps, the
/// write in progress completed or failed or its shutdown failed, the viewer's end or a
/// failed read, the stream's end, the time to deliver over. Requests are answered from a
/// real ring of records (`serve::ring::Records`). Whatever the order: no panic; every
/// frame the connection writes decodes as a host message; records come in step order,
/// once each, from the attach or resync snapshot's step on; nothing follows the end; a
/// refusal or end text that names an offset names one within the bytes the viewer sent.
pub fn host_conn(data: &[u8]) {
    use ostm_protocol::serve::conn::{Config, Conn, Millis, HELLO_MS, LINGER_MAX_MS, LINGER_MS};
    use ostm_protocol::serve::ring::Records;
    use ostm_protocol::serve::{Request, Take, BATCH};
    use ostm_protocol::sim::scenario::Scenario;
    use ostm_protocol::wire::{
        DriftReply, DriftStatus, End, EndReason, Hello, HostCodec, PeerRole, Record, SnapshotKind,
        ToHost, ToViewer, ViewerCodec, Welcome, VERSION,
    };
    use ostm_protocol::{Dims, Setup};

    let Some((&head, mut rest)) = data.split_first() else {
        return;
    };
    let cfg = Config {
        token: (head & 1 == 1).then(|| b"secret".to_vec()),
        welcome: Welcome {
            version: VERSION,
            role: PeerRole::Host as u8,
            rate: 60,
            heartbeat_ms: 1000,
            ring: 8,
            queue: 8,
        },
        hello_ms: HELLO_MS,
        stall_ms: 1 + u64::from(head >> 4) * 700,
        silence_ms: 10_000,
        heartbeat_ms: 1_000,
        linger_ms: LINGER_MS,
        linger_max_ms: LINGER_MAX_MS,
    };
    let mut conn = Conn::new(cfg, "127.0.0.1:5000", 0);
    let mut now: Millis = 0;
    let mut sent_bytes: u64 = 0;
    if head & 2 == 2 {
        let hello = ViewerCodec::encode_frame(&ToHost::Hello(Hello {
            version: VERSION,
            role: PeerRole::Viewer as u8,
            token: if head & 4 == 4 {
                b"secret".to_vec()
            } else {
                Vec::new()
            },
        }))
        .expect("a hello fits a frame");
        sent_bytes += hello.0.len() as u64;
        conn.handle_bytes(&hello.0, now);
    }
    // The host: its world and the ring of its last 8 records.
    let mut world = World::new(
        Setup {
            dims: Dims::Two,
            bodies: 3,
            seed: 9,
        },
        None,
    );
    let mut scenario = Scenario::new(9);
    let mut records = Records::new(8);
    let mut ended: Option<End> = None;
    // The viewer's side of what the connection wrote.
    let mut viewer = ViewerCodec::new("host");
    let mut got = BytesMut::new();
    let mut next_step: Option<u64> = None;
    let mut end_seen = false;
    let mut writing: Option<Vec<ostm_protocol::wire::EncodedFrame>> = None;
    let mut joined = false;
    for _ in 0..2_000 {
        // Requests and events, answered at once.
        for _ in 0..64 {
            while let Some(e) = conn.poll_event() {
                use ostm_protocol::serve::Event;
                match e {
                    Event::Accepted if !joined => {
                        joined = true;
                        match &ended {
                            Some(end) => conn.handle_stream_over(Some(end.clone())),
                            None => conn.handle_join(Some(ostm_protocol::serve::Joined {
                                id: 1,
                                world: world.clone(),
                                position: records.next(),
                            })),
                        }
                    }
                    Event::Refused { log, .. } => check_offset(&log, sent_bytes),
                    _ => {}
                }
            }
            if writing.is_none() {
                if let Some(t) = conn.poll_transmit(now, world.step) {
                    writing = Some(t.frames);
                    continue;
                }
            }
            match conn.poll_request() {
                Some(Request::Take { .. }) => {
                    let mut position = conn.position();
                    let taken =
                        records.take(&mut position, BATCH, ended.as_ref(), conn.take_buffer());
                    let nothing = matches!(taken.take, Take::Nothing);
                    conn.handle_take(taken.take, position, world.step);
                    if nothing {
                        break;
                    }
                }
                Some(Request::Join) => {
                    conn.handle_join(ended.is_none().then(|| ostm_protocol::serve::Joined {
                        id: 1,
                        world: world.clone(),
                        position: records.next(),
                    }))
                }
                Some(Request::Drift(step)) => conn.handle_drift_reply(DriftReply {
                    step,
                    status: DriftStatus::TooOld,
                    world: None,
                    stages: None,
                }),
                Some(Request::Unacknowledged) => conn.handle_unacknowledged(0, now),
                None => break,
            }
        }
        if conn.is_closed() {
            return;
        }
        let Some((&op, tail)) = rest.split_first() else {
            return;
        };
        rest = tail;
        match op % 12 {
            // Bytes from the viewer, cut anywhere.
            0..=2 => {
                let n = (1 + (op >> 4) as usize).min(rest.len());
                let (bytes, tail) = rest.split_at(n);
                rest = tail;
                sent_bytes += bytes.len() as u64;
                conn.handle_bytes(bytes, now);
            }
            // The clock moves on, up to 20 s, and what is due fires (late).
            3 => {
                now += u64::from(op >> 4) * 1_300;
                conn.handle_timeout(now);
                if !conn.is_writing() {
                    writing = None;
                }
            }
            // A timer fired early: before the deadline asked for.
            4 => {
                if let Some(at) = conn.poll_timeout() {
                    conn.handle_timeout(now.max(at.saturating_sub(u64::from(op >> 4))));
                    if !conn.is_writing() {
                        writing = None;
                    }
                }
            }
            // The host steps.
            5 => {
                for _ in 0..=(op >> 4) {
                    if ended.is_some() {
                        break;
                    }
                    let step = world.step;
                    let ops = scenario.next_input(&world);
                    world.step(&ops);
                    let frame = HostCodec::encode_frame(&ToViewer::Record(Record {
                        step,
                        hash: world.hash(),
                        input: bytes::Bytes::from(encode_input(&ops)),
                    }))
                    .expect("a record fits a frame");
                    records.push(world.step, frame);
                }
            }
            // The write in progress is taken whole: the viewer decodes it.
            6 | 7 => {
                if let Some(frames) = writing.take() {
                    assert!(!end_seen, "nothing is written after the end");
                    for f in &frames {
                        got.extend_from_slice(&f.0);
                    }
                    while let Some(msg) = viewer.decode(&mut got).expect("the host's frames decode")
                    {
                        assert!(!end_seen, "nothing follows the end");
                        match msg {
                            ToViewer::Snapshot { kind, world: w } => {
                                assert!(
                                    matches!(kind, SnapshotKind::Attach) || next_step.is_some()
                                );
                                next_step = Some(w.step);
                            }
                            ToViewer::Record(r) => {
                                let want = next_step.expect("a record after a snapshot");
                                assert_eq!(r.step, want, "records in order, once each");
                                next_step = Some(want + 1);
                            }
                            ToViewer::End(e) => {
                                end_seen = true;
                                check_offset(&e.text, sent_bytes);
                            }
                            _ => {}
                        }
                    }
                    conn.handle_sent(frames, now);
                }
            }
            // The write fails, or its shutdown does.
            8 => {
                if writing.take().is_some() {
                    if op & 16 == 0 {
                        conn.handle_write_failed(std::io::Error::other("reset"));
                    } else {
                        conn.handle_shutdown_failed();
                    }
                }
            }
            // The viewer closes, or reading fails.
            9 => {
                if op & 16 == 0 {
                    conn.handle_eof(now);
                } else {
                    conn.handle_read_failed(std::io::Error::other("reset"));
                }
            }
            // The stream ends.
            10 => {
                if ended.is_none() {
                    ended = Some(End {
                        reason: EndReason::Finished,
                        text: "the host ran its steps".into(),
                        host_step: world.step,
                    });
                }
            }
            // The time to deliver is over.
            _ => {
                conn.handle_delivery_over();
                if !conn.is_writing() {
                    writing = None;
                }
            }
        }
    }
}

/// `tcp_reader`: byte 0 chooses `--reconnect` (and its budget), TLS, and records taken one
/// at a time; then one event a byte: host messages (a welcome, an attach or resync
/// snapshot of this world or another, the next record or one out of step, a heartbeat,
/// an end of any reason, a drift reply) queued on the host's side, 1 to 16 of the queued
/// bytes or of the fuzzer's own delivered (a stream cut anywhere), the clock moved on by up
/// to 20 s (timers fired late) or by a jump of up to about 35 years, a timer fired before
/// its deadline (early), the connection opened, refused, its TLS failed, its read or write
/// failed or ended (the host closing after its whole frames, between frames or inside
/// one), the spool full or drained, a drift request sent, the viewer's verified step (or
/// another) told. Whatever the order: no panic; records are delivered in step order from
/// the attach or resync snapshot's step, once each; nothing follows the reader's stop;
/// every refusal is a sentence, and one that names an offset names one within the bytes
/// the host sent on that connection; a stream closed while streaming, inside a frame or
/// between two, is a lost connection: the reader connects again with `--reconnect` and
/// stops without it; every heartbeat carries the viewer step the reader was told last.
pub fn tcp_reader(data: &[u8]) {
    use ostm_protocol::reader::tcp::{Config, Event, Reader};
    use ostm_protocol::reader::Arrival;
    use ostm_protocol::wire::{
        DriftReply, DriftStatus, End, EndReason, HostCodec, PeerRole, Record, SnapshotKind,
        ToViewer, Welcome, VERSION,
    };

    let Some((&head, mut rest)) = data.split_first() else {
        return;
    };
    let cfg = Config {
        addr: "127.0.0.1:7000".into(),
        token: None,
        reconnect_ms: (head & 1 == 1).then(|| u64::from(head >> 4) * 1_000),
        tls: head & 2 == 2,
        one_at_a_time: head & 4 == 4,
    };
    let cfg_reconnect = cfg.reconnect_ms;
    let mut now: u64 = 0;
    let mut r = Reader::new(cfg, now);
    let world = small_world;
    // The host's side: what it has queued, and what it has sent on this connection.
    let mut queued = BytesMut::new();
    let mut sent: u64 = 0;
    let mut buf = BytesMut::new();
    let mut host_step: u64 = 0;
    // The viewer's side: the step the next record must carry.
    let mut next: Option<u64> = None;
    let mut stopped = false;
    // The viewer's step the reader was told last (its heartbeats carry it).
    let mut told: u64 = 0;
    let check = |why: &str, sent: u64| {
        assert!(!why.is_empty(), "a refusal without a sentence");
        check_offset(why, sent);
    };
    for _ in 0..4_000 {
        while let Some(e) = r.poll_event() {
            assert!(!stopped, "an event after the reader stopped: {e:?}");
            match e {
                Event::Connect => {
                    queued.clear();
                    buf.clear();
                    sent = 0;
                    next = None;
                }
                Event::Done => stopped = true,
                Event::Deliver(a) => match a {
                    Arrival::Attached { world, .. } | Arrival::Resync(world) => {
                        next = Some(world.step)
                    }
                    Arrival::Record(rec) => {
                        assert_eq!(Some(rec.step), next, "a record out of step delivered");
                        next = Some(rec.step + 1);
                    }
                    Arrival::Records(run) => {
                        assert_eq!(Some(run.first_step()), next, "a run out of step");
                        next = Some(run.first_step() + run.count());
                    }
                    Arrival::Lost { why, .. } => check(&why, sent),
                    _ => {}
                },
                _ => {}
            }
        }
        while let Some(m) = r.poll_transmit() {
            if let ToHost::Heartbeat { viewer_step } = m {
                assert_eq!(
                    viewer_step, told,
                    "a heartbeat that does not carry the viewer step the reader was told"
                );
            }
        }
        if let Some(t) = r.poll_timeout() {
            assert!(!stopped, "a timer after the reader stopped");
            let _ = t;
        }
        let Some((&op, tail)) = rest.split_first() else {
            return;
        };
        rest = tail;
        let arg = op >> 4;
        let mut put = |m: ToViewer| {
            let _ = HostCodec::new("host").encode(&m, &mut queued);
        };
        match op % 14 {
            // A host message queued.
            0 => put(ToViewer::Welcome(Welcome {
                version: if arg == 15 { VERSION + 1 } else { VERSION },
                role: PeerRole::Host as u8,
                rate: 60,
                heartbeat_ms: 1000,
                ring: 8,
                queue: 8,
            })),
            1 => {
                host_step = u64::from(arg) * 10;
                let kind = if arg & 1 == 0 {
                    SnapshotKind::Attach
                } else {
                    SnapshotKind::Resync
                };
                let seed = if arg == 13 { 2 } else { 1 };
                put(ToViewer::Snapshot {
                    kind,
                    world: world(seed, host_step),
                })
            }
            2 | 3 => {
                let step = if arg == 15 { host_step + 2 } else { host_step };
                host_step = step + 1;
                put(ToViewer::Record(Record {
                    step,
                    hash: step,
                    input: bytes::Bytes::new(),
                }))
            }
            4 => put(ToViewer::Heartbeat {
                host_step: host_step + u64::from(arg),
            }),
            5 => put(ToViewer::End(End {
                reason: EndReason::ALL[usize::from(arg) % EndReason::ALL.len()],
                text: "the end".into(),
                host_step,
            })),
            6 => put(ToViewer::DriftReply(DriftReply {
                step: host_step,
                status: DriftStatus::TooOld,
                world: None,
                stages: None,
            })),
            // Bytes delivered: the host's queued ones, or the fuzzer's own.
            7 | 8 => {
                let n = (1 + usize::from(arg)).min(queued.len());
                let bytes = queued.split_to(n);
                sent += bytes.len() as u64;
                buf.extend_from_slice(&bytes);
                while r.handle_data(now, &mut buf, false) {}
            }
            9 => {
                let n = (1 + usize::from(arg)).min(rest.len());
                let (bytes, tail) = rest.split_at(n);
                rest = tail;
                sent += bytes.len() as u64;
                buf.extend_from_slice(bytes);
                r.handle_received(sent);
                while r.handle_data(now, &mut buf, false) {}
            }
            // Time: late, a jump, early.
            10 => {
                now += u64::from(arg) * 1_300;
                r.handle_timeout(now);
            }
            11 => {
                if arg == 0 {
                    now = now.saturating_add(1 << 40);
                }
                r.handle_timeout(now);
            }
            // The connection's life.
            12 => match arg % 8 {
                0 | 1 => r.handle_connected(now),
                2 => r.handle_connect_failed(now, "connection refused".into()),
                3 => r.handle_tls_failed(now, "the TLS handshake failed".into()),
                4 => r.handle_read_failed(now, "reset by peer".into()),
                5 => r.handle_write_failed(now, "broken pipe".into()),
                // The host closes: after the whole frames, a stream closed between frames
                // or inside one is a lost connection, which `--reconnect` rides out.
                6 => {
                    while r.handle_data(now, &mut buf, false) {}
                    if r.is_streaming() {
                        let left = buf.len();
                        r.handle_data(now, &mut buf, true);
                        assert_eq!(
                            r.is_done(),
                            cfg_reconnect.is_none(),
                            "a stream closed with {left} bytes of a frame left: stopped for good \
                             with --reconnect, or not stopped without"
                        );
                    }
                    while r.handle_data(now, &mut buf, true) {}
                }
                _ => r.handle_spool_full(now, "the spool is full".into()),
            },
            _ => match arg % 4 {
                0 => r.handle_spool_drained(now),
                1 => r.send(ostm_protocol::wire::ToHost::DriftRequest { step: host_step }),
                _ => {
                    told = if arg & 4 == 0 {
                        next.unwrap_or(0)
                    } else {
                        host_step
                    };
                    r.handle_viewer_step(told);
                }
            },
        }
    }
}

/// What the NATS reader handed over, as the viewer sees it, and the properties checked on
/// each event: records in step order, once each; a gap names its range (`steps A..B`, A the
/// viewer's step, B the gap's end) unless it is the spool's (its sentence names the bound);
/// a keyframe gap's world is at its end; nothing but the end follows a gap left open; the
/// end comes after the gap it leaves open; nothing follows the end, a refusal or the
/// silence; records waiting for a keyframe, and every step heard of past the viewer's, are
/// named as a gap before the silence.
struct NatsViewer {
    /// The step the next record must carry.
    next: u64,
    /// The reader said records past `next` came: it waits for a keyframe.
    waiting: bool,
    /// The spool refused what was handed over; no keyframe closed it yet.
    spooling: bool,
    /// A gap left open (no keyframe): its end.
    open: Option<u64>,
    stopped: bool,
    /// What the reader handed over so far, counted.
    handed: u64,
    /// The stream's last sequence the reader was told at or below its own: the next
    /// message, if at it, is read again, and heard only if it hands something over.
    reread: Option<u64>,
}

/// The spool's sentence in the `nats_reader` target.
const SPOOL_FULL: &str = "the spool is full";

impl NatsViewer {
    fn drain(&mut self, r: &mut ostm_protocol::reader::nats::Reader) -> Vec<u64> {
        use ostm_protocol::reader::nats::Event;
        use ostm_protocol::reader::Arrival;
        // The sequences the reader asks to read on from.
        let mut resumes = Vec::new();
        while let Some(e) = r.poll_event() {
            assert!(!self.stopped, "an event after the reader stopped: {e:?}");
            if matches!(e, Event::Deliver(_)) {
                self.handed += 1;
            }
            let next = self.next;
            match e {
                Event::Deliver(Arrival::Record(rec)) => {
                    assert!(self.open.is_none(), "a record after a gap left open");
                    assert_eq!(rec.step, next, "a record out of step delivered");
                    self.next += 1;
                    self.waiting = false;
                }
                Event::Deliver(Arrival::Gap { to, world, why }) => {
                    assert!(self.open.is_none(), "a gap after a gap left open");
                    assert!(
                        to >= next,
                        "a gap to {to} behind the viewer's step {next}: {why}"
                    );
                    let spool = why.starts_with(SPOOL_FULL);
                    assert!(
                        spool || why.contains(&format!("steps {next}..{to} ")),
                        "a gap that does not name its range {next}..{to}: {why}"
                    );
                    match world {
                        Some(w) => {
                            assert_eq!(w.step, to, "a gap closed by a keyframe of another step");
                            assert!(
                                !spool || why.contains(&format!("at step {to}")),
                                "the spool's gap does not name the keyframe's step {to}: {why}"
                            );
                            self.next = to;
                            self.waiting = false;
                            self.spooling = false;
                        }
                        None => self.open = Some(to),
                    }
                }
                Event::Deliver(Arrival::Missing { why }) => {
                    assert!(
                        why.starts_with(SPOOL_FULL) || why.contains(&format!("steps from {next} ")),
                        "missing records that do not start at the viewer's step {next}: {why}"
                    );
                    self.waiting = true;
                }
                Event::Deliver(Arrival::End(end)) => {
                    if end.host_step > next {
                        assert!(
                            self.open.is_some_and(|to| to >= end.host_step),
                            "the end at step {} handed over before the gap from {next} it leaves open",
                            end.host_step
                        );
                    }
                    self.stopped = true;
                }
                Event::Deliver(other) => panic!("a NATS reader handed over {other:?}"),
                Event::Resume { from_seq } => resumes.push(from_seq),
                Event::Silent => {
                    assert!(
                        !self.waiting || self.open.is_some(),
                        "the session lost with records past step {next} heard of and no gap named"
                    );
                    let heard = r.host_step();
                    assert!(
                        heard <= next || self.open.is_some_and(|to| to >= heard),
                        "the session lost at step {next} with steps to {heard} heard of and no gap named to it"
                    );
                    self.stopped = true;
                }
            }
        }
        resumes
    }
}

/// `nats_reader`: a simulated stream, one event a byte: a message the stream numbers next
/// on the session's records subject (1 to 4 records from the host's next step, a step
/// skipped or one repeated), its keyframes subject (this world or another, at the host's
/// step or up to 3 steps behind the records sent), its end subject, or the fuzzer's own bytes on any subject; a message the stream
/// holds delivered again; a message with no sequence, the stream's last again, `u64::MAX`
/// or 8 bytes of the input; the stream losing its tail (a cluster that lost acknowledged
/// messages: it numbers the next ones from there again); the clock moved on by up to 20 s
/// (late), by a jump of up to 2^63 ms, to a deadline or before it (early); the driver
/// waking; the spool full or drained; what the stream's information says when the reader
/// reads on (the truth, nothing, 0, `u64::MAX`, past the truth). On each `Resume` the
/// target reads on as the viewer does: it tells the reader the stream's last sequence and
/// delivers every message the stream holds from where the reader says. Whatever the order:
/// no panic; [`NatsViewer`]'s properties; a timer acts only at or after its deadline, and
/// always then: silence when nothing came for `SILENCE_MS`, else a read-on; a read-on told
/// the stream's last goes on from at most the stream's next sequence; after the reader was
/// told a last at or below the stream's own (and no tail was lost since) a message the
/// stream numbers next is taken, not skipped as a repeat; a refusal names an offset within
/// its payload; nothing after the end, a refusal or the silence.
pub fn nats_reader(data: &[u8]) {
    use ostm_protocol::reader::nats::{Reader, SILENCE_MS};
    use ostm_protocol::wire::nats::Session;
    use ostm_protocol::wire::{End, EndReason, HostCodec, Record, SnapshotKind, ToViewer};

    let world = small_world;
    let session = Session::new("demo").expect("a session name");
    let subjects = [
        session.records(),
        session.keyframes(),
        session.end(),
        "ostm.demo.other".to_string(),
    ];
    let mut now: u64 = 0;
    let mut r = Reader::new(
        "nats://127.0.0.1:4222/demo".into(),
        session.clone(),
        world(1, 10),
        5,
        now,
    );
    let mut v = NatsViewer {
        next: 10,
        waiting: false,
        spooling: false,
        open: None,
        stopped: false,
        handed: 0,
        reread: None,
    };
    let mut host_step: u64 = 10;
    // The stream: the messages it holds (sequence, subject, payload; its last 64) and its
    // last sequence.
    let mut stream: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    let mut stream_last: u64 = 5;
    // The reader's last sequence is at or below the stream's: so at the join; lost when the
    // stream loses its tail or a message comes past the stream's last; back when the
    // reader is told a last at or below the stream's.
    let mut in_step = true;
    // When the last message came.
    let mut heard: u64 = 0;
    // What the stream's information says when the reader reads on (op 14).
    let mut info: u8 = 0;
    let mut rest = data;
    let frames = |ms: &[ToViewer]| {
        let mut b = BytesMut::new();
        for m in ms {
            let _ = HostCodec::new("host").encode(m, &mut b);
        }
        b.to_vec()
    };
    // One message to the reader: the refusal's offset checked; `expect`, for a message the
    // stream numbered next, is the record or keyframe step it must hand over.
    let message = |r: &mut Reader,
                   v: &mut NatsViewer,
                   now: u64,
                   subject: &str,
                   seq: u64,
                   payload: &[u8],
                   expect: Option<u64>|
     -> bool {
        let live = !v.stopped && !v.spooling && v.open.is_none();
        let before = v.next;
        let reread = v.reread.take().is_some_and(|s| s == seq && seq != 0);
        let (handed, stopped) = (v.handed, v.stopped);
        match r.handle_message(now, subject, seq, payload) {
            Ok(_) => {}
            Err(e) => {
                assert!(
                    e.offset <= payload.len() as u64,
                    "offset {} past the {}-byte payload: {e}",
                    e.offset,
                    payload.len()
                );
                assert!(!e.to_string().is_empty());
                v.drain(r);
                v.stopped = true;
            }
        }
        v.drain(r);
        if let Some(step) = expect.filter(|_| live) {
            assert!(
                v.next > before || v.stopped,
                "the message at stream sequence {seq} (step {step}), numbered after the reader \
                 read on from the stream's last, was skipped as a repeat"
            );
        }
        // The stream's last message read again is heard only if it handed something over.
        !reread || v.handed != handed || v.stopped != stopped
    };
    for _ in 0..4_000 {
        if v.stopped {
            // Whatever the end, refusal or silence delivered before it is taken; then nothing.
            assert!(
                r.poll_event().is_none(),
                "an event after the reader stopped"
            );
            assert_eq!(r.poll_timeout(), None, "a timer after the reader stopped");
            r.handle_timeout(now.saturating_add(100_000));
            assert!(
                r.poll_event().is_none(),
                "an event after the reader stopped"
            );
            return;
        }
        let Some((&op, tail)) = rest.split_first() else {
            return;
        };
        rest = tail;
        let arg = op >> 4;
        // The time the timers are fired at, if they are.
        let mut fire: Option<u64> = None;
        match op % 16 {
            // A message the stream numbers next.
            0..=4 => {
                let (payload, leaf, expect) = match op % 16 {
                    0 | 1 => {
                        let from = match arg {
                            15 => host_step + 1,
                            14 => host_step.saturating_sub(1),
                            _ => host_step,
                        };
                        let n = 1 + u64::from(arg & 3);
                        host_step = from + n;
                        let ms: Vec<ToViewer> = (from..from + n)
                            .map(|step| {
                                ToViewer::Record(Record {
                                    step,
                                    hash: step,
                                    input: bytes::Bytes::new(),
                                })
                            })
                            .collect();
                        let covers = (from..from + n).contains(&v.next);
                        (frames(&ms), 0, covers.then_some(v.next))
                    }
                    2 => {
                        let ours = arg != 15;
                        // At the host's step, or (arg 12 to 14) behind records already sent.
                        let step = host_step.saturating_sub(u64::from(arg.saturating_sub(11) % 4));
                        let p = frames(&[ToViewer::Snapshot {
                            kind: SnapshotKind::Attach,
                            world: world(if ours { 1 } else { 2 }, step),
                        }]);
                        (p, 1, (ours && step > v.next).then_some(step))
                    }
                    3 => (
                        frames(&[ToViewer::End(End {
                            reason: EndReason::ALL[usize::from(arg) % EndReason::ALL.len()],
                            text: "the end".into(),
                            host_step,
                        })]),
                        2,
                        None,
                    ),
                    _ => {
                        let n = (1 + usize::from(arg) * 2).min(rest.len());
                        let (bytes, tail) = rest.split_at(n);
                        rest = tail;
                        (bytes.to_vec(), usize::from(arg) % 4, None)
                    }
                };
                stream_last += 1;
                stream.push((stream_last, leaf, payload));
                if stream.len() > 64 {
                    stream.remove(0);
                }
                let (seq, leaf, payload) = stream.last().expect("a message just added");
                let expect = expect.filter(|_| in_step);
                if message(&mut r, &mut v, now, &subjects[*leaf], *seq, payload, expect) {
                    heard = now;
                }
            }
            // A message the stream holds, delivered again (a new consumer's).
            5 => {
                if let Some(i) = stream.len().checked_sub(1 + usize::from(arg)) {
                    let (seq, leaf, payload) = &stream[i];
                    if message(&mut r, &mut v, now, &subjects[*leaf], *seq, payload, None) {
                        heard = now;
                    }
                }
            }
            // A record at a sequence of no stream message: none, the stream's last again,
            // the largest, the input's.
            6 => {
                let seq = match arg % 4 {
                    0 => 0,
                    1 => stream_last,
                    2 => u64::MAX,
                    _ => {
                        let n = rest.len().min(8);
                        let (bytes, tail) = rest.split_at(n);
                        rest = tail;
                        let mut b = [0u8; 8];
                        b[..n].copy_from_slice(bytes);
                        u64::from_le_bytes(b)
                    }
                };
                in_step &= seq <= stream_last;
                let step = if arg >= 8 { host_step } else { v.next };
                let payload = frames(&[ToViewer::Record(Record {
                    step,
                    hash: step,
                    input: bytes::Bytes::new(),
                })]);
                host_step = host_step.max(step + 1);
                if message(&mut r, &mut v, now, &subjects[0], seq, &payload, None) {
                    heard = now;
                }
            }
            // The stream loses its tail: it numbers the next messages from there again.
            7 => {
                stream_last = stream_last.saturating_sub(1 + u64::from(arg));
                stream.retain(|(seq, ..)| *seq <= stream_last);
                in_step = false;
            }
            // Time: late, a jump, early, on time.
            8 => {
                now = now.saturating_add(u64::from(arg) * 1_300);
                fire = Some(now);
            }
            9 => {
                now = now.saturating_add(1u64 << (20 + 3 * u32::from(arg)).min(63));
                fire = Some(now);
            }
            10 | 11 => {
                if let Some(due) = r.poll_timeout() {
                    let at = if op % 16 == 10 {
                        due.saturating_sub(1 + u64::from(arg) * 250)
                    } else {
                        due
                    };
                    now = now.max(at);
                }
                fire = Some(now);
            }
            // The driver did something else (a drift request, a read error).
            12 => {
                r.handle_wake(now);
                if arg & 1 == 1 {
                    fire = Some(now);
                }
            }
            // The spool refused what was handed over (`--spool-max`), or has room again.
            13 => {
                if arg & 1 == 0 {
                    r.handle_spool_full(SPOOL_FULL.into());
                    v.spooling = true;
                } else {
                    r.handle_spool_drained();
                }
                v.drain(&mut r);
            }
            // What the stream's information will say.
            14 => info = arg,
            _ => fire = Some(now),
        }
        let Some(at) = fire else {
            continue;
        };
        let due = r.poll_timeout();
        r.handle_timeout(at);
        let before = v.stopped;
        let resumes = v.drain(&mut r);
        let acted = !resumes.is_empty() || v.stopped != before;
        if acted {
            assert!(
                due.is_some_and(|d| at >= d),
                "a timer acted at {at}, before its deadline {due:?}"
            );
            let quiet = at.saturating_sub(heard);
            assert_eq!(
                v.stopped,
                quiet >= SILENCE_MS,
                "silent after {quiet} ms without a message ({resumes:?})"
            );
        } else {
            assert!(
                due.is_none_or(|d| at < d),
                "a timer due at {due:?} did nothing at {at}"
            );
        }
        // The driver reads on with a new consumer, as the viewer does.
        for from_seq in resumes {
            let last_before = r.last_seq();
            // The last the reader is told, if any: at or below its own (not 0), the
            // message there is read again.
            let told = match info % 5 {
                1 => None,
                0 => Some(stream_last),
                2 => Some(0),
                3 => Some(u64::MAX),
                _ => Some(stream_last + 1 + u64::from(info)),
            };
            if let Some(l) = told {
                v.reread = (l != 0 && l <= last_before).then_some(l);
            }
            let from = match info % 5 {
                // The stream's information did not come: from where the reader says.
                1 => from_seq,
                0 => {
                    let from = r.handle_stream_last(stream_last);
                    assert!(
                        from <= stream_last + 1,
                        "read on from {from}, past the stream's next sequence {}",
                        stream_last + 1
                    );
                    in_step = true;
                    from
                }
                2 => {
                    in_step = true;
                    r.handle_stream_last(0)
                }
                3 => r.handle_stream_last(u64::MAX),
                _ => r.handle_stream_last(stream_last + 1 + u64::from(info)),
            };
            // Every message the stream holds from there.
            for (seq, leaf, payload) in &stream {
                if *seq >= from
                    && !v.stopped
                    && message(&mut r, &mut v, now, &subjects[*leaf], *seq, payload, None)
                {
                    heard = now;
                }
            }
        }
    }
}

// The host's NATS publisher

/// `publisher`: byte 0 sets the feed's bound (1 to 16 items, or up to 481), byte 1 the
/// keyframe cadence (1 to 100 000 steps) and the acknowledgements awaited at most (1 to
/// 8); then one event a byte:
/// steps taken (one with a record of 0, 300 or 30 000 input bytes, or up to 311 at once),
/// messages taken from the machine, an acknowledgement or a failure for a message sent,
/// for one already answered or for a token never given, the clock moved on by up to 20 s
/// (late) or not at all (early), the connection lost, the end, the feed closed. Whatever
/// the order: no panic; the feed, the messages awaited and each message stay within their
/// bounds; a message id is never given to two different messages; records are published
/// once each, in step order, each message of steps that follow one another, and after a
/// step dropped, a failed message or a lost connection no record of a later step goes out
/// before the keyframe that closes the gap; the end is last; published + dropped + failed
/// never exceeds the steps taken, and equals them once everything is answered.
pub fn publisher(data: &[u8]) {
    use bytes::Bytes;
    use ostm_protocol::serve::publish::ACK_TIMEOUT_MS;
    use ostm_protocol::serve::publish::{Config, Event, Kind, Publish, Publisher};
    use ostm_protocol::wire::nats::{frames, keyframe, Session};
    use ostm_protocol::wire::{End, EndReason, Record};
    use std::collections::BTreeMap;

    let [a, b, ref tail @ ..] = *data else {
        return;
    };
    let mut rest = tail;
    // The feed's bound: 1 to 16 items, or 1 to 481 (room for a batch's 256 records).
    let feed = 1 + usize::from(a & 15) * if a & 16 == 0 { 1 } else { 32 };
    let every = [1, 2, 3, 5, 8, 60, 256, 100_000][usize::from((b >> 3) & 7)];
    let cfg = Config {
        feed,
        in_flight: 1 + usize::from(b & 7),
        ..Config::new(
            Session::new("demo").expect("a session name"),
            "R1".into(),
            every,
            60,
        )
    };
    let (feed, in_flight) = (cfg.feed, cfg.in_flight);
    let mut p = Publisher::new(cfg);
    // Inputs of 0, 300 and 30 000 bytes of valid ops (a viewer decodes them).
    let inputs = [0, 60, 6_000].map(|n| Bytes::from(encode_input(&vec![Op::Gravity { g: 0 }; n])));
    let mut world = small_world(1, 7);
    let mut now: u64 = 0;
    let mut sent: Vec<u64> = Vec::new();
    let mut ids: BTreeMap<String, (Kind, u64, Bytes)> = BTreeMap::new();
    // What went out: the step the next records message starts at or after, the last
    // keyframe's step, whether the end went out.
    let mut next_record: u64 = 7;
    let mut ended_out = false;
    // A keyframe at or after this step is owed before any record of a step at or past it.
    let mut owed: Option<u64> = None;
    let mut ended = false;
    let owe = |owed: &mut Option<u64>, at: u64| *owed = Some(owed.map_or(at, |o| o.min(at)));
    let check = |p: &Publisher| {
        let c = p.counts();
        assert!(
            c.published + c.dropped + c.failed <= c.steps,
            "more steps counted than taken: {c:?}"
        );
        assert!(p.in_flight() <= in_flight, "more awaited than the bound");
        assert!(p.queued() <= feed, "a feed past its bound");
    };
    let take = |m: Publish,
                ids: &mut BTreeMap<String, (Kind, u64, Bytes)>,
                next_record: &mut u64,
                ended_out: &mut bool,
                owed: &mut Option<u64>| {
        assert!(
            !*ended_out || m.kind == Kind::End,
            "a message after the end: {m:?}"
        );
        let content = (m.kind, m.step, m.payload.clone());
        if let Some(before) = ids.insert(m.id.clone(), content.clone()) {
            assert_eq!(before, content, "the id {} given to two messages", m.id);
        }
        match m.kind {
            Kind::Records => {
                let steps: Vec<u64> = frames("rec", &m.payload)
                    .expect("a records payload")
                    .map(|f| match f.expect("a record frame").1 {
                        ToViewer::Record(r) => r.step,
                        other => panic!("not a record in a rec message: {other:?}"),
                    })
                    .collect();
                let want: Vec<u64> = (m.step..m.step + m.steps).collect();
                assert_eq!(steps, want, "a records message not of its steps");
                assert!(m.step >= *next_record, "a record again or out of order");
                let last = m.step + m.steps - 1;
                if let Some(o) = *owed {
                    assert!(
                        last < o,
                        "record {last} went out before the keyframe owed from step {o}"
                    );
                }
                *next_record = last + 1;
            }
            Kind::Keyframe => {
                let w = keyframe("key", &m.payload).expect("a keyframe payload");
                assert_eq!(w.step, m.step);
                assert!(m.step >= *next_record, "a keyframe behind the records");
                if owed.is_some_and(|o| m.step >= o) {
                    *owed = None;
                }
                *next_record = m.step;
            }
            Kind::End => *ended_out = true,
        }
        m.token
    };
    for _ in 0..2_000 {
        check(&p);
        while let Some(e) = p.poll_event() {
            if let Event::Failed { .. } = e {
                owe(&mut owed, world.step);
            }
        }
        let Some((&op, tail)) = rest.split_first() else {
            break;
        };
        rest = tail;
        let arg = op >> 3;
        match op % 8 {
            0 | 1 => {
                // Many steps at once with empty inputs; one with any.
                let (n, input) = if op % 8 == 1 {
                    (1 + u64::from(arg) * 10, &inputs[0])
                } else {
                    (1, &inputs[usize::from(arg % 3)])
                };
                for _ in 0..n {
                    let step = world.step;
                    let dropped = p.counts().dropped;
                    p.handle_before_step(&world);
                    world.step += 1;
                    let frame = HostCodec::encode_frame(&ToViewer::Record(Record {
                        step,
                        hash: step,
                        input: input.clone(),
                    }))
                    .expect("a record frame");
                    p.handle_record(step, frame.0);
                    if p.counts().dropped > dropped && !ended {
                        owe(&mut owed, step + 1);
                    }
                }
            }
            2 => {
                for _ in 0..=arg {
                    match p.poll_transmit(now) {
                        Some(m) => {
                            let t = take(m, &mut ids, &mut next_record, &mut ended_out, &mut owed);
                            sent.push(t);
                        }
                        None => break,
                    }
                }
            }
            3 | 4 => {
                let token = match arg {
                    31 => 0,
                    30 => u64::MAX,
                    _ if sent.is_empty() => 1,
                    _ => sent[usize::from(arg) % sent.len()],
                };
                if op % 8 == 3 {
                    p.handle_acked(token);
                } else {
                    p.handle_ack_failed(token, "refused".into());
                }
            }
            5 => {
                now += u64::from(arg) * 700;
                p.handle_timeout(now);
            }
            6 => {
                p.handle_disconnected();
                owe(&mut owed, world.step);
            }
            _ => {
                if arg & 1 == 0 {
                    ended |= p.handle_end(End {
                        reason: EndReason::Finished,
                        text: "the end".into(),
                        host_step: world.step,
                    });
                } else {
                    p.handle_feed_closed();
                    ended = true;
                }
            }
        }
    }
    // Everything out, every acknowledgement timed out: each step counted once.
    p.handle_feed_closed();
    loop {
        while let Some(m) = p.poll_transmit(now) {
            take(m, &mut ids, &mut next_record, &mut ended_out, &mut owed);
        }
        now += ACK_TIMEOUT_MS;
        p.handle_timeout(now);
        if p.queued() == 0 && p.in_flight() == 0 && !p.is_repeating_end() {
            break;
        }
    }
    check(&p);
    assert!(p.is_done(), "not done with everything answered");
    let c = p.counts();
    assert_eq!(c.published + c.dropped + c.failed, c.steps, "{c:?}");
}
