//! A stand-in for `ostm_protocol::scenario::Scenario` (being written on another branch),
//! with the same interface: `Scenario::new(seed).next_input(&world)`. Replaced by the real
//! one once it is on main; until then the embedded world's inputs come from here.

use ostm_protocol::rng::Sfc32;
use ostm_protocol::world::BOX_MM;
use ostm_protocol::{Op, World};

/// A seeded, deterministic source of step inputs.
#[derive(Debug, Clone)]
pub struct Scenario {
    rng: Sfc32,
}

impl Scenario {
    /// A scenario for `seed` (its generator is seeded apart from the world's).
    pub fn new(seed: u32) -> Scenario {
        Scenario {
            rng: Sfc32::from_seed(seed ^ 0x314E_4353),
        }
    }

    /// The next step's ops, given the world before that step.
    pub fn next_input(&mut self, world: &World) -> Vec<Op> {
        let mut ops = Vec::new();
        if self.rng.next_u32() % 4 != 0 {
            return ops;
        }
        let slots = world.bodies.len().max(1) as i32;
        let body = self.rng.range(0, slots - 1) as u8;
        match self.rng.next_u32() % 10 {
            0..=5 => {
                let d = [
                    self.rng.range(-200, 200),
                    self.rng.range(-200, 200),
                    self.rng.range(-200, 200),
                ];
                ops.push(Op::Impulse { body, d });
            }
            6 => {
                let pos = [
                    self.rng.range(0, BOX_MM),
                    self.rng.range(0, BOX_MM),
                    self.rng.range(0, BOX_MM),
                ];
                ops.push(Op::Spawn { pos });
            }
            7 if world.alive_count() > 8 => ops.push(Op::Remove { body }),
            8 => ops.push(Op::Gravity {
                g: [0, 1, 2, 3, 5][self.rng.range(0, 4) as usize],
            }),
            _ => {
                let pos = [
                    self.rng.range(0, BOX_MM),
                    self.rng.range(0, BOX_MM),
                    self.rng.range(0, BOX_MM),
                ];
                ops.push(Op::Teleport { body, pos });
            }
        }
        ops
    }
}
