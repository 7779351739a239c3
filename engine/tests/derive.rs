//! The engine's `Encode`/`Decode` derives write exactly the bytes of bincode 2's own derive, for
//! every shape of type, decode them back, and refuse unknown variant indexes as bincode does.

use engine::codec::bincode::error::{AllowedEnumVariants, DecodeError};
use engine::codec::{self, CodecError};

// The same types twice (spelled out: bincode's derive does not accept fields that come through a
// `macro_rules!`): `ours` with the engine's derives, reached as a handler author reaches them, with
// no bincode in scope; `theirs` with bincode's own.
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

mod theirs {
    use engine::codec::bincode;

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub struct Account {
        pub balance: u64,
        pub owner: String,
        pub flags: u32,
    }

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub struct Pair(pub u16, pub i64, pub Vec<u8>);

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub struct Marker;

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub enum Command {
        Audit,
        Deposit(u64, u32),
        Transfer { from: u64, to: u64, amount: u64 },
        Note(String),
    }

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub enum Either<L, R> {
        Left(L),
        Right { value: R, count: u8 },
        Neither,
    }

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub struct Page<T, const N: usize> {
        pub items: [T; N],
        pub next: Option<T>,
    }

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub struct Tagged<'a, T> {
        pub value: T,
        pub marker: std::marker::PhantomData<&'a ()>,
    }

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub enum Level {
        Low = 1,
        High = 7,
    }

    #[derive(Clone, Debug, PartialEq, bincode::Encode, bincode::Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub enum Never {}
}

/// Encodes `ours` and `theirs` through `engine::codec`, asserts the bytes are equal, and that each
/// side decodes them (and only them) back.
fn same_bytes<O, T>(ours: &O, theirs: &T) -> Vec<u8>
where
    O: codec::Encode + codec::Decode<()> + PartialEq + std::fmt::Debug,
    T: codec::Encode + codec::Decode<()> + PartialEq + std::fmt::Debug,
{
    let bytes = codec::encode_to_vec(ours).unwrap();
    assert_eq!(bytes, codec::encode_to_vec(theirs).unwrap(), "{ours:?}");
    assert_eq!(codec::encoded_len(ours).unwrap(), bytes.len());
    assert_eq!(&codec::decode::<O>(&bytes).unwrap(), ours);
    assert_eq!(&codec::decode::<T>(&bytes).unwrap(), theirs);
    bytes
}

/// The error each side returns for `bytes`, as text (bincode's error has no `PartialEq`).
fn same_error<O: codec::Decode<()>, T: codec::Decode<()>>(bytes: &[u8]) -> String {
    let ours = codec::decode::<O>(bytes).err().expect("ours refuses");
    let theirs = codec::decode::<T>(bytes).err().expect("theirs refuses");
    // A full type name (an empty enum's error has one) differs in the module only.
    let ours = format!("{ours:?}").replace("::ours::", "::theirs::");
    assert_eq!(ours, format!("{theirs:?}"));
    ours
}

/// Proves a struct with named fields encodes its fields in order, as bincode's derive does.
#[test]
fn named_struct_bytes_are_bincodes() {
    let bytes = same_bytes(
        &ours::Account {
            balance: 7,
            owner: "ann".into(),
            flags: 3,
        },
        &theirs::Account {
            balance: 7,
            owner: "ann".into(),
            flags: 3,
        },
    );
    let mut expected = 7u64.to_le_bytes().to_vec();
    expected.extend_from_slice(&3u64.to_le_bytes());
    expected.extend_from_slice(b"ann");
    expected.extend_from_slice(&3u32.to_le_bytes());
    assert_eq!(bytes, expected);
}

/// Proves tuple and unit structs encode as bincode's derive does (a unit struct is no bytes).
#[test]
fn tuple_and_unit_struct_bytes_are_bincodes() {
    same_bytes(
        &ours::Pair(9, -1, vec![1, 2, 3]),
        &theirs::Pair(9, -1, vec![1, 2, 3]),
    );
    assert!(same_bytes(&ours::Marker, &theirs::Marker).is_empty());
}

/// Proves every kind of variant writes its index (a u32, its position) then its fields.
#[test]
fn enum_bytes_are_bincodes() {
    let pairs = [
        (ours::Command::Audit, theirs::Command::Audit),
        (ours::Command::Deposit(5, 6), theirs::Command::Deposit(5, 6)),
        (
            ours::Command::Transfer {
                from: 1,
                to: 2,
                amount: 3,
            },
            theirs::Command::Transfer {
                from: 1,
                to: 2,
                amount: 3,
            },
        ),
        (
            ours::Command::Note("hé".into()),
            theirs::Command::Note("hé".into()),
        ),
    ];
    for (index, (ours, theirs)) in pairs.iter().enumerate() {
        let bytes = same_bytes(ours, theirs);
        assert_eq!(bytes[..4], (index as u32).to_le_bytes());
    }
}

