//! Failure bundles: one self-contained file that reproduces a hash mismatch.
//!
//! ```text
//! magic "OSTMBNDL" | version u16 = 1 | flags u16 (bit 0 writer snapshot, bit 1 reference snapshot)
//! failing step u64 | failing row u32 | expected hash u64 | observed hash u64
//! description: u32 length (<= 4096) + UTF-8
//! writer snapshot: u32 length + world snapshot        (flag bit 0)
//! reference snapshot: u32 length + world snapshot     (flag bit 1)
//! replay: u32 length + a whole .ostm replay with hash rows, which runs to the end of the file
//! ```
//!
//! `docs/bundle-format.md` is the byte-for-byte description. The embedded replay's hash
//! rows are the recorded (reference) side; the writer is the run that disagreed with
//! them. Replaying a bundle runs the replay with this build and compares every row.

use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::format::ostm::{Inputs, Replay};
use crate::sim::op::Op;
use crate::sim::world::{first_difference, FieldDiff, World, MAX_SNAPSHOT_BYTES};
use std::path::Path;

/// The eight magic bytes.
pub const MAGIC: &[u8; 8] = b"OSTMBNDL";
/// The only version.
pub const VERSION: u16 = 1;
/// Flag bit 0: the writer's world at the failing step is present.
pub const FLAG_WRITER: u16 = 1;
/// Flag bit 1: the reference side's world at the failing step is present.
pub const FLAG_REFERENCE: u16 = 2;
/// The longest description.
pub const MAX_DESCRIPTION: usize = 4096;
/// The largest bundle file read.
pub const MAX_BUNDLE_BYTES: u64 = 1 << 30;
/// Steps kept after the failing one, when the replay has them.
pub const STEPS_PAST_FAILURE: usize = 8;

/// A failure bundle in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The step at which the writer's hash first differed from the recorded one.
    pub step: u64,
    /// That step's row in the replay's hash rows (step - start step).
    pub row: u32,
    /// The recorded hash at `row`.
    pub expected: u64,
    /// The hash the writer computed at `row`.
    pub observed: u64,
    /// What failed, for people.
    pub description: String,
    /// The writer's world at the failing step.
    pub writer: Option<World>,
    /// The reference side's world at the failing step (a live host's, when it sent one).
    pub reference: Option<World>,
    /// The replay: setup, start snapshot, inputs and hash rows up to and past the failure.
    pub replay: Replay,
}

impl Bundle {
    /// A bundle for a mismatch found at hash row `row` of `replay` (which must have hash
    /// rows and at least `row` steps): keeps the inputs and rows up to
    /// [`STEPS_PAST_FAILURE`] steps past the failure. `observed` is the writer's hash there.
    pub fn from_mismatch(
        replay: &Replay,
        row: usize,
        observed: u64,
        writer: Option<World>,
        reference: Option<World>,
        description: &str,
    ) -> Option<Bundle> {
        let rows = replay.hashes.as_ref()?;
        if row >= rows.len() || row > replay.step_count() {
            return None;
        }
        // Keep no more steps than there are rows for (a replay built in code may hold
        // fewer rows than steps + 1).
        let keep = (row + STEPS_PAST_FAILURE)
            .min(replay.step_count())
            .min(rows.len() - 1);
        let mut inputs = Inputs::default();
        for i in 0..keep {
            // Already validated when the replay was read.
            inputs.push(replay.inputs.get(i)).ok()?;
        }
        let r = Replay {
            setup: replay.setup,
            link: replay.link,
            start: replay.start.clone(),
            hashes: Some(rows[..=keep].to_vec()),
            inputs,
        };
        let mut description = description.to_string();
        truncate_utf8(&mut description, MAX_DESCRIPTION);
        Some(Bundle {
            step: replay.start_step().wrapping_add(row as u64),
            row: row as u32,
            expected: rows[row],
            observed,
            description,
            writer,
            reference,
            replay: r,
        })
    }

