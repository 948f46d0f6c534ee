//! Golden pictures: one frame of each test file rendered by the real binary, byte for byte
//! equal to `testdata/svg/*.svg`, and each golden parsed and checked against the world:
//! every live body (and ghost body) where the world has it, every overlay cell with the
//! field's value. `UPDATE_GOLDEN=1 cargo test -p ostm-viewer --test golden_svg` rewrites
//! the goldens after an intended change of the picture.

use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::sim::fields;
use ostm_protocol::{Replay, World};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Case {
    file: &'static str,
    step: u64,
    overlay: &'static str,
    ghost: Option<&'static str>,
    golden: &'static str,
}

const CASES: [Case; 7] = [
    Case {
        file: "test-10000.ostm",
        step: 5000,
        overlay: "density",
        ghost: None,
        golden: "test-10000-step5000.svg",
    },
    Case {
        file: "test-2d-600.ostm",
        step: 210,
        overlay: "occupancy",
        ghost: Some("test-2d-ghost.ospc"),
        golden: "test-2d-600-step210-ghost.svg",
    },
    Case {
        file: "test-field-2d.ostm",
        step: 300,
        overlay: "density",
        ghost: None,
        golden: "test-field-2d-step300.svg",
    },
    Case {
        file: "test-field-3d.ostm",
        step: 300,
        overlay: "occupancy",
        ghost: None,
        golden: "test-field-3d-step300.svg",
    },
    Case {
        file: "test-link-left.ostm",
        step: 150,
        overlay: "density",
        ghost: None,
        golden: "test-link-left-step150.svg",
    },
    Case {
        file: "test-link-right.ostm",
        step: 151,
        overlay: "density",
        ghost: None,
        golden: "test-link-right-step151.svg",
    },
    Case {
        file: "test-start-snapshot.ostm",
        step: 1500,
        overlay: "occupancy",
        ghost: None,
        golden: "test-start-snapshot-step1500.svg",
    },
];

