//! The product commands: the main job (`local`), the Bank's typed client, the benchmark
//! against a running cluster, the single-node ceiling, and their reports.

pub mod bench;
pub mod commands;
pub mod report;
pub mod single;
pub mod tls;
