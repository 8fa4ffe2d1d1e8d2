//! The namespace's invariant (`fs/mod.rs`), checked: in the unit tests after every change
//! of the namespace, when the lock for writing is let go (of a namespace over
//! [`CHECK_EVERY_CHANGE_NODES`] inodes, after a sample of changes, one in `count` over that:
//! a check then costs about that many inodes a change, not time quadratic in the files a
//! test makes).
//!
//! Data structures: [`NsWrite`], the namespace lock held for writing, which every writer
//! takes through [`Fs::ns_write`]; in a test build its drop runs [`Fs::check_namespace`]
//! (unless the thread is already panicking).
//!
//! What is checked, in memory: the root is a directory that is its own parent; every entry
//! names a node; a directory is named by exactly one entry, in the directory its `parent`
//! says; a file's `nlink` counts its entries, a named directory's is 2 plus its
//! subdirectories, an unnamed directory has no entries; a tmpfile never named (`tmpfile.rs`)
//! is a regular file with link count 0; a parked lookup count is of an inode not in
//! memory that an entry names; each directory's `live` is what its
//! entries take as records and `log_start <= log_bytes <= mapped_to` (once known). Against
//! the volume (while the file system is not shut down and holds at most
//! [`VOLUME_CHECK_MAX_NODES`] inodes, so the tests of large namespaces stay quick): each
//! directory's log, replayed from `log_start`, gives its entries and ends at `log_bytes`,
//! and a node whose times are not kept in memory (`attr_dirty` clear) has exactly the
//! attribute blob it would write; a shelved directory's log holds the count and bytes of
//! the entries it let go, and names once each directory in memory it is the parent of.
//! Nothing is checked once the volume has stopped committing after a change failed part
//! way ([`extalloc::volume::Volume::aborted`]), and memory alone once damage was met.
//!
//! Lock order: the checks run with `ns` held for writing and take the volume's locks
//! (reads only), as every namespace change does.

use super::core::{Entry, Fs, Ns, ROOT};
use crate::dir::{DirLog, RECORD_OVERHEAD};
use crate::inode::Kind;
use parking_lot::RwLockWriteGuard;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};

/// Namespaces larger than this are checked in memory only after each change.
pub(crate) const VOLUME_CHECK_MAX_NODES: usize = 256;

/// Namespaces up to this many inodes are checked after every change; larger ones after
/// one change in `count / CHECK_EVERY_CHANGE_NODES`.
pub(crate) const CHECK_EVERY_CHANGE_NODES: u64 = 256;

/// Changes of namespaces over [`CHECK_EVERY_CHANGE_NODES`] inodes, for the sample.
static LARGE_CHANGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether the change just made to a namespace of `count` inodes is checked.
fn check_due(count: u64) -> bool {
    let every = count / CHECK_EVERY_CHANGE_NODES;
    // Every change of a namespace of up to twice the bound is checked.
    assert!(every > 1 || count < 2 * CHECK_EVERY_CHANGE_NODES);
    every <= 1
        || LARGE_CHANGES
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(every)
}

/// The namespace held for writing (see the module documentation).
pub(crate) struct NsWrite<'a> {
    fs: &'a Fs,
    guard: RwLockWriteGuard<'a, Ns>,
}

impl Fs {
    /// Takes the namespace lock for writing.
    pub(crate) fn ns_write(&self) -> NsWrite<'_> {
        NsWrite {
            fs: self,
            guard: self.ns.write(),
        }
    }

    /// Checks the namespace's invariant (see the module documentation): the first
    /// violation found, described.
    pub fn check_namespace(&self) -> Result<(), String> {
        check(self, &self.ns.read())
    }
}

impl Deref for NsWrite<'_> {
    type Target = Ns;
    fn deref(&self) -> &Ns {
        &self.guard
    }
}

impl DerefMut for NsWrite<'_> {
    fn deref_mut(&mut self) -> &mut Ns {
        &mut self.guard
    }
}

impl Drop for NsWrite<'_> {
    fn drop(&mut self) {
        if cfg!(test) && !std::thread::panicking() && check_due(self.guard.count) {
            if let Err(why) = check(self.fs, &self.guard) {
                panic!("the namespace's invariant is broken after a change: {why}");
            }
        }
    }
}

