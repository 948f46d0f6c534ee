//! The test module: up to 64 bodies in a 10 m box, integer millimetres, four stages a step.
//!
//! Every rule here is written down in `docs/test-module.md`; the two must change together.

use crate::cursor::Cursor;
use crate::error::FormatError;
use crate::sim::link::{Link, Role, ARRIVAL_VELOCITY};
use crate::sim::op::Op;
use crate::sim::rng::Sfc32;
use zerocopy::{Immutable, IntoBytes};

mod bodies;
mod simd;
mod xxh3;

pub use bodies::Bodies;
pub use simd::Kernel;
pub use xxh3::{xxh3_64, xxh3_64_with};

/// The box's side in millimetres; every axis runs from 0 to `BOX_MM` inclusive.
pub const BOX_MM: i32 = 10_000;
/// The most bodies (slots) a world holds.
pub const MAX_BODIES: usize = 64;
/// Gravity of a fresh world, in mm/step² (about 9.8 m/s² at 60 steps/s).
pub const DEFAULT_GRAVITY: i32 = 3;
/// A bounce whose damped outgoing speed is below this (mm/step) settles on the wall.
pub const SETTLE_SPEED: i64 = 8;
/// Bounce damping: outgoing = -incoming * NUM / DEN, truncated toward zero.
pub const BOUNCE_NUM: i64 = 3;
/// See [`BOUNCE_NUM`].
pub const BOUNCE_DEN: i64 = 4;
/// Floor friction on horizontal velocity: v = v * NUM / DEN, truncated toward zero.
pub const FRICTION_NUM: i64 = 7;
/// See [`FRICTION_NUM`].
pub const FRICTION_DEN: i64 = 8;
/// Encoded size of one body in a snapshot.
pub const BODY_BYTES: usize = 32;
/// Encoded size of the snapshot header (step u64, gravity i32).
pub const SNAPSHOT_HEADER_BYTES: usize = 12;
/// The largest snapshot: 64 bodies.
pub const MAX_SNAPSHOT_BYTES: usize = SNAPSHOT_HEADER_BYTES + MAX_BODIES * BODY_BYTES;
/// The setup's encoded length.
pub const SETUP_BYTES: usize = 6;

/// 2D or 3D.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dims {
    Two = 2,
    Three = 3,
}

impl Dims {
    /// How many axes move (x, y; plus z in 3D).
    pub fn axes(self) -> usize {
        self as usize
    }
}

/// The 6-byte setup: dimensions, initial body count, seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Setup {
    pub dims: Dims,
    /// Initial body count, 1..=64.
    pub bodies: u8,
    pub seed: u32,
}

impl Setup {
    /// Reads and checks the 6 setup bytes.
    pub fn read(c: &mut Cursor<'_>) -> Result<Setup, FormatError> {
        let at = c.offset();
        let raw = c.take(SETUP_BYTES, "setup")?;
        let dims = match raw[0] {
            2 => Dims::Two,
            3 => Dims::Three,
            d => return Err(c.error_at(at, format!("expected dimensions 2 or 3, found {d}"))),
        };
        let bodies = raw[1];
        if bodies == 0 || bodies as usize > MAX_BODIES {
            return Err(c.error_at(
                at + 1,
                format!("expected body count 1..=64, found {bodies}"),
            ));
        }
        let seed = u32::from_le_bytes([raw[2], raw[3], raw[4], raw[5]]);
        Ok(Setup { dims, bodies, seed })
    }

    /// The 6 setup bytes.
    pub fn to_bytes(&self) -> [u8; SETUP_BYTES] {
        let s = self.seed.to_le_bytes();
        [self.dims as u8, self.bodies, s[0], s[1], s[2], s[3]]
    }
}

/// One body slot.
///
/// Its memory is its 32 snapshot bytes on a little-endian machine: the byte `alive` (0
/// or 1) and three zero bytes make the little-endian u32 `alive`, then come `still`, `pos`
/// and `vel` (`IntoBytes` proves at compile time that there is no padding). So a world's
/// bodies are hashed without encoding them, and the vector step loads a body as one
/// 256-bit word. Outside this module a body is built with [`Body::new`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, IntoBytes, Immutable)]
#[repr(C, align(32))]
pub struct Body {
    pub alive: bool,
    /// Always zero: the high bytes of the snapshot's u32 `alive`.
    zero: [u8; 3],
    /// Consecutive steps that ended with zero velocity.
    pub still: u32,
    pub pos: [i32; 3],
    pub vel: [i32; 3],
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("alive", &self.alive)
            .field("still", &self.still)
            .field("pos", &self.pos)
            .field("vel", &self.vel)
            .finish()
    }
}

