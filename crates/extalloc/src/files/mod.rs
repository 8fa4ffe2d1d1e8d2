//! The file layer: placement of file data over the allocator core. Request normalisation,
//! file preallocations and locality preallocations.
//!
//! # Data structures
//!
//! - [`Files`]: the layer, over the [`Allocator`] it owns: the registry of files holding
//!   preallocations and the locality chunks. The core knows nothing of files: it reserves
//!   blocks for this layer ([`Allocator::reserve`]), which claims them for a file when it
//!   hands them out ([`Allocator::claim`]) or releases them.
//! - [`FileAlloc`]: one file's allocation state under a reader/writer lock: its logical size,
//!   its mapped extents (`logical start -> physical extent`) and its preallocations (PAs).
//! - `Pa` (`pa.rs`): blocks reserved for a file beyond what it asked, at a fixed logical
//!   position (`lstart .. lstart + len` maps to `pstart ..`), with a bitmap of the blocks
//!   already handed to the file. Kept in an ordered tree keyed by logical start
//!   (`prealloc_index=tree`, O(log n) lookup, overlap check and trimming) or in ext4's old
//!   list (`prealloc_index=list`, O(n), capped at 512 entries by discarding the oldest).
//! - Locality PAs (`locality.rs`): per shard (the calling thread's, or the slot a request
//!   names, e.g. a traced CPU), one reserved chunk of `locality_prealloc_blocks` that small
//!   files carve their blocks from, so small files written together sit together; and up
//!   to `locality_leftovers` ends of earlier chunks, served best fit to files that fit them.
//!
//! # Invariants (checked by [`Files::check`] and [`Files::check_file`])
//!
//! ```text
//! mapped extents of a file are disjoint in logical space
//! PAs of a file are disjoint in logical space
//! a PA block is either used (mapped by the file at pstart + (l - lstart)) or unused
//!   (not mapped, and reserved: marked used in its group, not pending)
//! every reserved block belongs to exactly one PA or locality chunk:
//!   sum of unused PA blocks + locality blocks = the core's reserved count
//! ```
//!
//! # Operations
//!
//! - `allocate_data(file, {logical, len})`: the range must be a hole. (1) If a PA covers
//!   `logical`, map from it: no group is touched. (2) Small files (size below
//!   `stream_threshold_kib`) carve from the shard's locality PA. (3) Otherwise normalise: the
//!   window is the request rounded up to the next size bucket (16 KiB ... 8 MiB) of the file's
//!   size or of the request's end, whichever is larger (as ext4 uses i_size), aligned to the bucket,
//!   clamped to the hole between the neighbouring mapped extents and to the file's other PAs;
//!   allocate the window, map the request, keep the rest as a PA.
//! - `set_file_size(file, size)`: shrinking frees mapped blocks past the size (deferred, like
//!   any free) and discards the file's PAs.
//! - `release_prealloc(file)`: discards the file's PAs (the file is closed): their unused
//!   blocks are free at once; they never held data.
//! - `free_data(file, logical, len)`: punches a hole: discards the file's PAs, unmaps the
//!   range and frees what was mapped there (deferred).
//!
//! # No space
//!
//! The core reports no space with the blocks pending and reserved. This layer owns one
//! remedy: when preallocations hold blocks, it discards every PA it can lock and retries
//! once. Committing pending frees belongs to the owner of the commits (a store's journal,
//! or the `_committing` calls of an owner in memory).
//!
//! Lock order: file lock -> locality shard lock -> group locks -> global lock.

mod locality;
mod pa;

use crate::alloc::{AllocRequest, Allocator, Lifetime, SHARDS};
use crate::error::{Error, Result};
use crate::geometry::{Extent, DEVICE_BLOCKS_MAX};
use crossbeam_utils::CachePadded;
use locality::Locality;
use pa::{Pa, PaSet};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

pub use pa::PREALLOC_LIST_MAX;

/// Normalisation buckets, in bytes: 16 KiB, 32 KiB, ... 8 MiB.
const BUCKET_BYTES_MIN: u64 = 16 << 10;
const BUCKET_BYTES_MAX: u64 = 8 << 20;
const _: () = assert!(BUCKET_BYTES_MIN.is_power_of_two() && BUCKET_BYTES_MAX.is_power_of_two());

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
}

