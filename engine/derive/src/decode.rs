//! `Decode`: the reverse of `encode`; an unknown variant tag is
//! `DecodeError::UnexpectedVariant`, with the largest tag and the type's name.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Variant, parse_quote};

use crate::shape::{self, Body, Shape};

/// The `Decode<__Context>` impl of `shape`.
pub(crate) fn expand(shape: &Shape<'_>) -> TokenStream {
    let codec = &shape.codec;
    let ident = shape.ident;
    let mut generics = shape.bounded(|param| parse_quote!(#param: #codec::Decode<__Context>));
    generics.params.push(parse_quote!(__Context));
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, type_generics, _) = shape.generics.split_for_impl();
    let field = quote! { #codec::Decode::<__Context>::decode(reader)? };
    let body = body(shape, &field);
    let distinct = shape.distinct_tags_check();
    quote! {
        #distinct
        #[automatically_derived]
        impl #impl_generics #codec::Decode<__Context> for #ident #type_generics #where_clause {
            #[inline]
            fn decode(
                reader: &mut #codec::Reader<'_>,
            ) -> ::core::result::Result<Self, #codec::DecodeError> {
                #body
            }
        }
    }
}

/// The function body: `Ok(Self { .. })` for a struct, a match on the variant tag for an enum.
fn body(shape: &Shape<'_>, field: &TokenStream) -> TokenStream {
    match shape.body {
        Body::Struct(fields) => {
            let value = shape::construct(quote!(Self), fields, field);
            quote! { ::core::result::Result::Ok(#value) }
        }
        Body::Enum(variants) => enum_body(shape, variants, field),
    }
}

fn enum_body(
    shape: &Shape<'_>,
    variants: &Punctuated<Variant, Comma>,
    field: &TokenStream,
) -> TokenStream {
    let codec = &shape.codec;
    let type_name = shape.ident.to_string();
    if variants.is_empty() {
        return quote! {
            ::core::result::Result::Err(#codec::DecodeError::EmptyEnum { type_name: #type_name })
        };
    }
    let Patterns { consts, tags, max } = patterns(shape, variants.len());
    let arms = variants.iter().zip(&tags).map(|(variant, tag)| {
        let name = &variant.ident;
        let value = shape::construct(quote!(Self::#name), &variant.fields, field);
        quote! { #tag => ::core::result::Result::Ok(#value) }
    });
    quote! {
        #consts
        let variant_index = <u32 as #codec::Decode<__Context>>::decode(reader)?;
        match variant_index {
            #( #arms, )*
            found => ::core::result::Result::Err(#codec::DecodeError::UnexpectedVariant {
                type_name: #type_name,
                found,
                max: #max,
            }),
        }
    }
}

/// What the decoder matches the tag read against.
struct Patterns {
    /// Items declared before the match.
    consts: TokenStream,
    /// One pattern per variant, in declaration order.
    tags: Vec<TokenStream>,
    /// The largest tag, for the error's message.
    max: TokenStream,
}

/// The positions as literals; or explicit tags as consts declared in the function, so that a
/// tag that names a const is matched as that const (and two alike are an unreachable pattern).
fn patterns(shape: &Shape<'_>, count: usize) -> Patterns {
    let Some(explicit) = &shape.tags else {
        // Shape::read checked that the count fits a u32.
        let max = u32::try_from(count - 1).expect("variant count checked");
        return Patterns {
            consts: TokenStream::new(),
            tags: (0..count).map(|position| shape.tag(position)).collect(),
            max: quote! { #max },
        };
    };
    let names: Vec<_> = (0..count)
        .map(|position| format_ident!("__CODEC_TAG_{}", position))
        .collect();
    Patterns {
        consts: quote! { #( const #names: u32 = #explicit; )* },
        tags: names.iter().map(|name| quote! { #name }).collect(),
        // Computed only on the error path.
        max: quote! { [ #( #names ),* ].into_iter().max().unwrap_or(0) },
    }
}
