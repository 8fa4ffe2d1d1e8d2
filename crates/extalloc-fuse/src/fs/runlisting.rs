//! Listings of a large directory through its run's view (`runview.rs`): a directory
//! opened for listing while it is shelved with a view is listed in the order of its
//! run's hashes, the run's entry chunks read one at a time and merged with the changes
//! after the run, so `ls`, `find` and `rm -rf` of a directory of millions of names do
//! not read it whole (`listing.rs` lists a directory in memory from its arena).
//!
//! Data structures: `runview::ByHash`, in the handle (`DirHandle::by_hash`): the run's key the
//! listing's positions hash under, and the names taken in that order if the listing had
//! to go on without the view. A position is a cookie of an entry's hash ([`cookie`]): 3
//! plus the hash's top 57 bits (its group) shifted by 4, or'ed with how many entries of
//! that group the listing has given (at most 15), so below 2^61 (the arena's cookies
//! have bit 62 set: neither kind is taken for the other). A listing goes on from a
//! position at the first entry of its group, past the entries of the group it gave.
//!
//! Invariant: the run's entries and the adds after it (`RunView::listed`) are each in
//! (hash, name) order under the key, so the merge gives every name once, in that order;
//! an entry present for the whole listing is given once (its hash does not change), one
//! added or removed meanwhile may or may not be (POSIX). The key outlives the run: a
//! merged compaction writes its new run under the same key (`names/compact.rs`), so a
//! listing goes on through it. A directory read whole meanwhile (a chunk that fails, a
//! view used too often), or compacted into a run of a new key, is listed from the names
//! the handle takes once, sorted by their hashes under its key (`SortedNames`: about 21
//! bytes an 8-byte name, for that handle only), each looked up in the entries as the
//! listing passes it. Two names in one group of 57 bits (about one chance in 10^5 in a
//! directory of a million names) keep their order by name; seventeen in one group would
//! be needed to list one twice.
//! Lock order: the namespace lock, held for writing while a batch is read (the view's
//! reads and caches change), then `dir_handles` (to keep the handle's names).

use super::core::{Entry, Fs, FsResult, Ns};
use super::runview::{self, ByHash, SortedNames};
use crate::dir::run::ListedEntry;
use crate::dir::{Added, Changed};
use std::sync::Arc;

/// The position before the first entry (after `..`).
const START: u64 = 2;
/// What a cookie adds to its group and index: positions 0, 1 and 2 are the start, `.`
/// and `..`.
const BASE: u64 = 3;
/// Hash bits below a group's.
const GROUP_SHIFT: u32 = 7;
/// Bits of the count of a group's entries given.
const INDEX_BITS: u32 = 4;
const INDEX_MAX: u64 = (1 << INDEX_BITS) - 1;

/// The group of a hash: its top 57 bits.
fn group(hash: u64) -> u64 {
    hash >> GROUP_SHIFT
}

/// The position after the `given`-th entry (from 1) of group `g`.
fn cookie(g: u64, given: u64) -> u64 {
    debug_assert!(g < 1 << (64 - GROUP_SHIFT) && given > 0, "a group's entry");
    BASE + ((g << INDEX_BITS) | given.min(INDEX_MAX))
}

/// Where a listing goes on from position `offset` (past the dots): the group, and how
/// many of its entries were given; `None` for a position no listing by hash gave (the
/// listing's end).
fn resume(offset: u64) -> Option<(u64, u64)> {
    if offset == START {
        return Some((0, 0));
    }
    let x = offset.checked_sub(BASE)?;
    if x >> (64 - GROUP_SHIFT + INDEX_BITS) != 0 {
        return None;
    }
    Some((x >> INDEX_BITS, x & INDEX_MAX))
}

/// An entry a batch gives: its name, its entry, the position after it.
pub(crate) type Listed = (Vec<u8>, Entry, u64);

/// Up to `max` entries in (hash, name) order from group `g`, past the first `given` of
/// that group: the run's entries (`run`, in order, from the chunk that holds the group;
/// what the changes leave of each: `now`, `None` when removed) merged with the adds
/// after the run (`adds`, in order, from the group; a name in both is the add's).
fn merge(
    mut run: impl FnMut() -> Result<Option<ListedEntry>, String>,
    adds: impl Iterator<Item = (u64, Vec<u8>, Added)>,
    now: impl Fn(&[u8], Added) -> Option<Added>,
    (g, given): (u64, u64),
    max: usize,
) -> Result<Vec<(Vec<u8>, Added, u64)>, String> {
    let from = g << GROUP_SHIFT;
    let mut adds = adds.peekable();
    let mut head = next_from(&mut run, from)?;
    let mut out = Vec::new();
    let (mut current, mut counted) = (g, 0u64);
    while out.len() < max {
        let take_add = match (&head, adds.peek()) {
            (None, None) => break,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some(r), Some(a)) => (a.0, a.1.as_slice()) <= (r.0, r.1.as_slice()),
        };
        let (hash, name, entry) = if take_add {
            let a = adds.next().expect("peeked");
            debug_assert!(a.0 >= from, "an add from the group");
            if head.as_ref().is_some_and(|r| (r.0, &r.1) == (a.0, &a.1)) {
                head = next_from(&mut run, from)?; // the add replaces the run's entry
            }
            a
        } else {
            let r = head.take().expect("a run entry");
            head = next_from(&mut run, from)?;
            debug_assert!(
                head.as_ref().is_none_or(|h| (h.0, &h.1) > (r.0, &r.1)),
                "ascending"
            );
            match now(&r.1, r.2) {
                Some(e) => (r.0, r.1, e),
                None => continue, // removed after the run
            }
        };
        if group(hash) != current {
            debug_assert!(group(hash) > current, "groups ascending");
            (current, counted) = (group(hash), 0);
        }
        counted += 1;
        if current == g && counted <= given {
            continue; // given before
        }
        out.push((name, entry, cookie(current, counted)));
    }
    Ok(out)
}

