//! The world on a braille canvas, seen as `render` draws it (viewer/src/render/svg.rs):
//! the floor axes of [`fields::floor_axes`], 2D from the side (x right, y up), 3D from
//! above (x right, z down the page, +y toward the viewer). Each live body is a blob of
//! 3 x 3 braille dots; in 3D its colour tells its height. On drift the body named by the
//! report is drawn red, ringed, labelled, and the host's place for it marked `×`.

use ostm_protocol::sim::fields;
use ostm_protocol::sim::world::BOX_MM;
use ostm_protocol::{Dims, World};
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::symbols::Marker;
use ratatui::text::Span;
use ratatui::widgets::canvas::{Canvas, Circle, Context, Points, Rectangle};
use ratatui::widgets::Block;

/// The colour of a body in a 2D world, and of the box.
pub const BODY: Color = Color::White;
const BOX: Color = Color::DarkGray;
/// The drifting body.
pub const DRIFT: Color = Color::Red;
/// The ring around the body a link block names (as in the pictures).
const LINK: Color = Color::Yellow;

/// Heights in a 3D world, low to high: a body's colour is the band its y falls in.
pub const HEIGHTS: [Color; 4] = [Color::Blue, Color::Cyan, Color::Green, Color::White];

/// A body to mark on the world: the drifting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub body: usize,
    /// Where the host's world has it, when the host sent its world.
    pub host_pos: Option<[i32; 3]>,
}

/// Where position `pos` is drawn, in millimetres on a canvas whose y grows up the screen.
pub fn on_canvas(dims: Dims, pos: [i32; 3]) -> (f64, f64) {
    let [u, v] = fields::floor_axes(dims);
    let (u, v) = (pos[u] as f64, pos[v] as f64);
    match dims {
        Dims::Two => (u, v),
        Dims::Three => (u, BOX_MM as f64 - v),
    }
}

/// The colour of a live body at `pos` (not marked).
pub fn body_colour(dims: Dims, pos: [i32; 3]) -> Color {
    match dims {
        Dims::Two => BODY,
        Dims::Three => {
            let band = pos[1].clamp(0, BOX_MM - 1) as usize * HEIGHTS.len() / BOX_MM as usize;
            HEIGHTS[band]
        }
    }
}

/// The canvas for `world` in `area` (the block's inside holds the box, stretched to it).
pub fn canvas<'a>(
    world: &'a World,
    mark: Option<Mark>,
    block: Block<'a>,
    area: Rect,
) -> Canvas<'a, impl Fn(&mut Context<'_>) + 'a> {
    let inner = block.inner(area);
    let side = BOX_MM as f64;
    // One braille dot, in millimetres, across and up.
    let dx = side / (f64::from(inner.width.max(1)) * 2.0);
    let dy = side / (f64::from(inner.height.max(1)) * 4.0);
    Canvas::default()
        .block(block)
        .marker(Marker::Braille)
        .x_bounds([0.0, side])
        .y_bounds([0.0, side])
        .paint(move |ctx| {
            let dims = world.dims();
            ctx.draw(&Rectangle {
                x: 0.0,
                y: 0.0,
                width: side,
                height: side,
                color: BOX,
            });
            ctx.layer();
            let blob = |(x, y): (f64, f64)| {
                let mut dots = Vec::with_capacity(9);
                for i in -1..=1 {
                    for j in -1..=1 {
                        dots.push((
                            (x + f64::from(i) * dx).clamp(0.0, side),
                            (y + f64::from(j) * dy).clamp(0.0, side),
                        ));
                    }
                }
                dots
            };
            let linked = world
                .link()
                .filter(|l| l.declaration().is_some())
                .map(|l| l.body as usize);
            for (i, b) in world.bodies.iter().enumerate().filter(|(_, b)| b.alive) {
                let at = on_canvas(dims, b.pos);
                let marked = mark.is_some_and(|m| m.body == i);
                let color = if marked {
                    DRIFT
                } else {
                    body_colour(dims, b.pos)
                };
                ctx.draw(&Points {
                    coords: &blob(at),
                    color,
                });
                if linked == Some(i) {
                    ctx.draw(&Circle {
                        x: at.0,
                        y: at.1,
                        radius: 3.0 * dx.max(dy),
                        color: LINK,
                    });
                }
            }
            if let Some(m) = mark {
                if let Some(b) = world.bodies.get(m.body) {
                    let at = on_canvas(dims, b.pos);
                    ctx.draw(&Circle {
                        x: at.0,
                        y: at.1,
                        radius: 4.0 * dx.max(dy),
                        color: DRIFT,
                    });
                    // The label right of the ring, or left of it near the right wall.
                    let label = format!("body {}", m.body);
                    let width = (label.chars().count() as f64 + 1.0) * 2.0 * dx;
                    let x = if at.0 + 6.0 * dx + width <= side {
                        at.0 + 6.0 * dx
                    } else {
                        (at.0 - 6.0 * dx - width).max(0.0)
                    };
                    ctx.print(x, at.1, Span::styled(label, DRIFT));
                }
                if let Some(p) = m.host_pos {
                    let (x, y) = on_canvas(dims, p);
                    ctx.print(
                        x.clamp(0.0, side),
                        y.clamp(0.0, side),
                        Span::styled("×", DRIFT),
                    );
                }
            }
        })
}
