//! A [`JsonShape`] as JSON Schema (draft 2020-12, the dialect of OpenAPI 3.1), its
//! references under a prefix: `#/components/schemas/` in the document, `#/$defs/` in a
//! schema of its own.

use crate::codec::{Definitions, Describe, JsonShape, Object, Variant};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// The JSON Schema dialect of [`json_schema`].
const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";
/// Where [`json_schema`]'s named types are.
const DEFS: &str = "#/$defs/";
/// What a 128-bit integer written as a string matches: its decimal digits, no leading zero.
pub(super) const UNSIGNED_DIGITS: &str = "^(0|[1-9][0-9]*)$";
/// The same, with a minus sign allowed.
pub(super) const SIGNED_DIGITS: &str = "^(0|-?[1-9][0-9]*)$";
/// The suffix of the name of a command's copy of a type whose 128-bit integers outputs
/// write as strings and commands read as numbers (`Money-command`): a Rust path has no `-`,
/// so no type's own name ends so.
const COMMAND_COPY: &str = "-command";

/// The JSON Schema of `T`'s JSON under serde, on its own: its named types under `$defs`.
pub fn json_schema<T: Describe + ?Sized>() -> Value {
    let mut definitions = Definitions::new();
    let shape = T::describe(&mut definitions);
    let serde = Style {
        refs: DEFS,
        closed: false,
        wide_strings: false,
        copies: None,
    };
    // Every schema a style makes is an object.
    let mut root = serde.shape(&shape);
    root["$schema"] = json!(DIALECT);
    let defs: Map<String, Value> = definitions
        .iter()
        .map(|(name, definition)| (name.to_owned(), serde.definition(definition)))
        .collect();
    if !defs.is_empty() {
        root["$defs"] = Value::Object(defs);
    }
    root
}

/// The schemas of the gateway's document: a command's, each answer's (output, error) and
/// every named type's, by name.
pub(super) struct Described {
    /// One command's schema.
    pub command: Value,
    /// The schema of each answer given, in order.
    pub answers: Vec<Value>,
    /// The named types' schemas.
    pub schemas: Map<String, Value>,
}

/// The schemas of `command` and `answers` as the gateway reads and writes them, their named
/// types in `definitions`, referred to under `refs`:
///
/// - every object refuses a key it does not declare (the gateway refuses a command with a
///   field its type lacks, and serde writes no other), unless one of its fields is under a
///   serde option the description does not mirror (`flatten`, `alias`, ...);
/// - a 128-bit integer is a string of digits in the answers (as [`super::super::json::Wide`]
///   writes it) and a number in a command (as serde_json reads it). A named type with one
///   that both hold is described twice: a command refers to its copy (`Name-command`).
pub(super) fn described(
    definitions: &Definitions,
    command: &JsonShape,
    answers: &[&JsonShape],
    refs: &str,
) -> Described {
    let wide = wide_types(definitions);
    let read = reachable(definitions, std::slice::from_ref(&command));
    let written = reachable(definitions, answers);
    let copies: BTreeSet<String> = read
        .iter()
        .filter(|name| written.contains(*name) && wide.contains(*name))
        .cloned()
        .collect();
    let reading = Style {
        refs,
        closed: true,
        wide_strings: false,
        copies: Some(&copies),
    };
    let writing = Style {
        wide_strings: true,
        ..reading
    };
    let mut schemas = Map::new();
    for (name, definition) in definitions.iter() {
        let style = if read.contains(name) && !written.contains(name) {
            reading
        } else {
            writing
        };
        schemas.insert(name.to_owned(), style.definition(definition));
        if copies.contains(name) {
            let copy = format!("{name}{COMMAND_COPY}");
            schemas.insert(copy, reading.definition(definition));
        }
    }
    Described {
        command: reading.shape(command),
        answers: answers.iter().map(|shape| writing.shape(shape)).collect(),
        schemas,
    }
}

