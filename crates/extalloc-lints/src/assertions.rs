//! The assertion report: in the library's state-changing functions, how many assert, and
//! which change state and assert nothing (docs/architecture.md, "Assertions").
//!
//! Two kinds of folder:
//!
//! - strict ([`STRICT`]: the core, the file layer, the writeback cache, the on-disk
//!   format): every offender (a state-changing function without an assertion, or a check
//!   helper that asserts nothing) fails the run, but those listed in
//!   `known-offenders.txt` beside this crate's manifest (the ones the regular-expression
//!   version of this report missed), a list that only shrinks;
//! - ratcheted ([`RATCHETED`]: the FUSE crate's file system and transport, whose handlers
//!   are many and small): the share of state-changing functions that assert may only go
//!   up. Its floor per folder is in `assertion-floors.txt` (`floors.rs`);
//!   a share below it fails, a share above it says so and `--update-floors` raises it.
//!
//! Which functions: every `fn` with a body (free, in an `impl`, a trait's default) outside
//! tests: items under `#[test]` or `#[cfg(test)]` (a module, an `impl`, a function), and
//! files of their own (`tests.rs`, `*_tests.rs`). A function nested in another is part of
//! the outer one.
//!
//! State-changing, decided from the parse alone (never from a function's name):
//!   1. a parameter holds a `&mut` (`&mut self`, `&mut T`, `&'a mut T`, one inside a
//!      type), except a formatter or a hasher (`&mut Formatter`, `&mut H`, `&mut Hasher`):
//!      writing text or a hash changes no state of ours; or
//!   2. the body writes shared state directly: an atomic (`store`, `swap`, every `fetch_*`,
//!      `compare_exchange*`), a `RefCell` (`borrow_mut`), an `RwLock` taken for writing
//!      (`write()`), or a device (`write_at`, `flush`, `discard`); or
//!   3. the body takes a mutex (`lock()`) and mutates something: `push`, `insert`,
//!      `remove`, `pop`, `clear`, `extend`, `splice`, `retain`, `truncate`, `drain`,
//!      `mem::take`/`replace`/`swap`, an assignment to a place (`x.f = `, `*g = `,
//!      `a[i] = `) or a compound one (`+=`, `|=`, ...).
//!
//! A `&self` function that changes state only by calling others is not counted: the writes
//! are asserted where they happen. Nor is, under 2 and 3, a forwarder: a body of nothing
//! but one method call each statement on one field of `self` (a setter,
//! `self.flag.store(on, Relaxed)`; a pass-through, `self.dev.flush()?`), counted in the
//! `fwd` column. A method taking `mut self` by value (a builder) is not counted.
//!
//! An assertion: `assert!`, `assert_eq!`, `assert_ne!` and their `debug_` forms, or a call
//! to a check helper (a function or method whose name begins `debug_check` or `assert_`),
//! also inside another macro's arguments. A check helper defined in the files read must
//! itself assert, or it is an offender.
//!
//! Data structures: [`Func`] per function, [`Summary`] per folder. Invariant: a file that
//! does not parse fails the run. Locks: none.

use crate::rust::{is_test, line, macro_exprs, parse};
use anyhow::{bail, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};
use syn::{BinOp, Block, Expr, ImplItem, Item, Signature, Stmt, TraitItem, Type};

/// Folders held to "every state-changing function asserts".
pub const STRICT: &[&str] = &[
    "crates/extalloc/src/groups",
    "crates/extalloc/src/alloc",
    "crates/extalloc/src/disk/journal",
    "crates/extalloc/src/store",
    "crates/extalloc/src/volume",
    "crates/extalloc/src/files",
    "crates/extalloc/src/writeback",
    "crates/extalloc/src/disk/format",
];

/// Folders whose share of asserting state-changing functions may only go up.
pub const RATCHETED: &[&str] = &[
    "crates/extalloc-fuse/src/fs",
    "crates/extalloc-fuse-transport/src",
];

const ASSERT_MACROS: &[&str] = &[
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
];

/// Whether a function changes state (module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changing {
    Yes,
    No,
    /// Writes only through one field's methods.
    Forwarder,
}

/// One function: its line, name, whether it changes state, and its assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    pub line: usize,
    pub name: String,
    pub changing: Changing,
    pub asserts: usize,
}

