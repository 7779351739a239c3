//! Tidy: rules of `notes/style.md` that a machine can check over the whole source tree.
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

/// The folders of the engine's stateful core whose invariants must be code, with at least one
/// assertion per [`LINES_PER_ASSERTION_MAX`] lines.
const DENSE_DIRS: [&str; 6] = ["core", "replica", "apply", "wal", "snapshot", "state"];
/// Lines of code (not blank, not comments, not tests) per assertion, at most, in [`DENSE_DIRS`].
const LINES_PER_ASSERTION_MAX: usize = 40;
/// The macros counted as assertions.
const ASSERTIONS: [&str; 6] = [
    "assert!(",
    "assert_eq!(",
    "assert_ne!(",
    "debug_assert!(",
    "debug_assert_eq!(",
    "debug_assert_ne!(",
];

/// Lines of code and assertions of one source file, its tests left out (a `tests.rs` file,
/// and everything from a `#[cfg(test)]` module on).
fn density_of(text: &str) -> (usize, usize) {
    // An inline test module ends the code; `mod tests;` (tests in a file of their own, which
    // the caller leaves out) does not.
    let inline_tests = text
        .match_indices("#[cfg(test)]\nmod ")
        .find(|(at, _)| text[*at..].lines().nth(1).is_some_and(|l| l.ends_with('{')));
    let code = match inline_tests {
        Some((at, _)) => &text[..at],
        None => text,
    };
    let lines = code
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count();
    let assertions = ASSERTIONS
        .iter()
        .map(|name| {
            code.match_indices(name)
                .filter(|(at, _)| !code[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
                .count()
        })
        .sum();
    (lines, assertions)
}

/// Proves the counting rules: tests and comments left out, `debug_assert` counted once.
#[test]
fn the_density_count_counts_what_it_should() {
    let text = "fn f(x: u8) {\n    // why\n    assert!(x > 0);\n    debug_assert_eq!(x, 1);\n}\n\n#[cfg(test)]\nmod tests {\n    fn g() { assert!(true); }\n}\n";
    assert_eq!(density_of(text), (4, 2));
    let declared = "#[cfg(test)]\nmod tests;\n\nfn f(x: u8) {\n    assert!(x > 0);\n}\n";
    assert_eq!(
        density_of(declared),
        (5, 1),
        "a declared test module ends nothing"
    );
}

/// Proves the engine's stateful layers state their invariants as code, at least one assertion
/// per [`LINES_PER_ASSERTION_MAX`] lines of each folder, and prints the table
/// (`scripts/assertion-density` shows it).
#[test]
fn assertion_density() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src");
    println!(
        "{:<10} {:>6} {:>10} {:>14}",
        "folder", "lines", "assertions", "lines/assert"
    );
    let mut sparse = Vec::new();
    for dir in DENSE_DIRS {
        let mut files = Vec::new();
        sources(&root.join(dir), &mut files);
        assert!(
            !files.is_empty(),
            "{dir}: no sources under {}",
            root.display()
        );
        let (mut lines, mut assertions) = (0, 0);
        for file in files.iter().filter(|f| !f.ends_with("tests.rs")) {
            let (l, a) = density_of(&std::fs::read_to_string(file).unwrap());
            lines += l;
            assertions += a;
        }
        let per = lines / assertions.max(1);
        println!("{dir:<10} {lines:>6} {assertions:>10} {per:>14}");
        if per > LINES_PER_ASSERTION_MAX {
            sparse.push(format!("{dir}: {assertions} assertions in {lines} lines"));
        }
    }
    assert!(
        sparse.is_empty(),
        "fewer than one assertion per {LINES_PER_ASSERTION_MAX} lines:\n{}",
        sparse.join("\n")
    );
}

/// The house drawing in `notes/decisions/tree.md`: the paths its first column names.
fn drawn_paths(drawing: &str) -> Vec<String> {
    let block = drawing.split("```text").nth(1).expect("a text block");
    let block = block.split("```").next().expect("closed");
    let mut paths = Vec::new();
    let mut top = String::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let name = line.split_whitespace().next().expect("a path");
        let name = name.trim_matches('`');
        if line.starts_with(' ') {
            paths.push(format!("{top}{name}"));
        } else {
            top = name.to_string();
            paths.push(name.to_string());
        }
    }
    paths
}

/// Proves the house drawing matches the tree: every path it names exists, and every folder
/// and module file of `engine/src` is in it.
#[test]
fn the_house_drawing_matches_the_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let drawing = std::fs::read_to_string(root.join("notes/decisions/tree.md")).unwrap();
    let paths = drawn_paths(&drawing);
    let missing: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(missing.is_empty(), "drawn but not in the tree: {missing:?}");
    let mut undrawn = Vec::new();
    for item in std::fs::read_dir(root.join("engine/src"))
        .unwrap()
        .flatten()
    {
        let name = item.file_name().to_string_lossy().into_owned();
        let drawn = match item.path().is_dir() {
            true => format!("engine/src/{name}/"),
            false => format!("engine/src/{name}"),
        };
        if name != "lib.rs" && !paths.contains(&drawn) {
            undrawn.push(drawn);
        }
    }
    assert!(undrawn.is_empty(), "in the tree but not drawn: {undrawn:?}");
}

/// Proves no module is mounted from elsewhere by a path attribute: the folder tree and the
/// module tree say the same thing.
#[test]
fn no_module_is_mounted_by_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        sources(&root.join(dir), &mut files);
    }
    let attribute = ["#[", "path"].concat();
    let mounted: Vec<String> = files
        .iter()
        .filter(|file| std::fs::read_to_string(file).unwrap().contains(&attribute))
        .map(|file| file.display().to_string())
        .collect();
    assert!(mounted.is_empty(), "modules mounted by path: {mounted:?}");
}

/// Proves no file git tracks names the folder that sits beside the checkout on developers'
/// machines and not in a clone (`notes/style.md`, rule 16): what the project needs lives
/// inside it.
#[test]
fn no_tracked_file_names_a_folder_outside_the_checkout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Made of pieces, so that this file does not name the folder itself.
    let needle = concat!("..", "/shared");
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .expect("git runs (the test walks the files git tracks)");
    assert!(
        listed.status.success(),
        "git ls-files failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed = String::from_utf8(listed.stdout).expect("tracked paths are UTF-8");
    let files: Vec<&str> = listed.split('\0').filter(|f| !f.is_empty()).collect();
    assert!(files.len() > 100, "too few tracked files: {}", files.len());
    let naming: Vec<&str> = files
        .into_iter()
        .filter(|file| {
            // A file deleted in the work tree but still tracked has nothing to say.
            std::fs::read(root.join(file)).is_ok_and(|bytes| {
                bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_bytes())
            })
        })
        .collect();
    assert!(
        naming.is_empty(),
        "files naming {needle}, which a clone does not have:\n{}",
        naming.join("\n")
    );
}
