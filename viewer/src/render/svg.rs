//! One frame as an SVG picture: the box (from the side in 2D, from above in 3D), a field
//! overlay as a colour map over the floor grid with its legend, every body, and ghost
//! bodies from a pose cache.
//!
//! The picture is built for people and for tests: every drawn thing carries data
//! attributes (`class="body" data-index=…`, `class="vertex" data-i data-j data-value`,
//! `class="triangle" … data-t`), and the root records the plot rectangle (`data-plot`,
//! pixels) and the world window it shows (`data-view`, millimetres), so a test can parse
//! the picture and check it against the world without comparing pixels.
//!
//! Index labels are drawn last, above everything, each placed by [`labels::place`] so
//! that no two overlap: inside its body when that spot is free, else beside it, else left
//! out (`data-label="hidden"` on the body, and a count in the legend). Ghosts are clipped
//! to the plot; a ghost beyond the plot's window is drawn as a marker on the plot's edge
//! pointing its way.

use super::labels::{self, Circle, Mark, Placed, Rect, LABEL_SIZE};
use ostm_protocol::format::ospc::Pose;
use ostm_protocol::sim::fields::{self, density_decimal, Fields, CELL_MM, DENSITY_ONE, GRID};
use ostm_protocol::sim::world::BOX_MM;
use ostm_protocol::{Dims, World};
use std::fmt::Write;

/// Which field to colour the floor grid with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Overlay {
    Density,
    Occupancy,
    None,
}

/// Ghost bodies to draw, if any.
pub enum Ghost<'a> {
    /// No pose cache given.
    None,
    /// The cache's frame at this step.
    Poses { name: String, poses: &'a [Pose] },
    /// A cache was given but holds no frame for this step.
    NoFrame { name: String, first: u64, last: u64 },
}

/// Everything one picture shows.
pub struct Frame<'a> {
    /// The file the world came from (shown in the title).
    pub name: String,
    pub world: &'a World,
    pub overlay: Overlay,
    pub ghost: Ghost<'a>,
}

/// Canvas size in pixels.
pub const WIDTH: f64 = 1040.0;
/// See [`WIDTH`].
pub const HEIGHT: f64 = 940.0;
const PLOT_X: f64 = 84.0;
const PLOT_Y: f64 = 112.0;
const PLOT: f64 = 760.0;
const LEGEND_X: f64 = 900.0;

const BG: &str = "#12151d";
const PANEL: &str = "#1b2030";
const INK: &str = "#e9ecf3";
const DIM: &str = "#98a2b8";
const GHOST: &str = "#ff6fcf";
const LINK: &str = "#ffb020";
const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";

/// Viridis, nine stops from 0 to 1.
const VIRIDIS: [(u8, u8, u8); 9] = [
    (0x44, 0x01, 0x54),
    (0x47, 0x2c, 0x7a),
    (0x3b, 0x51, 0x8b),
    (0x2c, 0x71, 0x8e),
    (0x21, 0x90, 0x8d),
    (0x27, 0xad, 0x81),
    (0x5c, 0xc8, 0x63),
    (0xaa, 0xdc, 0x32),
    (0xfd, 0xe7, 0x25),
];

