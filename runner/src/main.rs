//! The runner binaries (written in the next step).

fn main() {}
