//! Reading the whole namespace back (at a mount after a crash, at `fsck` and its repair),
//! checking it, and repairing what a crash between the steps of one operation leaves. A
//! mount after a clean close reads none of it (`ondemand.rs`).
//!
//! A namespace change is several volume operations (create the inode's file, append to a
//! directory's log, rewrite a link count) made in one atomic group of the volume, so a
//! crash keeps all or none of them (`names.rs`). What a crash can still leave, each
//! repaired here:
//!
//! - an **orphan**: an inode no directory names and whose link count is 0 (unlinked while
//!   open, or replaced by a rename, or an `O_TMPFILE` file never linked, and the removal
//!   of its file never ran): removed;
//! - an **unnamed** inode: no name refers to it but its link count says it has names (a
//!   damaged directory log cut short, a lost record; never a crash): linked into
//!   `/lost+found` as `#INODE` with its data, before any other repair (`rescue`);
//! - a **link count** that disagrees with the names found: set to what was found;
//! - an **entry** naming an inode that does not exist, or a second name of a directory
//!   (a rename cut between its add and its remove): dropped;
//! - a **torn log** tail (a record cut short): cut off;
//! - a **stray spill file** of extended attributes (its inode was removed and the crash
//!   came before its spill file was): removed.
//!
//! Extended attributes whose bytes fail their checks (a blob's tail that does not decode,
//! a spill file that is damaged or names another owner) are damage: mount refuses them,
//! and `fsck --repair` drops them (`damaged_xattrs`).
//!
//! Data structures: [`NamespaceReport`] lists what was found; `Read` is one read of the
//! namespace (every inode in one pass over the volume's files, every directory's log, a
//! walk from the root), which the rescue and the nodes `load` builds share. `fsck`'s
//! check keeps far less (`census.rs`): a few bytes an inode and one log at a time.
//!
//! Invariant: after `load(.., repair = true)` and a sync, `check` of the same volume
//! reports nothing.
//!
//! Lock order: none (runs before the file system serves anything, or on a read-only view).

mod census;
mod leftovers;
mod paged;
mod read;
mod report;
mod rescue;
mod walk;

pub(crate) use self::census::repair_crash;
use self::leftovers::{load_xattrs, remove_leftovers};
pub(crate) use self::paged::repair_paged;
use self::read::Read;
pub(crate) use self::read::{fix_log, read_log};
pub use self::report::NamespaceReport;
pub(crate) use self::rescue::append;
use self::rescue::{link_lost, set_link_count, tops_of};
pub use self::walk::{resolve, walk};
use super::core::{dir_node, Entry, InoMap, InoSet, Node, ROOT};
use crate::dir::record;
use crate::inode::{Inode, Kind};
use extalloc::volume::Volume;
use std::collections::VecDeque;

/// Checks the file system on `vol` without changing it, in memory of a few bytes an
/// inode and one directory's log (`census.rs`): what a mount would repair.
pub fn check(vol: &Volume) -> Result<NamespaceReport, String> {
    let report = census::check(vol)?;
    #[cfg(debug_assertions)]
    same_as_full_read(vol, &report);
    Ok(report)
}

/// On a small volume, checks that the census reports what a full read reports.
#[cfg(debug_assertions)]
fn same_as_full_read(vol: &Volume, report: &NamespaceReport) {
    const SMALL: u64 = 4096;
    if vol.file_count().map_or(true, |n| n > SMALL) {
        return;
    }
    if let Ok((_, full)) = Read::of(vol).and_then(|r| load_once(vol, false, r, false)) {
        assert_eq!(report, &full, "the census finds what a full read finds");
    }
}

/// Reads every inode and directory log of `vol` (one pass over the volume's files, and
/// each log once, unless a rescue changed the namespace); with `repair`, fixes what it
/// finds (see the module documentation). Fails when the volume holds no file system.
pub(crate) fn load(vol: &Volume, repair: bool) -> Result<(InoMap<Node>, NamespaceReport), String> {
    let mut read = Read::of(vol)?;
    let mut lost_found = Vec::new();
    if repair {
        // Each rescue links what it found and reads the namespace again.
        while let Some(tops) = rescue(vol, &read)? {
            lost_found.extend(tops);
            read = Read::of(vol)?;
        }
        debug_assert!(read.lost().is_empty(), "every unnamed inode rescued");
    }
    let (nodes, mut report) = load_once(vol, repair, read, true)?;
    report.lost_found = lost_found;
    Ok((nodes, report))
}

/// Checks and with `repair` fixes what `read` found (see [`load`]); builds the nodes if
/// `keep` (else returns none: a check).
fn load_once(
    vol: &Volume,
    repair: bool,
    read: Read,
    keep: bool,
) -> Result<(InoMap<Node>, NamespaceReport), String> {
    debug_assert!(keep || !repair, "a repair keeps its nodes");
    let Read {
        mut inodes,
        damaged,
        tails,
        spills,
        mut logs,
        walk,
        found: mut report,
    } = read;
    if repair && !damaged.is_empty() {
        return Err(format!(
            "the attributes of inodes {damaged:?} are damaged (not an inode): run `extalloc \
             fsck --repair`, which gives each a new inode and keeps its data"
        ));
    }
    report.damaged_inodes = damaged;
    if repair {
        for (&ino, log) in &mut logs {
            fix_log(vol, ino, log)?;
        }
    }
    let mut nodes = check_inodes(vol, &mut inodes, &walk, (repair, keep), &mut report)?;
    // Directories once every link count is set: their entries take each inode's kind. An
    // entry naming no inode is dropped below (or, unrepaired, left out of
    // `readdirplus`): a file meanwhile.
    for (&ino, node) in nodes.iter_mut().filter(|(_, n)| n.inode.kind == Kind::Dir) {
        let kind = |i: u64| inodes.get(&i).map(|n| n.kind);
        *node = dir_node(node.inode, &logs[&ino], walk.parent[&ino], kind);
    }
    report.orphans.sort_unstable();
    report.unnamed.sort_unstable();
    census::sort_lists(&mut report);
    let reached = |ino: u64| walk.parent.contains_key(&ino);
    load_xattrs(
        vol,
        (&reached, &mut nodes),
        (&tails, spills),
        repair,
        &mut report,
    )?;
    if repair {
        drop_bad_entries(vol, &walk.drop, &mut nodes)?;
        remove_leftovers(vol, &report)?;
    }
    Ok((nodes, report))
}