/// A world: its setup and link, the step it is at, gravity, and its body slots.
#[derive(Debug, PartialEq, Eq)]
pub struct World {
    setup: Setup,
    link: Option<Link>,
    /// Steps taken since step 0; the next step to run is numbered `step`.
    pub step: u64,
    pub gravity: i32,
    pub bodies: Bodies,
}

impl Clone for World {
    fn clone(&self) -> World {
        World {
            setup: self.setup,
            link: self.link,
            step: self.step,
            gravity: self.gravity,
            bodies: self.bodies.clone(),
        }
    }

    /// Reuses `self`'s body buffer (a verifier keeps the world before each step this way
    /// without allocating).
    fn clone_from(&mut self, other: &World) {
        self.setup = other.setup;
        self.link = other.link;
        self.step = other.step;
        self.gravity = other.gravity;
        self.bodies.clone_from(&other.bodies);
    }
}

/// The four stages of a step, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    ApplyInput,
    Gravity,
    Move,
    Bookkeeping,
}

impl Stage {
    /// All stages in order.
    pub const ALL: [Stage; 4] = [
        Stage::ApplyInput,
        Stage::Gravity,
        Stage::Move,
        Stage::Bookkeeping,
    ];

    /// Name printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::ApplyInput => "apply input",
            Stage::Gravity => "gravity",
            Stage::Move => "move",
            Stage::Bookkeeping => "bookkeeping",
        }
    }
}

impl World {
    /// The world at step 0 made from the setup's seed (see `docs/test-module.md`).
    pub fn new(setup: Setup, link: Option<Link>) -> World {
        let mut rng = Sfc32::from_seed(setup.seed);
        let three = setup.dims == Dims::Three;
        let mut bodies = Bodies::with_capacity(MAX_BODIES);
        for _ in 0..setup.bodies {
            let mut b = Body {
                alive: true,
                ..Body::default()
            };
            b.pos[0] = rng.range(500, 9500);
            b.pos[1] = rng.range(500, 9500);
            if three {
                b.pos[2] = rng.range(500, 9500);
            }
            b.vel[0] = rng.range(-40, 40);
            b.vel[1] = rng.range(-40, 40);
            if three {
                b.vel[2] = rng.range(-40, 40);
            }
            bodies.push(b);
        }
        if let Some(l) = link {
            if l.role == Role::Receiver {
                if let Some(b) = bodies.get_mut(l.body as usize) {
                    *b = Body::default();
                }
            }
        }
        bodies.set_header(0, DEFAULT_GRAVITY);
        World {
            setup,
            link,
            step: 0,
            gravity: DEFAULT_GRAVITY,
            bodies,
        }
    }

    /// A world of `setup` and `link` at step 0 whose body slots are exactly `positions`,
    /// every body alive and at rest (velocity 0, still count 0): a world built by hand.
    /// The slot count is the number of positions, whatever `setup.bodies` says.
    pub fn with_bodies_at(setup: Setup, link: Option<Link>, positions: &[[i32; 3]]) -> World {
        let mut w = World::new(setup, link);
        w.bodies = positions
            .iter()
            .map(|&pos| Body {
                alive: true,
                pos,
                ..Body::default()
            })
            .collect();
        w.bodies.set_header(w.step, w.gravity);
        w
    }

    /// The setup the world was made from.
    pub fn setup(&self) -> Setup {
        self.setup
    }

    /// The world's link block, if any.
    pub fn link(&self) -> Option<Link> {
        self.link
    }

    /// 2D or 3D.
    pub fn dims(&self) -> Dims {
        self.setup.dims
    }

    /// Runs one whole step.
    ///
    /// Stages 2 to 4 act on each body alone, so they are run body by body in one pass, with
    /// the fastest vector kernel this CPU has ([`Kernel::best`], checked at run time); the
    /// result is the same as [`World::run_stage`] over [`Stage::ALL`] and as
    /// [`World::step_scalar`] (tests hold them all equal).
    pub fn step(&mut self, ops: &[Op]) {
        self.step_with(Kernel::best(), ops);
    }

    /// [`World::step`] without a vector kernel: the body-by-body pass that CPUs without
    /// AVX2 run, and the reference the kernels are tested against.
    pub fn step_scalar(&mut self, ops: &[Op]) {
        self.step_with(Kernel::Scalar, ops);
    }

