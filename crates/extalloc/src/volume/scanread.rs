//! The device read for whole nodes by a repair's scans (the salvage's and the mend's,
//! `nodescan.rs`; the open's search for a lost root's children, `rootfind.rs`): a pass
//! reads runs of each group (the blocks the bitmaps mark used, or the others: [`pass_runs`])
//! a chunk at a time and hands every whole node that starts there to its caller.
//!
//! Two things a pass does that a plain read would not:
//!
//! - **An unreadable block is skipped, and counted.** When a chunk's read fails with the
//!   device's read error (a bad sector: Linux's `EIO`), the chunk is read again a block at a
//!   time; each block that fails reads as zeros (no node starts or lies in it) and is
//!   counted ([`Tally::unreadable`], reported by the repair). A node in such a block is lost
//!   as a damaged one is: the lost root's count (`rootfind.rs`) or the salvage's then says
//!   what is missing. [`CHUNK_BLOCKS`] blocks in a row, in the order the scan reads them,
//!   that do not read (the device gone, or a failing region of a mebibyte) fail the pass
//!   with the device's error, as every read error did before: a repair should not take a
//!   failing device's silence for lost nodes.
//! - **A second pass over the same runs reads only the nodes.** `fsck --repair` may scan the
//!   same blocks more than once: its look at the volume (under an overlay), then the repair
//!   itself; or the look, then the salvage; or the look's mend, then the repair's. The
//!   first pass over a group notes where whole nodes start and which blocks did not read
//!   ([`NodeScans`]); a later pass over exactly the same runs of that group reads those
//!   nodes only (no file's data) and checks each again, and reads the blocks that did not
//!   read again (a read error may pass: a node found there now is handed too). A node that
//!   read before and does not now fails the pass (the device is failing). What an open
//!   writes before its scan is the superblock, its owner record and the journal, never a
//!   node's block, and no checkpoint (the only writer of nodes) runs before the mend, so
//!   the nodes lie where the note says; where an open's bitmaps differ from the note's (a
//!   journal the repair's open wiped holds no group corrupt any more), a group's runs
//!   differ and it is read whole again.
//!
//! Data structures: [`NodeScans`] (the repair's progress callback, and per group and pass
//! what its first read found: `Seen`), [`Tally`] (a scan's counts). Invariant: a pass hands
//! each whole node starting in its runs once (within a group, the nodes a note names in
//! block order, then those found again where blocks did not read), and counts each block
//! of its runs once as read, whether read or covered by a note; a note is used only for
//! runs whose count, blocks and hash are those noted. Locks: `NodeScans::seen`, a leaf lock
//! held while a note is looked up or stored, never across a read.

use super::node::{self, NodeRef};
use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// How far a repair's scan of the device for the file tree's nodes has gone (the
/// salvage's, the mend's, or the search for a lost root's children: [`NodeScans`]): it
/// reads every block marked used, so on a large device it takes a while (about 2 s per
/// GiB used on a 500 MB/s disk); a later scan of the same repair goes faster, reading only
/// the nodes the first found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanProgress {
    /// Blocks read so far (or covered by an earlier scan's note, reading only its nodes).
    pub blocks_read: u64,
    /// Blocks the scan will read: those marked used (every block of a group held
    /// corrupt), and, once it finds keys still missing after them, every block of the
    /// device (so the figure may grow once).
    pub blocks_to_read: u64,
}

/// Blocks read at once.
pub(super) const CHUNK_BLOCKS: u64 = 256;

/// The scans of one device during one repair: how far each has read (told to the
/// caller's callback) and, per group and pass, where the first read found whole nodes and
/// unreadable blocks, so a later scan of the same blocks reads only the nodes (see the
/// module documentation). Make one per repair, for one device; give it to each of that
/// repair's opens and mends ([`Volume::open_for_repair_reporting`],
/// [`Volume::mend_unreadable_leaves_reporting`], [`Volume::open_salvaging_reporting`]).
/// Its notes hold a few bytes per node found, none of a node's entries.
///
/// [`Volume::open_for_repair_reporting`]: super::Volume::open_for_repair_reporting
/// [`Volume::mend_unreadable_leaves_reporting`]: super::Volume::mend_unreadable_leaves_reporting
/// [`Volume::open_salvaging_reporting`]: super::Volume::open_salvaging_reporting
pub struct NodeScans<'a> {
    progress: &'a dyn Fn(ScanProgress),
    /// By (second pass, group).
    seen: Mutex<HashMap<(bool, u64), Seen>>,
}