/// Checks `ns` (held by the caller) against the invariant and, when small, the volume.
/// Once the volume has stopped committing (a change failed inside its atomic group, as
/// after a device error), memory may hold that change's first steps and nothing more is
/// checked: no commit writes them, and the next mount reads the last commit back.
fn check(fs: &Fs, ns: &Ns) -> Result<(), String> {
    if fs.vol.volume().aborted().is_some() {
        return Ok(());
    }
    let away = check_memory(ns)?;
    check_parked(ns, &away)?;
    check_listers(fs, ns)?;
    // Damage met (a read back that failed its check) leaves the volume unlike memory
    // until the next mount's whole read repairs it: memory alone is checked.
    let down =
        fs.down.load(std::sync::atomic::Ordering::Acquire) || fs.vol.volume().store().damaged();
    if !down && ns.count <= VOLUME_CHECK_MAX_NODES as u64 {
        check_volume(fs, ns)?;
        check_away(fs, ns, &away)?;
        check_count(fs, ns)?;
    }
    Ok(())
}

/// Each directory in memory counts as listers exactly the open handles that list it
/// (`listing.rs`: its arena holds their positions), and a shelved one has none.
fn check_listers(fs: &Fs, ns: &Ns) -> Result<(), String> {
    let mut open: HashMap<u64, u32> = HashMap::new();
    // A listing through a run's view (`runlisting.rs`) is counted by no directory.
    for h in fs
        .dir_handles
        .lock()
        .values()
        .filter(|h| h.by_hash.is_none())
    {
        *open.entry(h.ino).or_default() += 1;
    }
    for (&ino, node) in &ns.nodes {
        let Some(d) = node.dir.as_deref() else {
            continue;
        };
        let (counted, handles) = (d.entries.listers(), open.remove(&ino).unwrap_or(0));
        if counted != handles || (counted > 0 && d.shelved()) {
            return Err(format!(
                "directory {ino}: {counted} listers counted, {handles} open handles, \
                 shelved {}",
                d.shelved()
            ));
        }
    }
    // What is left lists directories no longer in memory: removed, and the kernel's last
    // forget came before the handles' release (it may); nothing counts them.
    Ok(())
}

/// What [`check_memory`] leaves to the volume: the entries naming inodes not in memory
/// (each inode's kind as its entries say, when they say, and its names), and the
/// directories whose subdirectories are not all known (an entry naming an inode not in
/// memory whose kind is not known), with the subdirectories found in memory.
#[derive(Default)]
struct Away {
    inodes: HashMap<u64, (Option<Kind>, u32)>,
    unsure: HashMap<u64, u32>,
    /// Directories whose entries are shelved (`ondemand.rs`, `Fs::shelve_dirs`): their
    /// names and subdirectories are not counted in memory; their logs are checked against
    /// the count they kept ([`check_volume`]).
    shelved: std::collections::HashSet<u64>,
    /// Every directory is in memory (none away, no kind unknown): a file's names are all
    /// counted, and its link count must equal them; else at least them.
    complete: bool,
}

/// The invariant in memory; returns what it could not check there ([`Away`]), for
/// [`check_away`].
fn check_memory(ns: &Ns) -> Result<Away, String> {
    let root = ns.nodes.get(&ROOT).ok_or("no root node")?;
    match &root.dir {
        Some(d) if d.parent == ROOT => {}
        _ => return Err("the root is not a directory that is its own parent".into()),
    }
    // Entries naming each node; the directory naming each directory.
    let mut names: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    let mut away = Away::default();
    for (&ino, node) in &ns.nodes {
        let Some(d) = &node.dir else { continue };
        if d.shelved() {
            away.shelved.insert(ino);
            check_dir_bytes(ino, d)?;
            continue;
        }
        for (name, Entry { ino: child, kind }) in &d.entries {
            *names.entry(child).or_default() += 1;
            let Some(c) = ns.nodes.get(&child) else {
                // Read back when named (`ondemand.rs`): `check_away`.
                let a = away.inodes.entry(child).or_insert((kind, 0));
                a.1 += 1;
                if a.0 != kind && kind.is_some() && a.0.is_some() {
                    return Err(format!("inode {child} named as a {kind:?} and a {:?}", a.0));
                }
                a.0 = a.0.or(kind);
                match kind {
                    Some(Kind::Dir) => *subdirs.entry(ino).or_default() += 1,
                    Some(_) => {}
                    None => {
                        away.unsure.insert(ino, 0);
                    }
                }
                continue;
            };
            if kind.is_some_and(|k| k != c.inode.kind) {
                return Err(format!(
                    "directory {ino}: {name:?} names inode {child} as a {kind:?}, which is a {:?}",
                    c.inode.kind
                ));
            }
            if let Some(cd) = &c.dir {
                *subdirs.entry(ino).or_default() += 1;
                if cd.parent != ino {
                    return Err(format!(
                        "directory {child} is named in {ino} but its parent is {}",
                        cd.parent
                    ));
                }
            }
        }
        check_dir_bytes(ino, d)?;
    }
    for (dir, found) in away.unsure.iter_mut() {
        *found = subdirs.get(dir).copied().unwrap_or(0);
    }
    away.complete = away.unsure.is_empty()
        && away.shelved.is_empty()
        && (away.inodes.values()).all(|(k, _)| *k != Some(Kind::Dir));
    check_links(ns, &names, &subdirs, &away)?;
    Ok(away)
}