impl DataRequest {
    pub fn new(logical: u64, len: u64) -> Self {
        DataRequest {
            logical,
            len,
            goal: None,
            lifetime: Lifetime::Unknown,
            no_prealloc: false,
            complete: false,
            locality: None,
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

    /// See [`DataRequest::locality`].
    pub fn locality(mut self, slot: u32) -> Self {
        self.locality = Some(slot);
        self
    }

    pub fn goal(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self
    }

    pub fn lifetime(mut self, lifetime: Lifetime) -> Self {
        self.lifetime = lifetime;
        self
    }
}

struct FileInner {
    size_blocks: u64,
    /// Logical start -> physical extent; disjoint, neighbours merged when contiguous in both.
    map: BTreeMap<u64, Extent>,
    pas: PaSet,
    /// In the allocator's registry of files with PAs.
    registered: bool,
}

/// One file's allocation state. Create with [`Files::create_file`].
pub struct FileAlloc {
    id: u64,
    inner: RwLock<FileInner>,
}

impl FileAlloc {
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

/// Files with preallocations (for discard under space pressure) and the locality PAs.
struct PreallocRegistry {
    files: Mutex<RegisteredFiles>,
    /// Per shard: what is left of its locality chunk, and earlier chunks' leftovers.
    locality: Box<[CachePadded<Mutex<Locality>>]>,
}

#[derive(Default)]
struct RegisteredFiles {
    files: Vec<Weak<FileAlloc>>,
    /// Length after the last pruning of dead entries.
    pruned_len: usize,
}

impl PreallocRegistry {
    fn new() -> Self {
        PreallocRegistry {
            files: Mutex::new(RegisteredFiles::default()),
            locality: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Locality::default())))
                .collect(),
        }
    }

    fn register(&self, file: &Arc<FileAlloc>) {
        let mut r = self.files.lock();
        if r.files.len() >= 2 * r.pruned_len.max(64) {
            r.files.retain(|w| w.strong_count() > 0);
            r.pruned_len = r.files.len();
        }
        r.files.push(Arc::downgrade(file));
    }

    fn live_files(&self) -> Vec<Arc<FileAlloc>> {
        self.files
            .lock()
            .files
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// Logical blocks a file may address: keeps every `logical + len` far from overflow.
const LOGICAL_BLOCKS_MAX: u64 = DEVICE_BLOCKS_MAX << 8;

/// The file layer over an allocator (see the module comment).
pub struct Files {
    alloc: Allocator,
    registry: PreallocRegistry,
}

/// Who may commit when the core finds no space: the owner of the commits decides.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commits {
    /// The caller commits (a journal decides when frees are durable).
    Caller,
    /// The caller asked this call to commit pending frees first (an owner in memory).
    First,
}

impl Files {
    /// The file layer over `alloc`, which it owns from here on (plain extents still go
    /// through [`Files::allocator`]).
    pub fn new(alloc: Allocator) -> Self {
        Files {
            alloc,
            registry: PreallocRegistry::new(),
        }
    }

    /// The allocator core under this layer.
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// A plain extent next to the files (metadata, say): [`Allocator::allocate`], with this
    /// layer's remedy when it finds no space while preallocations hold blocks.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        self.with_discard(|| self.alloc.allocate(req))
    }

    /// [`Files::allocate`] for a caller that owns the commits: pending frees are committed
    /// first (see [`Allocator::allocate_committing`]), preallocations discarded next.
    pub fn allocate_committing(&self, req: &AllocRequest) -> Result<Extent> {
        self.with_discard(|| self.alloc.allocate_committing(req))
    }

    /// Reserves blocks for a PA or locality chunk, with this layer's remedy.
    fn reserve(&self, req: &AllocRequest, commits: Commits) -> Result<Extent> {
        self.with_discard(|| self.alloc.reserve(req, commits == Commits::First))
    }

    /// Runs a core allocation; finding no space while preallocations hold blocks, discards
    /// every PA it can lock (this layer's remedy: the only one it owns) and runs it again.
    fn with_discard(&self, op: impl Fn() -> Result<Extent>) -> Result<Extent> {
        match op() {
            Err(Error::NoSpace {
                reserved_blocks, ..
            }) if reserved_blocks > 0 && self.discard_preallocations() > 0 => op(),
            other => other,
        }
    }

