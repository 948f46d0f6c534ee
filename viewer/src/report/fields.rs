//! Both fields of a world as `ostm-viewer fields` prints them (text, or JSON for
//! scripts); `attach --fields-at` prints the same.

use ostm_protocol::sim::fields::{
    self, density_decimal, Fields, CELL_MM, DENSITY_ONE, GRID, VERTICES,
};
use ostm_protocol::{Dims, World};
use serde_json::json;

/// The JSON report: density rows by j (0..=8) of values by i; occupancy rows by j
/// (0..=7) of cells by i, each `[triangle 0, triangle 1]`.
pub fn to_json(name: &str, world: &World, f: &Fields) -> serde_json::Value {
    let link = world.link().map(|l| {
        json!({
            "role": l.role as u8,
            "role_name": l.role.name(),
            "body": l.body,
            "transfer_step": l.transfer_step,
            "declaration": l.declaration(),
            "key": l.own_key(),
        })
    });
    json!({
        "file": name,
        "step": world.step,
        "dims": world.dims() as u8,
        "plane": fields::floor_axis_names(world.dims()),
        "declared": world.link().is_some(),
        "link": link,
        "live_bodies": world.alive_count(),
        "density": {
            "per_body": DENSITY_ONE,
            "cell_mm": CELL_MM,
            "values": f.density,
        },
        "occupancy": {
            "values": f.occupancy,
        },
    })
}

/// The text report: both fields laid out as the picture shows them (2D with j = 8 at
/// the top, 3D with j = 0 at the top).
pub fn to_text(name: &str, world: &World, f: &Fields) -> String {
    use std::fmt::Write;
    let dims = world.dims();
    let [u, v] = fields::floor_axis_names(dims);
    let mut s = String::new();
    let view = match dims {
        Dims::Two => "2D, seen from the side",
        Dims::Three => "3D, seen from above",
    };
    let _ = writeln!(
        s,
        "{name} at step {}: {view}, floor plane {u}-{v}, {} live bodies",
        world.step,
        world.alive_count()
    );
    match world.link() {
        Some(l) => {
            let _ = writeln!(
                s,
                "fields declared by the link block (role {}, {})",
                l.role as u8,
                l.role.name()
            );
        }
        None => {
            let _ = writeln!(
                s,
                "no link block: this world declares no fields (computed anyway)"
            );
        }
    }
    // A table of n x n cells under a `j\i` header: 2D with the last row at the top.
    let table = |s: &mut String, n: usize, cell: &dyn Fn(usize, usize) -> String| {
        let _ = write!(s, "  j\\i");
        for i in 0..n {
            let _ = write!(s, "{i:>7}");
        }
        s.push('\n');
        let rows: Vec<usize> = match dims {
            Dims::Two => (0..n).rev().collect(),
            Dims::Three => (0..n).collect(),
        };
        for j in rows {
            let _ = write!(s, "{j:>5}");
            for i in 0..n {
                let _ = write!(s, "{:>7}", cell(i, j));
            }
            s.push('\n');
        }
    };
    let _ = writeln!(
        s,
        "\ndensity, bodies per vertex (rounded; --json is exact); vertex (i, j) at {u} = 1250 i, {v} = 1250 j mm"
    );
    table(&mut s, VERTICES, &|i, j| match f.density[j][i] {
        0 => ".".to_string(),
        d => rounded(d),
    });
    let _ = writeln!(
        s,
        "  total {} bodies, largest {}",
        density_decimal(f.total_density().min(u32::MAX as u64) as u32),
        density_decimal(f.max_density())
    );
    let _ = writeln!(
        s,
        "\noccupancy, bodies per triangle as lower/upper (lower: {v} offset < {u} offset in the cell)"
    );
    table(&mut s, GRID, &|i, j| match f.occupancy[j][i] {
        [0, 0] => ".".to_string(),
        [a, b] => format!("{a}/{b}"),
    });
    let _ = writeln!(s, "  total {} bodies", f.total_occupancy());
    s
}

/// A density value in bodies rounded to three decimals.
fn rounded(d: u32) -> String {
    let thousandths = (d as u64 * 1000 + DENSITY_ONE as u64 / 2) / DENSITY_ONE as u64;
    if thousandths == 0 {
        return "~0".to_string();
    }
    format!("{}.{:03}", thousandths / 1000, thousandths % 1000)
}
