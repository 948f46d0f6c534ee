//! The test vectors of `docs/test-module.md` ("Test vectors" and "The step counter at
//! 2^64"), read from the page itself so that the page and the code cannot drift apart:
//! every `text` block that starts with `seed ` (sfc32) or `setup ` (a world and its steps),
//! and the table of the bodies of seed 7.

use ostm_protocol::format::trace::format_row;
use ostm_protocol::sim::rng::{Sfc32, SEED_DISCARD};
use ostm_protocol::sim::world::{Dims, Setup, World};

const DOC: &str = include_str!("../../docs/test-module.md");

/// The lines of every fenced `text` block of the page.
fn text_blocks() -> Vec<Vec<&'static str>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in DOC.lines() {
        match current.as_mut() {
            None if line == "```text" => current = Some(Vec::new()),
            None => {}
            Some(_) if line == "```" => blocks.extend(current.take()),
            Some(b) => b.push(line),
        }
    }
    assert!(current.is_none(), "a text block is not closed");
    blocks
}

fn words(line: &str, prefix: &str) -> Vec<u32> {
    let rest = line
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("expected {prefix:?}, found {line:?}"));
    rest.split(' ')
        .map(|w| {
            assert_eq!(w.len(), 8, "a u32 in 8 hex digits: {w:?}");
            u32::from_str_radix(w, 16).expect("hex u32")
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn sfc32_gives_the_outputs_the_page_prints() {
    let blocks: Vec<_> = text_blocks()
        .into_iter()
        .filter(|b| b.first().is_some_and(|l| l.starts_with("seed ")))
        .collect();
    assert_eq!(blocks.len(), 1, "one sfc32 block");
    let lines = &blocks[0];
    assert_eq!(lines.len() % 5, 0, "five lines a seed");
    let mut seeds = Vec::new();
    for group in lines.chunks(5) {
        let seed: u32 = group[0]
            .strip_prefix("seed ")
            .and_then(|s| s.parse().ok())
            .expect("seed N");
        seeds.push(seed);
        let before = words(group[1], "state before ");
        assert_eq!(
            before,
            [0x9E37_79B9, 0x243F_6A88, 0xB7E1_5162, seed],
            "the seeding rule"
        );
        let mut rng = Sfc32 {
            state: [before[0], before[1], before[2], before[3]],
        };
        let discarded = words(group[2], "discarded ");
        assert_eq!(discarded.len(), SEED_DISCARD);
        for (i, &want) in discarded.iter().enumerate() {
            assert_eq!(rng.next_u32(), want, "seed {seed}: output {}", i + 1);
        }
        let after = words(group[3], "state after ");
        assert_eq!(
            rng.state.to_vec(),
            after,
            "seed {seed}: state after the discards"
        );
        assert_eq!(rng, Sfc32::from_seed(seed), "from_seed stops there");
        assert_eq!(after[3], seed.wrapping_add(12));
        let outputs = words(group[4], "outputs ");
        assert_eq!(outputs.len(), 8);
        for (i, &want) in outputs.iter().enumerate() {
            assert_eq!(rng.next_u32(), want, "seed {seed}: output {}", 13 + i);
        }
    }
    assert_eq!(seeds, [0, 7, 10000]);
}

#[test]
fn the_bodies_of_seed_7_are_drawn_as_the_table_says() {
    let mut rows = 0;
    for line in DOC.lines() {
        let dims = match line.get(..12) {
            Some("| 2D | `pos." | "| 2D | `vel.") => Dims::Two,
            Some("| 3D | `pos." | "| 3D | `vel.") => Dims::Three,
            _ => continue,
        };
        rows += 1;
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`'))
            .collect();
        let [_, field, output, t, modulo, value] = cells[..] else {
            panic!("six cells: {line:?}");
        };
        let output: usize = output.parse().expect("output number");
        let t = u32::from_str_radix(t, 16).expect("hex t");
        let (modulo, value): (i64, i64) = (
            modulo.parse().expect("t mod"),
            value.parse().expect("value"),
        );
        let mut rng = Sfc32::from_seed(7);
        let mut drawn = 0;
        for _ in SEED_DISCARD + 1..=output {
            drawn = rng.next_u32();
        }
        assert_eq!(drawn, t, "{line}");
        let (lo, span) = if field.starts_with("pos") {
            (500, 9001)
        } else {
            (-40, 81)
        };
        assert_eq!(i64::from(t) % span, modulo, "{line}");
        assert_eq!(lo + modulo, value, "{line}");
        let world = World::new(
            Setup {
                dims,
                bodies: 1,
                seed: 7,
            },
            None,
        );
        let b = world.bodies[0];
        let axis = match &field[4..] {
            "x" => 0,
            "y" => 1,
            "z" => 2,
            other => panic!("axis {other}"),
        };
        let got = if field.starts_with("pos") {
            b.pos[axis]
        } else {
            b.vel[axis]
        };
        assert_eq!(i64::from(got), value, "{line}");
    }
    assert_eq!(rows, 10, "four 2D draws and six 3D draws");
}

#[test]
fn the_small_worlds_have_the_rows_hashes_and_snapshots_the_page_prints() {
    let blocks: Vec<_> = text_blocks()
        .into_iter()
        .filter(|b| b.first().is_some_and(|l| l.starts_with("setup ")))
        .collect();
    // 2D and 3D at steps 0 and 1, and the 2D world across u64::MAX.
    assert_eq!(blocks.len(), 3, "three world blocks");
    let mut wraps = false;
    for block in &blocks {
        let setup_line = block[0];
        let field = |name: &str| {
            setup_line
                .split(' ')
                .find_map(|t| t.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{name} in {setup_line:?}"))
        };
        assert_eq!(field("link"), "none");
        let setup = Setup {
            dims: match field("dims") {
                "2" => Dims::Two,
                "3" => Dims::Three,
                d => panic!("dims {d}"),
            },
            bodies: field("bodies").parse().expect("bodies"),
            seed: field("seed").parse().expect("seed"),
        };
        // The first row is the world the seed makes, at the row's step; each later row is
        // the world after one more step with an empty input.
        let mut world = World::new(setup, None);
        let rows = &block[1..];
        assert!(rows.len() >= 4 && rows.len() % 2 == 0, "{setup_line}");
        for (i, pair) in rows.chunks(2).enumerate() {
            let (row, snapshot) = (pair[0], pair[1]);
            if i == 0 {
                world.step = row
                    .strip_prefix("s=")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|s| s.parse().ok())
                    .expect("s=STEP");
            } else {
                let before = world.step;
                world.step(&[]);
                wraps |= before == u64::MAX && world.step == 0;
            }
            let mut line = String::new();
            format_row(&mut line, &world, world.hash());
            assert_eq!(line, format!("{row}\n"), "{setup_line}, row {i}");
            assert_eq!(
                snapshot,
                format!("snapshot {}", hex(&world.snapshot())),
                "{setup_line}, row {i}"
            );
            // The hash is XXH3-64 (seed 0) of the snapshot bytes printed.
            let h = row.split(' ').nth(1).and_then(|h| h.strip_prefix("h="));
            let of_bytes = xxhash_rust::xxh3::xxh3_64(&world.snapshot());
            assert_eq!(h, Some(format!("{of_bytes:016x}").as_str()));
        }
    }
    assert!(wraps, "one block steps from u64::MAX to 0");
}