    /// A bundle for a live drift, self-contained in one step: the viewer's world `before`
    /// the drifting step (whose hash the host agreed with) becomes the start snapshot,
    /// `input` (that step's input as the host sent it) the only step, and the hash rows
    /// are `before`'s hash and the host's hash after the step. `viewer_after` is the
    /// writer's world; `host_after` the host's snapshot at that step when it sent one.
    ///
    /// # Errors
    /// `input` that does not decode as a step input.
    pub fn from_drift(
        before: &World,
        input: &[u8],
        host_hash: u64,
        viewer_after: &World,
        host_after: Option<World>,
        description: &str,
    ) -> Result<Bundle, FormatError> {
        let mut replay = Replay::new(before.setup(), before.link());
        replay.start = Some(before.clone());
        replay.inputs.push(input)?;
        replay.hashes = Some(vec![before.hash(), host_hash]);
        Bundle::from_mismatch(
            &replay,
            1,
            viewer_after.hash(),
            Some(viewer_after.clone()),
            host_after,
            description,
        )
        .ok_or_else(|| FormatError::new("drift", 0, "expected a one-step replay"))
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let flags = ((self.writer.is_some() as u16) * FLAG_WRITER)
            | ((self.reference.is_some() as u16) * FLAG_REFERENCE);
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.step.to_le_bytes());
        out.extend_from_slice(&self.row.to_le_bytes());
        out.extend_from_slice(&self.expected.to_le_bytes());
        out.extend_from_slice(&self.observed.to_le_bytes());
        out.extend_from_slice(&(self.description.len() as u32).to_le_bytes());
        out.extend_from_slice(self.description.as_bytes());
        for w in [&self.writer, &self.reference].into_iter().flatten() {
            out.extend_from_slice(&(w.snapshot_len() as u32).to_le_bytes());
            w.write_snapshot(&mut out);
        }
        let replay = self.replay.to_bytes();
        out.extend_from_slice(&(replay.len() as u32).to_le_bytes());
        out.extend_from_slice(&replay);
        out
    }

    /// Writes the file whole ([`crate::format::write_whole`]: through `PATH.PID.part`,
    /// synced, renamed; a failed write leaves `PATH` as it was and no `PATH.PID.part`).
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        crate::format::write_whole(path, &self.to_bytes())
    }

    /// Writes the file whole under a name that replaces nothing: `path`, else the next free
    /// name ([`crate::format::write_new`]); returns the name written.
    ///
    /// # Errors
    /// As [`crate::format::write_new`].
    pub fn write_new_file(&self, path: &Path) -> std::io::Result<std::path::PathBuf> {
        crate::format::write_new(path, &self.to_bytes())
    }

    /// Reads a bundle file (at most [`MAX_BUNDLE_BYTES`]).
    pub fn read_file(path: &Path) -> Result<Bundle, FormatError> {
        let name = path.display().to_string();
        let len = std::fs::metadata(path)
            .map_err(|e| FormatError::io(&name, &e))?
            .len();
        if len > MAX_BUNDLE_BYTES {
            return Err(FormatError::new(
                &name,
                0,
                format!("expected a bundle of at most {MAX_BUNDLE_BYTES} bytes, found {len}"),
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| FormatError::io(&name, &e))?;
        Bundle::from_bytes(&name, &bytes)
    }

    /// Parses and checks a bundle; `input` names it in errors.
    pub fn from_bytes(input: &str, bytes: &[u8]) -> Result<Bundle, FormatError> {
        let mut c = Cursor::new(input, bytes, 0);
        let magic = c.take(8, "magic")?;
        if magic != MAGIC {
            return Err(c.error_at(
                0,
                format!("expected magic \"OSTMBNDL\", found {magic:02x?}"),
            ));
        }
        let at = c.offset();
        let version = c.u16("version")?;
        if version != VERSION {
            return Err(c.error_at(at, format!("expected bundle version 1, found {version}")));
        }
        let at = c.offset();
        let flags = c.u16("flags")?;
        if flags & !(FLAG_WRITER | FLAG_REFERENCE) != 0 {
            return Err(c.error_at(
                at,
                format!("expected flag bits 2..15 to be 0, found flags 0x{flags:04x}"),
            ));
        }
        let step = c.u64("failing step")?;
        let row_at = c.offset();
        let row = c.u32("failing row")?;
        let expected = c.u64("expected hash")?;
        let observed = c.u64("observed hash")?;
        let at = c.offset();
        let dlen = c.u32("description length")? as usize;
        if dlen > MAX_DESCRIPTION {
            return Err(c.error_at(at, format!("expected a description of at most {MAX_DESCRIPTION} bytes, found length {dlen}")));
        }
        let dat = c.offset();
        let description = std::str::from_utf8(c.take(dlen, "description")?)
            .map_err(|_| c.error_at(dat, "expected a UTF-8 description"))?
            .to_string();
        let mut snaps = Vec::new();
        for (bit, what) in [
            (FLAG_WRITER, "writer snapshot"),
            (FLAG_REFERENCE, "reference snapshot"),
        ] {
            if flags & bit == 0 {
                snaps.push(None);
                continue;
            }
            let at = c.offset();
            let len = c.u32(&format!("{what} length"))? as usize;
            if len > MAX_SNAPSHOT_BYTES {
                return Err(c.error_at(at, format!("expected a {what} of at most {MAX_SNAPSHOT_BYTES} bytes, found length {len}")));
            }
            let base = c.offset();
            snaps.push(Some((base, c.take(len, what)?)));
        }
        let at = c.offset();
        let rlen = c.u32("replay length")? as usize;
        if rlen != c.remaining() {
            return Err(c.error_at(
                at,
                format!(
                    "expected the replay length to be the {} bytes that remain, found {rlen}",
                    c.remaining()
                ),
            ));
        }
        let base = c.offset();
        let rbytes = c.take(rlen, "replay")?;
        let replay = Replay::from_bytes(input, rbytes).map_err(|e| {
            FormatError::new(
                input,
                base + e.offset,
                format!("embedded replay: {}", e.message),
            )
        })?;
        let Some(rows) = replay.hashes.as_ref() else {
            return Err(FormatError::new(
                input,
                base,
                "expected the embedded replay to have hash rows (flag bit 0)",
            ));
        };
        if row as usize >= rows.len()
            || rows[row as usize] != expected
            || replay.start_step().wrapping_add(row as u64) != step
        {
            return Err(c.error_at(row_at, format!(
                "expected the failing row to be a hash row of the replay at the failing step with the expected hash; row {row} of {}, step {step}",
                rows.len()
            )));
        }
        let mut worlds = snaps.into_iter().map(|s| match s {
            None => Ok(None),
            Some((at, b)) => {
                let w = World::from_snapshot(replay.setup, replay.link, input, b, at)?;
                if w.step != step {
                    return Err(FormatError::new(
                        input,
                        at,
                        format!(
                            "expected a snapshot at the failing step {step}, found step {}",
                            w.step
                        ),
                    ));
                }
                Ok(Some(w))
            }
        });
        let writer = worlds.next().unwrap_or(Ok(None))?;
        let reference = worlds.next().unwrap_or(Ok(None))?;
        Ok(Bundle {
            step,
            row,
            expected,
            observed,
            description,
            writer,
            reference,
            replay,
        })
    }

    /// Runs the replay with this build, comparing every hash row.
    pub fn check(&self) -> BundleReport {
        let rows = self.replay.hashes.as_deref().unwrap_or(&[]);
        let mut world = self.replay.start_world();
        let mut at_failure = None;
        let mut mismatch = None;
        let mut ops: Vec<Op> = Vec::new();
        for (row, &want) in rows.iter().enumerate() {
            if row > 0 {
                self.replay.inputs.ops_into(row - 1, &mut ops);
                world.step(&ops);
            }
            if row == self.row as usize {
                at_failure = Some(world.clone());
            }
            let got = world.hash();
            if mismatch.is_none() && got != want {
                mismatch = Some(Mismatch {
                    step: world.step,
                    row: row as u32,
                    expected: want,
                    computed: got,
                });
            }
        }
        let this = at_failure.unwrap_or_else(|| world.clone());
        let difference = match (&self.reference, &self.writer) {
            (Some(r), _) => first_difference(&this, r).map(|d| (d, "reference")),
            (None, Some(w)) => first_difference(&this, w).map(|d| (d, "writer")),
            (None, None) => None,
        };
        BundleReport {
            recorded: Mismatch {
                step: self.step,
                row: self.row,
                expected: self.expected,
                computed: self.observed,
            },
            rows: rows.len() as u64,
            mismatch,
            difference: difference.map(|(diff, other)| SideDifference {
                step: self.step,
                diff,
                other,
            }),
        }
    }
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// A hash row that did not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub step: u64,
    pub row: u32,
    /// The recorded hash.
    pub expected: u64,
    /// The hash computed.
    pub computed: u64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hash mismatch at step {} (row {}): expected {:016x}, computed {:016x}",
            self.step, self.row, self.expected, self.computed
        )
    }
}

