//! Gives each build of the runner an identity (`runner::BUILD_ID`), so that the product
//! binary never forwards a command to a harness binary left from an older build; and names
//! the commit it was built from (`RUNNER_GIT_COMMIT`, `unknown` outside a git checkout), which
//! `--version` shows; `GIT_COMMIT` in the environment names it where there is no checkout (a
//! container build). Cargo runs this again when a file of the package changes, the
//! checkout's commit moves, or `GIT_COMMIT` changes.

use std::path::Path;

fn main() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    println!("cargo:rustc-env=RUNNER_BUILD_ID={nanos}");
    println!("cargo:rustc-env=RUNNER_GIT_COMMIT={}", commit());
    // Naming what to watch replaces cargo's default (every file of the package): name the
    // package's files as well as git's pointer to the commit.
    println!("cargo:rerun-if-env-changed=GIT_COMMIT");
    for path in ["src", "build.rs", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let git = Path::new("../.git");
    println!("cargo:rerun-if-changed={}", git.join("HEAD").display());
    if let Some(reference) = head_reference(git) {
        println!("cargo:rerun-if-changed={}", git.join(reference).display());
        println!(
            "cargo:rerun-if-changed={}",
            git.join("packed-refs").display()
        );
    }
}

/// The commit: `GIT_COMMIT` when set, else the one checked out, from git; `unknown` when
/// there is neither.
fn commit() -> String {
    if let Ok(commit) = std::env::var("GIT_COMMIT")
        && !commit.trim().is_empty()
    {
        return commit.trim().to_string();
    }
    let output = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output();
    match output {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        }
        Ok(_) | Err(_) => "unknown".into(),
    }
}

/// The branch `HEAD` points at (`refs/heads/main`), when it points at one.
fn head_reference(git: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git.join("HEAD")).ok()?;
    head.strip_prefix("ref: ").map(|r| r.trim().to_string())
}
