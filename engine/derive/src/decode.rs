//! `Decode` and `BorrowDecode`: the reverse of `encode`; an unknown variant index is bincode's
//! `DecodeError::UnexpectedVariant`, with the allowed indexes and the type's name.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Path, Variant, parse_quote};

use crate::shape::{self, Body, Shape};

/// The `Decode<__Context>` and `BorrowDecode<'__de, __Context>` impls of `shape`.
pub(crate) fn expand(shape: &Shape<'_>) -> TokenStream {
    let decode = decode_impl(shape);
    let borrow_decode = borrow_decode_impl(shape);
    quote! { #decode #borrow_decode }
}

fn decode_impl(shape: &Shape<'_>) -> TokenStream {
    let codec = &shape.codec;
    let ident = shape.ident;
    let mut generics = shape.bounded(|param| parse_quote!(#param: #codec::de::Decode<__Context>));
    generics.params.push(parse_quote!(__Context));
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, type_generics, _) = shape.generics.split_for_impl();
    let field = quote! { #codec::de::Decode::<__Context>::decode(decoder)? };
    let body = body(shape, &field);
    quote! {
        #[automatically_derived]
        impl #impl_generics #codec::de::Decode<__Context> for #ident #type_generics #where_clause {
            fn decode<__D: #codec::de::Decoder<Context = __Context>>(
                decoder: &mut __D,
            ) -> ::core::result::Result<Self, #codec::error::DecodeError> {
                #body
            }
        }
    }
}

fn borrow_decode_impl(shape: &Shape<'_>) -> TokenStream {
    let codec = &shape.codec;
    let ident = shape.ident;
    let mut generics =
        shape.bounded(|param| parse_quote!(#param: #codec::de::BorrowDecode<'__de, __Context>));
    let outlives: Vec<syn::WherePredicate> = shape
        .generics
        .lifetimes()
        .map(|param| {
            let lifetime = &param.lifetime;
            parse_quote!('__de: #lifetime)
        })
        .collect();
    generics.make_where_clause().predicates.extend(outlives);
    generics.params.insert(0, parse_quote!('__de));
    generics.params.push(parse_quote!(__Context));
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, type_generics, _) = shape.generics.split_for_impl();
    let field = quote! {
        #codec::de::BorrowDecode::<'__de, __Context>::borrow_decode(decoder)?
    };
    let body = body(shape, &field);
    quote! {
        #[automatically_derived]
        impl #impl_generics #codec::de::BorrowDecode<'__de, __Context>
            for #ident #type_generics #where_clause
        {
            fn borrow_decode<__D: #codec::de::BorrowDecoder<'__de, Context = __Context>>(
                decoder: &mut __D,
            ) -> ::core::result::Result<Self, #codec::error::DecodeError> {
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
    if variants.is_empty() {
        return quote! {
            ::core::result::Result::Err(#codec::error::DecodeError::EmptyEnum {
                type_name: ::core::any::type_name::<Self>(),
            })
        };
    }
    let arms = variants.iter().enumerate().map(|(position, variant)| {
        // Shape::read checked that the count fits a u32.
        let index = u32::try_from(position).expect("variant count checked");
        let name = &variant.ident;
        let value = shape::construct(quote!(Self::#name), &variant.fields, field);
        quote! { #index => ::core::result::Result::Ok(#value) }
    });
    let type_name = shape.ident.to_string();
    let allowed = allowed(codec, variants);
    quote! {
        let variant_index = <u32 as #codec::de::Decode<__Context>>::decode(decoder)?;
        match variant_index {
            #( #arms, )*
            variant => ::core::result::Result::Err(#codec::error::DecodeError::UnexpectedVariant {
                found: variant,
                type_name: #type_name,
                allowed: &#allowed,
            }),
        }
    }
}

/// The indexes an error names as allowed: a range, or (as bincode's derive does when a variant
/// has an explicit discriminant) the list of them. The indexes are positions either way.
fn allowed(codec: &Path, variants: &Punctuated<Variant, Comma>) -> TokenStream {
    let count = u32::try_from(variants.len()).expect("variant count checked");
    if variants
        .iter()
        .any(|variant| variant.discriminant.is_some())
    {
        let indexes = 0..count;
        quote! { #codec::error::AllowedEnumVariants::Allowed(&[ #( #indexes ),* ]) }
    } else {
        let max = Literal::u32_unsuffixed(count - 1);
        quote! { #codec::error::AllowedEnumVariants::Range { min: 0, max: #max } }
    }
}
