//! Where the host's world and its inputs come from: the embedded default, a world made
//! from `--dims/--bodies/--seed`, or a replay file's inputs; any of them may start from
//! an imported keyframe (`--from-keyframe`) instead of its own start.

use bytes::Bytes;
use ostm_protocol::format::keyframe;
use ostm_protocol::sim::op::encode_input;
use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::{Dims, Op, Replay, Setup, World};
use std::path::Path;
use tracing::info;

/// The embedded default world: 3D, 24 bodies, seed 10 000, inputs from the scenario of
/// the same seed. It is the world of `testdata/test-10000.ostm`, so the host's first
/// 10 000 hashes are that file's hash rows.
pub const DEFAULT_SETUP: Setup = Setup {
    dims: Dims::Three,
    bodies: 24,
    seed: 10_000,
};

/// One step's input, as bytes (sent and recorded) and as ops (run).
pub struct StepInput {
    pub bytes: Bytes,
    pub ops: Vec<Op>,
    /// The hash the replay file holds for the world after this step, if it holds one.
    pub expected_hash: Option<u64>,
}

/// A world and what drives it.
pub enum Source {
    /// Inputs generated from the seed, for ever.
    Generated { world: World, scenario: Scenario },
    /// A replay's inputs, from its start world; ends after its last step.
    Replay {
        world: World,
        replay: Box<Replay>,
        next: usize,
    },
}

impl Source {
    /// A generated world from a setup, starting at step 0.
    pub fn generated(setup: Setup) -> Source {
        Source::Generated {
            world: World::new(setup, None),
            scenario: Scenario::new(setup.seed),
        }
    }

    /// A replay file's world and inputs.
    ///
    /// # Errors
    /// The file cannot be read or is malformed.
    pub fn replay(path: &Path) -> Result<Source, ostm_protocol::FormatError> {
        let replay = Replay::read_file(path)?;
        Ok(Source::Replay {
            world: replay.start_world(),
            replay: Box::new(replay),
            next: 0,
        })
    }

    /// A keyframe's world (its setup and link become the host's), driven by `replay`'s
    /// inputs from the keyframe's tick on when given, else by the scenario of its seed.
    ///
    /// The scenario is a function of the worlds it was shown, so it is first brought to
    /// the keyframe's tick the one way it can be: by running the generated world of the
    /// same setup and link from step 0 to that tick (`tick` steps at start-up). A keyframe
    /// taken from that generated world (the embedded default, or `--dims/--bodies/--seed`)
    /// therefore continues exactly like the original stream; any other keyframe gets the
    /// scenario's inputs as they fall from that tick on.
    ///
    /// # Errors
    /// An unreadable or malformed keyframe or replay, or a keyframe that does not belong
    /// to the replay (another setup or link, a tick outside its steps).
    pub fn from_keyframe(keyframe: &Path, replay: Option<&Path>) -> Result<Source, String> {
        let world = keyframe::read_file(keyframe)
            .map_err(|e| e.to_string())?
            .world;
        if let Some(path) = replay {
            let replay = Replay::read_file(path).map_err(|e| e.to_string())?;
            let next = keyframe::row_in(&replay, &world)
                .map_err(|e| format!("{}: {e}", keyframe.display()))?;
            return Ok(Source::Replay {
                world,
                replay: Box::new(replay),
                next,
            });
        }
        let setup = world.setup();
        let mut shadow = World::new(setup, world.link());
        let mut scenario = Scenario::new(setup.seed);
        info!(
            tick = world.step,
            "bringing the scenario to the keyframe's tick"
        );
        while shadow.step < world.step {
            let ops = scenario.next_input(&shadow);
            shadow.step(&ops);
        }
        if shadow == world {
            info!("the keyframe is the generated world at its tick: the stream continues it");
        } else {
            info!("the keyframe is not the generated world at its tick: the scenario's inputs drive it from there");
        }
        Ok(Source::Generated { world, scenario })
    }

    /// Whether a recording of this source needs a start snapshot: its world is not its
    /// setup's world at step 0 (a replay with a start snapshot, or a keyframe).
    pub fn needs_start_snapshot(&self) -> bool {
        let w = self.world();
        matches!(self, Source::Replay { replay, .. } if replay.start.is_some())
            || *w != World::new(w.setup(), w.link())
    }

    /// The world as it is now.
    pub fn world(&self) -> &World {
        match self {
            Source::Generated { world, .. } | Source::Replay { world, .. } => world,
        }
    }

    /// The world, to step or perturb.
    pub fn world_mut(&mut self) -> &mut World {
        match self {
            Source::Generated { world, .. } | Source::Replay { world, .. } => world,
        }
    }

    /// The next step's input; `None` when a replay has run out.
    pub fn next_input(&mut self) -> Option<StepInput> {
        match self {
            Source::Generated { world, scenario } => {
                let ops = scenario.next_input(world);
                Some(StepInput {
                    bytes: Bytes::from(encode_input(&ops)),
                    ops,
                    expected_hash: None,
                })
            }
            Source::Replay { replay, next, .. } => {
                if *next >= replay.step_count() {
                    return None;
                }
                let i = *next;
                *next += 1;
                let expected_hash = replay
                    .hashes
                    .as_ref()
                    .and_then(|rows| rows.get(i + 1).copied());
                Some(StepInput {
                    bytes: Bytes::copy_from_slice(replay.inputs.get(i)),
                    ops: replay.inputs.ops(i),
                    expected_hash,
                })
            }
        }
    }
}
