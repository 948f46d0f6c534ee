//! The malformed-file corpus: one hand-built bad file per rule of the `.ostm` reader.
//!
//! Each case starts from a small valid file whose layout is worked out by hand below,
//! breaks exactly one thing, and names the byte offset the reader must report and a
//! fragment of its message. The same cases are committed as files under
//! `testdata/malformed/` with `manifest.json`, so tools outside this workspace can use
//! them; regenerate with
//! `OSTM_WRITE_MALFORMED=1 cargo test -p ostm-protocol --test malformed`.

use ostm_protocol::op::Op;
use ostm_protocol::world::{Dims, Setup, World};
use ostm_protocol::Replay;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;

// ---------------------------------------------------------------------------------------
// Largest single allocation, per thread: proves a huge declared length is refused before
// anything is allocated for it.

struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(layout.size())));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(new_size)));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// The largest single allocation `f` makes on this thread.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|m| m.set(0));
    f();
    LARGEST.with(|m| m.get())
}

// ---------------------------------------------------------------------------------------
// The valid base files.

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Base A, 168 bytes: 3D, 2 bodies, seed 1, every flag (0x0007); from
/// [`ostm_protocol::testdata::linked_start`].
///
/// ```text
///   0  magic "OSTM"           4  version 1            6  flags 0x0007
///   8  setup length 10       12  dims 3  13  bodies 2  14..18 seed 1
///  18  link role 1           19  link body 1          20..22 transfer step 5
///  22  step count 2
///  26  start snapshot length 76 = 12 + 32 x 2
///  30  snapshot: 30 step u64, 38 gravity i32, body 0 at 42..74, body 1 at 74..106
/// 106  hash rows 3 x u64 (106..130)
/// 130  step 0 input length 16; 132 impulse (14 bytes), 146 remove (2 bytes)
/// 148  step 1 input length 18; 150 gravity (5 bytes), 155 spawn (13 bytes)
/// 168  end
/// ```
fn base_a() -> Vec<u8> {
    let mut r = ostm_protocol::testdata::linked_start();
    r.inputs.push_ops(&[
        Op::Impulse {
            body: 0,
            d: [1, 2, 3],
        },
        Op::Remove { body: 1 },
    ]);
    r.inputs
        .push_ops(&[Op::Gravity { g: -5 }, Op::Spawn { pos: [10, 20, 30] }]);
    r.compute_hashes();
    r.to_bytes()
}

/// Base B, 166 bytes: 2D, 3 bodies, seed 9, hash rows and a start snapshot (0x0003).
///
/// ```text
///   0  magic   4  version   6  flags 0x0003   8  setup length 6   12..18 setup
///  18  step count 1
///  22  start snapshot length 108 = 12 + 32 x 3
///  26  snapshot: 26 step, 34 gravity, bodies at 38, 70, 102 (each: alive +0, still +4,
///      position x +8, y +12, z +16, velocity x +20, y +24, z +28)
/// 134  hash rows 2 x u64 (134..150)
/// 150  step 0 input length 14; 152 teleport (14 bytes)
/// 166  end
/// ```
fn base_b() -> Vec<u8> {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 3,
        seed: 9,
    };
    let mut start = World::new(setup, None);
    start.step(&[]);
    let mut r = Replay::new(setup, None);
    r.start = Some(start);
    r.inputs.push_ops(&[Op::Teleport {
        body: 2,
        pos: [100, 200, 0],
    }]);
    r.compute_hashes();
    r.to_bytes()
}

/// Base C, 22 bytes: 2D, 1 body, seed 0, no flags, no steps.
///
/// ```text
///   0  magic   4  version   6  flags 0   8  setup length 6   12..18 setup   18 step count 0
/// ```
fn base_c() -> Vec<u8> {
    let setup = Setup {
        dims: Dims::Two,
        bodies: 1,
        seed: 0,
    };
    Replay::new(setup, None).to_bytes()
}

// ---------------------------------------------------------------------------------------
// The cases.

/// One bad file: what it breaks, its bytes, and what the reader must say.
struct Case {
    /// File name under `testdata/malformed/`.
    file: &'static str,
    /// The rule it breaks.
    rule: &'static str,
    bytes: Vec<u8>,
    /// The byte offset the error must report (worked out from the layouts above).
    offset: u64,
    /// A fragment the error message must contain.
    message: &'static str,
}

