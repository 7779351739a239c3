//! The `#[serde(...)]` attributes the `Describe` impl mirrors. A derive sees every attribute of
//! the item, serde's included; the ones that change the JSON in a way not modelled here are
//! named in [`Serde::unknown`], and the description says "any value" there instead of a wrong
//! shape (never stricter than serde).

use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, LitStr, Token};

/// serde's `rename_all` rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Case {
    Lower,
    Upper,
    Pascal,
    Camel,
    Snake,
    ScreamingSnake,
    Kebab,
    ScreamingKebab,
}

impl Case {
    fn parse(rule: &str) -> Option<Case> {
        Some(match rule {
            "lowercase" => Case::Lower,
            "UPPERCASE" => Case::Upper,
            "PascalCase" => Case::Pascal,
            "camelCase" => Case::Camel,
            "snake_case" => Case::Snake,
            "SCREAMING_SNAKE_CASE" => Case::ScreamingSnake,
            "kebab-case" => Case::Kebab,
            "SCREAMING-KEBAB-CASE" => Case::ScreamingKebab,
            _ => return None,
        })
    }

    /// A variant's name (written in PascalCase) under this rule, as serde renames it.
    pub(crate) fn variant(self, name: &str) -> String {
        let snake = || {
            let mut snake = String::new();
            for (at, c) in name.char_indices() {
                if at > 0 && c.is_uppercase() {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            snake
        };
        match self {
            Case::Pascal => name.to_owned(),
            Case::Lower => name.to_ascii_lowercase(),
            Case::Upper => name.to_ascii_uppercase(),
            Case::Camel => lower_first(name),
            Case::Snake => snake(),
            Case::ScreamingSnake => snake().to_ascii_uppercase(),
            Case::Kebab => snake().replace('_', "-"),
            Case::ScreamingKebab => snake().to_ascii_uppercase().replace('_', "-"),
        }
    }

    /// A field's name (written in snake_case) under this rule, as serde renames it.
    pub(crate) fn field(self, name: &str) -> String {
        let pascal = || {
            let mut pascal = String::new();
            let mut capital = true;
            for c in name.chars() {
                if c == '_' {
                    capital = true;
                } else if capital {
                    pascal.push(c.to_ascii_uppercase());
                    capital = false;
                } else {
                    pascal.push(c);
                }
            }
            pascal
        };
        match self {
            Case::Lower | Case::Snake => name.to_owned(),
            Case::Upper | Case::ScreamingSnake => name.to_ascii_uppercase(),
            Case::Pascal => pascal(),
            Case::Camel => lower_first(&pascal()),
            Case::Kebab => name.replace('_', "-"),
            Case::ScreamingKebab => name.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

fn lower_first(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_ascii_lowercase().to_string() + chars.as_str()
    })
}

/// What serde's attributes on a container, variant or field say, of what the description
/// mirrors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Serde {
    /// `rename = "name"`.
    pub rename: Option<String>,
    /// `rename_all = "rule"`.
    pub rename_all: Option<Case>,
    /// `rename_all_fields = "rule"` (an enum's, for its variants' fields).
    pub rename_all_fields: Option<Case>,
    /// `deny_unknown_fields`.
    pub closed: bool,
    /// `transparent`.
    pub transparent: bool,
    /// `default`, `skip_serializing_if` or one of the two `skip_*`: a value may lack the key.
    pub optional: bool,
    /// `skip`, or both `skip_serializing` and `skip_deserializing`: never in the JSON.
    pub skip: bool,
    /// The first option that changes the JSON in a way not mirrored (`tag`, `flatten`,
    /// `with`, ...).
    pub unknown: Option<String>,
}

/// Options that change nothing in the JSON.
const NO_EFFECT: [&str; 4] = ["crate", "bound", "borrow", "expecting"];

impl Serde {
    /// Reads the `serde` attributes among `attrs`. One that does not parse is reported by
    /// serde's own derive; here it makes the part unknown.
    pub(crate) fn read(attrs: &[Attribute]) -> Serde {
        let mut serde = Serde::default();
        let (mut skip_serializing, mut skip_deserializing) = (false, false);
        for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
            let read = attr.parse_nested_meta(|meta| {
                let name = meta.path.get_ident().map(ToString::to_string);
                let name = name.unwrap_or_default();
                match name.as_str() {
                    "skip_serializing" => skip_serializing = true,
                    "skip_deserializing" => skip_deserializing = true,
                    _ => serde.option(&name, &meta)?,
                }
                Ok(())
            });
            if read.is_err() {
                serde.unknown.get_or_insert_with(|| "serde(...)".into());
            }
        }
        serde.skip |= skip_serializing && skip_deserializing;
        serde.optional |= skip_serializing || skip_deserializing;
        serde
    }

    /// Takes one option `name` (its value read from `meta`).
    fn option(&mut self, name: &str, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        match name {
            "rename" if meta.input.peek(Token![=]) => self.rename = Some(string(meta)?),
            "rename_all" | "rename_all_fields" if meta.input.peek(Token![=]) => {
                let rule = string(meta)?;
                let Some(case) = Case::parse(&rule) else {
                    self.unknown
                        .get_or_insert_with(|| format!("{name} = {rule:?}"));
                    return Ok(());
                };
                match name {
                    "rename_all" => self.rename_all = Some(case),
                    _ => self.rename_all_fields = Some(case),
                }
            }
            "deny_unknown_fields" => self.closed = true,
            "transparent" => self.transparent = true,
            "skip" => self.skip = true,
            "default" | "skip_serializing_if" => {
                self.optional = true;
                skip_value(meta)?;
            }
            _ if NO_EFFECT.contains(&name) => skip_value(meta)?,
            _ => {
                self.unknown.get_or_insert_with(|| name.to_owned());
                skip_value(meta)?;
            }
        }
        Ok(())
    }
}

fn string(meta: &ParseNestedMeta<'_>) -> syn::Result<String> {
    Ok(meta.value()?.parse::<LitStr>()?.value())
}

/// Reads past an option's value: `= expr`, `(...)` or nothing.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_value(&inner))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    /// Proves the rules rename as serde's own `RenameRule` does, variants and fields.
    #[test]
    fn cases_are_serdes() {
        let table = [
            (
                Case::Lower,
                "VeryTasty",
                "verytasty",
                "very_tasty",
                "very_tasty",
            ),
            (
                Case::Upper,
                "VeryTasty",
                "VERYTASTY",
                "very_tasty",
                "VERY_TASTY",
            ),
            (
                Case::Pascal,
                "VeryTasty",
                "VeryTasty",
                "very_tasty",
                "VeryTasty",
            ),
            (
                Case::Camel,
                "VeryTasty",
                "veryTasty",
                "very_tasty",
                "veryTasty",
            ),
            (
                Case::Snake,
                "VeryTasty",
                "very_tasty",
                "very_tasty",
                "very_tasty",
            ),
            (
                Case::ScreamingSnake,
                "VeryTasty",
                "VERY_TASTY",
                "very_tasty",
                "VERY_TASTY",
            ),
            (
                Case::Kebab,
                "VeryTasty",
                "very-tasty",
                "very_tasty",
                "very-tasty",
            ),
            (
                Case::ScreamingKebab,
                "VeryTasty",
                "VERY-TASTY",
                "very_tasty",
                "VERY-TASTY",
            ),
            (Case::Camel, "A", "a", "a", "a"),
        ];
        for (case, variant, renamed, field, field_renamed) in table {
            assert_eq!(case.variant(variant), renamed, "{case:?}");
            assert_eq!(case.field(field), field_renamed, "{case:?}");
        }
    }