    /// Checks the core ([`Allocator::check`]), every registered file and locality chunk,
    /// and that the preallocations hold exactly the blocks the core counts as reserved.
    /// Call at quiescence.
    pub fn check(&self) -> Result<()> {
        self.alloc.check()?;
        self.check_preallocations()?;
        let held = self.prealloc_reserved_blocks();
        let counted = self.alloc.reserved_blocks();
        if held != counted {
            return Err(Error::Invariant(format!(
                "preallocations hold {held} blocks, the core counts {counted} reserved"
            )));
        }
        Ok(())
    }

    /// Every extent reserved by a preallocation (files' unused PA blocks, locality chunks):
    /// what a checkpoint must not write home as allocated. Call at quiescence (a store
    /// calls it with its transaction boundary closed).
    pub fn reserved_extents(&self) -> Vec<Extent> {
        let mut out: Vec<Extent> = self
            .registry
            .live_files()
            .iter()
            .flat_map(|f| f.prealloc_unused_extents())
            .collect();
        for shard in self.registry.locality.iter() {
            out.extend(shard.lock().extents());
        }
        out.sort_by_key(|e| e.start);
        out
    }

    /// A file's allocation state. `id` is the caller's file number; it picks the stream goal.
    pub fn create_file(&self, id: u64) -> Arc<FileAlloc> {
        Arc::new(FileAlloc {
            id,
            inner: RwLock::new(FileInner {
                size_blocks: 0,
                map: BTreeMap::new(),
                pas: PaSet::new(self.alloc.policy().prealloc_tree),
                registered: false,
            }),
        })
    }

    /// Maps a prefix (at least one block) of the hole `logical .. logical + len` of `file`,
    /// using its preallocation, a locality preallocation or a normalised allocation. Returns
    /// the physical extent mapped at `logical`. Finding no space while frees wait for a
    /// commit, it fails with [`Error::NoSpace`]: the owner of the commits commits and
    /// retries (see [`Files::allocate_data_committing`]).
    pub fn allocate_data(&self, file: &Arc<FileAlloc>, req: &DataRequest) -> Result<Extent> {
        self.allocate_data_as(file, req, Commits::Caller)
    }

    /// [`Files::allocate_data`] for a caller that owns the commits (in memory, no
    /// journal): finding no space while frees wait, it commits them first.
    pub fn allocate_data_committing(
        &self,
        file: &Arc<FileAlloc>,
        req: &DataRequest,
    ) -> Result<Extent> {
        self.allocate_data_as(file, req, Commits::First)
    }