/// The next entry `run` gives from hash `from` on.
fn next_from(
    run: &mut impl FnMut() -> Result<Option<ListedEntry>, String>,
    from: u64,
) -> Result<Option<ListedEntry>, String> {
    loop {
        match run()? {
            Some(e) if e.0 < from => continue,
            got => {
                debug_assert!(
                    got.as_ref().is_none_or(|e| e.0 >= from),
                    "from the group on"
                );
                return Ok(got);
            }
        }
    }
}

impl Fs {
    /// Up to `max` entries of directory `ino` after position `offset` (past the dots) in
    /// the order of hashes under `h.key`, each with the position after it; empty at the
    /// listing's end or for a position it did not give. `ns` held for writing. Through the
    /// directory's view when it has one of that key (it stays shelved), else from the
    /// names `h` takes once (the directory read back whole first if shelved: `EIO` if
    /// that fails, `ENOENT` or `ENOTDIR` if `ino` is no longer a directory).
    pub(crate) fn by_hash_batch(
        &self,
        ns: &mut Ns,
        ino: u64,
        h: &mut ByHash,
        offset: u64,
        max: usize,
    ) -> FsResult<Vec<Listed>> {
        debug_assert!(offset >= START, "past the dots");
        let Some(at) = resume(offset) else {
            return Ok(Vec::new());
        };
        ns.dir(ino)?;
        let got = match self.view_mut(ns, ino) {
            Some(v) if v.index.shape.key == h.key => match self.through_view(ino, v, at, max) {
                Ok(got) => Some(got),
                Err(why) => {
                    log::warn!("directory {ino}: listing its run: {why}; read whole");
                    None
                }
            },
            _ => None,
        };
        let got = match got {
            Some(got) => got,
            None => self.through_names(ns, ino, h, at, max)?,
        };
        // A kind not noted yet is the node's, when it is in memory.
        let known = |(ino, kind): Added| kind.or_else(|| ns.nodes.get(&ino).map(|n| n.inode.kind));
        Ok((got.into_iter())
            .map(|(name, e, next)| {
                (
                    name,
                    Entry {
                        ino: e.0,
                        kind: known(e),
                    },
                    next,
                )
            })
            .collect())
    }

    /// [`Fs::by_hash_batch`] through view `v` of directory `ino`.
    fn through_view(
        &self,
        ino: u64,
        v: &mut runview::RunView,
        at: (u64, u64),
        max: usize,
    ) -> Result<Vec<(Vec<u8>, Added, u64)>, String> {
        let from = at.0 << GROUP_SHIFT;
        v.listed_adds();
        let vol = self.vol.volume();
        let runview::RunView {
            index,
            tail,
            last,
            listed,
            ..
        } = v;
        // Not counted in `chunks_read`: a listing reads each chunk about once, as a
        // whole read would, so it is no reason to read the directory whole.
        let mut uncounted = 0;
        let mut read = runview::cached_read(vol, ino, &mut uncounted, last);
        let (mut number, chunks) = (index.chunk_for(from), index.shape.entry_chunks as usize);
        let mut chunk = Vec::new().into_iter();
        let run = || loop {
            if let Some(e) = chunk.next() {
                return Ok(Some(e));
            }
            if number >= chunks {
                return Ok(None);
            }
            chunk = index.chunk(&mut read, number)?.into_iter();
            number += 1;
        };
        let listed = listed.as_ref().expect("made above");
        let adds = (listed.range((from, Box::default())..)).map(|(hash, name)| {
            let Some(Some(e)) = tail.state(name) else {
                panic!("a listed add the changes do not hold");
            };
            (*hash, name.to_vec(), e)
        });
        let now = |name: &[u8], e: Added| match tail.state(name) {
            None => Some(e),
            Some(state) => state,
        };
        let got = merge(run, adds, now, at, max)?;
        debug_assert!(
            got.windows(2).all(|w| w[0].2 <= w[1].2),
            "positions ascending"
        );
        Ok(got)
    }

