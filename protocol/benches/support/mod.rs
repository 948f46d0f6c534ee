//! The worlds that `benches/step.rs` and `examples/step_cost.rs` step: one module, so that
//! the bench's times and the example's instruction counts are of the same work.

use ostm_protocol::world::{Dims, Setup};
use ostm_protocol::World;

/// A world with `bodies` slots alive, run 100 steps so bodies are mid-flight.
pub fn world(dims: Dims, bodies: u8) -> World {
    let mut w = World::new(
        Setup {
            dims,
            bodies,
            seed: 1,
        },
        None,
    );
    for _ in 0..100 {
        w.step(&[]);
    }
    w
}

/// Ten copies of a world at ten points of a 10 000-step run (steps 0, 1 000, ..., 9 000 of
/// it), stepped in turn, each put back to its point after 1 000 steps: any ten iterations
/// step the whole run's mix of bodies in flight, bouncing and at rest, so that the bench's
/// fastest slice is not a slice where most bodies happened to rest.
pub struct Phases {
    start: Vec<World>,
    worlds: Vec<World>,
    taken: Vec<u32>,
    next: usize,
}

impl Phases {
    pub fn new(fresh: &World) -> Phases {
        let mut w = fresh.clone();
        let mut start = Vec::new();
        for i in 0..10_000u32 {
            if i.is_multiple_of(1_000) {
                start.push(w.clone());
            }
            w.step(&[]);
        }
        Phases {
            worlds: start.clone(),
            taken: vec![0; start.len()],
            start,
            next: 0,
        }
    }

    /// The world whose turn it is to step.
    pub fn world(&mut self) -> &mut World {
        let i = self.next;
        self.next = (i + 1) % self.worlds.len();
        if self.taken[i] == 1_000 {
            self.worlds[i].clone_from(&self.start[i]);
            self.taken[i] = 0;
        }
        self.taken[i] += 1;
        &mut self.worlds[i]
    }
}
