//! The first difference between two runs, each a trace or a replay: compared **by step
//! number**, a row at a time, in constant memory (`docs/trace-format.md`, "first-difference").

use super::replay_stream::{ReplayStream, ReplayTracer};
use super::trace::{detect, setup_line, InputKind, TraceReader, TRACE_MAGIC};
use crate::error::FormatError;
use crate::sim::link::Link;
use crate::sim::world::{first_difference, Setup, World};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// One of the two inputs of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first input.
    A,
    /// The second input.
    B,
}

impl Side {
    /// `A` or `B`.
    pub fn name(self) -> &'static str {
        match self {
            Side::A => "A",
            Side::B => "B",
        }
    }
}

/// The steps an input holds, as far as it has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// The step of its first row; `None` for a trace with no rows, or one not read yet.
    pub first: Option<u64>,
    /// The step of its last row: a replay's end step (its header says it), else the last
    /// row read.
    pub last: Option<u64>,
    /// True when `last` is the input's last step: always for a replay, for a trace once its
    /// `end` line has been read.
    pub complete: bool,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.first, self.last, self.complete) {
            (Some(a), Some(b), true) => write!(f, "{a}..={b}"),
            (Some(a), Some(b), false) => write!(f, "{a}..={b} so far (not read to its end)"),
            (_, _, true) => f.write_str("no step"),
            (_, _, false) => f.write_str("no step read"),
        }
    }
}

/// A replay's hash row that its own run does not reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    /// The input's name (its path as given).
    pub input: String,
    /// The row's index in the replay (0 is the start world).
    pub row: u64,
    /// The row's step number (start step + row).
    pub step: u64,
    /// The hash the file holds.
    pub stored: u64,
    /// The hash the run computed at that step.
    pub computed: u64,
}

/// Why reading an input stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// The input is malformed, cut short or unreadable.
    Format(FormatError),
    /// A replay's stored hash row differs from the hash its run computes.
    StoredRow(StoredRow),
}

impl From<FormatError> for Halt {
    fn from(e: FormatError) -> Halt {
        Halt::Format(e)
    }
}

enum Inner {
    Trace(TraceReader<BufReader<File>>),
    Replay {
        tracer: ReplayTracer<File>,
        /// The file again, at its hash rows, read eight bytes per row in order (`None`
        /// without hash rows).
        stored: Option<BufReader<File>>,
        /// The computed hash of the current world.
        hash: u64,
    },
}

/// One side of a comparison: a trace, or a replay run as it is read whose computed hashes
/// are checked against its own hash rows on the way.
pub struct RowSource {
    name: String,
    inner: Inner,
    held: Held,
    /// Rows read so far.
    rows: u64,
    /// True while a row is current (after a successful [`RowSource::advance`]).
    current: bool,
    ended: bool,
}

impl RowSource {
    /// Opens a file, telling a trace from a replay by its first bytes.
    pub fn open(path: &Path) -> Result<RowSource, FormatError> {
        let name = path.display().to_string();
        let mut f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
        let mut first = Vec::with_capacity(16);
        (&mut f)
            .take(TRACE_MAGIC.len() as u64)
            .read_to_end(&mut first)
            .map_err(|e| FormatError::io(&name, &e))?;
        let (inner, held) = match detect(&name, &first)? {
            InputKind::Trace => (Inner::Trace(TraceReader::open(path)?), Held::default()),
            InputKind::Replay => {
                let stream = ReplayStream::open(path)?;
                let start = stream.header().start.as_ref().map_or(0, |w| w.step);
                let held = Held {
                    first: Some(start),
                    last: Some(start.wrapping_add(stream.header().steps as u64)),
                    complete: true,
                };
                let stored = match stream.hashes_at {
                    None => None,
                    Some(at) => {
                        let mut f = File::open(path).map_err(|e| FormatError::io(&name, &e))?;
                        f.seek(SeekFrom::Start(at)).map_err(|e| {
                            FormatError::new(&name, at, format!("cannot seek: {e}"))
                        })?;
                        Some(BufReader::with_capacity(64 * 1024, f))
                    }
                };
                let inner = Inner::Replay {
                    tracer: ReplayTracer::new(stream),
                    stored,
                    hash: 0,
                };
                (inner, held)
            }
        };
        Ok(RowSource {
            name,
            inner,
            held,
            rows: 0,
            current: false,
            ended: false,
        })
    }

