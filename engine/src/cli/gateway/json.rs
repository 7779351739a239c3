//! The handler's JSON in and out, one way for the gateway and `client` alike.
//!
//! In: commands are read strictly. A key the command's type does not have refuses the whole
//! text (serde's derive would drop it: a `memo` on a transfer would vanish and the money
//! move), for any handler, whether or not its types say `deny_unknown_fields`; an integer
//! out of its field's range is named as it was sent (`18446744073709551616 is out of range
//! for u64`), not as the float serde_json read it as. Each error names its path
//! (`[0].Transfer.memo`).
//!
//! Out: an output or error is written as serde writes it, except that a 128-bit integer is a
//! string of its decimal digits ([`Wide`]): a JSON number past 2^53 loses digits in
//! JavaScript and in most parsers, and serde_json's `Value` cannot hold one past 2^64 at all.

use serde::de::DeserializeOwned;
use serde::ser::{self, Serialize, Serializer};
use std::cell::Cell;
use std::fmt;

/// Why a text is not what was asked: a message, and where in the text (`[2].Transfer.amount`)
/// when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadJson {
    /// What is wrong; for an unknown field and an integer out of range, with the path.
    pub message: String,
    /// Where.
    pub path: Option<String>,
}

impl fmt::Display for BadJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        match &self.path {
            Some(path) if !self.message.contains(path.as_str()) => write!(f, " (at {path})"),
            Some(_) | None => Ok(()),
        }
    }
}

impl std::error::Error for BadJson {}

/// `text` as a `T`, read strictly (see the module's documentation).
pub fn read<T: DeserializeOwned>(text: &[u8]) -> Result<T, BadJson> {
    // The plain parser and serde_ignored first: tracking the path costs on every field, and
    // only a text that fails needs it.
    let mut ignored = false;
    let mut parser = serde_json::Deserializer::from_slice(text);
    let parsed = serde_ignored::deserialize(&mut parser, |_| ignored = true);
    match parsed.and_then(|value| parser.end().map(|()| value)) {
        Ok(value) if !ignored => Ok(value),
        Ok(_) | Err(_) => Err(describe::<T>(text)),
    }
}

/// Why `text` is not a `T` read strictly: the parser's message and the path to the first
/// wrong field, an integer out of range named as sent, or the first field serde ignores.
fn describe<T: DeserializeOwned>(text: &[u8]) -> BadJson {
    let mut parser = serde_json::Deserializer::from_slice(text);
    let error = match serde_path_to_error::deserialize::<_, T>(&mut parser) {
        Err(error) => error,
        Ok(_) => {
            if let Err(trailing) = parser.end() {
                return BadJson {
                    message: trailing.to_string(),
                    path: None,
                };
            }
            return unknown_field::<T>(text);
        }
    };
    let path = error.path().to_string();
    let path = (path != ".").then_some(path);
    let error = error.into_inner();
    match out_of_range(text, &error, path.as_deref()) {
        Some(message) => BadJson { message, path },
        None => BadJson {
            message: error.to_string(),
            path,
        },
    }
}

/// The first field of `text` that a `T` ignores, with its whole path.
///
/// serde_ignored names an ignored key's path without the enum variants it is in
/// (`0.memo`, not `[0].Transfer.memo`); serde_path_to_error names a path with the variants,
/// but only of an error. So the text is read again, and the moment serde_ignored reports a
/// key, the bytes stop coming: the parser fails on the key's value, inside the key, and
/// serde_path_to_error names where.
fn unknown_field<T: DeserializeOwned>(text: &[u8]) -> BadJson {
    let stop = Cell::new(false);
    let mut first = None;
    let bytes = Stopping {
        text,
        at: 0,
        stop: &stop,
    };
    let mut parser = serde_json::Deserializer::from_reader(bytes);
    let mut report = |path: serde_ignored::Path<'_>| {
        first.get_or_insert_with(|| ignored_path(&path));
        stop.set(true);
    };
    let reporting = serde_ignored::Deserializer::new(&mut parser, &mut report);
    let tracked = serde_path_to_error::deserialize::<_, T>(reporting);
    let (field, path) = match tracked {
        Err(error) if stop.get() => {
            let mut field = String::new();
            if let Some(serde_path_to_error::Segment::Map { key }) = error.path().iter().next_back()
            {
                field.clone_from(key);
            }
            (field, error.path().to_string())
        }
        // Not reached while serde_json reads a value's bytes after its key's: the path
        // serde_ignored gave, without the variants.
        Ok(_) | Err(_) => {
            let path = first.unwrap_or_default();
            let field = path.rsplit('.').next().unwrap_or_default().to_owned();
            (field, path)
        }
    };
    BadJson {
        message: format!("unknown field `{field}` at {path}"),
        path: Some(path),
    }
}

