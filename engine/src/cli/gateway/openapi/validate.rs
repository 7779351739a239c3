//! A validator of JSON values against the schemas this module writes: the keywords they use
//! and no more (a keyword it does not know is a mismatch, never a silent pass). For tests of
//! a handler's types against their description: every sample value's `serde_json` form must
//! pass, or the description says what serde does not write.

use super::schema::{SIGNED_DIGITS, UNSIGNED_DIGITS};
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;

/// Schemas followed into at most for one value (references included): a deeper value, or a
/// schema that refers to itself without end, is refused rather than followed.
pub const VALIDATE_DEPTH_MAX: usize = 128;

/// Keywords that only annotate.
const ANNOTATIONS: [&str; 5] = ["description", "format", "title", "$schema", "$defs"];

/// Why a value does not match a schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {expected}")]
pub struct SchemaMismatch {
    /// Where in the value (`[0].Transfer.amount`; empty for the whole value).
    pub path: String,
    /// What the schema asked for there.
    pub expected: String,
}

/// Checks `value` against `schema`, whose references (`#/...`) point into `root` (the
/// OpenAPI document, or a schema with its `$defs`).
pub fn validate(root: &Value, schema: &Value, value: &Value) -> Result<(), SchemaMismatch> {
    Validator { root }.check(schema, value, "", 0)
}

struct Validator<'a> {
    root: &'a Value,
}

fn mismatch(path: &str, expected: impl Into<String>) -> SchemaMismatch {
    SchemaMismatch {
        path: path.to_owned(),
        expected: expected.into(),
    }
}

impl Validator<'_> {
    fn check(&self, schema: &Value, value: &Value, path: &str, depth: usize) -> Outcome {
        if depth > VALIDATE_DEPTH_MAX {
            return Err(mismatch(path, "a value nested less deeply"));
        }
        let keywords = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(mismatch(path, "nothing here")),
            Value::Object(keywords) => keywords,
            Value::Null | Value::Number(_) | Value::String(_) | Value::Array(_) => {
                return Err(mismatch(path, format!("a schema, not {schema}")));
            }
        };
        for (keyword, argument) in keywords {
            let at = Place { path, depth };
            self.keyword(keyword, argument, keywords, value, at)?;
        }
        Ok(())
    }

    fn keyword(
        &self,
        keyword: &str,
        argument: &Value,
        keywords: &Map<String, Value>,
        value: &Value,
        at: Place<'_>,
    ) -> Outcome {
        match keyword {
            "$ref" => self.reference(argument, value, at),
            "type" => type_is(argument, value, at.path),
            "const" if argument == value => Ok(()),
            "const" => Err(mismatch(at.path, format!("{argument}"))),
            "enum" => one_of_values(argument, value, at.path),
            "anyOf" | "oneOf" | "allOf" | "not" => self.combined(keyword, argument, value, at),
            // These apply to an object or an array only; "type" says which a value must be.
            "properties" | "required" | "additionalProperties" => match value.as_object() {
                Some(members) => self.object(keyword, keywords, members, at),
                None => Ok(()),
            },
            "items" | "prefixItems" | "minItems" | "maxItems" => match value.as_array() {
                Some(elements) => self.array(keyword, keywords, elements, at),
                None => Ok(()),
            },
            "minimum" | "maximum" | "minLength" | "maxLength" => {
                bound(keyword, argument, value, at)
            }
            "pattern" => pattern(argument, value, at.path),
            _ if ANNOTATIONS.contains(&keyword) => Ok(()),
            _ => Err(mismatch(
                at.path,
                format!("a keyword it knows, not {keyword}"),
            )),
        }
    }

    fn reference(&self, argument: &Value, value: &Value, at: Place<'_>) -> Outcome {
        let target = argument
            .as_str()
            .and_then(|reference| reference.strip_prefix('#'))
            .and_then(|pointer| self.root.pointer(pointer))
            .ok_or_else(|| mismatch(at.path, format!("a reference it can follow: {argument}")))?;
        self.check(target, value, at.path, at.depth + 1)
    }

    fn combined(&self, keyword: &str, argument: &Value, value: &Value, at: Place<'_>) -> Outcome {
        let depth = at.depth + 1;
        if keyword == "not" {
            return match self.check(argument, value, at.path, depth) {
                Ok(()) => Err(mismatch(at.path, format!("not {argument}"))),
                Err(_) => Ok(()),
            };
        }
        let schemas = argument
            .as_array()
            .ok_or_else(|| mismatch(at.path, format!("{keyword} of schemas")))?;
        let mut passed = 0;
        let mut first_error = None;
        for schema in schemas {
            match self.check(schema, value, at.path, depth) {
                Ok(()) => passed += 1,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let count = schemas.len();
        match (keyword, passed) {
            ("anyOf", 1..) | ("oneOf", 1) => Ok(()),
            ("allOf", _) if passed == count => Ok(()),
            ("allOf", _) => Err(first_error.expect("one failed")),
            _ => Err(mismatch(
                at.path,
                format!("{keyword} of {count} schemas; {passed} matched"),
            )),
        }
    }

    fn object(
        &self,
        keyword: &str,
        keywords: &Map<String, Value>,
        members: &Map<String, Value>,
        at: Place<'_>,
    ) -> Outcome {
        let properties = keywords.get("properties").and_then(Value::as_object);
        let declared = |name: &str| properties.is_some_and(|p| p.contains_key(name));
        match keyword {
            "required" => {
                let names = keywords[keyword].as_array().into_iter().flatten();
                match names
                    .filter_map(Value::as_str)
                    .find(|n| !members.contains_key(*n))
                {
                    Some(missing) => Err(mismatch(at.path, format!("a key {missing:?}"))),
                    None => Ok(()),
                }
            }
            "properties" => members.iter().try_for_each(|(name, member)| {
                match properties.and_then(|p| p.get(name)) {
                    Some(schema) => self.check(schema, member, &at.key(name), at.depth + 1),
                    None => Ok(()),
                }
            }),
            _ => members
                .iter()
                .filter(|(name, _)| !declared(name))
                .try_for_each(|(name, member)| {
                    self.check(&keywords[keyword], member, &at.key(name), at.depth + 1)
                }),
        }
    }

    fn array(
        &self,
        keyword: &str,
        keywords: &Map<String, Value>,
        elements: &[Value],
        at: Place<'_>,
    ) -> Outcome {
        let argument = &keywords[keyword];
        let prefix = keywords.get("prefixItems").and_then(Value::as_array);
        let prefixed = prefix.map_or(0, Vec::len);
        let each = |schema: &Value, (index, element): (usize, &Value)| {
            self.check(schema, element, &at.index(index), at.depth + 1)
        };
        match keyword {
            "items" => elements
                .iter()
                .enumerate()
                .skip(prefixed)
                .try_for_each(|element| each(argument, element)),
            "prefixItems" => prefix
                .into_iter()
                .flatten()
                .zip(elements.iter().enumerate())
                .try_for_each(|(schema, element)| each(schema, element)),
            _ => bound(keyword, argument, &Value::from(elements.len()), at),
        }
    }
}

type Outcome = Result<(), SchemaMismatch>;

/// Where the validator is: the value's path and how deep into schemas.
#[derive(Clone, Copy)]
struct Place<'a> {
    path: &'a str,
    depth: usize,
}