    /// Proves the options mirrored are read, options without effect are passed over, and any
    /// other is named.
    #[test]
    fn reads_options() {
        let attrs: Vec<Attribute> = parse_quote! {
            #[serde(rename = "x", rename_all = "camelCase", crate = "serde")]
            #[serde(deny_unknown_fields, bound(serialize = "T: Clone"), default = "d")]
            #[doc = "not serde's"]
        };
        let serde = Serde::read(&attrs);
        assert_eq!(serde.rename.as_deref(), Some("x"));
        assert_eq!(serde.rename_all, Some(Case::Camel));
        assert!(serde.closed && serde.optional && !serde.skip);
        assert_eq!(serde.unknown, None);
        let both: Vec<Attribute> = parse_quote! {
            #[serde(skip_serializing)]
            #[serde(skip_deserializing)]
        };
        assert!(Serde::read(&both).skip);
        let one: Attribute = parse_quote! { #[serde(skip_serializing_if = "Option::is_none")] };
        let one = Serde::read(&[one]);
        assert!(one.optional && !one.skip);
        let table: [(Attribute, &str); 5] = [
            (parse_quote! { #[serde(tag = "t", content = "c")] }, "tag"),
            (parse_quote! { #[serde(flatten)] }, "flatten"),
            (parse_quote! { #[serde(with = "m")] }, "with"),
            (parse_quote! { #[serde(rename(serialize = "a"))] }, "rename"),
            (
                parse_quote! { #[serde(rename_all = "Title Case")] },
                "rename_all = \"Title Case\"",
            ),
        ];
        for (attr, named) in table {
            assert_eq!(Serde::read(&[attr]).unknown.as_deref(), Some(named));
        }
        let broken: Attribute = parse_quote! { #[serde(rename = 1)] };
        assert_eq!(
            Serde::read(&[broken]).unknown.as_deref(),
            Some("serde(...)")
        );
    }
}
