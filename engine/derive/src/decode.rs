//! `Decode`: the reverse of `encode`; an unknown variant index is
//! `DecodeError::UnexpectedVariant`, with the last index and the type's name.

use proc_macro2::TokenStream;
use quote::quote;
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
    quote! {
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

/// The function body: `Ok(Self { .. })` for a struct, a match on the variant index for an enum.
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
    let arms = variants.iter().enumerate().map(|(position, variant)| {
        // Shape::read checked that the count fits a u32.
        let index = u32::try_from(position).expect("variant count checked");
        let name = &variant.ident;
        let value = shape::construct(quote!(Self::#name), &variant.fields, field);
        quote! { #index => ::core::result::Result::Ok(#value) }
    });
    let max = u32::try_from(variants.len() - 1).expect("variant count checked");
    quote! {
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