/// Directory `ino`'s `live` is what its entries take as records, and its log's bounds
/// are in order.
fn check_dir_bytes(ino: u64, d: &super::core::DirState) -> Result<(), String> {
    let live: u64 = match d.shelved() {
        true => d.live, // checked against its log (`check_volume`)
        false => (d.entries.keys())
            .map(|n| (RECORD_OVERHEAD + n.len()) as u64)
            .sum(),
    };
    if live != d.live {
        return Err(format!(
            "directory {ino}: live {} but entries take {live}",
            d.live
        ));
    }
    let mapped_ok = d.mapped_to == 0 || d.log_bytes <= d.mapped_to;
    if d.log_start > d.log_bytes || !mapped_ok {
        return Err(format!(
            "directory {ino}: log start {}, end {}, mapped to {}",
            d.log_start, d.log_bytes, d.mapped_to
        ));
    }
    Ok(())
}

/// Each node's link count against its names (`names`) and subdirectories (`subdirs`);
/// a directory in `unsure` (some entry's kind not known) has at least what was found,
/// and [`check_away`] counts the rest.
fn check_links(
    ns: &Ns,
    names: &HashMap<u64, u32>,
    subdirs: &HashMap<u64, u32>,
    away: &Away,
) -> Result<(), String> {
    for (&ino, node) in &ns.nodes {
        let named = names.get(&ino).copied().unwrap_or(0);
        let want = match &node.dir {
            _ if ino == ROOT => 2 + subdirs.get(&ino).copied().unwrap_or(0),
            Some(_) if named > 1 => return Err(format!("directory {ino} has {named} names")),
            // Named in a directory whose entries are shelved: not counted here.
            Some(d) if named == 0 && away.shelved.contains(&d.parent) => {
                2 + subdirs.get(&ino).copied().unwrap_or(0)
            }
            Some(d) if named == 0 && !d.is_empty() => {
                return Err(format!("directory {ino} has no name but has entries"))
            }
            Some(_) if named == 0 => 0,
            Some(_) => 2 + subdirs.get(&ino).copied().unwrap_or(0),
            None => named,
        };
        // Names in directories not in memory are not counted (`Away::complete`).
        let unsure = away.unsure.contains_key(&ino) || away.shelved.contains(&ino);
        let ok = match (unsure, &node.dir) {
            (true, _) => node.inode.nlink >= want,
            (false, None) if !away.complete => node.inode.nlink >= want,
            (false, _) => node.inode.nlink == want,
        };
        if !ok {
            return Err(format!(
                "inode {ino} ({:?}): nlink {}, {want} by its names",
                node.inode.kind, node.inode.nlink
            ));
        }
        if node.tmpfile && (node.inode.kind != Kind::File || node.inode.nlink != 0) {
            return Err(format!(
                "inode {ino} ({:?}): a tmpfile with nlink {}",
                node.inode.kind, node.inode.nlink
            ));
        }
    }
    Ok(())
}

/// `Ns::count` is the volume's file count: every inode and every spill file of
/// extended attributes the file system holds.
fn check_count(fs: &Fs, ns: &Ns) -> Result<(), String> {
    let files = (fs.vol.volume().file_count()).map_err(|e| format!("the file count: {e}"))?;
    if files != ns.count {
        return Err(format!(
            "{} files counted, the volume holds {files}",
            ns.count
        ));
    }
    Ok(())
}