    /// The input's name (its path as given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The input's kind.
    pub fn kind(&self) -> InputKind {
        match self.inner {
            Inner::Trace(_) => InputKind::Trace,
            Inner::Replay { .. } => InputKind::Replay,
        }
    }

    /// The setup and link the input declares.
    pub fn setup(&self) -> (Setup, Option<Link>) {
        match &self.inner {
            Inner::Trace(t) => (t.setup(), t.link()),
            Inner::Replay { tracer, .. } => (
                tracer.stream().header().setup,
                tracer.stream().header().link,
            ),
        }
    }

    /// The steps the input holds, as far as it is known.
    pub fn held(&self) -> Held {
        self.held
    }

    /// Moves to the next row (the first on the first call); false after the last one. A
    /// replay's computed hash is compared with its stored row at that step here.
    pub fn advance(&mut self) -> Result<bool, Halt> {
        if self.ended {
            self.current = false;
            return Ok(false);
        }
        let row = self.rows;
        let step = match &mut self.inner {
            Inner::Trace(t) => t.next_row()?.map(|(w, _)| w.step),
            Inner::Replay {
                tracer,
                stored,
                hash,
            } => match tracer.next_world()? {
                None => None,
                Some(w) => {
                    *hash = w.hash();
                    let step = w.step;
                    if let Some(rows) = stored {
                        let at = tracer.stream().hashes_at.unwrap_or(0) + row * 8;
                        let mut b = [0u8; 8];
                        rows.read_exact(&mut b).map_err(|e| {
                            FormatError::new(
                                &self.name,
                                at,
                                format!("cannot read hash row {row}: {e}"),
                            )
                        })?;
                        let stored = u64::from_le_bytes(b);
                        if stored != *hash {
                            return Err(Halt::StoredRow(StoredRow {
                                input: self.name.clone(),
                                row,
                                step,
                                stored,
                                computed: *hash,
                            }));
                        }
                    }
                    Some(step)
                }
            },
        };
        match step {
            Some(s) => {
                self.rows += 1;
                self.current = true;
                if self.kind() == InputKind::Trace {
                    self.held.first.get_or_insert(s);
                    self.held.last = Some(s);
                }
            }
            None => {
                self.current = false;
                self.ended = true;
                self.held.complete = true;
            }
        }
        Ok(step.is_some())
    }

    /// The current row: the world and its hash (as written in a trace, computed for a
    /// replay), and the row's index in the input; `None` before the first
    /// [`RowSource::advance`] and after the last row.
    pub fn row(&self) -> Option<(&World, u64, u64)> {
        if !self.current {
            return None;
        }
        let index = self.rows - 1;
        match &self.inner {
            Inner::Trace(t) => Some((&t.world, t.hash, index)),
            Inner::Replay { tracer, hash, .. } => Some((&tracer.world, *hash, index)),
        }
    }

    /// The current row's step.
    pub fn step(&self) -> Option<u64> {
        self.row().map(|(w, _, _)| w.step)
    }
}

/// Where two inputs first differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The step both rows are at (`None` for a setup difference).
    pub step: Option<u64>,
    /// A's row index there (0-based; `None` for a setup difference).
    pub a_row: Option<u64>,
    /// B's row index there.
    pub b_row: Option<u64>,
    /// The body, for a body field.
    pub body: Option<usize>,
    /// `setup`, `gravity`, `body count`, a body field as in [`crate::sim::world::BODY_FIELDS`],
    /// or `hash`.
    pub field: &'static str,
    /// A's value, as text.
    pub a: String,
    /// B's value, as text.
    pub b: String,
}

impl Difference {
    /// The field with its body: `body 7 velocity.y`, or `gravity`.
    pub fn what(&self) -> String {
        match self.body {
            Some(i) => format!("body {i} {}", self.field),
            None => self.field.to_string(),
        }
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.step, self.a_row, self.b_row) {
            (Some(s), Some(ra), Some(rb)) if ra == rb => write!(
                f,
                "first difference at step {s} (row {ra}): {}: A {}, B {}",
                self.what(),
                self.a,
                self.b
            ),
            (Some(s), Some(ra), Some(rb)) => write!(
                f,
                "first difference at step {s} (A row {ra}, B row {rb}): {}: A {}, B {}",
                self.what(),
                self.a,
                self.b
            ),
            _ => write!(
                f,
                "first difference in the {}: A {}, B {}",
                self.what(),
                self.a,
                self.b
            ),
        }
    }
}

