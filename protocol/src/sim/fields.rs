//! The two scalar fields a linked world declares over its 8 x 8 floor grid: `density`
//! (one value per grid vertex, 9 x 9) and `occupancy` (one value per triangle, 8 x 8
//! cells x 2). Both are exact integers and a pure function of a [`World`]; they do not
//! enter the world hash. The definition is in `docs/test-module.md`, section
//! "Fields: density and occupancy"; the two must change together.
//!
//! ```text
//! floor plane (u, v): 2D (x, y), the box seen from the side; 3D (x, z), seen from above
//! cell side 1250 mm; vertex (i, j) at (1250 i, 1250 j), i, j in 0..=8
//! density[j][i]   = sum over live bodies of tent(u - 1250 i) * tent(v - 1250 j),
//!                   tent(d) = max(0, 1250 - |d|)            (one body = 1 562 500)
//! cell (i, j)     = (min(u / 1250, 7), min(v / 1250, 7)); fu, fv = offsets in the cell
//! occupancy[j][i] = [bodies with fv < fu (triangle 0), bodies with fv >= fu (triangle 1)]
//! ```

use crate::sim::world::{Dims, World, BOX_MM};

/// Cells along each side of the floor grid.
pub const GRID: usize = 8;
/// Vertices along each side of the floor grid.
pub const VERTICES: usize = GRID + 1;
/// A cell's side in millimetres.
pub const CELL_MM: i32 = BOX_MM / GRID as i32;
/// The density one body contributes in total (`CELL_MM²`): density values are in
/// units of 1 / 1 562 500 of a body.
pub const DENSITY_ONE: u32 = (CELL_MM as u32) * (CELL_MM as u32);

/// Both fields of a world at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    /// `density[j][i]` is vertex (i, j), at u = 1250 i, v = 1250 j, in units of
    /// 1 / [`DENSITY_ONE`] body.
    pub density: [[u32; VERTICES]; VERTICES],
    /// `occupancy[j][i][t]` is triangle `t` of cell (i, j): `t = 0` is the triangle
    /// below the diagonal from (u0, v0) to (u1, v1), with corners (u0, v0), (u1, v0),
    /// (u1, v1); `t = 1` the one above it, with corners (u0, v0), (u1, v1), (u0, v1).
    pub occupancy: [[[u32; 2]; GRID]; GRID],
}

/// The two floor axes (indices into a position) of a world's dimensions:
/// (x, y) in 2D, (x, z) in 3D.
pub fn floor_axes(dims: Dims) -> [usize; 2] {
    match dims {
        Dims::Two => [0, 1],
        Dims::Three => [0, 2],
    }
}

/// The axis names of [`floor_axes`].
pub fn floor_axis_names(dims: Dims) -> [&'static str; 2] {
    match dims {
        Dims::Two => ["x", "y"],
        Dims::Three => ["x", "z"],
    }
}

/// Where a position falls on the floor grid: the cell, and the offsets inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridPoint {
    /// Cell index along u, 0..8.
    pub i: usize,
    /// Cell index along v, 0..8.
    pub j: usize,
    /// Offset from the cell's low u edge, 0..=1250 (1250 only on the far wall).
    pub fu: i32,
    /// Offset from the cell's low v edge, 0..=1250 (1250 only on the far wall).
    pub fv: i32,
}

impl GridPoint {
    /// The grid point of a floor position; coordinates outside the box are first
    /// clamped onto its walls.
    pub fn of(u: i32, v: i32) -> GridPoint {
        let split = |p: i32| {
            let p = p.clamp(0, BOX_MM);
            let i = (p / CELL_MM).min(GRID as i32 - 1);
            (i as usize, p - i * CELL_MM)
        };
        let (i, fu) = split(u);
        let (j, fv) = split(v);
        GridPoint { i, j, fu, fv }
    }

    /// The triangle of the cell holding the point: 0 when `fv < fu`, else 1.
    pub fn triangle(&self) -> usize {
        usize::from(self.fv >= self.fu)
    }
}

