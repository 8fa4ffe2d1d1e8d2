//! Files that import each other: the check behind docs/architecture.md's "no file imports
//! one that imports it".
//!
//! For every source file of a crate (test-only code left out: an item under `#[test]` or
//! `#[cfg(test)]`, and a file declared under `#[cfg(test)]` with its children), every path
//! it names is resolved to the file that defines it: the items of `use` declarations
//! (groups expanded) and paths in code (macro arguments included) that start with
//! `crate::`, `super::`, `self::` or the name of one of the file's own child modules. A
//! path resolves to the deepest module file it passes through (`crate::store::ops::Op` is
//! `store/ops.rs`), and a name that file only re-exports (`pub use`, a glob included)
//! resolves on to the file that defines it; a path into the file itself is not an import.
//! `mod x;` declares, it does not import. Two files that each name a path into the other
//! are reported with one line of each, then every longer cycle (files that reach each
//! other through others, Tarjan's strongly connected components).
//!
//! A parent `mod.rs` re-exports and calls its children, so a child that needs something
//! the parent defines finds it in a sibling file both import (the crate's `types.rs`,
//! `core.rs`), never in the parent.
//!
//! Data structures: [`Crate`] (module path -> file, and what each file declares, defines,
//! re-exports and names). Invariant: a file that does not parse fails the run. Locks: none.

use crate::rust::{is_test, line, macro_exprs, parse};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};
use syn::{Item, UseTree};

/// A module's path from the crate root (`["store", "ops"]`).
type ModPath = Vec<String>;

/// What one file declares, defines, re-exports and names.
#[derive(Default)]
struct FileInfo {
    /// Child modules it declares (`mod x;`), test-only ones included.
    children: HashSet<String>,
    /// Child modules declared under `#[cfg(test)]`.
    test_children: HashSet<String>,
    /// Names of items it defines (at any depth outside tests).
    defines: HashSet<String>,
    /// Name -> the paths it re-exports under that name; `*` holds glob re-exports' prefixes.
    reexports: HashMap<String, Vec<ModPath>>,
    /// Every path it names, with the line naming it.
    named: Vec<(ModPath, usize)>,
    /// Its lines, to print the one naming an import.
    lines: Vec<String>,
}

/// Expands a `use` tree under `prefix`: `a::{b, c::{d, e}}` -> `a::b`, `a::c::d`,
/// `a::c::e`; a glob gives its prefix and `*`; a rename its original name and the alias.
fn expand(tree: &UseTree, prefix: &mut ModPath, out: &mut Vec<(ModPath, String)>) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            expand(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let mut p = prefix.clone();
            p.push(n.ident.to_string());
            out.push((p, n.ident.to_string()));
        }
        UseTree::Rename(r) => {
            let mut p = prefix.clone();
            p.push(r.ident.to_string());
            out.push((p, r.rename.to_string()));
        }
        UseTree::Glob(_) => out.push((prefix.clone(), "*".to_string())),
        UseTree::Group(g) => g.items.iter().for_each(|t| expand(t, prefix, out)),
    }
}

/// Walks a file's non-test code, filling a [`FileInfo`].
struct Walk<'a> {
    info: &'a mut FileInfo,
}

impl Walk<'_> {
    fn define(&mut self, id: &syn::Ident) {
        self.info.defines.insert(id.to_string());
    }
}

/// Visitor methods that note the name an item defines, then walk it as syn would.
macro_rules! defining {
    ($($method:ident($ty:ident) $($field:ident).+,)*) => {
        $(
            fn $method(&mut self, i: &'ast syn::$ty) {
                self.define(&i.$($field).+);
                visit::$method(self, i);
            }
        )*
    };
}