fn is_helper(name: &str) -> bool {
    name.starts_with("debug_check") || name.starts_with("assert_")
}

/// What a body does, found by one walk of it.
#[derive(Default)]
struct Body {
    writer: bool,
    lock: bool,
    mutation: bool,
    asserts: usize,
}

impl<'ast> Visit<'ast> for Body {
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let name = m.path.segments.last().map(|s| s.ident.to_string());
        if name.is_some_and(|n| ASSERT_MACROS.contains(&n.as_str())) {
            self.asserts += 1;
        }
        for e in macro_exprs(m) {
            self.visit_expr(&e);
        }
    }

    fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
        let m = c.method.to_string();
        let writer = matches!(
            m.as_str(),
            "store" | "swap" | "borrow_mut" | "write_at" | "flush" | "discard"
        ) || m.starts_with("fetch_")
            || m.starts_with("compare_exchange")
            || (m == "write" && c.args.is_empty());
        self.writer |= writer;
        self.lock |= m == "lock" && c.args.is_empty();
        self.mutation |= matches!(
            m.as_str(),
            "push"
                | "insert"
                | "remove"
                | "pop"
                | "clear"
                | "extend"
                | "splice"
                | "retain"
                | "truncate"
                | "drain"
        );
        if is_helper(&m) {
            self.asserts += 1;
        }
        visit::visit_expr_method_call(self, c);
    }

    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let Expr::Path(p) = &*c.func {
            let segs: Vec<String> = p
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            if let Some(last) = segs.last() {
                if is_helper(last) {
                    self.asserts += 1;
                }
                let n = segs.len();
                if n >= 2
                    && segs[n - 2] == "mem"
                    && matches!(last.as_str(), "take" | "replace" | "swap")
                {
                    self.mutation = true;
                }
            }
        }
        visit::visit_expr_call(self, c);
    }

    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        self.mutation |= matches!(
            b.op,
            BinOp::AddAssign(_)
                | BinOp::SubAssign(_)
                | BinOp::MulAssign(_)
                | BinOp::DivAssign(_)
                | BinOp::RemAssign(_)
                | BinOp::BitOrAssign(_)
                | BinOp::BitAndAssign(_)
                | BinOp::BitXorAssign(_)
                | BinOp::ShlAssign(_)
                | BinOp::ShrAssign(_)
        );
        visit::visit_expr_binary(self, b);
    }

    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        // A place: a field, a dereference, an element (a plain local is not shared state).
        self.mutation |= matches!(
            &*a.left,
            Expr::Field(_)
                | Expr::Index(_)
                | Expr::Unary(syn::ExprUnary {
                    op: syn::UnOp::Deref(_),
                    ..
                })
        );
        visit::visit_expr_assign(self, a);
    }
}

/// True if a parameter holds a `&mut` other than a formatter's or a hasher's.
fn takes_mut(sig: &Signature) -> bool {
    struct Refs(bool);
    impl<'ast> Visit<'ast> for Refs {
        fn visit_type_reference(&mut self, r: &'ast syn::TypeReference) {
            if r.mutability.is_some() {
                let exempt = match &*r.elem {
                    Type::Path(p) => p.path.segments.last().is_some_and(|s| {
                        matches!(s.ident.to_string().as_str(), "Formatter" | "H" | "Hasher")
                    }),
                    _ => false,
                };
                self.0 |= !exempt;
            }
            visit::visit_type_reference(self, r);
        }
    }
    sig.inputs.iter().any(|arg| match arg {
        syn::FnArg::Receiver(r) => r.reference.is_some() && r.mutability.is_some(),
        syn::FnArg::Typed(t) => {
            let mut refs = Refs(false);
            refs.visit_type(&t.ty);
            refs.0
        }
    })
}

/// The field of `self` an expression names (`self.a`, `self.a.b`: `a`), if it is one.
fn self_field(e: &Expr) -> Option<String> {
    let Expr::Field(f) = e else { return None };
    match &*f.base {
        Expr::Path(p) if p.path.is_ident("self") => Some(match &f.member {
            syn::Member::Named(id) => id.to_string(),
            syn::Member::Unnamed(i) => i.index.to_string(),
        }),
        base => self_field(base),
    }
}