/// serde_ignored's path as the gateway writes paths: `[0].memo`.
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let parent = ignored_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// The bytes of a text, until `stop` is set.
struct Stopping<'a> {
    text: &'a [u8],
    at: usize,
    stop: &'a Cell<bool>,
}

impl std::io::Read for Stopping<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.stop.get() {
            return Err(std::io::Error::other("an unknown field"));
        }
        let rest = &self.text[self.at..];
        let count = rest.len().min(buf.len());
        buf[..count].copy_from_slice(&rest[..count]);
        self.at += count;
        Ok(count)
    }
}

/// The integer types serde names in its "expected" messages.
const INTEGERS: [&str; 12] = [
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
];

/// The message for an integer out of its field's range, naming it as `text` holds it (serde_json
/// read one past 64 bits as a float, and names that float), or `None` for another error.
fn out_of_range(text: &[u8], error: &serde_json::Error, path: Option<&str>) -> Option<String> {
    // A 128-bit field's "number out of range" is a syntax error to serde_json.
    use serde_json::error::Category;
    if !matches!(error.classify(), Category::Data | Category::Syntax) {
        return None;
    }
    let said = error.to_string();
    let said = said
        .rsplit_once(" at line ")
        .map_or(said.as_str(), |(m, _)| m);
    let sent = number_at(text, error.line(), error.column())?;
    let digits = sent.strip_prefix('-').unwrap_or(sent);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let at = path.map(|path| format!(" at {path}")).unwrap_or_default();
    let expected = said
        .strip_prefix("invalid type: floating point `")
        .or_else(|| said.strip_prefix("invalid value: integer `"))
        .and_then(|rest| rest.split_once("`, expected "))
        .map(|(_, expected)| expected);
    match expected {
        Some(kind) if INTEGERS.contains(&kind) => {
            Some(format!("{sent} is out of range for {kind}{at}"))
        }
        // A float where the field takes no number: serde's message, with the number as sent.
        Some(kind) if said.starts_with("invalid type: floating point") => Some(format!(
            "invalid type: integer `{sent}`, expected {kind}{at}"
        )),
        Some(_) => None,
        // serde_json's own words for a 128-bit field: which of the two, the number tells
        // when it fits the other.
        None if said == "number out of range" => {
            let kind = if sent.parse::<i128>().is_ok() {
                "u128"
            } else if sent.parse::<u128>().is_ok() {
                "i128"
            } else {
                "a 128-bit integer"
            };
            Some(format!("{sent} is out of range for {kind}{at}"))
        }
        None => None,
    }
}

/// The number in `text` around the 1-based `line` and `column` where serde_json stopped (on
/// the number's last byte, or on its sign).
fn number_at(text: &[u8], line: usize, column: usize) -> Option<&str> {
    let start_of_line = if line <= 1 {
        0
    } else {
        let newline = text
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)?
            .0;
        newline + 1
    };
    let at = (start_of_line + column).checked_sub(1)?;
    let part = |b: &u8| b.is_ascii_digit() || b"-+.eE".contains(b);
    if !text.get(at).is_some_and(part) {
        return None;
    }
    let start = text[..at]
        .iter()
        .rposition(|b| !part(b))
        .map_or(0, |i| i + 1);
    let end = text[at..]
        .iter()
        .position(|b| !part(b))
        .map_or(text.len(), |i| at + i);
    std::str::from_utf8(&text[start..end]).ok()
}

