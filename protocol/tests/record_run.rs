//! A viewer's reader takes record frames whole (`Codec::take_records`) and its verifier
//! decodes them later (`RecordRun::decode_each`): over any stream of host messages, valid
//! or not, cut into reads anywhere, that gives the same records, the same other messages
//! and the same first error, at the same offset, as decoding every frame with the codec.

use bytes::{BufMut, Bytes, BytesMut};
use ostm_protocol::sim::op::{for_each_op, Op};
use ostm_protocol::wire::{Codec, End, EndReason, Record, ToViewer, ViewerCodec};
use proptest::prelude::*;

/// What either way of reading yields, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Record { step: u64, hash: u64, ops: Vec<Op> },
    Other(String),
    Error(String),
}

fn record(step: u64, input: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u32_le(19 + input.len() as u32);
    b.put_u8(0x83);
    b.put_u64_le(step);
    b.put_u64_le(step ^ 0x5555);
    b.put_u16_le(input.len() as u16);
    b.put_slice(input);
    b.freeze()
}

/// One piece of a stream: mostly records whose steps follow on, some that do not, other
/// messages, and frames the codec refuses.
fn piece() -> impl Strategy<Value = (u8, u64, Vec<u8>)> {
    (0u8..100, 0u64..4, prop::collection::vec(any::<u8>(), 0..12))
}