impl std::fmt::Debug for NodeScans<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeScans")
            .field("groups_noted", &self.seen.lock().len())
            .finish_non_exhaustive()
    }
}

/// What the first read of a group's runs found.
struct Seen {
    /// The runs read: their count, blocks and hash.
    runs: (usize, u64, u64),
    /// Where whole nodes start (any volume's), in block order.
    sites: Vec<u64>,
    /// Blocks that did not read, in block order.
    unreadable: Vec<u64>,
}

/// A scan's counts, across its passes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tally {
    /// Blocks read (or covered by an earlier read's note), and to read.
    pub read: u64,
    pub to_read: u64,
    /// Blocks that did not read, skipped.
    pub unreadable: u64,
    /// Of the last blocks read, in the order read, how many in a row did not read: at
    /// [`CHUNK_BLOCKS`] the pass fails.
    pub streak: u64,
}

impl Tally {
    /// Counts the blocks `first .. first + n` read, of which `unread`'s did not, failing
    /// with the read's error when the blocks in a row that did not read reach
    /// [`CHUNK_BLOCKS`].
    fn count(&mut self, (first, n): (u64, u64), unread: &Unread) -> Result<()> {
        let bad = &unread.blocks;
        debug_assert!(bad.iter().all(|b| (first..first + n).contains(b)));
        self.unreadable += bad.len() as u64;
        let mut bad = bad.iter().peekable();
        for block in first..first + n {
            match bad.next_if_eq(&&block) {
                Some(_) => self.streak += 1,
                None => self.streak = 0,
            }
            if self.streak >= CHUNK_BLOCKS {
                return Err(unread.err.clone().expect("a read that failed"));
            }
        }
        Ok(())
    }
}

/// The progress callback of a scan no one watches.
fn unwatched(_: ScanProgress) {}