/// Each parked lookup count ([`Ns::parked`]) is of a named inode not in memory (`away`;
/// named, when directories are shelved, perhaps in one of those).
fn check_parked(ns: &Ns, away: &Away) -> Result<(), String> {
    for ino in ns.parked.lock().inodes() {
        if ns.nodes.contains_key(&ino) {
            return Err(format!("inode {ino}: in memory and its lookups parked"));
        }
        if !away.inodes.contains_key(&ino) && away.shelved.is_empty() {
            return Err(format!("inode {ino}: lookups parked but no entry names it"));
        }
    }
    Ok(())
}

/// The inodes not in memory ([`Away`]: kind and names), against their blobs on the
/// volume: each is an inode of the kind its entries say; a non-directory's link count is
/// its names; a directory is named once, its link count at least 2; and each directory
/// whose entries' kinds were not all known has 2 plus its subdirectories, counted with
/// the kinds the blobs give.
fn check_away(fs: &Fs, ns: &Ns, away: &Away) -> Result<(), String> {
    let vol = fs.vol.volume();
    let mut dirs_away = std::collections::HashSet::new();
    for (&ino, &(kind, named)) in &away.inodes {
        let blob = vol.attr(ino).map_err(|e| format!("inode {ino}: {e}"))?;
        let inode = crate::inode::Inode::decode(&blob)
            .ok_or_else(|| format!("inode {ino}: its blob is not an inode"))?;
        let links_ok = match inode.kind {
            Kind::Dir => named == 1 && inode.nlink >= 2,
            _ if !away.complete => inode.nlink >= named,
            _ => inode.nlink == named,
        };
        if kind.is_some_and(|k| k != inode.kind) || !links_ok {
            return Err(format!(
                "inode {ino} (not in memory): a {:?} with nlink {}, named {named} times as a \
                 {kind:?}",
                inode.kind, inode.nlink
            ));
        }
        if inode.kind == Kind::Dir {
            dirs_away.insert(ino);
        }
    }
    for (&dir, &found) in &away.unsure {
        let d = ns.dir(dir).map_err(|e| format!("directory {dir}: {e:?}"))?;
        let unknown_dirs = (d.entries.values())
            .filter(|e| e.kind.is_none() && dirs_away.contains(&e.ino))
            .count() as u32;
        let want = 2 + found + unknown_dirs;
        let nlink = ns.node(dir).map_err(|e| format!("{e:?}"))?.inode.nlink;
        if nlink != want {
            return Err(format!(
                "directory {dir}: nlink {nlink}, {want} by its subdirectories"
            ));
        }
    }
    Ok(())
}

/// Directory `ino`'s run view (`runview.rs`) against its whole log: held only while
/// shelved, and every change it keeps after the run is what the log replays to.
fn check_view(ino: u64, d: &super::core::DirState, log: &DirLog) -> Result<(), String> {
    use crate::dir::Changed;
    let Some(v) = d.view.as_deref() else {
        return Ok(());
    };
    if !d.shelved() {
        return Err(format!("directory {ino} holds its entries and a run view"));
    }
    let mut wrong = None;
    v.tail.each(&mut |name, state| {
        let logged = log.entries.get(name).map(|a| a.0);
        if logged != state.map(|a| a.0) && wrong.is_none() {
            wrong = Some(format!(
                "directory {ino}: its run view has {:?} as {state:?}, its log as {logged:?}",
                String::from_utf8_lossy(name)
            ));
        }
    });
    // The adds in order a listing made (`runlisting.rs`) are the changes' adds.
    if let Some(listed) = v.listed.as_ref() {
        let mut adds = 0;
        v.tail.each(&mut |name, state| {
            let held = listed.contains(&(v.index.shape.key.hash(name), name.into()));
            adds += usize::from(state.is_some());
            if held != state.is_some() && wrong.is_none() {
                wrong = Some(format!(
                    "directory {ino}: {:?} is {state:?} in its view's changes, listed {held}",
                    String::from_utf8_lossy(name)
                ));
            }
        });
        if adds != listed.len() && wrong.is_none() {
            let n = listed.len();
            wrong = Some(format!(
                "directory {ino}: {n} adds listed, {adds} in the changes"
            ));
        }
    }
    wrong.map_or(Ok(()), Err)
}