    /// [`World::step`] with stages 2 to 4 run by `kernel`, or by the body-by-body pass
    /// where this CPU cannot run it. Every kernel gives the same world.
    pub fn step_with(&mut self, kernel: Kernel, ops: &[Op]) {
        self.apply_input(ops);
        let (g, dims) = (self.gravity, self.dims());
        // The header of the step's snapshot (its step and gravity, which stages 2 to 4 and
        // the link transfer do not change) is written before the bodies: the world hash
        // that mostly follows a step reads the header first, and a read of memory just
        // written waits for every store before it (docs/performance.md, "Sixteen bodies in
        // 32-bit lanes, and XXH3, on AVX-512").
        self.bodies.set_header(self.step.wrapping_add(1), g);
        simd::step_bodies(kernel, &mut self.bodies, g, dims);
        self.link_transfer();
        self.step = self.step.wrapping_add(1);
    }

    /// Runs one stage.
    pub fn run_stage(&mut self, stage: Stage, ops: &[Op]) {
        match stage {
            Stage::ApplyInput => self.apply_input(ops),
            Stage::Gravity => self.apply_gravity(),
            Stage::Move => self.move_bodies(),
            Stage::Bookkeeping => self.bookkeeping(),
        }
    }

    /// Runs one step, returning the world hash after each of the four stages.
    pub fn step_with_stage_hashes(&mut self, ops: &[Op]) -> [u64; 4] {
        let mut out = [0u64; 4];
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            self.run_stage(stage, ops);
            out[i] = self.hash();
        }
        out
    }

    fn live_body(&mut self, index: u8) -> Option<&mut Body> {
        self.bodies.body_mut(index as usize).filter(|b| b.alive)
    }

    /// Stage 1: applies the ops in order.
    pub fn apply_input(&mut self, ops: &[Op]) {
        let axes = self.dims().axes();
        for op in ops {
            match *op {
                Op::Impulse { body, d } => {
                    if let Some(b) = self.live_body(body) {
                        for (v, dv) in b.vel[..axes].iter_mut().zip(d) {
                            *v = v.saturating_add(dv);
                        }
                    }
                }
                Op::Teleport { body, pos } => {
                    if let Some(b) = self.live_body(body) {
                        b.pos[..axes].copy_from_slice(&pos[..axes]);
                    }
                }
                Op::Remove { body } => {
                    if let Some(b) = self.live_body(body) {
                        *b = Body::default();
                    }
                }
                Op::Gravity { g } => self.gravity = g,
                Op::Spawn { pos } => {
                    if self.bodies.len() < MAX_BODIES {
                        let mut b = Body {
                            alive: true,
                            ..Body::default()
                        };
                        b.pos[..axes].copy_from_slice(&pos[..axes]);
                        self.bodies.push(b);
                    }
                }
            }
        }
    }

    /// Stage 2: every live body's y velocity loses `gravity` (saturating).
    pub fn apply_gravity(&mut self) {
        let g = self.gravity;
        for b in self.bodies.iter_mut().filter(|b| b.alive) {
            gravity_body(b, g);
        }
    }

    /// Stage 3: every live body moves, bounces off the walls, and feels floor friction.
    pub fn move_bodies(&mut self) {
        let axes = self.dims().axes();
        for b in self.bodies.iter_mut().filter(|b| b.alive) {
            move_body(b, axes);
        }
    }

    /// Stage 4: still counts, the link transfer, and the step counter.
    pub fn bookkeeping(&mut self) {
        let axes = self.dims().axes();
        for b in self.bodies.iter_mut().filter(|b| b.alive) {
            count_still(b, axes);
        }
        self.finish_step();
    }

    /// The end of bookkeeping: the link transfer, then the step counter.
    fn finish_step(&mut self) {
        self.link_transfer();
        self.step = self.step.wrapping_add(1);
        self.bodies.set_header(self.step, self.gravity);
    }

    /// The link transfer, at the end of the step the link names.
    fn link_transfer(&mut self) {
        if let Some(l) = self.link {
            if self.step == l.transfer_step as u64 {
                let center = if self.dims() == Dims::Three {
                    [BOX_MM / 2; 3]
                } else {
                    [BOX_MM / 2, BOX_MM / 2, 0]
                };
                if let Some(b) = self.bodies.body_mut(l.body as usize) {
                    match l.role {
                        Role::Sender => *b = Body::default(),
                        Role::Receiver => *b = Body::new(true, 0, center, ARRIVAL_VELOCITY),
                        Role::FieldsOnly => {}
                    }
                }
            }
        }
    }

    /// Live bodies.
    pub fn alive_count(&self) -> usize {
        self.bodies.iter().filter(|b| b.alive).count()
    }

    /// The snapshot's length for this world.
    pub fn snapshot_len(&self) -> usize {
        SNAPSHOT_HEADER_BYTES + self.bodies.len() * BODY_BYTES
    }

    /// Appends the canonical snapshot bytes.
    pub fn write_snapshot(&self, out: &mut Vec<u8>) {
        out.reserve(self.snapshot_len());
        out.extend_from_slice(&self.step.to_le_bytes());
        out.extend_from_slice(&self.gravity.to_le_bytes());
        let at = out.len();
        out.resize(at + self.bodies.len() * BODY_BYTES, 0);
        put_bodies(&self.bodies, &mut out[at..]);
    }

    /// The canonical snapshot bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_snapshot(&mut out);
        out
    }

    /// The world hash: XXH3-64 (seed 0) of the canonical snapshot bytes.
    pub fn hash(&self) -> u64 {
        self.hash_with(Kernel::best())
    }

    /// [`World::hash`] with the vectors of `kernel` (see [`xxh3_64_with`]): the same value.
    pub fn hash_with(&self, kernel: Kernel) -> u64 {
        // Where the world was last stepped or built, the bodies' memory has the snapshot
        // header right before it: the snapshot is hashed where it lies.
        match self.bodies.snapshot_in_place(self.step, self.gravity) {
            Some(snapshot) => xxh3_64_with(kernel, snapshot),
            None => xxh3_64_with(kernel, &self.snapshot()),
        }
    }

    /// Rebuilds a world from snapshot bytes: a whole number of 32-byte bodies, 1..=64 of
    /// them, each `alive` 0 or 1. Every other field is kept exactly as read, also in a slot
    /// with `alive = 0` and the z of a 2D world (nothing reads or writes those, so they stay
    /// as they are and the snapshot writes them back byte for byte). `base` is the
    /// snapshot's offset in `input`.
    pub fn from_snapshot(
        setup: Setup,
        link: Option<Link>,
        input: &str,
        bytes: &[u8],
        base: u64,
    ) -> Result<World, FormatError> {
        let mut c = Cursor::new(input, bytes, base);
        if bytes.len() < SNAPSHOT_HEADER_BYTES + BODY_BYTES
            || bytes.len() > MAX_SNAPSHOT_BYTES
            || !(bytes.len() - SNAPSHOT_HEADER_BYTES).is_multiple_of(BODY_BYTES)
        {
            return Err(c.error(format!(
                "expected a world snapshot of 12 + 32 x (1..=64) bytes, found {} bytes",
                bytes.len()
            )));
        }
        let step = c.u64("snapshot step")?;
        let gravity = c.i32("snapshot gravity")?;
        let n = (bytes.len() - SNAPSHOT_HEADER_BYTES) / BODY_BYTES;
        let mut bodies = Bodies::with_capacity(n);
        for i in 0..n {
            let at = c.offset();
            let alive = c.u32("body alive")?;
            if alive > 1 {
                return Err(c.error_at(
                    at,
                    format!("body {i}: expected alive 0 or 1, found {alive}"),
                ));
            }
            let still = c.u32("body still count")?;
            let mut pos = [0i32; 3];
            let mut vel = [0i32; 3];
            for p in pos.iter_mut() {
                *p = c.i32("body position")?;
            }
            for v in vel.iter_mut() {
                *v = c.i32("body velocity")?;
            }
            bodies.push(Body::new(alive == 1, still, pos, vel));
        }
        bodies.set_header(step, gravity);
        Ok(World {
            setup,
            link,
            step,
            gravity,
            bodies,
        })
    }
}

