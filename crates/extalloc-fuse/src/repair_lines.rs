//! The lines `extalloc fsck --repair` (and a read-only mount of a damaged file system)
//! prints for what the salvage or the page path's mend found ([`salvage_lines`]).
//!
//! Data structures: none of their own (`Salvage`, `TreeScan`, `RootFound`). Invariant: one line per
//! finding, each naming the inode or block it is about. Locks: none.

#[cfg(doc)]
use extalloc::volume::Volume;
use extalloc::volume::{RootFound, Salvage, TreeScan};

/// What the salvage's scan for the file tree's leaves did, one line each.
fn tree_scan_lines(scan: &TreeScan) -> Vec<String> {
    // One line per node lost; a root made over the leaves names its lost root for each
    // range it left to the scan: one line for them all, with how many.
    let mut runs: Vec<(&(u64, String), usize)> = Vec::new();
    for n in &scan.nodes_lost {
        match runs.last_mut() {
            Some((last, k)) if *last == n => *k += 1,
            _ => runs.push((n, 1)),
        }
    }
    let mut out: Vec<String> = (runs.into_iter())
        .map(|((block, why), k)| match k {
            1 => format!("file tree: node at block {block} lost ({why})"),
            k => format!("file tree: node at block {block} lost ({why}): {k} key ranges"),
        })
        .collect();
    out.push(format!(
        "file tree: {} blocks scanned for its leaves; {} found held and {} in free blocks, \
         giving back {} entries ({} from free blocks: their bytes may be older)",
        scan.blocks_read,
        scan.leaves_found,
        scan.freed_leaves_found,
        scan.entries,
        scan.entries_freed
    ));
    if scan.blocks_unreadable > 0 {
        out.push(format!(
            "file tree: {} blocks did not read (the device's read error: bad sectors) and \
             were skipped; a leaf there is lost as a damaged one is",
            scan.blocks_unreadable
        ));
    }
    if scan.foreign_leaves > 0 {
        out.push(format!(
            "file tree: {} whole leaves of another volume left out (a former volume's, or \
             a node's bytes in a file's data)",
            scan.foreign_leaves
        ));
    }
    out
}

/// What a salvaging open ([`Volume::open_salvaging`]) found, one line each (also printed
/// by a read-only mount of a damaged file system).
pub fn salvage_lines(s: &Salvage) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((seq, after)) = s.journal_loss {
        out.push(format!(
            "journal damaged at record {seq}: the records before it replayed, {after} intact \
             records after it lost"
        ));
    }
    if s.journal_loss_earlier {
        out.push(
            "journal: an earlier repair accepted the loss of records after damage and did \
             not finish (what was lost is no longer known)"
                .into(),
        );
    }
    if let Some(scan) = &s.tree_scan {
        out.extend(tree_scan_lines(scan));
    }
    if let Some(r) = &s.root_found {
        out.extend(root_found_lines(r));
    }
    for (block, why) in &s.leaves_mended {
        out.push(format!(
            "file tree: the leaf at block {block} did not read ({why}): rebuilt from its \
             entries that checked and the previous checkpoint's"
        ));
    }
    out.extend(entry_lines(s));
    for c in &s.maps_cleared {
        out.push(format!(
            "inode {}: its extent map was damaged ({}); the file keeps its name and size and \
             reads as zeros",
            c.id, c.why
        ));
    }
    if s.changes_skipped > 0 {
        out.push(format!(
            "{} journal changes to lost files skipped",
            s.changes_skipped
        ));
    }
    if s.retired_lost {
        out.push(
            "the list of retired map segments was damaged: their blocks freed by the \
                  rebuild"
                .into(),
        );
    }
    out
}

/// [`salvage_lines`]' lines for a lost root made again ([`RootFound`]).
fn root_found_lines(r: &RootFound) -> Vec<String> {
    let mut out = Vec::new();
    if r.levels_down > 0 && !r.from_leaves {
        out.push(format!(
            "file tree: a node under its root lost too: the root made again {} level(s) \
             lower, over the subtrees there",
            r.levels_down
        ));
    }
    if r.from_leaves {
        out.push(format!(
            "file tree: root at block {} lost ({}) with nodes under it: made again over \
             the {} leaves found that the previous checkpoint's tree names (not replaced \
             since), among {} blocks scanned ({} nodes of this volume held there); every \
             entry in them kept as it was, {} leaf(s) that tree names found nowhere \
             mended as lost leaves are, and {} key range(s) (those the lost root's \
             checkpoint rewrote, or under a node of that tree that did not read) scanned \
             for as a lost node's are (below)",
            r.lost.0,
            r.lost.1,
            r.children - r.holes,
            r.blocks_read,
            r.nodes_found,
            r.holes,
            r.scanned.len()
        ));
    }
    let kept = match r.holes {
        0 => "every entry kept as it was".to_string(),
        n => format!(
            "every entry under them kept as it was but under {n} node(s) they name that \
             were found nowhere (lost too), whose keys are mended as a lost leaf's or \
             node's are (below)"
        ),
    };
    if !r.from_leaves {
        out.push(format!(
            "file tree: root at block {} lost ({}): made again over {} nodes of level {} \
             found among {} blocks scanned ({} nodes of this volume held there); {kept}",
            r.lost.0,
            r.lost.1,
            r.children,
            r.level - 1,
            r.blocks_read,
            r.nodes_found
        ));
    }
    if r.blocks_unreadable > 0 {
        let held = match r.holes {
            0 => "the nodes found elsewhere held every entry the lost root counted",
            _ => "a node in them is one of those found nowhere",
        };
        out.push(format!(
            "file tree: {} of those blocks did not read (the device's read error: bad \
             sectors) and were skipped; {held}",
            r.blocks_unreadable
        ));
    }
    out
}

/// [`salvage_lines`]' lines for the damaged entries: how many, and each one kept,
/// removed or lost.
fn entry_lines(s: &Salvage) -> Vec<String> {
    let mut out = Vec::new();
    if s.damaged_entries > 0 {
        out.push(format!(
            "file table: {} damaged entries; {} files kept, {} lost, {} removed as the \
             journal says",
            s.damaged_entries,
            s.recovered.len(),
            s.lost.len(),
            s.removed.len()
        ));
    }
    for id in &s.removed {
        out.push(format!(
            "inode {id}: its damaged entry not kept: the journal's changes since the last \
             checkpoint remove the file"
        ));
    }
    for (now, was) in &s.recovered {
        out.push(if s.restored.contains(now) {
            format!(
                "inode {now}: lost from the table, taken from the previous checkpoint's table \
                 (its map survived; its bytes may be older)"
            )
        } else if now == was {
            format!("inode {now}: kept from its damaged table entry (its map survived)")
        } else {
            format!("inode {now}: kept from a damaged table entry that named {was}")
        });
    }
    for l in s
        .lost
        .iter()
        .filter(|l| !l.id.is_some_and(|i| s.restored.contains(&i)))
    {
        let who = l.id.map_or("a file".to_string(), |i| format!("inode {i}"));
        out.push(format!(
            "{who}: lost with its damaged table entry ({})",
            l.why
        ));
    }
    out
}
