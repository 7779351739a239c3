//! Tidy: rules of `../shared/STYLE.md` that a machine can check over the whole source tree.
//! Code comments say why, never which issue or session: the history lives in git and in
//! `notes/`, and a comment that cites an issue number tells a reader nothing the code needs.

use std::path::{Path, PathBuf};

/// The folders holding the workspace's Rust sources.
const SOURCE_DIRS: [&str; 5] = ["engine", "net", "bank", "runner", "benches"];
/// Folders below those that hold no sources of ours (build output, fuzzing corpora).
const SKIPPED_DIRS: [&str; 4] = ["target", "corpus", "artifacts", "seeds"];

/// Every `.rs` file under `dir`, skipping [`SKIPPED_DIRS`].
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(items) = std::fs::read_dir(dir) else {
        return;
    };
    for item in items.flatten() {
        let path = item.path();
        let name = item.file_name();
        if path.is_dir() {
            if !SKIPPED_DIRS.iter().any(|skip| name == *skip) {
                sources(&path, found);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// True when a comment's text names an issue by its number (the word, maybe plural, a space,
/// a digit).
fn cites_an_issue(comment: &str) -> bool {
    let lower = comment.to_ascii_lowercase();
    lower.match_indices("issue").any(|(at, word)| {
        let rest = lower[at + word.len()..].trim_start_matches('s');
        let rest = rest.strip_prefix(' ').unwrap_or("");
        let starts_word = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
        starts_word && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The comment on a line of Rust, if it has one (`//`, `///`, `//!`).
fn comment_of(line: &str) -> Option<&str> {
    line.find("//").map(|at| &line[at..])
}

/// Proves the rule's own check: it finds issue numbers in comments, and not the word alone.
#[test]
fn the_issue_check_finds_what_it_should() {
    // Made of pieces, so that this file's own lines pass the rule.
    let word = "issue";
    let table = [
        (format!("// fixed in {word} 13"), true),
        (format!("/// ({word}s 7 and 8)"), true),
        (format!("//! I{} 16, item 4", &word[1..]), true),
        (format!("// an {word} with the disk"), false),
        (format!("// t{word} 3"), false),
        (format!("// {word}: 3"), false),
    ];
    for (comment, cites) in table {
        assert_eq!(cites_an_issue(&comment), cites, "{comment}");
    }
    assert_eq!(comment_of("let x = 1; // why"), Some("// why"));
    assert_eq!(comment_of("let x = 1;"), None);
}

/// Proves no code comment in the workspace cites an issue number.
#[test]
fn no_comment_cites_an_issue() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        sources(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "the tree was not found: {}",
        root.display()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if comment_of(line).is_some_and(cites_an_issue) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "comments citing issues:\n{}",
        found.join("\n")
    );
}