/// Gravity on one live body.
fn gravity_body(b: &mut Body, g: i32) {
    b.vel[1] = b.vel[1].saturating_sub(g);
}

/// Writes the bodies' snapshot bytes into `out` (exactly 32 bytes a body).
fn put_bodies(bodies: &[Body], out: &mut [u8]) {
    if cfg!(target_endian = "little") {
        // The bodies' memory is their snapshot bytes (see `Body`): one copy.
        out.copy_from_slice(bodies.as_bytes());
    } else {
        for (o, b) in out.chunks_exact_mut(BODY_BYTES).zip(bodies) {
            o.copy_from_slice(&b.to_bytes());
        }
    }
}

/// Stages 2 to 4's per-body work for every live body, with the axis count known at
/// compile time.
fn step_bodies<const AXES: usize>(bodies: &mut [Body], g: i32) {
    for b in bodies.iter_mut().filter(|b| b.alive) {
        gravity_body(b, g);
        move_body(b, AXES);
        count_still(b, AXES);
    }
}

/// Moves one live body on each used axis, then applies floor friction.
#[inline(always)]
fn move_body(b: &mut Body, axes: usize) {
    for a in 0..axes.min(3) {
        (b.pos[a], b.vel[a]) = move_axis(b.pos[a], b.vel[a]);
    }
    if b.pos[1] == 0 {
        b.vel[0] = friction(b.vel[0]);
        if axes == 3 {
            b.vel[2] = friction(b.vel[2]);
        }
    }
}