/// `T` as the engine writes an output or error: as serde writes it, but every 128-bit
/// integer (`u128`, `i128`), at any depth, as a string of its decimal digits.
pub struct Wide<'a, T: ?Sized>(pub &'a T);

impl<T: Serialize + ?Sized> Serialize for Wide<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(WideSerializer(serializer))
    }
}

/// A serializer that writes 128-bit integers as strings and everything else as `S` does.
struct WideSerializer<S>(S);

/// A compound (sequence, map, struct...) whose members are written [`Wide`].
struct WideCompound<C>(C);

impl<S: Serializer> Serializer for WideSerializer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = WideCompound<S::SerializeSeq>;
    type SerializeTuple = WideCompound<S::SerializeTuple>;
    type SerializeTupleStruct = WideCompound<S::SerializeTupleStruct>;
    type SerializeTupleVariant = WideCompound<S::SerializeTupleVariant>;
    type SerializeMap = WideCompound<S::SerializeMap>;
    type SerializeStruct = WideCompound<S::SerializeStruct>;
    type SerializeStructVariant = WideCompound<S::SerializeStructVariant>;

    fn serialize_u128(self, v: u128) -> Result<S::Ok, S::Error> {
        self.0.collect_str(&v)
    }
    fn serialize_i128(self, v: i128) -> Result<S::Ok, S::Error> {
        self.0.collect_str(&v)
    }

    fn serialize_bool(self, v: bool) -> Result<S::Ok, S::Error> {
        self.0.serialize_bool(v)
    }
    fn serialize_i8(self, v: i8) -> Result<S::Ok, S::Error> {
        self.0.serialize_i8(v)
    }
    fn serialize_i16(self, v: i16) -> Result<S::Ok, S::Error> {
        self.0.serialize_i16(v)
    }
    fn serialize_i32(self, v: i32) -> Result<S::Ok, S::Error> {
        self.0.serialize_i32(v)
    }
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.0.serialize_i64(v)
    }
    fn serialize_u8(self, v: u8) -> Result<S::Ok, S::Error> {
        self.0.serialize_u8(v)
    }
    fn serialize_u16(self, v: u16) -> Result<S::Ok, S::Error> {
        self.0.serialize_u16(v)
    }
    fn serialize_u32(self, v: u32) -> Result<S::Ok, S::Error> {
        self.0.serialize_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.0.serialize_u64(v)
    }
    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        self.0.serialize_f32(v)
    }
    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(v)
    }
    fn serialize_char(self, v: char) -> Result<S::Ok, S::Error> {
        self.0.serialize_char(v)
    }
    fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
        self.0.serialize_str(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<S::Ok, S::Error> {
        self.0.serialize_bytes(v)
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Wide(value))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Wide(value))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Wide(value))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(WideCompound)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(WideCompound)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(WideCompound)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        let compound = self.0.serialize_tuple_variant(name, index, variant, len);
        compound.map(WideCompound)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(WideCompound)
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(WideCompound)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        let compound = self.0.serialize_struct_variant(name, index, variant, len);
        compound.map(WideCompound)
    }
    fn collect_str<T: fmt::Display + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.collect_str(value)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

impl<C: ser::SerializeSeq> ser::SerializeSeq for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
        self.0.serialize_element(&Wide(value))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeTuple> ser::SerializeTuple for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
        self.0.serialize_element(&Wide(value))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeTupleStruct> ser::SerializeTupleStruct for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
        self.0.serialize_field(&Wide(value))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeTupleVariant> ser::SerializeTupleVariant for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
        self.0.serialize_field(&Wide(value))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeMap> ser::SerializeMap for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), C::Error> {
        self.0.serialize_key(&Wide(key))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
        self.0.serialize_value(&Wide(value))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeStruct> ser::SerializeStruct for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), C::Error> {
        self.0.serialize_field(key, &Wide(value))
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), C::Error> {
        self.0.skip_field(key)
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeStructVariant> ser::SerializeStructVariant for WideCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), C::Error> {
        self.0.serialize_field(key, &Wide(value))
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), C::Error> {
        self.0.skip_field(key)
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}
