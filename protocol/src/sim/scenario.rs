//! A seeded input generator: the step inputs of the generated test data and of the
//! host's embedded default world.
//!
//! A [`Scenario`] is a pure function of its seed and of the worlds it is shown: called
//! once per step with the world as it is before that step, it returns that step's ops.
//! Two scenarios with the same seed shown the same worlds return the same ops.
//!
//! # Its random stream
//!
//! The scenario draws from its own [`Sfc32`], seeded with `seed ^ SCENARIO_SALT`
//! (`Sfc32::from_seed`, so 12 outputs are discarded after seeding). It never touches
//! the world's own generator, so the same seed gives a world and an unrelated input stream.
//!
//! # The schedule
//!
//! Calls are numbered `n = 0, 1, 2, …`; `k = n % CYCLE` (2000) is the position in the
//! current cycle. Steps `k < BUSY` (300) are busy, the remaining 1700 are quiet: no ops and
//! no draws at all, so that bodies come to rest. A busy step's ops are its scheduled ops
//! (the table below, in the order given), then its random ops.
//!
//! | k | scheduled ops |
//! |---|---|
//! | 10 | spawn at `(MIN, MAX, MIN)`, spawn at `(MAX, MIN, MAX)` (i32 extremes) |
//! | 20, 22, …, 98 | two random spawns each (80 in all: fills every world to 64 slots, then no-ops) |
//! | 100 | gravity 0 |
//! | 140 | gravity -2 (bodies rise) |
//! | 180 | gravity 3 (the default, back) |
//! | 200 | teleport a live body to `(-5000, 15000, 20000)`, outside the box on every axis |
//! | 240 | impulse a live body by `(MAX, MIN, MAX)` |
//! | 241 | impulse a live body by `(MIN, MAX, MIN)` |
//! | 242 | teleport a live body to `(MIN, MAX, MIN)` |
//! | 243 | teleport a live body to `(MAX, MIN, MAX)` |
//! | 250, 251, 252 | gravity `MAX`, then `MIN`, then 3 |
//! | 270 | remove `X`, the `range(0, c - 1)`-th of the `c` live bodies that are not the link body (no op and no draw if `c = 0`) |
//! | 271 | on `X` (now removed): impulse `(100, 100, 100)`, teleport `(5000, 5000, 5000)`, remove |
//! | 272 | out of range: impulse body 255 by `(MIN, MIN, MIN)`, teleport body 64 to `(MAX, MAX, MAX)`, remove body 200 |
//! | 299 | gravity 3 (the quiet stretch always runs under the default gravity) |
//!
//! "A live body" is drawn with [`Scenario::pick_live`]: `j = range(0, live - 1)`, the
//! `j`-th live slot in index order (slot 0 if no body is alive). `MIN`/`MAX` are
//! `i32::MIN`/`i32::MAX`.
//!
//! Random ops (after the scheduled ones): `r = next % 8`; if `r >= 2` there are none,
//! else `1 + next % 3` ops follow, each made by `w = next % 20`:
//! - `0..=8` impulse: target (below), then `d = range(-200, 200)` for x, y, z;
//! - `9..=12` teleport: target, then each coordinate `range(-2000, 12000)` (often outside the box);
//! - `13..=16` spawn: `x = range(0, 10000)`, then y: `next % 2 == 0` gives 0 (on the floor),
//!   else `range(0, 10000)`, then `z = range(0, 10000)`;
//! - `17..=18` gravity: `[-3, -1, 0, 1, 2, 3, 5, 10][next % 8]`;
//! - `19` remove: target; if that body is alive and either at most 32 bodies are alive or it
//!   is the link body (roles 1 and 2), the remove goes to index 255 instead (a no-op).
//!
//! A target is `u = next % 10`: `0..=6` a live body (`pick_live`), `7..=8` any slot
//! `range(0, slots - 1)` (it may be removed), `9` out of range `range(slots, 255)`.
//!
//! Ops name x, y and z even in 2D, where the world ignores z.
//!
//! # The lively phase
//!
//! From call `n = LIVELY_FROM` (10 000) on, the schedule above is over for good, so that a
//! world run for ever (the host's embedded default) keeps its bodies and keeps them
//! moving: nothing is ever removed again (a removed slot never comes back, and once all 64
//! slots are used no spawn adds one). With `m = n - LIVELY_FROM`:
//! - `m % CYCLE == 0`: gravity 3 (the default), as the call's first op;
//! - `m % KICK_EVERY == 0` (every 4th call): one impulse, on a live body (`pick_live`),
//!   then `dx = range(-KICK_SIDEWAYS, KICK_SIDEWAYS)`, `dy = range(KICK_UP_MIN, KICK_UP_MAX)`,
//!   `dz = range(-KICK_SIDEWAYS, KICK_SIDEWAYS)`: a kick up and sideways;
//! - any other call: no ops and no draws.
//!
//! A body kicked up by 40 to 160 mm/step bounces for a few hundred steps before it rests,
//! and with about 30 live bodies each is kicked every ~120 steps, so most are moving at
//! any step. The first 10 000 calls are exactly the schedule above.

