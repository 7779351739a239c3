//! Bytes decoded as each message type a connection carries: whatever decodes must encode to
//! the size `encoded_len` says and decode back to an equal value.
//!
//! Mode byte, modulo 3: which type (ClientRequest, PeerMessage, ClientReply).

#![no_main]

use engine_fuzz::mode;
use libfuzzer_sys::fuzz_target;
use net::codec::{self, Decode, Encode};
use net::message::{ClientReply, ClientRequest, PeerMessage};
use std::fmt::Debug;

fuzz_target!(|input: &[u8]| {
    let Some((mode, data)) = mode(input) else {
        return;
    };
    match mode % 3 {
        0 => round_trip::<ClientRequest>(data),
        1 => round_trip::<PeerMessage>(data),
        _ => round_trip::<ClientReply>(data),
    }
});

fn round_trip<T: Encode + Decode<()> + PartialEq + Debug>(data: &[u8]) {
    let Ok(value) = codec::decode::<T>(data) else {
        return;
    };
    let bytes = codec::encode_to_vec(&value).expect("a decoded value encodes");
    assert_eq!(bytes.len(), codec::encoded_len(&value).unwrap());
    let back: T = codec::decode(&bytes).expect("an encoded value decodes");
    assert_eq!(back, value);
}