/// Directory `ino`'s log against memory: its entries, or, shelved, the count and record
/// bytes it let go; returns the directories in memory a shelved log names (each must have
/// `ino` as its parent).
fn check_log(fs: &Fs, ns: &Ns, ino: u64, d: &super::core::DirState) -> Result<Vec<u64>, String> {
    let mut named = Vec::new();
    let vol = fs.vol.volume();
    let size = vol.size(ino).map_err(|e| format!("directory {ino}: {e}"))?;
    let bytes = vol
        .read(ino, d.log_start, size.saturating_sub(d.log_start))
        .map_err(|e| format!("directory {ino}: {e}"))?;
    let log = DirLog::parse(&bytes);
    if d.shelved() {
        for &(child, _) in log.entries.values() {
            if let Some(cd) = ns.nodes.get(&child).and_then(|c| c.dir.as_ref()) {
                if cd.parent != ino {
                    return Err(format!(
                        "directory {child} is named in {ino} but its parent is {}",
                        cd.parent
                    ));
                }
                named.push(child);
            }
        }
    }
    if let Some(count) = d.entries.shelved() {
        // What `Fs::unshelve` will read back: the count and the records' bytes.
        let live = crate::dir::live_bytes(log.entries.keys());
        if size != d.log_bytes || log.entries.len() != count || live != d.live {
            return Err(format!(
                "directory {ino} (shelved): its log ({size} bytes, {} entries, {live} \
                 live) is not what it let go ({} bytes, {count} entries, {} live)",
                log.entries.len(),
                d.log_bytes,
                d.live
            ));
        }
    }
    check_view(ino, d, &log)?;
    let inos: BTreeMap<Vec<u8>, u64> = match d.shelved() {
        true => (log.entries.iter())
            .map(|(n, e)| (n.clone(), e.0))
            .collect(),
        false => (d.entries.iter())
            .map(|(n, e)| (n.to_vec(), e.ino))
            .collect(),
    };
    // The kinds the adds carry (`dir/mod.rs`) against memory's, where both know one.
    if !d.shelved() {
        for (name, e) in d.entries.iter() {
            let logged = log.entries.get(name).and_then(|a| a.1);
            if let (Some(k), Some(logged)) = (e.kind, logged) {
                if k != logged {
                    return Err(format!(
                        "directory {ino}: {:?} names inode {} as a {k:?}, its log as a \
                         {logged:?}",
                        String::from_utf8_lossy(name),
                        e.ino
                    ));
                }
            }
        }
    }
    let logged: BTreeMap<Vec<u8>, u64> = (log.entries.iter())
        .map(|(n, e)| (n.clone(), e.0))
        .collect();
    if size != d.log_bytes || logged != inos || log.problem.is_some() {
        return Err(format!(
            "directory {ino}: its log ({size} bytes, {} entries, problem {:?}) is not \
             what memory holds ({} bytes, {} entries)",
            log.entries.len(),
            log.problem,
            d.log_bytes,
            inos.len()
        ));
    }
    Ok(named)
}

