//! A handler of the kinds of JSON the gateway and `client` read and write (nested structs,
//! newtype variants, 64- and 128-bit integers, options, sequences), and the tests of how
//! they read a body: a field the command's type does not have, or an integer out of its
//! field's range, refuses the whole body with the field's path.

use super::answer::Failure;
use super::parse_commands;
use crate::codec::{Decode, Encode};
use crate::handler::Handler;
use crate::state::{Schema, StateError, Tx};

/// A handler no test runs: its types are what matter.
pub(crate) struct Shop;

/// A command of every shape a handler's command takes.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize, serde::Deserialize)]
#[codec(crate = "crate::codec")]
pub(crate) enum Order {
    /// A struct variant of integers.
    Pay {
        /// Debited.
        from: u64,
        /// Credited.
        to: u64,
        /// Moved.
        amount: u64,
    },
    /// A newtype variant of a struct.
    Ship(Parcel),
    /// A struct variant holding a struct.
    Weigh {
        /// What is weighed.
        parcel: Parcel,
        /// Its weight.
        grams: u32,
    },
    /// A 128-bit integer in a command.
    Settle {
        /// Owed.
        cents: u128,
        /// Its sign's side.
        offset: i64,
    },
    /// A struct with a 128-bit integer, in commands and outputs alike.
    Lend(Money),
    /// A unit variant.
    Count,
}

/// A struct with a 128-bit integer, read in commands and written in outputs.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize, serde::Deserialize)]
#[codec(crate = "crate::codec")]
pub(crate) struct Money {
    /// How much.
    pub cents: u128,
}

/// A struct inside commands and outputs.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize, serde::Deserialize)]
#[codec(crate = "crate::codec")]
pub(crate) struct Parcel {
    /// Its id.
    pub id: u64,
    /// Its label, if any.
    pub label: Option<String>,
}

/// An output of every shape an output takes, 128-bit integers at every depth.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize)]
#[codec(crate = "crate::codec")]
pub(crate) enum Receipt {
    /// Integers of both widths and signs.
    Paid {
        /// Left.
        balance: u64,
        /// A sum past 64 bits.
        total: u128,
        /// A signed sum past 64 bits.
        net: i128,
    },
    /// A struct.
    Shipped(Parcel),
    /// A sequence of 128-bit integers.
    Sums(Vec<u128>),
    /// An optional 128-bit integer.
    Maybe(Option<u128>),
    /// A tuple.
    Pair(u128, i64),
    /// A struct that commands hold too.
    Lent(Money),
}

/// An error holding a 128-bit integer.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize)]
#[codec(crate = "crate::codec")]
pub(crate) enum Refusal {
    /// Not enough.
    Short {
        /// What was needed.
        needed: u128,
    },
    /// No state left.
    Full,
}

impl From<StateError> for Refusal {
    fn from(_: StateError) -> Self {
        Refusal::Full
    }
}

impl Handler for Shop {
    type Command = Order;
    type Output = Receipt;
    type Error = Refusal;

    fn schema(&self) -> Schema {
        Schema::new()
    }

    fn execute(&self, _: &mut Tx<'_>, _: &Order) -> Result<Receipt, Refusal> {
        Err(Refusal::Full)
    }
}

/// The failure `body` gets, which must be a bad body.
fn refused(body: &str) -> (String, Option<String>) {
    match parse_commands::<Shop>(body.as_bytes()) {
        Err(Failure::BadBody { message, path }) => (message, path),
        other => panic!("{body}: {other:?}"),
    }
}

/// Proves a field a command's type does not have refuses the whole body, at any depth, with
/// the field's name and path (the variant's name in it), whatever else the body holds; and
/// that the same commands without it are taken.
#[test]
fn gateway_refuses_unknown_fields_with_their_path() {
    let cases = [
        (
            r#"[{"Pay": {"from": 1, "to": 2, "amount": 1, "memo": "x"}}]"#,
            "memo",
            "[0].Pay.memo",
        ),
        (
            r#"["Count", {"Ship": {"id": 1, "label": null, "extra": [1, {"a": 2}]}}]"#,
            "extra",
            "[1].Ship.extra",
        ),
        (
            r#"[{"Weigh": {"parcel": {"id": 1, "colour": "red"}, "grams": 5}}]"#,
            "colour",
            "[0].Weigh.parcel.colour",
        ),
        (
            r#"[{"Pay": {"from": 1, "to": 2, "amount": 1}},
                {"Settle": {"offset": -1, "cents": 5, "when": null}}]"#,
            "when",
            "[1].Settle.when",
        ),
    ];
    for (body, field, at) in cases {
        let (message, path) = refused(body);
        assert_eq!(path.as_deref(), Some(at), "{body}: {message}");
        assert!(
            message.contains(&format!("unknown field `{field}`")) && message.contains(at),
            "{body}: {message}"
        );
    }
    let taken = parse_commands::<Shop>(
        br#"[{"Pay": {"from": 1, "to": 2, "amount": 1}}, "Count",
             {"Weigh": {"parcel": {"id": 1}, "grams": 5}}]"#,
    );
    assert_eq!(taken.map(|c| c.len()), Ok(3));
}

/// Proves an integer out of its field's range is named as the body sent it, digits and
/// sign, with the field's type and path (serde_json's own message names a float), and that
/// other wrong numbers keep the parser's message.
#[test]
fn gateway_names_out_of_range_integers_as_sent() {
    let pay = |amount: &str| format!(r#"[{{"Pay": {{"from": 1, "to": 2, "amount": {amount}}}}}]"#);
    let cases = [
        (
            pay("18446744073709551616"),
            "18446744073709551616",
            "u64",
            "[0].Pay.amount",
        ),
        (pay("-1"), "-1", "u64", "[0].Pay.amount"),
        (
            pay("-18446744073709551617"),
            "-18446744073709551617",
            "u64",
            "[0].Pay.amount",
        ),
        (
            r#"["Count", {"Weigh": {"parcel": {"id": 1}, "grams": 4294967296}}]"#.to_owned(),
            "4294967296",
            "u32",
            "[1].Weigh.grams",
        ),
        (
            r#"[{"Weigh": {"parcel": {"id": 123456789012345678901234567890}, "grams": 1}}]"#
                .to_owned(),
            "123456789012345678901234567890",
            "u64",
            "[0].Weigh.parcel.id",
        ),
        (
            r#"[{"Settle": {"cents": 1, "offset": 9223372036854775808}}]"#.to_owned(),
            "9223372036854775808",
            "i64",
            "[0].Settle.offset",
        ),
        (
            r#"[{"Settle": {"cents": -5, "offset": 0}}]"#.to_owned(),
            "-5",
            "u128",
            "[0].Settle.cents",
        ),
        (
            r#"[{"Settle": {"cents": 340282366920938463463374607431768211456, "offset": 0}}]"#
                .to_owned(),
            "340282366920938463463374607431768211456",
            "a 128-bit integer",
            "[0].Settle.cents",
        ),
    ];
    for (body, digits, kind, at) in &cases {
        let (message, path) = refused(body);
        assert_eq!(path.as_deref(), Some(*at), "{body}: {message}");
        let named = format!("{digits} is out of range for {kind} at {at}");
        assert!(message.contains(&named), "{body}: {message}");
        assert!(!message.contains("floating point"), "{body}: {message}");
    }
    let (message, _) = refused(&pay("1.5"));
    assert!(message.contains("1.5"), "{message}");
}
