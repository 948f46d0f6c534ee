//! Where each index label of a picture goes, so that no two labels overlap and none sits
//! on another body: labels are placed one after another (bodies in index order, then
//! ghosts), each at the first free spot of a fixed list, and left out (thinned) when no
//! spot is free.
//!
//! The spots, in order: inside the body's own circle (bodies only; free when no placed
//! label and no other circle touches the label's box, even where a body on the plot's
//! edge takes its label past the edge), then outside the circle in eight
//! directions (up, right, left, down, up-right, up-left, down-right, down-left), first
//! right beside it and then [`RING_STEP`] and twice that further out (those two with a
//! leader line back to the circle). A spot outside is free when its box lies inside the
//! plot, and touches no placed label and no circle (its own included). Everything is in
//! picture pixels, and the boxes are those of the built-in font ([`LABEL_SIZE`], bold).

/// Font size of every index label (pixels), drawn bold.
pub const LABEL_SIZE: f64 = 10.0;
/// Width of one digit of the label font: DejaVu Sans Bold advances 1425/2048 em.
pub const DIGIT_EM: f64 = 1425.0 / 2048.0;
/// Height of a digit above the baseline: 1493/2048 em in DejaVu Sans Bold.
pub const DIGIT_HEIGHT_EM: f64 = 1493.0 / 2048.0;
/// Space kept around a label's ink, in pixels.
pub const PAD: f64 = 1.0;
/// Gap between a circle and a label right beside it.
pub const GAP: f64 = 2.0;
/// How much further out each of the two outer rings of spots is.
pub const RING_STEP: f64 = 11.0;
/// A label centred in its circle has its baseline this far below the centre.
pub const INSIDE_BASELINE: f64 = 3.5;

/// A rectangle in picture pixels: top left corner, width, height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Rect {
    /// Whether the two rectangles share more than an edge.
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    /// Whether the circle reaches into the rectangle.
    pub fn touches(&self, c: &Circle) -> bool {
        let nx = c.x.clamp(self.x, self.x + self.w);
        let ny = c.y.clamp(self.y, self.y + self.h);
        (nx - c.x).powi(2) + (ny - c.y).powi(2) < c.r * c.r
    }

    /// Whether the rectangle lies wholly inside `area`.
    pub fn within(&self, area: &Rect) -> bool {
        self.x >= area.x
            && self.y >= area.y
            && self.x + self.w <= area.x + area.w
            && self.y + self.h <= area.y + area.h
    }

    /// The point of the rectangle nearest to (x, y).
    fn nearest(&self, x: f64, y: f64) -> (f64, f64) {
        (
            x.clamp(self.x, self.x + self.w),
            y.clamp(self.y, self.y + self.h),
        )
    }
}

/// A drawn circle (a body, a ghost, a marker), in pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Circle {
    pub x: f64,
    pub y: f64,
    pub r: f64,
}

/// A label to place: its text, and which of the obstacle circles is its own.
#[derive(Debug, Clone)]
pub struct Mark {
    pub text: String,
    /// Index into the obstacles given to [`place`].
    pub own: usize,
    /// Whether the spot inside the circle may be used (bodies: yes; ghosts: no).
    pub inside: bool,
}

/// Where a label went.
#[derive(Debug, Clone, PartialEq)]
pub enum Placed {
    /// Centred in its circle: text centre `x`, baseline `y`.
    Inside { x: f64, y: f64, bbox: Rect },
    /// Beside its circle; `leader` is a line from the circle's edge to the box when the
    /// label sits on an outer ring.
    Outside {
        x: f64,
        y: f64,
        bbox: Rect,
        leader: Option<[(f64, f64); 2]>,
    },
    /// No free spot: not drawn.
    Hidden,
}

/// The box of a label of `text` whose text is centred on `x` with its baseline at `y`.
pub fn label_box(text: &str, x: f64, y: f64) -> Rect {
    let w = text.chars().count() as f64 * DIGIT_EM * LABEL_SIZE;
    let h = DIGIT_HEIGHT_EM * LABEL_SIZE;
    Rect {
        x: x - w / 2.0 - PAD,
        y: y - h - PAD,
        w: w + 2.0 * PAD,
        h: h + 2.0 * PAD,
    }
}

/// Places every mark in order; see the module docs.
pub fn place(marks: &[Mark], obstacles: &[Circle], area: Rect) -> Vec<Placed> {
    let mut taken: Vec<Rect> = Vec::new();
    let mut out = Vec::with_capacity(marks.len());
    for m in marks {
        let placed = place_one(m, obstacles, area, &taken);
        match &placed {
            Placed::Inside { bbox, .. } | Placed::Outside { bbox, .. } => taken.push(*bbox),
            Placed::Hidden => {}
        }
        out.push(placed);
    }
    out
}