impl<'ast> Visit<'ast> for Walk<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        let attrs = match item {
            Item::Fn(i) => &i.attrs,
            Item::Impl(i) => &i.attrs,
            Item::Mod(i) => &i.attrs,
            Item::Use(i) => &i.attrs,
            Item::Const(i) => &i.attrs,
            Item::Static(i) => &i.attrs,
            Item::Struct(i) => &i.attrs,
            Item::Enum(i) => &i.attrs,
            Item::Trait(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if let Item::Mod(m) = item {
            if m.content.is_none() {
                self.info.children.insert(m.ident.to_string());
                if is_test(attrs) {
                    self.info.test_children.insert(m.ident.to_string());
                }
            }
        }
        if !is_test(attrs) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        expand(&u.tree, &mut Vec::new(), &mut paths);
        let at = line(u.use_token.span);
        let public = !matches!(u.vis, syn::Visibility::Inherited);
        for (p, name) in paths {
            if public {
                self.info.reexports.entry(name).or_default().push(p.clone());
            }
            self.info.named.push((p, at));
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: ModPath = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let first = segs.first().map(String::as_str).unwrap_or("");
        let ours =
            matches!(first, "crate" | "super" | "self") || self.info.children.contains(first);
        if segs.len() >= 2 && p.leading_colon.is_none() && ours {
            let at = p.segments.first().map_or(0, |s| line(s.ident.span()));
            self.info.named.push((segs, at));
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        visit::visit_macro(self, m);
        for e in macro_exprs(m) {
            self.visit_expr(&e);
        }
    }

    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        self.define(&i.sig.ident);
        visit::visit_item_fn(self, i);
    }
    fn visit_impl_item_fn(&mut self, i: &'ast syn::ImplItemFn) {
        if !is_test(&i.attrs) {
            self.define(&i.sig.ident);
            visit::visit_impl_item_fn(self, i);
        }
    }
    defining! {
        visit_trait_item_fn(TraitItemFn) sig.ident,
        visit_item_struct(ItemStruct) ident,
        visit_item_enum(ItemEnum) ident,
        visit_item_union(ItemUnion) ident,
        visit_item_const(ItemConst) ident,
        visit_item_static(ItemStatic) ident,
        visit_item_type(ItemType) ident,
        visit_item_trait(ItemTrait) ident,
        visit_item_mod(ItemMod) ident,
        visit_impl_item_const(ImplItemConst) ident,
        visit_impl_item_type(ImplItemType) ident,
    }
}

/// One crate's files and what each holds.
pub struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    info: HashMap<PathBuf, FileInfo>,
}

/// Two files importing each other, each with the line that names the other.
pub struct Pair {
    pub a: PathBuf,
    pub a_line: String,
    pub b: PathBuf,
    pub b_line: String,
}

/// What [`Crate::check`] found.
pub struct Found {
    pub pairs: Vec<Pair>,
    /// Cycles through more than two files (or not made of the pairs).
    pub longer: Vec<Vec<PathBuf>>,
    /// Files checked (test-only ones left out).
    pub files: usize,
}

