//! The host's state, its real parts as `ostm-host`'s hub keeps them: the real world and
//! scenario stepped, the real ring of the last records every TCP connection takes from
//! (`ostm_protocol::serve::ring::Records`), the real ring of recent worlds drift requests
//! are answered from (`serve::ring::Worlds`), the stream's end once it has ended, and a
//! drift planted at a known step. Its connections are the real machines, driven in
//! [`crate::tcp`].

use ostm_protocol::serve::ring::{Records, Worlds};
use ostm_protocol::serve::{Joined, Take};
use ostm_protocol::session::Plant;
use ostm_protocol::sim::op::encode_input;
use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::wire::{DriftReply, EncodedFrame, End, HostCodec, Record, ToViewer};
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
    /// The last [`crate::QUEUE`] records, encoded once, that every connection takes from.
    pub records: Records,
    /// How the stream ended, once it has.
    pub ended: Option<End>,
    /// The viewers joined so far (the next one's id).
    joined: u64,
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
            records: Records::new(crate::QUEUE),
            ended: None,
            joined: 0,
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
        let r = Record { step, hash, input };
        if let Ok(frame) = HostCodec::encode_frame(&ToViewer::Record(r.clone())) {
            self.records.push(self.world.step, frame);
        }
        r
    }

    /// Plants a fault in the host's rings (the simulation's `--plant`).
    pub fn plant(&mut self, plant: Plant) {
        self.records.plant(plant);
        self.ring.plant(plant);
    }

    /// A viewer joins at the host's step (`id`: again, after a resync), unless the stream
    /// has ended.
    pub fn join(&mut self, id: Option<u64>) -> Option<Joined> {
        if self.ended.is_some() {
            return None;
        }
        let id = id.unwrap_or_else(|| {
            self.joined += 1;
            self.joined
        });
        Some(Joined {
            id,
            world: self.world.clone(),
            position: self.records.next(),
        })
    }

    /// The records past `position`, as the hub's take gives them.
    pub fn take(&self, position: &mut u64, out: &mut Vec<EncodedFrame>) -> Take {
        let max = ostm_protocol::serve::BATCH;
        self.records
            .take(position, max, self.ended.as_ref(), out)
            .take
    }

    /// The answer to a drift request for `step`: the world then, and the recomputation of
    /// the step before it with its stage hashes.
    pub fn drift_reply(&self, step: u64) -> DriftReply {
        self.ring.held(step).answer()
    }
}
