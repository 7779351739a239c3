//! `Encode`: fields in declaration order; an enum's variant tag (a `u32`: the variant's
//! `#[codec(tag = N)]`, or else its position) before the variant's fields.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Fields, Path, Variant, parse_quote};

use crate::shape::{Body, Shape};

/// The `Encode` impl of `shape`.
pub(crate) fn expand(shape: &Shape<'_>) -> TokenStream {
    let codec = &shape.codec;
    let ident = shape.ident;
    let generics = shape.bounded(|param| parse_quote!(#param: #codec::Encode));
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, type_generics, _) = shape.generics.split_for_impl();
    let body = match shape.body {
        Body::Struct(fields) => struct_body(codec, fields),
        Body::Enum(variants) => enum_body(shape, variants),
    };
    let distinct = shape.distinct_tags_check();
    quote! {
        #distinct
        #[automatically_derived]
        impl #impl_generics #codec::Encode for #ident #type_generics #where_clause {
            #[inline]
            fn encode<__W: #codec::Writer + ?::core::marker::Sized>(&self, out: &mut __W) {
                #body
            }
        }
    }
}

fn struct_body(codec: &Path, fields: &Fields) -> TokenStream {
    let members = fields.members();
    quote! {
        #( #codec::Encode::encode(&self.#members, out); )*
    }
}

fn enum_body(shape: &Shape<'_>, variants: &Punctuated<Variant, Comma>) -> TokenStream {
    let codec = &shape.codec;
    if variants.is_empty() {
        return quote! { match *self {} };
    }
    let arms = variants.iter().enumerate().map(|(position, variant)| {
        let tag = shape.tag(position);
        let name = &variant.ident;
        let bindings: Vec<_> = (0..variant.fields.len())
            .map(|i| format_ident!("__field_{}", i))
            .collect();
        let pattern = match &variant.fields {
            Fields::Named(named) => {
                let names = named.named.iter().map(|field| &field.ident);
                quote! { Self::#name { #( #names: #bindings ),* } }
            }
            Fields::Unnamed(_) => quote! { Self::#name( #( #bindings ),* ) },
            Fields::Unit => quote! { Self::#name },
        };
        quote! {
            #pattern => {
                <u32 as #codec::Encode>::encode(&(#tag), out);
                #( #codec::Encode::encode(#bindings, out); )*
            }
        }
    });
    quote! { match self { #( #arms, )* } }
}