/// True if `e` holds a block or a struct literal (a closure's body, a literal's fields):
/// an argument that does more than name values.
fn holds_braces(e: &Expr) -> bool {
    struct Braces(bool);
    impl<'ast> Visit<'ast> for Braces {
        fn visit_block(&mut self, _: &'ast Block) {
            self.0 = true;
        }
        fn visit_expr_struct(&mut self, _: &'ast syn::ExprStruct) {
            self.0 = true;
        }
    }
    let mut b = Braces(false);
    b.visit_expr(e);
    b.0
}

/// True if `block` is nothing but single method calls on one field of `self`.
fn forwarder(block: &Block) -> bool {
    let mut fields = HashSet::new();
    for s in &block.stmts {
        let Stmt::Expr(e, _) = s else { return false };
        let e = match e {
            Expr::Try(t) => &*t.expr,
            e => e,
        };
        let Expr::MethodCall(c) = e else { return false };
        let Some(field) = self_field(&c.receiver) else {
            return false;
        };
        if c.args.iter().any(holds_braces) {
            return false;
        }
        fields.insert(field);
    }
    fields.len() == 1
}

fn analyse(sig: &Signature, block: &Block) -> Func {
    let mut body = Body::default();
    body.visit_block(block);
    let changing = if takes_mut(sig) {
        Changing::Yes
    } else if forwarder(block) {
        if body.writer || body.lock {
            Changing::Forwarder
        } else {
            Changing::No
        }
    } else if body.writer || (body.lock && body.mutation) {
        Changing::Yes
    } else {
        Changing::No
    };
    Func {
        line: line(sig.fn_token.span),
        name: sig.ident.to_string(),
        changing,
        asserts: body.asserts,
    }
}

fn items(list: &[Item], out: &mut Vec<Func>) {
    for item in list {
        match item {
            Item::Fn(f) if !is_test(&f.attrs) => out.push(analyse(&f.sig, &f.block)),
            Item::Impl(i) if !is_test(&i.attrs) => {
                for ii in &i.items {
                    if let ImplItem::Fn(m) = ii {
                        if !is_test(&m.attrs) {
                            out.push(analyse(&m.sig, &m.block));
                        }
                    }
                }
            }
            Item::Trait(t) if !is_test(&t.attrs) => {
                for ti in &t.items {
                    if let TraitItem::Fn(m) = ti {
                        if let (Some(b), false) = (&m.default, is_test(&m.attrs)) {
                            out.push(analyse(&m.sig, b));
                        }
                    }
                }
            }
            Item::Mod(m) if !is_test(&m.attrs) => {
                if let Some((_, inner)) = &m.content {
                    items(inner, out);
                }
            }
            _ => {}
        }
    }
    out.sort_by_key(|f| f.line);
}

/// Every non-test function of a parsed file, in line order.
pub fn functions(file: &syn::File) -> Vec<Func> {
    let mut out = Vec::new();
    items(&file.items, &mut out);
    out
}

/// A function the rule names: state-changing without an assertion, or a check helper
/// asserting nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offender {
    pub path: String,
    pub line: usize,
    pub name: String,
    pub helper: bool,
}

impl Offender {
    /// How the known-offenders list names it (no line: lines move).
    pub fn key(&self) -> String {
        format!("{} {}", self.path, self.name)
    }
}

impl std::fmt::Display for Offender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.helper {
            true => "check helper asserts nothing",
            false => "changes state, asserts nothing",
        };
        write!(f, "{}:{} {}: {why}", self.path, self.line, self.name)
    }
}

/// The offenders among `fns` of `path`.
pub fn offenders(path: &str, fns: &[Func]) -> Vec<Offender> {
    fns.iter()
        .filter(|f| f.asserts == 0 && (f.changing == Changing::Yes || is_helper(&f.name)))
        .map(|f| Offender {
            path: path.to_string(),
            line: f.line,
            name: f.name.clone(),
            helper: is_helper(&f.name),
        })
        .collect()
}

/// A folder's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Summary {
    pub fns: usize,
    pub changing: usize,
    pub asserted: usize,
    pub asserts: usize,
    pub asserts_in_changing: usize,
    pub forwarders: usize,
}

impl Summary {
    fn add(&mut self, fns: &[Func]) {
        for f in fns {
            self.fns += 1;
            self.asserts += f.asserts;
            match f.changing {
                Changing::Yes => {
                    self.changing += 1;
                    self.asserted += usize::from(f.asserts > 0);
                    self.asserts_in_changing += f.asserts;
                }
                Changing::Forwarder => self.forwarders += 1,
                Changing::No => {}
            }
        }
    }

