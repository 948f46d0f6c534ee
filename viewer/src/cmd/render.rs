//! `ostm-viewer render`: one frame of a replay as an SVG or PNG picture.

use crate::exit::{fail, Exit};
use crate::render::ghost::read_ghost;
use crate::render::svg::{self, Ghost, Overlay};
use crate::render::{file_name, png};
use crate::world_at::read_world_at;
use std::path::PathBuf;

/// Arguments of `render`.
#[derive(clap::Args)]
#[command(
    after_help = "The picture shows the box from the side in 2D (x right, y up) and from above in 3D \
(x right, z down the page, higher bodies drawn larger), a field over the 8 x 8 floor grid as a \
colour map with its legend, every live body with its index, and with --ghost the pose cache's \
bodies at the same step (dashed, joined to their live body). The output's extension picks the \
format: .svg or .png.

Examples:
  ostm-viewer render testdata/test-field-2d.ostm --step 120 -o frame.svg
  ostm-viewer render testdata/test-field-3d.ostm --step 60 --overlay occupancy -o frame.png
  ostm-viewer render testdata/test-2d-600.ostm --step 210 --ghost testdata/test-2d-ghost.ospc -o ghost.png
  ostm-viewer render testdata/test-10000.ostm --step 5000 -o frame.png --scale 2 --json"
)]
pub struct Args {
    /// The replay file.
    pub file: PathBuf,
    /// The step to draw (the world after that many steps from step 0).
    #[arg(long)]
    pub step: u64,
    /// The output picture: FILE.svg or FILE.png.
    #[arg(short, long)]
    pub output: PathBuf,
    /// The field coloured over the floor grid.
    #[arg(long, value_enum, default_value_t = Overlay::Density)]
    pub overlay: Overlay,
    /// A pose cache (.ospc) whose bodies at this step are drawn beside the live ones.
    #[arg(long)]
    pub ghost: Option<PathBuf>,
    /// PNG only: pixels per SVG unit (the SVG is 1040 x 940).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f32,
    /// Print what was written as JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `render`.
pub fn run(args: Args) -> Exit {
    let ext = args
        .output
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if ext != "svg" && ext != "png" {
        return fail(format!(
            "{}: expected an output ending in .svg or .png",
            args.output.display()
        ));
    }
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 8.0) {
        return fail(format!("expected --scale in (0, 8], found {}", args.scale));
    }
    let (replay, world) = match read_world_at(&args.file, args.step) {
        Ok(rw) => rw,
        Err(e) => return fail(e),
    };
    let cache = match &args.ghost {
        Some(p) => match read_ghost(p, replay.setup.dims) {
            Ok(c) => Some(c),
            Err(e) => return fail(e),
        },
        None => None,
    };
    let ghost = match &cache {
        None => Ghost::None,
        Some(c) => {
            let g = c.at(args.step);
            if let Ghost::NoFrame { name, first, last } = &g {
                eprintln!(
                    "note: {name} has no frame for step {} (it holds steps {first}..={last})",
                    args.step
                );
            }
            g
        }
    };
    let frame = svg::Frame {
        name: file_name(&args.file),
        world: &world,
        overlay: args.overlay,
        ghost,
    };
    let picture = svg::render(&frame);
    let (bytes, width, height) = if ext == "png" {
        match png::to_png(&picture, args.scale) {
            Ok(p) => (p.bytes, p.width, p.height),
            Err(e) => return fail(e),
        }
    } else {
        (picture.into_bytes(), svg::WIDTH as u32, svg::HEIGHT as u32)
    };
    let len = bytes.len();
    if let Err(e) = ostm_protocol::format::write_whole(&args.output, &bytes) {
        return fail(format!("{}: cannot write: {e}", args.output.display()));
    }
    crate::report::report(
        args.json,
        serde_json::json!({
            "file": args.file.display().to_string(),
            "output": args.output.display().to_string(),
            "format": ext,
            "step": world.step,
            "width": width,
            "height": height,
            "live_bodies": world.alive_count(),
            "bytes": len,
        }),
        || {
            format!(
                "wrote {}: step {}, {width} x {height} {ext}",
                args.output.display(),
                world.step
            )
        },
    );
    Exit::Ok
}