impl Place<'_> {
    fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.path)
    }

    fn index(&self, index: usize) -> String {
        format!("{}[{index}]", self.path)
    }
}

fn type_is(argument: &Value, value: &Value, path: &str) -> Outcome {
    let matches = match (argument.as_str(), value) {
        (Some("null"), Value::Null)
        | (Some("boolean"), Value::Bool(_))
        | (Some("number"), Value::Number(_))
        | (Some("string"), Value::String(_))
        | (Some("array"), Value::Array(_))
        | (Some("object"), Value::Object(_)) => true,
        (Some("integer"), Value::Number(number)) => {
            number.is_i64() || number.is_u64() || number.as_f64().is_some_and(|n| n.fract() == 0.0)
        }
        _ => false,
    };
    if matches {
        Ok(())
    } else {
        Err(mismatch(path, format!("a value of type {argument}")))
    }
}

/// A string's `pattern`: only the patterns the schemas write (a 128-bit integer's digits),
/// any other is a mismatch, never a silent pass.
fn pattern(argument: &Value, value: &Value, path: &str) -> Outcome {
    let Some(text) = value.as_str() else {
        return Ok(());
    };
    let digits = |t: &str| {
        t == "0"
            || (t.starts_with(|c: char| c.is_ascii_digit() && c != '0')
                && t.bytes().all(|b| b.is_ascii_digit()))
    };
    let matches = match argument.as_str() {
        Some(UNSIGNED_DIGITS) => digits(text),
        Some(SIGNED_DIGITS) => digits(text.strip_prefix('-').filter(|t| *t != "0").unwrap_or(text)),
        _ => {
            return Err(mismatch(
                path,
                format!("a pattern it knows, not {argument}"),
            ));
        }
    };
    if matches {
        Ok(())
    } else {
        Err(mismatch(path, format!("a string matching {argument}")))
    }
}

fn one_of_values(argument: &Value, value: &Value, path: &str) -> Outcome {
    let values = argument.as_array().into_iter().flatten();
    if values.clone().any(|allowed| allowed == value) {
        Ok(())
    } else {
        Err(mismatch(path, format!("one of {argument}")))
    }
}

