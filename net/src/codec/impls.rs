//! The format's rules for the standard types (the module above lists them), and for entries.

use super::{Decode, DecodeError, Encode, Reader, Writer};

macro_rules! integers {
    ($($ty:ty),*) => {$(
        impl Encode for $ty {
            #[inline]
            fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
                out.write(&self.to_le_bytes());
            }
        }

        impl<C> Decode<C> for $ty {
            const BYTES_MIN: usize = std::mem::size_of::<$ty>();

            #[inline]
            fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(<$ty>::from_le_bytes(reader.array()?))
            }
        }
    )*};
}

integers!(u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);

impl Encode for u8 {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        out.write(&[*self]);
    }

    #[inline]
    fn encode_slice<W: Writer + ?Sized>(items: &[u8], out: &mut W) {
        out.write(items);
    }
}

impl<C> Decode<C> for u8 {
    const BYTES_MIN: usize = 1;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(reader.array::<1>()?[0])
    }

    #[inline]
    fn decode_vec(reader: &mut Reader<'_>, count: usize) -> Result<Vec<u8>, DecodeError> {
        Ok(reader.take(count)?.to_vec())
    }

    #[inline]
    fn decode_array<const N: usize>(reader: &mut Reader<'_>) -> Result<[u8; N], DecodeError> {
        reader.array()
    }
}

impl Encode for usize {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        (*self as u64).encode(out);
    }
}

impl<C> Decode<C> for usize {
    const BYTES_MIN: usize = 8;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let value = u64::from_le_bytes(reader.array()?);
        usize::try_from(value).map_err(|_| DecodeError::LengthTooLarge { length: value })
    }
}

impl Encode for bool {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        out.write(&[u8::from(*self)]);
    }
}

impl<C> Decode<C> for bool {
    const BYTES_MIN: usize = 1;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match reader.array::<1>()?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::InvalidBool(other)),
        }
    }
}

impl Encode for char {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        u32::from(*self).encode(out);
    }
}

impl<C> Decode<C> for char {
    const BYTES_MIN: usize = 4;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let value = u32::from_le_bytes(reader.array()?);
        char::from_u32(value).ok_or(DecodeError::InvalidChar(value))
    }
}

impl Encode for () {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, _: &mut W) {}
}

impl<C> Decode<C> for () {
    #[inline]
    fn decode(_: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(())
    }
}

impl<T> Encode for std::marker::PhantomData<T> {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, _: &mut W) {}
}

impl<C, T> Decode<C> for std::marker::PhantomData<T> {
    #[inline]
    fn decode(_: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(std::marker::PhantomData)
    }
}

impl<T: Encode> Encode for [T] {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        (self.len() as u64).encode(out);
        T::encode_slice(self, out);
    }
}

impl<T: Encode> Encode for Vec<T> {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        self.as_slice().encode(out);
    }
}

impl<C, T: Decode<C>> Decode<C> for Vec<T> {
    const BYTES_MIN: usize = 8;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let length = reader.length(T::BYTES_MIN)?;
        T::decode_vec(reader, length)
    }
}

impl Encode for str {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        self.as_bytes().encode(out);
    }
}

impl Encode for String {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        self.as_str().encode(out);
    }
}

impl<C> Decode<C> for String {
    const BYTES_MIN: usize = 8;

    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bytes = <Vec<u8> as Decode<C>>::decode(reader)?;
        String::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8)
    }
}

impl Encode for bytes::Bytes {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        self.as_ref().encode(out);
    }
}

impl<C> Decode<C> for bytes::Bytes {
    const BYTES_MIN: usize = 8;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(<Vec<u8> as Decode<C>>::decode(reader)?.into())
    }
}

impl<T: Encode, const N: usize> Encode for [T; N] {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        T::encode_slice(self, out);
    }
}

impl<C, T: Decode<C>, const N: usize> Decode<C> for [T; N] {
    const BYTES_MIN: usize = T::BYTES_MIN * N;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        T::decode_array(reader)
    }
}

impl<T: Encode> Encode for Option<T> {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        match self {
            None => out.write(&[0]),
            Some(value) => {
                out.write(&[1]);
                value.encode(out);
            }
        }
    }
}

impl<C, T: Decode<C>> Decode<C> for Option<T> {
    const BYTES_MIN: usize = 1;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match reader.array::<1>()?[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode(reader)?)),
            other => Err(DecodeError::InvalidOption(other)),
        }
    }
}

impl<T: Encode + ?Sized> Encode for Box<T> {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        (**self).encode(out);
    }
}

impl<C, T: Decode<C>> Decode<C> for Box<T> {
    const BYTES_MIN: usize = T::BYTES_MIN;

    #[inline]
    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Box::new(T::decode(reader)?))
    }
}

impl<T: Encode + ?Sized> Encode for &T {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        (**self).encode(out);
    }
}

macro_rules! tuples {
    ($(($($name:ident),+)),*) => {$(
        impl<$($name: Encode),+> Encode for ($($name,)+) {
            #[inline]
            #[allow(non_snake_case)]
            fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
                let ($($name,)+) = self;
                $($name.encode(out);)+
            }
        }

        impl<C, $($name: Decode<C>),+> Decode<C> for ($($name,)+) {
            const BYTES_MIN: usize = 0 $(+ $name::BYTES_MIN)+;

            #[inline]
            fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(($($name::decode(reader)?,)+))
            }
        }
    )*};
}

tuples!(
    (T1),
    (T1, T2),
    (T1, T2, T3),
    (T1, T2, T3, T4),
    (T1, T2, T3, T4, T5)
);

/// Entries travel with their payload as length-prefixed bytes; the payload's length and crc are
/// checked against the header by [`crate::entry::Entry::check_payload`] before any use.
impl Encode for crate::entry::Entry {
    #[inline]
    fn encode<W: Writer + ?Sized>(&self, out: &mut W) {
        self.header.encode(out);
        self.payload.as_ref().encode(out);
    }
}

impl<C> Decode<C> for crate::entry::Entry {
    const BYTES_MIN: usize = 8;

    fn decode(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let header = <crate::entry::EntryHeader as Decode<C>>::decode(reader)?;
        let payload = <bytes::Bytes as Decode<C>>::decode(reader)?;
        Ok(crate::entry::Entry { header, payload })
    }
}