/// Every directory's log and every clean node's blob, against the volume; a directory in
/// memory whose parent's entries are shelved is named once in that parent's log.
fn check_volume(fs: &Fs, ns: &Ns) -> Result<(), String> {
    let vol = fs.vol.volume();
    // Directories named in shelved directories' logs: how many times.
    let mut in_shelved: HashMap<u64, u32> = HashMap::new();
    for (&ino, node) in &ns.nodes {
        if let Some(d) = &node.dir {
            for child in check_log(fs, ns, ino, d)? {
                *in_shelved.entry(child).or_default() += 1;
            }
        }
        if node.inode.nlink == 0 {
            // No name reaches it: pending on the volume, and its spill file (`Fs::retract`).
            if !vol.is_pending(ino) || node.spill.is_some_and(|s| !vol.is_pending(s)) {
                return Err(format!(
                    "inode {ino}: no name reaches it, but it is not pending on the volume"
                ));
            }
        } else if !node.attr_dirty {
            let blob = vol.attr(ino).map_err(|e| format!("inode {ino}: {e}"))?;
            if blob != node.blob() {
                return Err(format!(
                    "inode {ino}: its blob on the volume is not the node's (times not \
                     marked as kept in memory)"
                ));
            }
        }
    }
    for (&ino, node) in &ns.nodes {
        let Some(d) = node
            .dir
            .as_ref()
            .filter(|_| ino != ROOT && node.inode.nlink > 0)
        else {
            continue;
        };
        let shelved_parent = ns.nodes.get(&d.parent).and_then(|p| p.dir.as_ref());
        if shelved_parent.is_some_and(|p| p.shelved()) && in_shelved.get(&ino) != Some(&1) {
            return Err(format!(
                "directory {ino}: its parent is {}, whose log names it {} times",
                d.parent,
                in_shelved.get(&ino).copied().unwrap_or(0)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{device, fresh, mkdir, put};
    use super::*;

    /// Runs `break_it` on the namespace held for writing and returns what the check said
    /// when the lock was let go (the drop's panic message).
    fn caught(fs: &Fs, break_it: impl FnOnce(&mut Ns)) -> String {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut ns = fs.ns_write();
            break_it(&mut ns);
        }));
        let payload = outcome.expect_err("a broken invariant passed the check");
        match payload.downcast::<String>() {
            Ok(s) => *s,
            Err(p) => p.downcast_ref::<&str>().unwrap_or(&"?").to_string(),
        }
    }

    #[test]
    fn each_broken_invariant_is_caught_when_the_change_lets_the_lock_go() {
        let dev = device(1);
        let fs = fresh(&dev);
        let dir = mkdir(&fs, ROOT, "d");
        let f = put(&fs, dir, "f", b"data");
        fs.check_namespace().expect("a fresh namespace is sound");

        let why = caught(&fs, |ns| ns.nodes.get_mut(&f).unwrap().inode.nlink += 1);
        assert!(why.contains("nlink 2, 1 by its names"), "{why}");
        fs.ns.write().nodes.get_mut(&f).unwrap().inode.nlink -= 1;

        // An entry removed in memory only: the directory's log still names it.
        let why = caught(&fs, |ns| {
            let d = ns.nodes.get_mut(&dir).unwrap().dir.as_mut().unwrap();
            d.entries.remove(&b"f"[..]);
            d.live -= (RECORD_OVERHEAD + 1) as u64;
            ns.nodes.get_mut(&f).unwrap().inode.nlink = 0;
        });
        // Caught as the log that still names it, or as the inode no name reaches that is
        // not pending on the volume (whichever node the check meets first).
        assert!(
            why.contains(&format!("directory {dir}: its log"))
                || why.contains(&format!("inode {f}: no name reaches it")),
            "{why}"
        );
        {
            let mut ns = fs.ns.write();
            let d = ns.nodes.get_mut(&dir).unwrap().dir.as_mut().unwrap();
            let kind = Some(Kind::File);
            d.entries.insert(b"f"[..].into(), Entry { ino: f, kind });
            d.live += (RECORD_OVERHEAD + 1) as u64;
            ns.nodes.get_mut(&f).unwrap().inode.nlink = 1;
        }

        // A mode changed in memory, neither written nor marked as kept in memory (after a
        // sync, which writes the times the data write kept in memory).
        fs.sync().unwrap();
        // The sync dropped the file's node (the tests keep no node cache): read it back.
        drop(fs.ensure_loaded(&[f]).unwrap());
        assert!(!fs.ns.read().nodes[&f].attr_dirty);
        // Its lookup count parked while the node is in memory too.
        let why = caught(&fs, |ns| {
            ns.parked.get_mut().park(f, 1);
        });
        assert!(why.contains(&format!("inode {f}: in memory and its lookups parked")));
        fs.ns.write().parked.get_mut().take(f);
        let why = caught(&fs, |ns| ns.nodes.get_mut(&f).unwrap().inode.perm ^= 0o100);
        assert!(why.contains(&format!("inode {f}: its blob")), "{why}");
        fs.ns.write().nodes.get_mut(&f).unwrap().inode.perm ^= 0o100;

        let why = caught(&fs, |ns| {
            ns.nodes.get_mut(&dir).unwrap().dir.as_mut().unwrap().parent = dir;
        });
        assert!(why.contains("its parent is"), "{why}");
        fs.ns
            .write()
            .nodes
            .get_mut(&dir)
            .unwrap()
            .dir
            .as_mut()
            .unwrap()
            .parent = ROOT;

        // A named file marked as a tmpfile (one `link` could name as if it had none).
        let why = caught(&fs, |ns| ns.nodes.get_mut(&f).unwrap().tmpfile = true);
        assert!(why.contains("a tmpfile with nlink 1"), "{why}");
        fs.ns.write().nodes.get_mut(&f).unwrap().tmpfile = false;

        fs.check_namespace().expect("every break above was mended");
    }

    #[test]
    #[should_panic(expected = "has a cache entry")]
    fn a_direct_change_to_a_cached_file_is_refused() {
        let dev = device(2);
        let fs = fresh(&dev);
        let f = put(&fs, ROOT, "f", b"cached");
        let _ = fs.vol.uncached(f).write(f, 0, b"direct");
    }
}
