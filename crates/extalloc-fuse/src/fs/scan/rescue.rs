//! Linking what no name reaches into `/lost+found`, and the small writes a namespace
//! repair makes (a record appended to a directory's log, a link count set), shared by the
//! full read's repair (`mod.rs`) and the census's (`paged.rs`).
//!
//! Data structures: none of their own. Invariant: an inode is linked with its name and
//! `/lost+found`'s link count in one atomic group (a crash keeps both or none). Lock
//! order: none (runs before the file system serves anything).

use super::read::read_log;
use super::report::NamespaceReport;
use crate::dir::{record, DirLog};
use crate::fs::core::{InoSet, ROOT};
use crate::inode::{self, Inode, Kind};
use extalloc::volume::Volume;

/// Appends `rec` to directory `dir`'s log at byte `at`.
pub(crate) fn append(vol: &Volume, dir: u64, at: u64, rec: &[u8]) -> extalloc::Result<()> {
    vol.write(dir, at, rec)
}

/// Writes `inode`'s link count (its other fields as the blob holds them, its tail kept).
pub(super) fn set_link_count(vol: &Volume, ino: u64, inode: &Inode) -> Result<(), String> {
    let blob = vol.attr(ino).map_err(|e| e.to_string())?;
    vol.set_attr(ino, &inode::rewrite(&blob, inode))
        .map_err(|e| format!("cannot set inode {ino}'s link count: {e}"))?;
    debug_assert_eq!(
        Inode::decode(&vol.attr(ino).map_err(|e| e.to_string())?).map(|i| i.nlink),
        Some(inode.nlink),
        "the link count written"
    );
    Ok(())
}

/// The inodes of `lost` that no lost directory names (`named`: what they name), to link;
/// the first lost one if they all name each other. What a top names comes back with it.
pub(super) fn tops_of(lost: &[u64], named: &InoSet) -> Vec<u64> {
    let mut tops: Vec<u64> = lost
        .iter()
        .copied()
        .filter(|i| !named.contains(i))
        .collect();
    if tops.is_empty() && !lost.is_empty() {
        tops.push(lost[0]); // lost directories naming each other
    }
    debug_assert!(tops.iter().all(|t| lost.contains(t)));
    tops
}

/// Links each of `tops` into `/lost+found` (made if missing: `root` is the root's log) as
/// `#INODE`; `kind` gives each inode's kind.
pub(super) fn link_lost(
    vol: &Volume,
    tops: &[u64],
    kind: &dyn Fn(u64) -> Option<Kind>,
    root: &DirLog,
) -> Result<(), String> {
    let lf = lost_found_dir(vol, kind, root)?;
    // Its log read once (cut past a damaged tail), each name appended after the last: a
    // read of the whole log for each inode made a rescue of many quadratic (a lost
    // directory's 10,000 children: 13 s).
    let mut log = read_log(vol, lf, true, &mut NamespaceReport::default())?;
    let had = log.entries.len();
    for &ino in tops {
        // The name and lost+found's link count together: a crash keeps both or none.
        let group = vol.atomic(RESCUE_CHUNKS).map_err(|e| e.to_string())?;
        link_into(vol, (lf, &mut log), format!("#{ino}").as_bytes(), ino)?;
        if kind(ino) == Some(Kind::Dir) {
            add_link(vol, lf, 1)?;
        }
        group.finish();
    }
    // Every top named once more, as the log now reads.
    debug_assert!(read_log(vol, lf, false, &mut NamespaceReport::default())
        .is_ok_and(|l| l.entries == log.entries && l.entries.len() == had + tops.len()));
    Ok(())
}

/// Volume chunk calls of linking one inode into a directory at most: cutting a damaged
/// tail (a truncate of a few extents), the record (two chunks at a boundary), a link count.
const RESCUE_CHUNKS: u64 = 6;

/// `/lost+found`: the root's entry of that name when it is a directory, else a new one.
fn lost_found_dir(
    vol: &Volume,
    kind: &dyn Fn(u64) -> Option<Kind>,
    root: &DirLog,
) -> Result<u64, String> {
    let name = b"lost+found".as_slice();
    if let Some(&(ino, _)) = root.entries.get(name) {
        if kind(ino) == Some(Kind::Dir) {
            return Ok(ino);
        }
    }
    let mut name = name.to_vec();
    while root.entries.contains_key(&name) {
        name.push(b'~'); // the name is taken by something else: keep it
    }
    let dir = Inode::new(Kind::Dir, 0o700, 0, 0, 0);
    // Made and named in one atomic group: a crash never leaves an unnamed /lost+found.
    let mut log = read_log(vol, ROOT, true, &mut NamespaceReport::default())?;
    let group = vol.atomic(RESCUE_CHUNKS + 1).map_err(|e| e.to_string())?;
    let ino = vol
        .create(&dir.encode())
        .map_err(|e| format!("cannot make /lost+found: {e}"))?;
    link_into(vol, (ROOT, &mut log), &name, ino)?;
    add_link(vol, ROOT, 1)?;
    group.finish();
    Ok(ino)
}

/// Appends an add of `name -> ino` to directory `dir`'s log, after its last good record
/// (`log`: as its caller read it, a damaged tail cut as mount's repair would, and kept
/// up to date here with each add); a name the directory holds
/// already (another inode's `#INODE` left there) gets `~` added until it is free, so no
/// entry is overwritten. The add carries no kind (the record any build reads; `readdir`
/// gives the entry as `DT_UNKNOWN` until a call reads the inode).
fn link_into(
    vol: &Volume,
    (dir, log): (u64, &mut DirLog),
    name: &[u8],
    ino: u64,
) -> Result<(), String> {
    let mut name = name.to_vec();
    while log.entries.contains_key(&name) {
        name.push(b'~');
    }
    let rec = record(&name, Some((ino, None)));
    let at = log.valid_bytes;
    append(vol, dir, at, &rec)
        .map_err(|e| format!("cannot link inode {ino} into directory {dir}: {e}"))?;
    log.valid_bytes += rec.len() as u64;
    let was = log.entries.insert(name, (ino, None));
    // A new name, its record the log's last: the log in memory is the one on the device.
    debug_assert!(was.is_none());
    debug_assert!(vol
        .size(dir)
        .is_ok_and(|size| size == at + rec.len() as u64 && size == log.valid_bytes));
    Ok(())
}

/// Adds `n` to inode `ino`'s link count.
fn add_link(vol: &Volume, ino: u64, n: u32) -> Result<(), String> {
    let blob = vol.attr(ino).map_err(|e| e.to_string())?;
    let mut inode = Inode::decode(&blob).ok_or(format!("inode {ino} does not decode"))?;
    inode.nlink += n;
    vol.set_attr(ino, &inode::rewrite(&blob, &inode))
        .map_err(|e| format!("cannot set inode {ino}'s link count: {e}"))
}