impl Crate {
    /// Reads and parses every `.rs` file under `src`.
    pub fn read(src: &Path) -> Result<Crate> {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let p = entry?.path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let rel = p.strip_prefix(src)?.with_extension("");
                let mut parts: ModPath = rel
                    .iter()
                    .map(|c| c.to_string_lossy().to_string())
                    .collect();
                if parts
                    .last()
                    .is_some_and(|l| matches!(l.as_str(), "mod" | "lib" | "main"))
                {
                    parts.pop();
                }
                files.insert(parts, p);
            }
        }
        let mut info = HashMap::new();
        for path in files.values() {
            let mut fi = FileInfo {
                lines: std::fs::read_to_string(path)?
                    .lines()
                    .map(str::to_string)
                    .collect(),
                ..FileInfo::default()
            };
            let parsed = parse(path)?;
            // Declared children first: a path through one is an import.
            for item in &parsed.items {
                if let Item::Mod(m) = item {
                    if m.content.is_none() {
                        fi.children.insert(m.ident.to_string());
                    }
                }
            }
            Walk { info: &mut fi }.visit_file(&parsed);
            info.insert(path.clone(), fi);
        }
        Ok(Crate { files, info })
    }

    fn module_of(&self, file: &Path) -> ModPath {
        let found = self.files.iter().find(|(_, p)| p.as_path() == file);
        found.map(|(m, _)| m.clone()).unwrap_or_default()
    }

    fn defines(&self, file: &Path, name: &str) -> bool {
        self.info
            .get(file)
            .is_some_and(|i| i.defines.contains(name))
    }

    /// The file that defines item `rest[0]` named through `target`, re-exports followed.
    fn follow(&self, target: &Path, rest: &[String], depth: usize) -> PathBuf {
        if rest.is_empty() || depth > 8 || self.defines(target, &rest[0]) {
            return target.to_path_buf();
        }
        let here = self.module_of(target);
        let Some(info) = self.info.get(target) else {
            return target.to_path_buf();
        };
        for p in info.reexports.get(&rest[0]).into_iter().flatten() {
            if let Some(found) = self.resolve(p, &here, &info.children, depth + 1) {
                return found;
            }
        }
        for p in info.reexports.get("*").into_iter().flatten() {
            let found = self.resolve(p, &here, &info.children, depth + 1);
            if let Some(found) = found.filter(|f| self.defines(f, &rest[0])) {
                return found;
            }
        }
        target.to_path_buf()
    }

    /// The file a path names from module `here` (whose child modules are `children`), or
    /// `None` for a path out of the crate.
    fn resolve(
        &self,
        path: &[String],
        here: &[String],
        children: &HashSet<String>,
        depth: usize,
    ) -> Option<PathBuf> {
        let mut segs: Vec<&str> = path.iter().map(String::as_str).collect();
        let first = *segs.first()?;
        let mut base: Vec<&str> = here.iter().map(String::as_str).collect();
        if first == "crate" {
            base.clear();
            segs.remove(0);
        } else if first == "super" || first == "self" {
            while let Some(&s) = segs.first().filter(|&&s| s == "super" || s == "self") {
                if s == "super" {
                    base.pop();
                }
                segs.remove(0);
            }
        } else if !children.contains(first) {
            return None;
        }
        let full: ModPath = base
            .into_iter()
            .chain(segs.into_iter().filter(|&s| s != "self"))
            .map(str::to_string)
            .collect();
        (0..=full.len()).rev().find_map(|n| {
            let file = self.files.get(&full[..n])?;
            Some(self.follow(file, &full[n..], depth))
        })
    }

    /// Every pair and longer cycle among the crate's non-test files.
    pub fn check(&self) -> Found {
        let mut skip: HashSet<ModPath> = HashSet::new();
        for (m, p) in &self.files {
            for name in &self.info[p].test_children {
                let mut child = m.clone();
                child.push(name.clone());
                skip.insert(child);
            }
        }
        // A test-only module's children are test-only too.
        let live: Vec<(&ModPath, &PathBuf)> = (self.files.iter())
            .filter(|(m, _)| !(1..=m.len()).any(|n| skip.contains(&m[..n])))
            .collect();
        let mut graph: BTreeMap<PathBuf, BTreeMap<PathBuf, String>> = BTreeMap::new();
        for &(m, p) in &live {
            let info = &self.info[p];
            let mut targets = BTreeMap::new();
            for (named, at) in &info.named {
                let Some(t) = self.resolve(named, m, &info.children, 0) else {
                    continue;
                };
                if &t != p {
                    let text = info
                        .lines
                        .get(at.saturating_sub(1))
                        .map_or("", |l| l.trim());
                    targets.entry(t).or_insert_with(|| text.to_string());
                }
            }
            graph.insert(p.clone(), targets);
        }
        let mut pairs = Vec::new();
        for (a, targets) in &graph {
            for (b, a_line) in targets {
                if a < b {
                    if let Some(b_line) = graph.get(b).and_then(|t| t.get(a)) {
                        pairs.push(Pair {
                            a: a.clone(),
                            a_line: a_line.clone(),
                            b: b.clone(),
                            b_line: b_line.clone(),
                        });
                    }
                }
            }
        }
        let paired: BTreeSet<&PathBuf> = pairs.iter().flat_map(|p| [&p.a, &p.b]).collect();
        let longer = components(&graph)
            .into_iter()
            .filter(|c| c.len() > 2 || !c.iter().all(|f| paired.contains(f)))
            .collect();
        Found {
            pairs,
            longer,
            files: live.len(),
        }
    }
}

