//! The notes generator: `runner local --matrix` runs the benchmark matrix and writes it, with
//! its plots, into `notes/`; `runner local --floor` measures the engine against the
//! bare path; `runner local --rate-sweep` writes latency against throughput.

pub mod floor;
pub mod matrix;
pub mod rates;