    fn allocate_data_as(
        &self,
        file: &Arc<FileAlloc>,
        req: &DataRequest,
        commits: Commits,
    ) -> Result<Extent> {
        self.validate_data_request(req)?;
        let mut f = file.inner.write();
        let end = req.logical + req.len;
        // The mapped neighbours: the last extent starting at or before `logical`, the first
        // after it. One lookup each serves the overlap check, the clamp, the goal and the
        // merge.
        let left = f
            .map
            .range(..=req.logical)
            .next_back()
            .map(|(&s, &e)| (s, e));
        let right = f.map.range(req.logical + 1..).next().map(|(&s, &e)| (s, e));
        let overlaps = left.is_some_and(|(s, e)| s + e.len > req.logical)
            || right.is_some_and(|(s, _)| s < end);
        if overlaps {
            return Err(Error::LogicalOverlap {
                file: file.id,
                logical: req.logical,
                len: req.len,
            });
        }
        let len = req.len.min(self.alloc.geometry().group_blocks);

        // 1. A preallocation of the file covers the block.
        if let Some(extent) = Self::take_from_pa(file.id, &mut f, req.logical, len) {
            self.alloc.claim(extent);
            map_insert(&mut f, req.logical, extent, left, right);
            return Ok(extent);
        }

        // 2. Small files: the shard's locality preallocation.
        let block_size = u64::from(self.alloc.geometry().block_size);
        let file_bytes = f.size_blocks.max(end).saturating_mul(block_size);
        if self.alloc.policy().locality_prealloc
            && !req.no_prealloc
            && file_bytes < self.alloc.policy().stream_threshold_kib * 1024
        {
            let slot = req
                .locality
                .map_or_else(|| self.alloc.shard_index(), |s| s as usize % SHARDS);
            let extent = self.carve_locality(file.id, len, req.lifetime, slot, commits)?;
            self.alloc.claim(extent);
            map_insert(&mut f, req.logical, extent, left, right);
            return Ok(extent);
        }

        // 3. Normalise and allocate the window.
        let (ws, window, len) = self.window(file.id, &f, req, len, left, right);
        let (ws, got) = match self.reserve(&window, commits) {
            Ok(e) => (ws, e),
            Err(Error::NoSpace { .. }) => {
                // Give back this file's own reserve (other files' were offered already),
                // then ask for the request alone.
                self.discard_file_pas(&mut f)?;
                let mut bare = AllocRequest::new(file.id, len)
                    .logical(req.logical)
                    .lifetime(req.lifetime);
                if let Some(g) = req.goal {
                    bare = bare.goal(g);
                }
                (req.logical, self.reserve(&bare, commits)?)
            }
            Err(e) => return Err(e),
        };
        let mut pa = Pa::new(ws, got.start, got.len);
        let i = req.logical - ws;
        let n = len.min(got.len - i);
        pa.mark_used(i, n);
        let extent = Extent::new(got.start + i, n);
        self.alloc.claim(extent);
        map_insert(&mut f, req.logical, extent, left, right);
        if pa.unused() > 0 {
            if !f.registered {
                f.registered = true;
                self.registry.register(file);
            }
            for old in f.pas.insert(pa) {
                self.discard_pa(&old)?;
            }
        }
        Ok(extent)
    }

    fn validate_data_request(&self, req: &DataRequest) -> Result<()> {
        if req.len == 0 {
            return Err(Error::ZeroLength);
        }
        if req
            .logical
            .checked_add(req.len)
            .is_none_or(|e| e > LOGICAL_BLOCKS_MAX)
        {
            return Err(Error::InvalidRequest(format!(
                "logical range {}+{} is past the largest file ({LOGICAL_BLOCKS_MAX} blocks)",
                req.logical, req.len
            )));
        }
        if let Some(goal) = req.goal {
            self.alloc.geometry().validate(Extent::new(goal, 1))?;
        }
        Ok(())
    }

    /// Up to `len` blocks at `logical` from the file's PA that covers it, if one does.
    fn take_from_pa(id: u64, f: &mut FileInner, logical: u64, len: u64) -> Option<Extent> {
        let pa = f.pas.covering_mut(logical)?;
        let i = logical - pa.lstart;
        let n = pa.unused_run(i, len);
        // Used PA blocks are mapped, and the request is a hole.
        assert!(
            n > 0,
            "file {id}: PA at {} has block {logical} used but unmapped",
            pa.lstart
        );
        pa.mark_used(i, n);
        let extent = Extent::new(pa.pstart + i, n);
        let lstart = pa.lstart;
        f.pas.remove_exhausted(lstart);
        Some(extent)
    }

