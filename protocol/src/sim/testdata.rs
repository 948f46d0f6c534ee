//! The generated test data (`testdata/*.ostm`) and its golden behaviour file
//! (`testdata/golden.json`).
//!
//! Every replay here is made the same way: the world built from the setup (and link),
//! a [`Scenario`] seeded with the setup's seed giving each step's ops, and the hash row
//! after every step. `docs/testdata.md` lists the files and describes the format of
//! `golden.json`.

use crate::format::ostm::Replay;
use crate::sim::link::{Link, Role};
use crate::sim::scenario::Scenario;
use crate::sim::world::{Dims, Setup, World};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One generated replay: its file name and how it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The file name inside `testdata/`.
    pub name: &'static str,
    pub setup: Setup,
    pub link: Option<Link>,
    /// With `Some(s)`, the world and the scenario first run `s` steps unrecorded, and the
    /// replay holds the world at step `s` as its start snapshot (flag bit 1).
    pub start_at: Option<u64>,
    /// Steps recorded.
    pub steps: u32,
}

const fn setup(dims: Dims, bodies: u8, seed: u32) -> Setup {
    Setup { dims, bodies, seed }
}

/// The body the linked pair moves, and the step at which it moves.
pub const LINK_BODY: u8 = 3;
/// See [`LINK_BODY`].
pub const LINK_TRANSFER_STEP: u16 = 150;
/// The step at which `test-start-snapshot.ostm`'s start snapshot is taken.
pub const START_SNAPSHOT_STEP: u64 = 1234;
/// The step at which `test-lively.ostm` starts: 500 steps before the scenario's lively
/// phase ([`crate::sim::scenario::LIVELY_FROM`]), so the file crosses into it.
pub const LIVELY_START_STEP: u64 = 9500;

/// Every generated replay, in the order they are written.
pub fn specs() -> Vec<Spec> {
    let link = |role| {
        Some(Link {
            role,
            body: LINK_BODY,
            transfer_step: LINK_TRANSFER_STEP,
        })
    };
    let fields = Some(Link {
        role: Role::FieldsOnly,
        body: 0,
        transfer_step: 0,
    });
    vec![
        Spec {
            name: "test-10000.ostm",
            setup: setup(Dims::Three, 24, 10_000),
            link: None,
            start_at: None,
            steps: 10_000,
        },
        Spec {
            name: "test-2d-600.ostm",
            setup: setup(Dims::Two, 12, 600),
            link: None,
            start_at: None,
            steps: 600,
        },
        Spec {
            name: "test-field-2d.ostm",
            setup: setup(Dims::Two, 16, 2),
            link: fields,
            start_at: None,
            steps: 600,
        },
        Spec {
            name: "test-field-3d.ostm",
            setup: setup(Dims::Three, 16, 3),
            link: fields,
            start_at: None,
            steps: 600,
        },
        Spec {
            name: "test-link-left.ostm",
            setup: setup(Dims::Three, 8, 150),
            link: link(Role::Sender),
            start_at: None,
            steps: 300,
        },
        Spec {
            name: "test-link-right.ostm",
            setup: setup(Dims::Three, 8, 151),
            link: link(Role::Receiver),
            start_at: None,
            steps: 300,
        },
        Spec {
            name: "test-start-snapshot.ostm",
            setup: setup(Dims::Three, 20, 1234),
            link: None,
            start_at: Some(START_SNAPSHOT_STEP),
            steps: 1000,
        },
        Spec {
            name: "test-lively.ostm",
            setup: setup(Dims::Three, 24, 10_000),
            link: None,
            start_at: Some(LIVELY_START_STEP),
            steps: 2000,
        },
    ]
}

impl Spec {
    /// Runs the scenario and returns the replay, hash rows included.
    pub fn generate(&self) -> Replay {
        let mut world = World::new(self.setup, self.link);
        let mut scenario = Scenario::new(self.setup.seed);
        let mut replay = Replay::new(self.setup, self.link);
        if let Some(s) = self.start_at {
            for _ in 0..s {
                let ops = scenario.next_input(&world);
                world.step(&ops);
            }
            replay.start = Some(world.clone());
        }
        let mut rows = Vec::with_capacity(self.steps as usize + 1);
        rows.push(world.hash());
        for _ in 0..self.steps {
            let ops = scenario.next_input(&world);
            replay.inputs.push_ops(&ops);
            world.step(&ops);
            rows.push(world.hash());
        }
        replay.hashes = Some(rows);
        replay
    }
}

