//! The `Encode` derive's `Describe` mirrors serde's JSON for every shape of type: each
//! expected schema is spelled out; every sample value's `serde_json` form validates against
//! it and reads back; each value the schema refuses, serde refuses too. The serde options it
//! mirrors rename and skip as serde does; one it does not leaves the part described as any
//! value. (serde's derive also reads two forms it never writes, a struct from an array of its
//! fields and a unit variant from `{"Name": null}`; the schema gives the written form only.)

#![cfg(feature = "cli")]

use engine::cli::gateway::{json_schema, validate};
use engine::codec::{Decode, Describe, Encode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The schema of `T`, checked to accept each sample's JSON (which serde reads back) and to
/// refuse each of `refused` (which serde refuses too).
fn schema_of<T>(samples: &[T], refused: &[Value]) -> Value
where
    T: Describe + Serialize + DeserializeOwned,
{
    let schema = json_schema::<T>();
    for sample in samples {
        let value = serde_json::to_value(sample).expect("serializes");
        if let Err(error) = validate(&schema, &schema, &value) {
            panic!("{value} refused: {error}\nschema: {schema:#}");
        }
        assert!(
            serde_json::from_value::<T>(value.clone()).is_ok(),
            "{value}"
        );
    }
    for value in refused {
        let checked = validate(&schema, &schema, value);
        assert!(checked.is_err(), "{value} accepted by {schema:#}");
        assert!(
            serde_json::from_value::<T>(value.clone()).is_err(),
            "serde reads {value}"
        );
    }
    schema
}

/// `schema` as the whole of a standalone schema, named `name` under `$defs`.
fn defined(name: &str, schema: Value) -> Value {
    json!({ "$schema": DIALECT, "$ref": format!("#/$defs/{name}"), "$defs": { name: schema } })
}

fn int(signed: bool, bits: u32) -> Value {
    let format = format!("{}int{bits}", if signed { "" } else { "u" });
    match (signed, bits) {
        (false, 128) => json!({"type": "integer", "format": format, "minimum": 0}),
        (true, 128) => json!({"type": "integer", "format": format}),
        (false, _) => {
            let max = u64::MAX >> (64 - bits);
            json!({"type": "integer", "format": format, "minimum": 0, "maximum": max})
        }
        (true, _) => {
            let max = i64::MAX >> (64 - bits);
            json!({"type": "integer", "format": format, "minimum": -max - 1, "maximum": max})
        }
    }
}

/// `schema` with a description.
fn doc(mut schema: Value, text: &str) -> Value {
    schema["description"] = json!(text);
    schema
}

/// A named struct.
#[derive(Encode, Decode, Serialize, Deserialize)]
struct Account {
    /// The balance.
    balance: u64,
    owner: String,
    note: Option<String>,
}

/// Proves a named struct is an object of its fields (documented), an `Option` field is not
/// required, and the type is defined once under its name.
#[test]
fn named_struct() {
    let sample = Account {
        balance: 7,
        owner: "ann".into(),
        note: None,
    };
    let refused = [
        json!({"balance": -1, "owner": "a", "note": null}),
        json!({"owner": "a"}),
        json!({"balance": 1, "owner": 2}),
    ];
    let schema = schema_of(&[sample], &refused);
    let account = json!({
        "description": "A named struct.",
        "type": "object",
        "properties": {
            "balance": doc(int(false, 64), "The balance."),
            "owner": { "type": "string" },
            "note": { "anyOf": [{ "type": "string" }, { "type": "null" }] },
        },
        "required": ["balance", "owner"],
    });
    assert_eq!(schema, defined("Account", account));
    let absent = json!({"balance": 1, "owner": "a"});
    assert_eq!(
        validate(&schema, &schema, &absent),
        Ok(()),
        "serde reads None"
    );
}

#[derive(Encode, Decode, Serialize, Deserialize)]
struct Pair(u16, i64, Vec<u8>);

#[derive(Encode, Decode, Serialize, Deserialize)]
struct Id(u64);

#[derive(Encode, Decode, Serialize, Deserialize)]
struct Marker;

#[derive(Encode, Decode, Serialize, Deserialize)]
struct Empty {}

#[derive(Encode, Decode, Serialize, Deserialize)]
struct NoFields();

/// Proves a tuple struct is an array of exactly its fields, a newtype is its field, a unit
/// struct is `null`, and structs without fields are an empty object or array.
#[test]
fn tuple_newtype_and_unit_structs() {
    let bytes = json!({"type": "array", "items": int(false, 8)});
    let pair = json!({
        "type": "array",
        "prefixItems": [int(false, 16), int(true, 64), bytes],
        "items": false, "minItems": 3, "maxItems": 3,
    });
    let refused = [json!([1, 2]), json!([1, 2, [3], 4]), json!([1, 2, [256]])];
    let schema = schema_of(&[Pair(1, -2, vec![3])], &refused);
    assert_eq!(schema, defined("Pair", pair));
    let schema = schema_of(&[Id(7)], &[json!({"Id": 7}), json!([7]), json!(-7)]);
    assert_eq!(schema, defined("Id", int(false, 64)));
    let schema = schema_of(&[Marker], &[json!("Marker"), json!(0)]);
    assert_eq!(schema, defined("Marker", json!({"type": "null"})));
    let schema = schema_of(&[Empty {}], &[json!(null), json!("Empty")]);
    assert_eq!(
        schema,
        defined("Empty", json!({"type": "object", "properties": {}}))
    );
    let schema = schema_of(&[NoFields()], &[json!([1]), json!({})]);
    assert_eq!(
        schema,
        defined("NoFields", json!({"type": "array", "maxItems": 0}))
    );
}

/// A command of every kind of variant.
#[derive(Encode, Decode, Serialize, Deserialize)]
enum Command {
    /// Counts.
    Audit,
    Deposit(u64),
    Pair(u8, bool),
    Transfer {
        from: Id,
        to: Id,
        /// Above zero.
        amount: u128,
    },
}

/// Proves an enum is externally tagged: a unit variant its name, a newtype variant an
/// object of its name to its field, a tuple variant to an array, a struct variant to an
/// object; named types are referred to, and an unknown variant is refused.
#[test]
fn enum_variants() {
    let samples = [
        Command::Audit,
        Command::Deposit(5),
        Command::Pair(1, true),
        Command::Transfer {
            from: Id(7),
            to: Id(8),
            amount: 5,
        },
    ];
    let refused = [
        json!({"Nope": 1}),
        json!("Deposit"),
        json!({"Deposit": "5"}),
        json!({"Audit": 1, "Deposit": 5}),
        json!({"Transfer": {"from": 7, "to": 8}}),
    ];
    let schema = schema_of(&samples, &refused);
    let one = |name: &str, content: Value| {
        json!({ "type": "object", "properties": { name: content }, "required": [name],
                "additionalProperties": false })
    };
    let transfer = json!({
        "type": "object",
        "properties": {
            "from": { "$ref": "#/$defs/Id" },
            "to": { "$ref": "#/$defs/Id" },
            "amount": doc(int(false, 128), "Above zero."),
        },
        "required": ["from", "to", "amount"],
    });
    let pair = json!({ "type": "array", "prefixItems": [int(false, 8), {"type": "boolean"}],
                       "items": false, "minItems": 2, "maxItems": 2 });
    let command = json!({ "description": "A command of every kind of variant.", "oneOf": [
        { "const": "Audit", "description": "Counts." },
        one("Deposit", int(false, 64)),
        one("Pair", pair),
        one("Transfer", transfer),
    ]});
    let mut expected = defined("Command", command);
    expected["$defs"]["Id"] = int(false, 64);
    assert_eq!(schema, expected);
    // A u128 past u64::MAX is written as a number all the same.
    let big = serde_json::to_string(&Command::Transfer {
        from: Id(1),
        to: Id(2),
        amount: u128::MAX,
    })
    .unwrap();
    let big: Value = serde_json::from_str(&big).unwrap();
    assert_eq!(validate(&schema, &schema, &big), Ok(()));
}

#[derive(Encode, Decode, Serialize, Deserialize)]
struct Kinds {
    array: [u8; 3],
    tuple: (bool, char),
    float: f64,
    wide: i128,
    small: Vec<i8>,
    nothing: (),
    maybe: Option<Option<u32>>,
}

/// Proves the standard types have serde's shapes: an array exactly `N` long, a tuple, a
/// char one character, floats numbers, `()` null.
#[test]
fn standard_types() {
    let sample = Kinds {
        array: [1, 2, 3],
        tuple: (true, 'é'),
        float: 0.5,
        wide: -3,
        small: vec![-128, 127],
        nothing: (),
        maybe: Some(None),
    };
    let good = serde_json::to_value(&sample).unwrap();
    let with = |key: &str, value: Value| {
        let mut changed = good.clone();
        changed[key] = value;
        changed
    };
    let refused = [
        with("array", json!([1, 2])),
        with("tuple", json!([true, "ab"])),
        with("small", json!([128])),
        with("float", json!("0.5")),
        with("nothing", json!(0)),
        with("wide", json!(1.5)),
    ];
    let schema = schema_of(&[sample], &refused);
    let kinds = &schema["$defs"]["Kinds"]["properties"];
    assert_eq!(
        kinds["array"],
        json!({"type": "array", "items": int(false, 8), "minItems": 3, "maxItems": 3})
    );
    let char = json!({"type": "string", "minLength": 1, "maxLength": 1});
    assert_eq!(
        kinds["tuple"]["prefixItems"],
        json!([{"type": "boolean"}, char])
    );
    assert_eq!(kinds["float"], json!({"type": "number"}));
    assert_eq!(kinds["wide"], int(true, 128));
    assert_eq!(kinds["small"]["items"], int(true, 8));
    assert_eq!(kinds["nothing"], json!({"type": "null"}));
}

#[derive(Encode, Decode, Serialize, Deserialize)]
enum Either<L, R> {
    Left(L),
    Right { value: R },
}

#[derive(Encode, Decode, Serialize, Deserialize)]
struct Both {
    first: Either<u8, String>,
    second: Either<u16, bool>,
}

/// A tree, to prove a recursive type refers to itself.
#[derive(Encode, Decode, Serialize, Deserialize)]
enum Tree {
    Leaf(u8),
    Node(Box<Tree>, Box<Tree>),
}

/// Proves two instances of a generic type are two definitions (the second named by its
/// path), and a recursive type is defined once and refers to itself.
#[test]
fn generic_and_recursive_types() {
    let sample = Both {
        first: Either::Left(1),
        second: Either::Right { value: true },
    };
    let refused = [json!({"first": {"Left": 1}, "second": {"Left": 65536}})];
    let schema = schema_of(&[sample], &refused);
    let names: Vec<&String> = schema["$defs"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["Both", "Either", "describe.Either_u16__bool_"]);
    let node = Tree::Node(
        Box::new(Tree::Leaf(1)),
        Box::new(Tree::Node(Box::new(Tree::Leaf(2)), Box::new(Tree::Leaf(3)))),
    );
    let refused = [json!({"Node": [{"Leaf": 1}, {"Leaf": 256}]})];
    let schema = schema_of(&[node], &refused);
    let tree = &schema["$defs"]["Tree"]["oneOf"][1]["properties"]["Node"]["prefixItems"];
    assert_eq!(tree[0], json!({"$ref": "#/$defs/Tree"}));
}

#[derive(Encode, Decode, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Options {
    unit_price: u64,
    #[serde(rename = "qty")]
    quantity: u32,
    #[serde(skip)]
    cache: u8,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<u8>,
    #[serde(alias = "n", default)]
    name: String,
}