/// The colour of `t` in 0..=1 on the map, as `#rrggbb`.
pub fn colour(t: f64) -> String {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (VIRIDIS.len() - 1) as f64;
    let k = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - k as f64;
    let (a, b) = (VIRIDIS[k], VIRIDIS[k + 1]);
    let mix = |p: u8, q: u8| (p as f64 + (q as f64 - p as f64) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// Maps world millimetres to picture pixels.
#[derive(Debug, Clone, Copy)]
struct View {
    dims: Dims,
    /// Lowest u and v shown (mm); the window is square.
    min: f64,
    /// Side of the window (mm).
    span: f64,
}

impl View {
    /// The box, widened to take in every ghost body (up to 2500 mm past the walls).
    fn new(dims: Dims, ghost: &Ghost<'_>) -> View {
        let [au, av] = fields::floor_axes(dims);
        let mut pad = 0i64;
        if let Ghost::Poses { poses, .. } = ghost {
            for p in poses.iter().filter(|p| p.present) {
                for a in [au, av] {
                    let c = p.pos[a] as i64;
                    pad = pad.max(-c).max(c - BOX_MM as i64);
                }
            }
        }
        let pad = if pad > 0 { (pad + 300).min(2500) } else { 0 } as f64;
        View {
            dims,
            min: -pad,
            span: BOX_MM as f64 + 2.0 * pad,
        }
    }

    fn scale(&self) -> f64 {
        PLOT / self.span
    }

    /// Pixel position of floor coordinates (u, v): 2D has v (= y) up the page, 3D has
    /// v (= z) down the page (the floor seen from above, +y toward the viewer).
    fn px(&self, u: f64, v: f64) -> (f64, f64) {
        let x = PLOT_X + (u - self.min) * self.scale();
        let y = match self.dims {
            Dims::Two => PLOT_Y + (self.min + self.span - v) * self.scale(),
            Dims::Three => PLOT_Y + (v - self.min) * self.scale(),
        };
        (x, y)
    }

    /// Pixel position of a body position (clamped far outside the window so the picture
    /// stays finite).
    fn body_px(&self, pos: [i32; 3]) -> (f64, f64) {
        let [au, av] = fields::floor_axes(self.dims);
        let lo = self.min - self.span;
        let hi = self.min + 2.0 * self.span;
        self.px(
            (pos[au] as f64).clamp(lo, hi),
            (pos[av] as f64).clamp(lo, hi),
        )
    }

    /// The pixel rectangle (x, y, w, h) of a floor rectangle.
    fn rect(&self, u0: f64, v0: f64, u1: f64, v1: f64) -> (f64, f64, f64, f64) {
        let (xa, ya) = self.px(u0, v0);
        let (xb, yb) = self.px(u1, v1);
        (xa.min(xb), ya.min(yb), (xb - xa).abs(), (yb - ya).abs())
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pos_attrs(pos: [i32; 3]) -> String {
    format!(
        r#"data-x="{}" data-y="{}" data-z="{}""#,
        pos[0], pos[1], pos[2]
    )
}

/// Bodies in 3D are drawn larger the higher they are (nearer the viewer above).
fn body_radius(dims: Dims, pos: [i32; 3]) -> f64 {
    match dims {
        Dims::Two => 10.0,
        Dims::Three => 8.0 + 6.0 * (pos[1].clamp(0, BOX_MM) as f64 / BOX_MM as f64),
    }
}

/// The whole picture.
pub fn render(frame: &Frame<'_>) -> String {
    let world = frame.world;
    let dims = world.dims();
    let view = View::new(dims, &frame.ghost);
    let f = fields::compute(world);
    let mut s = String::with_capacity(64 * 1024);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="{FONT}" data-plot="{PLOT_X} {PLOT_Y} {PLOT} {PLOT}" data-view="{} {}" data-dims="{}" data-step="{}">"#,
        view.min, view.span, dims as u8, world.step
    );
    let _ = writeln!(
        s,
        "<title>{} at step {}</title>",
        esc(&frame.name),
        world.step
    );
    let _ = writeln!(
        s,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="{BG}"/>"#
    );
    title(&mut s, frame, &f);
    let (bx, by, bw, bh) = view.rect(0.0, 0.0, BOX_MM as f64, BOX_MM as f64);
    let _ = writeln!(
        s,
        r#"<rect x="{PLOT_X}" y="{PLOT_Y}" width="{PLOT}" height="{PLOT}" fill="{PANEL}"/>"#
    );
    match frame.overlay {
        Overlay::Density => density_overlay(&mut s, &view, &f),
        Overlay::Occupancy => occupancy_overlay(&mut s, &view, &f),
        Overlay::None => {}
    }
    grid(&mut s, &view);
    let _ = writeln!(
        s,
        r##"<rect id="box" x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{bh:.1}" fill="none" stroke="{INK}" stroke-width="2.5"/>"##
    );
    axes(&mut s, &view);
    let scene = Scene::new(&view, world, &frame.ghost);
    ghosts(&mut s, &view, world, &frame.ghost, &scene);
    bodies(&mut s, &view, world, &scene);
    index_labels(&mut s, &scene);
    legend(&mut s, frame, &f, &scene);
    s.push_str("</svg>\n");
    s
}

fn title(s: &mut String, frame: &Frame<'_>, f: &Fields) {
    let world = frame.world;
    let _ = writeln!(
        s,
        r#"<text x="{PLOT_X}" y="46" font-size="26" font-weight="bold" fill="{INK}">{} <tspan fill="{DIM}" font-weight="normal">·</tspan> step {}</text>"#,
        esc(&frame.name),
        world.step
    );
    let view = match world.dims() {
        Dims::Two => "2D, seen from the side (x to the right, y up)",
        Dims::Three => "3D, seen from above (x to the right, z down; larger = higher)",
    };
    let link = match world.link() {
        Some(l) => match l.declaration() {
            Some(d) => format!(
                "link: {} of body {} at step {} (declares {d}, key {})",
                l.role.name(),
                l.body,
                l.transfer_step,
                l.own_key().unwrap_or("")
            ),
            None => "link: fields only (role 3), declares density and occupancy".to_string(),
        },
        None => "no link block: the fields are shown but not declared".to_string(),
    };
    let _ = writeln!(
        s,
        r#"<text x="{PLOT_X}" y="72" font-size="14" fill="{DIM}">{view} · {} of {} bodies live · Σ density {}</text>"#,
        world.alive_count(),
        world.bodies.len(),
        density_decimal(f.total_density().min(u32::MAX as u64) as u32),
    );
    let _ = writeln!(
        s,
        r#"<text x="{PLOT_X}" y="92" font-size="14" fill="{DIM}">{}</text>"#,
        esc(&link)
    );
}

fn density_overlay(s: &mut String, view: &View, f: &Fields) {
    let max = f.max_density().max(DENSITY_ONE) as f64;
    let half = CELL_MM as f64 / 2.0;
    let _ = writeln!(s, r#"<g id="overlay" data-field="density">"#);
    for (j, row) in f.density.iter().enumerate() {
        for (i, &d) in row.iter().enumerate() {
            let (cu, cv) = ((i as i32 * CELL_MM) as f64, (j as i32 * CELL_MM) as f64);
            let (x, y, w, h) = view.rect(
                (cu - half).max(0.0),
                (cv - half).max(0.0),
                (cu + half).min(BOX_MM as f64),
                (cv + half).min(BOX_MM as f64),
            );
            let _ = writeln!(
                s,
                r#"<rect class="vertex" data-i="{i}" data-j="{j}" data-value="{d}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}"><title>vertex ({i}, {j}): {} bodies</title></rect>"#,
                colour(d as f64 / max),
                density_decimal(d)
            );
        }
    }
    s.push_str("</g>\n");
}

fn occupancy_overlay(s: &mut String, view: &View, f: &Fields) {
    let max = f.max_occupancy().max(1) as f64;
    let _ = writeln!(s, r#"<g id="overlay" data-field="occupancy">"#);
    for j in 0..GRID {
        for i in 0..GRID {
            let c = |di: usize, dj: usize| {
                view.px(
                    ((i + di) as i32 * CELL_MM) as f64,
                    ((j + dj) as i32 * CELL_MM) as f64,
                )
            };
            let corners = [[c(0, 0), c(1, 0), c(1, 1)], [c(0, 0), c(1, 1), c(0, 1)]];
            for (t, tri) in corners.iter().enumerate() {
                let n = f.occupancy[j][i][t];
                let pts: Vec<String> = tri.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                let _ = writeln!(
                    s,
                    r#"<polygon class="triangle" data-i="{i}" data-j="{j}" data-t="{t}" data-value="{n}" points="{}" fill="{}" stroke="{BG}" stroke-width="0.6"><title>cell ({i}, {j}) triangle {t}: {n} bodies</title></polygon>"#,
                    pts.join(" "),
                    colour(n as f64 / max)
                );
            }
        }
    }
    s.push_str("</g>\n");
}

fn grid(s: &mut String, view: &View) {
    let _ = writeln!(
        s,
        r#"<g id="grid" stroke="{INK}" stroke-opacity="0.18" stroke-width="1">"#
    );
    for k in 1..GRID {
        let m = (k as i32 * CELL_MM) as f64;
        let (x0, y0) = view.px(m, 0.0);
        let (x1, y1) = view.px(m, BOX_MM as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{x0:.1}" y1="{y0:.1}" x2="{x1:.1}" y2="{y1:.1}"/>"#
        );
        let (x0, y0) = view.px(0.0, m);
        let (x1, y1) = view.px(BOX_MM as f64, m);
        let _ = writeln!(
            s,
            r#"<line x1="{x0:.1}" y1="{y0:.1}" x2="{x1:.1}" y2="{y1:.1}"/>"#
        );
    }
    s.push_str("</g>\n");
}

fn axes(s: &mut String, view: &View) {
    let [nu, nv] = fields::floor_axis_names(view.dims);
    let _ = writeln!(s, r#"<g id="axes" font-size="13" fill="{DIM}">"#);
    for k in 0..=4 {
        let m = k as f64 * 2500.0;
        let label = format!("{}", m / 1000.0);
        let (x, _) = view.px(m, 0.0);
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            PLOT_Y + PLOT + 20.0
        );
        let (_, y) = view.px(0.0, m);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
            PLOT_X - 10.0,
            y + 4.5
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="15" fill="{INK}">{nu} (m)</text>"#,
        PLOT_X + PLOT / 2.0,
        PLOT_Y + PLOT + 44.0
    );
    let (cx, cy) = (PLOT_X - 52.0, PLOT_Y + PLOT / 2.0);
    let _ = writeln!(
        s,
        r#"<text x="{cx:.1}" y="{cy:.1}" text-anchor="middle" font-size="15" fill="{INK}" transform="rotate(-90 {cx:.1} {cy:.1})">{nv} (m)</text>"#
    );
    s.push_str("</g>\n");
}

/// The plot's rectangle, in pixels.
const PLOT_AREA: Rect = Rect {
    x: PLOT_X,
    y: PLOT_Y,
    w: PLOT,
    h: PLOT,
};
/// Radius of a ghost marker (for label placement) and half its triangle's size.
const MARKER_R: f64 = 7.0;

/// Whose label a [`Label`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Of {
    Body,
    Ghost,
}

/// One index label and where it went.
struct Label {
    of: Of,
    index: usize,
    placed: Placed,
}

/// A ghost beyond the plot: its marker's point on the plot's edge, and the unit vector
/// toward the ghost.
#[derive(Debug, Clone, Copy)]
struct Marker {
    at: (f64, f64),
    toward: (f64, f64),
}

/// What the bodies, ghosts and labels look like once placed.
struct Scene {
    /// Per ghost index: `None` when drawn in the plot, else its marker.
    beyond: Vec<Option<Marker>>,
    labels: Vec<Label>,
}

impl Scene {
    fn new(view: &View, world: &World, ghost: &Ghost<'_>) -> Scene {
        let mut circles = Vec::new();
        let mut marks = Vec::new();
        let mut whose = Vec::new();
        for (i, b) in world.bodies.iter().enumerate().filter(|(_, b)| b.alive) {
            let (x, y) = view.body_px(b.pos);
            marks.push(Mark {
                text: i.to_string(),
                own: circles.len(),
                inside: true,
            });
            whose.push((Of::Body, i));
            circles.push(Circle {
                x,
                y,
                r: body_radius(view.dims, b.pos),
            });
        }
        let mut beyond = Vec::new();
        // Ghost circles whose centre is beyond the plot: drawn (clipped), so no label may
        // sit on the part that shows, but labelled at their marker.
        let mut peeking = Vec::new();
        if let Ghost::Poses { poses, .. } = ghost {
            beyond = vec![None; poses.len()];
            for (i, p) in poses.iter().enumerate().filter(|(_, p)| p.present) {
                let (x, y) = view.body_px(p.pos);
                let in_plot =
                    (PLOT_X..=PLOT_X + PLOT).contains(&x) && (PLOT_Y..=PLOT_Y + PLOT).contains(&y);
                let drawn = Circle {
                    x,
                    y,
                    r: body_radius(view.dims, p.pos),
                };
                let circle = if in_plot {
                    drawn
                } else {
                    peeking.push(drawn);
                    let (ex, ey) = (
                        x.clamp(PLOT_X + MARKER_R, PLOT_X + PLOT - MARKER_R),
                        y.clamp(PLOT_Y + MARKER_R, PLOT_Y + PLOT - MARKER_R),
                    );
                    let (dx, dy) = (x - ex, y - ey);
                    let len = (dx * dx + dy * dy).sqrt().max(1e-9);
                    beyond[i] = Some(Marker {
                        at: (ex, ey),
                        toward: (dx / len, dy / len),
                    });
                    Circle {
                        x: ex,
                        y: ey,
                        r: MARKER_R,
                    }
                };
                marks.push(Mark {
                    text: i.to_string(),
                    own: circles.len(),
                    inside: false,
                });
                whose.push((Of::Ghost, i));
                circles.push(circle);
            }
        }
        circles.extend(peeking);
        let placed = labels::place(&marks, &circles, PLOT_AREA);
        Scene {
            beyond,
            labels: whose
                .into_iter()
                .zip(placed)
                .map(|((of, index), placed)| Label { of, index, placed })
                .collect(),
        }
    }

    /// `inside`, `outside` or `hidden`: where the label of body or ghost `index` went.
    fn label_of(&self, of: Of, index: usize) -> &'static str {
        match self
            .labels
            .iter()
            .find(|l| l.of == of && l.index == index)
            .map(|l| &l.placed)
        {
            Some(Placed::Inside { .. }) => "inside",
            Some(Placed::Outside { .. }) => "outside",
            _ => "hidden",
        }
    }

    /// How many labels were left out.
    fn hidden(&self) -> usize {
        self.labels
            .iter()
            .filter(|l| l.placed == Placed::Hidden)
            .count()
    }
}

fn ghosts(s: &mut String, view: &View, world: &World, ghost: &Ghost<'_>, scene: &Scene) {
    let Ghost::Poses { poses, .. } = ghost else {
        return;
    };
    let _ = writeln!(
        s,
        r#"<defs><clipPath id="plot-clip"><rect x="{PLOT_X}" y="{PLOT_Y}" width="{PLOT}" height="{PLOT}"/></clipPath></defs>"#
    );
    let _ = writeln!(s, r#"<g id="ghosts" clip-path="url(#plot-clip)">"#);
    let [au, av] = fields::floor_axes(view.dims);
    for (i, p) in poses.iter().enumerate().filter(|(_, p)| p.present) {
        let (x, y) = view.body_px(p.pos);
        let r = body_radius(view.dims, p.pos);
        let outside = if scene.beyond.get(i).is_some_and(Option::is_some) {
            r#" data-outside="picture""#
        } else if [au, av].iter().any(|&a| !(0..=BOX_MM).contains(&p.pos[a])) {
            r#" data-outside="box""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<g class="ghost" data-index="{i}" {}{outside} data-label="{}">"#,
            pos_attrs(p.pos),
            scene.label_of(Of::Ghost, i)
        );
        if let Some(b) = world.bodies.get(i).filter(|b| b.alive) {
            let (bx, by) = view.body_px(b.pos);
            let _ = write!(
                s,
                r#"<line x1="{bx:.1}" y1="{by:.1}" x2="{x:.1}" y2="{y:.1}" stroke="{GHOST}" stroke-opacity="0.55" stroke-width="1.2"/>"#
            );
        }
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r:.1}" fill="{GHOST}" fill-opacity="0.18" stroke="{GHOST}" stroke-width="2" stroke-dasharray="4 3"/></g>"#
        );
    }
    s.push_str("</g>\n");
    if scene.beyond.iter().any(Option::is_some) {
        let _ = writeln!(s, r#"<g id="ghost-markers">"#);
        for (i, m) in scene.beyond.iter().enumerate() {
            if let Some(Marker {
                at: (x, y),
                toward: (dx, dy),
            }) = *m
            {
                let _ = writeln!(
                    s,
                    r#"<g class="ghost-marker" data-index="{i}"><title>ghost {i}: beyond the picture</title><polygon points="{}" fill="{GHOST}"/></g>"#,
                    marker_points(x, y, dx, dy)
                );
            }
        }
        s.push_str("</g>\n");
    }
}

/// A triangle at (x, y) pointing along (dx, dy).
fn marker_points(x: f64, y: f64, dx: f64, dy: f64) -> String {
    let (px, py) = (-dy, dx);
    let tip = (x + dx * MARKER_R, y + dy * MARKER_R);
    let back = (x - dx * MARKER_R * 0.6, y - dy * MARKER_R * 0.6);
    let a = (back.0 + px * MARKER_R * 0.8, back.1 + py * MARKER_R * 0.8);
    let b = (back.0 - px * MARKER_R * 0.8, back.1 - py * MARKER_R * 0.8);
    format!(
        "{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
        tip.0, tip.1, a.0, a.1, b.0, b.1
    )
}

fn bodies(s: &mut String, view: &View, world: &World, scene: &Scene) {
    let _ = writeln!(s, r#"<g id="bodies">"#);
    let linked = world
        .link()
        .filter(|l| l.declaration().is_some())
        .map(|l| l.body as usize);
    for (i, b) in world.bodies.iter().enumerate().filter(|(_, b)| b.alive) {
        let (x, y) = view.body_px(b.pos);
        let r = body_radius(view.dims, b.pos);
        if linked == Some(i) {
            let _ = writeln!(
                s,
                r#"<circle class="link-ring" cx="{x:.1}" cy="{y:.1}" r="{:.1}" fill="none" stroke="{LINK}" stroke-width="3"/>"#,
                r + 5.0
            );
        }
        let _ = writeln!(
            s,
            r##"<g class="body" data-index="{i}" {} data-label="{}"><circle cx="{x:.1}" cy="{y:.1}" r="{r:.1}" fill="#ffffff" stroke="{BG}" stroke-width="2"/></g>"##,
            pos_attrs(b.pos),
            scene.label_of(Of::Body, i)
        );
    }
    s.push_str("</g>\n");
}

/// Every placed index label, above everything else.
fn index_labels(s: &mut String, scene: &Scene) {
    let _ = writeln!(
        s,
        r#"<g id="labels" font-size="{LABEL_SIZE}" font-weight="bold" text-anchor="middle">"#
    );
    for l in &scene.labels {
        let (of, ink) = match l.of {
            Of::Body => ("body", INK),
            Of::Ghost => ("ghost", GHOST),
        };
        let i = l.index;
        match &l.placed {
            Placed::Inside { x, y, .. } => {
                let _ = writeln!(
                    s,
                    r#"<g class="label" data-of="{of}" data-index="{i}" data-place="inside"><text x="{x:.1}" y="{y:.1}" fill="{BG}">{i}</text></g>"#
                );
            }
            Placed::Outside { x, y, bbox, leader } => {
                let _ = write!(
                    s,
                    r#"<g class="label" data-of="{of}" data-index="{i}" data-place="outside">"#
                );
                if let Some([(x1, y1), (x2, y2)]) = leader {
                    let _ = write!(
                        s,
                        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{ink}" stroke-opacity="0.6" stroke-width="1"/>"#
                    );
                }
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="2" fill="{BG}" fill-opacity="0.85"/><text x="{x:.1}" y="{y:.1}" fill="{ink}">{i}</text></g>"#,
                    bbox.x, bbox.y, bbox.w, bbox.h
                );
            }
            Placed::Hidden => {}
        }
    }
    s.push_str("</g>\n");
}

fn legend(s: &mut String, frame: &Frame<'_>, f: &Fields, scene: &Scene) {
    let x = LEGEND_X;
    let top = PLOT_Y + 8.0;
    let bar_h = 380.0;
    let _ = writeln!(s, r#"<g id="legend" font-size="13" fill="{DIM}">"#);
    match frame.overlay {
        Overlay::Density => {
            let max = f.max_density().max(DENSITY_ONE);
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{:.1}" font-size="16" font-weight="bold" fill="{INK}">density</text>"#,
                top - 14.0
            );
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{:.1}">bodies per vertex</text>"#,
                top + 4.0
            );
            let _ = writeln!(
                s,
                r#"<defs><linearGradient id="ramp" x1="0" y1="1" x2="0" y2="0">"#
            );
            for k in 0..VIRIDIS.len() {
                let t = k as f64 / (VIRIDIS.len() - 1) as f64;
                let _ = writeln!(s, r#"<stop offset="{t:.3}" stop-color="{}"/>"#, colour(t));
            }
            s.push_str("</linearGradient></defs>\n");
            let y0 = top + 18.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x}" y="{y0:.1}" width="26" height="{bar_h}" fill="url(#ramp)" stroke="{DIM}" stroke-width="1"/>"#
            );
            // Ticks at a round step (in bodies), and the top of the bar at the largest value.
            let step = [
                156_250u32, 312_500, 390_625, 781_250, 1_562_500, 3_125_000, 7_812_500, 15_625_000,
                31_250_000,
            ]
            .into_iter()
            .find(|&st| max / st <= 5)
            .unwrap_or(31_250_000);
            let mut ticks: Vec<u32> = (0..=max / step).map(|k| k * step).collect();
            if ticks
                .last()
                .is_some_and(|&t| (max - t) as f64 > max as f64 * 0.08)
            {
                ticks.push(max);
            }
            for v in ticks {
                let y = y0 + bar_h - bar_h * v as f64 / max as f64;
                let _ = writeln!(
                    s,
                    r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{DIM}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                    x + 26.0,
                    x + 32.0,
                    x + 36.0,
                    y + 4.5,
                    short(v)
                );
            }
        }
        Overlay::Occupancy => {
            let max = f.max_occupancy().max(1);
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{:.1}" font-size="16" font-weight="bold" fill="{INK}">occupancy</text>"#,
                top - 14.0
            );
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{:.1}">bodies per triangle</text>"#,
                top + 4.0
            );
            let steps = max.min(12);
            let sw = (bar_h / (steps + 1) as f64).min(30.0);
            for k in 0..=steps {
                let v = max * k / steps;
                let y = top + 18.0 + (steps - k) as f64 * sw;
                let _ = writeln!(
                    s,
                    r#"<rect x="{x}" y="{y:.1}" width="26" height="{:.1}" fill="{}" stroke="{BG}"/><text x="{:.1}" y="{:.1}">{v}</text>"#,
                    sw,
                    colour(v as f64 / max as f64),
                    x + 36.0,
                    y + sw / 2.0 + 4.5
                );
            }
        }
        Overlay::None => {
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{:.1}" font-size="16" font-weight="bold" fill="{INK}">no overlay</text>"#,
                top - 14.0
            );
        }
    }
    // Key: body, ghost.
    let ky = PLOT_Y + 470.0;
    let _ = writeln!(
        s,
        r##"<circle cx="{:.1}" cy="{ky:.1}" r="10" fill="#ffffff" stroke="{BG}" stroke-width="2"/><text x="{:.1}" y="{:.1}" fill="{INK}">body</text>"##,
        x + 13.0,
        x + 32.0,
        ky + 4.5
    );
    let mut ky = ky;
    if frame.world.dims() == Dims::Three {
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="8" fill="#ffffff" fill-opacity="0.7"/><circle cx="{:.1}" cy="{:.1}" r="14" fill="#ffffff" fill-opacity="0.7"/><text x="{:.1}" y="{:.1}">on the floor</text><text x="{:.1}" y="{:.1}">at the ceiling</text>"##,
            x + 13.0,
            ky + 32.0,
            x + 13.0,
            ky + 64.0,
            x + 32.0,
            ky + 36.5,
            x + 32.0,
            ky + 68.5
        );
        ky += 64.0;
    }
    if let Some(l) = frame.world.link().filter(|l| l.declaration().is_some()) {
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="13" fill="none" stroke="{LINK}" stroke-width="3"/><text x="{:.1}" y="{:.1}">linked body {}</text>"#,
            x + 13.0,
            ky + 32.0,
            x + 32.0,
            ky + 36.5,
            l.body
        );
        ky += 32.0;
    }
    match &frame.ghost {
        Ghost::Poses { name, .. } => {
            let gy = ky + 30.0;
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{gy:.1}" r="10" fill="{GHOST}" fill-opacity="0.18" stroke="{GHOST}" stroke-width="2" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="{INK}">ghost</text><text x="{x}" y="{:.1}" font-size="11">{}</text>"#,
                x + 13.0,
                x + 32.0,
                gy + 4.5,
                gy + 26.0,
                esc(name)
            );
            ky = gy + 26.0;
            if scene.beyond.iter().any(Option::is_some) {
                let my = ky + 24.0;
                let _ = writeln!(
                    s,
                    r#"<polygon points="{}" fill="{GHOST}"/><text x="{:.1}" y="{:.1}" fill="{INK}">ghost beyond</text><text x="{:.1}" y="{:.1}" fill="{INK}">the picture</text>"#,
                    marker_points(x + 13.0, my, 1.0, 0.0),
                    x + 32.0,
                    my + 4.5,
                    x + 32.0,
                    my + 20.5
                );
                ky = my + 20.5;
            }
        }
        Ghost::NoFrame { name, first, last } => {
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{:.1}" font-size="11" fill="{GHOST}">{}: no frame here</text><text x="{x}" y="{:.1}" font-size="11" fill="{GHOST}">(steps {first}..={last})</text>"#,
                ky + 34.0,
                esc(name),
                ky + 50.0
            );
            ky += 50.0;
        }
        Ghost::None => {}
    }
    let hidden = scene.hidden();
    if hidden > 0 {
        let noun = if hidden == 1 { "index" } else { "indices" };
        let _ = writeln!(
            s,
            r#"<text class="hidden-labels" x="{x}" y="{:.1}" font-size="11">{hidden} {noun} not shown</text><text x="{x}" y="{:.1}" font-size="11">where bodies crowd</text>"#,
            ky + 34.0,
            ky + 49.0
        );
    }
    s.push_str("</g>\n");
}

