//! docs/performance.md says where things stand, in at most 450 lines (its history is in
//! git), and every section another file of the repository names is there: a comment or
//! script that quotes `docs/performance.md, "SECTION"`, a link `performance.md#ANCHOR` and
//! a mention `` docs/performance.md, `## SECTION` `` each find their heading.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 450;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the bench crate lies in the workspace")
        .to_path_buf()
}

/// Every text file of the repository but build output and git's own.
fn text_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        if path.is_dir() {
            text_files(&path, out);
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, text));
        }
    }
}

/// The text with comment markers and line breaks folded into single spaces, so that a
/// section name wrapped over two comment lines reads as one.
fn folded(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.trim()
                .trim_start_matches("//!")
                .trim_start_matches("//")
                .trim_start_matches('#')
                .trim()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The names other files give sections of docs/performance.md, with the file naming each.
fn cited_sections(files: &[(PathBuf, String)]) -> Vec<(PathBuf, String)> {
    let mut cited = Vec::new();
    for (path, text) in files {
        if path.ends_with("docs/performance.md") || path.ends_with(file!()) {
            continue;
        }
        let text = folded(text);
        for (at, _) in text.match_indices("performance.md") {
            let rest = &text[at + "performance.md".len()..];
            let name = if let Some(anchor) = rest.strip_prefix('#') {
                let end = anchor
                    .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
                    .unwrap_or(anchor.len());
                format!("#{}", &anchor[..end])
            } else if let Some(quoted) = rest.strip_prefix(", \"") {
                match quoted.find('"') {
                    Some(end) => quoted[..end].to_string(),
                    None => continue,
                }
            } else if let Some(quoted) = rest.strip_prefix(", `## ") {
                match quoted.find('`') {
                    Some(end) => quoted[..end].to_string(),
                    None => continue,
                }
            } else {
                continue;
            };
            cited.push((path.clone(), name));
        }
    }
    cited
}

#[test]
fn performance_md_says_where_things_stand_in_at_most_450_lines() {
    let doc = std::fs::read_to_string(root().join("docs/performance.md"))
        .expect("docs/performance.md is readable");
    let lines = doc.lines().count();
    assert!(
        lines <= MAX_LINES,
        "docs/performance.md has {lines} lines, more than {MAX_LINES}: cut history and superseded figures (git keeps them)"
    );
}

#[test]
fn every_section_of_performance_md_another_file_names_is_there() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/performance.md"))
        .expect("docs/performance.md is readable");
    let headings: Vec<&str> = doc
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|line| line.trim_start_matches('#').trim())
        .collect();
    let mut files = Vec::new();
    text_files(&root, &mut files);
    let cited = cited_sections(&files);
    assert!(
        cited.len() >= 5,
        "expected the comments and scripts that name sections of docs/performance.md, found {cited:?}"
    );
    for (path, name) in cited {
        let found = match name.strip_prefix('#') {
            Some(wanted) => headings.iter().any(|h| anchor(h) == wanted),
            None => headings.iter().any(|h| h.starts_with(name.as_str())),
        };
        assert!(
            found,
            "{} names the section {name:?} of docs/performance.md, which has no such heading (headings: {headings:?})",
            path.display()
        );
    }
}