/// The linked start that base A of the malformed corpus (`testdata/malformed/`) and the
/// viewer's `inspect` tests build on: 3D, 2 bodies, seed 1, a sender link (body 1 leaves
/// at step 5), and the world after three empty steps as its start snapshot (step 3); no
/// steps and no hash rows yet.
pub fn linked_start() -> Replay {
    let setup = setup(Dims::Three, 2, 1);
    let link = Link {
        role: Role::Sender,
        body: 1,
        transfer_step: 5,
    };
    let mut start = World::new(setup, Some(link));
    for _ in 0..3 {
        start.step(&[]);
    }
    let mut r = Replay::new(setup, Some(link));
    r.start = Some(start);
    r
}

/// Every generated file as (name, bytes), in [`specs`] order, then the pose cache
/// [`GHOST_FILE`].
pub fn files() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = specs()
        .iter()
        .map(|s| (s.name.to_string(), s.generate().to_bytes()))
        .collect();
    out.push((GHOST_FILE.to_string(), ghost().to_bytes()));
    out
}

/// The pose cache of `test-2d-600.ostm`: see [`ghost`].
pub const GHOST_FILE: &str = "test-2d-ghost.ospc";

/// `test-2d-ghost.ospc`: the 2D replay's bodies for 40 frames from step 200, drawn 400 mm
/// to the right (`ostm-viewer ghost testdata/test-2d-600.ostm --from 200 --frames 40
/// --offset 400,0`; docs/pose-cache.md).
pub fn ghost() -> crate::format::ospc::PoseCache {
    let replay = specs()
        .iter()
        .find(|s| s.name == "test-2d-600.ostm")
        .map(Spec::generate)
        .unwrap_or_else(|| Replay::new(setup(Dims::Two, 1, 0), None));
    // 200 + 39 <= 600 and 2D positions plus 400 stay far inside i32: this cannot fail.
    crate::format::ospc::PoseCache::from_replay(&replay, 200, 40, [400, 0, 0])
        .unwrap_or_else(|_| crate::format::ospc::PoseCache::new(Dims::Two, 200, 1))
}

/// The golden file's name inside `testdata/`.
pub const GOLDEN_FILE: &str = "golden.json";
/// The golden file's `format` field.
pub const GOLDEN_FORMAT: &str = "ostm-golden@1";

/// `testdata/golden.json`: each replay's final hash and behaviour numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Golden {
    /// Always [`GOLDEN_FORMAT`].
    pub format: String,
    pub replays: Vec<GoldenReplay>,
}

/// One replay's numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoldenReplay {
    /// File name inside `testdata/`.
    pub file: String,
    /// The world's step after the last step (start step + step count).
    pub final_step: u64,
    /// The world hash after the last step, `0x` and 16 lowercase hex digits.
    pub final_hash: String,
    /// Every slot of the final world, spawned ones included.
    pub bodies: Vec<GoldenBody>,
}

/// One body slot at the end of a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoldenBody {
    pub index: usize,
    pub alive: bool,
    pub position: [i32; 3],
    pub velocity: [i32; 3],
    /// The number of the first step after which the body's still count is at least 1
    /// (counting from the replay's start step); `null` if that never happens.
    pub first_rest_step: Option<u64>,
}

/// A hash as written in `golden.json`.
pub fn hex_hash(h: u64) -> String {
    format!("0x{h:016x}")
}

/// Runs a replay from its start world and records its golden numbers.
pub fn golden_replay(file: &str, replay: &Replay) -> GoldenReplay {
    let mut world = replay.start_world();
    let mut rest: Vec<Option<u64>> = Vec::new();
    for i in 0..replay.step_count() {
        let number = world.step;
        world.step(&replay.inputs.ops(i));
        rest.resize(world.bodies.len(), None);
        for (r, b) in rest.iter_mut().zip(&world.bodies) {
            if r.is_none() && b.still >= 1 {
                *r = Some(number);
            }
        }
    }
    rest.resize(world.bodies.len(), None);
    GoldenReplay {
        file: file.to_string(),
        final_step: world.step,
        final_hash: hex_hash(world.hash()),
        bodies: world
            .bodies
            .iter()
            .zip(rest)
            .enumerate()
            .map(|(index, (b, first_rest_step))| GoldenBody {
                index,
                alive: b.alive,
                position: b.pos,
                velocity: b.vel,
                first_rest_step,
            })
            .collect(),
    }
}

/// One number of the golden file, named for people: `FILE: body 5 position.y`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenNumber {
    pub name: String,
    pub value: String,
}

