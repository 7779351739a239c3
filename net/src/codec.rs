//! The one encoding module: every byte the project replicates, hashes, sends or writes to disk is
//! produced and read here, by a format of the project's own (`notes/decisions/encoding.md`
//! specifies it; golden files and byte tests pin it).
//!
//! The format is the one bincode 2 wrote with fixed-width little-endian integers, which the
//! project used before this module, kept byte for byte:
//!
//! - integers little-endian at their full width (`usize` as a `u64`, `u128` as 16 bytes),
//!   `bool` one byte 0 or 1, `f32`/`f64` their IEEE bits;
//! - a struct or tuple its fields in order, an array its elements, no length;
//! - a sequence (`Vec`, a slice, `String`) its length as a `u64`, then its elements;
//! - an `Option` a byte 0 (none) or 1 then the value;
//! - an enum its variant's tag as a `u32`, then the variant's fields; the tag is the variant's
//!   position unless the variants carry `#[codec(tag = N)]` (all of an enum's or none), which
//!   keeps a variant's number when others are added, removed or reordered.
//!
//! Types derive [`Encode`] and [`Decode`] with the project's own derives (`engine-derive`);
//! `net`'s types with `#[codec(crate = "crate::codec")]`. The `Encode` derive also writes
//! [`Describe`]: the JSON serde's derives make of the type, for the gateway's schema.

pub use describe::{Definition, Definitions, Describe, JsonShape, Object, Property, Variant};
pub use engine_derive::{Decode, Encode};

/// Largest length a decoded sequence may claim, in bytes or elements: a guard against length
/// fields that claim more than any frame or record can hold.
pub const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Where encoded bytes go.
pub trait Writer {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]);
}

impl Writer for Vec<u8> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Writer for bytes::BytesMut {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Counts the bytes written, keeping none.
#[derive(Default)]
struct SizeWriter(usize);

impl Writer for SizeWriter {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// The bytes being decoded, consumed from the front.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// The next `count` bytes.
    #[inline]
    pub fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        if count > self.bytes.len() {
            return Err(DecodeError::UnexpectedEnd {
                needed: count,
                left: self.bytes.len(),
            });
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(taken)
    }

    /// The next `N` bytes, as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let taken = self.take(N)?;
        Ok(taken.try_into().expect("took N bytes"))
    }

    /// A sequence's length: at most [`DECODE_BYTES_MAX`], and at most what is left when each
    /// element takes at least `element_bytes_min` bytes.
    #[inline]
    pub fn length(&mut self, element_bytes_min: usize) -> Result<usize, DecodeError> {
        let length = u64::from_le_bytes(self.array()?);
        let fits = usize::try_from(length)
            .ok()
            .filter(|&l| l <= DECODE_BYTES_MAX);
        let Some(length) = fits else {
            return Err(DecodeError::LengthTooLarge { length });
        };
        let needed = length.saturating_mul(element_bytes_min);
        if needed > self.bytes.len() {
            return Err(DecodeError::UnexpectedEnd {
                needed,
                left: self.bytes.len(),
            });
        }
        Ok(length)
    }
}

/// Encodes a value in the project's format.
pub trait Encode {
    /// Appends the value's bytes to `out`.
    fn encode<W: Writer + ?Sized>(&self, out: &mut W);

    /// Appends the bytes of every item of `items`, in order (a type whose bytes are its memory,
    /// `u8`, writes them at once).
    #[inline]
    fn encode_slice<W: Writer + ?Sized>(items: &[Self], out: &mut W)
    where
        Self: Sized,
    {
        for item in items {
            item.encode(out);
        }
    }
}

/// Decodes a value of the project's format. `Context` is unused (every impl is for any); it
/// keeps bounds written `Decode<()>` valid.
pub trait Decode<Context = ()>: Sized {
    /// Reads one value from the front of `reader`.
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// Reads `count` values (a type whose bytes are its memory, `u8`, copies them at once).
    #[inline]
    fn decode_vec(reader: &mut Reader<'_>, count: usize) -> Result<Vec<Self>, DecodeError> {
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(Self::decode(reader)?);
        }
        Ok(items)
    }

    /// Reads `N` values into an array (a type whose bytes are its memory, `u8`, copies them
    /// at once).
    #[inline]
    fn decode_array<const N: usize>(reader: &mut Reader<'_>) -> Result<[Self; N], DecodeError> {
        let items = Self::decode_vec(reader, N)?;
        Ok(items
            .try_into()
            .unwrap_or_else(|_| unreachable!("decoded N items")))
    }

    /// The fewest bytes one value takes (so that a sequence's claimed length is checked
    /// against what is left before anything is allocated).
    const BYTES_MIN: usize = 0;
}

