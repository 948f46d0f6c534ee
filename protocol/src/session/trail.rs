//! The world before the step being verified, for a drift report, without copying the
//! world at every step: a checkpoint of the world every [`CHECKPOINT_EVERY`] verified steps
//! (and at every snapshot), and the inputs verified since. When a step drifts, the world
//! before it is the checkpoint run on through those inputs.

use crate::sim::op::for_each_op;
use crate::{Op, World};

/// Verified steps between two checkpoints: a drift costs at most this many steps to
/// rebuild the world before it; a verified step costs a copy of its input.
pub const CHECKPOINT_EVERY: usize = 4096;

/// A checkpoint and the inputs verified since.
#[derive(Debug, Clone)]
pub struct Trail {
    /// Verified steps between two checkpoints.
    every: usize,
    checkpoint: World,
    /// The inputs since the checkpoint, end to end.
    inputs: Vec<u8>,
    /// Where each input ends in `inputs`.
    ends: Vec<usize>,
}

impl Trail {
    /// A trail that starts at `world`.
    pub fn new(world: &World) -> Trail {
        Trail::with_checkpoints(world, CHECKPOINT_EVERY)
    }

    /// A trail that starts at `world` and takes a checkpoint every `every` verified steps
    /// (at least 1).
    pub fn with_checkpoints(world: &World, every: usize) -> Trail {
        let every = every.max(1);
        Trail {
            every,
            checkpoint: world.clone(),
            inputs: Vec::new(),
            ends: Vec::with_capacity(every.min(CHECKPOINT_EVERY)),
        }
    }

    /// Starts again at `world` (a snapshot, or a checkpoint).
    pub fn restart(&mut self, world: &World) {
        self.checkpoint.clone_from(world);
        self.inputs.clear();
        self.ends.clear();
    }

    /// `input` was verified, taking the world to `after`.
    pub fn verified(&mut self, input: &[u8], after: &World) {
        if self.ends.len() + 1 >= self.every {
            self.restart(after);
        } else {
            self.inputs.extend_from_slice(input);
            self.ends.push(self.inputs.len());
        }
    }

    /// The world after every verified input: the world before the next step.
    pub fn world(&self) -> World {
        let mut world = self.checkpoint.clone();
        let mut ops: Vec<Op> = Vec::new();
        let mut start = 0;
        for &end in &self.ends {
            ops.clear();
            // Each input was decoded and checked before it was verified.
            let _ = for_each_op("trail", &self.inputs[start..end], 0, |op| ops.push(op));
            world.step(&ops);
            start = end;
        }
        world
    }
}

#[cfg(test)]
mod tests {
    use super::{Trail, CHECKPOINT_EVERY};
    use crate::sim::op::encode_input;
    use crate::sim::scenario::Scenario;
    use crate::{Dims, Setup, World};

    #[test]
    fn the_trail_gives_the_world_before_every_step_across_checkpoints() {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 24,
            seed: 10_000,
        };
        let mut sc = Scenario::new(setup.seed);
        let mut world = World::new(setup, None);
        let mut trail = Trail::new(&world);
        for n in 0..(2 * CHECKPOINT_EVERY + 7) {
            if n % 997 == 0 || n + 1 == 2 * CHECKPOINT_EVERY {
                assert_eq!(trail.world().hash(), world.hash(), "before step {n}");
                assert_eq!(trail.world().step, world.step);
            }
            let ops = sc.next_input(&world);
            world.step(&ops);
            trail.verified(&encode_input(&ops), &world);
        }
        assert_eq!(trail.world().hash(), world.hash());
        // A planted fault: an input left out of the trail gives another world.
        let before = trail.world();
        let ops = sc.next_input(&world);
        world.step(&ops);
        assert_ne!(
            trail.world().hash(),
            world.hash(),
            "the step not pushed is missing"
        );
        trail.verified(&encode_input(&ops), &world);
        assert_ne!(before.hash(), trail.world().hash());
    }
}