/// The strongly connected components of more than one file (Tarjan's algorithm).
fn components(graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, String>>) -> Vec<Vec<PathBuf>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
        index: HashMap<&'g PathBuf, usize>,
        low: HashMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        on: HashSet<&'g PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g PathBuf) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.graph[v].keys() {
                let Some((w, _)) = self.graph.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: HashSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `tree` (relative path -> text) under a fresh folder and checks it.
    fn check(name: &str, tree: &[(&str, &str)]) -> (usize, usize) {
        let dir =
            std::env::temp_dir().join(format!("extalloc-lints-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (rel, text) in tree {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("{text}\n")).unwrap();
        }
        let found = Crate::read(&dir).unwrap().check();
        std::fs::remove_dir_all(&dir).unwrap();
        (found.pairs.len(), found.longer.len())
    }

    #[test]
    fn known_crates_give_known_cycles() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], (usize, usize));
        let cases: &[Case] = &[
            ("child-names-parent", &[("lib.rs", "mod v;"), ("v/mod.rs", "mod io;\npub use io::Fallocate;\npub struct Volume;"), ("v/io.rs", "use super::Volume;\npub enum Fallocate {}")], (1, 0)),
            ("shared-in-sibling", &[("lib.rs", "mod v;"), ("v/mod.rs", "mod io;\nmod state;\npub use io::F;\npub use state::V;"), ("v/state.rs", "pub struct V;"), ("v/io.rs", "use super::state::V;\npub enum F {}")], (0, 0)),
            ("parent-only-reexports", &[("lib.rs", "mod v;"), ("v/mod.rs", "mod io;\nmod state;\npub use io::F;\npub use state::V;"), ("v/state.rs", "pub struct V;"), ("v/io.rs", "use super::V;\npub enum F {}")], (0, 0)),
            ("ring-of-three", &[("lib.rs", "mod a;\nmod b;\nmod c;"), ("a.rs", "use crate::b::B;\npub struct A;"), ("b.rs", "use crate::c::C;\npub struct B;"), ("c.rs", "use crate::a::A;\npub struct C;")], (0, 1)),
            ("test-module-names-parent", &[("lib.rs", "mod v;"), ("v/mod.rs", "#[cfg(test)]\nmod tests;\npub struct V;\nfn f() { tests::g() }"), ("v/tests.rs", "use super::V;\npub fn g() {}")], (0, 0)),
            ("groups-code-comments", &[("lib.rs", "mod a;\nmod b;"), ("a.rs", "use crate::{b::{B}};\npub struct A;"), ("b.rs", "// crate::a::A is not code\npub struct B;\nfn f() -> crate::a::A { todo!() }")], (1, 0)),
            ("a-path-in-a-macro", &[("lib.rs", "mod a;\nmod b;"), ("a.rs", "use crate::b::B;\npub struct A;"), ("b.rs", "pub struct B;\nfn f() { println!(\"{}\", crate::a::A::NAME) }")], (1, 0)),
            ("test-code-is-not-an-import", &[("lib.rs", "mod a;\nmod b;"), ("a.rs", "use crate::b::B;\npub struct A;"), ("b.rs", "pub struct B;\n#[cfg(test)]\nmod t {\n    use crate::a::A;\n}")], (0, 0)),
        ];
        for (name, tree, want) in cases {
            assert_eq!(check(name, tree), *want, "case {name}");
        }
    }
}
