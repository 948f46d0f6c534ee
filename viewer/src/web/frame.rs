//! One frame for the page: the SVG picture that `ostm-viewer render` draws of the world
//! (the same [`svg::render`], so the page shows exactly the file `render` writes), the
//! fields of every body slot for hovering, and what the picture's world is proven by.

use crate::render::ghost::GhostCache;
use crate::render::svg::{self, Ghost, Overlay};
use ostm_protocol::World;
use serde_json::json;

/// What proves the world a frame shows (docs/watch.md, "Frames").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Live: the viewer reached this world by stepping and its hash equals the host's.
    Verified,
    /// Live: the host's snapshot (attach, resync, reconnection), no step verified from it.
    Snapshot,
    /// Live, after a drift: a world that is not verified (the viewer's or the host's at
    /// the drifting step).
    Drift,
    /// Replay: the world's hash equals the file's hash row at the step.
    MatchesRow,
    /// Replay: it differs from the file's hash row.
    DiffersFromRow,
    /// Replay: the file has no hash rows.
    NoRow,
}

impl Check {
    /// The name the page receives.
    pub fn name(self) -> &'static str {
        match self {
            Check::Verified => "verified",
            Check::Snapshot => "snapshot",
            Check::Drift => "drift",
            Check::MatchesRow => "matches_row",
            Check::DiffersFromRow => "differs_from_row",
            Check::NoRow => "no_row",
        }
    }

    /// A replay world's check against its hash row.
    pub fn of_row(world: &World, row: Option<u64>) -> Check {
        match row {
            None => Check::NoRow,
            Some(h) if h == world.hash() => Check::MatchesRow,
            Some(_) => Check::DiffersFromRow,
        }
    }
}

/// What one tab chose to see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    pub overlay: Overlay,
    /// Draw the `--ghost` pose cache's bodies.
    pub ghost: bool,
}

impl Default for Look {
    /// `render`'s defaults: the density overlay, the ghost when there is one.
    fn default() -> Look {
        Look {
            overlay: Overlay::Density,
            ghost: true,
        }
    }
}

/// The overlay's name in messages.
pub fn overlay_name(o: Overlay) -> &'static str {
    match o {
        Overlay::Density => "density",
        Overlay::Occupancy => "occupancy",
        Overlay::None => "none",
    }
}

/// What a frame shows, besides the look.
pub struct Shown<'a> {
    /// The title's name: the replay's file name, or the host's address.
    pub name: &'a str,
    pub world: &'a World,
    pub check: Check,
    /// Which world this is: `live`, `replay`, or after a drift `last_verified`, `viewer`,
    /// `host`.
    pub which: &'a str,
    /// A body to mark (the drift report's).
    pub marked: Option<u8>,
}

/// The `frame` message (JSON text).
pub fn message(shown: &Shown<'_>, look: Look, ghost: Option<&GhostCache>) -> String {
    let world = shown.world;
    let ghost = match ghost {
        Some(g) if look.ghost => g.at(world.step),
        _ => Ghost::None,
    };
    let picture = svg::render(&svg::Frame {
        name: shown.name.to_string(),
        world,
        overlay: look.overlay,
        ghost,
    });
    let bodies: Vec<_> = world
        .bodies
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"index": i, "alive": b.alive, "still": b.still, "pos": b.pos, "vel": b.vel}))
        .collect();
    json!({
        "type": "frame",
        "step": world.step,
        "world": shown.which,
        "check": shown.check.name(),
        "overlay": overlay_name(look.overlay),
        "ghost": look.ghost,
        "alive": world.alive_count(),
        "slots": world.bodies.len(),
        "gravity": world.gravity,
        "hash": format!("{:016x}", world.hash()),
        "marked": shown.marked,
        "bodies": bodies,
        "svg": picture,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ostm_protocol::sim::world::Setup;
    use ostm_protocol::Dims;

    #[test]
    fn a_frame_holds_the_picture_render_draws_and_every_slot() {
        let setup = Setup {
            dims: Dims::Three,
            bodies: 3,
            seed: 5,
        };
        let mut w = World::new(setup, None);
        w.step(&[]);
        let look = Look {
            overlay: Overlay::Occupancy,
            ghost: false,
        };
        let shown = Shown {
            name: "x.ostm",
            world: &w,
            check: Check::of_row(&w, Some(w.hash())),
            which: "replay",
            marked: None,
        };
        let m: serde_json::Value = serde_json::from_str(&message(&shown, look, None)).unwrap();
        let want = svg::render(&svg::Frame {
            name: "x.ostm".into(),
            world: &w,
            overlay: Overlay::Occupancy,
            ghost: Ghost::None,
        });
        assert_eq!(m["svg"].as_str(), Some(want.as_str()));
        assert_eq!(m["check"], "matches_row");
        assert_eq!(m["step"], 1);
        assert_eq!(m["bodies"].as_array().map(Vec::len), Some(w.bodies.len()));
        assert_eq!(m["bodies"][1]["pos"][0], w.bodies[1].pos[0]);
        assert_eq!(m["alive"], w.alive_count());
        assert_eq!(Check::of_row(&w, Some(w.hash() ^ 1)), Check::DiffersFromRow);
        assert_eq!(Check::of_row(&w, None), Check::NoRow);
    }
}
