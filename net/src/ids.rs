//! Newtypes for the different numbers of the engine: an index is not a term, a client id is not
//! a request number.

use crate::codec::{Decode, Encode};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
        #[codec(crate = "crate::codec")]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// The position of an entry in the replicated log; the first entry has index 1.
    EntryIndex(u64)
);
id_type!(
    /// A leader's term: at most one leader is elected per term.
    Term(u64)
);
id_type!(
    /// One node of the cluster.
    NodeId(u8)
);
id_type!(
    /// A client: 128 bits drawn at random ([`ClientId::random`]), registered through the log
    /// or not (exactly-once sessions are keyed by it).
    ClientId(u128)
);
id_type!(
    /// A client's request number, increasing by one per request.
    RequestNumber(u64)
);

impl ClientId {
    /// A client id drawn from the operating system's random source: two clients that draw
    /// theirs independently collide with a chance of about 2^-128 per pair.
    pub fn random() -> std::io::Result<ClientId> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        Ok(ClientId(u128::from_le_bytes(bytes)))
    }
}

impl EntryIndex {
    /// The index before the first entry (an empty log).
    pub const ZERO: EntryIndex = EntryIndex(0);

    /// The next index.
    pub fn next(self) -> EntryIndex {
        EntryIndex(self.0.saturating_add(1))
    }

    /// The previous index; the index before the first entry stays at zero.
    pub fn prev(self) -> EntryIndex {
        EntryIndex(self.0.saturating_sub(1))
    }
}

/// A 32-byte state hash (blake3): equal on replicas that applied the same writes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct StateHash(pub [u8; 32]);

impl fmt::Debug for StateHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StateHash({self})")
    }
}

impl fmt::Display for StateHash {
    /// The first 8 bytes in hex: enough to tell hashes apart in a table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl StateHash {
    /// All 32 bytes in hex.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}