    /// [`Fs::by_hash_batch`] from the names `h` holds, taken now if it holds none: each
    /// looked up in directory `ino`'s entries (read back whole first if shelved).
    fn through_names(
        &self,
        ns: &mut Ns,
        ino: u64,
        h: &mut ByHash,
        at: (u64, u64),
        max: usize,
    ) -> FsResult<Vec<(Vec<u8>, Added, u64)>> {
        self.unshelve(ns, ino)?;
        let d = ns.dir(ino)?;
        debug_assert!(!d.shelved(), "read whole");
        let names = h
            .names
            .get_or_insert_with(|| Arc::new(SortedNames::new(&h.key, d.entries.keys())));
        let from = at.0 << GROUP_SHIFT;
        let mut rest = names.since(from);
        let run = || {
            Ok(rest
                .next()
                .map(|(hash, name)| (hash, name.to_vec(), (0, None))))
        };
        let now = |name: &[u8], _| d.entries.get(name).map(|e| (e.ino, e.kind));
        let got = merge(run, std::iter::empty(), now, at, max);
        Ok(got.expect("names in memory read without error"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A name's hash crowded into one of eight groups (so groups hold several names).
    fn crowded(group: u64, low: u64) -> u64 {
        ((group % 8) << GROUP_SHIFT) | (low % (1 << GROUP_SHIFT))
    }

    proptest! {
        /// A listing in calls of any size gives every name the run and its changes hold
        /// once, in (hash, name) order, and nothing removed: names made after the run,
        /// names of the run removed, or removed and made again.
        #[test]
        fn a_listing_gives_every_name_once_in_order(
            names in proptest::collection::btree_map(
                "[a-c]{1,4}", (0u64..8, 0u64..128, any::<bool>(), 0u8..4), 0..60),
            sizes in proptest::collection::vec(1usize..6, 1..40),
        ) {
            // Each name: in the run, or not; then kept, removed, made again (run names),
            // or added (the others).
            let mut run = Vec::new();
            let mut adds = Vec::new();
            let mut now = BTreeMap::new();
            let mut want = Vec::new();
            for (i, (name, (g, low, in_run, fate))) in names.iter().enumerate() {
                let (hash, name) = (crowded(*g, *low), name.as_bytes().to_vec());
                let ino = i as u64 + 1;
                match (in_run, fate) {
                    (true, 0) => { now.insert(name.clone(), None); }
                    (true, 1) => {
                        now.insert(name.clone(), Some((ino + 1000, None)));
                        adds.push((hash, name.clone(), (ino + 1000, None)));
                        want.push((hash, name.clone(), ino + 1000));
                    }
                    (true, _) => want.push((hash, name.clone(), ino)),
                    (false, _) => {
                        adds.push((hash, name.clone(), (ino, None)));
                        want.push((hash, name.clone(), ino));
                    }
                }
                if *in_run {
                    run.push((hash, name, (ino, None)));
                }
            }
            // Names of one group past 15 may be given twice (the module documentation).
            let mut per_group: BTreeMap<u64, usize> = BTreeMap::new();
            for w in &want {
                *per_group.entry(group(w.0)).or_default() += 1;
            }
            prop_assume!(per_group.values().all(|&n| n <= INDEX_MAX as usize));
            run.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            adds.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            want.sort();
            let mut got = Vec::new();
            let mut offset = START;
            for &max in sizes.iter().cycle().take(200) {
                let at = resume(offset).expect("a position the listing gave");
                let from = at.0 << GROUP_SHIFT;
                let mut rest = run.iter().filter(|r| r.0 >= from).cloned();
                let listed = adds.iter().filter(|a| a.0 >= from).cloned();
                let state = |name: &[u8], e: Added| match now.get(name) {
                    None => Some(e),
                    Some(s) => *s,
                };
                let batch = merge(|| Ok(rest.next()), listed, state, at, max).unwrap();
                prop_assert!(batch.len() <= max);
                let Some(last) = batch.last() else { break };
                offset = last.2;
                for (name, (ino, _), next) in batch {
                    prop_assert!(next > BASE && next < 1 << 61, "a cookie of its kind");
                    got.push((name, ino));
                }
            }
            let want: Vec<(Vec<u8>, u64)> = want.into_iter().map(|w| (w.1, w.2)).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn positions_round_trip_and_others_are_refused() {
        assert_eq!(resume(START), Some((0, 0)));
        for (g, given) in [(0, 1), (5, 15), ((1 << 57) - 1, 3)] {
            assert_eq!(resume(cookie(g, given)), Some((g, given)));
        }
        assert_eq!(cookie(9, 40), cookie(9, 15), "counts past 15 stay at 15");
        for other in [0, 1, 1 << 62 | 9, u64::MAX >> 1, (1 << 61) + BASE] {
            assert_eq!(resume(other), None, "{other:#x}");
        }
    }
}
