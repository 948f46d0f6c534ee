//! `testdata/golden.json` holds every replay's final hash and behaviour numbers; running
//! the committed replays now must give the same numbers. `scripts/write-golden` rewrites it.

use ostm_protocol::sim::testdata::{
    golden_changes, golden_of_dir, Golden, GoldenChange, GOLDEN_FILE, GOLDEN_FORMAT,
};
use std::path::PathBuf;

fn testdata_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn committed() -> Golden {
    let path = testdata_dir().join(GOLDEN_FILE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One line per number that moved: `golden.json: FILE: body I FIELD: expected X, actual Y`.
fn report(changes: &[GoldenChange]) -> String {
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_string());
    changes
        .iter()
        .map(|c| {
            format!(
                "{GOLDEN_FILE}: {}: expected {}, actual {}",
                c.name,
                show(&c.old),
                show(&c.new)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn replays_match_their_golden_numbers() {
    let expected = committed();
    assert_eq!(expected.format, GOLDEN_FORMAT);
    let actual = golden_of_dir(&testdata_dir()).unwrap_or_else(|e| panic!("{e}"));
    let changes = golden_changes(&expected, &actual);
    assert!(
        changes.is_empty(),
        "{}\nif the change is intended, run scripts/write-golden and say in the commit which behaviour changed",
        report(&changes)
    );
}

#[test]
fn a_moved_number_is_named_with_its_file_body_and_both_values() {
    let expected = committed();
    let mut moved = expected.clone();
    let replay = &mut moved.replays[1];
    let file = replay.file.clone();
    replay.bodies[5].position[1] += 1;
    replay.bodies[7].first_rest_step = None;
    let old_y = expected.replays[1].bodies[5].position[1];
    let changes = golden_changes(&expected, &moved);
    let text = report(&changes);
    assert_eq!(
        changes.len(),
        1 + expected.replays[1].bodies[7].first_rest_step.is_some() as usize,
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "golden.json: {file}: body 5 position.y: expected {old_y}, actual {}",
            old_y + 1
        )),
        "{text}"
    );
}

#[test]
fn a_missing_body_is_reported() {
    let expected = committed();
    let mut fewer = expected.clone();
    fewer.replays[0].bodies.pop();
    let text = report(&golden_changes(&expected, &fewer));
    assert!(
        text.contains("body count: expected 64, actual 63"),
        "{text}"
    );
    assert!(text.contains("body 63 alive: expected"), "{text}");
    assert!(text.contains("actual (absent)"), "{text}");
}