fn stream(pieces: &[(u8, u64, Vec<u8>)], first: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut step = first;
    // A valid input: a gravity op (opcode 4, i32).
    let good = [4u8, 1, 0, 0, 0];
    for (kind, skew, bytes) in pieces {
        match kind {
            0..=69 => {
                out.extend_from_slice(&record(
                    step,
                    &good[..if bytes.len() % 2 == 0 { 0 } else { 5 }],
                ));
                step += 1;
            }
            70..=74 => {
                // A step that does not follow on.
                out.extend_from_slice(&record(step + 1 + skew, &[]));
            }
            75..=79 => {
                // Arbitrary input bytes: valid ops or not.
                out.extend_from_slice(&record(step, bytes));
                step += 1;
            }
            80..=84 => {
                let frame = Codec::<ToViewer, ToViewer>::encode_frame(&ToViewer::Heartbeat {
                    host_step: step,
                })
                .expect("frame");
                out.extend_from_slice(&frame.0);
            }
            85..=87 => {
                // A record whose input length runs past its frame, or stops short of it.
                let mut r = record(step, &good).to_vec();
                r[4 + 17] = if skew % 2 == 0 { 6 + *skew as u8 } else { 0 };
                out.extend_from_slice(&r);
            }
            88..=89 => {
                // A frame length out of range.
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            90..=91 => {
                // A record frame too short for its head.
                out.extend_from_slice(&5u32.to_le_bytes());
                out.extend_from_slice(&[0x83, 1, 2, 3, 4]);
            }
            92..=93 => {
                let frame = Codec::<ToViewer, ToViewer>::encode_frame(&ToViewer::End(End {
                    reason: EndReason::Finished,
                    host_step: step,
                    text: "done".into(),
                }))
                .expect("frame");
                out.extend_from_slice(&frame.0);
            }
            _ => {
                // Cut off: a partial frame at the end of the stream.
                let r = record(step, &good);
                out.extend_from_slice(&r[..(*skew as usize + 1).min(r.len() - 1)]);
                break;
            }
        }
    }
    out
}

fn describe(m: &ToViewer) -> Seen {
    match m {
        ToViewer::Record(Record { step, hash, input }) => {
            let mut ops = Vec::new();
            for_each_op("stream", input, 0, |op| ops.push(op)).expect("the codec checked it");
            Seen::Record {
                step: *step,
                hash: *hash,
                ops,
            }
        }
        other => Seen::Other(format!("{other:?}")),
    }
}

/// Reads the stream in pieces cut at `cuts`. With `runs` (the first step expected), as the
/// viewer's reader and verifier do: runs of records taken whole, decoded later; without,
/// every frame through the codec's decode.
fn read(bytes: &[u8], cuts: &[usize], runs: Option<u64>) -> Vec<Seen> {
    let mut codec = ViewerCodec::new("stream");
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut next_step = runs;
    let mut ops = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(fed, bytes.len());
        buf.extend_from_slice(&bytes[fed..cut]);
        fed = cut;
        let eof = fed == bytes.len();
        loop {
            if let Some(step) = next_step.as_mut() {
                if let Some(run) = codec.take_records(&mut buf, *step) {
                    assert_eq!(run.first_step(), *step);
                    *step += run.count();
                    let mut n = 0;
                    let decoded = run.decode_each(&mut ops, |r, ops| {
                        out.push(Seen::Record {
                            step: r.step,
                            hash: r.hash,
                            ops: ops.to_vec(),
                        });
                        n += 1;
                        true
                    });
                    if let Err(e) = decoded {
                        out.push(Seen::Error(e.to_string()));
                        return out;
                    }
                    assert_eq!(n, run.count(), "a run decodes to its count of records");
                    continue;
                }
            }
            let next = if eof {
                codec.decode_eof(&mut buf)
            } else {
                codec.decode(&mut buf)
            };
            match next {
                Ok(Some(m)) => {
                    if let (ToViewer::Record(r), Some(step)) = (&m, next_step.as_mut()) {
                        *step = r.step + 1;
                    }
                    out.push(describe(&m));
                }
                Ok(None) => break,
                Err(e) => {
                    out.push(Seen::Error(e.to_string()));
                    return out;
                }
            }
        }
        if eof {
            break;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn runs_read_as_the_codec_does(
        pieces in prop::collection::vec(piece(), 0..60),
        cuts in prop::collection::vec(0usize..2000, 0..12),
        first in prop_oneof![0u64..1000, Just(u64::MAX - 30)],
    ) {
        let bytes = stream(&pieces, first.min(u64::MAX - 200));
        let mut cuts = cuts;
        cuts.sort_unstable();
        let codec = read(&bytes, &cuts, None);
        let runs = read(&bytes, &cuts, Some(first.min(u64::MAX - 200)));
        prop_assert_eq!(runs, codec);
    }
}

/// The property above can fail: a run taken without its steps checked against the
/// expected step would hand on a record the reader must refuse.
#[test]
fn a_record_of_another_step_ends_the_run() {
    let mut bytes = record(7, &[]).to_vec();
    bytes.extend_from_slice(&record(8, &[]));
    bytes.extend_from_slice(&record(10, &[]));
    let mut buf = BytesMut::from(&bytes[..]);
    let mut codec = ViewerCodec::new("stream");
    let run = codec.take_records(&mut buf, 7).expect("a run");
    assert_eq!((run.first_step(), run.count()), (7, 2));
    assert_eq!(codec.consumed(), 2 * 23);
    assert!(
        codec.take_records(&mut buf, 9).is_none(),
        "step 10 is not step 9"
    );
    match codec.decode(&mut buf) {
        Ok(Some(ToViewer::Record(r))) => assert_eq!(r.step, 10),
        other => panic!("{other:?}"),
    }
}

/// A bad op inside a run is the codec's error, at the op's offset in the stream.
#[test]
fn a_bad_op_in_a_run_names_its_offset() {
    let mut bytes = record(0, &[]).to_vec();
    bytes.extend_from_slice(&record(1, &[0xee]));
    let mut buf = BytesMut::from(&bytes[..]);
    let mut codec = ViewerCodec::new("stream");
    let run = codec.take_records(&mut buf, 0).expect("a run");
    let mut seen = 0;
    let e = run
        .decode_each(&mut Vec::new(), |_, _| {
            seen += 1;
            true
        })
        .expect_err("opcode 0xee");
    assert_eq!(seen, 1, "the record before the bad one was handed on");
    let mut plain = BytesMut::from(&bytes[..]);
    let mut c = ViewerCodec::new("stream");
    let _ = c.decode(&mut plain);
    let want = c.decode(&mut plain).expect_err("opcode 0xee");
    assert_eq!(e.to_string(), want.to_string());
    assert!(e.to_string().contains("at offset 46"), "{e}");
}
