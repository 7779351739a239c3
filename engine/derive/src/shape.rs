//! What the derives read from a type: its name, generics, codec path, fields and, for an
//! enum, how its variants are tagged.

use proc_macro2::{Ident, TokenStream};
use quote::quote;
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Attribute, Data, DeriveInput, Fields, Generics, LitStr, Path, Variant, WherePredicate};

use crate::attr::{self, Tag};

/// A struct's fields or an enum's variants.
pub(crate) enum Body<'a> {
    Struct(&'a Fields),
    Enum(&'a Punctuated<Variant, Comma>),
}

/// A type to derive for.
pub(crate) struct Shape<'a> {
    pub ident: &'a Ident,
    /// The type's own attributes (its documentation and serde's, for `Describe`).
    pub attrs: &'a [Attribute],
    pub generics: &'a Generics,
    /// The path of the codec module (`net::codec` as re-exported), through which the impls are
    /// written.
    pub codec: Path,
    pub body: Body<'a>,
    /// An enum's variants' tags, in declaration order, when they carry `#[codec(tag = N)]`
    /// (all of them, or none); `None` for a struct or an enum tagged by position.
    pub tags: Option<Vec<Tag>>,
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
        let mut shape = Shape {
            ident: &input.ident,
            attrs: &input.attrs,
            generics: &input.generics,
            codec,
            body,
            tags: None,
        };
        shape.tags = shape.check_inner()?;
        Ok(shape)
    }

    /// Checks the attributes inside the type; returns an enum's explicit tags.
    fn check_inner(&self) -> syn::Result<Option<Vec<Tag>>> {
        match self.body {
            Body::Struct(fields) => {
                fields
                    .iter()
                    .try_for_each(|f| attr::refuse_inner(&f.attrs))?;
                Ok(None)
            }
            Body::Enum(variants) => {
                if u32::try_from(variants.len()).is_err() {
                    return Err(syn::Error::new_spanned(
                        self.ident,
                        "more variants than a u32 index numbers",
                    ));
                }
                let mut tags = Vec::with_capacity(variants.len());
                for variant in variants {
                    variant
                        .fields
                        .iter()
                        .try_for_each(|f| attr::refuse_inner(&f.attrs))?;
                    tags.push(attr::variant_tag(&variant.attrs)?);
                }
                all_or_none(self.ident, variants, tags)
            }
        }
    }

    /// The `u32` written before variant `position`'s fields: its tag, or its position.
    pub(crate) fn tag(&self, position: usize) -> TokenStream {
        match &self.tags {
            Some(tags) => {
                let tag = &tags[position];
                quote! { #tag }
            }
            None => {
                // Shape::read checked that the count fits a u32.
                let index = u32::try_from(position).expect("variant count checked");
                quote! { #index }
            }
        }
    }

    /// For an enum with explicit tags, a const assertion that no two are equal (a tag that
    /// names a const is known only to the compiler); nothing otherwise.
    pub(crate) fn distinct_tags_check(&self) -> TokenStream {
        let Some(tags) = &self.tags else {
            return TokenStream::new();
        };
        let message = LitStr::new(
            &format!("two variants of {} have the same codec tag", self.ident),
            self.ident.span(),
        );
        quote! {
            const _: () = {
                let tags: &[u32] = &[ #( #tags ),* ];
                let mut i = 0;
                while i < tags.len() {
                    let mut j = i + 1;
                    while j < tags.len() {
                        ::core::assert!(tags[i] != tags[j], #message);
                        j += 1;
                    }
                    i += 1;
                }
            };
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

/// The variants' tags when every one has one, `None` when none has; a variant without a tag
/// beside one with a tag, or two literal tags alike, is an error.
fn all_or_none(
    ident: &Ident,
    variants: &Punctuated<Variant, Comma>,
    tags: Vec<Option<Tag>>,
) -> syn::Result<Option<Vec<Tag>>> {
    let tagged = tags.iter().filter(|tag| tag.is_some()).count();
    if tagged == 0 {
        return Ok(None);
    }
    if let Some((variant, _)) = variants.iter().zip(&tags).find(|(_, tag)| tag.is_none()) {
        return Err(syn::Error::new_spanned(
            &variant.ident,
            format!(
                "{ident} tags some variants with `#[codec(tag = N)]`: every variant needs \
                 one (tags are all explicit or all positions)"
            ),
        ));
    }
    let tags: Vec<Tag> = tags.into_iter().flatten().collect();
    for (at, tag) in tags.iter().enumerate() {
        let Some(value) = tag.value() else {
            continue;
        };
        if tags[..at]
            .iter()
            .any(|earlier| earlier.value() == Some(value))
        {
            let variant = &variants[at].ident;
            return Err(syn::Error::new_spanned(
                variant,
                format!("tag {value} of {ident}::{variant} is another variant's too"),
            ));
        }
    }
    Ok(Some(tags))
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

    /// Proves the codec's path is the engine's unless `#[codec(crate)]` names another.
    #[test]
    fn codec_path() {
        let path = |input: DeriveInput| Shape::read(&input).unwrap().codec.to_token_stream();
        let default = path(parse_quote! {
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
        assert!(
            bounds.contains("does not read `#[bincode(...)]`"),
            "{bounds}"
        );
        // The stale attribute of bincode's derive, even naming a crate that does not exist:
        // refused, naming the one to write.
        let stale = error(parse_quote! {
            #[bincode(crate = "no_such_crate::bincode")]
            struct A(u8);
        });
        assert!(
            stale.contains("does not read `#[bincode(...)]`")
                && stale.contains("#[codec(crate = \"path\")]"),
            "{stale}"
        );
        let field = error(parse_quote! { struct A(#[bincode(with_serde)] u8); });
        assert!(field.contains("no attribute on a field"), "{field}");
        let variant = error(parse_quote! { enum E { #[codec(skip)] One } });
        assert!(variant.contains("only `#[codec(tag = N)]`"), "{variant}");
        let bincode = error(parse_quote! { enum E { #[bincode(with_serde)] One } });
        assert!(bincode.contains("only `#[codec(tag = N)]`"), "{bincode}");
        let field_tag = error(parse_quote! { struct A(#[codec(tag = 1)] u8); });
        assert!(field_tag.contains("no attribute on a field"), "{field_tag}");
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

    /// The tags `Shape::read` finds in `input`, as written.
    fn tags(input: DeriveInput) -> Option<Vec<String>> {
        let shape = Shape::read(&input).unwrap();
        let written = |tag: &Tag| tag.to_token_stream().to_string();
        shape.tags.map(|tags| tags.iter().map(written).collect())
    }

    /// Proves explicit tags are read as literals (written as u32s) or paths, and that an enum
    /// without them, or a struct, is tagged by position.
    #[test]
    fn reads_explicit_tags() {
        let explicit = tags(parse_quote! {
            enum E {
                #[codec(tag = 7)]
                A,
                #[codec(tag = tags::B)]
                B(u8),
                #[codec(tag = 0u32)]
                C { x: u8 },
            }
        });
        let expected = ["7u32", "tags :: B", "0u32"].map(String::from);
        assert_eq!(explicit, Some(expected.to_vec()));
        assert_eq!(tags(parse_quote! { enum E { A, B } }), None);
        assert_eq!(tags(parse_quote! { struct S(u8); }), None);
        let by_position: DeriveInput = parse_quote! { enum E { A, B } };
        let by_position = Shape::read(&by_position).unwrap();
        assert_eq!(by_position.tag(1).to_string(), "1u32");
        assert!(by_position.distinct_tags_check().is_empty());
        let by_tag: DeriveInput = parse_quote! { enum E { #[codec(tag = 1)] A } };
        let by_tag = Shape::read(&by_tag).unwrap();
        assert!(!by_tag.distinct_tags_check().is_empty());
    }

    /// Proves a tag on some variants but not all, two equal literal tags, a tag given twice
    /// and a tag that is not a u32 literal or a path are compile errors.
    #[test]
    fn refuses_bad_tags() {
        let partial = error(parse_quote! {
            enum E { #[codec(tag = 0)] A, B }
        });
        assert!(partial.contains("every variant needs one"), "{partial}");
        let equal = error(parse_quote! {
            enum E { #[codec(tag = 3)] A, #[codec(tag = 3u32)] B }
        });
        assert!(equal.contains("tag 3 of E::B"), "{equal}");
        let twice = error(parse_quote! {
            enum E { #[codec(tag = 1, tag = 2)] A }
        });
        assert!(twice.contains("given twice"), "{twice}");
        let wide = error(parse_quote! { enum E { #[codec(tag = 4294967296)] A } });
        assert!(wide.contains("number too large"), "{wide}");
        let typed = error(parse_quote! { enum E { #[codec(tag = 1u8)] A } });
        assert!(typed.contains("a tag is a u32"), "{typed}");
        let negative = error(parse_quote! { enum E { #[codec(tag = -1)] A } });
        assert!(negative.contains("integer literal or a path"), "{negative}");
        let text = error(parse_quote! { enum E { #[codec(tag = "1")] A } });
        assert!(text.contains("integer literal or a path"), "{text}");
    }
}