/// The named types that hold a 128-bit integer, at any depth.
fn wide_types(definitions: &Definitions) -> BTreeSet<String> {
    let mut wide = BTreeSet::new();
    loop {
        let before = wide.len();
        for (name, definition) in definitions.iter() {
            if !wide.contains(name) && holds_wide(&definition.shape, &wide) {
                wide.insert(name.to_owned());
            }
        }
        if wide.len() == before {
            return wide;
        }
    }
}

/// True when `shape` holds a 128-bit integer, itself or through a type of `wide`.
fn holds_wide(shape: &JsonShape, wide: &BTreeSet<String>) -> bool {
    let mut holds = false;
    each_part(shape, &mut |part| match part {
        JsonShape::Integer { bits, .. } => holds |= *bits > 64,
        JsonShape::Ref(name) => holds |= wide.contains(name),
        JsonShape::Any(_)
        | JsonShape::Null
        | JsonShape::Bool
        | JsonShape::Number
        | JsonShape::String { .. }
        | JsonShape::Array { .. }
        | JsonShape::Tuple(_)
        | JsonShape::Nullable(_)
        | JsonShape::Object(_)
        | JsonShape::Variants(_) => {}
    });
    holds
}

/// The named types `roots` refer to, at any depth.
fn reachable(definitions: &Definitions, roots: &[&JsonShape]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut next: Vec<String> = Vec::new();
    let refer = |shape: &JsonShape, next: &mut Vec<String>| {
        each_part(shape, &mut |part| {
            if let JsonShape::Ref(name) = part {
                next.push(name.clone());
            }
        });
    };
    for root in roots {
        refer(root, &mut next);
    }
    while let Some(name) = next.pop() {
        if !found.insert(name.clone()) {
            continue;
        }
        if let Some(definition) = definitions.get(&name) {
            refer(&definition.shape, &mut next);
        }
    }
    found
}

/// Calls `visit` with `shape` and each shape inside it (not through references).
fn each_part(shape: &JsonShape, visit: &mut dyn FnMut(&JsonShape)) {
    visit(shape);
    match shape {
        JsonShape::Array { items, .. } => each_part(items, visit),
        JsonShape::Nullable(inner) => each_part(inner, visit),
        JsonShape::Tuple(items) => items.iter().for_each(|item| each_part(item, visit)),
        JsonShape::Object(object) => {
            for property in &object.properties {
                each_part(&property.shape, visit);
            }
        }
        JsonShape::Variants(variants) => {
            for content in variants.iter().filter_map(|v| v.content.as_ref()) {
                each_part(content, visit);
            }
        }
        JsonShape::Any(_)
        | JsonShape::Null
        | JsonShape::Bool
        | JsonShape::Integer { .. }
        | JsonShape::Number
        | JsonShape::String { .. }
        | JsonShape::Ref(_) => {}
    }
}

/// How shapes become schemas.
#[derive(Clone, Copy)]
struct Style<'a> {
    /// Where references point (`#/components/schemas/`).
    refs: &'a str,
    /// Every object closed (unless a field is not described), not only those serde closes
    /// (`deny_unknown_fields`).
    closed: bool,
    /// 128-bit integers as strings of digits.
    wide_strings: bool,
    /// The types a command refers to by their copy's name, when reading.
    copies: Option<&'a BTreeSet<String>>,
}

