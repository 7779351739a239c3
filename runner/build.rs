//! Gives each build of the runner an identity (`runner::BUILD_ID`), so that the product
//! binary never forwards a command to a harness binary left from an older build. Cargo runs
//! this again whenever a file of the package changes.

fn main() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    println!("cargo:rustc-env=RUNNER_BUILD_ID={nanos}");
}