/// A `minimum` or `maximum` of a number, or a `minLength` or `maxLength` of a string
/// (counted in characters, as JSON Schema counts), or a count of elements.
fn bound(keyword: &str, argument: &Value, value: &Value, at: Place<'_>) -> Outcome {
    let measured = match (keyword, value) {
        ("minLength" | "maxLength", Value::String(text)) => Number::from(text.chars().count()),
        ("minLength" | "maxLength", _) => return Ok(()),
        (_, Value::Number(number)) => number.clone(),
        _ => return Ok(()),
    };
    let limit = argument
        .as_number()
        .ok_or_else(|| mismatch(at.path, format!("{keyword} a number")))?;
    let order = compare(&measured, limit);
    let fits = match keyword {
        "minimum" | "minLength" | "minItems" => order.is_some_and(Ordering::is_ge),
        _ => order.is_some_and(Ordering::is_le),
    };
    if fits {
        Ok(())
    } else {
        Err(mismatch(
            at.path,
            format!("{keyword} {limit}, not {measured}"),
        ))
    }
}

/// Two numbers' order: exactly when both are integers, as floats otherwise.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    let exact = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (exact(a), exact(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// Every schema reachable from `schema` (through references, properties, items and
/// combinations) in `document`, each once: what a check of every schema a request can meet
/// walks.
pub fn reachable_schemas<'a>(document: &'a Value, schema: &'a Value) -> Vec<&'a Value> {
    let mut seen: Vec<&Value> = Vec::new();
    let mut next = vec![schema];
    while let Some(schema) = next.pop() {
        if seen.iter().any(|s| std::ptr::eq(*s, schema)) {
            continue;
        }
        seen.push(schema);
        let Some(keywords) = schema.as_object() else {
            continue;
        };
        if let Some(target) = keywords.get("$ref").and_then(Value::as_str) {
            let pointer = target.strip_prefix('#').expect("a local reference");
            next.push(
                document
                    .pointer(pointer)
                    .expect("a reference that resolves"),
            );
        }
        let properties = keywords.get("properties").and_then(Value::as_object);
        next.extend(properties.into_iter().flat_map(|p| p.values()));
        for key in ["oneOf", "anyOf", "allOf", "prefixItems"] {
            next.extend(
                keywords
                    .get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten(),
            );
        }
        next.extend(keywords.get("items").filter(|items| items.is_object()));
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error(schema: Value, value: Value) -> SchemaMismatch {
        validate(&schema, &schema, &value).expect_err("refused")
    }

    /// Proves each keyword the schemas use refuses what it should, with the path, and that an
    /// unknown keyword or a reference that goes nowhere is a mismatch.
    #[test]
    fn keywords_refuse() {
        let object = json!({
            "type": "object",
            "properties": { "a": { "type": "integer", "minimum": 0, "maximum": 9 } },
            "required": ["a"],
            "additionalProperties": false,
        });
        assert_eq!(validate(&object, &object, &json!({"a": 9})), Ok(()));
        assert_eq!(error(object.clone(), json!({"a": 10})).path, ".a");
        assert_eq!(error(object.clone(), json!({"a": 1.5})).path, ".a");
        assert!(error(object.clone(), json!({})).expected.contains("\"a\""));
        assert_eq!(error(object, json!({"a": 1, "b": 2})).path, ".b");
        let tuple = json!({
            "type": "array", "prefixItems": [{"type": "string", "maxLength": 1}],
            "items": false, "minItems": 1, "maxItems": 1,
        });
        assert_eq!(validate(&tuple, &tuple, &json!(["é"])), Ok(()));
        assert_eq!(error(tuple.clone(), json!(["ab"])).path, "[0]");
        assert_eq!(error(tuple.clone(), json!(["a", "b"])).path, "[1]");
        assert!(error(tuple, json!([])).expected.contains("minItems"));
        let either = json!({"oneOf": [{"const": "A"}, {"enum": ["A", "B"]}]});
        assert!(
            error(either.clone(), json!("A"))
                .expected
                .contains("2 matched")
        );
        assert_eq!(validate(&either, &either, &json!("B")), Ok(()));
        assert!(
            error(json!({"not": {}}), json!(null))
                .expected
                .starts_with("not")
        );
        assert!(
            error(json!({"pattern": "a"}), json!("a"))
                .expected
                .contains("pattern")
        );
        assert!(
            error(json!({"$ref": "#/nowhere"}), json!(1))
                .expected
                .contains("reference")
        );
        let endless = json!({"$ref": "#"});
        assert!(error(endless, json!(1)).expected.contains("less deeply"));
    }

    /// Proves bounds compare exactly at the edges of the 64-bit integers.
    #[test]
    fn bounds_are_exact() {
        let unsigned = json!({"type": "integer", "minimum": 0, "maximum": u64::MAX});
        assert_eq!(validate(&unsigned, &unsigned, &json!(u64::MAX)), Ok(()));
        assert!(error(unsigned, json!(-1)).expected.contains("minimum"));
        let small = json!({"maximum": i64::MAX - 1});
        assert!(error(small, json!(i64::MAX)).expected.contains("maximum"));
    }
}