impl Style<'_> {
    /// A named type's schema, with its documentation.
    fn definition(&self, definition: &crate::codec::Definition) -> Value {
        with_doc(self.shape(&definition.shape), definition.doc)
    }

    /// The schema of `shape`.
    fn shape(&self, shape: &JsonShape) -> Value {
        let refs = self.refs;
        match shape {
            JsonShape::Any(why) => json!({ "description": why }),
            JsonShape::Null => json!({ "type": "null" }),
            JsonShape::Bool => json!({ "type": "boolean" }),
            JsonShape::Integer { signed, bits } if *bits > 64 && self.wide_strings => {
                digits(*signed, *bits)
            }
            JsonShape::Integer { signed, bits } => integer(*signed, *bits),
            JsonShape::Number => json!({ "type": "number" }),
            JsonShape::String { chars: None } => json!({ "type": "string" }),
            JsonShape::String { chars: Some(n) } => {
                json!({ "type": "string", "minLength": n, "maxLength": n })
            }
            JsonShape::Array { items, len } => {
                let mut array = json!({ "type": "array", "items": self.shape(items) });
                if let Some(len) = len {
                    array["minItems"] = json!(len);
                    array["maxItems"] = json!(len);
                }
                array
            }
            JsonShape::Tuple(items) => self.tuple(items),
            JsonShape::Nullable(inner) => {
                json!({ "anyOf": [self.shape(inner), { "type": "null" }] })
            }
            JsonShape::Object(object) => self.object(object),
            JsonShape::Variants(variants) => self.variants(variants),
            JsonShape::Ref(name) => {
                let copy = !self.wide_strings && self.copies.is_some_and(|c| c.contains(name));
                let suffix = if copy { COMMAND_COPY } else { "" };
                json!({ "$ref": format!("{refs}{name}{suffix}") })
            }
        }
    }

    /// Exactly `items`, in order (none: an empty array; `prefixItems` may not be empty).
    fn tuple(&self, items: &[JsonShape]) -> Value {
        if items.is_empty() {
            return json!({ "type": "array", "maxItems": 0 });
        }
        let each: Vec<Value> = items.iter().map(|item| self.shape(item)).collect();
        json!({
            "type": "array",
            "prefixItems": each,
            "items": false,
            "minItems": items.len(),
            "maxItems": items.len(),
        })
    }

    fn object(&self, object: &Object) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for property in &object.properties {
            let schema = with_doc(self.shape(&property.shape), property.doc);
            properties.insert(property.name.to_owned(), schema);
            if property.required {
                required.push(property.name);
            }
        }
        let mut schema = json!({ "type": "object", "properties": properties });
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        // A field under an option not mirrored (`flatten`, `alias`) may bring keys of its
        // own: such an object is left open, never stricter than serde.
        let described = !object
            .properties
            .iter()
            .any(|p| matches!(p.shape, JsonShape::Any(_)));
        if object.closed || (self.closed && described) {
            schema["additionalProperties"] = json!(false);
        }
        schema
    }

    /// An externally tagged enum: a unit variant its name, another an object of one key.
    fn variants(&self, variants: &[Variant]) -> Value {
        if variants.is_empty() {
            return json!({ "not": {} });
        }
        let each: Vec<Value> = variants
            .iter()
            .map(|variant| {
                let schema = match &variant.content {
                    None => json!({ "const": variant.name }),
                    Some(content) => json!({
                        "type": "object",
                        "properties": { variant.name: self.shape(content) },
                        "required": [variant.name],
                        "additionalProperties": false,
                    }),
                };
                with_doc(schema, variant.doc)
            })
            .collect();
        json!({ "oneOf": each })
    }
}

/// A 128-bit integer as a string of its decimal digits (as the gateway writes one).
fn digits(signed: bool, bits: u32) -> Value {
    let (format, pattern) = if signed {
        (format!("int{bits}"), SIGNED_DIGITS)
    } else {
        (format!("uint{bits}"), UNSIGNED_DIGITS)
    };
    json!({ "type": "string", "format": format, "pattern": pattern })
}

/// An integer's range (a 128-bit one's bound does not fit a JSON number most parsers keep,
/// so its format says it).
fn integer(signed: bool, bits: u32) -> Value {
    assert!((8..=128).contains(&bits), "an integer of {bits} bits");
    let format = if signed {
        format!("int{bits}")
    } else {
        format!("uint{bits}")
    };
    let mut schema = json!({ "type": "integer", "format": format });
    if signed && bits <= 64 {
        let max = i64::MAX >> (64 - bits);
        schema["minimum"] = json!(-max - 1);
        schema["maximum"] = json!(max);
    } else if !signed {
        schema["minimum"] = json!(0);
        if bits <= 64 {
            schema["maximum"] = json!(u64::MAX >> (64 - bits));
        }
    }
    schema
}

/// `schema` with `doc` as its description, when there is one.
fn with_doc(mut schema: Value, doc: &str) -> Value {
    if !doc.is_empty() && schema.get("description").is_none() {
        schema["description"] = json!(doc);
    }
    schema
}