    /// Share of the state-changing functions that assert, in percent.
    pub fn share(&self) -> f64 {
        match self.changing {
            0 => 100.0,
            n => 100.0 * self.asserted as f64 / n as f64,
        }
    }
}

/// The `.rs` files under `root` (or `root` itself), test files left out, sorted.
fn rs_files(root: &Path) -> Result<Vec<PathBuf>> {
    if root.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    if !root.is_dir() {
        bail!("{} is neither a file nor a folder", root.display());
    }
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let p = entry?.path();
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Per folder (relative to `base`), its summary; every offender appended to `bad`.
pub fn folder_rows(
    base: &Path,
    roots: &[String],
    bad: &mut Vec<Offender>,
) -> Result<Vec<(String, Summary)>> {
    let mut rows = Vec::new();
    for root in roots {
        let mut sum = Summary::default();
        for p in rs_files(&base.join(root))? {
            let fns = functions(&parse(&p)?);
            let rel = p.strip_prefix(base).unwrap_or(&p).display().to_string();
            bad.extend(offenders(&rel, &fns));
            sum.add(&fns);
        }
        rows.push((root.clone(), sum));
    }
    Ok(rows)
}

/// The table of `rows`.
pub fn print_rows(rows: &[(String, Summary)]) {
    println!(
        "{:34} {:>5} {:>8} {:>8} {:>7} {:>6} {:>12} {:>4}",
        "folder", "fns", "changing", "asserted", "asserts", "per fn", "per changing", "fwd"
    );
    for (root, s) in rows {
        let per = |a: usize, n: usize| if n == 0 { 0.0 } else { a as f64 / n as f64 };
        println!(
            "{root:34} {:5} {:8} {:8} {:7} {:6.2} {:12.2} {:4}",
            s.fns,
            s.changing,
            s.asserted,
            s.asserts,
            per(s.asserts, s.fns),
            per(s.asserts_in_changing, s.changing),
            s.forwarders
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::floors::against_known;
    use std::collections::BTreeSet;

    fn fns(text: &str) -> Vec<(usize, String, Changing, usize)> {
        functions(&crate::rust::parse_text(text).unwrap())
            .into_iter()
            .map(|f| (f.line, f.name, f.changing, f.asserts))
            .collect()
    }

    fn want(v: &[(usize, &str, Changing, usize)]) -> Vec<(usize, String, Changing, usize)> {
        v.iter()
            .map(|&(l, n, c, a)| (l, n.to_string(), c, a))
            .collect()
    }

    use Changing::{Forwarder as Fwd, No, Yes};

    #[test]
    fn what_changes_state_and_what_asserts() {
        type Case<'a> = (&'a str, &'a str, &'a [(usize, &'a str, Changing, usize)]);
        let cases: &[Case] = &[
            ("mut self", "impl S {\n    fn f(&mut self) {\n        self.a = 1;\n    }\n}", &[(2, "f", Yes, 0)]),
            ("mut param, debug_assert", "fn f(x: &mut Vec<u8>) {\n    x.push(1);\n    debug_assert!(!x.is_empty());\n}", &[(1, "f", Yes, 1)]),
            ("lifetime mut param", "fn f<'a>(x: &'a mut [u8]) {\n    x[0] = 1;\n}", &[(1, "f", Yes, 0)]),
            ("atomic store", "fn f(&self) {\n    self.a.store(1, Relaxed);\n    assert_eq!(self.a.load(Relaxed), 1);\n    assert_ne!(1, 2);\n}", &[(1, "f", Yes, 2)]),
            ("device write", "fn f(&self, d: &dyn Device) -> Result<()> {\n    d.write_at(&[0], 0)\n}", &[(1, "f", Yes, 0)]),
            ("lock and push", "fn f(&self) {\n    self.v.lock().push(1);\n}", &[(1, "f", Yes, 0)]),
            ("lock and field assignment", "fn f(&self) {\n    let mut g = self.v.lock();\n    g.count = 0;\n}", &[(1, "f", Yes, 0)]),
            ("lock to read only", "fn f(&self) -> bool {\n    let v = self.v.lock();\n    let n = v.len();\n    n == 0\n}", &[(1, "f", No, 0)]),
            ("local vec, no lock", "fn f(&self) -> Vec<u8> {\n    let mut v = Vec::new();\n    v.push(1);\n    v\n}", &[(1, "f", No, 0)]),
            ("formatter", "impl fmt::Display for S {\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {\n        write!(f, \"s\")\n    }\n}", &[(2, "fmt", No, 0)]),
            ("assertion in a comment", "fn f(&mut self) {\n    // assert!(self.ok());\n    self.a = 1; // debug_assert!(x)\n}", &[(1, "f", Yes, 0)]),
            ("check helper", "fn f(&mut self) {\n    self.a = 1;\n    self.debug_check();\n}\nfn debug_check(&self) {\n    debug_assert!(self.a > 0);\n}", &[(1, "f", Yes, 1), (5, "debug_check", No, 1)]),
            ("tests skipped", "fn g(&mut self) {\n    assert!(true);\n}\n#[cfg(test)]\nmod tests {\n    fn h(&mut self) {}\n}\n#[test]\nfn t(x: &mut u8) {\n    *x = 1;\n}\n#[cfg(test)]\nimpl S {\n    fn i(&mut self) {}\n}\n#[cfg(test)]\n/// doc\nfn j(&mut self) {}", &[(1, "g", Yes, 1)]),
            ("where clause, one-line fn", "fn f<X>(x: X)\nwhere\n    X: Copy,\n{\n    X::go(&mut 1);\n}\nfn g(&mut self) { assert!(self.ok()) }", &[(1, "f", No, 0), (7, "g", Yes, 1)]),
            ("a trait's declaration is no function", "trait T {\n    fn f(&mut self);\n}", &[]),
            ("forwarders", "fn set(&self, on: bool) {\n    self.flag\n        .store(on, Relaxed);\n}\nfn cache(&self) -> Result<()> {\n    self.dev.flush()?;\n    self.dev.drop_cache()\n}\nfn two(&self) {\n    self.a.store(1, Relaxed);\n    self.b.store(1, Relaxed);\n}\nfn set_mut(&mut self, on: bool) {\n    self.flag.set(on);\n}", &[(1, "set", Fwd, 0), (5, "cache", Fwd, 0), (9, "two", Yes, 0), (13, "set_mut", Yes, 0)]),
            ("an assertion inside another macro's arguments", "fn f(&mut self) {\n    log::debug!(\"{}\", { debug_assert!(self.ok()); 1 });\n}", &[(1, "f", Yes, 1)]),
            ("a trait's default body", "trait T {\n    fn f(&self) {\n        self.a.lock().clear();\n    }\n}", &[(2, "f", Yes, 0)]),
            ("mem::take under a lock", "fn f(&self) -> Vec<u8> {\n    std::mem::take(&mut *self.v.lock())\n}", &[(1, "f", Yes, 0)]),
        ];
        for (name, text, expected) in cases {
            assert_eq!(fns(text), want(expected), "case {name}");
        }
    }

    #[test]
    fn offenders_are_silent_changers_and_empty_helpers() {
        let f = |line, name: &str, changing, asserts| Func {
            line,
            name: name.to_string(),
            changing,
            asserts,
        };
        let got = offenders(
            "x.rs",
            &[
                f(1, "f", Yes, 0),
                f(2, "g", Yes, 1),
                f(3, "debug_check", No, 0),
                f(4, "h", No, 0),
            ],
        );
        let got: Vec<String> = got.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "x.rs:1 f: changes state, asserts nothing",
                "x.rs:3 debug_check: check helper asserts nothing"
            ]
        );
    }

    #[test]
    fn only_offenders_not_known_are_new() {
        let o = |path: &str, name: &str| Offender {
            path: path.to_string(),
            line: 1,
            name: name.to_string(),
            helper: false,
        };
        let known: BTreeSet<String> = ["a.rs f".to_string(), "a.rs gone".to_string()].into();
        let (new, gone) = against_known(&[o("a.rs", "f"), o("b.rs", "f")], &known);
        assert_eq!(new, [o("b.rs", "f")]);
        assert_eq!(gone, ["a.rs gone"]);
    }

    #[test]
    fn a_file_that_does_not_parse_is_an_error() {
        assert!(crate::rust::parse_text("fn f( {").is_err());
    }
}