impl<'a> NodeScans<'a> {
    /// Scans that tell `progress` how far they have read after each chunk.
    pub fn new(progress: &'a dyn Fn(ScanProgress)) -> NodeScans<'a> {
        NodeScans {
            progress,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Scans no one watches.
    pub fn unwatched() -> NodeScans<'static> {
        NodeScans::new(&unwatched)
    }

    /// One pass of a scan: in each group, the runs [`pass_runs`] gives for `second` and the
    /// group's kind (`kinds`, [`used_to_read`]), every whole node that starts there handed
    /// to `found`; `tally` counts the blocks and tells the progress callback after each
    /// chunk. Fails on an error of the device other than a block's read, on
    /// [`CHUNK_BLOCKS`] blocks in a row that do not read, and on a noted node that does not
    /// read now (see the module documentation).
    pub(super) fn pass(
        &self,
        (store, dev): (&Store, &dyn Device),
        (second, kinds): (bool, &[(bool, bool)]),
        tally: &mut Tally,
        found: &mut dyn FnMut(NodeRef, node::Decoded),
    ) -> Result<()> {
        let g = store.geometry();
        // A kind per group.
        assert_eq!(kinds.len() as u64, g.groups_count(), "a kind per group");
        let before = *tally;
        let mut covered = 0;
        for group in 0..g.groups_count() {
            let runs = pass_runs(store, group, (second, kinds[group as usize]))?;
            if runs.is_empty() {
                continue;
            }
            let key = runs_key(&runs);
            covered += key.1;
            let noted = (self.seen.lock().get(&(second, group)))
                .filter(|s| s.runs == key)
                .map(|s| (s.sites.clone(), s.unreadable.clone()));
            match noted {
                Some(noted) => {
                    self.reread((store, dev), &runs, &noted, tally, found)?;
                    tally.read += key.1;
                    self.tell(tally);
                }
                None => {
                    let seen = self.read_runs(store, dev, (&runs, key), tally, found)?;
                    self.seen.lock().insert((second, group), seen);
                }
            }
        }
        // Every block of the pass's runs counted once, read or covered.
        assert_eq!(tally.read - before.read, covered, "each block counted once");
        assert!(tally.unreadable - before.unreadable <= covered);
        Ok(())
    }

    fn tell(&self, tally: &Tally) {
        (self.progress)(ScanProgress {
            blocks_read: tally.read,
            blocks_to_read: tally.to_read,
        });
    }

    /// Reads `runs` a chunk at a time, handing each whole node to `found`: what a later
    /// pass over them needs (`key`: the runs').
    fn read_runs(
        &self,
        store: &Store,
        dev: &dyn Device,
        (runs, key): (&[Extent], (usize, u64, u64)),
        tally: &mut Tally,
        found: &mut dyn FnMut(NodeRef, node::Decoded),
    ) -> Result<Seen> {
        let mut seen = Seen {
            runs: key,
            sites: Vec::new(),
            unreadable: Vec::new(),
        };
        for run in runs {
            let mut b = run.start;
            while b < run.end() {
                let n = CHUNK_BLOCKS.min(run.end() - b);
                let (nodes, unread) = whole_nodes_in(store, dev, (b, n))?;
                tally.count((b, n), &unread)?;
                for (at, d) in nodes {
                    seen.sites.push(at.block);
                    found(at, d);
                }
                seen.unreadable.extend(unread.blocks);
                tally.read += n;
                b += n;
                self.tell(tally);
            }
        }
        // Sites and blocks that did not read in block order, inside the runs.
        debug_assert!(seen.sites.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(seen.unreadable.windows(2).all(|w| w[0] < w[1]));
        Ok(seen)
    }

    /// The nodes at the note's sites (an earlier pass found them whole), read again and
    /// checked again, into `found`, those that lie end to end read at once; then the blocks
    /// that did not read (the note's `bad`) read again, the nodes that start in `runs` and
    /// lie there now handed too, those that still do not read counted. Fails when a site
    /// does not read now (the device is failing), and as [`Tally::count`] does.
    fn reread(
        &self,
        (store, dev): (&Store, &dyn Device),
        runs: &[Extent],
        (sites, bad): &(Vec<u64>, Vec<u64>),
        tally: &mut Tally,
        found: &mut dyn FnMut(NodeRef, node::Decoded),
    ) -> Result<()> {
        let g = store.geometry();
        let bs = u64::from(g.block_size);
        let nb = node::node_blocks(bs);
        let size = node::node_bytes(bs);
        // A note's sites, in block order (whole nodes may overlap: a forged one in data).
        assert!(sites.windows(2).all(|w| w[0] < w[1]), "sites in order");
        let mut i = 0;
        while i < sites.len() {
            let first = sites[i];
            let mut j = i + 1;
            while j < sites.len()
                && sites[j] == sites[j - 1] + nb
                && (j - i) as u64 * nb < CHUNK_BLOCKS
            {
                j += 1;
            }
            let (buf, unread) = read_blocks(dev, bs, (first, first + (j - i) as u64 * nb))?;
            if let Some(e) = unread.err {
                return Err(e); // a node read before does not now
            }
            for (k, &block) in sites[i..j].iter().enumerate() {
                let off = k * nb as usize * bs as usize;
                let whole = buf
                    .get(off..off + size)
                    .and_then(|b| node::whole_at(b, block));
                if let Some((at, d)) = whole {
                    found(at, d);
                }
            }
            i = j;
        }
        // Every site looked at once.
        debug_assert_eq!(i, sites.len());
        for (k, &b) in bad.iter().enumerate() {
            // The blocks between two that did not read read (they did for the note).
            if k == 0 || bad[k - 1] + 1 != b {
                tally.streak = 0;
            }
            let from = b.saturating_sub(nb - 1);
            let end = (b + nb).min(g.blocks_count);
            let (buf, mut unread) = read_blocks(dev, bs, (from, end))?;
            unread.blocks.retain(|&x| x == b);
            tally.count((b, 1), &unread)?;
            let starts = (from..=b).filter(|s| {
                sites.binary_search(s).is_err()
                    && runs.iter().any(|r| (r.start..r.end()).contains(s))
            });
            for start in starts {
                let off = ((start - from) * bs) as usize;
                if let Some((at, d)) = buf
                    .get(off..off + size)
                    .and_then(|x| node::whole_at(x, start))
                {
                    found(at, d);
                }
            }
        }
        Ok(())
    }
}

/// A group's runs as a note names them: their count, blocks and hash.
fn runs_key(runs: &[Extent]) -> (usize, u64, u64) {
    let mut h = DefaultHasher::new();
    for r in runs {
        (r.start, r.len).hash(&mut h);
    }
    (runs.len(), runs.iter().map(|r| r.len).sum(), h.finish())
}

/// Is `e` a read of the device that failed (a bad sector), not a misuse?
fn read_failed(e: &Error) -> bool {
    matches!(e, Error::Io { op: "read", .. })
}

/// The blocks of a read that did not read (in block order), and the read's error (`None`
/// when every block read).
#[derive(Debug, Default)]
struct Unread {
    blocks: Vec<u64>,
    err: Option<Error>,
}

/// Blocks `first .. end` of `bs` bytes, read at once; if that read fails, a block at a time,
/// each that fails left zeros and listed, with the read's error. Fails at once on an error
/// other than a read's.
fn read_blocks(dev: &dyn Device, bs: u64, (first, end): (u64, u64)) -> Result<(Vec<u8>, Unread)> {
    assert!(first < end, "blocks to read");
    let mut buf = vec![0u8; ((end - first) * bs) as usize];
    let whole = match dev.read_at(&mut buf, first * bs) {
        Ok(()) => return Ok((buf, Unread::default())),
        Err(e) if read_failed(&e) => e,
        Err(e) => return Err(e),
    };
    let mut bad = Vec::new();
    for (i, block) in (first..).zip(buf.chunks_mut(bs as usize)) {
        match dev.read_at(block, i * bs) {
            Ok(()) => {}
            Err(e) if read_failed(&e) => {
                block.fill(0);
                bad.push(i);
            }
            Err(e) => return Err(e),
        }
    }
    // The blocks listed failed, each on its own.
    debug_assert!(bad.iter().all(|b| (first..end).contains(b)));
    let unread = Unread {
        blocks: bad,
        err: Some(whole),
    };
    Ok((buf, unread))
}

/// The whole nodes (of any volume: each names its own block and checks) that start in
/// blocks `first .. first + n`, read at once, in block order; those of the blocks that did
/// not read (skipped, see [`read_blocks`]).
fn whole_nodes_in(
    store: &Store,
    dev: &dyn Device,
    (first, n): (u64, u64),
) -> Result<(Vec<(NodeRef, node::Decoded)>, Unread)> {
    let g = store.geometry();
    let bs = u64::from(g.block_size);
    let size = node::node_bytes(bs);
    let nb = node::node_blocks(bs);
    // A node starting in the chunk's last blocks runs past it: read that far too.
    let end = (first + n + nb - 1).min(g.blocks_count);
    let (buf, mut unread) = read_blocks(dev, bs, (first, end))?;
    let mut out = Vec::new();
    for i in 0..n {
        let off = (i * bs) as usize;
        let Some(bytes) = buf.get(off..off + size) else {
            break; // a node would run past the device
        };
        out.extend(node::whole_at(bytes, first + i));
    }
    // Blocks past the chunk that did not read are the next chunk's to count.
    unread.blocks.retain(|&b| b < first + n);
    Ok((out, unread))
}

/// Each group's kind for [`pass_runs`] (held corrupt, empty by its count: its bitmap not
/// loaded), and the blocks the first pass reads (those marked used, every block of a
/// group held corrupt), counted without walking the bitmaps (`pass_runs` walks each once).
pub(super) fn used_to_read(store: &Store) -> Result<(Vec<(bool, bool)>, u64)> {
    let g = store.geometry();
    let corrupt = store.corrupt_groups();
    let mut kinds = Vec::new();
    let mut to_read = 0;
    for gr in 0..g.groups_count() {
        let held_corrupt = corrupt.contains(&gr);
        let empty = store.group_free_blocks(gr) >= g.group_len(gr) && !held_corrupt;
        kinds.push((held_corrupt, empty));
        to_read += match (held_corrupt, empty) {
            (true, _) => g.group_len(gr),
            (false, true) => 0,
            (false, false) => store.allocator().used_blocks(gr)?,
        };
    }
    // A kind per group.
    debug_assert_eq!(kinds.len() as u64, g.groups_count());
    Ok((kinds, to_read))
}

/// The runs of group `group` a pass of the scan reads: the first pass (`second` false) the
/// blocks the bitmap marks used, the whole group if it is held `corrupt` (its bitmap is not
/// trusted) and none if its count says it is `empty` (its bitmap not loaded); the second
/// the others.
fn pass_runs(
    store: &Store,
    group: u64,
    (second, (corrupt, empty)): (bool, (bool, bool)),
) -> Result<Vec<Extent>> {
    let g = store.geometry();
    let whole = Extent::new(g.group_start(group), g.group_len(group));
    if corrupt || empty {
        return Ok(if second == empty {
            vec![whole]
        } else {
            Vec::new()
        });
    }
    let used = store.allocator().used_runs(group)?;
    if !second {
        return Ok(used);
    }
    let mut free = Vec::new();
    let mut at = whole.start;
    for u in used.iter().chain([&Extent::new(whole.end(), 0)]) {
        if u.start > at {
            free.push(Extent::new(at, u.start - at));
        }
        at = at.max(u.end());
    }
    // The two passes' runs cover the group once.
    debug_assert_eq!(
        free.iter().chain(&used).map(|e| e.len).sum::<u64>(),
        whole.len
    );
    Ok(free)
}

#[cfg(test)]
#[path = "scanread_tests.rs"]
mod tests;
