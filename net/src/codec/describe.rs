//! [`Describe`]: the JSON a type becomes under serde's derives, as a tree ([`JsonShape`]) that
//! the engine's gateway turns into a JSON Schema. The `Encode` derive writes the impl from the
//! same fields it encodes, mirroring serde's default mapping (externally tagged enums, a
//! newtype as its field, a unit struct as `null`) and the `#[serde(...)]` attributes it
//! models; so a handler type that derives `Encode` and serde's derives is described without
//! a line of its author's. The tree is plain data: this crate needs no JSON library for it.
//!
//! What the derive cannot see, a hand-written `Serialize`, is not described right: such a type
//! implements [`Describe`] by hand (or says [`JsonShape::Any`]); `notes/decisions/gateway.md`
//! has the rule and the test that catches a mismatch.

use std::collections::BTreeMap;

/// The JSON form of a type under serde (its `Serialize`, and what its `Deserialize` takes).
pub trait Describe {
    /// The type's shape; a type with a name of its own (one that derives) is defined once in
    /// `definitions` and referred to by name.
    fn describe(definitions: &mut Definitions) -> JsonShape;
}

/// A JSON value's shape: the part of JSON Schema that serde's default mapping needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonShape {
    /// Any value: a type or field whose JSON the derive cannot know, and why.
    Any(&'static str),
    /// `null`: `()`, a unit struct, `PhantomData`.
    Null,
    /// `true` or `false`.
    Bool,
    /// An integer that fits `bits` bits, signed or not.
    Integer {
        /// True for `i8` to `i128`.
        signed: bool,
        /// 8 to 128.
        bits: u32,
    },
    /// Any number (`f32`, `f64`).
    Number,
    /// A string; of exactly `chars` characters when given (a `char` is one).
    String {
        /// The exact count of characters, if fixed.
        chars: Option<u32>,
    },
    /// An array of `items`; of exactly `len` of them when given (`[T; N]`).
    Array {
        /// Every element's shape.
        items: Box<JsonShape>,
        /// The exact count of elements, if fixed.
        len: Option<u64>,
    },
    /// An array of exactly these elements, in order (a tuple, a tuple struct or variant).
    Tuple(Vec<JsonShape>),
    /// The shape or `null` (an `Option`).
    Nullable(Box<JsonShape>),
    /// An object (a struct or variant with named fields).
    Object(Object),
    /// An enum, externally tagged: a unit variant is its name as a string; any other is an
    /// object with one key, the variant's name, whose value is the variant's content. No
    /// variant (an empty enum) is no value at all.
    Variants(Vec<Variant>),
    /// The type defined by this name in the [`Definitions`].
    Ref(String),
}

impl JsonShape {
    /// The shape of an object with `properties`; `closed` when it takes no other key
    /// (`#[serde(deny_unknown_fields)]`).
    pub fn object(properties: Vec<Property>, closed: bool) -> JsonShape {
        JsonShape::Object(Object { properties, closed })
    }
}

/// A JSON object's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// The keys it may have, in the fields' order.
    pub properties: Vec<Property>,
    /// True when a key not in `properties` is refused; serde's default ignores one.
    pub closed: bool,
}

/// One key of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    /// The key (the field's name as serde writes it).
    pub name: &'static str,
    /// Its value's shape.
    pub shape: JsonShape,
    /// True when a value must have the key.
    pub required: bool,
    /// The field's documentation, or empty.
    pub doc: &'static str,
}

impl Property {
    /// A key; required unless `optional` (a serde default, a field serde may skip) or its value
    /// is nullable: serde's derive reads a missing `Option` field as `None`.
    pub fn new(name: &'static str, doc: &'static str, shape: JsonShape, optional: bool) -> Self {
        let required = !optional && !matches!(shape, JsonShape::Nullable(_));
        Property {
            name,
            shape,
            required,
            doc,
        }
    }
}

/// One variant of an enum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The variant's name as serde writes it.
    pub name: &'static str,
    /// Its content's shape; `None` for a unit variant (written as its name alone).
    pub content: Option<JsonShape>,
    /// The variant's documentation, or empty.
    pub doc: &'static str,
}