fn place_one(m: &Mark, obstacles: &[Circle], area: Rect, taken: &[Rect]) -> Placed {
    let Some(c) = obstacles.get(m.own).copied() else {
        return Placed::Hidden;
    };
    let free = |b: &Rect| !taken.iter().any(|t| t.overlaps(b));
    if m.inside {
        let (x, y) = (c.x, c.y + INSIDE_BASELINE);
        let bbox = label_box(&m.text, x, y);
        let covered = obstacles
            .iter()
            .enumerate()
            .any(|(i, o)| i != m.own && bbox.touches(o));
        if free(&bbox) && !covered {
            return Placed::Inside { x, y, bbox };
        }
    }
    // The box's half sizes, and where the baseline is relative to the box's centre.
    let probe = label_box(&m.text, 0.0, 0.0);
    let (hw, hh) = (probe.w / 2.0, probe.h / 2.0);
    let base = -(probe.y + hh);
    let sign = |v: f64| (v > 0.0) as u8 as f64 - (v < 0.0) as u8 as f64;
    const D: f64 = std::f64::consts::FRAC_1_SQRT_2;
    let dirs: [(f64, f64); 8] = [
        (0.0, -1.0),
        (1.0, 0.0),
        (-1.0, 0.0),
        (0.0, 1.0),
        (D, -D),
        (-D, -D),
        (D, D),
        (-D, D),
    ];
    for ring in 0..3 {
        let reach = c.r + GAP + ring as f64 * RING_STEP;
        for (ux, uy) in dirs {
            // The box's centre: `reach` out from the circle's centre along the direction,
            // then half the box further, so the near edge (or corner) is at `reach`.
            let cx = c.x + ux * reach + sign(ux) * hw;
            let cy = c.y + uy * reach + sign(uy) * hh;
            let (x, y) = (cx, cy + base);
            let bbox = label_box(&m.text, x, y);
            if bbox.within(&area) && free(&bbox) && !obstacles.iter().any(|o| bbox.touches(o)) {
                let leader = (ring > 0).then(|| {
                    let (px, py) = bbox.nearest(c.x, c.y);
                    let len = ((px - c.x).powi(2) + (py - c.y).powi(2)).sqrt().max(1e-9);
                    [
                        (c.x + (px - c.x) / len * c.r, c.y + (py - c.y) / len * c.r),
                        (px, py),
                    ]
                });
                return Placed::Outside { x, y, bbox, leader };
            }
        }
    }
    Placed::Hidden
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: Rect = Rect {
        x: 0.0,
        y: 0.0,
        w: 400.0,
        h: 400.0,
    };

    fn mark(i: usize) -> Mark {
        Mark {
            text: i.to_string(),
            own: i,
            inside: true,
        }
    }

    fn bbox(p: &Placed) -> Option<Rect> {
        match p {
            Placed::Inside { bbox, .. } | Placed::Outside { bbox, .. } => Some(*bbox),
            Placed::Hidden => None,
        }
    }

    #[test]
    fn a_lone_body_is_labelled_inside_and_a_crowd_gets_labels_outside_or_none() {
        let lone = [Circle {
            x: 100.0,
            y: 100.0,
            r: 10.0,
        }];
        let p = place(&[mark(0)], &lone, AREA);
        assert!(matches!(p[0], Placed::Inside { x, y, .. } if x == 100.0 && y == 103.5));
        // 30 bodies 3 px apart on a line: their labels must not overlap each other or any
        // circle (outside ones), and some are thinned.
        let crowd: Vec<Circle> = (0..30)
            .map(|i| Circle {
                x: 100.0 + 3.0 * i as f64,
                y: 390.0,
                r: 10.0,
            })
            .collect();
        let marks: Vec<Mark> = (0..30).map(mark).collect();
        let p = place(&marks, &crowd, AREA);
        let boxes: Vec<Rect> = p.iter().filter_map(bbox).collect();
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                assert!(!a.overlaps(b), "{a:?} and {b:?} overlap");
            }
            assert!(a.within(&AREA));
        }
        for q in &p {
            if let Placed::Outside { bbox, .. } = q {
                assert!(!crowd.iter().any(|c| bbox.touches(c)));
            }
        }
        assert!(p.iter().any(|q| matches!(q, Placed::Hidden)));
        assert!(p.iter().any(|q| matches!(
            q,
            Placed::Outside {
                leader: Some(_),
                ..
            }
        )));
        assert!(boxes.len() > 10, "only {} of 30 labels shown", boxes.len());
    }

    #[test]
    fn rectangles_and_circles_meet_as_geometry_says() {
        let r = Rect {
            x: 0.0,
            y: 0.0,
            w: 10.0,
            h: 10.0,
        };
        let beside = Rect { x: 10.0, ..r };
        assert!(!r.overlaps(&beside), "sharing an edge is not overlapping");
        assert!(r.overlaps(&Rect { x: 9.9, ..r }));
        assert!(r.touches(&Circle {
            x: 15.0,
            y: 5.0,
            r: 5.1
        }));
        assert!(!r.touches(&Circle {
            x: 15.0,
            y: 15.0,
            r: 7.0
        }));
    }
}
