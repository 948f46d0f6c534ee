//! Where the host's world and its inputs come from: the embedded default, a world made
//! from `--dims/--bodies/--seed`, or a replay file's inputs.

use bytes::Bytes;
use ostm_protocol::op::encode_input;
use ostm_protocol::scenario::Scenario;
use ostm_protocol::{Dims, Op, Replay, Setup, World};
use std::path::Path;

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
