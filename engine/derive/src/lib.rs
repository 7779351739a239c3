//! The engine's `Encode` and `Decode` derives.
//!
//! Handler types derive them through `engine::codec`, without naming the codec crate (the
//! example is tested in `engine::codec`'s documentation):
//!
//! ```text
//! use engine::codec::{Decode, Encode};
//!
//! #[derive(Encode, Decode)]
//! struct Account {
//!     balance: u64,
//! }
//! ```
//!
//! The impls they generate are `net::codec`'s `Encode` and `Decode<__Context>` (the project's
//! own format, `notes/decisions/encoding.md`), reached through `::engine::codec` (or the path
//! given by `#[codec(crate = "path")]`), with one bound per type parameter: fields in
//! declaration order; an enum's variant tag, as a `u32` before the variant's fields. A codec
//! change rewrites this crate's output; the types that derive it do not change.
//!
//! The tag is the variant's position, unless the variants carry `#[codec(tag = N)]`, where `N`
//! is an integer literal or a path to a `u32` const. Then every variant must carry one (tags
//! are all explicit or all positions: a variant added without one is a compile error, not a
//! silent position), and no two may be equal (a compile error: at expansion for literals, by
//! a const assertion for consts). Explicit tags let a type that goes on the wire keep its
//! bytes whatever the order of its variants in the source; handler types need not use them.
//!
//! `Encode` also writes the type's `Describe` (`net::codec`'s): the JSON that serde's derives
//! make of the same fields, for the gateway's schema, so that a handler author writes nothing
//! for it. It mirrors serde's default mapping and the `#[serde(...)]` options that rename or
//! skip (`rename`, `rename_all`, `rename_all_fields`, `skip`, `default`,
//! `skip_serializing_if`, `deny_unknown_fields`, `transparent`); under any other option that
//! changes the JSON (`tag`, `untagged`, `flatten`, `with`, ...) the part it touches is
//! described as any value, never as a shape serde does not write. A hand-written `Serialize`
//! it cannot see (`notes/decisions/gateway.md`, "The schema").
//!
//! Supported: structs (named, tuple, unit) and enums (unit, tuple and struct variants, and none),
//! generic over lifetimes, types and constants. Not supported: unions. bincode's attribute
//! (`#[bincode(...)]`, from the project's codec before its own) is a compile error naming
//! `#[codec(crate = "path")]`, never silently ignored.

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod attr;
mod decode;
mod describe;
mod encode;
mod serde_attr;
mod shape;

/// Derives the codec's `Encode` for a struct or an enum, and its `Describe`.
// `bincode` is a helper attribute only so that the derive can refuse it with its own message
// (a stale one would otherwise be "cannot find attribute", naming nothing to write instead).
#[proc_macro_derive(Encode, attributes(codec, bincode))]
pub fn derive_encode(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    shape::Shape::read(&input)
        .map(|shape| {
            let mut impls = encode::expand(&shape);
            impls.extend(describe::expand(&shape));
            impls
        })
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives the codec's `Decode` for a struct or an enum.
#[proc_macro_derive(Decode, attributes(codec, bincode))]
pub fn derive_decode(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    shape::Shape::read(&input)
        .map(|shape| decode::expand(&shape))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
