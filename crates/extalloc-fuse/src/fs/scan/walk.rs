//! A walk of the namespace that reads one directory at a time, for the command line's
//! `ls` and `get` on a read-only view of a volume ([`walk`], [`resolve`]): its memory is
//! the entries of the directories on the current path, the inode numbers of the
//! directories and of the hard-linked files met so far (8 bytes and a set's overhead
//! each), not every file (the whole read, `load`, held every inode and entry: about 1 KB
//! a file).
//!
//! Data structures: a stack of the directories being listed, each with its entries (its
//! log read back, in name order) and a cursor; the directories already listed and the
//! inodes of more than one link already visited, so each inode is visited once, at its
//! first path. Invariant: [`walk`] visits each inode a walk from the root reaches exactly
//! once, in depth-first name order, and lists no directory twice (a damaged tree that
//! names a directory from two places, or loops, lists it at its first path only).
//! Every `TRIM_EVERY` inodes read it trims the volume's file cache, which only a
//! checkpoint trims otherwise. Locks: none (a read-only view of the volume).

use super::super::core::ROOT;
use super::read::read_log;
use super::report::NamespaceReport;
use crate::inode::{Inode, Kind};
use extalloc::volume::Volume;
use std::collections::HashSet;

/// A directory's entries, name and inode, in name order.
type Listing = Vec<(Vec<u8>, u64)>;

/// Inodes read between two trims of the volume's file cache.
const TRIM_EVERY: u64 = 4096;

/// Directory `ino`'s entries, name order, from its log, and what its parse stepped over
/// or stopped at (a torn tail, damage: the entries before it stand, as a mount takes
/// them), said as a problem to report.
fn entries(vol: &Volume, ino: u64) -> Result<(Listing, Option<String>), String> {
    let mut report = NamespaceReport::default();
    let log = read_log(vol, ino, false, &mut report)
        .map_err(|e| format!("directory {ino}: its log cannot be read: {e}"))?;
    let problem = log.problem.as_ref().map(|p| {
        format!("directory {ino}: {p}; run `extalloc fsck` (a read-write mount or `fsck --repair` mends it)")
    });
    Ok((
        log.entries.into_iter().map(|(n, (i, _))| (n, i)).collect(),
        problem,
    ))
}

/// Inode `ino` read from its attribute blob: `None` when there is no such file (an entry
/// naming an inode that does not exist, which `fsck --repair` drops).
fn inode(vol: &Volume, ino: u64) -> Result<Option<Inode>, String> {
    match vol.attr(ino) {
        Ok(blob) => Inode::decode(&blob)
            .map(Some)
            .ok_or_else(|| format!("inode {ino}: does not decode; run `extalloc fsck`")),
        Err(extalloc::Error::NoSuchFile { .. }) => Ok(None),
        Err(e) => Err(format!("inode {ino}: cannot be read: {e}")),
    }
}

/// Calls `visit(path, ino, kind)` for every inode a walk from the root reaches (the root
/// as `/`), at its first path, depth first in name order (see the module documentation),
/// and returns the problems of the directory logs it read (a torn tail, damage stepped
/// over: their entries before it are walked, as a mount takes them). Stops at the first
/// error, `visit`'s or the walk's (a log or inode that cannot be read, an inode that does
/// not decode: the message says which and what to run); an entry naming an inode that
/// does not exist is skipped, as `fsck --repair` would drop it.
pub fn walk(
    vol: &Volume,
    mut visit: impl FnMut(&str, u64, Kind) -> Result<(), String>,
) -> Result<Vec<String>, String> {
    visit("/", ROOT, Kind::Dir)?;
    let mut problems = Vec::new();
    let mut listed = HashSet::from([ROOT]);
    let mut linked = HashSet::new();
    let mut read = 0u64;
    let (root, problem) = entries(vol, ROOT)?;
    problems.extend(problem);
    // Each level: the directory's path (ending without '/'), its entries, the next one.
    let mut stack = vec![(String::new(), root, 0usize)];
    while let Some((base, list, at)) = stack.last_mut() {
        let Some((name, ino)) = list.get(*at) else {
            stack.pop();
            continue;
        };
        *at += 1;
        let (ino, path) = (*ino, format!("{base}/{}", String::from_utf8_lossy(name)));
        let Some(node) = inode(vol, ino)? else {
            continue; // no such inode: a dangling entry
        };
        read += 1;
        if read.is_multiple_of(TRIM_EVERY) {
            vol.trim_file_cache();
        }
        let first = match node.kind {
            Kind::Dir => listed.insert(ino),
            _ => node.nlink <= 1 || linked.insert(ino),
        };
        if !first {
            continue;
        }
        visit(&path, ino, node.kind)?;
        if node.kind == Kind::Dir {
            let (list, problem) = entries(vol, ino)?;
            problems.extend(problem);
            stack.push((path, list, 0));
        }
        debug_assert!(
            stack.len() <= listed.len(),
            "each level a directory listed once"
        );
    }
    Ok(problems)
}