/// Proves generic types (type and const parameters, lifetimes) encode as bincode's derive does.
#[test]
fn generic_bytes_are_bincodes() {
    let pairs: [(ours::Either<u8, String>, theirs::Either<u8, String>); 3] = [
        (ours::Either::Left(4), theirs::Either::Left(4)),
        (
            ours::Either::Right {
                value: "r".into(),
                count: 2,
            },
            theirs::Either::Right {
                value: "r".into(),
                count: 2,
            },
        ),
        (ours::Either::Neither, theirs::Either::Neither),
    ];
    for (ours, theirs) in &pairs {
        same_bytes(ours, theirs);
    }
    same_bytes(
        &ours::Page {
            items: [1u32, 2],
            next: Some(3),
        },
        &theirs::Page {
            items: [1u32, 2],
            next: Some(3),
        },
    );
    let marker = std::marker::PhantomData;
    same_bytes(
        &ours::Tagged {
            value: 11u64,
            marker,
        },
        &theirs::Tagged {
            value: 11u64,
            marker,
        },
    );
}

/// Proves `BorrowDecode` reads the same bytes as `Decode`.
#[test]
fn borrow_decode_reads_the_same_bytes() {
    let config = codec::bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding();
    let value = ours::Command::Transfer {
        from: 1,
        to: 2,
        amount: 3,
    };
    let bytes = codec::encode_to_vec(&value).unwrap();
    let (borrowed, used): (ours::Command, usize) =
        codec::bincode::borrow_decode_from_slice(&bytes, config).unwrap();
    assert_eq!((borrowed, used), (value, bytes.len()));
    let tagged = ours::Tagged {
        value: 5u16,
        marker: std::marker::PhantomData,
    };
    let bytes = codec::encode_to_vec(&tagged).unwrap();
    let (borrowed, _): (ours::Tagged<'_, u16>, usize) =
        codec::bincode::borrow_decode_from_slice(&bytes, config).unwrap();
    assert_eq!(borrowed, tagged);
}

/// Proves an unknown variant index is bincode's `UnexpectedVariant` error, naming the allowed
/// range and the type.
#[test]
fn unknown_variant_index_is_an_error() {
    let bytes = 4u32.to_le_bytes();
    same_error::<ours::Command, theirs::Command>(&bytes);
    match codec::decode::<ours::Command>(&bytes) {
        Err(CodecError::Decode(DecodeError::UnexpectedVariant {
            type_name,
            allowed,
            found,
        })) => {
            assert_eq!((type_name, found), ("Command", 4));
            assert_eq!(allowed, &AllowedEnumVariants::Range { min: 0, max: 3 });
        }
        other => panic!("expected UnexpectedVariant, got {other:?}"),
    }
    same_error::<ours::Either<u8, u8>, theirs::Either<u8, u8>>(&bytes);
}

/// Proves explicit discriminants change nothing in the bytes (the index is the position), and
/// the error lists the allowed indexes, as bincode's derive does.
#[test]
fn discriminants_are_positions() {
    let bytes = same_bytes(&ours::Level::High, &theirs::Level::High);
    assert_eq!(bytes, 1u32.to_le_bytes());
    let error = same_error::<ours::Level, theirs::Level>(&7u32.to_le_bytes());
    assert!(error.contains("Allowed([0, 1])"), "{error}");
}

/// Proves an enum without variants decodes to bincode's `EmptyEnum` error.
#[test]
fn empty_enum_is_an_error() {
    let error = same_error::<ours::Never, theirs::Never>(&0u32.to_le_bytes());
    assert!(error.contains("EmptyEnum"), "{error}");
}

mod paths {
    // The codec reached by another path, and bincode's attribute left from bincode's derive.
    use engine::codec as renamed;
    use engine::codec::{Decode, Encode};

    #[derive(Debug, PartialEq, Encode, Decode)]
    #[codec(crate = "renamed::bincode")]
    pub struct Elsewhere(pub u32);

    #[derive(Debug, PartialEq, Encode, Decode)]
    #[bincode(crate = "engine::codec::bincode")]
    pub struct Unchanged(pub u32);
}

/// Proves `#[codec(crate = "path")]` and a leftover `#[bincode(crate = ...)]` compile and encode
/// the same bytes.
#[test]
fn codec_path_and_bincode_attribute() {
    same_bytes(&paths::Elsewhere(3), &paths::Unchanged(3));
}