use crate::sim::link::Role;
use crate::sim::op::Op;
use crate::sim::rng::Sfc32;
use crate::sim::world::{World, BOX_MM, DEFAULT_GRAVITY};

/// XORed into the seed to seed the scenario's own generator: the bytes `SCN1` read as a
/// little-endian u32.
pub const SCENARIO_SALT: u32 = u32::from_le_bytes(*b"SCN1");
/// Length of one cycle of the schedule, in steps.
pub const CYCLE: u64 = 2000;
/// Steps at the start of each cycle that carry ops; the rest of the cycle is quiet.
pub const BUSY: u64 = 300;
/// A random remove aimed at a live body goes elsewhere unless more bodies than this are alive.
pub const KEEP_ALIVE: usize = 32;
/// The first call of the lively phase (see the module docs), when the schedule ends.
pub const LIVELY_FROM: u64 = 10_000;
/// In the lively phase, one call in this many kicks a live body.
pub const KICK_EVERY: u64 = 4;
/// A kick's x and z are drawn from `-KICK_SIDEWAYS..=KICK_SIDEWAYS` (mm/step).
pub const KICK_SIDEWAYS: i32 = 80;
/// A kick's y is drawn from `KICK_UP_MIN..=KICK_UP_MAX` (mm/step, up).
pub const KICK_UP_MIN: i32 = 40;
/// See [`KICK_UP_MIN`].
pub const KICK_UP_MAX: i32 = 160;

const MIN: i32 = i32::MIN;
const MAX: i32 = i32::MAX;

/// A seeded, deterministic source of step inputs; see the module docs for its rules.
#[derive(Debug, Clone)]
pub struct Scenario {
    rng: Sfc32,
    /// Calls so far: the next call is number `n`.
    n: u64,
    /// The body removed at `k = 270` of the current cycle.
    removed: Option<u8>,
    /// The first call of the lively phase: [`LIVELY_FROM`], or later in tests.
    lively_from: u64,
}

impl Scenario {
    /// A scenario whose random stream is `Sfc32::from_seed(seed ^ SCENARIO_SALT)`.
    pub fn new(seed: u32) -> Scenario {
        Scenario {
            rng: Sfc32::from_seed(seed ^ SCENARIO_SALT),
            n: 0,
            removed: None,
            lively_from: LIVELY_FROM,
        }
    }

    /// A scenario whose lively phase starts at call `lively_from` instead of
    /// [`LIVELY_FROM`] (`u64::MAX`: never, the schedule repeats for ever). For tests that
    /// show what the lively phase changes; the host and the test data use [`Scenario::new`].
    pub fn with_lively_from(seed: u32, lively_from: u64) -> Scenario {
        Scenario {
            lively_from,
            ..Scenario::new(seed)
        }
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        self.n
    }

