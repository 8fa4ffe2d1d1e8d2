//! The file-length report: files over a limit of lines outside their inline tests, listed
//! as a question for review (is this file one concept, or two?), never failed. Function
//! length is clippy's (`too_many_lines`, clippy.toml).
//!
//! What it counts: every line of a file except those of an inline test module (a `mod NAME
//! { ... }` under `#[cfg(test)]`, its attributes and doc comments included). Everything
//! else marked `#[cfg(test)]` counts; a test module kept in a file of its own (`tests.rs`,
//! `*_tests.rs`) is a file like any other.
//!
//! Data structures: none. Locks: none.

use crate::rust::{is_test, line, parse};
use anyhow::Result;
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::Item;

/// Lines of `text` (parsed as `file`) outside its inline test modules.
pub fn counted_lines(text: &str, file: &syn::File) -> usize {
    let total = text.lines().count();
    let tests: usize = (file.items.iter())
        .filter_map(|item| match item {
            Item::Mod(m) if m.content.is_some() && is_test(&m.attrs) => {
                let first = m.attrs.iter().map(|a| line(a.span())).min();
                let start = first.unwrap_or(usize::MAX).min(line(m.mod_token.span));
                let end = m
                    .content
                    .as_ref()
                    .map_or(start, |(b, _)| b.span.close().end().line);
                Some(end + 1 - start)
            }
            _ => None,
        })
        .sum();
    total.saturating_sub(tests)
}

/// Every `.rs` file under the folders `srcs`, with its counted lines, over `limit`.
pub fn over(srcs: &[PathBuf], limit: usize) -> Result<Vec<(PathBuf, usize)>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = srcs.to_vec();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for entry in std::fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p)?;
            let n = counted_lines(&text, &parse(&p)?);
            if n > limit {
                out.push((p, n));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Prints the report (paths relative to `base`).
pub fn print(base: &Path, found: &[(PathBuf, usize)], limit: usize) {
    println!("long-files: files over {limit} lines outside tests (one concept each, or two?):");
    for (p, n) in found {
        let shown = p.strip_prefix(base).unwrap_or(p).display().to_string();
        println!("FILE {shown}: {n} lines outside tests");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_test_modules_do_not_count() {
        let text = "fn a() {}\n\n/// doc\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\n#[cfg(test)]\nfn c() {}\n";
        let file = crate::rust::parse_text(text).unwrap();
        // Nine lines, five of them the test module with its doc comment and attribute.
        assert_eq!(counted_lines(text, &file), 4);
    }
}