/// A named type's shape and documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    /// The type's shape.
    pub shape: JsonShape,
    /// The type's documentation, or empty.
    pub doc: &'static str,
}

/// What a name in [`Definitions`] holds.
#[derive(Clone, Debug)]
enum Slot {
    /// Taken by the caller for a schema of its own.
    Reserved,
    /// A type whose shape is being built (a recursive type refers to itself meanwhile).
    Building,
    Defined(Definition),
}

/// The named types met while describing, each under a name of its own (a map ordered by name,
/// so that a document is the same bytes on every run).
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    /// Each type's name, by the type's full path (`std::any::type_name`).
    names: BTreeMap<&'static str, String>,
    slots: BTreeMap<String, Slot>,
}

impl Definitions {
    /// No definitions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `name` for the caller's own schema: a type of that name gets a longer one.
    pub fn reserve(&mut self, name: &str) {
        self.slots.entry(name.to_owned()).or_insert(Slot::Reserved);
    }

    /// A reference to `T`'s definition, built by `build` the first time `T` is met; named
    /// `ident` unless another type has it, then by its path (`bank.BankCommand`).
    pub fn define<T: ?Sized>(
        &mut self,
        ident: &'static str,
        doc: &'static str,
        build: impl FnOnce(&mut Self) -> JsonShape,
    ) -> JsonShape {
        let id = std::any::type_name::<T>();
        if let Some(name) = self.names.get(id) {
            return JsonShape::Ref(name.clone());
        }
        let name = self.free_name(ident, id);
        self.names.insert(id, name.clone());
        self.slots.insert(name.clone(), Slot::Building);
        let shape = build(self);
        let defined = Slot::Defined(Definition { shape, doc });
        self.slots.insert(name.clone(), defined);
        JsonShape::Ref(name)
    }

    /// `ident` if no type has it, else the type's path made a name, else that with a number.
    fn free_name(&self, ident: &str, id: &str) -> String {
        if !self.slots.contains_key(ident) {
            return ident.to_owned();
        }
        let path: String = id
            .replace("::", ".")
            .chars()
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
                _ => '_',
            })
            .collect();
        (1u32..)
            .map(|n| match n {
                1 => path.clone(),
                n => format!("{path}_{n}"),
            })
            .find(|name| !self.slots.contains_key(name))
            .expect("some number is free")
    }

    /// The definition named `name`, once built.
    pub fn get(&self, name: &str) -> Option<&Definition> {
        match self.slots.get(name) {
            Some(Slot::Defined(definition)) => Some(definition),
            Some(Slot::Reserved | Slot::Building) | None => None,
        }
    }

    /// Every definition built, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Definition)> {
        self.slots.iter().filter_map(|(name, slot)| match slot {
            Slot::Defined(definition) => Some((name.as_str(), definition)),
            Slot::Reserved | Slot::Building => None,
        })
    }
}

macro_rules! integers {
    ($($ty:ty: $signed:expr),*) => {$(
        impl Describe for $ty {
            fn describe(_: &mut Definitions) -> JsonShape {
                JsonShape::Integer { signed: $signed, bits: <$ty>::BITS }
            }
        }
    )*};
}

integers!(u8: false, u16: false, u32: false, u64: false, u128: false);
integers!(i8: true, i16: true, i32: true, i64: true, i128: true);

/// Serde writes a `usize` as a `u64`, as the codec does.
impl Describe for usize {
    fn describe(_: &mut Definitions) -> JsonShape {
        JsonShape::Integer {
            signed: false,
            bits: u64::BITS,
        }
    }
}

macro_rules! fixed {
    ($($ty:ty => $shape:expr),*) => {$(
        impl Describe for $ty {
            fn describe(_: &mut Definitions) -> JsonShape {
                $shape
            }
        }
    )*};
}

fixed!(
    f32 => JsonShape::Number,
    f64 => JsonShape::Number,
    bool => JsonShape::Bool,
    char => JsonShape::String { chars: Some(1) },
    str => JsonShape::String { chars: None },
    String => JsonShape::String { chars: None },
    () => JsonShape::Null,
    // With the `serde` feature, `bytes` writes them as a sequence of byte values.
    bytes::Bytes => JsonShape::Array { items: Box::new(JsonShape::Integer { signed: false, bits: 8 }), len: None },
    crate::entry::Entry => JsonShape::Any("an entry has no serde form")
);