    /// The ops of the next step, given the world as it is before that step.
    pub fn next_input(&mut self, world: &World) -> Vec<Op> {
        let n = self.n;
        self.n += 1;
        let mut ops = Vec::new();
        if n >= self.lively_from {
            self.lively(n - self.lively_from, world, &mut ops);
            return ops;
        }
        let k = n % CYCLE;
        if k >= BUSY {
            return ops;
        }
        self.scheduled(k, world, &mut ops);
        if self.rng.next_u32() % 8 < 2 {
            let count = 1 + self.rng.next_u32() % 3;
            for _ in 0..count {
                let op = self.random_op(world);
                ops.push(op);
            }
        }
        ops
    }

    /// Call `m` of the lively phase: see the module docs.
    fn lively(&mut self, m: u64, world: &World, ops: &mut Vec<Op>) {
        if m.is_multiple_of(CYCLE) {
            ops.push(Op::Gravity { g: DEFAULT_GRAVITY });
        }
        if m.is_multiple_of(KICK_EVERY) {
            let body = self.pick_live(world);
            let d = [
                self.coord(-KICK_SIDEWAYS, KICK_SIDEWAYS),
                self.coord(KICK_UP_MIN, KICK_UP_MAX),
                self.coord(-KICK_SIDEWAYS, KICK_SIDEWAYS),
            ];
            ops.push(Op::Impulse { body, d });
        }
    }

    fn scheduled(&mut self, k: u64, world: &World, ops: &mut Vec<Op>) {
        match k {
            10 => {
                ops.push(Op::Spawn {
                    pos: [MIN, MAX, MIN],
                });
                ops.push(Op::Spawn {
                    pos: [MAX, MIN, MAX],
                });
            }
            20..=98 if k.is_multiple_of(2) => {
                for _ in 0..2 {
                    let pos = self.spawn_pos();
                    ops.push(Op::Spawn { pos });
                }
            }
            100 => ops.push(Op::Gravity { g: 0 }),
            140 => ops.push(Op::Gravity { g: -2 }),
            180 | 252 | 299 => ops.push(Op::Gravity { g: DEFAULT_GRAVITY }),
            200 => ops.push(Op::Teleport {
                body: self.pick_live(world),
                pos: [-5000, 15000, 20000],
            }),
            240 => ops.push(Op::Impulse {
                body: self.pick_live(world),
                d: [MAX, MIN, MAX],
            }),
            241 => ops.push(Op::Impulse {
                body: self.pick_live(world),
                d: [MIN, MAX, MIN],
            }),
            242 => ops.push(Op::Teleport {
                body: self.pick_live(world),
                pos: [MIN, MAX, MIN],
            }),
            243 => ops.push(Op::Teleport {
                body: self.pick_live(world),
                pos: [MAX, MIN, MAX],
            }),
            250 => ops.push(Op::Gravity { g: MAX }),
            251 => ops.push(Op::Gravity { g: MIN }),
            270 => {
                let protected = link_body(world);
                let candidates: Vec<u8> = live_slots(world)
                    .filter(|&i| Some(i) != protected)
                    .collect();
                self.removed = None;
                if !candidates.is_empty() {
                    let j = self.rng.range(0, candidates.len() as i32 - 1) as usize;
                    let body = candidates[j];
                    self.removed = Some(body);
                    ops.push(Op::Remove { body });
                }
            }
            271 => {
                if let Some(body) = self.removed {
                    ops.push(Op::Impulse {
                        body,
                        d: [100, 100, 100],
                    });
                    ops.push(Op::Teleport {
                        body,
                        pos: [5000, 5000, 5000],
                    });
                    ops.push(Op::Remove { body });
                }
            }
            272 => {
                ops.push(Op::Impulse {
                    body: 255,
                    d: [MIN, MIN, MIN],
                });
                ops.push(Op::Teleport {
                    body: 64,
                    pos: [MAX, MAX, MAX],
                });
                ops.push(Op::Remove { body: 200 });
            }
            _ => {}
        }
    }

