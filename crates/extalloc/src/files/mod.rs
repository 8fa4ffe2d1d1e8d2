//! The file layer: placement of file data over the allocator core. Request normalisation,
//! file preallocations and locality preallocations.
//!
//! # Data structures
//!
//! - [`Files`]: the layer, over the [`Allocator`] it owns: the registry of files holding
//!   preallocations and the locality chunks. The core knows nothing of files: it reserves
//!   blocks for this layer (`Allocator::reserve`), which claims them for a file when it
//!   hands them out (`Allocator::claim`) or releases them.
//! - [`FileAlloc`] (`file.rs`): one file's allocation state under a reader/writer lock: its
//!   logical size, its mapped extents (`logical start -> physical extent`) and its
//!   preallocations (PAs). [`DataRequest`] is what a write asks.
//! - The registry (`registry.rs`): files that made a PA, and the per-shard locality chunks.
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
//! # Invariants (checked by [`Files::check`] and [`Files::check_file`], `check.rs`)
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
//!   `stream_threshold_kib`) carve from the shard's locality PA, unless the request continues
//!   the file's last extent and the carve would not (another file carved in between): then
//!   step 3 places a window after the file's own extent. (3) Otherwise normalise: the
//!   window is the request rounded up to the next size bucket (16 KiB ... 8 MiB) of the file's
//!   size or of the request's end, whichever is larger (as ext4 uses i_size), aligned to the bucket,
//!   clamped to the hole between the neighbouring mapped extents and to the file's other PAs;
//!   reserve the window, map (claim) the request, keep the rest as a PA (`normalise.rs`).
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
//! (`Files::retrying`: once under a file lock, up to `DISCARD_RETRIES` times without one).
//! Committing pending frees belongs to the owner of the commits (a store's journal,
//! or the `_committing` calls of an owner in memory).
//!
//! Lock order: file lock -> locality shard lock -> group locks -> global lock.

mod adopt;
mod check;
mod file;
mod locality;
mod normalise;
mod pa;
mod registry;
mod unmap;

use crate::alloc::{AllocRequest, Allocator, SHARDS};
use crate::error::{Error, Result};
use crate::geometry::{Extent, DEVICE_BLOCKS_MAX};
use file::{map_insert, FileInner};
use pa::{Pa, PaSet};
use parking_lot::RwLock;
use registry::PreallocRegistry;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub use file::{DataRequest, FileAlloc};
pub use pa::PREALLOC_LIST_MAX;

/// Around a request's first block, looked up once: its mapped neighbours `(logical, extent)`
/// (the last extent starting at or before it, the first after) and `room`, the logical
/// range between the file's PAs around it.
pub(super) struct Around {
    pub(super) left: Option<(u64, Extent)>,
    pub(super) right: Option<(u64, Extent)>,
    pub(super) room: (u64, u64),
}

/// Rounds of "discard what can be locked, then try again" before no space is reported
/// while preallocations still hold blocks (see `Files::retrying`).
const DISCARD_RETRIES: u32 = 16;

/// Logical blocks a file may address: keeps every `logical + len` far from overflow.
pub(crate) const LOGICAL_BLOCKS_MAX: u64 = DEVICE_BLOCKS_MAX << 8;

