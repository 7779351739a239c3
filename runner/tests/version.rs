//! `runner --version` names the build: the crate's version, the commit it was built from and
//! the versions of the protocol and of every file format.

use std::process::Command;

/// Proves `--version` prints the crate version, the checkout's commit (the one `git` names
/// now, which cargo rebuilt the binary for) and the formats as the engine's constants give
/// them; `-V` stays the short form.
#[test]
fn the_version_names_the_commit_and_the_formats() {
    let runner = env!("CARGO_BIN_EXE_runner");
    let long = Command::new(runner).arg("--version").output().unwrap();
    assert!(long.status.success(), "{long:?}");
    let long = String::from_utf8(long.stdout).unwrap();
    let commit = match Command::new("git").args(["rev-parse", "HEAD"]).output() {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
        Ok(_) | Err(_) => "unknown".into(),
    };
    let expected = format!(
        "runner {} (commit {}; {})\n",
        env!("CARGO_PKG_VERSION"),
        commit.trim(),
        engine::formats::describe()
    );
    assert_eq!(long, expected);
    let short = Command::new(runner).arg("-V").output().unwrap();
    let short = String::from_utf8(short.stdout).unwrap();
    assert_eq!(short, format!("runner {}\n", env!("CARGO_PKG_VERSION")));
}

/// Proves the CHANGELOG's table of the formats this build writes and reads is the engine's
/// constants: a format changed without its entry fails here.
#[test]
fn the_changelog_names_the_formats_of_this_build() {
    use engine::formats::{BACKUP, PROTOCOL, PROTOCOL_OLDEST, SNAPSHOT, SNAPSHOT_OLDEST, WAL};
    let changelog = include_str!("../../CHANGELOG.md");
    let row = |name: &str| {
        let line = changelog
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row for {name} in CHANGELOG.md"));
        line.split('|')
            .map(str::trim)
            .skip(2)
            .take(2)
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let reads = |oldest: u16, newest: u16| {
        let older: Vec<String> = (oldest..newest).rev().map(|v| v.to_string()).collect();
        if older.is_empty() {
            "-".to_string()
        } else {
            older.join(", ")
        }
    };
    assert_eq!(
        row("wire protocol"),
        format!("{PROTOCOL} / {}", reads(PROTOCOL_OLDEST, PROTOCOL))
    );
    assert_eq!(row("WAL records"), format!("`WAL{WAL}` / -"));
    assert_eq!(
        row("snapshots"),
        format!(
            "{SNAPSHOT} (`SNAPv{SNAPSHOT:03}`) / {}",
            reads(SNAPSHOT_OLDEST, SNAPSHOT)
        )
    );
    assert_eq!(row("backups"), format!("{BACKUP} / -"));
    let delta = engine::formats::SNAPSHOT_DELTA;
    assert_eq!(
        row("snapshot deltas"),
        format!("{delta} (`SNAPd{delta:03}`) / -")
    );
}

/// Proves the compatibility table in `notes/operations.md` has a row for this build whose
/// formats are the engine's constants: a format changed without its row fails here.
#[test]
fn the_compatibility_table_names_this_builds_formats() {
    use engine::formats::{BACKUP, PROTOCOL, PROTOCOL_OLDEST, SNAPSHOT, SNAPSHOT_OLDEST, WAL};
    let operations = include_str!("../../notes/operations.md");
    let version = env!("CARGO_PKG_VERSION");
    let row = operations
        .lines()
        .find(|l| l.starts_with(&format!("| {version} |")))
        .unwrap_or_else(|| panic!("no row for {version} in the compatibility table"));
    let cells: Vec<&str> = row.split('|').map(str::trim).skip(1).collect();
    let expected = [
        version.to_string(),
        format!("{PROTOCOL_OLDEST}-{PROTOCOL}"),
        WAL.to_string(),
        SNAPSHOT.to_string(),
        format!("{SNAPSHOT_OLDEST}-{SNAPSHOT}"),
        BACKUP.to_string(),
    ];
    assert_eq!(cells[..expected.len()], expected, "{row}");
    let can_roll_from = cells[expected.len()];
    assert!(
        !can_roll_from.is_empty(),
        "{row}: say which builds it rolls from"
    );
    let header = operations
        .lines()
        .find(|l| l.starts_with("| build |"))
        .expect("the table's header");
    assert!(header.contains("can roll from"), "{header}");
}
