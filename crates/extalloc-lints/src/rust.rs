//! What both lints need of a Rust source file, on syn's parse of it: which items are
//! test-only, and the expressions inside macro calls (which syn keeps as tokens).
//!
//! Data structures: none. Invariant: a file that does not parse is an error naming it,
//! never skipped in silence. Locks: none.

use anyhow::{Context, Result};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Macro, Token};

/// Parses the file at `path`.
pub fn parse(path: &std::path::Path) -> Result<syn::File> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_text(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Parses `text` as a file.
pub fn parse_text(text: &str) -> Result<syn::File> {
    Ok(syn::parse_file(text)?)
}

/// True for `#[test]` and for a `#[cfg(...)]` whose condition starts with `test`,
/// `all(test` or `any(test` (test-only code).
pub fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        if a.path().is_ident("test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(list) = a.meta.require_list() else {
            return false;
        };
        let cond = list.tokens.to_string().replace(' ', "");
        cond == "test" || cond.starts_with("all(test") || cond.starts_with("any(test")
    })
}

/// The expressions a macro call holds when its body is a list of them
/// (`assert!(a, "{}", b)`, `format!`, `vec![a, b]`); none for other bodies. A visitor
/// that holds no borrow of the tree (`for<'a> Visit<'a>`) visits them as it visits the
/// rest.
pub fn macro_exprs(mac: &Macro) -> Vec<Expr> {
    mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated)
        .map(|p| p.into_iter().collect())
        .unwrap_or_default()
}

/// The 1-based line a span starts on.
pub fn line(span: proc_macro2::Span) -> usize {
    span.start().line
}