    /// The normalised window for a request of `len` blocks at `req.logical` (not covered
    /// by a PA): its logical start, the allocation request for it, and the request's
    /// length clamped to the window.
    ///
    /// The bucket follows the larger of the request's end and the file's size, as ext4's
    /// does (i_size): a write into a hole of a large file gets a large window, so random
    /// writers racing on their files still get their data in big pieces. With
    /// `normalise_holes=request`, a write into a hole gets a window of its own length.
    fn window(
        &self,
        id: u64,
        f: &FileInner,
        req: &DataRequest,
        len: u64,
        left: Option<(u64, Extent)>,
        right: Option<(u64, Extent)>,
    ) -> (u64, AllocRequest, u64) {
        let (geometry, policy) = (self.alloc.geometry(), self.alloc.policy());
        let end = req.logical + req.len;
        let basis = if policy.normalise_by_size {
            end.max(f.size_blocks)
        } else if req.logical >= f.size_blocks {
            end
        } else {
            len
        };
        let (mut ws, mut we) = if req.no_prealloc || req.complete {
            (req.logical, req.logical + len)
        } else {
            normalise(req.logical, len, basis, u64::from(geometry.block_size))
        };
        if let Some((s, e)) = left {
            ws = ws.max(s + e.len);
        }
        if let Some((s, _)) = right {
            we = we.min(s);
        }
        (ws, we) = f.pas.clamp(req.logical, ws, we);
        if we - ws > geometry.group_blocks {
            ws = ws.max(req.logical);
            we = we.min(ws + geometry.group_blocks);
        }
        let len = len.min(we - req.logical);
        debug_assert!(ws <= req.logical && req.logical < we);
        let goal = req
            .goal
            .map(|g| g.saturating_sub(req.logical - ws))
            .or_else(|| {
                // After the file's previous extent, at the same logical distance.
                let (s, e) = left?;
                let goal = e.end() + (ws - (s + e.len));
                (goal < geometry.blocks_count).then_some(goal)
            });
        let mut window = AllocRequest::new(id, we - ws)
            .logical(ws)
            .min_len(req.logical - ws + 1)
            .lifetime(req.lifetime);
        window.class_len = if policy.class_by_window { we - ws } else { len };
        if let Some(g) = goal {
            window = window.goal(g);
        }
        (ws, window, len)
    }

    /// Discards every PA of the file: unused blocks return to the free space at once.
    /// Returns the blocks released. (Call when the file is closed.)
    pub fn release_prealloc(&self, file: &FileAlloc) -> Result<u64> {
        let mut f = file.inner.write();
        self.discard_file_pas(&mut f)
    }

    /// Sets the file's logical size. Shrinking frees the mapped blocks past `size_blocks`
    /// (they wait for the next commit, like any free) and discards the file's PAs. Returns
    /// the extents freed.
    pub fn set_file_size(&self, file: &FileAlloc, size_blocks: u64) -> Result<Vec<Extent>> {
        if size_blocks > LOGICAL_BLOCKS_MAX {
            return Err(Error::InvalidRequest(format!(
                "file size {size_blocks} blocks is past the largest file ({LOGICAL_BLOCKS_MAX} blocks)"
            )));
        }
        let mut f = file.inner.write();
        let mut freed = Vec::new();
        if size_blocks < f.size_blocks {
            self.discard_file_pas(&mut f)?;
            let cut: Vec<(u64, Extent)> = f
                .map
                .range(..)
                .filter(|(&s, e)| s + e.len > size_blocks)
                .map(|(&s, &e)| (s, e))
                .collect();
            for (s, e) in cut {
                let keep = size_blocks.saturating_sub(s);
                let tail = Extent::new(e.start + keep, e.len - keep);
                self.alloc.free(tail)?;
                freed.push(tail);
                f.map.remove(&s);
                if keep > 0 {
                    f.map.insert(s, Extent::new(e.start, keep));
                }
            }
        }
        f.size_blocks = size_blocks;
        Ok(freed)
    }

