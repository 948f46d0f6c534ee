//! The worlds that `benches/step.rs` and `examples/step_cost.rs` step: one module, so that
//! the bench's times and the example's instruction counts are of the same work; and how the
//! benches time a sample on a shared machine ([`fastest_slice`]).

use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::sim::world::{Dims, Setup};
use ostm_protocol::{Op, World};
use std::time::{Duration, Instant};

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
/// fastest slice is not a slice where most bodies happened to rest. The run has no inputs
/// ([`Phases::new`]), or the scenario's ([`Phases::with_inputs`]: impulses, teleports,
/// spawns, removals and gravity changes, what a live stream carries), and then each world
/// is given the inputs of the run's steps it takes.
pub struct Phases {
    start: Vec<World>,
    worlds: Vec<World>,
    taken: Vec<u32>,
    next: usize,
    /// The input of each of the run's steps (none when the run has no inputs).
    inputs: Vec<Vec<Op>>,
}

/// Steps between two of the run's points.
const SEGMENT: u32 = 1_000;

impl Phases {
    /// The run without inputs.
    pub fn new(fresh: &World) -> Phases {
        Phases::run(fresh, None)
    }

    /// The run with the inputs of `Scenario::new(seed)`.
    #[allow(dead_code)] // Used by `examples/step_ratio.rs` only.
    pub fn with_inputs(fresh: &World, seed: u32) -> Phases {
        Phases::run(fresh, Some(Scenario::new(seed)))
    }

    fn run(fresh: &World, mut scenario: Option<Scenario>) -> Phases {
        let mut w = fresh.clone();
        let mut start = Vec::new();
        let mut inputs = Vec::new();
        for i in 0..10 * SEGMENT {
            if i.is_multiple_of(SEGMENT) {
                start.push(w.clone());
            }
            let ops = scenario
                .as_mut()
                .map_or_else(Vec::new, |s| s.next_input(&w));
            w.step(&ops);
            if scenario.is_some() {
                inputs.push(ops);
            }
        }
        Phases {
            worlds: start.clone(),
            taken: vec![0; start.len()],
            start,
            next: 0,
            inputs,
        }
    }

    /// The world whose turn it is to step, and the input of its step.
    pub fn turn(&mut self) -> (&mut World, &[Op]) {
        let i = self.next;
        self.next = (i + 1) % self.worlds.len();
        if self.taken[i] == SEGMENT {
            self.worlds[i].clone_from(&self.start[i]);
            self.taken[i] = 0;
        }
        let k = i * SEGMENT as usize + self.taken[i] as usize;
        self.taken[i] += 1;
        let ops = self.inputs.get(k).map_or(&[][..], Vec::as_slice);
        (&mut self.worlds[i], ops)
    }

    /// The world whose turn it is to step (its input is none: see [`Phases::new`]).
    #[allow(dead_code)] // Used by `benches/step.rs` and `examples/step_cost.rs`.
    pub fn world(&mut self) -> &mut World {
        self.turn().0
    }
}

/// The time of `iters` calls of `f`, taken from the fastest of its slices of at most 256
/// calls, scaled to `iters`: the machine is shared, and a slice that was preempted does not
/// count (see the header of `benches/step.rs`).
#[allow(dead_code)] // Used by the benches only.
pub fn fastest_slice(iters: u64, mut f: impl FnMut()) -> Duration {
    let per = iters.clamp(1, 256);
    let slices = iters.div_ceil(per);
    let mut best = Duration::MAX;
    for _ in 0..slices {
        let t = Instant::now();
        for _ in 0..per {
            f();
        }
        best = best.min(t.elapsed());
    }
    let nanos = best.as_nanos() * u128::from(iters) / u128::from(per);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}
