//! The derives' attributes: `#[codec(crate = "path")]` on the type and `#[codec(tag = N)]` on
//! an enum's variants. bincode's `#[bincode(...)]` (the project's codec before its own) is
//! refused wherever it stands, naming the attribute to write instead: accepted and ignored, it
//! would let a stale path (even to a crate that does not exist) compile without effect.

use proc_macro2::{Literal, TokenStream};
use quote::{ToTokens, quote};
use syn::{Attribute, Expr, ExprLit, Lit, LitInt, LitStr, Path, parse_quote};

/// The message for a `#[bincode(...)]` on a type.
const BINCODE_GONE: &str = "engine's derive does not read `#[bincode(...)]` (bincode's \
     derive is gone): remove it, or write `#[codec(crate = \"path\")]` to reach the codec \
     through another path than `::engine::codec`";

/// The path of the codec module from `attrs`; `::engine::codec` unless a
/// `#[codec(crate = "path")]` names another.
pub(crate) fn codec_path(attrs: &[Attribute]) -> syn::Result<Path> {
    let mut path: Option<Path> = None;
    for attr in attrs {
        if attr.path().is_ident("codec") {
            attr.parse_nested_meta(|meta| {
                if !meta.path.is_ident("crate") {
                    return Err(meta.error("expected `crate = \"path\"`"));
                }
                if path.is_some() {
                    return Err(meta.error("the codec's path is given twice"));
                }
                let value: LitStr = meta.value()?.parse()?;
                path = Some(value.parse()?);
                Ok(())
            })?;
        } else if attr.path().is_ident("bincode") {
            return Err(syn::Error::new_spanned(attr, BINCODE_GONE));
        }
    }
    Ok(path.unwrap_or_else(|| parse_quote!(::engine::codec)))
}

/// Refuses `codec` and `bincode` attributes on a field, where bincode's derive has options
/// (`with_serde`) that this derive does not implement.
pub(crate) fn refuse_inner(attrs: &[Attribute]) -> syn::Result<()> {
    match attrs
        .iter()
        .find(|attr| attr.path().is_ident("codec") || attr.path().is_ident("bincode"))
    {
        Some(attr) => Err(syn::Error::new_spanned(
            attr,
            "engine's derive takes no attribute on a field",
        )),
        None => Ok(()),
    }
}

/// A variant's explicit tag, the `u32` written before its fields in place of its position.
#[derive(Clone)]
pub(crate) enum Tag {
    /// An integer literal, its value known (and checked against the others) at expansion.
    Literal(LitInt, u32),
    /// A path to a `u32` const: the compiler checks its type, and a const assertion that the
    /// enum's tags differ.
    Const(Path),
}

impl Tag {
    /// The literal's value, when the tag is one.
    pub(crate) fn value(&self) -> Option<u32> {
        match self {
            Tag::Literal(_, value) => Some(*value),
            Tag::Const(_) => None,
        }
    }
}

impl ToTokens for Tag {
    /// The tag as a `u32` expression (a literal is re-written with the `u32` suffix).
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            Tag::Literal(literal, value) => {
                let mut written = Literal::u32_suffixed(*value);
                written.set_span(literal.span());
                tokens.extend(quote! { #written });
            }
            Tag::Const(path) => path.to_tokens(tokens),
        }
    }
}

/// The tag `#[codec(tag = N)]` gives a variant, if any; any other `codec` or `bincode`
/// option on a variant is refused, as on a field.
pub(crate) fn variant_tag(attrs: &[Attribute]) -> syn::Result<Option<Tag>> {
    let mut tag: Option<Tag> = None;
    for attr in attrs {
        if attr.path().is_ident("bincode") {
            return Err(syn::Error::new_spanned(
                attr,
                "engine's derive takes only `#[codec(tag = N)]` on a variant",
            ));
        }
        if !attr.path().is_ident("codec") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if !meta.path.is_ident("tag") {
                return Err(
                    meta.error("engine's derive takes only `#[codec(tag = N)]` on a variant")
                );
            }
            if tag.is_some() {
                return Err(meta.error("the variant's tag is given twice"));
            }
            tag = Some(parse_tag(meta.value()?.parse()?)?);
            Ok(())
        })?;
    }
    Ok(tag)
}

/// A tag's value: an unsuffixed (or `u32`) integer literal, or a path to a const. (`if let`
/// rather than a match: `Expr` is syn's, with more variants to come.)
fn parse_tag(expr: Expr) -> syn::Result<Tag> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(literal),
        ..
    }) = &expr
    {
        if !matches!(literal.suffix(), "" | "u32") {
            return Err(syn::Error::new_spanned(literal, "a tag is a u32"));
        }
        let value = literal.base10_parse::<u32>()?;
        return Ok(Tag::Literal(literal.clone(), value));
    }
    if let Expr::Path(path) = &expr
        && path.qself.is_none()
        && path.attrs.is_empty()
    {
        return Ok(Tag::Const(path.path.clone()));
    }
    Err(syn::Error::new_spanned(
        expr,
        "a tag is an integer literal or a path to a u32 const",
    ))
}
