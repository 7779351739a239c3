//! The README's handler sections stay true: the tutorial it shows under "Writing a handler" is
//! the guide's first example (`engine/src/guide.md`, a doctest), the `src/main.rs` of "Run your
//! handler on three machines" is `examples/theatre/src/main.rs` (a package
//! of the workspace, which cargo builds with the tests), and the cluster file it shows parses and passes every check.

use engine::node::ClusterFile;

const README: &str = include_str!("../../README.md");
const THEATRE: &str = include_str!("../../examples/theatre/src/main.rs");
const GUIDE: &str = include_str!("../src/guide.md");

/// The body of the README's first code block of `kind` that contains `needle`.
fn block<'a>(kind: &str, needle: &str) -> &'a str {
    block_of(README, kind, needle)
}

/// The body of `text`'s first code block of `kind` that contains `needle`.
fn block_of<'a>(text: &'a str, kind: &str, needle: &str) -> &'a str {
    let fence = format!("```{kind}\n");
    text.split(fence.as_str())
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("a closed block")])
        .find(|body| body.contains(needle))
        .unwrap_or_else(|| panic!("no {kind} block with {needle:?}"))
}

/// Proves the README's tutorial is the guide's, which rustdoc compiles and runs.
#[test]
fn the_readme_tutorial_is_the_guides_doctest() {
    let readme = block("rust", "Sandbox::new(Theatre");
    assert_eq!(readme, block_of(GUIDE, "rust", "Sandbox::new(Theatre"));
}

/// Proves the README shows the theatre example's file as it is.
#[test]
fn the_readme_main_is_the_theatre_example() {
    assert_eq!(block("rust,no_run", "engine::cli::main"), THEATRE);
}

/// Proves the README's cluster file is valid as it stands.
#[test]
fn the_readme_cluster_file_is_valid() {
    let text = block("toml", "/dev/shm/theatre/node1");
    let file = ClusterFile::from_toml(text).unwrap();
    assert_eq!(file.errors(), Vec::<String>::new());
    assert_eq!(file.nodes.len(), 3);
}