/// The inode and kind at `path` (from the root; `/` or empty is the root), read one
/// directory at a time; `None` when a component is missing or not a directory.
pub fn resolve(vol: &Volume, path: &str) -> Result<Option<(u64, Kind)>, String> {
    let mut at = (ROOT, Kind::Dir);
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if at.1 != Kind::Dir {
            return Ok(None);
        }
        let found = (entries(vol, at.0)?.0.into_iter())
            .find(|(name, _)| name.as_slice() == part.as_bytes());
        let Some((_, ino)) = found else {
            return Ok(None);
        };
        let Some(node) = inode(vol, ino)? else {
            return Ok(None); // a dangling entry, as the walk skips it
        };
        at = (ino, node.kind);
    }
    Ok(Some(at))
}

#[cfg(test)]
mod tests {
    use super::super::super::tests::{device, fresh, mkdir, node, put, ME};
    use super::super::paths;
    use super::*;
    use extalloc::Policy;
    use std::collections::BTreeMap;

    /// The walk visits what the whole read's `paths` finds, each inode once (a second hard
    /// link at its first path only), and `resolve` finds each path's inode.
    #[test]
    fn the_walk_visits_what_the_whole_read_finds_once() {
        let dev = device(91);
        let fs = fresh(&dev);
        let a = mkdir(&fs, ROOT, "a");
        let b = mkdir(&fs, a, "b");
        put(&fs, ROOT, "top", b"1");
        let f = put(&fs, b, "deep", b"22");
        fs.link(f, ROOT, b"second", crate::fs::Caller::ROOT)
            .unwrap();
        let mut link = node(Kind::Symlink);
        link.target = Some(b"a/b");
        fs.make(a, b"sym", link, ME).unwrap();
        for i in 0..50 {
            put(&fs, a, &format!("n{i:02}"), b"");
        }
        fs.unmount().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let mut seen = BTreeMap::new();
        walk(&vol, |path, ino, kind| {
            assert!(
                seen.insert(ino, (path.to_string(), kind)).is_none(),
                "{path} twice"
            );
            Ok(())
        })
        .unwrap();
        let whole = paths(&vol).unwrap();
        assert_eq!(seen.len(), whole.len());
        assert_eq!(
            seen.len(),
            1 + 2 + 2 + 1 + 50,
            "root, a, b, top, deep, sym, n*"
        );
        for (ino, (path, kind)) in &whole {
            assert_eq!(seen[ino].1, *kind, "{path}");
            assert_eq!(resolve(&vol, &seen[ino].0).unwrap(), Some((*ino, *kind)));
        }
        // Depth first, name order: the hard link's first path is the one met first.
        assert_eq!(seen[&f].0, "/a/b/deep");
        assert_eq!(resolve(&vol, "/second").unwrap(), Some((f, Kind::File)));
        assert_eq!(resolve(&vol, "/").unwrap(), Some((ROOT, Kind::Dir)));
        assert_eq!(resolve(&vol, "a/missing").unwrap(), None);
        assert_eq!(resolve(&vol, "top/below").unwrap(), None, "not a directory");
        // The visitor's error stops the walk and is returned.
        let mut calls = 0;
        let e = walk(&vol, |_, _, _| {
            calls += 1;
            if calls == 3 {
                return Err("stop".into());
            }
            Ok(())
        });
        assert_eq!((e, calls), (Err("stop".into()), 3));
    }
}
