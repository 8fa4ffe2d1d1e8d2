//! One read of the namespace for `scan` ([`Read`]): every inode in one pass over the
//! volume's files (their attribute blobs' tails and the spill files' owners with them),
//! every directory's log, and a walk from the root; and the repairs of a directory's log
//! (`fix_log`: a torn tail cut, a log parsed over damage rewritten).
//!
//! Data structures: [`Read`], [`Files`], [`Walk`]. Invariant: a `Read` is the volume as
//! it was when read; nothing here writes except `fix_log` and `read_log` with `repair`.
//! Lock order: none (runs before the file system serves anything, or on a read-only view).

use super::report::NamespaceReport;
use crate::dir::DirLog;
use crate::fs::core::{InoMap, ROOT};
use crate::inode::{self, Inode, Kind};
use crate::xattr;
use extalloc::volume::{Fallocate, Volume};
use std::borrow::Cow;
use std::collections::VecDeque;

/// One read of the namespace: every inode, what the attribute blobs' tails and the spill
/// files say, every directory's log (not repaired), and a walk from the root.
pub(super) struct Read {
    pub(super) inodes: InoMap<Inode>,
    /// Volume files whose attribute blob is neither an inode nor a spill file's.
    pub(super) damaged: Vec<u64>,
    /// Each inode whose blob has a tail (`xattr.rs`): the tail's bytes.
    pub(super) tails: InoMap<Vec<u8>>,
    /// Each spill file of extended attributes, with the inode it names as its owner.
    pub(super) spills: InoMap<u64>,
    pub(super) logs: InoMap<DirLog>,
    pub(super) walk: Walk,
    /// What the logs and the walk found (`logs`, `bad_entries`).
    pub(super) found: NamespaceReport,
}

impl Read {
    pub(super) fn of(vol: &Volume) -> Result<Read, String> {
        let (inodes, files) = read_inodes(vol)?;
        let mut found = NamespaceReport::default();
        let mut logs = InoMap::default();
        for (&ino, inode) in &inodes {
            if inode.kind == Kind::Dir {
                logs.insert(ino, read_log(vol, ino, false, &mut found)?);
            }
        }
        let walk = walk(&inodes, &logs, &mut found);
        Ok(Read {
            inodes,
            damaged: files.damaged,
            tails: files.tails,
            spills: files.spills,
            logs,
            walk,
            found,
        })
    }

    /// Inodes no name refers to whose link count says they have names, in order.
    pub(super) fn lost(&self) -> Vec<u64> {
        let mut lost: Vec<u64> = (self.inodes.iter())
            .filter(|(i, n)| !self.walk.parent.contains_key(i) && n.nlink > 0)
            .map(|(&i, _)| i)
            .collect();
        lost.sort_unstable();
        lost
    }
}

/// Directory `ino`'s log, from its first mapped block (compaction punches its history); a
/// problem goes to `report`, and with `repair` a torn tail is cut.
pub(crate) fn read_log(
    vol: &Volume,
    ino: u64,
    repair: bool,
    report: &mut NamespaceReport,
) -> Result<DirLog, String> {
    let size = vol.size(ino).map_err(|e| e.to_string())?;
    // Compaction punches the log's history: read from the first block still mapped.
    let bs = vol.block_size();
    let start = vol
        .extents(ino)
        .map_err(|e| e.to_string())?
        .iter()
        .map(|e| e.logical * bs)
        .min()
        .unwrap_or(size)
        .min(size);
    let bytes = vol
        .read(ino, start, size - start)
        .map_err(|e| e.to_string())?;
    let mut log = DirLog::parse(&bytes);
    log.valid_bytes += start;
    log.start = start;
    if let Some(p) = &log.problem {
        report.logs.push(format!("directory {ino}: {p}"));
    }
    if repair {
        fix_log(vol, ino, &mut log)?;
    }
    Ok(log)
}

/// Cuts directory `ino`'s log after its last good record and rewrites it if its parse
/// stepped over damage (see [`read_log`]).
pub(crate) fn fix_log(vol: &Volume, ino: u64, log: &mut DirLog) -> Result<(), String> {
    let size = vol.size(ino).map_err(|e| e.to_string())?;
    if log.valid_bytes < size {
        vol.truncate(ino, log.valid_bytes)
            .map_err(|e| format!("cannot cut directory {ino}'s log: {e}"))?;
    }
    if log.skipped_damage {
        rewrite_log(vol, ino, log)?;
    }
    debug_assert!(
        !log.skipped_damage,
        "a log stepped over damage is rewritten"
    );
    Ok(())
}