/// Each inode against the walk: one it did not reach is unnamed (links recorded) or an
/// orphan (none); one it reached has its link count checked against the names found, and
/// set when `repair`. Returns a node of each reached inode when `keep` (else none).
fn check_inodes(
    vol: &Volume,
    inodes: &mut InoMap<Inode>,
    walk: &read::Walk,
    (repair, keep): (bool, bool),
    report: &mut NamespaceReport,
) -> Result<InoMap<Node>, String> {
    let room = if keep { inodes.len() } else { 0 };
    let mut nodes = InoMap::with_capacity_and_hasher(room, Default::default());
    for (&ino, inode) in inodes.iter_mut() {
        if !walk.parent.contains_key(&ino) {
            if inode.nlink > 0 {
                report.unnamed.push(ino);
            } else {
                report.orphans.push(ino);
            }
            continue;
        }
        let want = match inode.kind {
            Kind::Dir => 2 + walk.subdirs.get(&ino).copied().unwrap_or(0),
            _ => walk.links.get(&ino).copied().unwrap_or(0),
        };
        if inode.nlink != want {
            report.link_counts.push(format!(
                "inode {ino}: {} recorded, {want} found",
                inode.nlink
            ));
            inode.nlink = want;
            if repair {
                set_link_count(vol, ino, inode)?;
            }
        }
        report.count(inode.kind);
        if keep {
            nodes.insert(ino, Node::plain(*inode));
        }
    }
    // A node of each inode the walk reached, and of no other.
    debug_assert!(
        !keep
            || nodes.len()
                == inodes
                    .keys()
                    .filter(|i| walk.parent.contains_key(i))
                    .count(),
        "a node per reached inode"
    );
    Ok(nodes)
}

/// Links every inode no name refers to but whose link count says it has names into
/// `/lost+found` (made if missing) as `#INODE`, before anything is repaired or removed:
/// damage that cut a directory's log never costs a file its data. Returns the inodes
/// linked (`None`: `read` found none lost, and nothing was written).
fn rescue(vol: &Volume, read: &Read) -> Result<Option<Vec<u64>>, String> {
    let lost = read.lost();
    if lost.is_empty() {
        return Ok(None);
    }
    // Link only the tops: what a lost directory names comes back with it.
    let named: InoSet = lost
        .iter()
        .filter_map(|i| read.logs.get(i))
        .flat_map(|l| l.entries.values().map(|e| e.0))
        .collect();
    let tops = tops_of(&lost, &named);
    let kind = |i: u64| read.inodes.get(&i).map(|n| n.kind);
    link_lost(vol, &tops, &kind, &read.logs[&ROOT])?;
    Ok(Some(tops))
}

/// Appends a remove record for every entry in `drop`.
fn drop_bad_entries(
    vol: &Volume,
    drop: &[(u64, Vec<u8>)],
    nodes: &mut InoMap<Node>,
) -> Result<(), String> {
    for (d, name) in drop {
        let Some(dir) = nodes.get_mut(d).and_then(|n| n.dir.as_mut()) else {
            continue;
        };
        let rec = record(name, None);
        append(vol, *d, dir.log_bytes, &rec)
            .map_err(|e| format!("cannot drop an entry of directory {d}: {e}"))?;
        dir.log_bytes += rec.len() as u64;
        dir.entries.remove(name.as_slice());
    }
    Ok(())
}

/// Every inode a walk from the root reaches, with its first path (`/` for the root) and
/// its kind, read whole into memory (for the tests and the lab; `extalloc ls` walks one
/// directory at a time instead, [`walk`]).
pub fn paths(vol: &Volume) -> Result<std::collections::BTreeMap<u64, (String, Kind)>, String> {
    let (nodes, _) = load(vol, false)?;
    let mut out = std::collections::BTreeMap::new();
    out.insert(ROOT, ("/".to_string(), Kind::Dir));
    let mut queue = VecDeque::from([ROOT]);
    while let Some(d) = queue.pop_front() {
        let base = out[&d].0.trim_end_matches('/').to_string();
        let Some(dir) = nodes.get(&d).and_then(|n| n.dir.as_ref()) else {
            continue;
        };
        for (name, Entry { ino, .. }) in &dir.entries {
            let Some(n) = nodes.get(&ino) else { continue };
            if out.contains_key(&ino) {
                continue;
            }
            let path = format!("{base}/{}", String::from_utf8_lossy(name));
            out.insert(ino, (path, n.inode.kind));
            if n.dir.is_some() {
                queue.push_back(ino);
            }
        }
    }
    Ok(out)
}