/// Why bytes did not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before the value does.
    #[error("the bytes end early: {needed} more needed, {left} left")]
    UnexpectedEnd {
        /// Bytes the value needs next.
        needed: usize,
        /// Bytes left.
        left: usize,
    },
    /// An enum's tag names none of its variants. Explicit tags may leave gaps, so `max` bounds
    /// the tags without saying that every smaller one is taken.
    #[error("{found} is not a tag of {type_name} (its largest tag is {max})")]
    UnexpectedVariant {
        /// The enum.
        type_name: &'static str,
        /// The tag read.
        found: u32,
        /// The enum's largest tag.
        max: u32,
    },
    /// An enum without variants cannot be decoded.
    #[error("{type_name} has no variant")]
    EmptyEnum {
        /// The enum.
        type_name: &'static str,
    },
    /// A `bool` byte other than 0 and 1.
    #[error("{0} is not a bool")]
    InvalidBool(u8),
    /// An `Option` tag other than 0 and 1.
    #[error("{0} is not an option's tag")]
    InvalidOption(u8),
    /// A `String` whose bytes are not UTF-8.
    #[error("a string is not UTF-8")]
    InvalidUtf8,
    /// A `char` that is no Unicode scalar value.
    #[error("{0:#x} is not a char")]
    InvalidChar(u32),
    /// A length over [`DECODE_BYTES_MAX`].
    #[error("a length of {length} is over the limit of {DECODE_BYTES_MAX}")]
    LengthTooLarge {
        /// The length claimed.
        length: u64,
    },
}

/// Kept for the functions' signatures: encoding into memory cannot fail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("encoding failed")]
pub enum EncodeError {}

/// An encoding or decoding failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
#[inline]
pub fn encode_into<T: Encode + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    value.encode(out);
    Ok(())
}

/// Encodes `value` into a new vector.
pub fn encode_to_vec<T: Encode + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(encoded_len(value)?);
    value.encode(&mut out);
    Ok(out)
}

/// The number of bytes `value` encodes to, without encoding it anywhere.
pub fn encoded_len<T: Encode + ?Sized>(value: &T) -> Result<usize, CodecError> {
    let mut size = SizeWriter::default();
    value.encode(&mut size);
    Ok(size.0)
}

/// Decodes one value from the front of `bytes`; returns it with the number of bytes it used.
#[inline]
pub fn decode_prefix<T: Decode<()>>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    let mut reader = Reader::new(bytes);
    let value = <T as Decode<()>>::decode(&mut reader)?;
    Ok((value, bytes.len() - reader.remaining()))
}

/// Decodes `bytes` as exactly one value: trailing bytes are an error.
pub fn decode<T: Decode<()>>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, used) = decode_prefix(bytes)?;
    match bytes.len() - used {
        0 => Ok(value),
        trailing => Err(CodecError::Trailing { trailing }),
    }
}

/// Appends `value` to a `BytesMut` (a frame being built) without an intermediate buffer.
pub fn encode_into_bytes<T: Encode + ?Sized>(
    value: &T,
    out: &mut bytes::BytesMut,
) -> Result<(), CodecError> {
    value.encode(out);
    Ok(())
}

mod describe;
mod impls;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Encode, Decode)]
    #[codec(crate = "crate::codec")]
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
        assert!(matches!(
            decode::<Sample>(&9u32.to_le_bytes()),
            Err(CodecError::Decode(DecodeError::UnexpectedVariant {
                found: 9,
                max: 2,
                ..
            }))
        ));
        // A string claiming u64::MAX bytes must fail on the limit, not try to allocate.
        let mut huge = 2u32.to_le_bytes().to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode::<Sample>(&huge).is_err());
        // A vector of u64s claiming more than the bytes hold fails before allocating.
        let mut claim = 1_000_000u64.to_le_bytes().to_vec();
        claim.extend_from_slice(&[0; 16]);
        assert!(matches!(
            decode::<Vec<u64>>(&claim),
            Err(CodecError::Decode(DecodeError::UnexpectedEnd { .. }))
        ));
    }
}