fn render(case: &Case, out: &Path) {
    let data = root().join("testdata");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ostm-viewer"));
    cmd.arg("render")
        .arg(data.join(case.file))
        .args([
            "--step",
            &case.step.to_string(),
            "--overlay",
            case.overlay,
            "-o",
        ])
        .arg(out);
    if let Some(g) = case.ghost {
        cmd.arg("--ghost").arg(data.join(g));
    }
    let o = ostm_testkit::run(&mut cmd);
    assert!(
        o.status.success(),
        "{}: {}",
        case.file,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn world_at(replay: &Replay, step: u64) -> World {
    let mut w = replay.start_world();
    for i in 0..(step - replay.start_step()) as usize {
        w.step(&replay.inputs.ops(i));
    }
    assert_eq!(w.step, step);
    w
}

fn num(n: roxmltree::Node<'_, '_>, attr: &str) -> f64 {
    n.attribute(attr)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("attribute {attr} of {n:?}"))
}

fn nums(n: roxmltree::Node<'_, '_>, attr: &str) -> Vec<f64> {
    n.attribute(attr)
        .unwrap_or_else(|| panic!("attribute {attr}"))
        .split_whitespace()
        .map(|v| v.parse().expect("number"))
        .collect()
}

/// Checks one picture against the world it shows; returns the problems found.
fn check(svg: &str, world: &World, ghost: Option<&PoseCache>, overlay: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let doc = match roxmltree::Document::parse(svg) {
        Ok(d) => d,
        Err(e) => return vec![format!("not well-formed: {e}")],
    };
    let svg_el = doc.root_element();
    let plot = nums(svg_el, "data-plot");
    let view = nums(svg_el, "data-view");
    let (px, py, size, min, span) = (plot[0], plot[1], plot[2], view[0], view[1]);
    let [au, av] = fields::floor_axes(world.dims());
    let three = world.dims() == ostm_protocol::Dims::Three;
    // Where the documented view puts a position: x right; 2D y up, 3D z down.
    let expect_px = |pos: [i32; 3]| {
        let k = size / span;
        let x = px + (pos[au] as f64 - min) * k;
        let y = if three {
            py + (pos[av] as f64 - min) * k
        } else {
            py + (min + span - pos[av] as f64) * k
        };
        (x, y)
    };
    let groups = |class: &str| -> Vec<roxmltree::Node<'_, '_>> {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(class))
            .collect()
    };
    let mut check_bodies = |class: &str, want: Vec<(usize, [i32; 3])>| {
        let drawn = groups(class);
        if drawn.len() != want.len() {
            problems.push(format!(
                "{} {class} groups drawn, {} expected",
                drawn.len(),
                want.len()
            ));
        }
        for (i, pos) in want {
            let Some(g) = drawn
                .iter()
                .find(|g| g.attribute("data-index") == Some(&i.to_string()))
            else {
                problems.push(format!("{class} {i} is missing"));
                continue;
            };
            let data = [
                num(*g, "data-x") as i32,
                num(*g, "data-y") as i32,
                num(*g, "data-z") as i32,
            ];
            if data != pos {
                problems.push(format!(
                    "{class} {i} is labelled {data:?}, the world has {pos:?}"
                ));
            }
            let Some(c) = g.children().find(|n| n.has_tag_name("circle")) else {
                problems.push(format!("{class} {i} has no circle"));
                continue;
            };
            let (x, y) = expect_px(pos);
            if (num(c, "cx") - x).abs() > 0.06 || (num(c, "cy") - y).abs() > 0.06 {
                problems.push(format!(
                    "{class} {i} is drawn at ({}, {}), expected ({x:.2}, {y:.2})",
                    num(c, "cx"),
                    num(c, "cy")
                ));
            }
        }
    };
    let live: Vec<(usize, [i32; 3])> = world
        .bodies
        .iter()
        .enumerate()
        .filter(|(_, b)| b.alive)
        .map(|(i, b)| (i, b.pos))
        .collect();
    check_bodies("body", live);
    if let Some(cache) = ghost {
        let poses = cache
            .frame_at_step(world.step)
            .expect("the ghost covers the step");
        let present: Vec<(usize, [i32; 3])> = poses
            .iter()
            .enumerate()
            .filter(|(_, p)| p.present)
            .map(|(i, p)| (i, p.pos))
            .collect();
        check_bodies("ghost", present);
    }
    let f = fields::compute(world);
    let value = |n: roxmltree::Node<'_, '_>, a: &str| {
        n.attribute(a)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(usize::MAX)
    };
    match overlay {
        "density" => {
            let cells = groups("vertex");
            if cells.len() != 81 {
                problems.push(format!("{} density cells, expected 81", cells.len()));
            }
            for j in 0..9 {
                for i in 0..9 {
                    match cells
                        .iter()
                        .find(|n| value(**n, "data-i") == i && value(**n, "data-j") == j)
                    {
                        None => problems.push(format!("density cell ({i}, {j}) is missing")),
                        Some(n)
                            if n.attribute("data-value") != Some(&f.density[j][i].to_string()) =>
                        {
                            problems.push(format!(
                                "density cell ({i}, {j}) says {:?}, the field is {}",
                                n.attribute("data-value"),
                                f.density[j][i]
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        _ => {
            let cells = groups("triangle");
            if cells.len() != 128 {
                problems.push(format!("{} occupancy cells, expected 128", cells.len()));
            }
            for j in 0..8 {
                for i in 0..8 {
                    for t in 0..2 {
                        let found = cells.iter().find(|n| {
                            value(**n, "data-i") == i
                                && value(**n, "data-j") == j
                                && value(**n, "data-t") == t
                        });
                        match found {
                            None => problems.push(format!("triangle ({i}, {j}, {t}) is missing")),
                            Some(n)
                                if n.attribute("data-value")
                                    != Some(&f.occupancy[j][i][t].to_string()) =>
                            {
                                problems.push(format!(
                                    "triangle ({i}, {j}, {t}) says {:?}, the field is {}",
                                    n.attribute("data-value"),
                                    f.occupancy[j][i][t]
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
        }
    }
    problems
}

fn load(case: &Case) -> (World, Option<PoseCache>) {
    let data = root().join("testdata");
    let replay = Replay::read_file(&data.join(case.file)).expect("test file reads");
    let ghost = case
        .ghost
        .map(|g| PoseCache::read_file(&data.join(g)).expect("ghost reads"));
    (world_at(&replay, case.step), ghost)
}

#[test]
fn each_test_file_renders_its_golden_picture_with_every_body_and_cell() {
    let dir = tempfile::tempdir().expect("temp dir");
    let golden_dir = root().join("testdata").join("svg");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut problems = Vec::new();
    for case in &CASES {
        let out = dir.path().join(case.golden);
        render(case, &out);
        let fresh = std::fs::read_to_string(&out).expect("rendered svg");
        let path = golden_dir.join(case.golden);
        if update {
            std::fs::create_dir_all(&golden_dir).expect("svg dir");
            std::fs::write(&path, &fresh).expect("write golden");
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        if golden != fresh {
            problems.push(format!(
                "{}: the rendered picture differs from the golden (UPDATE_GOLDEN=1 if intended)",
                case.golden
            ));
        }
        let (world, ghost) = load(case);
        problems.extend(
            check(&golden, &world, ghost.as_ref(), case.overlay)
                .into_iter()
                .map(|p| format!("{}: {p}", case.golden)),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_picture_check_catches_a_missing_body_a_moved_body_and_a_wrong_cell() {
    let case = &CASES[2];
    let golden =
        std::fs::read_to_string(root().join("testdata/svg").join(case.golden)).expect("golden");
    let (world, _) = load(case);
    assert_eq!(
        check(&golden, &world, None, case.overlay),
        Vec::<String>::new()
    );
    // Planted faults, each on a copy of the golden.
    let first = world
        .bodies
        .iter()
        .position(|b| b.alive)
        .expect("a live body");
    let tag = format!(r#"class="body" data-index="{first}""#);
    let gone = golden.replace(&tag, r#"class="removed""#);
    assert!(check(&gone, &world, None, case.overlay)
        .iter()
        .any(|p| p == &format!("body {first} is missing")));
    let mut moved = world.clone();
    moved.bodies[first].pos[0] += 500;
    assert!(check(&golden, &moved, None, case.overlay)
        .iter()
        .any(|p| p.starts_with(&format!("body {first} is labelled"))));
    let cell = r#"class="vertex" data-i="4" data-j="4" data-value=""#;
    let wrong = golden.replace(
        cell,
        r#"class="vertex" data-i="4" data-j="4" data-value="9"#,
    );
    assert!(check(&wrong, &world, None, case.overlay)
        .iter()
        .any(|p| p.starts_with("density cell (4, 4) says")));
}