/// The steps at which A and B were compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compared {
    /// The first step compared: the first step both inputs hold.
    pub first: u64,
    /// The last step compared (for a difference, its step).
    pub last: u64,
    /// How many rows were compared.
    pub rows: u64,
}

/// What a [`compare`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every step both inputs hold is equal, and every stored hash row was reproduced.
    Identical,
    /// The inputs hold no step in common (each was read to its end): nothing to compare.
    NoCommonStep,
    /// The first difference between A and B at a step both hold.
    Different(Difference),
    /// A replay whose run does not reproduce its own hash row (found before any difference
    /// between A and B).
    StoredRow {
        /// Which input.
        side: Side,
        /// The row.
        row: StoredRow,
    },
}

/// The outcome of [`compare`] with the steps each input holds and the steps compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// What was found.
    pub outcome: Outcome,
    /// The steps A holds (as far as it was read).
    pub a: Held,
    /// The steps B holds.
    pub b: Held,
    /// The steps at which A and B were compared; `None` when none was.
    pub compared: Option<Compared>,
}

/// Compares two inputs **by step number**, reading each a row at a time side by side: the
/// input whose row is at the lower step reads on (a replay's steps are run, its stored
/// hash rows checked) until both are at the same step, then the two are compared row by row
/// while both have rows, then each is read to its end. The first finding ends the reading:
/// a replay row its own run does not reproduce (at one step A is read before B, and both
/// before they are compared), or a difference between A and B. A malformed or cut-short
/// input before that is an error naming that input and where.
pub fn compare(a: &mut RowSource, b: &mut RowSource) -> Result<Comparison, FormatError> {
    let mut compared = None;
    let outcome = match compare_rows(a, b, &mut compared) {
        Ok(o) => o,
        Err((_, Halt::Format(e))) => return Err(e),
        Err((side, Halt::StoredRow(row))) => Outcome::StoredRow { side, row },
    };
    Ok(Comparison {
        outcome,
        a: a.held(),
        b: b.held(),
        compared,
    })
}

