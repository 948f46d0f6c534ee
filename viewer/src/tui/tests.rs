//! The view drawn on ratatui's test backend: the status numbers, the bodies where the world
//! puts them (2D from the side, 3D from above), the strip, the drift report with its body
//! marked, a small terminal and a resize. Each check reads the drawn buffer.

use super::view::{Msg, View};
use super::world::{self, on_canvas};
use crate::live::session::Status;
use ostm_protocol::session::{on_drift, sample_evidence, DriftReport};
use ostm_protocol::sim::world::BOX_MM;
use ostm_protocol::{Dims, Op, Setup, World};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::Terminal;

fn drawn(view: &View, w: u16, h: u16) -> Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| view.draw(f)).unwrap();
    t.backend().buffer().clone()
}

fn rows(b: &Buffer) -> Vec<String> {
    (0..b.area.height)
        .map(|y| (0..b.area.width).map(|x| b[(x, y)].symbol()).collect())
        .collect()
}

fn text(b: &Buffer) -> String {
    rows(b).join("\n")
}

fn world(dims: Dims, bodies: &[[i32; 3]]) -> World {
    let mut w = World::new(
        Setup {
            dims,
            bodies: bodies.len() as u8,
            seed: 1,
        },
        None,
    );
    for (b, &pos) in w.bodies.iter_mut().zip(bodies) {
        b.alive = true;
        b.pos = pos;
    }
    w
}

fn status(host_step: u64, step: u64, verified: u64) -> Status {
    Status {
        host_step,
        step,
        verified,
        resyncs: 2,
        gaps: 1,
        backlog: 7,
        rate: 59.94,
        fields: None,
    }
}

fn attached(world: &World) -> View {
    let mut v = View::new("127.0.0.1:7878", Some("run/s.ostm".into()));
    v.on(Msg::Attached {
        world: Box::new(world.clone()),
        host_rate: 60,
    });
    v
}

/// The world's canvas inside its border: the top-left block of the screen, found by the
/// world panel's corners (`┌` at 0,0 and the first `┐` on row 0).
fn canvas_area(b: &Buffer) -> Rect {
    let top = &rows(b)[0];
    let right = top
        .chars()
        .position(|c| c == '┐')
        .expect("the world panel's corner") as u16;
    let bottom = (0..b.area.height)
        .find(|&y| b[(0, y)].symbol() == "└")
        .expect("the world panel's bottom");
    Rect::new(1, 1, right - 1, bottom - 1)
}

/// Where cells of colour `colour` holding braille dots are drawn on the canvas, as the
/// millimetres their centre stands for (x right, y up the screen).
fn drawn_at(b: &Buffer, colour: Color) -> Vec<(f64, f64)> {
    let a = canvas_area(b);
    let mut at = Vec::new();
    for y in a.top()..a.bottom() {
        for x in a.left()..a.right() {
            let c = &b[(x, y)];
            let braille = c
                .symbol()
                .chars()
                .next()
                .is_some_and(|ch| ('\u{2801}'..='\u{28ff}').contains(&ch));
            if braille && c.fg == colour {
                let u = (f64::from(x - a.x) + 0.5) / f64::from(a.width) * BOX_MM as f64;
                let v = (1.0 - (f64::from(y - a.y) + 0.5) / f64::from(a.height)) * BOX_MM as f64;
                at.push((u, v));
            }
        }
    }
    at
}

/// Whether every point is within `mm` of `want` in both directions.
fn all_near(points: &[(f64, f64)], want: (f64, f64), mm: f64) -> bool {
    !points.is_empty()
        && points
            .iter()
            .all(|p| (p.0 - want.0).abs() <= mm && (p.1 - want.1).abs() <= mm)
}

#[test]
fn the_status_panel_shows_the_numbers_of_attachs_status_line() {
    let mut v = attached(&world(Dims::Three, &[[5000, 100, 5000]]));
    v.on(Msg::Status(status(12_345, 12_340, 12_000)));
    let t = text(&drawn(&v, 120, 40));
    for want in [
        "attach 127.0.0.1:7878 · verifying",
        "3D · seed 1 · host rate 60/s",
        "host step  12345",
        "verified   12000",
        "lag        5",
        "steps/s    59.9",
        "resyncs    2",
        "gaps       1",
        "backlog    7",
        "recording  run/s.ostm",
    ] {
        assert!(t.contains(want), "no {want:?} in\n{t}");
    }
    // Before any status, no number is made up.
    let t = text(&drawn(&attached(&world(Dims::Two, &[[1, 1, 0]])), 120, 40));
    assert!(t.contains("host step  -"), "{t}");
}