    /// Punches a hole: unmaps `logical .. logical + len` and frees the blocks that were
    /// mapped there (they wait for the next commit, like any free). Unmapped blocks in the
    /// range are left alone. The file's PAs are discarded first, as ext4's punch hole does,
    /// so none keeps a block it handed out. The size does not change. Returns the extents
    /// freed.
    pub fn free_data(&self, file: &FileAlloc, logical: u64, len: u64) -> Result<Vec<Extent>> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let end = logical
            .checked_add(len)
            .filter(|&e| e <= LOGICAL_BLOCKS_MAX)
            .ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "logical range {logical}+{len} is past the largest file ({LOGICAL_BLOCKS_MAX} blocks)"
                ))
            })?;
        let mut f = file.inner.write();
        let hit: Vec<(u64, Extent)> = f
            .map
            .range(..end)
            .rev()
            .take_while(|(&s, e)| s + e.len > logical)
            .map(|(&s, &e)| (s, e))
            .collect();
        if hit.is_empty() {
            return Ok(Vec::new());
        }
        self.discard_file_pas(&mut f)?;
        let mut freed = Vec::new();
        for (s, e) in hit {
            let (a, b) = (s.max(logical), (s + e.len).min(end));
            let piece = Extent::new(e.start + (a - s), b - a);
            self.alloc.free(piece)?;
            freed.push(piece);
            f.map.remove(&s);
            if s < a {
                f.map.insert(s, Extent::new(e.start, a - s));
            }
            if b < s + e.len {
                f.map
                    .insert(b, Extent::new(e.start + (b - s), s + e.len - b));
            }
        }
        Ok(freed)
    }

    fn discard_pa(&self, pa: &Pa) -> Result<u64> {
        for (off, n) in pa.unused_runs() {
            self.alloc
                .release_reserved(Extent::new(pa.pstart + off, n))?;
        }
        Ok(pa.unused())
    }

    fn discard_file_pas(&self, f: &mut FileInner) -> Result<u64> {
        let mut released = 0;
        for pa in f.pas.take_all() {
            released += self.discard_pa(&pa)?;
        }
        Ok(released)
    }

    /// Discards the PAs of every file and locality shard that is not busy right now, as space
    /// pressure does before an allocation fails and as unmount does. Returns the blocks
    /// released (they are free at once: PA blocks were never visible to another file).
    pub fn discard_preallocations(&self) -> u64 {
        let mut released = 0;
        for file in self.registry.live_files() {
            if let Some(mut f) = file.inner.try_write() {
                released += self
                    .discard_file_pas(&mut f)
                    .expect("PA blocks are reserved");
            }
        }
        for shard in self.registry.locality.iter() {
            if let Some(mut loc) = shard.try_lock() {
                let all: Vec<Extent> = loc.extents().collect();
                *loc = Locality::default();
                for rest in all {
                    self.alloc
                        .release_reserved(rest)
                        .expect("locality blocks are reserved");
                    released += rest.len;
                }
            }
        }
        released
    }

    /// Blocks held in preallocations (files' unused PA blocks and locality chunks) of the
    /// registered files.
    pub fn prealloc_reserved_blocks(&self) -> u64 {
        let files: u64 = self
            .registry
            .live_files()
            .iter()
            .map(|f| f.prealloc_unused_blocks())
            .sum();
        let locality: u64 = self
            .registry
            .locality
            .iter()
            .map(|s| s.lock().extents().map(|c| c.len).sum::<u64>())
            .sum();
        files + locality
    }

    /// Checks one file's invariants (see the module comment). Call at quiescence.
    pub fn check_file(&self, file: &FileAlloc) -> Result<()> {
        let fail = |m: String| Err(Error::Invariant(format!("file {}: {m}", file.id)));
        let f = file.inner.read();
        let mut prev_end = 0;
        for (&l, e) in &f.map {
            if l < prev_end || e.len == 0 {
                return fail(format!("mapped extent at {l} overlaps its predecessor"));
            }
            prev_end = l + e.len;
        }
        let mut pas = f.pas.snapshot();
        pas.sort_by_key(|pa| pa.lstart);
        for pair in pas.windows(2) {
            if pair[0].lend() > pair[1].lstart {
                return fail(format!(
                    "PAs at {} and {} overlap",
                    pair[0].lstart, pair[1].lstart
                ));
            }
        }
        for pa in &pas {
            let used = (0..pa.len).filter(|&i| pa.is_used(i)).count() as u64;
            if used != pa.used_count || used == pa.len {
                return fail(format!(
                    "PA at {}: used count {} / {} blocks",
                    pa.lstart, pa.used_count, pa.len
                ));
            }
            for i in 0..pa.len {
                let l = pa.lstart + i;
                let mapped = f
                    .map
                    .range(..=l)
                    .next_back()
                    .filter(|(&s, e)| l < s + e.len)
                    .map(|(&s, e)| e.start + (l - s));
                match (pa.is_used(i), mapped) {
                    (true, Some(p)) if p == pa.pstart + i => {}
                    (false, None) => {}
                    (used, m) => {
                        return fail(format!(
                            "PA at {}: block {l} used={used} but mapped at {m:?}",
                            pa.lstart
                        ))
                    }
                }
            }
            for (off, n) in pa.unused_runs() {
                if !self.alloc.is_reserved(Extent::new(pa.pstart + off, n)) {
                    return fail(format!(
                        "PA at {}: unused blocks are not reserved",
                        pa.lstart
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks every registered file and every locality chunk. Call at quiescence.
    pub(crate) fn check_preallocations(&self) -> Result<()> {
        for file in self.registry.live_files() {
            self.check_file(&file)?;
        }
        for (i, shard) in self.registry.locality.iter().enumerate() {
            let loc = shard.lock();
            if loc.leftovers.len() > self.alloc.policy().locality_leftovers as usize {
                return Err(Error::Invariant(format!(
                    "shard {i} keeps {} locality leftovers, more than {}",
                    loc.leftovers.len(),
                    self.alloc.policy().locality_leftovers
                )));
            }
            for c in loc.extents() {
                if c.len == 0 || !self.alloc.is_reserved(c) {
                    return Err(Error::Invariant(format!(
                        "locality extent {}+{} of shard {i} is not reserved",
                        c.start, c.len
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The window `ws .. we` for a request of `len` blocks at `logical`: `basis` blocks rounded
/// up to the next bucket (16 KiB ... 8 MiB), aligned to the bucket, at least the request.
fn normalise(logical: u64, len: u64, basis: u64, block_size: u64) -> (u64, u64) {
    let basis_bytes = basis.saturating_mul(block_size);
    let bucket_bytes = basis_bytes
        .checked_next_power_of_two()
        .unwrap_or(BUCKET_BYTES_MAX)
        .clamp(BUCKET_BYTES_MIN, BUCKET_BYTES_MAX);
    let bucket = (bucket_bytes / block_size).max(1);
    if len >= bucket {
        return (logical, logical + len);
    }
    let ws = logical / bucket * bucket;
    (ws, (ws + bucket).max(logical + len))
}

/// Records `logical -> extent`, merging with the neighbours `left` and `right` (as found
/// before the insertion) where they are contiguous in both spaces.
fn map_insert(
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_round_up_and_align() {
        // 1 KiB into a hole of a big file: a 16 KiB window (4 blocks), aligned.
        assert_eq!(normalise(1001, 1, 1, 4096), (1000, 1004));
        // Appending block 20 of a file (80 KiB so far + 4 KiB): 128 KiB window from 0.
        assert_eq!(normalise(20, 1, 21, 4096), (0, 32));
        // Huge files: 8 MiB windows.
        assert_eq!(normalise(5000, 2, 5002, 4096), (4096, 6144));
        // A request as large as its bucket is not extended.
        assert_eq!(normalise(7, 2048, 4096, 4096), (7, 2055));
    }

    /// A 1-block write into a large file is normalised to an 8 MiB window: with
    /// `class_by=window` (the extalloc preset) the window lands in a group of the large
    /// class, with `class_by=request` in one of the small class.
    #[test]
    fn a_window_takes_the_class_of_what_it_allocates() {
        use crate::alloc::{Policy, SizeClass};
        use crate::geometry::Geometry;
        for (spec, class) in [
            ("extalloc", SizeClass::Large),
            ("extalloc:class_by=request", SizeClass::Small),
        ] {
            let alloc = Allocator::new(
                Geometry::new(4096, 4096, 1 << 16).unwrap(),
                Policy::parse(spec).unwrap(),
            )
            .unwrap();
            let alloc = Files::new(alloc);
            let file = alloc.create_file(7);
            // Size the file at 64 MiB first (a write far into it), then write block 5000.
            alloc
                .allocate_data(&file, &DataRequest::new(16383, 1))
                .unwrap();
            let e = alloc
                .allocate_data(&file, &DataRequest::new(5000, 1))
                .unwrap();
            assert_eq!(file.prealloc_count(), 2, "{spec}: two 8 MiB windows");
            let g = alloc.allocator().geometry().group_of(e.start);
            assert_eq!(
                alloc.allocator().group_class_tag(g),
                crate::alloc::class_tag(class, Lifetime::Unknown),
                "{spec}: the window's group"
            );
            alloc.check().unwrap();
        }
    }

    #[test]
    fn pa_runs() {
        let mut pa = Pa::new(0, 100, 10);
        pa.mark_used(2, 3);
        pa.mark_used(9, 1);
        assert_eq!(pa.unused_runs(), vec![(0, 2), (5, 4)]);
        assert_eq!(pa.unused(), 6);
        assert_eq!(pa.unused_run(5, 2), 2);
    }
}
