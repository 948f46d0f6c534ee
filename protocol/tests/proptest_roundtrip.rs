//! Property tests of the `.ostm` reader and writer.
//!
//! - Random valid replays (2D or 3D, 1..=64 bodies, any seed, any link, an optional start
//!   snapshot taken at a random step of a run, any ops with any i32 and any body index)
//!   never panic when run, and write -> read -> write gives the same bytes and the same
//!   replay; their hash rows verify.
//! - Random bytes, and random mutations of a valid file, never panic the reader; an error
//!   points inside the input, and any file the reader accepts writes back byte for byte.

use ostm_protocol::sim::link::{Link, Role};
use ostm_protocol::sim::op::Op;
use ostm_protocol::sim::world::{Dims, Setup, World};
use ostm_protocol::{Replay, Verdict};
use proptest::prelude::*;

fn any_op() -> impl Strategy<Value = Op> {
    let v3 = || any::<[i32; 3]>();
    prop_oneof![
        (any::<u8>(), v3()).prop_map(|(body, d)| Op::Impulse { body, d }),
        (any::<u8>(), v3()).prop_map(|(body, pos)| Op::Teleport { body, pos }),
        any::<u8>().prop_map(|body| Op::Remove { body }),
        any::<i32>().prop_map(|g| Op::Gravity { g }),
        v3().prop_map(|pos| Op::Spawn { pos }),
        // Small values keep bodies in the box, where bounces and rests happen.
        (0u8..70, -60i32..60, -60i32..60)
            .prop_map(|(body, x, y)| Op::Impulse { body, d: [x, y, x] }),
    ]
}

fn any_steps() -> impl Strategy<Value = Vec<Vec<Op>>> {
    prop::collection::vec(prop::collection::vec(any_op(), 0..6), 0..40)
}

/// A setup and a link valid for it.
fn any_world() -> impl Strategy<Value = (Setup, Option<Link>)> {
    (prop::bool::ANY, 1u8..=64, any::<u32>()).prop_flat_map(|(three, bodies, seed)| {
        let setup = Setup {
            dims: if three { Dims::Three } else { Dims::Two },
            bodies,
            seed,
        };
        let link = prop_oneof![
            Just(None),
            (1u8..=2, 0..bodies, any::<u16>()).prop_map(|(role, body, transfer_step)| Some(Link {
                role: if role == 1 {
                    Role::Sender
                } else {
                    Role::Receiver
                },
                body,
                transfer_step,
            })),
            (any::<u8>(), any::<u16>()).prop_map(|(body, transfer_step)| Some(Link {
                role: Role::FieldsOnly,
                body,
                transfer_step,
            })),
        ];
        (Just(setup), link)
    })
}

/// A whole valid replay: the first `cut` steps (when `Some`) are run to make the start
/// snapshot, the rest are the replay's steps.
fn any_replay() -> impl Strategy<Value = Replay> {
    (
        any_world(),
        any_steps(),
        any::<Option<prop::sample::Index>>(),
        prop::bool::ANY,
    )
        .prop_map(|((setup, link), steps, cut, hashes)| {
            let mut r = Replay::new(setup, link);
            let cut = cut.map_or(0, |i| i.index(steps.len() + 1));
            if cut > 0 || hashes {
                let mut w = World::new(setup, link);
                for ops in &steps[..cut] {
                    w.step(ops);
                }
                r.start = (cut > 0).then_some(w);
            }
            for ops in &steps[cut..] {
                r.inputs.push_ops(ops);
            }
            if hashes {
                r.compute_hashes();
            }
            r
        })
}

/// Write, read, write: the same replay and the same bytes.
fn check_round_trip(original: &Replay, bytes: &[u8]) -> Result<(), String> {
    let read = Replay::from_bytes("prop", bytes).map_err(|e| format!("refused: {e}"))?;
    if &read != original {
        return Err("read a different replay than was written".into());
    }
    if read.to_bytes() != bytes {
        return Err("wrote different bytes than were read".into());
    }
    Ok(())
}

/// Never panics; an error points inside the input; an accepted file writes back unchanged.
fn check_any_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    match Replay::from_bytes("fuzz", bytes) {
        Ok(r) => prop_assert_eq!(r.to_bytes(), bytes),
        Err(e) => prop_assert!(e.offset <= bytes.len() as u64, "{}", e),
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(prop::sample::Index, u8),
    Flip(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    Truncate(prop::sample::Index),
}

fn any_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Remove),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Set(i, b) => {
            let i = i.index(bytes.len());
            bytes[i] = *b;
        }
        Mutation::Flip(i, bit) => {
            let i = i.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        Mutation::Insert(i, b) => bytes.insert(i.index(bytes.len() + 1), *b),
        Mutation::Remove(i) => {
            bytes.remove(i.index(bytes.len()));
        }
        Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_replays_round_trip_byte_for_byte(r in any_replay()) {
        let bytes = r.to_bytes();
        if let Err(e) = check_round_trip(&r, &bytes) {
            return Err(TestCaseError::fail(e));
        }
        if r.hashes.is_some() {
            let verdict = Replay::from_bytes("prop", &bytes).map(|read| read.verify(|_| {}));
            prop_assert!(matches!(verdict, Ok(Verdict::Match { .. })), "{:?}", verdict);
        }
    }

    #[test]
    fn random_bytes_never_panic_the_reader(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check_any_bytes(&bytes)?;
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic_the_reader(
        flags in 0u16..8,
        tail in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        // Past the magic and version, so the fuzz reaches the deeper rules.
        let mut bytes = b"OSTM\x01\x00".to_vec();
        bytes.extend_from_slice(&flags.to_le_bytes());
        let setup_len: u32 = if flags & 4 != 0 { 10 } else { 6 };
        bytes.extend_from_slice(&setup_len.to_le_bytes());
        bytes.extend_from_slice(&tail);
        check_any_bytes(&bytes)?;
    }

    #[test]
    fn mutated_valid_files_never_panic_the_reader(
        r in any_replay(),
        mutations in prop::collection::vec(any_mutation(), 1..4),
    ) {
        let mut bytes = r.to_bytes();
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        check_any_bytes(&bytes)?;
    }
}

/// The round-trip check is not vacuous: a writer that gets one byte wrong is caught.
#[test]
fn round_trip_check_catches_a_planted_writer_fault() {
    let setup = Setup {
        dims: Dims::Three,
        bodies: 5,
        seed: 1234,
    };
    let mut r = Replay::new(setup, None);
    r.inputs.push_ops(&[Op::Gravity { g: 9 }]);
    r.compute_hashes();
    let good = r.to_bytes();
    assert_eq!(check_round_trip(&r, &good), Ok(()));
    // The seed's low byte (offset 14) written wrong: still a valid file, another replay.
    let mut bad = good.clone();
    bad[14] ^= 1;
    assert!(check_round_trip(&r, &bad).is_err());
    // A hash row written wrong: the file reads, but it is not the replay that was written.
    let mut bad = good.clone();
    bad[22] ^= 1;
    assert!(check_round_trip(&r, &bad).is_err());
}
