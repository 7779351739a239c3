//! The one encoding module, as handler types see it: everything in [`net::codec`] (the
//! [`Encode`] and [`Decode`] traits *and* the project's own derives of them, the encode and
//! decode functions, [`CodecError`], the limits).
//!
//! ```
//! use engine::codec::{Decode, Encode};
//!
//! #[derive(Debug, PartialEq, Encode, Decode)]
//! struct Account {
//!     balance: u64,
//! }
//!
//! let bytes = engine::codec::encode_to_vec(&Account { balance: 7 }).unwrap();
//! assert_eq!(engine::codec::decode::<Account>(&bytes).unwrap(), Account { balance: 7 });
//! ```
//!
//! A handler type names no codec crate, so a change of the format touches `net::codec` and
//! `engine-derive`, not the handlers (the engine's internal types derive the same, with
//! `#[codec(crate = "crate::codec")]`). The format is the project's own, specified in
//! `notes/decisions/encoding.md`.

pub use net::codec::*;
