//! `Describe`, written by the `Encode` derive: the JSON serde's derives make of the same
//! fields, in serde's default mapping (a named struct an object, a newtype its field, a tuple
//! struct an array, a unit struct `null`, an enum externally tagged), with the
//! `#[serde(...)]` options that rename or skip mirrored and the others described as any value.
//! The type's, fields' and variants' documentation comes along.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Attribute, Expr, ExprLit, Fields, Ident, Lit, LitStr, Meta, Path, Variant, parse_quote};

use crate::serde_attr::{Case, Serde};
use crate::shape::{Body, Shape};

/// The `Describe` impl of `shape`.
pub(crate) fn expand(shape: &Shape<'_>) -> TokenStream {
    let codec = &shape.codec;
    let ident = shape.ident;
    let generics = shape.bounded(|param| parse_quote!(#param: #codec::Describe));
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, type_generics, _) = shape.generics.split_for_impl();
    let name = ident.unraw().to_string();
    let doc = doc(shape.attrs);
    let body = body(shape);
    quote! {
        #[automatically_derived]
        impl #impl_generics #codec::Describe for #ident #type_generics #where_clause {
            fn describe(definitions: &mut #codec::Definitions) -> #codec::JsonShape {
                definitions.define::<Self>(#name, #doc, |__definitions| #body)
            }
        }
    }
}

/// The expression of the type's shape (`__definitions` in scope).
fn body(shape: &Shape<'_>) -> TokenStream {
    let codec = &shape.codec;
    let serde = Serde::read(shape.attrs);
    if let Some(option) = unknown(shape, &serde) {
        return any(codec, shape.ident, &option);
    }
    match shape.body {
        Body::Struct(fields) if serde.transparent => transparent(codec, shape.ident, fields),
        Body::Struct(fields) => content(codec, fields, &serde, serde.rename_all),
        Body::Enum(variants) => enum_body(codec, variants, &serde),
    }
}

/// The first serde option of the type that makes its whole shape unknown: one of the type's
/// or of a variant's not mirrored, `flatten` on a field, any option on a tuple's field
/// (skipping one shifts the others).
fn unknown(shape: &Shape<'_>, serde: &Serde) -> Option<String> {
    let fields_unknown = |fields: &Fields| {
        fields.iter().find_map(|field| {
            let serde = Serde::read(&field.attrs);
            let flatten = serde.unknown.as_deref() == Some("flatten");
            let positional = field.ident.is_none() && serde != Serde::default();
            match (flatten, positional) {
                (true, _) => Some("flatten".to_owned()),
                (false, true) => Some("an option on a positional field".to_owned()),
                (false, false) => None,
            }
        })
    };
    if let Some(option) = &serde.unknown {
        return Some(option.clone());
    }
    match shape.body {
        Body::Struct(fields) => fields_unknown(fields),
        Body::Enum(variants) => variants.iter().find_map(|variant| {
            Serde::read(&variant.attrs)
                .unknown
                .or_else(|| fields_unknown(&variant.fields))
        }),
    }
}

/// `JsonShape::Any`, saying which option of `ident`'s serde attributes is not described.
fn any(codec: &Path, ident: &Ident, option: &str) -> TokenStream {
    let why = LitStr::new(
        &format!("{ident}: serde's `{option}` is not described"),
        ident.span(),
    );
    quote! { #codec::JsonShape::Any(#why) }
}

/// A `#[serde(transparent)]` struct: its one field not skipped.
fn transparent(codec: &Path, ident: &Ident, fields: &Fields) -> TokenStream {
    let kept: Vec<_> = fields
        .iter()
        .filter(|field| !Serde::read(&field.attrs).skip)
        .collect();
    match kept.as_slice() {
        [field] => {
            let ty = &field.ty;
            quote! { <#ty as #codec::Describe>::describe(__definitions) }
        }
        _ => any(codec, ident, "transparent"),
    }
}

/// The JSON of a struct's, or a variant's, fields: an object (named), the field (one
/// positional, a newtype), an array (other positional), `null` (none).
fn content(codec: &Path, fields: &Fields, serde: &Serde, case: Option<Case>) -> TokenStream {
    match fields {
        Fields::Named(named) => {
            let properties = named
                .named
                .iter()
                .filter_map(|field| property(codec, field, serde.optional, case));
            // A field under an option not mirrored may take another key (`alias`): the
            // object is then left open, never stricter than serde.
            let unknown = named
                .named
                .iter()
                .any(|field| Serde::read(&field.attrs).unknown.is_some());
            let closed = serde.closed && !unknown;
            quote! { #codec::JsonShape::object(::std::vec![#( #properties ),*], #closed) }
        }
        Fields::Unnamed(unnamed) if unnamed.unnamed.len() == 1 => {
            let ty = &unnamed.unnamed[0].ty;
            quote! { <#ty as #codec::Describe>::describe(__definitions) }
        }
        Fields::Unnamed(unnamed) => {
            let types = unnamed.unnamed.iter().map(|field| &field.ty);
            quote! {
                #codec::JsonShape::Tuple(::std::vec![
                    #( <#types as #codec::Describe>::describe(__definitions) ),*
                ])
            }
        }
        Fields::Unit => quote! { #codec::JsonShape::Null },
    }
}

/// One named field's key, unless serde skips it; its shape is any value under an option not
/// mirrored (`with`, `alias`, ...), and then the key is optional.
fn property(
    codec: &Path,
    field: &syn::Field,
    all_optional: bool,
    case: Option<Case>,
) -> Option<TokenStream> {
    let serde = Serde::read(&field.attrs);
    if serde.skip {
        return None;
    }
    let ident = field
        .ident
        .as_ref()
        .expect("a named field")
        .unraw()
        .to_string();
    let name = serde
        .rename
        .clone()
        .unwrap_or_else(|| case.map_or_else(|| ident.clone(), |case| case.field(&ident)));
    let doc = doc(&field.attrs);
    let ty = &field.ty;
    let (shape, optional) = match &serde.unknown {
        Some(option) => {
            let why = format!("field {ident}: serde's `{option}` is not described");
            (quote! { #codec::JsonShape::Any(#why) }, true)
        }
        None => (
            quote! { <#ty as #codec::Describe>::describe(__definitions) },
            serde.optional || all_optional,
        ),
    };
    Some(quote! { #codec::Property::new(#name, #doc, #shape, #optional) })
}

/// An enum's variants, externally tagged, less those serde skips.
fn enum_body(
    codec: &Path,
    variants: &Punctuated<Variant, Comma>,
    container: &Serde,
) -> TokenStream {
    let each = variants.iter().filter_map(|variant| {
        let serde = Serde::read(&variant.attrs);
        if serde.skip {
            return None;
        }
        let ident = variant.ident.unraw().to_string();
        let name = serde.rename.clone().unwrap_or_else(|| {
            container
                .rename_all
                .map_or_else(|| ident.clone(), |case| case.variant(&ident))
        });
        let fields_case = serde.rename_all.or(container.rename_all_fields);
        let content = match &variant.fields {
            Fields::Unit => quote! { ::core::option::Option::None },
            fields @ (Fields::Named(_) | Fields::Unnamed(_)) => {
                let content = content(codec, fields, container, fields_case);
                quote! { ::core::option::Option::Some(#content) }
            }
        };
        let doc = doc(&variant.attrs);
        Some(quote! { #codec::Variant { name: #name, content: #content, doc: #doc } })
    });
    quote! { #codec::JsonShape::Variants(::std::vec![#( #each ),*]) }
}

/// The documentation among `attrs` (`///` lines), as one text.
fn doc(attrs: &[Attribute]) -> String {
    let mut lines = Vec::new();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("doc")) {
        // `if let` rather than a match: `Meta` and `Expr` are syn's, with more to come.
        if let Meta::NameValue(pair) = &attr.meta
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(text),
                ..
            }) = &pair.value
        {
            let line = text.value();
            lines.push(line.strip_prefix(' ').unwrap_or(&line).to_owned());
        }
    }
    lines.join("\n").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::DeriveInput;

    fn expanded(input: DeriveInput) -> String {
        expand(&Shape::read(&input).unwrap()).to_string()
    }

    /// Proves the names are serde's (renamed, cased, raw identifiers unraw), skipped parts are
    /// left out, documentation comes along, and an option not mirrored makes the shape any
    /// value.
    #[test]
    fn mirrors_serde() {
        let renamed = expanded(parse_quote! {
            /// An order.
            ///   Indented.
            #[serde(rename_all = "camelCase")]
            struct Order {
                /// Its price.
                unit_price: u64,
                #[serde(rename = "qty")]
                quantity: u32,
                #[serde(skip)]
                cache: u8,
                r#type: u8,
            }
        });
        assert!(renamed.contains(r#""An order.\n  Indented.""#), "{renamed}");
        assert!(renamed.contains(r#"Property :: new ("unitPrice" , "Its price.""#));
        assert!(renamed.contains(r#"Property :: new ("qty""#), "{renamed}");
        assert!(renamed.contains(r#"Property :: new ("type""#), "{renamed}");
        assert!(!renamed.contains("cache"), "{renamed}");
        let cased = expanded(parse_quote! {
            #[serde(rename_all = "snake_case", rename_all_fields = "UPPERCASE")]
            enum E { #[serde(skip)] Hidden, BigOne { field_a: u8 } }
        });
        assert!(cased.contains(r#"name : "big_one""#), "{cased}");
        assert!(cased.contains(r#""FIELD_A""#), "{cased}");
        assert!(!cased.contains("Hidden"), "{cased}");
        let tagged = expanded(parse_quote! {
            #[serde(tag = "type")]
            enum E { A }
        });
        assert!(
            tagged.contains("E: serde's `tag` is not described"),
            "{tagged}"
        );
        let positional = expanded(parse_quote! { struct P(#[serde(skip)] u8, u8); });
        assert!(positional.contains("an option on a positional field"));
        let with = expanded(parse_quote! { struct W { #[serde(with = "m")] a: u8 } });
        assert!(
            with.contains(r#"JsonShape :: Any ("field a: serde's `with`"#),
            "{with}"
        );
        assert!(with.contains(", true)"), "optional: {with}");
    }
}