#[derive(Encode, Decode, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", rename_all_fields = "UPPERCASE")]
enum Renamed {
    FirstOne,
    #[serde(rename = "two")]
    Second {
        inner_value: u8,
    },
    #[serde(skip)]
    Hidden,
}

#[derive(Encode, Decode, Serialize, Deserialize)]
#[serde(transparent)]
struct Wrapper {
    inner: Vec<u8>,
}

#[derive(Encode, Decode, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Tagged {
    A { x: u8 },
}

/// Proves the serde options mirrored rename, skip, close and make optional as serde does,
/// an option not mirrored makes its field (or type) any value, and the description says so.
#[test]
fn serde_options() {
    let options = Options {
        unit_price: 1,
        quantity: 2,
        cache: 3,
        tags: vec![],
        name: "a".into(),
    };
    let refused = [json!({"unit_price": 1, "qty": 2}), json!({"unitPrice": 1})];
    let schema = schema_of(&[options], &refused);
    let properties = &schema["$defs"]["Options"]["properties"];
    let keys: Vec<&String> = properties.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "qty", "tags", "unitPrice"]);
    let name = "field name: serde's `alias` is not described";
    assert_eq!(properties["name"], json!({ "description": name }));
    assert_eq!(
        schema["$defs"]["Options"]["required"],
        json!(["unitPrice", "qty"])
    );
    // Under an option not mirrored the object is left open: serde reads this.
    let aliased = json!({"unitPrice": 1, "qty": 2, "n": "b"});
    assert_eq!(validate(&schema, &schema, &aliased), Ok(()));
    assert!(serde_json::from_value::<Options>(aliased).is_ok());
    let samples = [Renamed::FirstOne, Renamed::Second { inner_value: 1 }];
    let refused = [
        json!("FirstOne"),
        json!("Hidden"),
        json!({"two": {"inner_value": 1}}),
    ];
    let schema = schema_of(&samples, &refused);
    let variants = &schema["$defs"]["Renamed"]["oneOf"];
    assert_eq!(variants[0], json!({"const": "first_one"}));
    assert!(variants[1]["properties"]["two"]["properties"]["INNER_VALUE"].is_object());
    assert_eq!(variants.as_array().unwrap().len(), 2);
    let wrapper = Wrapper { inner: vec![1] };
    let schema = schema_of(&[wrapper], &[json!({"inner": [1]})]);
    let bytes = json!({"type": "array", "items": int(false, 8)});
    assert_eq!(schema, defined("Wrapper", bytes));
    let schema = schema_of(&[Tagged::A { x: 1 }], &[]);
    let any = json!({ "description": "Tagged: serde's `tag` is not described" });
    assert_eq!(schema, defined("Tagged", any));
}

#[derive(Encode, Decode, Serialize, Deserialize)]
enum Never {}

/// Proves an enum without variants is no value at all.
#[test]
fn empty_enum() {
    let schema = schema_of::<Never>(&[], &[json!(null), json!("A"), json!({})]);
    assert_eq!(schema, defined("Never", json!({"not": {}})));
}
