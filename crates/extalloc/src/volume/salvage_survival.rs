//! Whether a damaged entry's map survived, for the salvage and the page path's mend,
//! judged on the map its file has once the journal's changes to it are applied
//! ([`survived_after`]): a directory whose log moved after the last checkpoint
//! (its old blocks freed by a journal change, which the store replayed) names blocks
//! that are free as of the checkpoint's map, not as of the journal's.
//!
//! Data structures: [`Journal`], the journal's changes by the file they name. Invariant:
//! an entry survives only if every extent of the map judged lies outside the device's
//! metadata, in logical order, allocated, and clear of everything taken. Locks: none (the
//! volume is not shared yet, or its gate is held for writing).

use super::super::file::{apply, Ranges, ReplayFile};
use super::super::io::MAX_FILE_BYTES;
use super::super::maps::read_map;
use super::super::record::{Change, MapEntry};
use super::super::table::TableFile;
use super::kept_file;
use crate::disk::device::Device;
use crate::files::LOGICAL_BLOCKS_MAX;
use crate::store::Store;
use std::collections::BTreeMap;

/// The journal's changes by the file they name, each file's in order.
pub(in crate::volume) type Journal = BTreeMap<u64, Vec<Change>>;

/// `changes` by the file they name (those naming none left out).
pub(in crate::volume) fn journal_by_file(changes: &[Change]) -> Journal {
    let mut out = Journal::new();
    for c in changes {
        if let Some(id) = c.file() {
            out.entry(id).or_default().push(c.clone());
        }
    }
    // Every change naming a file is kept once.
    debug_assert_eq!(
        out.values().map(Vec::len).sum::<usize>(),
        changes.iter().filter(|c| c.file().is_some()).count()
    );
    out
}

/// The map read and the map after the journal's changes, or why the map did not survive.
pub(in crate::volume) type Judged = std::result::Result<(Vec<MapEntry>, Vec<MapEntry>), String>;

/// A damaged entry's map, if it survived, judged on the map `f`'s file has once `changes`
/// (the journal's changes to it, in order) are applied: the map read (a segment's checked
/// against its crc) and the map after them (what the file will hold: none if they
/// unlink it), which [`check_map`] checks; `Ok(Err(why))` if it did not survive. An I/O
/// error reading the map fails it (the entry is not judged lost on what a read could
/// not tell).
pub(in crate::volume) fn survived_after(
    store: &Store,
    dev: &dyn Device,
    f: &TableFile,
    (taken, changes): (&Ranges, &[Change]),
) -> crate::error::Result<Judged> {
    use crate::error::Error;
    let entries = match read_map(store, dev, f.id, &f.map) {
        Ok(entries) => entries,
        // A read that failed tells nothing about the map.
        Err(e @ (Error::Io { .. } | Error::IoLatched { .. } | Error::Aborted { .. })) => {
            return Err(e)
        }
        // Anything else is the entry's damage (a segment past the device, a crc).
        Err(e) => return Ok(Err(e.to_string())),
    };
    Ok(judge_after(store, f, entries, (taken, changes)))
}

/// [`survived_after`] on the map `entries` read.
fn judge_after(
    store: &Store,
    f: &TableFile,
    entries: Vec<MapEntry>,
    (taken, changes): (&Ranges, &[Change]),
) -> Judged {
    if changes.is_empty() {
        check_map(store, &entries, taken)?;
        return Ok((entries.clone(), entries));
    }
    let bs = u64::from(store.geometry().block_size);
    let kept = kept_file(f, entries.clone(), bs);
    let after: Vec<MapEntry> = (replay_one(kept, f.id, changes.to_vec()).into_iter())
        .flat_map(|rf| rf.maps.into_iter().map(|(l, (e, u))| (l, e, u)))
        .collect();
    check_map(store, &after, taken)?;
    Ok((entries, after))
}

/// File `id` (`f`) after `changes` (the journal's changes to it, in order), as the
/// replay leaves it (`file.rs`, `apply`): `None` if they unlink it.
pub(in crate::volume) fn replay_one(
    f: ReplayFile,
    id: u64,
    changes: Vec<Change>,
) -> Option<ReplayFile> {
    let mut one = BTreeMap::from([(id, f)]);
    for c in changes {
        debug_assert_eq!(c.file(), Some(id), "a change to another file");
        apply(&mut one, c);
    }
    one.remove(&id)
}

/// Whether map `entries` survived: logical ranges sorted and disjoint, every extent on the
/// device outside its metadata, allocated, and overlapping nothing `taken`.
pub(in crate::volume) fn check_map(
    store: &Store,
    entries: &[MapEntry],
    taken: &Ranges,
) -> std::result::Result<(), String> {
    let bs = u64::from(store.geometry().block_size);
    let largest = MAX_FILE_BYTES.div_ceil(bs).min(LOGICAL_BLOCKS_MAX);
    let mut next = 0u64;
    for &(l, e, _) in entries {
        let end = l.checked_add(e.len);
        let end = end.filter(|&end| l >= next && e.len > 0 && end <= largest);
        next = end.ok_or_else(|| format!("logical block {l} out of order or too far"))?;
        store
            .check_not_metadata(e)
            .map_err(|err| format!("maps {}+{}: {err}", e.start, e.len))?;
        if !taken.within(e.start, e.end()).is_empty() {
            return Err(format!("maps {}+{}, which is in use", e.start, e.len));
        }
        store
            .allocator()
            .check_held(e)
            .map_err(|err| format!("maps {}+{}: {err}", e.start, e.len))?;
    }
    Ok(())
}
