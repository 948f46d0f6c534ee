//! The host, modelled: the real world and scenario stepped, the records it streams, the
//! ring of recent worlds it answers drift requests from, a drift planted at a known step,
//! and the NATS stream it publishes to.

use ostm_protocol::sim::op::encode_input;
use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::wire::{DriftReply, DriftStatus, Record};
use ostm_protocol::{Op, Setup, World};
use std::collections::VecDeque;

/// Recent worlds the host keeps for drift requests.
pub const RING: usize = 48;

/// A drift planted in the host's world: at `step`, body `body`'s velocity.x moves by one,
/// outside the step (as `ostm-host serve --perturb` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perturb {
    pub step: u64,
    pub body: u8,
}

/// One life of the host (a restart starts another, from the setup at step 0).
pub struct Host {
    pub setup: Setup,
    pub world: World,
    scenario: Scenario,
    /// Which life this is (0, then 1 after a restart, …).
    pub life: u32,
    /// The world at each recent step, and the input stepped from it.
    ring: VecDeque<(World, Vec<Op>)>,
    pub perturb: Option<Perturb>,
    /// Whether the perturbation was applied (a body was alive there).
    pub perturbed: Option<Perturb>,
}

impl Host {
    pub fn new(setup: Setup, life: u32, perturb: Option<Perturb>) -> Host {
        Host {
            setup,
            world: World::new(setup, None),
            scenario: Scenario::new(setup.seed),
            life,
            ring: VecDeque::new(),
            perturb,
            perturbed: None,
        }
    }

    /// One step: the record for it.
    pub fn step(&mut self) -> Record {
        let step = self.world.step;
        let ops = self.scenario.next_input(&self.world);
        if self.ring.len() == RING {
            self.ring.pop_front();
        }
        self.ring.push_back((self.world.clone(), ops.clone()));
        self.world.step(&ops);
        if let Some(p) = self.perturb.filter(|p| p.step == self.world.step) {
            if let Some(b) = self.world.bodies.body_mut(usize::from(p.body)) {
                if b.alive {
                    b.vel[0] += 1;
                    self.perturbed = Some(p);
                }
            }
        }
        let hash = self.world.hash();
        Record {
            step,
            hash,
            input: encode_input(&ops).into(),
        }
    }

    /// The answer to a drift request for `step`: the world then, and the recomputation of
    /// the step before it with its stage hashes.
    pub fn drift_reply(&self, step: u64) -> DriftReply {
        if step > self.world.step {
            return DriftReply {
                step,
                status: DriftStatus::NotReached,
                world: None,
                stages: None,
            };
        }
        let at = |s: u64| self.ring.iter().find(|(w, _)| w.step == s);
        let world = if step == self.world.step {
            Some(self.world.clone())
        } else {
            at(step).map(|(w, _)| w.clone())
        };
        let stages = step
            .checked_sub(1)
            .and_then(at)
            .map(|(w, ops)| w.clone().step_with_stage_hashes(ops));
        match world {
            Some(w) => DriftReply {
                step,
                status: DriftStatus::Held,
                world: Some(w),
                stages,
            },
            None => DriftReply {
                step,
                status: DriftStatus::TooOld,
                world: None,
                stages: None,
            },
        }
    }
}
