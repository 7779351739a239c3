//! The one encoding module: every byte the project replicates, hashes, sends or writes to disk is
//! produced and read here.
//!
//! The encoding is bincode 2 with fixed-width little-endian integers (fixed width decodes several
//! times faster than varints, and gives every record a size known in advance). Keeping all of
//! bincode behind this module means a future swap touches one file plus the derives: `net`'s types
//! derive [`Encode`] and [`Decode`] through this module's re-export, with
//! `#[bincode(crate = "net::codec::bincode")]`; handler types derive the engine's own derives
//! (`engine-derive`, through `engine::codec`), which name no codec crate.

use bincode::config::{self, Configuration, Fixint, Limit, LittleEndian};
use bincode::enc::write::{SizeWriter, Writer};
use bincode::error::{DecodeError, EncodeError};

pub use bincode;
pub use bincode::{Decode, Encode};

/// Largest value this module will decode, in bytes: a guard against length fields that claim
/// more than any frame or record can hold.
pub const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

type Config = Configuration<LittleEndian, Fixint, Limit<DECODE_BYTES_MAX>>;

const CONFIG: Config = config::standard()
    .with_little_endian()
    .with_fixed_int_encoding()
    .with_limit::<DECODE_BYTES_MAX>();

/// An encoding or decoding failure.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// A value could not be encoded.
    #[error("encode failed: {0}")]
    Encode(#[from] EncodeError),
    /// Bytes did not decode as the expected type.
    #[error("decode failed: {0}")]
    Decode(#[from] DecodeError),
    /// A value decoded but left bytes over where the whole input was meant to be one value.
    #[error("{trailing} trailing bytes after a decoded value")]
    Trailing {
        /// Bytes left over.
        trailing: usize,
    },
}

/// Appends the bytes of `value` to `out`, reusing its allocation.
pub fn encode_into<T: Encode + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    bincode::encode_into_writer(value, VecWriter(out), CONFIG)?;
    Ok(())
}

/// Encodes `value` into a new vector.
pub fn encode_to_vec<T: Encode + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(encoded_len(value)?);
    encode_into(value, &mut out)?;
    Ok(out)
}

/// The number of bytes `value` encodes to, without encoding it anywhere.
pub fn encoded_len<T: Encode + ?Sized>(value: &T) -> Result<usize, CodecError> {
    let mut size = SizeWriter::default();
    bincode::encode_into_writer(value, &mut size, CONFIG)?;
    Ok(size.bytes_written)
}

/// Decodes one value from the front of `bytes`; returns it with the number of bytes it used.
pub fn decode_prefix<T: Decode<()>>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    Ok(bincode::decode_from_slice(bytes, CONFIG)?)
}

/// Decodes `bytes` as exactly one value: trailing bytes are an error.
pub fn decode<T: Decode<()>>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, used) = decode_prefix(bytes)?;
    match bytes.len() - used {
        0 => Ok(value),
        trailing => Err(CodecError::Trailing { trailing }),
    }
}

/// Entries travel with their payload as length-prefixed bytes; the payload's length and crc are
/// checked against the header by [`crate::entry::Entry::check_payload`] before any use.
impl Encode for crate::entry::Entry {
    fn encode<E: bincode::enc::Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        self.header.encode(encoder)?;
        self.payload.as_ref().encode(encoder)
    }
}

impl<Context> Decode<Context> for crate::entry::Entry {
    fn decode<D: bincode::de::Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, DecodeError> {
        let header = crate::entry::EntryHeader::decode(decoder)?;
        let payload = Vec::<u8>::decode(decoder)?;
        Ok(crate::entry::Entry {
            header,
            payload: payload.into(),
        })
    }
}

bincode::impl_borrow_decode!(crate::entry::Entry);

/// Appends `value` to a `BytesMut` (a frame being built) without an intermediate buffer.
pub fn encode_into_bytes<T: Encode + ?Sized>(
    value: &T,
    out: &mut bytes::BytesMut,
) -> Result<(), CodecError> {
    bincode::encode_into_writer(value, BytesWriter(out), CONFIG)?;
    Ok(())
}

struct BytesWriter<'a>(&'a mut bytes::BytesMut);

impl Writer for BytesWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// A bincode writer that appends to a borrowed vector.
struct VecWriter<'a>(&'a mut Vec<u8>);

impl Writer for VecWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Encode, Decode)]
    #[bincode(crate = "crate::codec::bincode")]
    enum Sample {
        Unit,
        Pair { a: u64, b: u32 },
        Text(String),
    }

    /// Proves values round-trip, sizes are known in advance and integers are fixed-width.
    #[test]
    fn round_trip_and_fixed_width() {
        for value in [
            Sample::Unit,
            Sample::Pair { a: 7, b: 9 },
            Sample::Text("hé".into()),
        ] {
            let bytes = encode_to_vec(&value).unwrap();
            assert_eq!(bytes.len(), encoded_len(&value).unwrap());
            assert_eq!(decode::<Sample>(&bytes).unwrap(), value);
        }
        // Tag (u32) + u64 + u32, little-endian, whatever the values.
        let small = encode_to_vec(&Sample::Pair { a: 1, b: 1 }).unwrap();
        assert_eq!(small.len(), 4 + 8 + 4);
        assert_eq!(&small[..4], &1u32.to_le_bytes());
    }

    /// Proves trailing bytes, truncation, unknown tags and huge length claims are errors.
    #[test]
    fn rejects_bad_input() {
        let mut bytes = encode_to_vec(&Sample::Pair { a: 1, b: 2 }).unwrap();
        bytes.push(0);
        assert!(matches!(
            decode::<Sample>(&bytes),
            Err(CodecError::Trailing { trailing: 1 })
        ));
        assert!(decode::<Sample>(&bytes[..5]).is_err());
        assert!(decode::<Sample>(&9u32.to_le_bytes()).is_err());
        // A string claiming u64::MAX bytes must fail on the limit, not try to allocate.
        let mut huge = 2u32.to_le_bytes().to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode::<Sample>(&huge).is_err());
    }
}
