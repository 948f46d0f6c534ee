//! `ostm-viewer fields`: both fields of a replay's world at one step.

use crate::exit::{fail, Exit};
use crate::report::fields::{to_json, to_text};
use crate::world_at::read_world_at;
use ostm_protocol::sim::fields;

/// Arguments of `fields`.
#[derive(clap::Args)]
#[command(
    after_help = "Density is per grid vertex (9 x 9), in bodies (--json: exact integers in units of \
1/1 562 500 body); occupancy is per triangle (8 x 8 cells, lower/upper triangle). \
The floor plane is x-y in 2D (seen from the side) and x-z in 3D (seen from above); \
see docs/test-module.md, \"Fields: density and occupancy\".

Examples:
  ostm-viewer fields testdata/test-field-2d.ostm --step 120
  ostm-viewer fields testdata/test-field-3d.ostm --step 0 --json | jq '.density.values[4][4]'"
)]
pub struct Args {
    /// The replay file.
    pub file: std::path::PathBuf,
    /// The step whose world is measured (the state after that many steps from step 0;
    /// a replay with a start snapshot holds steps from its start step on).
    #[arg(long)]
    pub step: u64,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `fields`.
pub fn run(args: Args) -> Exit {
    let world = match read_world_at(&args.file, args.step) {
        Ok((_, w)) => w,
        Err(e) => return fail(e),
    };
    let f = fields::compute(&world);
    let name = args.file.display().to_string();
    if args.json {
        println!("{}", to_json(&name, &world, &f));
    } else {
        print!("{}", to_text(&name, &world, &f));
    }
    Exit::Ok
}