/// The file layer over an allocator (see the module comment).
pub struct Files {
    alloc: Allocator,
    registry: PreallocRegistry,
    /// Blocks the core counts as reserved that a layer above holds itself, not a
    /// preallocation (the store's metadata reserve, `store/reserve.rs`).
    outside: AtomicU64,
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
            outside: AtomicU64::new(0),
        }
    }

    /// The allocator core under this layer.
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// A plain extent next to the files (metadata, say): [`Allocator::allocate`], with this
    /// layer's remedy when it finds no space while preallocations hold blocks.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        self.retrying(DISCARD_RETRIES, || self.alloc.allocate(req))
            .map_err(|e| self.exact_no_space(e))
    }

    /// [`Files::allocate`] for a caller that owns the commits: pending frees are committed
    /// first (see [`Allocator::allocate_committing`]), preallocations discarded next.
    pub fn allocate_committing(&self, req: &AllocRequest) -> Result<Extent> {
        self.retrying(DISCARD_RETRIES, || self.alloc.allocate_committing(req))
            .map_err(|e| self.exact_no_space(e))
    }

    /// Reserves blocks for a PA or locality chunk, with this layer's remedy once: the
    /// caller holds a file lock, and retries without it ([`Files::retrying`]).
    fn reserve(&self, req: &AllocRequest, commits: Commits) -> Result<Extent> {
        self.retrying(1, || self.alloc.reserve(req, commits == Commits::First))
    }

    /// Runs `op`; while it finds no space and preallocations hold blocks, discards every PA
    /// it can lock (this layer's remedy: the only one it owns) and runs it again, up to
    /// `rounds` times. Files other threads are writing cannot be discarded at that moment
    /// (their locks are only tried, never waited for: two writers discarding each other's
    /// files would deadlock), so a round that released nothing yields first, as ext4's
    /// discard retries do. Holding no file lock, callers give [`DISCARD_RETRIES`] rounds.
    #[inline]
    fn retrying(&self, rounds: u32, mut op: impl FnMut() -> Result<Extent>) -> Result<Extent> {
        // The common case, inline: the first try succeeds (or fails for another reason).
        match op() {
            Err(
                e @ Error::NoSpace {
                    reserved_blocks, ..
                },
            ) if reserved_blocks > 0 && rounds > 0 => self.retry_after_discards(rounds, op, e),
            other => other,
        }
    }

    /// The rounds of [`Files::retrying`] after its first try found no space.
    #[cold]
    #[inline(never)]
    fn retry_after_discards(
        &self,
        rounds: u32,
        mut op: impl FnMut() -> Result<Extent>,
        mut err: Error,
    ) -> Result<Extent> {
        for _ in 0..rounds {
            if self.discard_preallocations() == 0 {
                if rounds == 1 {
                    // Under a file lock: waiting here only holds up the threads whose
                    // files this one would discard.
                    return Err(err);
                }
                std::thread::yield_now();
            }
            err = match op() {
                Err(
                    e @ Error::NoSpace {
                        reserved_blocks, ..
                    },
                ) if reserved_blocks > 0 => e,
                other => return other,
            };
        }
        Err(err)
    }

    /// `err` with a no-space error's reserved figure made exact (the core's counts
    /// locality carves it has not heard of yet). Takes every locality shard's lock: call
    /// holding none of the file layer's locks.
    #[cold]
    fn exact_no_space(&self, err: Error) -> Error {
        match err {
            Error::NoSpace {
                requested,
                min_len,
                free_blocks,
                pending_blocks,
                ..
            } => Error::NoSpace {
                requested,
                min_len,
                free_blocks,
                pending_blocks,
                reserved_blocks: self.reserved_blocks(),
            },
            other => other,
        }
    }

    /// Blocks handed to callers and not freed: the core's figure
    /// ([`Allocator::allocated_blocks`]) with the locality carves it has not been told of.
    /// Exact at quiescence. Takes every locality shard's lock.
    pub fn allocated_blocks(&self) -> u64 {
        self.alloc
            .allocated_blocks()
            .wrapping_add(self.unclaimed_blocks())
    }

    /// Blocks reserved by preallocations (files' unused PA blocks, locality chunks), handed
    /// to nobody: the core's figure less the locality carves it has not been told of. Exact
    /// at quiescence (equal to [`Files::prealloc_reserved_blocks`]; `check` verifies it).
    /// Takes every locality shard's lock.
    pub fn reserved_blocks(&self) -> u64 {
        self.alloc
            .reserved_blocks()
            .saturating_sub(self.unclaimed_blocks())
            .saturating_sub(self.outside.load(Relaxed))
    }

    /// A layer above reserved `added` blocks through the core for itself and gave back or
    /// claimed `removed`: they are not preallocations ([`Files::reserved_blocks`] leaves
    /// them out).
    pub(crate) fn reserved_outside(&self, added: u64, removed: u64) {
        if added >= removed {
            self.outside.fetch_add(added - removed, Relaxed);
        } else {
            let was = self.outside.fetch_sub(removed - added, Relaxed);
            assert!(
                was >= removed - added,
                "{} blocks given back of {was} held outside",
                removed - added
            );
        }
    }

    /// Blocks carved from locality chunks that the core still counts as reserved.
    fn unclaimed_blocks(&self) -> u64 {
        self.registry
            .locality
            .iter()
            .map(|shard| shard.lock().unclaimed)
            .sum()
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
        // Every reserved block belongs to exactly one PA or locality chunk.
        debug_assert!(
            out.windows(2).all(|w| w[0].start + w[0].len <= w[1].start),
            "reserved extents overlap: a block in two preallocations"
        );
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
        self.retrying(DISCARD_RETRIES, || {
            self.allocate_data_locked(file, req, commits)
        })
        .map_err(|e| self.exact_no_space(e))
    }

    /// One attempt of `allocate_data`, under the file's lock.
    fn allocate_data_locked(
        &self,
        file: &Arc<FileAlloc>,
        req: &DataRequest,
        commits: Commits,
    ) -> Result<Extent> {
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
        // No PA covers the block, so none may cover what is mapped from here: the request
        // (carve or window) stops where the file's next PA starts (its blocks are its own).
        let room = f.pas.clamp(req.logical, 0, u64::MAX);
        debug_assert!(
            room.0 <= req.logical && req.logical < room.1,
            "no PA covers the request's first block"
        );
        let len = len.min(room.1 - req.logical);

        // 2. Small files (a writer's size hint counts): the shard's locality preallocation.
        let file_blocks = f.size_blocks.max(end).max(req.size_hint);
        let small_blocks = (self.alloc.policy().stream_threshold_kib * 1024)
            .div_ceil(u64::from(self.alloc.geometry().block_size));
        if self.alloc.policy().locality_prealloc && !req.no_prealloc && file_blocks < small_blocks {
            let slot = req
                .locality
                .map_or_else(|| self.alloc.shard_index(), |s| s as usize % SHARDS);
            // Carving claims in batches (`locality`). Continuing the file's last extent, it
            // carves only where the carve continues it.
            let after = left
                .filter(|&(s, e)| s + e.len == req.logical)
                .map(|(_, e)| e.end());
            if let Some(e) =
                self.carve_locality(file.id, len, req.lifetime, (slot, after), commits)?
            {
                map_insert(&mut f, req.logical, e, left, right);
                return Ok(e);
            }
        }

        // 3. Normalise and allocate the window.
        let around = Around { left, right, room };
        let extent = self.map_from_window(file, &mut f, req, len, &around, commits)?;
        map_insert(&mut f, req.logical, extent, left, right);
        Ok(extent)
    }

    /// Step 3 of `allocate_data`: reserves the normalised window (or, finding no space, the
    /// request alone after giving back this file's own PAs), claims the request's blocks
    /// and keeps the rest as a new PA. Returns the extent to map at `req.logical`.
    fn map_from_window(
        &self,
        file: &Arc<FileAlloc>,
        f: &mut FileInner,
        req: &DataRequest,
        len: u64,
        around: &Around,
        commits: Commits,
    ) -> Result<Extent> {
        let (ws, window, len) = self.window(file.id, f, req, len, around);
        let (ws, got) = match self.reserve(&window, commits) {
            Ok(e) => (ws, e),
            Err(Error::NoSpace { .. }) => {
                // Give back this file's own reserve (other files' were offered already),
                // then ask for the request alone.
                self.discard_file_pas(f)?;
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
        debug_assert!(ws <= req.logical && req.logical < ws + got.len);
        let mut pa = Pa::new(ws, got.start, got.len);
        let i = req.logical - ws;
        let n = len.min(got.len - i);
        pa.mark_used(i, n);
        let extent = Extent::new(got.start + i, n);
        self.alloc.claim(extent);
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
        logical_end(req.logical, req.len.max(req.run))?;
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

    /// Discards every PA of the file: unused blocks return to the free space at once.
    /// Returns the blocks released. (Call when the file is closed.)
    pub fn release_prealloc(&self, file: &FileAlloc) -> Result<u64> {
        let mut f = file.inner.write();
        let released = self.discard_file_pas(&mut f)?;
        debug_assert_eq!(f.pas.len(), 0, "a released file keeps no PA");
        Ok(released)
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
        debug_assert_eq!(f.pas.len(), 0, "every PA of the file is discarded");
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
        released + self.discard_localities()
    }

    /// Blocks held in preallocations (files' unused PA blocks and locality chunks) of the
    /// registered files.
    pub fn prealloc_reserved_blocks(&self) -> u64 {
        self.reserved_extents().iter().map(|e| e.len).sum()
    }
}

/// The end of `logical .. logical + len` in a file: refused past the largest file
/// ([`LOGICAL_BLOCKS_MAX`]) or on overflow, with the range named.
pub(crate) fn logical_end(logical: u64, len: u64) -> Result<u64> {
    crate::geometry::file_range_end(logical, len, LOGICAL_BLOCKS_MAX, "logical blocks")
}