#[test]
fn a_2d_body_is_drawn_from_the_side_and_a_3d_body_from_above() {
    // 2D: x right, y up. One body low on the right.
    let w2 = world(Dims::Two, &[[7500, 2000, 0]]);
    let b = drawn(&attached(&w2), 100, 40);
    let at = drawn_at(&b, world::BODY);
    let tolerance = 700.0;
    assert!(all_near(&at, (7500.0, 2000.0), tolerance), "{at:?}");
    // The check tells a misplaced body: the same body drawn mirrored would fail it.
    assert!(!all_near(&at, (7500.0, 8000.0), tolerance));
    // 3D: x right, z down the screen; y (height) picks the colour. z = 2000 is near
    // the top; x = 3000 left of the middle.
    let w3 = world(Dims::Three, &[[3000, 9000, 2000]]);
    let b = drawn(&attached(&w3), 100, 40);
    let high = world::body_colour(Dims::Three, [3000, 9000, 2000]);
    assert_eq!(high, *world::HEIGHTS.last().unwrap());
    let at = drawn_at(&b, high);
    assert_eq!(on_canvas(Dims::Three, [3000, 9000, 2000]), (3000.0, 8000.0));
    assert!(all_near(&at, (3000.0, 8000.0), tolerance), "{at:?}");
    assert!(!all_near(&at, (3000.0, 2000.0), tolerance));
    // A low body has the lowest colour, and nothing is drawn in the high one.
    let b = drawn(
        &attached(&world(Dims::Three, &[[3000, 100, 2000]])),
        100,
        40,
    );
    assert!(drawn_at(&b, high).is_empty());
    assert!(all_near(
        &drawn_at(&b, world::HEIGHTS[0]),
        (3000.0, 8000.0),
        tolerance
    ));
    // Dead bodies are not drawn.
    let mut dead = w2.clone();
    dead.bodies[0].alive = false;
    assert!(drawn_at(&drawn(&attached(&dead), 100, 40), world::BODY).is_empty());
}

#[test]
fn the_world_title_says_the_step_and_whether_it_was_verified() {
    let mut w = world(Dims::Two, &[[100, 100, 0], [200, 200, 0]]);
    let mut v = attached(&w);
    let t = text(&drawn(&v, 100, 30));
    assert!(t.contains("2D, from the side · step 0 · 2 live"), "{t}");
    assert!(t.contains("the host's snapshot"), "{t}");
    w.step = 77;
    v.on(Msg::Frame {
        world: Box::new(w),
        verified: true,
    });
    let t = text(&drawn(&v, 100, 30));
    assert!(t.contains("step 77") && t.contains(" verified "), "{t}");
}

#[test]
fn the_strip_colours_verified_not_seen_and_drift_steps() {
    let mut w = world(Dims::Two, &[[100, 100, 0]]);
    w.step = 100;
    let mut v = attached(&w);
    v.on(Msg::Status(status(103, 103, 3)));
    v.on(Msg::Gap {
        from: 103,
        to: 105,
        file: Some("run/s.1.ostm".into()),
    });
    v.on(Msg::Status(status(107, 107, 5)));
    let b = drawn(&v, 100, 30);
    let r = rows(&b);
    // The strip is the 3 rows above the last; its cells end at the right border.
    let strip_row = &r[r.len() - 3];
    assert!(strip_row.ends_with(" ███░░██│"), "{strip_row:?}");
    assert!(
        r[r.len() - 4].contains("recent steps 101..107 · 1 per cell"),
        "{}",
        r[r.len() - 4]
    );
    let y = b.area.height - 3;
    let x = b.area.width - 2;
    assert_eq!(b[(x, y)].fg, Color::Green);
    assert_eq!(b[(x - 2, y)].fg, Color::Yellow);
    assert!(
        text(&b).contains("recording  run/s.1.ostm"),
        "the file after the gap"
    );
}

#[test]
fn a_lost_connection_shows_reconnecting_until_the_gap() {
    let mut w = world(Dims::Two, &[[100, 100, 0]]);
    w.step = 100;
    let mut v = attached(&w);
    assert!(text(&drawn(&v, 100, 30)).contains("verifying"));
    v.on(Msg::Lost);
    let t = text(&drawn(&v, 100, 30));
    assert!(
        t.contains("reconnecting") && !t.contains("verifying"),
        "{t}"
    );
    v.on(Msg::Gap {
        from: 100,
        to: 140,
        file: None,
    });
    let t = text(&drawn(&v, 100, 30));
    assert!(
        t.contains("verifying") && !t.contains("reconnecting"),
        "{t}"
    );
}

