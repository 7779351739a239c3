//! A limit order book, a handler whose commands cost several times a Bank transfer: the
//! handler ([`book`]) and its workloads for the simulator and the benchmark ([`workload`]).
//! The binary (`src/main.rs`) is a node binary of the engine's command line with both; the
//! tests (`tests/book/`) hold it to a reference book that shares no code with it.

pub mod book;
pub mod workload;
