//! `fsck --repair`'s namespace pass in the census's memory (`census.rs`: a few bytes an
//! inode and one directory's log at a time) when the namespace holds damage the full read
//! (`load`) would repair: names lost with a damaged log (their inodes linked into
//! `/lost+found` first), logs that stepped over damage (rewritten) or end torn (cut),
//! entries naming an inode that does not exist or a directory a second time (dropped),
//! link counts that disagree with the names found (set), and what a crash leaves. The
//! repairs and the report are the full read's, in its order; damaged inodes or extended
//! attributes (which the repair's earlier passes remake and drop) leave it to the full
//! read.
//!
//! Data structures: none of their own (the census's [`Found`]). Invariant: a volume it
//! repaired checks clean. Lock order: none (runs before the file system serves anything).

use super::census::{census, Found};
use super::leftovers::remove_leftovers;
use super::read::{read_log, Tally};
use super::report::NamespaceReport;
use super::rescue::{append, link_lost, set_link_count, tops_of};
use crate::dir::record;
use crate::fs::core::{InoSet, ROOT};
use crate::inode::{Inode, Kind};
use extalloc::volume::Volume;

/// Repairs the namespace on `vol` as `load(vol, true)` does, without every inode in
/// memory (see the module documentation), and returns the report. `None` when it finds
/// damaged inodes or extended attributes (nothing was written), or a rescue that reached
/// nothing (what it linked stays): the caller reads the whole namespace, which repairs
/// what is left.
pub(crate) fn repair_paged(vol: &Volume) -> Result<Option<NamespaceReport>, String> {
    let mut found = census(vol)?;
    if !found.report.damaged_inodes.is_empty() || !found.report.damaged_xattrs.is_empty() {
        return Ok(None);
    }
    // Each rescue links what it found, and the census runs again (as the full read's).
    let mut lost_found = Vec::new();
    while !found.report.unnamed.is_empty() {
        let before = found.report.unnamed.len();
        lost_found.extend(rescue(vol, &found)?);
        found = census(vol)?;
        if found.report.unnamed.len() >= before {
            // Linked, yet no fewer unnamed (a walk that cannot reach `/lost+found`): the
            // full read finishes it.
            return Ok(None);
        }
    }
    let Found {
        mut report,
        problems,
        census: counted,
        drop,
    } = found;
    let mut scratch = NamespaceReport::default();
    for p in &problems {
        read_log(vol, p.dir, true, &mut scratch)?; // cut, or rewritten past its damage
    }
    for (ino, want) in counted.link_fixes() {
        let blob = vol.attr(ino).map_err(|e| e.to_string())?;
        let mut inode = Inode::decode(&blob).ok_or(format!("inode {ino} does not decode"))?;
        inode.nlink = want;
        set_link_count(vol, ino, &inode)?;
    }
    for (d, name) in &drop {
        let log = read_log(vol, *d, false, &mut scratch)?;
        append(vol, *d, log.valid_bytes, &record(name, None))
            .map_err(|e| format!("cannot drop an entry of directory {d}: {e}"))?;
    }
    remove_leftovers(vol, &report)?;
    report.lost_found = lost_found;
    debug_assert!(
        census(vol).is_ok_and(|f| f.report.clean()),
        "a repaired namespace checks clean"
    );
    Ok(Some(report))
}

/// Links the tops of the unnamed inodes `found` holds into `/lost+found` (what a lost
/// directory names comes back with it) and returns them; the logs of the unnamed
/// directories are read one at a time.
fn rescue(vol: &Volume, found: &Found) -> Result<Vec<u64>, String> {
    let lost = &found.report.unnamed;
    let kind = |i: u64| found.census.kind(i);
    let mut scratch = NamespaceReport::default();
    let mut named = InoSet::default();
    for &d in lost.iter().filter(|&&i| kind(i) == Some(Kind::Dir)) {
        let log = read_log(vol, d, false, &mut scratch)?;
        named.extend(log.entries.values().map(|e| e.0));
    }
    let tops = tops_of(lost, &named);
    let root = read_log(vol, ROOT, false, &mut scratch)?;
    link_lost(vol, &tops, &kind, &root)?;
    debug_assert!(!tops.is_empty() && tops.iter().all(|t| lost.contains(t)));
    Ok(tops)
}