    fn random_op(&mut self, world: &World) -> Op {
        match self.rng.next_u32() % 20 {
            0..=8 => {
                let body = self.target(world);
                let d = [
                    self.coord(-200, 200),
                    self.coord(-200, 200),
                    self.coord(-200, 200),
                ];
                Op::Impulse { body, d }
            }
            9..=12 => {
                let body = self.target(world);
                let pos = [
                    self.coord(-2000, 12_000),
                    self.coord(-2000, 12_000),
                    self.coord(-2000, 12_000),
                ];
                Op::Teleport { body, pos }
            }
            13..=16 => Op::Spawn {
                pos: self.spawn_pos(),
            },
            17..=18 => {
                const G: [i32; 8] = [-3, -1, 0, 1, 2, 3, 5, 10];
                Op::Gravity {
                    g: G[(self.rng.next_u32() % 8) as usize],
                }
            }
            _ => {
                let body = self.target(world);
                let alive = world.bodies.get(body as usize).is_some_and(|b| b.alive);
                let spare =
                    alive && (world.alive_count() <= KEEP_ALIVE || Some(body) == link_body(world));
                Op::Remove {
                    body: if spare { 255 } else { body },
                }
            }
        }
    }

    /// `range(lo, hi)` from the scenario's stream.
    fn coord(&mut self, lo: i32, hi: i32) -> i32 {
        self.rng.range(lo, hi)
    }

    /// A spawn position: x, then y (on the floor half the time), then z.
    fn spawn_pos(&mut self) -> [i32; 3] {
        let x = self.coord(0, BOX_MM);
        let y = if self.rng.next_u32().is_multiple_of(2) {
            0
        } else {
            self.coord(0, BOX_MM)
        };
        let z = self.coord(0, BOX_MM);
        [x, y, z]
    }

    /// A body index for impulse, teleport or remove: mostly live, sometimes any slot
    /// (possibly removed), sometimes out of range.
    fn target(&mut self, world: &World) -> u8 {
        let slots = world.bodies.len() as i32;
        match self.rng.next_u32() % 10 {
            0..=6 => self.pick_live(world),
            7..=8 => self.rng.range(0, slots - 1) as u8,
            _ => self.rng.range(slots, 255) as u8,
        }
    }

    /// The `j`-th live slot for `j = range(0, live - 1)`; slot 0 (one draw) if none is alive.
    pub fn pick_live(&mut self, world: &World) -> u8 {
        let live = world.alive_count();
        if live == 0 {
            self.rng.next_u32();
            return 0;
        }
        let j = self.rng.range(0, live as i32 - 1) as usize;
        live_slots(world).nth(j).unwrap_or(0)
    }
}

/// Indices of the live slots, in order.
fn live_slots(world: &World) -> impl Iterator<Item = u8> + '_ {
    world
        .bodies
        .iter()
        .enumerate()
        .filter(|(_, b)| b.alive)
        .map(|(i, _)| i as u8)
}

/// The body a sender or receiver link moves, which the scenario never removes.
fn link_body(world: &World) -> Option<u8> {
    world
        .link()
        .filter(|l| matches!(l.role, Role::Sender | Role::Receiver))
        .map(|l| l.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::world::{Dims, Setup};

    #[test]
    fn same_seed_same_ops() {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 5,
            seed: 9,
        };
        let run = |seed| {
            let mut w = World::new(setup, None);
            let mut s = Scenario::new(seed);
            let mut all = Vec::new();
            for _ in 0..400 {
                let ops = s.next_input(&w);
                w.step(&ops);
                all.push(ops);
            }
            all
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