/// This build's world against the other side's at the failing step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideDifference {
    pub step: u64,
    /// `a` is this build's value, `b` the other side's.
    pub diff: FieldDiff,
    /// `reference` or `writer`.
    pub other: &'static str,
}

impl std::fmt::Display for SideDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "first difference at step {}: {}: this build {}, {} {}",
            self.step, self.diff, self.diff.a, self.other, self.diff.b
        )
    }
}

/// What replaying a bundle with this build found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleReport {
    /// The failure the bundle records (the writer's hash as `computed`).
    pub recorded: Mismatch,
    /// Hash rows compared.
    pub rows: u64,
    /// This build's first mismatching row, if any: `None` means the failure no longer
    /// reproduces (the defect is fixed, or it was the writer's).
    pub mismatch: Option<Mismatch>,
    /// This build's world against the reference's (else the writer's) at the failing step.
    pub difference: Option<SideDifference>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::world::{Dims, Setup};

    fn replay() -> Replay {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Three,
                bodies: 3,
                seed: 8,
            },
            None,
        );
        for i in 0..40 {
            r.inputs.push_ops(&if i == 5 {
                vec![Op::Impulse {
                    body: 0,
                    d: [1, 2, 3],
                }]
            } else {
                vec![]
            });
        }
        r.compute_hashes();
        r
    }

    #[test]
    fn a_bundle_round_trips_and_keeps_steps_past_the_failure() {
        let mut r = replay();
        let mut w = r.start_world();
        for i in 0..12 {
            w.step(&r.inputs.ops(i));
        }
        let mut theirs = w.clone();
        theirs.bodies[1].vel[1] += 1;
        r.hashes.as_mut().unwrap()[12] = theirs.hash();
        let b = Bundle::from_mismatch(&r, 12, w.hash(), Some(w.clone()), Some(theirs), "planted")
            .unwrap();
        assert_eq!(b.replay.step_count(), 12 + STEPS_PAST_FAILURE);
        let bytes = b.to_bytes();
        let back = Bundle::from_bytes("b", &bytes).unwrap();
        assert_eq!(back, b);
        let report = back.check();
        assert_eq!(report.mismatch.map(|m| (m.step, m.row)), Some((12, 12)));
        let d = report.difference.unwrap();
        assert_eq!((d.diff.body, d.diff.field), (Some(1), "velocity.y"));
        assert_eq!(d.diff.b - d.diff.a, 1);
        // Cut anywhere: refused.
        for cut in 0..bytes.len() {
            assert!(
                Bundle::from_bytes("b", &bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_drift_bundle_replays_to_the_drift_reports_field() {
        // A host whose world was changed outside the rules: body 2 one mm/step faster.
        let mut viewer = replay().start_world();
        for _ in 0..30 {
            viewer.step(&[]);
        }
        let before = viewer.clone();
        let input = crate::sim::op::encode_input(&[Op::Impulse {
            body: 1,
            d: [5, 5, 5],
        }]);
        viewer.step(&crate::sim::op::decode_input("", &input, 0).unwrap());
        let mut host = viewer.clone();
        host.bodies[2].vel[0] += 1;
        let drift = first_difference(&host, &viewer).unwrap();
        let b = Bundle::from_drift(
            &before,
            &input,
            host.hash(),
            &viewer,
            Some(host.clone()),
            "drift",
        )
        .unwrap();
        let b = Bundle::from_bytes("b", &b.to_bytes()).unwrap();
        assert_eq!((b.step, b.row), (31, 1));
        let report = b.check();
        assert_eq!(
            report.mismatch.map(|m| (m.step, m.expected, m.computed)),
            Some((31, host.hash(), viewer.hash()))
        );
        let d = report.difference.unwrap();
        // The same body and field as the drift report, values swapped (this build first).
        assert_eq!(
            (d.diff.body, d.diff.field, d.diff.a, d.diff.b),
            (drift.body, drift.field, drift.b, drift.a)
        );
        assert_eq!(d.other, "reference");
    }

    #[test]
    fn each_check_reports_the_documented_offset() {
        // No snapshots, description "x": the replay length sits at 44 + 1 = 45, the
        // embedded replay starts at 49 (docs/bundle-format.md).
        let b = Bundle::from_mismatch(&replay(), 3, 1, None, None, "x").unwrap();
        let good = b.to_bytes();
        let err = |plant: &dyn Fn(&mut Vec<u8>)| {
            let mut bytes = good.clone();
            plant(&mut bytes);
            Bundle::from_bytes("b", &bytes).unwrap_err()
        };
        type Plant<'a> = &'a dyn Fn(&mut Vec<u8>);
        let cases: [(Plant, u64, &str); 7] = [
            (&|b| b[8] = 2, 8, "expected bundle version 1, found 2"),
            (&|b| b[10] = 4, 10, "found flags 0x0004"),
            (&|b| b[41] = 0x10, 40, "found length 4097"), // D = 0x1001
            (&|b| b[44] = 0xff, 44, "expected a UTF-8 description"),
            (&|b| b.push(0), 45, "found 1"),
            (&|b| b[49] = b'X', 49, "embedded replay: expected magic"),
            (&|b| b[20] = 4, 20, "expected the failing row"),
        ];
        for (plant, offset, what) in cases {
            let e = err(plant);
            assert_eq!(e.offset, offset, "{e}");
            assert!(e.message.contains(what), "{e} should say {what}");
        }
        // Writer snapshot present (flag bit 0): its length at 45, its first byte at 49.
        let w = replay().start_world();
        let b = Bundle::from_mismatch(&replay(), 0, 1, Some(w), None, "x").unwrap();
        let mut bytes = b.to_bytes();
        bytes[49 + 12] = 2; // body 0's alive
        let e = Bundle::from_bytes("b", &bytes).unwrap_err();
        assert_eq!(e.offset, 49 + 12, "{e}");
        bytes[49 + 12] = 1;
        bytes[45] = 0x0d; // S = 0x80d = 2061
        bytes[46] = 0x08;
        let e = Bundle::from_bytes("b", &bytes).unwrap_err();
        assert_eq!(e.offset, 45, "{e}");
        assert!(
            e.message.contains("at most 2060 bytes, found length 2061"),
            "{e}"
        );
    }

    #[test]
    fn a_replay_with_fewer_rows_than_steps_keeps_only_steps_it_has_rows_for() {
        // Built in code: 40 steps but only rows 0..=5. The bundle keeps 5 steps and 6 rows
        // (a valid file), where slicing 8 steps past the failure would run off the rows.
        let mut r = replay();
        r.hashes.as_mut().unwrap().truncate(6);
        let b = Bundle::from_mismatch(&r, 2, 1, None, None, "short").unwrap();
        assert_eq!(b.replay.step_count(), 5);
        assert_eq!(b.replay.hashes.as_ref().map(Vec::len), Some(6));
        assert_eq!(Bundle::from_bytes("b", &b.to_bytes()).unwrap(), b);
    }

    #[test]
    fn a_bundle_whose_rows_disagree_with_its_header_is_refused() {
        let r = replay();
        let w = r.start_world();
        let mut b = Bundle::from_mismatch(&r, 3, 1, None, None, "x").unwrap();
        b.expected ^= 1;
        let e = Bundle::from_bytes("b", &b.to_bytes()).unwrap_err();
        assert!(e.message.contains("failing row"), "{e}");
        b.expected ^= 1;
        b.writer = Some(w);
        let e = Bundle::from_bytes("b", &b.to_bytes()).unwrap_err();
        assert!(e.message.contains("failing step 3, found step 0"), "{e}");
    }
}