fn friction(v: i32) -> i32 {
    (v as i64 * FRICTION_NUM / FRICTION_DEN) as i32
}

/// The still count of one live body: at rest when the velocity on every used axis is 0
/// (a 2D body's velocity z is never read).
#[inline(always)]
fn count_still(b: &mut Body, axes: usize) {
    b.still = if b.vel[..axes.min(3)].iter().all(|&v| v == 0) {
        b.still.saturating_add(1)
    } else {
        0
    };
}

/// Moves one axis: `p + v`, a reflection off the wall it crossed (damped, and settled
/// against the wall when slow), then a clamp into the box. Computed in i64: never overflows.
#[inline(always)]
pub fn move_axis(p: i32, v: i32) -> (i32, i32) {
    let l = BOX_MM as i64;
    let mut np = p as i64 + v as i64;
    if (0..=l).contains(&np) {
        // No wall crossed: the common case.
        return (np as i32, v);
    }
    let mut nv = v as i64;
    let wall = if np < 0 {
        np = -np;
        Some(0)
    } else if np > l {
        np = 2 * l - np;
        Some(l)
    } else {
        None
    };
    if let Some(w) = wall {
        nv = -nv * BOUNCE_NUM / BOUNCE_DEN;
        if nv.abs() < SETTLE_SPEED {
            np = w;
            nv = 0;
        }
    }
    (np.clamp(0, l) as i32, nv as i32)
}

/// Where two worlds first differ: the field's name and both values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDiff {
    /// `None` for a world-level field (step, gravity, body count).
    pub body: Option<usize>,
    /// `step`, `gravity`, `body count`, `alive`, `still`, `position.x` … `velocity.z`.
    pub field: &'static str,
    pub a: i64,
    pub b: i64,
}

impl std::fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.body {
            Some(i) => write!(f, "body {i} {}", self.field),
            None => write!(f, "{}", self.field),
        }
    }
}

/// Body field names in snapshot order.
pub const BODY_FIELDS: [&str; 8] = [
    "alive",
    "still",
    "position.x",
    "position.y",
    "position.z",
    "velocity.x",
    "velocity.y",
    "velocity.z",
];

impl Body {
    /// A body slot with these fields.
    pub const fn new(alive: bool, still: u32, pos: [i32; 3], vel: [i32; 3]) -> Body {
        Body {
            alive,
            zero: [0; 3],
            still,
            pos,
            vel,
        }
    }

    /// The body's 32 snapshot bytes: alive, still, position x y z, velocity x y z, each
    /// 4 bytes little endian.
    pub fn to_bytes(&self) -> [u8; BODY_BYTES] {
        let words = [
            self.alive as u32,
            self.still,
            self.pos[0] as u32,
            self.pos[1] as u32,
            self.pos[2] as u32,
            self.vel[0] as u32,
            self.vel[1] as u32,
            self.vel[2] as u32,
        ];
        let mut out = [0u8; BODY_BYTES];
        for (o, w) in out.chunks_exact_mut(4).zip(words) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The body's eight fields in snapshot order.
    pub fn fields(&self) -> [i64; 8] {
        [
            self.alive as i64,
            self.still as i64,
            self.pos[0] as i64,
            self.pos[1] as i64,
            self.pos[2] as i64,
            self.vel[0] as i64,
            self.vel[1] as i64,
            self.vel[2] as i64,
        ]
    }
}

/// The first field (in snapshot order) where `a` and `b` differ.
pub fn first_difference(a: &World, b: &World) -> Option<FieldDiff> {
    let world = |field, x: i64, y: i64| {
        (x != y).then_some(FieldDiff {
            body: None,
            field,
            a: x,
            b: y,
        })
    };
    if let Some(d) = world("step", a.step as i64, b.step as i64) {
        return Some(d);
    }
    if let Some(d) = world("gravity", a.gravity as i64, b.gravity as i64) {
        return Some(d);
    }
    for (i, (x, y)) in a.bodies.iter().zip(&b.bodies).enumerate() {
        for ((name, fx), fy) in BODY_FIELDS.iter().zip(x.fields()).zip(y.fields()) {
            if fx != fy {
                return Some(FieldDiff {
                    body: Some(i),
                    field: name,
                    a: fx,
                    b: fy,
                });
            }
        }
    }
    world("body count", a.bodies.len() as i64, b.bodies.len() as i64)
}