impl Golden {
    /// Every number in the file, in file order, each with its name.
    pub fn numbers(&self) -> Vec<GoldenNumber> {
        let mut out = Vec::new();
        let mut push = |name: String, value: String| out.push(GoldenNumber { name, value });
        for r in &self.replays {
            let f = &r.file;
            push(format!("{f}: final step"), r.final_step.to_string());
            push(format!("{f}: final hash"), r.final_hash.clone());
            push(format!("{f}: body count"), r.bodies.len().to_string());
            for b in &r.bodies {
                let i = b.index;
                push(format!("{f}: body {i} alive"), b.alive.to_string());
                for (a, axis) in ["x", "y", "z"].iter().enumerate() {
                    push(
                        format!("{f}: body {i} position.{axis}"),
                        b.position[a].to_string(),
                    );
                }
                for (a, axis) in ["x", "y", "z"].iter().enumerate() {
                    push(
                        format!("{f}: body {i} velocity.{axis}"),
                        b.velocity[a].to_string(),
                    );
                }
                let rest = b
                    .first_rest_step
                    .map_or("null".to_string(), |s| s.to_string());
                push(format!("{f}: body {i} first rest step"), rest);
            }
        }
        out
    }
}

/// A number that differs between two golden files; `None` where one file lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenChange {
    pub name: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

impl std::fmt::Display for GoldenChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_string());
        write!(
            f,
            "{}: {} -> {}",
            self.name,
            show(&self.old),
            show(&self.new)
        )
    }
}

/// Every number that differs from `old` to `new`, in `new`'s order, then those only in `old`.
pub fn golden_changes(old: &Golden, new: &Golden) -> Vec<GoldenChange> {
    let old_numbers = old.numbers();
    let new_numbers = new.numbers();
    let index = |list: &[GoldenNumber]| -> BTreeMap<String, String> {
        list.iter()
            .map(|n| (n.name.clone(), n.value.clone()))
            .collect()
    };
    let (old_map, new_map) = (index(&old_numbers), index(&new_numbers));
    let mut out = Vec::new();
    for n in &new_numbers {
        let before = old_map.get(&n.name).cloned();
        if before.as_deref() != Some(n.value.as_str()) {
            out.push(GoldenChange {
                name: n.name.clone(),
                old: before,
                new: Some(n.value.clone()),
            });
        }
    }
    for o in &old_numbers {
        if !new_map.contains_key(&o.name) {
            out.push(GoldenChange {
                name: o.name.clone(),
                old: Some(o.value.clone()),
                new: None,
            });
        }
    }
    out
}

/// The golden numbers of every replay in `dir` named by [`specs`], read from the files.
pub fn golden_of_dir(dir: &std::path::Path) -> Result<Golden, crate::FormatError> {
    let mut replays = Vec::new();
    for spec in specs() {
        let replay = Replay::read_file(&dir.join(spec.name))?;
        replays.push(golden_replay(spec.name, &replay));
    }
    Ok(Golden {
        format: GOLDEN_FORMAT.to_string(),
        replays,
    })
}

/// The golden file's text: pretty JSON with a final newline.
pub fn golden_json(g: &Golden) -> String {
    let mut s = serde_json::to_string_pretty(g).unwrap_or_default();
    s.push('\n');
    s
}

/// Writes a long replay for the benchmarks (`benches/seek.rs`, the viewer's
/// `benches/watch.rs`): 3D, `bodies` bodies, seed 12 345, an impulse on one body every 100
/// steps so the world keeps moving and nothing spawned or removed, with hash rows, through
/// the [`crate::format::recording::Recorder`].
///
/// # Errors
/// The file cannot be written.
pub fn write_moving_replay(path: &std::path::Path, bodies: u8, steps: u32) -> std::io::Result<()> {
    use crate::sim::op::{encode_input, Op};
    let mut world = World::new(
        Setup {
            dims: Dims::Three,
            bodies,
            seed: 12_345,
        },
        None,
    );
    let mut rec = crate::format::recording::Recorder::create(path, &world, false)?;
    for i in 0..steps {
        let ops = if i % 100 == 0 {
            vec![Op::Impulse {
                body: (i / 100 % bodies.max(1) as u32) as u8,
                d: [40, 90, -30],
            }]
        } else {
            vec![]
        };
        world.step(&ops);
        rec.push(&encode_input(&ops), world.hash())?;
    }
    rec.finish()?;
    Ok(())
}