fn with(base: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = base.to_vec();
    f(&mut b);
    b
}

fn cases() -> Vec<Case> {
    let a = base_a();
    let b = base_b();
    let c = base_c();
    let case = |file, rule, bytes, offset, message| Case {
        file,
        rule,
        bytes,
        offset,
        message,
    };
    vec![
        // Header.
        case(
            "empty.ostm",
            "an empty file has no magic",
            vec![],
            0,
            "expected 4-byte magic, found 0 bytes",
        ),
        case(
            "truncated-magic.ostm",
            "file ends inside the magic",
            a[..3].to_vec(),
            0,
            "expected 4-byte magic, found 3 bytes",
        ),
        case(
            "bad-magic.ostm",
            "magic must be \"OSTM\"",
            with(&a, |b| b[3] = b'X'),
            0,
            "expected magic \"OSTM\"",
        ),
        case(
            "truncated-version.ostm",
            "file ends inside the version",
            a[..5].to_vec(),
            4,
            "expected 2-byte version, found 1 bytes",
        ),
        case(
            "version-0.ostm",
            "version must be 1",
            with(&a, |b| put_u16(b, 4, 0)),
            4,
            "expected version 1, found 0",
        ),
        case(
            "version-2.ostm",
            "version must be 1",
            with(&a, |b| put_u16(b, 4, 2)),
            4,
            "expected version 1, found 2",
        ),
        case(
            "truncated-flags.ostm",
            "file ends inside the flags",
            a[..7].to_vec(),
            6,
            "expected 2-byte flags, found 1 bytes",
        ),
        case(
            "reserved-flag-bit-3.ostm",
            "flag bits 3..15 must be 0",
            with(&a, |b| put_u16(b, 6, 0x000f)),
            6,
            "expected flag bits 3..15 to be 0, found flags 0x000f",
        ),
        case(
            "reserved-flag-bit-15.ostm",
            "flag bits 3..15 must be 0",
            with(&a, |b| put_u16(b, 6, 0x8007)),
            6,
            "expected flag bits 3..15 to be 0, found flags 0x8007",
        ),
        case(
            "truncated-setup-length.ostm",
            "file ends inside the setup length",
            a[..10].to_vec(),
            8,
            "expected 4-byte setup length, found 2 bytes",
        ),
        case(
            "setup-length-6-with-link.ostm",
            "setup length must be 10 with flag bit 2",
            with(&a, |b| put_u32(b, 8, 6)),
            8,
            "expected setup length 10 (flags 0x0007), found 6",
        ),
        case(
            "setup-length-10-without-link.ostm",
            "setup length must be 6 without flag bit 2",
            with(&c, |b| put_u32(b, 8, 10)),
            8,
            "expected setup length 6 (flags 0x0000), found 10",
        ),
        case(
            "setup-length-7.ostm",
            "setup length must be 6 or 10",
            with(&c, |b| put_u32(b, 8, 7)),
            8,
            "expected setup length 6 (flags 0x0000), found 7",
        ),
        case(
            "truncated-setup.ostm",
            "file ends inside the setup",
            a[..15].to_vec(),
            12,
            "expected 6-byte setup, found 3 bytes",
        ),
        case(
            "dims-1.ostm",
            "dimensions must be 2 or 3",
            with(&a, |b| b[12] = 1),
            12,
            "expected dimensions 2 or 3, found 1",
        ),
        case(
            "dims-4.ostm",
            "dimensions must be 2 or 3",
            with(&a, |b| b[12] = 4),
            12,
            "expected dimensions 2 or 3, found 4",
        ),
        case(
            "body-count-0.ostm",
            "body count must be 1..=64",
            with(&a, |b| b[13] = 0),
            13,
            "expected body count 1..=64, found 0",
        ),
        case(
            "body-count-65.ostm",
            "body count must be 1..=64",
            with(&a, |b| b[13] = 65),
            13,
            "expected body count 1..=64, found 65",
        ),
        // Link block.
        case(
            "truncated-link-role.ostm",
            "file ends before the link block",
            a[..18].to_vec(),
            18,
            "expected 1-byte link role, found 0 bytes",
        ),
        case(
            "truncated-link-body.ostm",
            "file ends inside the link block",
            a[..19].to_vec(),
            19,
            "expected 1-byte link body index, found 0 bytes",
        ),
        case(
            "truncated-link-step.ostm",
            "file ends inside the link transfer step",
            a[..21].to_vec(),
            20,
            "expected 2-byte link transfer step, found 1 bytes",
        ),
        case(
            "link-role-0.ostm",
            "link role must be 1, 2 or 3",
            with(&a, |b| b[18] = 0),
            18,
            "expected link role 1, 2 or 3, found 0",
        ),
        case(
            "link-role-4.ostm",
            "link role must be 1, 2 or 3",
            with(&a, |b| b[18] = 4),
            18,
            "expected link role 1, 2 or 3, found 4",
        ),
        case(
            "link-body-out-of-range.ostm",
            "link body index must be below the body count (roles 1 and 2)",
            with(&a, |b| b[19] = 2),
            19,
            "expected link body index below the body count 2, found 2",
        ),
        // Step count.
        case(
            "truncated-step-count.ostm",
            "file ends inside the step count",
            a[..24].to_vec(),
            22,
            "expected 4-byte step count, found 2 bytes",
        ),
        case(
            "step-count-over-max.ostm",
            "step count must be at most 16 777 216",
            with(&a, |b| put_u32(b, 22, 16_777_217)),
            22,
            "expected step count at most 16777216, found 16777217",
        ),
        // Start snapshot.
        case(
            "truncated-snapshot-length.ostm",
            "file ends inside the start snapshot length",
            a[..28].to_vec(),
            26,
            "expected 4-byte start snapshot length, found 2 bytes",
        ),
        case(
            "snapshot-length-75.ostm",
            "snapshot length must be 12 + 32 x n",
            with(&a, |b| put_u32(b, 26, 75)),
            26,
            "expected start snapshot length 12 + 32 x (1..=64) (44..=2060), found 75",
        ),
        case(
            "snapshot-length-12.ostm",
            "a snapshot holds at least one body",
            with(&a, |b| put_u32(b, 26, 12)),
            26,
            "expected start snapshot length 12 + 32 x (1..=64) (44..=2060), found 12",
        ),
        case(
            "snapshot-length-over-max.ostm",
            "a snapshot holds at most 64 bodies",
            with(&a, |b| put_u32(b, 26, 12 + 32 * 65)),
            26,
            "expected start snapshot length 12 + 32 x (1..=64) (44..=2060), found 2092",
        ),
        case(
            "truncated-snapshot.ostm",
            "file ends inside the start snapshot",
            a[..60].to_vec(),
            30,
            "expected 76-byte start snapshot, found 30 bytes",
        ),
        case(
            "snapshot-alive-2.ostm",
            "a snapshot body's alive word must be 0 or 1",
            with(&a, |b| put_u32(b, 42, 2)),
            42,
            "body 0: expected alive 0 or 1, found 2",
        ),
        case(
            "snapshot-removed-body-not-zero.ostm",
            "a removed snapshot body must be all zeros",
            with(&a, |b| put_u32(b, 74, 0)),
            74,
            "body 1: a removed body must be all zeros",
        ),
        case(
            "snapshot-2d-position-z.ostm",
            "a 2D snapshot body has position z = 0",
            with(&b, |b| put_u32(b, 86, 5)),
            86,
            "body 1: a 2D body must have z = 0",
        ),
        case(
            "snapshot-2d-velocity-z.ostm",
            "a 2D snapshot body has velocity z = 0",
            with(&b, |b| put_u32(b, 98, u32::MAX)),
            98,
            "body 1: a 2D body must have z = 0",
        ),
        // Hash rows.
        case(
            "truncated-hash-rows.ostm",
            "file ends inside the hash rows",
            a[..120].to_vec(),
            106,
            "expected 24-byte hash rows (3 x u64), found 14 bytes",
        ),
        case(
            "huge-hash-row-count.ostm",
            "a 40-byte file claiming 16 777 216 steps of hash rows is refused before allocating",
            with(&c, |b| {
                put_u16(b, 6, 0x0001);
                put_u32(b, 18, 16_777_216);
                b.resize(40, 0);
            }),
            22,
            "expected 134217736-byte hash rows (16777217 x u64), found 18 bytes",
        ),
        // Step inputs.
        case(
            "step-count-beyond-bytes.ostm",
            "the bytes left must hold 2 bytes per declared step",
            with(&c, |b| put_u32(b, 18, 16_777_216)),
            22,
            "expected 16777216 step inputs (at least 33554432 bytes), found 0 bytes",
        ),
        case(
            "truncated-before-inputs.ostm",
            "file ends right after the hash rows",
            a[..131].to_vec(),
            130,
            "expected 2 step inputs (at least 4 bytes), found 1 bytes",
        ),
        case(
            "truncated-input-length.ostm",
            "file ends inside a step's input length",
            a[..149].to_vec(),
            148,
            "expected 2-byte input length of step 1, found 1 bytes",
        ),
        case(
            "truncated-input.ostm",
            "file ends inside a step's input",
            a[..160].to_vec(),
            150,
            "expected 18-byte input of step 1, found 10 bytes",
        ),
        case(
            "unknown-opcode-0.ostm",
            "opcodes are 1..=5",
            with(&a, |b| b[132] = 0),
            132,
            "expected opcode 1..=5, found 0",
        ),
        case(
            "unknown-opcode-6.ostm",
            "opcodes are 1..=5",
            with(&a, |b| b[150] = 6),
            150,
            "expected opcode 1..=5, found 6",
        ),
        case(
            "op-cut-off-spawn.ostm",
            "an op must end inside its step's input",
            with(&a, |b| {
                put_u16(b, 148, 17);
                b.truncate(167);
            }),
            155,
            "op 5 cut off inside its step input: expected 4-byte i32 z, found 3 bytes",
        ),
        case(
            "op-cut-off-remove.ostm",
            "an op must end inside its step's input",
            with(&a, |b| {
                put_u16(b, 130, 15);
                b.remove(147);
            }),
            146,
            "op 3 cut off inside its step input: expected 1-byte body index, found 0 bytes",
        ),
        case(
            "trailing-byte.ostm",
            "no bytes may follow the last step",
            with(&a, |b| b.push(0)),
            168,
            "expected end of replay, found 1 trailing bytes",
        ),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/malformed")
}

/// The manifest's text for the cases, as committed.
fn manifest(cases: &[Case]) -> String {
    let list: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "file": c.file,
                "rule": c.rule,
                "offset": c.offset,
                "message": c.message,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "description": "Malformed .ostm files, one per rule of the reader. Each must be refused with an error at exactly `offset` whose message contains `message`. See docs/replay-format.md.",
        "cases": list,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn base_files_are_valid_and_laid_out_as_drawn() {
    let a = base_a();
    assert_eq!(a.len(), 168);
    let r = Replay::from_bytes("a", &a).expect("base A reads");
    assert_eq!(r.flags(), 0x0007);
    assert_eq!(&a[22..26], &2u32.to_le_bytes(), "step count at 22");
    assert_eq!(&a[26..30], &76u32.to_le_bytes(), "snapshot length at 26");
    assert_eq!(&a[42..46], &1u32.to_le_bytes(), "body 0 alive at 42");
    assert_eq!(&a[74..78], &1u32.to_le_bytes(), "body 1 alive at 74");
    assert_eq!(&a[130..132], &16u16.to_le_bytes(), "step 0 length at 130");
    assert_eq!((a[132], a[146]), (1, 3), "impulse at 132, remove at 146");
    assert_eq!(&a[148..150], &18u16.to_le_bytes(), "step 1 length at 148");
    assert_eq!((a[150], a[155]), (4, 5), "gravity at 150, spawn at 155");
    // Body 1 is alive and not all zeros apart from `alive`, so clearing `alive` breaks a rule.
    assert_ne!(&a[78..106], &[0u8; 28][..]);

    let b = base_b();
    assert_eq!(b.len(), 166);
    Replay::from_bytes("b", &b).expect("base B reads");
    assert_eq!(&b[22..26], &108u32.to_le_bytes(), "snapshot length at 22");
    assert_eq!(&b[70..74], &1u32.to_le_bytes(), "body 1 alive at 70");
    assert_eq!(&b[86..90], &[0; 4], "body 1 position z at 86");
    assert_eq!(&b[98..102], &[0; 4], "body 1 velocity z at 98");

    let c = base_c();
    assert_eq!(c.len(), 22);
    Replay::from_bytes("c", &c).expect("base C reads");
}

#[test]
fn every_case_is_refused_at_its_offset() {
    let cases = cases();
    let mut names: Vec<_> = cases.iter().map(|c| c.file).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "file names are unique");
    for c in &cases {
        match Replay::from_bytes(c.file, &c.bytes) {
            Ok(_) => panic!("{}: accepted, but breaks: {}", c.file, c.rule),
            Err(e) => {
                assert_eq!(e.input, c.file);
                assert_eq!(e.offset, c.offset, "{}: wrong offset in {e}", c.file);
                assert!(
                    e.message.contains(c.message),
                    "{}: message {:?} lacks {:?}",
                    c.file,
                    e.message,
                    c.message
                );
            }
        }
    }
}

#[test]
fn forty_byte_file_claiming_16_777_216_steps_allocates_nothing_large() {
    let bytes = cases()
        .into_iter()
        .find(|c| c.file == "huge-hash-row-count.ostm")
        .map(|c| c.bytes)
        .unwrap_or_default();
    assert_eq!(bytes.len(), 40);
    let mut result = None;
    let largest = largest_allocation(|| result = Some(Replay::from_bytes("huge", &bytes)));
    assert!(matches!(result, Some(Err(_))));
    // Error strings and the like only; the rows would need 128 MiB.
    assert!(
        largest < 4096,
        "largest allocation while refusing: {largest} bytes"
    );

    // The same for a count the inputs cannot hold (no hash rows).
    let bytes = with(&base_c(), |b| put_u32(b, 18, 16_777_216));
    let largest = largest_allocation(|| assert!(Replay::from_bytes("huge", &bytes).is_err()));
    assert!(
        largest < 4096,
        "largest allocation while refusing: {largest} bytes"
    );
}

#[test]
fn allocation_tracking_catches_a_planted_large_allocation() {
    // A reader that preallocated the rows would be caught by the check above.
    let largest = largest_allocation(|| {
        let rows: Vec<u64> = Vec::with_capacity(16_777_217);
        std::hint::black_box(&rows);
    });
    assert!(largest >= 16_777_217 * 8);
}

#[test]
fn every_prefix_of_a_valid_file_is_refused_at_or_before_its_end() {
    for base in [base_a(), base_b(), base_c()] {
        for cut in 0..base.len() {
            let e = Replay::from_bytes("cut", &base[..cut]).expect_err("a prefix is refused");
            assert!(e.offset <= cut as u64, "cut {cut}: {e}");
        }
        assert!(Replay::from_bytes("whole", &base).is_ok());
    }
}

#[test]
fn committed_corpus_matches_the_cases() {
    let dir = corpus_dir();
    let cases = cases();
    if std::env::var_os("OSTM_WRITE_MALFORMED").is_some() {
        std::fs::create_dir_all(&dir).expect("create testdata/malformed");
        for c in &cases {
            std::fs::write(dir.join(c.file), &c.bytes).expect("write case");
        }
        std::fs::write(dir.join("manifest.json"), manifest(&cases)).expect("write manifest");
    }
    for c in &cases {
        let on_disk = std::fs::read(dir.join(c.file))
            .unwrap_or_else(|e| panic!("{}: {e} (regenerate with OSTM_WRITE_MALFORMED=1)", c.file));
        assert_eq!(on_disk, c.bytes, "{} differs from its case", c.file);
    }
    let committed = std::fs::read_to_string(dir.join("manifest.json")).expect("read manifest.json");
    assert_eq!(
        committed,
        manifest(&cases),
        "manifest.json differs from the cases"
    );
    // No stray .ostm files without a case.
    for entry in std::fs::read_dir(&dir).expect("list testdata/malformed") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".ostm") {
            assert!(cases.iter().any(|c| c.file == name), "{name} has no case");
        }
    }
}

/// What an outside tool would do: read the manifest, read each file by path, and require
/// the error at that offset, naming the file.
#[test]
fn committed_files_are_refused_as_the_manifest_says() {
    let dir = corpus_dir();
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("read manifest.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("manifest is JSON");
    let list = doc["cases"].as_array().expect("cases array");
    assert!(list.len() >= 40);
    for entry in list {
        let file = entry["file"].as_str().expect("file");
        let offset = entry["offset"].as_u64().expect("offset");
        let message = entry["message"].as_str().expect("message");
        let path = dir.join(file);
        let e = Replay::read_file(&path).expect_err(file);
        assert_eq!(e.input, path.display().to_string());
        assert_eq!(e.offset, offset, "{file}: {e}");
        assert!(e.message.contains(message), "{file}: {e}");
    }
}