/// A density value in bodies with at most two decimals, for legend ticks.
fn short(v: u32) -> String {
    let hundredths = (v as u64 * 100 + DENSITY_ONE as u64 / 2) / DENSITY_ONE as u64;
    let (w, f) = (hundredths / 100, hundredths % 100);
    match f {
        0 => format!("{w}"),
        f if f % 10 == 0 => format!("{w}.{}", f / 10),
        f => format!("{w}.{f:02}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVERLAY_VERTICES: usize =
        ostm_protocol::sim::fields::VERTICES * ostm_protocol::sim::fields::VERTICES;
    const OVERLAY_TRIANGLES: usize = GRID * GRID * 2;
    use ostm_protocol::sim::world::Setup;
    use ostm_protocol::{Link, Role};

    fn world(dims: Dims, bodies: &[[i32; 3]], link: Option<Link>) -> World {
        let setup = Setup {
            dims,
            bodies: bodies.len() as u8,
            seed: 3,
        };
        let mut w = World::with_bodies_at(setup, link, bodies);
        w.step = 42;
        w
    }

    /// The picture of `w` named `a.ostm`, with no overlay and no ghost.
    fn plain(w: &World) -> String {
        render(&Frame {
            name: "a.ostm".into(),
            world: w,
            overlay: Overlay::None,
            ghost: Ghost::None,
        })
    }

    /// The first body's circle.
    fn body_circle<'a, 'i>(doc: &'a roxmltree::Document<'i>) -> roxmltree::Node<'a, 'i> {
        doc.descendants()
            .find(|n| {
                n.has_tag_name("circle")
                    && n.parent().and_then(|p| p.attribute("class")) == Some("body")
            })
            .expect("body circle")
    }

    fn parse(svg: &str) -> roxmltree::Document<'_> {
        roxmltree::Document::parse(svg).expect("the picture is well-formed XML")
    }

    fn num(n: roxmltree::Node<'_, '_>, attr: &str) -> f64 {
        n.attribute(attr)
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn colours_run_from_the_first_to_the_last_stop() {
        assert_eq!(colour(0.0), "#440154");
        assert_eq!(colour(1.0), "#fde725");
        assert_eq!(colour(0.5), "#21908d");
        assert_eq!(colour(f64::NAN), "#440154");
        assert_eq!(colour(7.0), "#fde725");
    }

    #[test]
    fn a_2d_body_is_drawn_from_the_side_and_a_3d_body_from_above() {
        // Plot 760 px for 10 000 mm: 0.076 px/mm, origin (84, 112).
        let w = world(Dims::Two, &[[2500, 7500, 0]], None);
        let svg = plain(&w);
        let doc = parse(&svg);
        let c = body_circle(&doc);
        // x = 84 + 2500 * 0.076 = 274; y up: 112 + (10000 - 7500) * 0.076 = 302.
        assert_eq!((num(c, "cx"), num(c, "cy")), (274.0, 302.0));
        let w = world(Dims::Three, &[[2500, 7500, 1000]], None);
        let svg = plain(&w);
        let doc = parse(&svg);
        let c = body_circle(&doc);
        // z down the page: y = 112 + 1000 * 0.076 = 188; radius 8 + 6 * 0.75 = 12.5.
        assert_eq!(
            (num(c, "cx"), num(c, "cy"), num(c, "r")),
            (274.0, 188.0, 12.5)
        );
    }

    #[test]
    fn the_density_overlay_has_a_rect_per_vertex_cut_at_the_walls() {
        let w = world(
            Dims::Two,
            &[[1000, 250, 0]],
            Some(Link {
                role: Role::FieldsOnly,
                body: 0,
                transfer_step: 0,
            }),
        );
        let frame = Frame {
            name: "a&b.ostm".into(),
            world: &w,
            overlay: Overlay::Density,
            ghost: Ghost::None,
        };
        let svg = render(&frame);
        let doc = parse(&svg);
        let rects: Vec<_> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("vertex"))
            .collect();
        assert_eq!(rects.len(), OVERLAY_VERTICES);
        let at = |i: &str, j: &str| {
            rects
                .iter()
                .find(|n| n.attribute("data-i") == Some(i) && n.attribute("data-j") == Some(j))
                .copied()
                .expect("vertex")
        };
        // Hand-computed: vertex (1, 0) holds 1000 x 1000.
        assert_eq!(at("1", "0").attribute("data-value"), Some("1000000"));
        assert_eq!(at("0", "1").attribute("data-value"), Some("62500"));
        // Corner vertex (0, 0): 625 mm square = 47.5 px; interior (1, 1): 1250 mm = 95 px.
        assert_eq!(
            (num(at("0", "0"), "width"), num(at("0", "0"), "height")),
            (47.5, 47.5)
        );
        assert_eq!(
            (num(at("1", "1"), "width"), num(at("1", "1"), "height")),
            (95.0, 95.0)
        );
        // The title escapes the name.
        assert!(svg.contains("a&amp;b.ostm"));
    }

    #[test]
    fn the_occupancy_overlay_has_two_triangles_per_cell() {
        let w = world(Dims::Three, &[[1000, 0, 250], [1850, 0, 600]], None);
        let frame = Frame {
            name: "a".into(),
            world: &w,
            overlay: Overlay::Occupancy,
            ghost: Ghost::None,
        };
        let svg = render(&frame);
        let doc = parse(&svg);
        let tris: Vec<_> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("triangle"))
            .collect();
        assert_eq!(tris.len(), OVERLAY_TRIANGLES);
        let value = |i: &str, j: &str, t: &str| {
            tris.iter()
                .find(|n| {
                    n.attribute("data-i") == Some(i)
                        && n.attribute("data-j") == Some(j)
                        && n.attribute("data-t") == Some(t)
                })
                .and_then(|n| n.attribute("data-value"))
        };
        assert_eq!(value("0", "0", "0"), Some("1"));
        assert_eq!(value("1", "0", "1"), Some("1"));
        assert_eq!(value("1", "0", "0"), Some("0"));
    }

    #[test]
    fn ghosts_outside_the_box_widen_the_window_and_are_drawn() {
        let w = world(Dims::Two, &[[9800, 100, 0]], None);
        let poses = [Pose {
            present: true,
            pos: [10_200, 100, 0],
        }];
        let frame = Frame {
            name: "a".into(),
            world: &w,
            overlay: Overlay::None,
            ghost: Ghost::Poses {
                name: "g.ospc".into(),
                poses: &poses,
            },
        };
        let svg = render(&frame);
        let doc = parse(&svg);
        let root = doc.root_element();
        // 200 mm past the wall plus 300 mm margin on every side.
        assert_eq!(root.attribute("data-view"), Some("-500 11000"));
        let g = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("ghost"))
            .expect("ghost");
        assert_eq!(g.attribute("data-x"), Some("10200"));
        let c = g
            .children()
            .find(|n| n.has_tag_name("circle"))
            .expect("ghost circle");
        let k = PLOT / 11_000.0;
        assert!((num(c, "cx") - (PLOT_X + 10_700.0 * k)).abs() < 0.06);
        assert!(num(c, "cx") < PLOT_X + PLOT);
    }
}