/// Computes both fields of a world, as it stands (the tools call it on the world at a
/// step, i.e. after the bookkeeping stage of the step before). Removed bodies count
/// for nothing.
pub fn compute(world: &World) -> Fields {
    let [au, av] = floor_axes(world.dims());
    let mut f = Fields {
        density: [[0; VERTICES]; VERTICES],
        occupancy: [[[0; 2]; GRID]; GRID],
    };
    for b in world.bodies.iter().filter(|b| b.alive) {
        let g = GridPoint::of(b.pos[au], b.pos[av]);
        // Both offsets are in 0..=1250, so every weight is in 0..=1250 and every
        // product at most 1 562 500; 64 bodies on one vertex sum to 100 000 000.
        let wu = [(CELL_MM - g.fu) as u32, g.fu as u32];
        let wv = [(CELL_MM - g.fv) as u32, g.fv as u32];
        for (dj, wv) in wv.into_iter().enumerate() {
            for (di, wu) in wu.into_iter().enumerate() {
                f.density[g.j + dj][g.i + di] += wu * wv;
            }
        }
        f.occupancy[g.j][g.i][g.triangle()] += 1;
    }
    f
}

impl Fields {
    /// The largest density value.
    pub fn max_density(&self) -> u32 {
        self.density.iter().flatten().copied().max().unwrap_or(0)
    }

    /// The largest occupancy value.
    pub fn max_occupancy(&self) -> u32 {
        self.occupancy
            .iter()
            .flatten()
            .flatten()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Sum of all density values: always `DENSITY_ONE` x the live bodies.
    pub fn total_density(&self) -> u64 {
        self.density.iter().flatten().map(|&d| d as u64).sum()
    }

    /// Sum of all occupancy values: always the live bodies.
    pub fn total_occupancy(&self) -> u64 {
        self.occupancy
            .iter()
            .flatten()
            .flatten()
            .map(|&o| o as u64)
            .sum()
    }
}

/// A density value as an exact decimal count of bodies: `value / 1 562 500` has at most
/// eight decimals, because 10^8 / 1 562 500 = 64. Trailing zeros are dropped.
pub fn density_decimal(value: u32) -> String {
    let scaled = value as u64 * 64; // bodies x 10^8
    let whole = scaled / 100_000_000;
    let frac = scaled % 100_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:08}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::link::{Link, Role};
    use crate::sim::world::{Body, Setup};

    /// A world of `dims` holding exactly the given live bodies (positions x, y, z).
    fn world(dims: Dims, bodies: &[[i32; 3]]) -> World {
        let setup = Setup {
            dims,
            bodies: bodies.len().max(1) as u8,
            seed: 7,
        };
        World::with_bodies_at(setup, None, bodies)
    }

    /// Every vertex not listed in `expect` must be zero.
    fn assert_density(f: &Fields, expect: &[((usize, usize), u32)]) {
        for j in 0..VERTICES {
            for i in 0..VERTICES {
                let want = expect
                    .iter()
                    .find(|(at, _)| *at == (i, j))
                    .map_or(0, |(_, v)| *v);
                assert_eq!(f.density[j][i], want, "density at vertex (i={i}, j={j})");
            }
        }
    }

