//! A [`JsonShape`] as JSON Schema (draft 2020-12, the dialect of OpenAPI 3.1), its
//! references under a prefix: `#/components/schemas/` in the document, `#/$defs/` in a
//! schema of its own.

use crate::codec::{Definitions, Describe, JsonShape, Object, Variant};
use serde_json::{Map, Value, json};

/// The JSON Schema dialect of [`json_schema`].
const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";
/// Where [`json_schema`]'s named types are.
const DEFS: &str = "#/$defs/";

/// The JSON Schema of `T`'s JSON under serde, on its own: its named types under `$defs`.
pub fn json_schema<T: Describe + ?Sized>() -> Value {
    let mut definitions = Definitions::new();
    let shape = T::describe(&mut definitions);
    // Every schema shape_json makes is an object.
    let mut root = shape_json(&shape, DEFS);
    root["$schema"] = json!(DIALECT);
    let defs = definitions_json(&definitions, DEFS);
    if !defs.is_empty() {
        root["$defs"] = Value::Object(defs);
    }
    root
}

/// Every named type of `definitions`, by name, its references under `refs`.
pub(super) fn definitions_json(definitions: &Definitions, refs: &str) -> Map<String, Value> {
    definitions
        .iter()
        .map(|(name, definition)| {
            let schema = with_doc(shape_json(&definition.shape, refs), definition.doc);
            (name.to_owned(), schema)
        })
        .collect()
}

/// The schema of `shape`, its references under `refs`.
pub(super) fn shape_json(shape: &JsonShape, refs: &str) -> Value {
    match shape {
        JsonShape::Any(why) => json!({ "description": why }),
        JsonShape::Null => json!({ "type": "null" }),
        JsonShape::Bool => json!({ "type": "boolean" }),
        JsonShape::Integer { signed, bits } => integer(*signed, *bits),
        JsonShape::Number => json!({ "type": "number" }),
        JsonShape::String { chars: None } => json!({ "type": "string" }),
        JsonShape::String { chars: Some(n) } => {
            json!({ "type": "string", "minLength": n, "maxLength": n })
        }
        JsonShape::Array { items, len } => {
            let mut array = json!({ "type": "array", "items": shape_json(items, refs) });
            if let Some(len) = len {
                array["minItems"] = json!(len);
                array["maxItems"] = json!(len);
            }
            array
        }
        JsonShape::Tuple(items) => tuple(items, refs),
        JsonShape::Nullable(inner) => {
            json!({ "anyOf": [shape_json(inner, refs), { "type": "null" }] })
        }
        JsonShape::Object(object) => object_json(object, refs),
        JsonShape::Variants(variants) => variants_json(variants, refs),
        JsonShape::Ref(name) => json!({ "$ref": format!("{refs}{name}") }),
    }
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

/// Exactly `items`, in order (none: an empty array; `prefixItems` may not be empty).
fn tuple(items: &[JsonShape], refs: &str) -> Value {
    if items.is_empty() {
        return json!({ "type": "array", "maxItems": 0 });
    }
    let each: Vec<Value> = items.iter().map(|item| shape_json(item, refs)).collect();
    json!({
        "type": "array",
        "prefixItems": each,
        "items": false,
        "minItems": items.len(),
        "maxItems": items.len(),
    })
}

fn object_json(object: &Object, refs: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for property in &object.properties {
        let schema = with_doc(shape_json(&property.shape, refs), property.doc);
        properties.insert(property.name.to_owned(), schema);
        if property.required {
            required.push(property.name);
        }
    }
    let mut schema = json!({ "type": "object", "properties": properties });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    if object.closed {
        schema["additionalProperties"] = json!(false);
    }
    schema
}

/// An externally tagged enum: a unit variant its name, another an object of one key.
fn variants_json(variants: &[Variant], refs: &str) -> Value {
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
                    "properties": { variant.name: shape_json(content, refs) },
                    "required": [variant.name],
                    "additionalProperties": false,
                }),
            };
            with_doc(schema, variant.doc)
        })
        .collect();
    json!({ "oneOf": each })
}

/// `schema` with `doc` as its description, when there is one.
fn with_doc(mut schema: Value, doc: &str) -> Value {
    if !doc.is_empty() && schema.get("description").is_none() {
        schema["description"] = json!(doc);
    }
    schema
}
