//! Networking for the replicated engine: the one encoding module ([`codec`]), and (as the
//! three-node work lands) framing, message types and connection handling.

pub mod codec;
