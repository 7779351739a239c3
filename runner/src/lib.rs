//! The runner's product commands (the main job, the Bank's client, the benchmark, the
//! single-node ceiling), shared by the product binary `runner` and the harness binary
//! `runner-harness`.

#![warn(clippy::disallowed_macros)]

pub mod product;

use std::path::{Path, PathBuf};

/// Where data goes when `--dir` is not given: tmpfs, as the reference runs do.
pub const DATA_DIR_DEFAULT: &str = "/dev/shm";

/// The harness binary's name: the simulator driver, the fault and load harnesses and the
/// notes generator, apart from the product binary, which forwards their commands to it.
pub const HARNESS_BINARY: &str = "runner-harness";

/// The product binary's name (what a harness starts node processes with).
pub const PRODUCT_BINARY: &str = "runner";

/// A fresh run directory under `base` (or under [`DATA_DIR_DEFAULT`]), removed when dropped.
pub fn run_dir(base: Option<PathBuf>) -> anyhow::Result<tempfile::TempDir> {
    let base = base.unwrap_or_else(|| PathBuf::from(DATA_DIR_DEFAULT));
    std::fs::create_dir_all(&base)?;
    Ok(tempfile::Builder::new()
        .prefix("replicated-bank-")
        .tempdir_in(base)?)
}

/// The binary `name` beside the running one (both are built together, into one directory).
pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let path = dir.join(name);
    if !path.is_file() {
        anyhow::bail!(
            "{} not found beside {}: build both binaries (`cargo build --release -p runner \
             --bins`)",
            path.display(),
            exe.display()
        );
    }
    Ok(path)
}

/// This build's identity, the same in both binaries of one build (it is compiled into this
/// library, which both link): the product binary refuses to forward to a harness binary of
/// another build.
pub const BUILD_ID: &str = env!("RUNNER_BUILD_ID");

/// The environment variable in which the product binary tells the harness binary its build.
pub const FORWARDED_BUILD_VARIABLE: &str = "RUNNER_FORWARDED_BY_BUILD";

/// Refuses to run forwarded by a product binary of another build (a harness binary left
/// from an older build would run old code under the new name).
pub fn check_forwarded_build() -> anyhow::Result<()> {
    match std::env::var(FORWARDED_BUILD_VARIABLE) {
        Ok(build) if build != BUILD_ID => anyhow::bail!(
            "{HARNESS_BINARY} and {PRODUCT_BINARY} are from different builds: build both \
             (`cargo build --release -p runner --bins`)"
        ),
        Ok(_) | Err(_) => Ok(()),
    }
}
