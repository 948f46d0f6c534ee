//! Pictures anywhere: `render -o FILE.png` draws its text with the built-in font on a
//! machine without fonts (and warns at most once); index labels never overlap each other
//! and a label beside its body never sits on a body; ghosts are clipped to the plot and
//! those beyond it are marked on its edge. Checked on the real binary's output: the PNG's
//! pixels, and the SVG's geometry measured with the built-in font's own glyph metrics.

mod support;

use ostm_protocol::{Dims, Replay, Setup, World};
use resvg::{tiny_skia, usvg};
use std::path::{Path, PathBuf};
use support::viewer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn testdata(name: &str) -> String {
    root().join("testdata").join(name).display().to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Runs `render` with no font the system could offer: fontconfig pointed at nothing, and
/// empty home and data folders. Returns (stdout, stderr).
fn render_without_fonts(args: &[&str], tmp: &Path) -> (String, String) {
    let empty = tmp.join("no-fonts");
    std::fs::create_dir_all(&empty).unwrap();
    let out = ostm_testkit::run(
        std::process::Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
            .arg("render")
            .args(args)
            .env("FONTCONFIG_FILE", empty.join("fonts.conf"))
            .env("FONTCONFIG_PATH", &empty)
            .env("HOME", &empty)
            .env("XDG_DATA_HOME", &empty)
            .env("XDG_DATA_DIRS", &empty)
            .env_remove("RUST_LOG"),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

/// The picture's pixels as drawn by resvg with `db` and no other font.
fn rasterise(svg: &str, db: usvg::fontdb::Database) -> tiny_skia::Pixmap {
    let mut opt = usvg::Options::default();
    *opt.fontdb_mut() = db;
    let tree = usvg::Tree::from_str(svg, &opt).expect("svg parses");
    let size = tree.size().to_int_size();
    let mut p = tiny_skia::Pixmap::new(size.width(), size.height()).expect("size");
    resvg::render(&tree, tiny_skia::Transform::identity(), &mut p.as_mut());
    p
}

/// `svg` with every `<text …>…</text>` element taken out.
fn without_text(svg: &str) -> String {
    let mut out = String::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("</text>").expect("closed text") + at + "</text>".len();
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Pixels that differ between two pictures of the same size, in rows `rows`.
fn differing(a: &tiny_skia::Pixmap, b: &tiny_skia::Pixmap, rows: std::ops::Range<u32>) -> usize {
    assert_eq!((a.width(), a.height()), (b.width(), b.height()));
    let w = a.width() as usize;
    rows.flat_map(|y| (0..w).map(move |x| y as usize * w + x))
        .filter(|&i| a.pixels()[i] != b.pixels()[i])
        .count()
}

#[test]
fn a_png_carries_its_text_on_a_machine_without_fonts_with_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("frame.png");
    let svg = dir.path().join("frame.svg");
    let file = testdata("test-field-2d.ostm");
    for out in [&png, &svg] {
        let (said, err) =
            render_without_fonts(&[&file, "--step", "300", "-o", &s(out)], dir.path());
        assert_eq!(err, "", "warnings on a plain picture");
        assert!(
            said.starts_with(&format!("wrote {}", out.display())),
            "{said}"
        );
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    let drawn = tiny_skia::Pixmap::decode_png(&std::fs::read(&png).unwrap()).expect("png");
    // The same picture without its text, drawn with no font at all.
    let bare = rasterise(&without_text(&picture), usvg::fontdb::Database::new());
    let h = drawn.height();
    let title = differing(&drawn, &bare, 20..50);
    let all = differing(&drawn, &bare, 0..h);
    assert!(title > 1500, "the title row has only {title} text pixels");
    assert!(all > 8000, "only {all} text pixels in the whole picture");
    // Planted fault: the old way on this machine, no font in the database, draws no text
    // at all: the check above would fail on it.
    let fontless = rasterise(&picture, usvg::fontdb::Database::new());
    assert_eq!(differing(&fontless, &bare, 0..h), 0);
}

#[test]
fn characters_the_font_lacks_give_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("日本 ✓.ostm");
    std::fs::copy(testdata("test-2d-600.ostm"), &odd).unwrap();
    let png = dir.path().join("odd.png");
    let (_, err) = render_without_fonts(&[&s(&odd), "--step", "10", "-o", &s(&png)], dir.path());
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    for c in ["U+65E5", "U+672C", "U+2713"] {
        assert!(warnings[0].contains(c), "{}", warnings[0]);
    }
}

/// A drawn circle, in pixels.
#[derive(Debug, Clone, Copy)]
struct Circle {
    x: f64,
    y: f64,
    r: f64,
}

/// A box: left, top, right, bottom.
#[derive(Debug, Clone, Copy)]
struct Ink {
    x0: f64,
    y0: f64,
    x1: f64,
    y1: f64,
}

impl Ink {
    fn overlaps(&self, o: &Ink) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    fn touches(&self, c: &Circle) -> bool {
        let nx = c.x.clamp(self.x0, self.x1);
        let ny = c.y.clamp(self.y0, self.y1);
        (nx - c.x).powi(2) + (ny - c.y).powi(2) < c.r * c.r
    }
}

/// The ink box of `text` drawn centred on `x` with its baseline at `y`, in the built-in
/// bold face at `size` px, from the font file's own advances and glyph boxes.
fn ink(font: &ttf_parser::Face<'_>, text: &str, x: f64, y: f64, size: f64) -> Ink {
    let k = size / font.units_per_em() as f64;
    let mut pen = 0.0;
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for c in text.chars() {
        let g = font.glyph_index(c).expect("the font has the glyph");
        if let Some(b) = font.glyph_bounding_box(g) {
            x0 = x0.min(pen + b.x_min as f64);
            x1 = x1.max(pen + b.x_max as f64);
            y0 = y0.min(b.y_min as f64);
            y1 = y1.max(b.y_max as f64);
        }
        pen += font.glyph_hor_advance(g).unwrap_or(0) as f64;
    }
    let start = x - pen * k / 2.0;
    Ink {
        x0: start + x0 * k,
        x1: start + x1 * k,
        y0: y - y1 * k,
        y1: y - y0 * k,
    }
}

fn num(n: roxmltree::Node<'_, '_>, a: &str) -> f64 {
    n.attribute(a)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Every label problem of a picture: overlapping labels, a label beside its body lying on
/// a circle, a body or ghost with no label and not marked hidden (or two labels), a
/// legend count that is not the hidden count.
fn label_problems(svg: &str) -> Vec<String> {
    let bold = std::fs::read(root().join("viewer/assets/fonts/DejaVuSans-Bold-subset.ttf"))
        .expect("the built-in font");
    let font = ttf_parser::Face::parse(&bold, 0).expect("font parses");
    let doc = roxmltree::Document::parse(svg).expect("well-formed");
    let mut problems = Vec::new();
    let group = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("labels"))
        .expect("a labels group");
    let size = num(group, "font-size");
    let mut circles = Vec::new();
    let mut owners = Vec::new();
    for g in doc.descendants().filter(|n| {
        matches!(n.attribute("class"), Some("body") | Some("ghost"))
            && n.attribute("data-index").is_some()
    }) {
        owners.push((
            g.attribute("class").unwrap_or("").to_string(),
            g.attribute("data-index").unwrap_or("").to_string(),
            g.attribute("data-label").unwrap_or("").to_string(),
        ));
        if let Some(c) = g.children().find(|n| n.has_tag_name("circle")) {
            circles.push(Circle {
                x: num(c, "cx"),
                y: num(c, "cy"),
                r: num(c, "r"),
            });
        }
    }
    let mut labels = Vec::new();
    for l in group
        .children()
        .filter(|n| n.attribute("class") == Some("label"))
    {
        let of = l.attribute("data-of").unwrap_or("").to_string();
        let index = l.attribute("data-index").unwrap_or("").to_string();
        let place = l.attribute("data-place").unwrap_or("").to_string();
        let Some(t) = l.children().find(|n| n.has_tag_name("text")) else {
            problems.push(format!("{of} {index}: label without text"));
            continue;
        };
        let text = t.text().unwrap_or("");
        if text != index {
            problems.push(format!("{of} {index}: label reads {text:?}"));
        }
        let b = ink(&font, text, num(t, "x"), num(t, "y"), size);
        labels.push((of, index, place, b));
    }
    for (i, a) in labels.iter().enumerate() {
        for b in &labels[i + 1..] {
            if a.3.overlaps(&b.3) {
                problems.push(format!("{} {} and {} {} overlap", a.0, a.1, b.0, b.1));
            }
        }
        if a.2 == "outside" && circles.iter().any(|c| a.3.touches(c)) {
            problems.push(format!(
                "{} {}: the label beside it lies on a circle",
                a.0, a.1
            ));
        }
    }
    let mut hidden = 0;
    for (class, index, said) in &owners {
        let n = labels
            .iter()
            .filter(|l| &l.0 == class && &l.1 == index)
            .count();
        match (said.as_str(), n) {
            ("hidden", 0) => hidden += 1,
            ("inside" | "outside", 1) => {}
            _ => problems.push(format!(
                "{class} {index}: data-label {said:?} with {n} labels"
            )),
        }
    }
    let legend = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("hidden-labels"))
        .and_then(|n| n.text())
        .and_then(|t| t.split(' ').next())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    if legend != hidden {
        problems.push(format!("the legend says {legend} hidden, {hidden} are"));
    }
    problems
}

/// A replay of one start snapshot: `positions` alive and at rest, at step 0.
fn crowd(dir: &Path, dims: Dims, positions: &[[i32; 3]]) -> String {
    let setup = Setup {
        dims,
        bodies: positions.len() as u8,
        seed: 1,
    };
    let mut r = Replay::new(setup, None);
    r.start = Some(World::with_bodies_at(setup, None, positions));
    r.compute_hashes();
    let path = dir.join(format!("crowd-{}d.ostm", dims as u8));
    r.write_file(&path).unwrap();
    s(&path)
}

/// Renders FILE at STEP to an SVG and returns it.
fn svg_of(dir: &Path, args: &[&str]) -> String {
    let out = dir.join("picture.svg");
    let mut all = vec!["render"];
    all.extend_from_slice(args);
    let o = s(&out);
    all.extend_from_slice(&["-o", &o]);
    let run = viewer(&all);
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn labels_never_overlap_in_crowds_and_in_every_golden_picture() {
    let dir = tempfile::tempdir().unwrap();
    // 64 bodies on the floor of a 2D world, 60 mm (4.6 px) apart; 64 bodies in a 3D
    // heap from above; and the goldens.
    let floor: Vec<[i32; 3]> = (0..64).map(|i| [200 + 60 * i, 0, 0]).collect();
    let heap: Vec<[i32; 3]> = (0..64)
        .map(|i| {
            [
                4000 + 150 * (i % 8),
                (i * 97) % 10_000,
                4000 + 150 * (i / 8),
            ]
        })
        .collect();
    let mut pictures = vec![
        (
            "2D floor".to_string(),
            svg_of(
                dir.path(),
                &[&crowd(dir.path(), Dims::Two, &floor), "--step", "0"],
            ),
        ),
        (
            "3D heap".to_string(),
            svg_of(
                dir.path(),
                &[&crowd(dir.path(), Dims::Three, &heap), "--step", "0"],
            ),
        ),
    ];
    for e in std::fs::read_dir(root().join("testdata/svg")).unwrap() {
        let p = e.unwrap().path();
        pictures.push((s(&p), std::fs::read_to_string(&p).unwrap()));
    }
    let mut problems = Vec::new();
    for (name, svg) in &pictures {
        problems.extend(
            label_problems(svg)
                .into_iter()
                .map(|p| format!("{name}: {p}")),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The crowds are crowded: some labels had to move, some to go.
    let floor_svg = &pictures[0].1;
    assert!(floor_svg.contains(r#"data-place="outside""#));
    assert!(floor_svg.contains(r#"data-label="hidden""#));
    assert!(floor_svg.contains("not shown"));
    // Planted fault: every body label back in the middle of its body (as before) is
    // caught as overlapping.
    let centred = centre_every_label(floor_svg);
    assert!(
        label_problems(&centred)
            .iter()
            .any(|p| p.contains("overlap")),
        "labels put back on their bodies were not caught"
    );
}

/// The picture with every body's label drawn centred in its circle, as the picture did
/// before labels were placed.
fn centre_every_label(svg: &str) -> String {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let mut labels = String::new();
    for g in doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("body"))
    {
        let index = g.attribute("data-index").unwrap();
        let c = g.children().find(|n| n.has_tag_name("circle")).unwrap();
        labels.push_str(&format!(
            r#"<g class="label" data-of="body" data-index="{index}" data-place="inside"><text x="{}" y="{}">{index}</text></g>"#,
            num(c, "cx"),
            num(c, "cy") + 3.5
        ));
        labels.push('\n');
    }
    let open = svg.find(r#"<g id="labels""#).expect("labels group");
    let body = svg[open..].find('\n').unwrap() + open + 1;
    let close = svg[open..].find("\n</g>\n").unwrap() + open + 1;
    format!("{}{labels}{}", &svg[..body], &svg[close..])
}

#[test]
fn ghosts_beyond_the_plot_are_clipped_and_marked_on_its_edge() {
    let dir = tempfile::tempdir().unwrap();
    let far = dir.path().join("far.ospc");
    let run = viewer(&[
        "ghost",
        &testdata("test-2d-600.ostm"),
        "--from",
        "200",
        "--frames",
        "40",
        "--offset",
        "4000,0",
        "-o",
        &s(&far),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let svg = svg_of(
        dir.path(),
        &[
            &testdata("test-2d-600.ostm"),
            "--step",
            "210",
            "--ghost",
            &s(&far),
        ],
    );
    let problems = ghost_problems(&svg);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        svg.contains(r#"data-outside="picture""#),
        "no ghost lies beyond"
    );
    assert!(
        svg.contains(r#"data-outside="box""#),
        "no ghost lies outside the box only"
    );
    assert!(
        label_problems(&svg).is_empty(),
        "{:?}",
        label_problems(&svg)
    );
    // Planted faults: the clip taken away, a marker taken away.
    let unclipped = svg.replace(r#" clip-path="url(#plot-clip)""#, "");
    assert!(ghost_problems(&unclipped)
        .iter()
        .any(|p| p.contains("not clipped")));
    let unmarked = svg.replacen(r#"class="ghost-marker""#, r#"class="gone""#, 1);
    assert!(ghost_problems(&unmarked)
        .iter()
        .any(|p| p.contains("no marker")));
}

/// Ghost problems: the ghosts not clipped to the plot, a ghost whose centre is beyond the
/// plot without `data-outside="picture"` and a marker on the plot's edge, a marker for a
/// ghost that is not beyond, a ghost outside the box not said to be.
fn ghost_problems(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let root = doc.root_element();
    let plot: Vec<f64> = root
        .attribute("data-plot")
        .unwrap()
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    let (px, py, side) = (plot[0], plot[1], plot[2]);
    let inside = |x: f64, y: f64| {
        (px - 0.05..=px + side + 0.05).contains(&x) && (py - 0.05..=py + side + 0.05).contains(&y)
    };
    let mut problems = Vec::new();
    let ghosts = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("ghosts"))
        .expect("ghosts group");
    let clip = ghosts
        .attribute("clip-path")
        .and_then(|c| c.strip_prefix("url(#"))
        .and_then(|c| c.strip_suffix(')'));
    let clip_rect = clip.and_then(|id| {
        doc.descendants()
            .find(|n| n.attribute("id") == Some(id))
            .and_then(|n| n.children().find(|c| c.has_tag_name("rect")))
    });
    match clip_rect {
        Some(r)
            if [num(r, "x"), num(r, "y"), num(r, "width"), num(r, "height")]
                == [px, py, side, side] => {}
        _ => problems.push("the ghosts are not clipped to the plot".to_string()),
    }
    let markers: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("ghost-marker"))
        .collect();
    for g in ghosts
        .children()
        .filter(|n| n.attribute("class") == Some("ghost"))
    {
        let i = g.attribute("data-index").unwrap();
        let c = g.children().find(|n| n.has_tag_name("circle")).unwrap();
        let beyond = !inside(num(c, "cx"), num(c, "cy"));
        let said = g.attribute("data-outside");
        let marker = markers
            .iter()
            .find(|m| m.attribute("data-index") == Some(i));
        if beyond {
            if said != Some("picture") {
                problems.push(format!(
                    "ghost {i} is beyond the plot, data-outside {said:?}"
                ));
            }
            match marker.and_then(|m| m.children().find(|n| n.has_tag_name("polygon"))) {
                None => problems.push(format!("ghost {i} is beyond the plot with no marker")),
                Some(poly) => {
                    let pts = poly.attribute("points").unwrap_or("");
                    for p in pts.split(' ') {
                        let (x, y) = p.split_once(',').unwrap();
                        if !inside(x.parse().unwrap(), y.parse().unwrap()) {
                            problems.push(format!("ghost {i}'s marker leaves the plot at {p}"));
                        }
                    }
                }
            }
        } else if marker.is_some() {
            problems.push(format!("ghost {i} is in the plot but has a marker"));
        }
        let x: i64 = g.attribute("data-x").unwrap().parse().unwrap();
        let y: i64 = g.attribute("data-y").unwrap().parse().unwrap();
        let out_of_box = !(0..=10_000).contains(&x) || !(0..=10_000).contains(&y);
        if out_of_box && said.is_none() {
            problems.push(format!("ghost {i} is outside the box, not said to be"));
        }
    }
    problems
}