fn compare_rows(
    a: &mut RowSource,
    b: &mut RowSource,
    compared: &mut Option<Compared>,
) -> Result<Outcome, (Side, Halt)> {
    let (sa, la) = a.setup();
    let (sb, lb) = b.setup();
    if (sa, la) != (sb, lb) {
        return Ok(Outcome::Different(Difference {
            step: None,
            a_row: None,
            b_row: None,
            body: None,
            field: "setup",
            a: setup_line(&sa, la),
            b: setup_line(&sb, lb),
        }));
    }
    let next_a = |a: &mut RowSource| a.advance().map_err(|h| (Side::A, h));
    let next_b = |b: &mut RowSource| b.advance().map_err(|h| (Side::B, h));
    next_a(a)?;
    next_b(b)?;
    // Align: the input behind reads on until both are at one step or one ends.
    loop {
        match (a.step(), b.step()) {
            (Some(x), Some(y)) if x < y => next_a(a)?,
            (Some(x), Some(y)) if x > y => next_b(b)?,
            _ => break,
        };
    }
    // Side by side: both rows are at the same step, since each input's steps go up by one.
    while let (Some((wa, ha, ra)), Some((wb, hb, rb))) = (a.row(), b.row()) {
        let step = wa.step;
        let c = compared.get_or_insert(Compared {
            first: step,
            last: step,
            rows: 0,
        });
        c.last = step;
        c.rows += 1;
        let found = match first_difference(wa, wb) {
            Some(d) => Some((d.body, d.field, d.a.to_string(), d.b.to_string())),
            None if ha != hb => Some((None, "hash", format!("{ha:016x}"), format!("{hb:016x}"))),
            None => None,
        };
        if let Some((body, field, va, vb)) = found {
            return Ok(Outcome::Different(Difference {
                step: Some(step),
                a_row: Some(ra),
                b_row: Some(rb),
                body,
                field,
                a: va,
                b: vb,
            }));
        }
        next_a(a)?;
        next_b(b)?;
    }
    // Whatever is left of either is read to its end: checked, and its stored rows too.
    while next_a(a)? {}
    while next_b(b)? {}
    Ok(if compared.is_some() {
        Outcome::Identical
    } else {
        Outcome::NoCommonStep
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ostm::Replay;
    use crate::format::trace::{format_row, setup_line, TRACE_MAGIC};
    use crate::sim::op::Op;
    use crate::sim::world::Dims;

    fn world(bodies: u8) -> World {
        World::new(
            Setup {
                dims: Dims::Three,
                bodies,
                seed: 99,
            },
            None,
        )
    }

    #[test]
    fn steps_above_i64_max_are_compared_by_number_as_written() {
        let w = world(1);
        let trace = |step: u64, gravity: i32| {
            let mut w = w.clone();
            w.step = step;
            w.gravity = gravity;
            let mut row = String::new();
            format_row(&mut row, &w, w.hash());
            format!(
                "{TRACE_MAGIC}\n{}\n{row}end rows=1\n",
                setup_line(&w.setup(), None)
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            RowSource::open(&p).unwrap()
        };
        // Steps u64::MAX and 5: no step in common, each range as written.
        let c = compare(
            &mut open("a.trace", trace(u64::MAX, 3)),
            &mut open("b.trace", trace(5, 3)),
        )
        .unwrap();
        assert_eq!(c.outcome, Outcome::NoCommonStep);
        assert_eq!(c.compared, None);
        assert_eq!(
            (c.a.first, c.a.last, c.a.complete),
            (Some(u64::MAX), Some(u64::MAX), true)
        );
        assert_eq!((c.b.first, c.b.last), (Some(5), Some(5)));
        // Both at u64::MAX: compared there.
        let c = compare(
            &mut open("c.trace", trace(u64::MAX, 3)),
            &mut open("d.trace", trace(u64::MAX, 4)),
        )
        .unwrap();
        let Outcome::Different(d) = c.outcome else {
            panic!("the gravities differ: {c:?}");
        };
        assert_eq!(
            (d.step, d.field, d.a.as_str(), d.b.as_str()),
            (Some(u64::MAX), "gravity", "3", "4")
        );
    }

    /// 2D, 4 bodies, seed 5, `steps` steps with an impulse every 7th, hash rows filled in.
    fn small_replay(steps: usize) -> Replay {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Two,
                bodies: 4,
                seed: 5,
            },
            None,
        );
        for i in 0..steps {
            let ops = if i % 7 == 0 {
                vec![Op::Impulse {
                    body: 1,
                    d: [3, 40, 0],
                }]
            } else {
                vec![]
            };
            r.inputs.push_ops(&ops);
        }
        r.compute_hashes();
        r
    }

    /// `r` from step `from` on: the world there as the start snapshot, its rows and inputs.
    fn cut(r: &Replay, from: usize) -> Replay {
        let mut out = Replay::new(r.setup, r.link);
        let mut w = r.start_world();
        for i in 0..from {
            w.step(&r.inputs.ops(i));
        }
        out.start = Some(w);
        for i in from..r.step_count() {
            out.inputs.push_ops(&r.inputs.ops(i));
        }
        out.hashes = r.hashes.as_ref().map(|h| h[from..].to_vec());
        out
    }

    #[test]
    fn replays_starting_at_different_steps_compare_their_common_steps() {
        let dir = tempfile::tempdir().unwrap();
        let full = small_replay(60);
        let mut late = cut(&full, 17);
        let (pa, pb) = (dir.path().join("a.ostm"), dir.path().join("b.ostm"));
        full.write_file(&pa).unwrap();
        late.write_file(&pb).unwrap();
        let run = || {
            compare(
                &mut RowSource::open(&pa).unwrap(),
                &mut RowSource::open(&pb).unwrap(),
            )
            .unwrap()
        };
        let c = run();
        assert_eq!(c.outcome, Outcome::Identical);
        assert_eq!(
            c.compared,
            Some(Compared {
                first: 17,
                last: 60,
                rows: 44
            })
        );
        assert_eq!((c.a.first, c.a.last), (Some(0), Some(60)));
        assert_eq!((c.b.first, c.b.last), (Some(17), Some(60)));
        // One stored row of B (step 30, its row 13) changed: B's own run does not make it.
        let rows = late.hashes.as_mut().unwrap();
        let good = rows[13];
        rows[13] ^= 1;
        late.write_file(&pb).unwrap();
        let c = run();
        assert_eq!(
            c.outcome,
            Outcome::StoredRow {
                side: Side::B,
                row: StoredRow {
                    input: pb.display().to_string(),
                    row: 13,
                    step: 30,
                    stored: good ^ 1,
                    computed: good,
                }
            }
        );
        assert_eq!(c.compared.map(|c| (c.first, c.last)), Some((17, 29)));
    }
}
