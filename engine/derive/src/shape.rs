//! What the derives read from a type: its name, generics, codec path and fields.

use proc_macro2::{Ident, TokenStream};
use quote::quote;
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Data, DeriveInput, Fields, Generics, Path, Variant, WherePredicate};

use crate::attr;

/// A struct's fields or an enum's variants.
pub(crate) enum Body<'a> {
    Struct(&'a Fields),
    Enum(&'a Punctuated<Variant, Comma>),
}

/// A type to derive for.
pub(crate) struct Shape<'a> {
    pub ident: &'a Ident,
    pub generics: &'a Generics,
    /// The path of the codec module (`net::codec` as re-exported), through which the impls are
    /// written.
    pub codec: Path,
    pub body: Body<'a>,
}

impl<'a> Shape<'a> {
    /// Reads `input`; a union, an attribute this derive does not implement or more variants
    /// than a `u32` numbers are errors.
    pub(crate) fn read(input: &'a DeriveInput) -> syn::Result<Self> {
        let codec = attr::codec_path(&input.attrs)?;
        let body = match &input.data {
            Data::Struct(data) => Body::Struct(&data.fields),
            Data::Enum(data) => Body::Enum(&data.variants),
            Data::Union(data) => {
                return Err(syn::Error::new_spanned(
                    data.union_token,
                    "engine's derive does not encode unions",
                ));
            }
        };
        let shape = Shape {
            ident: &input.ident,
            generics: &input.generics,
            codec,
            body,
        };
        shape.check_inner()?;
        Ok(shape)
    }

    fn check_inner(&self) -> syn::Result<()> {
        match self.body {
            Body::Struct(fields) => fields.iter().try_for_each(|f| attr::refuse_inner(&f.attrs)),
            Body::Enum(variants) => {
                if u32::try_from(variants.len()).is_err() {
                    return Err(syn::Error::new_spanned(
                        self.ident,
                        "more variants than a u32 index numbers",
                    ));
                }
                variants.iter().try_for_each(|variant| {
                    attr::refuse_inner(&variant.attrs)?;
                    variant
                        .fields
                        .iter()
                        .try_for_each(|f| attr::refuse_inner(&f.attrs))
                })
            }
        }
    }

    /// The type's generics with `bound(T)` added to the where clause for each type parameter `T`,
    /// as bincode's derive does.
    pub(crate) fn bounded(&self, bound: impl Fn(&Ident) -> WherePredicate) -> Generics {
        let mut generics = self.generics.clone();
        let predicates: Vec<WherePredicate> = self
            .generics
            .type_params()
            .map(|p| bound(&p.ident))
            .collect();
        generics.make_where_clause().predicates.extend(predicates);
        generics
    }
}

/// `Self { a: <field>, b: <field> }` (or `Self::Variant { 0: <field>, ... }`): `fields` built in
/// order, each by `field`, in braces whatever the kind of fields (as bincode's derive does).
pub(crate) fn construct(path: TokenStream, fields: &Fields, field: &TokenStream) -> TokenStream {
    let members = fields.members();
    quote! { #path { #( #members: #field, )* } }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;
    use syn::parse_quote;

    fn error(input: DeriveInput) -> String {
        match Shape::read(&input) {
            Ok(_) => panic!("accepted {}", input.to_token_stream()),
            Err(error) => error.to_string(),
        }
    }

    /// Proves the codec's path is the engine's unless `#[codec(crate)]` names another, and that
    /// bincode's `crate` is ignored.
    #[test]
    fn codec_path() {
        let path = |input: DeriveInput| Shape::read(&input).unwrap().codec.to_token_stream();
        let default = path(parse_quote! {
            #[bincode(crate = "somewhere::else")]
            struct A(u8);
        });
        assert_eq!(default.to_string(), ":: engine :: codec");
        let named = path(parse_quote! {
            #[codec(crate = "crate::codec")]
            enum B { One }
        });
        assert_eq!(named.to_string(), "crate :: codec");
    }

    /// Proves unions, bincode's other options and field or variant attributes are refused, not
    /// silently ignored.
    #[test]
    fn refuses_what_it_does_not_implement() {
        assert!(error(parse_quote! { union U { a: u8 } }).contains("unions"));
        let bounds = error(parse_quote! {
            #[bincode(bounds = "T: Clone")]
            struct A<T>(T);
        });
        assert!(bounds.contains("accepts only `crate`"), "{bounds}");
        let field = error(parse_quote! { struct A(#[bincode(with_serde)] u8); });
        assert!(field.contains("no attribute on a field"), "{field}");
        let variant = error(parse_quote! { enum E { #[codec(skip)] One } });
        assert!(
            variant.contains("no attribute on a field or a variant"),
            "{variant}"
        );
        let unknown = error(parse_quote! {
            #[codec(path = "x")]
            struct A;
        });
        assert!(unknown.contains("expected `crate"), "{unknown}");
        let twice = error(parse_quote! {
            #[codec(crate = "a", crate = "b")]
            struct A;
        });
        assert!(twice.contains("twice"), "{twice}");
    }
}
