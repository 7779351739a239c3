//! The derives' attributes: `#[codec(crate = "path")]` on the type, and bincode's
//! `#[bincode(crate = "path")]`, accepted and ignored.

use syn::{Attribute, LitStr, Path, parse_quote};

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
            // Written for bincode's derive (before the project owned its format): its path is
            // the engine's anyway, or given by `codec`.
            attr.parse_nested_meta(|meta| {
                if !meta.path.is_ident("crate") {
                    return Err(meta.error(
                        "engine's derive accepts only `crate` here (and ignores it); \
                         bincode's other options are not supported",
                    ));
                }
                let _ignored: LitStr = meta.value()?.parse()?;
                Ok(())
            })?;
        }
    }
    Ok(path.unwrap_or_else(|| parse_quote!(::engine::codec)))
}

/// Refuses `codec` and `bincode` attributes on a field or a variant, where bincode's derive has
/// options (`with_serde`) that this derive does not implement.
pub(crate) fn refuse_inner(attrs: &[Attribute]) -> syn::Result<()> {
    match attrs
        .iter()
        .find(|attr| attr.path().is_ident("codec") || attr.path().is_ident("bincode"))
    {
        Some(attr) => Err(syn::Error::new_spanned(
            attr,
            "engine's derive takes no attribute on a field or a variant",
        )),
        None => Ok(()),
    }
}