/// A 3D world of 4 bodies stepped once, and a host whose body 2 has one more velocity.y
/// and is 3 m further along x.
fn drift_report() -> (World, DriftReport) {
    let e = sample_evidence(
        |w| {
            w.bodies[2].vel[1] += 1;
            w.bodies[2].pos[0] += 3000;
        },
        |before| {
            before.clone().step_with_stage_hashes(&[Op::Impulse {
                body: 1,
                d: [5, 6, 7],
            }])
        },
    );
    (e.viewer_after.clone(), on_drift(&e))
}

#[test]
fn on_drift_the_report_names_step_body_and_field_and_the_body_is_marked() {
    let (after, report) = drift_report();
    let d = report.field.as_ref().expect("a field differs");
    assert_eq!((d.body, d.field), (Some(2), "position.x"));
    let mut v = attached(&World::new(after.setup(), None));
    v.on(Msg::Status(status(1, 1, 1)));
    v.drift(&report);
    let b = drawn(&v, 160, 44);
    let t = text(&b);
    for want in [
        "attach 127.0.0.1:7878 · DRIFT",
        &format!(
            "drift at step 1: body 2 position.x host={} viewer={}",
            d.a, d.b
        ),
        "every stage agrees",
        "body 2 is drawn red and ringed on the world",
        "the viewer's world",
        " q: quit",
    ] {
        assert!(t.contains(want), "no {want:?} in\n{t}");
    }
    // The world drawn is the viewer's at the drifting step, body 2 in red where it is.
    let red = drawn_at(&b, world::DRIFT);
    let body = on_canvas(Dims::Three, after.bodies[2].pos);
    assert!(
        red.iter()
            .any(|p| (p.0 - body.0).abs() < 300.0 && (p.1 - body.1).abs() < 300.0),
        "no red at body 2 ({body:?}): {red:?}"
    );
    // The ring around it is red too, and nothing else is.
    assert!(red
        .iter()
        .all(|p| (p.0 - body.0).abs() < 2000.0 && (p.1 - body.1).abs() < 2000.0));
    // Its label, and the host's place for it.
    let a = canvas_area(&b);
    let canvas_text: String = (a.top()..a.bottom())
        .map(|y| {
            (a.left()..a.right())
                .map(|x| b[(x, y)].symbol())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(canvas_text.contains("body 2"), "{canvas_text}");
    assert!(canvas_text.contains('×'), "{canvas_text}");
    // The strip ends in the drift cell.
    let r = rows(&b);
    assert!(r[r.len() - 3].ends_with("▓│"), "{}", r[r.len() - 3]);
    // The other bodies are not red.
    let others: Vec<_> = (0..4).filter(|&i| i != 2).collect();
    for i in others {
        let p = on_canvas(Dims::Three, after.bodies[i].pos);
        let far = (p.0 - body.0).abs() > 2500.0 || (p.1 - body.1).abs() > 2500.0;
        if far {
            assert!(
                !red.iter()
                    .any(|q| (q.0 - p.0).abs() < 200.0 && (q.1 - p.1).abs() < 200.0),
                "body {i} drawn red"
            );
        }
    }
}

#[test]
fn a_small_terminal_gets_a_summary_and_a_resize_a_new_layout() {
    let mut v = attached(&world(Dims::Two, &[[100, 100, 0]]));
    v.on(Msg::Status(status(50, 40, 30)));
    let t = text(&drawn(&v, 30, 8));
    assert!(t.contains("terminal too small (30x8)"), "{t}");
    assert!(t.contains("host step 50 · verified 30"), "{t}");
    let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
    term.draw(|f| v.draw(f)).unwrap();
    assert!(rows(term.backend().buffer())[0].ends_with('┐'));
    term.backend_mut().resize(70, 20);
    term.draw(|f| v.draw(f)).unwrap();
    let b = term.backend().buffer();
    assert_eq!((b.area.width, b.area.height), (70, 20));
    let r = rows(b);
    assert!(
        r[0].ends_with('┐') && r[0].chars().count() == 70,
        "{}",
        r[0]
    );
    assert!(r[19].contains("q or Ctrl-C: stop"), "{}", r[19]);
    assert!(text(b).contains("host step  50"), "{}", text(b));
}

#[test]
fn the_events_panel_shows_the_newest_lines() {
    let mut v = attached(&world(Dims::Two, &[[100, 100, 0]]));
    for i in 0..300 {
        v.on(Msg::Line(format!("resync: line {i}")));
    }
    let t = text(&drawn(&v, 120, 40));
    assert!(t.contains("resync: line 299"), "{t}");
    assert!(!t.contains("resync: line 0 "), "{t}");
}
