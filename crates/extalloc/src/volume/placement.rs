//! Where a file's data goes beyond the file layer's own rules: a placed file's first blocks
//! in the first group from its key's (a multiplicative hash) that is not running low (at
//! least half the average free space: Orlov's kind of test), or for a file larger than a
//! group, the first run of wholly free groups from there that holds it, claimed so that
//! files placed at the same time pick different runs; the caller's write-life hint; what a
//! file's close gives back (its preallocations and its claim).
//!
//! Data structures: [`Claims`], the claimed runs by group and by file. Invariant: a group
//! is claimed by at most one file, a file claims at most one run, and only a file that
//! has not mapped anything yet is given a claimed run. Locks: `claims` is a leaf, taken
//! under a file's mutex (`mod.rs`).

use super::chunk::TailFirst;
use super::file::VFile;
use super::state::Volume;
use crate::alloc::Lifetime;
use crate::error::Result;

/// Groups a placed file's first allocation looks through for a run of free groups.
const PLACEMENT_SCAN_GROUPS: u64 = 1024;
/// Groups a placed file that fits a group looks through, from its key's, for one that is
/// not running low.
const ROOMY_SCAN_GROUPS: u64 = 64;

impl Volume {
    /// Sets file `id`'s write-life hint: how long its data is expected to live, passed with
    /// every allocation of its data (the size-class hint of `files/`). Kept in memory only,
    /// as Linux keeps `F_SET_RW_HINT`: a reopened volume starts every file at `Unknown`.
    pub fn set_lifetime(&self, id: u64, lifetime: Lifetime) -> Result<()> {
        self.file(id)?.lock().lifetime = lifetime;
        Ok(())
    }

    /// File `id` is closed: its unused preallocations go back to the free space, as a
    /// file system gives them back at the last close (nothing is recorded: they were never
    /// handed out).
    pub fn close_file(&self, id: u64) -> Result<()> {
        self.unclaim(id);
        // Unused preallocations lie past the mapped blocks: a tail stays (`tail.rs`).
        self.chunk(id, TailFirst::Kept, |v, f| {
            v.store.release_prealloc(&f.alloc)?;
            Ok(Vec::new())
        })
    }

    /// The goal of a placed file's first blocks (where its logical block 0 goes), `want`
    /// blocks of them: from the group its
    /// key picks (a multiplicative hash, so neighbouring keys land far apart: about 0.618
    /// of the device from each other, wrapped). A file that fits a group starts in the
    /// first group from there holding `want` free blocks and at least half the average
    /// free blocks per group (looking through at most `ROOMY_SCAN_GROUPS`, else the key's
    /// group): with the other files of its key until their group runs low, then in the
    /// next roomy one. (ext4's Orlov allocator keeps a new directory out of groups with
    /// below-average free space; halving the average keeps a key's files together while
    /// their group fills.) A larger one at the first run of wholly free
    /// groups that holds `want` and that no other file has claimed (looking through at
    /// most `PLACEMENT_SCAN_GROUPS`), else at the key's group. Such a file claims its run,
    /// so files placed at the same time (or before they allocate) do not pick overlapping
    /// runs; the claim goes at close or unlink. `None` once the file maps anything (the
    /// goal then follows its previous extent) or without a key.
    pub(super) fn placement_goal(&self, f: &VFile, want: u64) -> Option<u64> {
        let key = f.placement?;
        if f.alloc.next_mapped(0).is_some() {
            return None;
        }
        let id = f.alloc.id();
        let g = self.store.geometry();
        let mut claims = self.claims.lock();
        if let Some(&(start, _)) = claims.by_file.get(&id) {
            return Some(g.group_start(start));
        }
        let groups = g.groups_count();
        let home = key_group(key, groups);
        let k = want.div_ceil(g.group_blocks).clamp(1, groups);
        if k == 1 {
            let low = self.store.allocator().free_blocks() / groups / 2;
            let roomy = |x: u64| self.store.group_free_blocks(x) >= low.max(want);
            let group = (0..groups.min(ROOMY_SCAN_GROUPS))
                .map(|i| (home + i) % groups)
                .find(|&x| roomy(x))
                .unwrap_or(home);
            return Some(g.group_start(group));
        }
        let free = |x: u64| {
            self.store.group_free_blocks(x) == g.group_len(x) && !claims.groups.contains_key(&x)
        };
        let fits = |s: u64| s + k <= groups && (s..s + k).all(free);
        let start = (0..groups.min(PLACEMENT_SCAN_GROUPS))
            .map(|i| (home + i) % groups)
            .find(|&s| fits(s));
        let Some(s) = start else {
            return Some(g.group_start(home));
        };
        claims.by_file.insert(id, (s, k));
        claims.groups.extend((s..s + k).map(|x| (x, id)));
        debug_assert_eq!(
            claims.groups.len() as u64,
            claims.by_file.values().map(|c| c.1).sum::<u64>(),
            "a group claimed twice, or by no file's claim"
        );
        Some(g.group_start(s))
    }

    /// Drops file `id`'s claim on a run of groups, if it holds one.
    pub(super) fn unclaim(&self, id: u64) {
        let mut claims = self.claims.lock();
        if let Some((s, k)) = claims.by_file.remove(&id) {
            for x in s..s + k {
                let was = claims.groups.remove(&x);
                debug_assert_eq!(was, Some(id), "group {x} claimed by another file");
            }
        }
    }
}

/// The group placement key `key` picks among `groups`: Fibonacci hashing, the hash's top 32
/// bits scaled to the group count (not taken modulo it, which steps consecutive keys by a
/// fixed few groups and clusters them).
pub(super) fn key_group(key: u64, groups: u64) -> u64 {
    let hash = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    ((u128::from(hash) * u128::from(groups)) >> 32) as u64
}
