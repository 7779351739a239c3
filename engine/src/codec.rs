//! The one encoding module, as handler types see it: everything in [`net::codec`] (the encode and
//! decode functions, [`CodecError`], the limits), with [`Encode`] and [`Decode`] naming the traits
//! *and* the engine's own derives (`engine-derive`), not bincode's.
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
//! A handler type names neither bincode nor a `#[bincode(...)]` attribute, so replacing the codec
//! touches `net::codec` and `engine-derive`, not the handlers. The derives write bincode 2's bytes
//! (the engine's internal types use them too, with `#[codec(crate = "crate::codec::bincode")]`).

// Everything else `net::codec` has; the names below shadow the glob's `Encode` and `Decode`
// (which are bincode's traits and bincode's derives).
pub use net::codec::*;

pub use engine_derive::{Decode, Encode};
/// The trait only (not bincode's derive, which has the same name at bincode's root).
pub use net::codec::bincode::de::Decode;
/// The trait only (not bincode's derive, which has the same name at bincode's root).
pub use net::codec::bincode::enc::Encode;
