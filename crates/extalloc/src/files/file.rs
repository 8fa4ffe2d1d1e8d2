//! One file's allocation state ([`FileAlloc`]) and what a data request asks
//! ([`DataRequest`]).
//!
//! # Data structures
//!
//! - [`FileAlloc`]: the file's id and, under one reader/writer lock, its logical size, its
//!   mapped extents (`logical start -> physical extent`) and its preallocations (`PaSet`).
//!
//! # Invariants (checked by `Files::check_file`)
//!
//! Mapped extents are disjoint in logical space, and neighbours contiguous in both spaces
//! are merged ([`map_insert`]); the size is at least the highest mapped end.
//!
//! Lock order: the file lock is taken before any lock of the file layer or the core.

use super::pa::{Pa, PaSet};
use crate::alloc::Lifetime;
use crate::geometry::Extent;
use parking_lot::RwLock;
use std::collections::BTreeMap;

/// A request for data blocks of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRequest {
    /// First logical block to map; `logical .. logical + len` must be a hole.
    pub logical: u64,
    /// Blocks wanted. The call maps a prefix of the range (at least one block); call again
    /// for the rest.
    pub len: u64,
    /// Preferred physical block for `logical`; by default the block that would follow the
    /// file's previous extent.
    pub goal: Option<u64>,
    /// Expected lifetime of the data: the size-class hint passed to the core.
    pub lifetime: Lifetime,
    /// Map exactly the request: no normalisation, no new preallocation, no locality chunk
    /// (ext4's `HINT_NOPREALLOC`, which its fallocate path passes). An existing PA that
    /// covers the block is still used.
    pub no_prealloc: bool,
    /// The file is complete: closed, and this request ends at its size (the writeback of a
    /// file written in full). The request is mapped at exactly its length with no new
    /// preallocation, as ext4 does for closed files; unlike `no_prealloc`, a small file
    /// still carves from a locality chunk.
    pub complete: bool,
    /// Which locality chunk a small file carves from (taken modulo the number of chunks);
    /// by default the calling thread's. ext4 keeps one per CPU: a caller that knows the
    /// CPU (a trace replay) passes it.
    pub locality: Option<u32>,
    /// The request starts a run of this many blocks that the caller maps in order (the
    /// writeback of a dirty run, a trip at a time): the window covers the whole run (at
    /// most a group) and the rest stays the file's preallocation, which the next requests
    /// of the run take. 0: no run.
    pub run: u64,
    /// The file's size in blocks as its writer sees it, ahead of what is mapped (a
    /// buffered layer's cached size): the window is sized by it and may reach a group
    /// instead of 8 MiB, so the file's later writebacks land in the preallocation. 0: none.
    pub size_hint: u64,
}

impl DataRequest {
    /// A request for `len` blocks from logical block `logical`, with no goal and no hints.
    pub fn new(logical: u64, len: u64) -> Self {
        DataRequest {
            logical,
            len,
            goal: None,
            lifetime: Lifetime::Unknown,
            no_prealloc: false,
            complete: false,
            locality: None,
            run: 0,
            size_hint: 0,
        }
    }

    /// See [`DataRequest::no_prealloc`].
    pub fn no_prealloc(mut self) -> Self {
        self.no_prealloc = true;
        self
    }

    /// See [`DataRequest::complete`].
    pub fn complete(mut self) -> Self {
        self.complete = true;
        self
    }

    /// See [`DataRequest::run`].
    pub fn run(mut self, blocks: u64) -> Self {
        self.run = blocks;
        self
    }

    /// See [`DataRequest::size_hint`].
    pub fn size_hint(mut self, blocks: u64) -> Self {
        self.size_hint = blocks;
        self
    }

    /// See [`DataRequest::locality`].
    pub fn locality(mut self, slot: u32) -> Self {
        self.locality = Some(slot);
        self
    }

    /// Sets the preferred physical block for `logical`.
    pub fn goal(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self
    }

    /// Sets the lifetime hint.
    pub fn lifetime(mut self, lifetime: Lifetime) -> Self {
        self.lifetime = lifetime;
        self
    }
}

pub(super) struct FileInner {
    pub(super) size_blocks: u64,
    /// Logical start -> physical extent; disjoint, neighbours merged when contiguous in both.
    pub(super) map: BTreeMap<u64, Extent>,
    pub(super) pas: PaSet,
    /// In the allocator's registry of files with PAs.
    pub(super) registered: bool,
}

/// One file's allocation state. Create with [`Files::create_file`](super::Files::create_file).
pub struct FileAlloc {
    pub(super) id: u64,
    pub(super) inner: RwLock<FileInner>,
}

impl FileAlloc {
    /// The file's id, as given to `create_file`.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Logical size in blocks (the highest mapped end, or what `set_file_size` set).
    pub fn size_blocks(&self) -> u64 {
        self.inner.read().size_blocks
    }

