//! Networking for the replicated engine: the one encoding module ([`codec`]), ids and the entry
//! format shared by disk and wire, frames, message types, and connection handling.

pub mod auth;
pub mod codec;
pub mod entry;
pub mod frame;
pub mod ids;
pub mod message;
pub mod tls;