/// Rewrites directory `ino`'s log as its entries (a counted reset and an add each, from
/// the next block boundary, the blocks before punched), as compaction does: the damage the
/// parse stepped over is gone, and the next check is clean.
fn rewrite_log(vol: &Volume, ino: u64, log: &mut DirLog) -> Result<(), String> {
    let bs = vol.block_size();
    let at = log.valid_bytes.div_ceil(bs) * bs;
    // The kinds the log's adds carried stay (the device carries the feature that wrote
    // them); the others stay unknown.
    let bytes = crate::dir::compacted((log.entries.iter()).map(|(n, &a)| (n.as_slice(), a)));
    debug_assert_eq!(
        DirLog::parse(&bytes).entries,
        log.entries,
        "a rewritten log replays to the entries it was written from"
    );
    let fail = |e: extalloc::Error| format!("cannot rewrite directory {ino}'s log: {e}");
    vol.write(ino, at, &bytes).map_err(fail)?;
    if at > log.start {
        vol.fallocate(ino, Fallocate::PunchHole, log.start, at - log.start)
            .map_err(fail)?;
    }
    log.start = at;
    log.valid_bytes = at + bytes.len() as u64;
    log.skipped_damage = false;
    Ok(())
}

/// What one pass over the volume's attribute blobs found besides the inodes.
#[derive(Default)]
pub(super) struct Files {
    /// Files whose blob is neither an inode nor a spill file's (damaged: `fsck --repair`
    /// gives them a new inode).
    pub(super) damaged: Vec<u64>,
    /// Each inode's tail, where it is not empty.
    pub(super) tails: InoMap<Vec<u8>>,
    /// Each spill file's owner.
    pub(super) spills: InoMap<u64>,
}

/// Every volume file's inode, and what else the blobs hold ([`Files`]), in one pass over
/// the file tree that keeps no file (`vol.attr` per file would read each file's leaf and
/// keep the file). Fails when the volume is not a file system: no file holds an inode,
/// or the root is not a directory.
pub(super) fn read_inodes(vol: &Volume) -> Result<(InoMap<Inode>, Files), String> {
    let mut inodes = InoMap::default();
    let files = visit_inodes(vol, |id, inode| {
        inodes.insert(id, *inode);
    })?;
    Ok((inodes, files))
}

