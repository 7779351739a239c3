//! The engine's `Encode`/`Decode` derives write the project's format (the bytes bincode 2's
//! derive wrote, which the project used before, `notes/decisions/encoding.md`) for every
//! shape of type, decode them back, and refuse unknown variant indexes. Each expected byte
//! string is spelled out here: a change of format fails these tests.

use engine::codec::{self, CodecError, DecodeError};

// The types with the engine's derives, reached as a handler author reaches them.
mod ours {
    use engine::codec::{Decode, Encode};

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub struct Account {
        pub balance: u64,
        pub owner: String,
        pub flags: u32,
    }

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub struct Pair(pub u16, pub i64, pub Vec<u8>);

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub struct Marker;

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub enum Command {
        Audit,
        Deposit(u64, u32),
        Transfer { from: u64, to: u64, amount: u64 },
        Note(String),
    }

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub enum Either<L, R> {
        Left(L),
        Right { value: R, count: u8 },
        Neither,
    }

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub struct Page<T, const N: usize> {
        pub items: [T; N],
        pub next: Option<T>,
    }

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub struct Tagged<'a, T> {
        pub value: T,
        pub marker: std::marker::PhantomData<&'a ()>,
    }

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub enum Level {
        Low = 1,
        High = 7,
    }

    #[derive(Clone, Debug, PartialEq, Encode, Decode)]
    pub enum Never {}
}

/// Encodes `value`, asserts the bytes are `expected` and the encoded length is theirs, and that
/// they (and only they) decode back to `value`.
fn bytes_are<T>(value: &T, expected: &[u8]) -> Vec<u8>
where
    T: codec::Encode + codec::Decode<()> + PartialEq + std::fmt::Debug,
{
    let bytes = codec::encode_to_vec(value).unwrap();
    assert_eq!(bytes, expected, "{value:?}");
    assert_eq!(codec::encoded_len(value).unwrap(), bytes.len());
    assert_eq!(&codec::decode::<T>(&bytes).unwrap(), value);
    bytes
}

/// Concatenates byte strings.
fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Proves a struct with named fields encodes its fields in order: a u64, a string (a u64 length
/// and its bytes), a u32.
#[test]
fn named_struct_bytes() {
    let account = ours::Account {
        balance: 7,
        owner: "ann".into(),
        flags: 3,
    };
    let expected = cat(&[
        &7u64.to_le_bytes(),
        &3u64.to_le_bytes(),
        b"ann",
        &3u32.to_le_bytes(),
    ]);
    bytes_are(&account, &expected);
}

/// Proves tuple and unit structs encode their fields in order (a unit struct is no bytes).
#[test]
fn tuple_and_unit_struct_bytes() {
    let expected = cat(&[
        &9u16.to_le_bytes(),
        &(-1i64).to_le_bytes(),
        &3u64.to_le_bytes(),
        &[1, 2, 3],
    ]);
    bytes_are(&ours::Pair(9, -1, vec![1, 2, 3]), &expected);
    assert!(bytes_are(&ours::Marker, &[]).is_empty());
}

/// Proves every kind of variant writes its index (a u32, its position) then its fields.
#[test]
fn enum_bytes() {
    bytes_are(&ours::Command::Audit, &0u32.to_le_bytes());
    let deposit = cat(&[
        &1u32.to_le_bytes(),
        &5u64.to_le_bytes(),
        &6u32.to_le_bytes(),
    ]);
    bytes_are(&ours::Command::Deposit(5, 6), &deposit);
    let transfer = cat(&[
        &2u32.to_le_bytes(),
        &1u64.to_le_bytes(),
        &2u64.to_le_bytes(),
        &3u64.to_le_bytes(),
    ]);
    let value = ours::Command::Transfer {
        from: 1,
        to: 2,
        amount: 3,
    };
    bytes_are(&value, &transfer);
    let note = cat(&[&3u32.to_le_bytes(), &3u64.to_le_bytes(), "hé".as_bytes()]);
    bytes_are(&ours::Command::Note("hé".into()), &note);
}

/// Proves generic types (type and const parameters, lifetimes) encode as their fields do: an
/// array without a length, an option as a byte 0 or 1 then the value, phantom data as nothing.
#[test]
fn generic_bytes() {
    bytes_are(
        &ours::Either::<u8, String>::Left(4),
        &cat(&[&0u32.to_le_bytes(), &[4]]),
    );
    let right = ours::Either::<u8, String>::Right {
        value: "r".into(),
        count: 2,
    };
    bytes_are(
        &right,
        &cat(&[&1u32.to_le_bytes(), &1u64.to_le_bytes(), b"r", &[2]]),
    );
    bytes_are(&ours::Either::<u8, String>::Neither, &2u32.to_le_bytes());
    let page = ours::Page {
        items: [1u32, 2],
        next: Some(3),
    };
    let expected = cat(&[
        &1u32.to_le_bytes(),
        &2u32.to_le_bytes(),
        &[1],
        &3u32.to_le_bytes(),
    ]);
    bytes_are(&page, &expected);
    let none = ours::Page::<u32, 1> {
        items: [5],
        next: None,
    };
    bytes_are(&none, &cat(&[&5u32.to_le_bytes(), &[0]]));
    let tagged = ours::Tagged {
        value: 11u64,
        marker: std::marker::PhantomData,
    };
    bytes_are(&tagged, &11u64.to_le_bytes());
}

/// Proves an unknown variant index is an `UnexpectedVariant` error naming the type, the index
/// and the last index.
#[test]
fn unknown_variant_index_is_an_error() {
    let bytes = 4u32.to_le_bytes();
    match codec::decode::<ours::Command>(&bytes) {
        Err(CodecError::Decode(DecodeError::UnexpectedVariant {
            type_name,
            found,
            max,
        })) => assert_eq!((type_name, found, max), ("Command", 4, 3)),
        other => panic!("expected UnexpectedVariant, got {other:?}"),
    }
    assert!(codec::decode::<ours::Either<u8, u8>>(&3u32.to_le_bytes()).is_err());
}

/// Proves explicit discriminants change nothing in the bytes (the index is the position).
#[test]
fn discriminants_are_positions() {
    bytes_are(&ours::Level::High, &1u32.to_le_bytes());
    let error = codec::decode::<ours::Level>(&7u32.to_le_bytes()).unwrap_err();
    assert!(
        error.to_string().contains("7 is not a tag of Level"),
        "{error}"
    );
}

/// Proves an enum without variants decodes to the `EmptyEnum` error.
#[test]
fn empty_enum_is_an_error() {
    let error = codec::decode::<ours::Never>(&0u32.to_le_bytes()).unwrap_err();
    assert!(
        matches!(
            error,
            CodecError::Decode(DecodeError::EmptyEnum { type_name: "Never" })
        ),
        "{error}"
    );
}

mod paths {
    // The codec reached by another path.
    use engine::codec as renamed;
    use engine::codec::{Decode, Encode};

    #[derive(Debug, PartialEq, Encode, Decode)]
    #[codec(crate = "renamed")]
    pub struct Elsewhere(pub u32);
}

/// Proves `#[codec(crate = "path")]` compiles and encodes the bytes of the default path.
#[test]
fn codec_path_elsewhere() {
    bytes_are(&paths::Elsewhere(3), &3u32.to_le_bytes());
}