impl<T: ?Sized> Describe for std::marker::PhantomData<T> {
    fn describe(_: &mut Definitions) -> JsonShape {
        JsonShape::Null
    }
}

impl<T: Describe> Describe for [T] {
    fn describe(definitions: &mut Definitions) -> JsonShape {
        let items = Box::new(T::describe(definitions));
        JsonShape::Array { items, len: None }
    }
}

impl<T: Describe> Describe for Vec<T> {
    fn describe(definitions: &mut Definitions) -> JsonShape {
        <[T]>::describe(definitions)
    }
}

/// Serde writes an array as a tuple: exactly `N` elements.
impl<T: Describe, const N: usize> Describe for [T; N] {
    fn describe(definitions: &mut Definitions) -> JsonShape {
        let items = Box::new(T::describe(definitions));
        JsonShape::Array {
            items,
            len: Some(N as u64),
        }
    }
}

impl<T: Describe> Describe for Option<T> {
    fn describe(definitions: &mut Definitions) -> JsonShape {
        JsonShape::Nullable(Box::new(T::describe(definitions)))
    }
}

impl<T: Describe + ?Sized> Describe for Box<T> {
    fn describe(definitions: &mut Definitions) -> JsonShape {
        T::describe(definitions)
    }
}

impl<T: Describe + ?Sized> Describe for &T {
    fn describe(definitions: &mut Definitions) -> JsonShape {
        T::describe(definitions)
    }
}

macro_rules! tuples {
    ($(($($name:ident),+)),*) => {$(
        impl<$($name: Describe),+> Describe for ($($name,)+) {
            fn describe(definitions: &mut Definitions) -> JsonShape {
                JsonShape::Tuple(vec![$($name::describe(definitions)),+])
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Named;
    mod other {
        pub struct Named;
    }

    fn leaf(_: &mut Definitions) -> JsonShape {
        JsonShape::Null
    }

    /// Proves a type is defined once, a second type of the same name gets its path, and a
    /// reserved name is never a type's.
    #[test]
    fn names_are_unique() {
        let mut definitions = Definitions::new();
        definitions.reserve("Outcome");
        let first = definitions.define::<Named>("Named", "", leaf);
        assert_eq!(first, JsonShape::Ref("Named".into()));
        assert_eq!(definitions.define::<Named>("Named", "", leaf), first);
        let second = definitions.define::<other::Named>("Named", "", leaf);
        let path = "net.codec.describe.tests.other.Named";
        assert_eq!(second, JsonShape::Ref(path.into()));
        let reserved = definitions.define::<u8>("Outcome", "", leaf);
        assert_eq!(reserved, JsonShape::Ref("u8".into()));
        let names: Vec<&str> = definitions.iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["Named", path, "u8"]);
        assert!(definitions.get("Outcome").is_none());
    }

    /// Proves an `Option` field is not required (serde reads its absence as `None`) and that
    /// the standard types have serde's shapes.
    #[test]
    fn standard_shapes() {
        let mut definitions = Definitions::new();
        let maybe = Option::<u8>::describe(&mut definitions);
        assert!(!Property::new("a", "", maybe, false).required);
        assert!(!Property::new("a", "", u8::describe(&mut definitions), true).required);
        assert!(Property::new("a", "", u8::describe(&mut definitions), false).required);
        let pair = <(u16, [i8; 2])>::describe(&mut definitions);
        let bits = |signed, bits| JsonShape::Integer { signed, bits };
        let array = JsonShape::Array {
            items: Box::new(bits(true, 8)),
            len: Some(2),
        };
        assert_eq!(pair, JsonShape::Tuple(vec![bits(false, 16), array]));
        assert_eq!(usize::describe(&mut definitions), bits(false, 64));
        assert_eq!(
            <&str>::describe(&mut definitions),
            String::describe(&mut definitions)
        );
        assert_eq!(definitions.iter().count(), 0);
    }
}