/// Hands every volume file's inode to `each`, in id order, and returns what else the
/// blobs hold ([`Files`]); one pass over the file tree that keeps no file. Fails as
/// [`read_inodes`] does (after `each` saw the inodes before the failure).
pub(super) fn visit_inodes(
    vol: &Volume,
    mut each: impl FnMut(u64, &Inode),
) -> Result<Files, String> {
    let mut files = Files::default();
    let mut first_bad = None;
    let mut newer = None;
    let mut any = false;
    let mut inodes = 0u64;
    let mut root = None;
    vol.try_visit_with_attrs(|f, blob| {
        any = true;
        if let Some(inode) = Inode::decode(blob) {
            inodes += 1;
            if f.id == ROOT {
                root = Some(inode.kind);
            }
            each(f.id, &inode);
            let tail = inode::tail(blob);
            if !tail.is_empty() {
                files.tails.insert(f.id, tail.to_vec());
            }
        } else if let Some(owner) = xattr::spill_owner(blob) {
            files.spills.insert(f.id, owner);
        } else {
            if newer.is_none() {
                newer = crate::inode::newer_version(blob).map(|v| (f.id, v));
            }
            first_bad.get_or_insert_with(|| (f.id, blob[..blob.len().min(32)].to_vec()));
            files.damaged.push(f.id);
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some((id, v)) = newer {
        return Err(crate::inode::newer_refusal(id, v));
    }
    if !any {
        return Err("the volume holds no file system (no files at all)".into());
    }
    if inodes == 0 {
        let (id, blob) = first_bad.expect("a file without an inode");
        return Err(format!(
            "volume file {id} holds no inode (attributes {:?}): this volume is not an \
             extalloc file system (was it filled with `extalloc put`?): read it with \
             `extalloc ls` and `extalloc get`, or mount a new one (`extalloc mkfs IMAGE \
             --size SIZE`)",
            String::from_utf8_lossy(&blob)
        ));
    }
    match root {
        Some(Kind::Dir) => Ok(files),
        _ if files.damaged.contains(&ROOT) => Err(format!(
            "the root directory's attributes (volume file {ROOT}) are damaged: run \
             `extalloc fsck --repair`"
        )),
        _ => Err(format!(
            "volume file {ROOT} is not a directory: the root of this file system is gone"
        )),
    }
}

/// What a walk from the root found.
#[derive(Default)]
pub(super) struct Walk {
    /// Every inode reached, with the directory it was reached from.
    pub(super) parent: InoMap<u64>,
    /// Names of each non-directory.
    pub(super) links: InoMap<u32>,
    /// Subdirectories of each directory.
    pub(super) subdirs: InoMap<u32>,
    /// Entries to drop: (directory, name).
    pub(super) drop: Vec<(u64, Vec<u8>)>,
}

/// Walks the tree from the root over the logs in `logs` (see [`walk_with`]).
pub(super) fn walk(
    inodes: &InoMap<Inode>,
    logs: &InoMap<DirLog>,
    report: &mut NamespaceReport,
) -> Walk {
    let mut tally = MapTally {
        inodes,
        w: Walk::default(),
    };
    tally.w.parent.insert(ROOT, ROOT);
    let drop = walk_with(&mut tally, |d, _| Ok(Cow::Borrowed(&logs[&d])), report)
        .expect("logs in memory do not fail");
    tally.w.drop = drop;
    tally.w
}

/// What a walk from the root counts, and where ([`Walk`] in maps; the census in arrays).
pub(super) trait Tally {
    /// The kind of inode `ino`, `None` when no inode has that number.
    fn kind(&self, ino: u64) -> Option<Kind>;
    /// Directory `ino` named in directory `from`: `false` when it was reached before.
    fn reach_dir(&mut self, ino: u64, from: u64) -> bool;
    /// A name of non-directory `ino` in directory `from`.
    fn name(&mut self, ino: u64, from: u64);
}

/// [`Tally`] into a [`Walk`] of an [`InoMap`] of inodes.
struct MapTally<'a> {
    inodes: &'a InoMap<Inode>,
    w: Walk,
}

impl Tally for MapTally<'_> {
    fn kind(&self, ino: u64) -> Option<Kind> {
        self.inodes.get(&ino).map(|i| i.kind)
    }

    fn reach_dir(&mut self, ino: u64, from: u64) -> bool {
        debug_assert_eq!(self.kind(ino), Some(Kind::Dir), "a directory is reached");
        if self.w.parent.contains_key(&ino) {
            return false;
        }
        self.w.parent.insert(ino, from);
        *self.w.subdirs.entry(from).or_default() += 1;
        true
    }

    fn name(&mut self, ino: u64, from: u64) {
        debug_assert!(
            self.kind(ino).is_some_and(|k| k != Kind::Dir),
            "a directory is reached, not named"
        );
        self.w.parent.entry(ino).or_insert(from);
        *self.w.links.entry(ino).or_default() += 1;
    }
}

/// Walks the tree from the root (reached before the call), breadth first, in name order:
/// each directory's entries from `log_of` (which may read the log, and then fails with
/// its error), each counted in `tally`. An entry naming no inode, the root, or a directory
/// a second time goes to `report` and is returned as (directory, name), to drop.
pub(super) fn walk_with<'a>(
    tally: &mut impl Tally,
    mut log_of: impl FnMut(u64, &mut NamespaceReport) -> Result<Cow<'a, DirLog>, String>,
    report: &mut NamespaceReport,
) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let mut drop = Vec::new();
    let mut queue = VecDeque::from([ROOT]);
    while let Some(d) = queue.pop_front() {
        let log = log_of(d, report)?;
        for (name, &(ino, _)) in &log.entries {
            let why = match tally.kind(ino) {
                None => Some(format!("names inode {ino}, which does not exist")),
                Some(_) if ino == ROOT => Some("names the root".to_string()),
                Some(Kind::Dir) if !tally.reach_dir(ino, d) => {
                    Some(format!("names directory {ino} a second time"))
                }
                Some(Kind::Dir) => {
                    queue.push_back(ino);
                    None
                }
                Some(_) => {
                    tally.name(ino, d);
                    None
                }
            };
            if let Some(why) = why {
                let shown = String::from_utf8_lossy(name);
                report
                    .bad_entries
                    .push(format!("directory {d}, {shown:?}: {why}"));
                drop.push((d, name.clone()));
            }
        }
    }
    Ok(drop)
}
