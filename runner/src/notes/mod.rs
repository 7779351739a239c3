//! The notes generator: `runner local --matrix` runs the benchmark matrix and writes it, with
//! its plots, into `notes/`.

pub mod matrix;