    /// True if logical block `l` is mapped.
    pub fn is_mapped(&self, l: u64) -> bool {
        let f = self.inner.read();
        f.map
            .range(..=l)
            .next_back()
            .is_some_and(|(&s, e)| l < s + e.len)
    }

    /// The mapping at logical block `l`: the physical block and how many blocks from `l`
    /// the same extent maps (contiguous in both spaces), or `None` for a hole.
    pub fn lookup(&self, l: u64) -> Option<(u64, u64)> {
        let f = self.inner.read();
        f.map
            .range(..=l)
            .next_back()
            .filter(|(&s, e)| l < s + e.len)
            .map(|(&s, e)| (e.start + (l - s), s + e.len - l))
    }

    /// Where the file's allocation for logical block `l` (a hole) is predicted to land:
    /// in the file's preallocation that covers it, else right after its last extent
    /// (where it grows). `None` with neither: the core's stream goal decides. A stable
    /// prediction: it moves only when the file's allocations move.
    pub fn predicted_block(&self, l: u64) -> Option<u64> {
        let f = self.inner.read();
        if let Some(p) = f.pas.covering_block(l) {
            return Some(p);
        }
        f.map.last_key_value().map(|(_, e)| e.end())
    }

    /// The first mapped logical block at or after `l`, if any (where a hole at `l` ends).
    pub fn next_mapped(&self, l: u64) -> Option<u64> {
        let f = self.inner.read();
        if let Some((&s, e)) = f.map.range(..=l).next_back() {
            if l < s + e.len {
                return Some(l);
            }
        }
        f.map.range(l..).next().map(|(&s, _)| s)
    }

    /// The last `n` (at most) mapped extents that reach into `from .. to`, in logical
    /// order, whole (they may start before `from` or end after `to`).
    pub fn last_extents_in(&self, from: u64, to: u64, n: usize) -> Vec<(u64, Extent)> {
        let f = self.inner.read();
        let mut out: Vec<(u64, Extent)> = f
            .map
            .range(..to)
            .rev()
            .take_while(|(&s, e)| s + e.len > from)
            .take(n)
            .map(|(&s, &e)| (s, e))
            .collect();
        out.reverse();
        out
    }

    /// Extents mapped ([`FileAlloc::extents`]' length, without the list).
    pub fn extent_count(&self) -> usize {
        self.inner.read().map.len()
    }

    /// Blocks mapped (the sum of [`FileAlloc::extents`]' lengths, without the list).
    pub fn mapped_blocks(&self) -> u64 {
        self.inner.read().map.values().map(|e| e.len).sum()
    }

    /// The mapped extents in logical order: `(logical start, physical extent)`.
    pub fn extents(&self) -> Vec<(u64, Extent)> {
        self.inner
            .read()
            .map
            .iter()
            .map(|(&l, &e)| (l, e))
            .collect()
    }

    /// Number of live preallocations.
    pub fn prealloc_count(&self) -> usize {
        self.inner.read().pas.len()
    }

    /// Reserved blocks of this file's preallocations not yet handed to it.
    pub fn prealloc_unused_blocks(&self) -> u64 {
        self.inner
            .read()
            .pas
            .snapshot()
            .iter()
            .map(Pa::unused)
            .sum()
    }

    /// The physical extents this file holds in preallocations but has not used.
    pub fn prealloc_unused_extents(&self) -> Vec<Extent> {
        let f = self.inner.read();
        f.pas
            .snapshot()
            .iter()
            .flat_map(|pa| {
                pa.unused_runs()
                    .into_iter()
                    .map(|(off, n)| Extent::new(pa.pstart + off, n))
            })
            .collect()
    }
}

/// Records `logical -> extent`, merging with the neighbours `left` and `right` (as found
/// before the insertion) where they are contiguous in both spaces.
pub(super) fn map_insert(
    f: &mut FileInner,
    logical: u64,
    extent: Extent,
    left: Option<(u64, Extent)>,
    right: Option<(u64, Extent)>,
) {
    let (mut l, mut e) = (logical, extent);
    if let Some((ps, pe)) = left.filter(|(ps, pe)| ps + pe.len == l && pe.end() == e.start) {
        f.map.remove(&ps);
        l = ps;
        e = Extent::new(pe.start, pe.len + e.len);
    }
    if let Some((ns, ne)) =
        right.filter(|(ns, ne)| *ns == logical + extent.len && extent.end() == ne.start)
    {
        f.map.remove(&ns);
        e.len += ne.len;
    }
    f.map.insert(l, e);
    f.size_blocks = f.size_blocks.max(logical + extent.len);
    // The merged entry covers what was inserted, block for block.
    debug_assert!(l <= logical && logical + extent.len <= l + e.len);
    debug_assert_eq!(
        e.start + (logical - l),
        extent.start,
        "logical {logical} maps its extent"
    );
}
