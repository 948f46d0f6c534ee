//! The host, modelled around real parts: the real world and scenario stepped, the records
//! it streams, the host's real ring of recent worlds that drift requests are answered from
//! (`ostm_protocol::serve::ring::Worlds`, as `ostm-host`'s hub keeps it), a drift planted
//! at a known step, and the NATS stream it publishes to.

use ostm_protocol::serve::ring::Worlds;
use ostm_protocol::sim::op::encode_input;
use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::wire::{DriftReply, Record};
use ostm_protocol::{Setup, World};

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
    /// The worlds at the last [`RING`] steps and the input stepped from each, and the
    /// world at the host's step.
    ring: Worlds,
    pub perturb: Option<Perturb>,
    /// Whether the perturbation was applied (a body was alive there).
    pub perturbed: Option<Perturb>,
}

impl Host {
    pub fn new(setup: Setup, life: u32, perturb: Option<Perturb>) -> Host {
        let world = World::new(setup, None);
        Host {
            setup,
            ring: Worlds::new(world.clone(), RING + 1),
            world,
            scenario: Scenario::new(setup.seed),
            life,
            perturb,
            perturbed: None,
        }
    }

    /// One step: the record for it.
    pub fn step(&mut self) -> Record {
        let step = self.world.step;
        let ops = self.scenario.next_input(&self.world);
        let input = encode_input(&ops);
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
        let input = bytes::Bytes::from(input);
        self.ring.push(&self.world, input.clone());
        Record { step, hash, input }
    }

    /// The answer to a drift request for `step`: the world then, and the recomputation of
    /// the step before it with its stage hashes.
    pub fn drift_reply(&self, step: u64) -> DriftReply {
        self.ring.held(step).answer()
    }
}
