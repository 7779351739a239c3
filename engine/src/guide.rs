//! The handler author's guide: a first handler, the rules of determinism, testing with the
//! sandbox, the determinism check and the simulator, a node binary, benchmarking, and changing
//! the rules through handler versions. Its examples are doctests.
#![doc = include_str!("guide.md")]
