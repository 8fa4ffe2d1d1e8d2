//! What a namespace read leaves to finish, shared by the full read (`mod.rs`) and the
//! census (`census.rs`): every inode's extended attributes checked and loaded
//! ([`load_xattrs`]), and the removal of orphans and stray spill files
//! ([`remove_leftovers`]).
//!
//! Data structures: none of their own. Invariant: an orphan is removed before the spill
//! files, so its spill file goes as a stray. Lock order: none (runs before the file system
//! serves anything).

use super::report::NamespaceReport;
use crate::fs::core::{InoMap, InoSet, Node};
use crate::xattr::{self, Tail};
use extalloc::volume::Volume;

/// Removes the orphans `report` found, then the stray spill files (an orphan's among them).
pub(super) fn remove_leftovers(vol: &Volume, report: &NamespaceReport) -> Result<(), String> {
    for &ino in &report.orphans {
        vol.unlink(ino)
            .map_err(|e| format!("cannot remove orphan inode {ino}: {e}"))?;
    }
    // After the orphans: their spill files are stray now.
    for &id in &report.stray_xattrs {
        vol.unlink(id)
            .map_err(|e| format!("cannot remove stray attribute file {id}: {e}"))?;
    }
    Ok(())
}

/// Every node's extended attributes, from its blob's tail (`tails`) and spill file
/// (`spills`: each spill file's owner); spill files no node names (an orphan's among
/// them) go to `stray_xattrs`, damage to `damaged_xattrs`. With `repair` (mount), damage
/// is refused: `fsck --repair` drops it.
pub(super) fn load_xattrs(
    vol: &Volume,
    (reached, nodes): (&dyn Fn(u64) -> bool, &mut InoMap<Node>),
    (tails, spills): (&InoMap<Vec<u8>>, InoMap<u64>),
    repair: bool,
    report: &mut NamespaceReport,
) -> Result<(), String> {
    let mut named = InoSet::default();
    for (&ino, tail) in tails {
        if !reached(ino) {
            continue;
        }
        let node = nodes.get_mut(&ino);
        let damage = match Tail::decode(tail) {
            None => Some("its inode's tail does not decode".to_string()),
            Some(Tail::None) => None,
            Some(Tail::Inline(set)) => {
                if let Some(n) = node {
                    n.xattrs = set;
                }
                None
            }
            Some(Tail::Spill(id)) if spills.get(&id) != Some(&ino) => Some(format!(
                "its spill file {id} is missing or names another inode"
            )),
            Some(Tail::Spill(id)) => {
                named.insert(id);
                let size = vol.size(id).map_err(|e| e.to_string())?;
                let data = vol.read(id, 0, size).map_err(|e| e.to_string())?;
                match xattr::read_spill(&data) {
                    Some(set) => {
                        if let Some(n) = node {
                            n.xattrs = set;
                            n.spill = Some(id);
                        }
                        None
                    }
                    None => Some(format!("its spill file {id} fails its checksum")),
                }
            }
        };
        if let Some(why) = damage {
            report.damaged_xattrs.push((ino, why));
        }
    }
    report.damaged_xattrs.sort_unstable();
    // An unnamed inode is kept (mount links it into /lost+found before this pass): its
    // spill file is not stray. An orphan's is: it goes with the orphan.
    for ino in &report.unnamed {
        let tail = tails.get(ino).map(Vec::as_slice).unwrap_or_default();
        if let Some(Tail::Spill(id)) = Tail::decode(tail) {
            if spills.get(&id) == Some(ino) {
                named.insert(id);
            }
        }
    }
    report.stray_xattrs = spills.into_keys().filter(|s| !named.contains(s)).collect();
    report.stray_xattrs.sort_unstable();
    if repair && !report.damaged_xattrs.is_empty() {
        return Err(format!(
            "the extended attributes of inodes {:?} are damaged ({}): run `extalloc fsck \
             --repair`, which drops them and keeps the files",
            report
                .damaged_xattrs
                .iter()
                .map(|d| d.0)
                .collect::<Vec<_>>(),
            report.damaged_xattrs[0].1
        ));
    }
    Ok(())
}