    fn assert_occupancy(f: &Fields, expect: &[((usize, usize, usize), u32)]) {
        for j in 0..GRID {
            for i in 0..GRID {
                for t in 0..2 {
                    let want = expect
                        .iter()
                        .find(|(at, _)| *at == (i, j, t))
                        .map_or(0, |(_, v)| *v);
                    assert_eq!(
                        f.occupancy[j][i][t], want,
                        "occupancy at cell ({i}, {j}) triangle {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn cell_and_unit_constants_are_the_documented_ones() {
        assert_eq!(CELL_MM, 1250);
        assert_eq!(DENSITY_ONE, 1_562_500);
    }

    #[test]
    fn a_body_exactly_on_a_vertex_puts_all_its_density_there() {
        // 2D: u = x = 2500 (vertex 2), v = y = 3750 (vertex 3).
        let f = compute(&world(Dims::Two, &[[2500, 3750, 0]]));
        assert_density(&f, &[((2, 3), 1_562_500)]);
        // fu = 0, fv = 0 in cell (2, 3): fv >= fu, the upper triangle.
        assert_occupancy(&f, &[((2, 3, 1), 1)]);
    }

    #[test]
    fn a_body_on_a_cell_edge_splits_between_the_two_end_vertices() {
        // 3D: u = x = 1250 + 500, v = z = 5000 (vertex 4); y (height) is ignored.
        let f = compute(&world(Dims::Three, &[[1750, 9000, 5000]]));
        // tent(500) * tent(0) = 750 * 1250 and tent(750) * tent(0) = 500 * 1250.
        assert_density(&f, &[((1, 4), 937_500), ((2, 4), 625_000)]);
        // Cell (1, 4), fu = 500, fv = 0: fv < fu, the lower triangle.
        assert_occupancy(&f, &[((1, 4, 0), 1)]);
        // On a vertical edge: x = 3750 (vertex 3), z = 6000 (1000 into cell 4).
        let f = compute(&world(Dims::Three, &[[3750, 0, 6000]]));
        assert_density(&f, &[((3, 4), 1250 * 250), ((3, 5), 1250 * 1000)]);
        // fu = 0, fv = 1000: the upper triangle of cell (3, 4).
        assert_occupancy(&f, &[((3, 4, 1), 1)]);
    }

    #[test]
    fn a_body_inside_a_cell_spreads_bilinearly_over_its_four_corners() {
        // Cell (0, 0), fu = 1000, fv = 250: below the diagonal, triangle 0.
        let f = compute(&world(Dims::Two, &[[1000, 250, 0]]));
        assert_density(
            &f,
            &[
                ((0, 0), 250 * 1000),
                ((1, 0), 1000 * 1000),
                ((0, 1), 250 * 250),
                ((1, 1), 1000 * 250),
            ],
        );
        assert_occupancy(&f, &[((0, 0, 0), 1)]);
        // Cell (5, 6) (u 6250..7500, v 7500..8750), fu = 100, fv = 1200: triangle 1.
        let f = compute(&world(Dims::Three, &[[6350, 4000, 8700]]));
        assert_density(
            &f,
            &[
                ((5, 6), 1150 * 50),
                ((6, 6), 100 * 50),
                ((5, 7), 1150 * 1200),
                ((6, 7), 100 * 1200),
            ],
        );
        assert_occupancy(&f, &[((5, 6, 1), 1)]);
    }

    #[test]
    fn a_body_on_the_diagonal_belongs_to_the_upper_triangle() {
        let f = compute(&world(Dims::Two, &[[1250 + 600, 600, 0]]));
        assert_occupancy(&f, &[((1, 0, 1), 1)]);
        // One millimetre below the diagonal: the lower triangle.
        let f = compute(&world(Dims::Two, &[[1250 + 600, 599, 0]]));
        assert_occupancy(&f, &[((1, 0, 0), 1)]);
    }

    #[test]
    fn bodies_on_the_box_walls_stay_on_the_outer_vertices_and_cells() {
        // The far corner (10000, 10000) is vertex (8, 8) and belongs to cell (7, 7),
        // fu = fv = 1250: the upper triangle.
        let f = compute(&world(Dims::Two, &[[10_000, 10_000, 0]]));
        assert_density(&f, &[((8, 8), 1_562_500)]);
        assert_occupancy(&f, &[((7, 7, 1), 1)]);
        // On the floor of a 2D world (y = 0), between vertices 3 and 4.
        let f = compute(&world(Dims::Two, &[[4000, 0, 0]]));
        assert_density(&f, &[((3, 0), 1000 * 1250), ((4, 0), 250 * 1250)]);
        assert_occupancy(&f, &[((3, 0, 0), 1)]);
        // On the far x wall of a 3D world, z = 2000: cell (7, 1), fu = 1250 > fv = 750.
        let f = compute(&world(Dims::Three, &[[10_000, 50, 2000]]));
        assert_density(&f, &[((8, 1), 1250 * 500), ((8, 2), 1250 * 750)]);
        assert_occupancy(&f, &[((7, 1, 0), 1)]);
    }

    #[test]
    fn positions_outside_the_box_count_on_the_wall() {
        let outside = compute(&world(Dims::Two, &[[-300, 12_000, 0]]));
        let wall = compute(&world(Dims::Two, &[[0, 10_000, 0]]));
        assert_eq!(outside, wall);
        assert_density(&wall, &[((0, 8), 1_562_500)]);
        let extreme = compute(&world(Dims::Three, &[[i32::MIN, 0, i32::MAX]]));
        assert_density(&extreme, &[((0, 8), 1_562_500)]);
    }

    #[test]
    fn removed_bodies_count_for_nothing_and_bodies_add_up() {
        let mut w = world(
            Dims::Two,
            &[[2500, 2500, 0], [2500, 2500, 0], [3000, 2600, 0]],
        );
        w.bodies[2] = Body::default();
        let f = compute(&w);
        assert_density(&f, &[((2, 2), 2 * 1_562_500)]);
        assert_occupancy(&f, &[((2, 2, 1), 2)]);
        assert_eq!(f.total_density(), 2 * DENSITY_ONE as u64);
        assert_eq!(f.total_occupancy(), 2);
    }

    #[test]
    fn sixty_four_bodies_on_one_vertex_do_not_overflow() {
        let f = compute(&world(Dims::Three, &[[5000, 5000, 5000]; 64]));
        assert_density(&f, &[((4, 4), 100_000_000)]);
        assert_eq!(f.max_density(), 100_000_000);
        assert_eq!(f.max_occupancy(), 64);
    }

    #[test]
    fn the_receiver_holds_no_density_before_the_transfer_and_one_body_after() {
        let setup = Setup {
            dims: Dims::Two,
            bodies: 1,
            seed: 1,
        };
        let link = Link {
            role: Role::Receiver,
            body: 0,
            transfer_step: 2,
        };
        let mut w = World::new(setup, Some(link));
        w.gravity = 0;
        for _ in 0..2 {
            w.step(&[]);
            assert_eq!(compute(&w).total_occupancy(), 0);
        }
        w.step(&[]);
        // Appeared at the centre (5000, 5000) = vertex (4, 4), at the bookkeeping stage.
        let f = compute(&w);
        assert_density(&f, &[((4, 4), 1_562_500)]);
        assert_occupancy(&f, &[((4, 4, 1), 1)]);
    }

    #[test]
    fn density_decimals_are_exact() {
        assert_eq!(density_decimal(0), "0");
        assert_eq!(density_decimal(1_562_500), "1");
        assert_eq!(density_decimal(937_500), "0.6");
        assert_eq!(density_decimal(1), "0.00000064");
        assert_eq!(density_decimal(100_000_000), "64");
        assert_eq!(density_decimal(62_500), "0.04");
    }

    /// The conservation property: every live body adds exactly one body of density and
    /// one to exactly one triangle.
    fn conserved(f: &Fields, alive: u64) -> bool {
        f.total_density() == alive * DENSITY_ONE as u64 && f.total_occupancy() == alive
    }

    proptest::proptest! {
        #[test]
        fn density_and_occupancy_are_conserved(
            three: bool,
            bodies in proptest::collection::vec((any_coord(), any_coord(), any_coord(), proptest::bool::ANY), 1..64),
        ) {
            let dims = if three { Dims::Three } else { Dims::Two };
            let pos: Vec<[i32; 3]> = bodies.iter().map(|&(x, y, z, _)| [x, y, if three { z } else { 0 }]).collect();
            let mut w = world(dims, &pos);
            for (b, &(_, _, _, keep)) in w.bodies.iter_mut().zip(&bodies) {
                if !keep {
                    *b = Body::default();
                }
            }
            let alive = w.alive_count() as u64;
            let f = compute(&w);
            proptest::prop_assert!(conserved(&f, alive));
        }
    }

    fn any_coord() -> impl proptest::strategy::Strategy<Value = i32> {
        use proptest::prelude::*;
        prop_oneof![
            0..=BOX_MM,
            Just(0),
            Just(BOX_MM),
            (0..=8i32).prop_map(|k| k * CELL_MM),
            any::<i32>()
        ]
    }

    #[test]
    fn the_conservation_check_catches_a_lost_weight() {
        // Planted fault: one corner's weight of one body lost.
        let mut f = compute(&world(Dims::Two, &[[1000, 250, 0]]));
        assert!(conserved(&f, 1));
        f.density[1][1] = 0;
        assert!(!conserved(&f, 1));
    }
}
