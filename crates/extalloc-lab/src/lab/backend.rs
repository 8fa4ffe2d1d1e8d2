//! What a lab run allocates from: the small [`LabAllocator`] trait, so the same workload runs
//! through extalloc and through outside allocators. A [`Backend`] owns one implementation
//! (`Box<dyn LabAllocator>`, one per run) and derefs to the trait; there are three:
//!
//! - [`InMemory`]: an extalloc `Allocator` under a policy with its file layer (`Files`), in
//!   memory (the default). The only one with files and preallocations, so the only one every
//!   workload runs on. It owns its commits: out of space with frees waiting, it commits and
//!   retries (`allocate_committing`); the file layer then discards preallocations.
//! - [`Outside`]: an outside allocator (`--policy tlsf`, `--policy first-fit`), which manages
//!   offsets, not files:
//!   - `tlsf`: the `offset-allocator` crate (a two-level segregated-fit allocator, O(1)).
//!   - `first-fit`: the `range-alloc` crate (a sorted list of free ranges, searched
//!     linearly; the crate picks the best fit among them).
//!
//!   Each sits behind one mutex (they are single-threaded structures). They ignore goals,
//!   file ids, lifetimes and size classes, cannot hand out less than asked (a request with
//!   `min_len < len` is retried at halved lengths down to `min_len`), and have no files, so
//!   only the workloads that allocate plain extents (`fallocate2`, `frag`) run on them. The
//!   adapter adds what a storage user needs around them: frees wait for the next commit, as
//!   extalloc's do; a free of blocks that are not allocated, or already waiting, is refused;
//!   and an allocation that finds no space while frees wait commits and retries once.
//! - [`Stored`]: with `--device PATH`, an extalloc policy through a [`Store`] on a file
//!   device: every allocation and free is journaled, commits append a record and flush, full
//!   journals checkpoint, and bitmaps load lazily (with read-ahead). Only the workloads of
//!   plain extents run there (`fallocate2`, `fallocate3`, `frag`). It reaches the store's
//!   allocator only through its read-only view.

use super::report::{self, Counters, Latency};
use anyhow::{bail, Context, Result};
use extalloc::disk::device::{Device, FileDevice};
use extalloc::store::{AllocatorView, Store};
use extalloc::{AllocRequest, Allocator, Error, Extent, Files, FreeSpace, Geometry, Policy};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// A policy as the lab's `--policy` names it.
#[derive(Debug, Clone)]
pub enum LabPolicy {
    Extalloc(Policy),
    Outside(OutsideKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideKind {
    Tlsf,
    FirstFit,
}

impl LabPolicy {
    /// `tlsf`, `first-fit`, or an extalloc preset or spec.
    pub fn parse(spec: &str) -> Result<Self> {
        match spec {
            "tlsf" => Ok(LabPolicy::Outside(OutsideKind::Tlsf)),
            "first-fit" => Ok(LabPolicy::Outside(OutsideKind::FirstFit)),
            _ => Ok(LabPolicy::Extalloc(Policy::parse(spec).with_context(
                || format!("--policy '{spec}' (outside allocators: tlsf, first-fit)"),
            )?)),
        }
    }

    pub fn name(&self) -> String {
        match self {
            LabPolicy::Extalloc(p) => p.name.clone(),
            LabPolicy::Outside(OutsideKind::Tlsf) => "tlsf".into(),
            LabPolicy::Outside(OutsideKind::FirstFit) => "first-fit".into(),
        }
    }
}

/// What the lab needs of an allocator: plain extents, commits, and the end-of-run figures.
pub trait LabAllocator: Send + Sync {
    fn geometry(&self) -> &Geometry;
    fn allocate(&self, req: &AllocRequest) -> extalloc::Result<Extent>;
    fn free(&self, extent: Extent) -> extalloc::Result<()>;
    /// Makes pending frees reusable; returns the blocks released (a store's commit also
    /// appends a journal record and flushes; it fails only on an I/O error).
    fn commit(&self) -> Result<u64>;
    fn check(&self) -> Result<()>;
    fn free_space(&self) -> FreeSpace;
    fn latency(&self) -> Latency;
    fn counters(&self, commits: u64) -> Counters;
    /// Zeroes the statistics before the timed phase (extalloc only; an outside allocator's
    /// counters are left as they are).
    fn reset_stats(&self) {}
    /// Discards preallocations before the end-of-run figures (in-memory extalloc only).
    fn discard_preallocations(&self) {}
    /// The extalloc file layer (and its allocator), for workloads that need files and
    /// preallocation; the others refuse with a message naming `workload`. The lab owns the
    /// commits in memory: workloads call the `_committing` allocations.
    fn extalloc(&self, workload: &str) -> Result<&Files>;
    /// The journaled store under a `--device` run.
    fn store(&self) -> Option<&Store> {
        None
    }
}

/// The allocator of one run.
pub struct Backend(Box<dyn LabAllocator>);

impl std::ops::Deref for Backend {
    type Target = dyn LabAllocator;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// Journal of a `--device` run: 64 MiB (or a 16th of the device if smaller).
pub(crate) fn journal_blocks(geometry: &Geometry) -> u64 {
    let bs = u64::from(geometry.block_size);
    ((64 << 20) / bs).min(geometry.blocks_count / 16).max(8)
}

impl Backend {
    pub fn new(policy: &LabPolicy, geometry: Geometry) -> Result<Self> {
        Ok(Backend(match policy {
            LabPolicy::Extalloc(p) => Box::new(InMemory(Files::new(
                Allocator::new(geometry, p.clone()).context("creating the allocator")?,
            ))),
            LabPolicy::Outside(kind) => Box::new(Outside::new(*kind, geometry)?),
        }))
    }

    /// The backend of a run: on a fresh file device at `device` (made anew, sparse) when
    /// given, else in memory.
    pub fn open(
        policy: &LabPolicy,
        geometry: Geometry,
        device: Option<&Path>,
        synthetic: Option<super::synthetic::Synthetic>,
        seed: u64,
    ) -> Result<Self> {
        if let Some(syn) = synthetic {
            return Self::synthetic(policy, geometry, syn, seed);
        }
        let Some(path) = device else {
            return Self::new(policy, geometry);
        };
        let LabPolicy::Extalloc(p) = policy else {
            bail!(
                "--device runs extalloc policies only ({} has no on-disk format)",
                policy.name()
            );
        };
        let bytes = geometry.blocks_count * u64::from(geometry.block_size);
        // A fresh sparse file each run: remove what a previous run left.
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
        let dev: Arc<dyn Device> = Arc::new(
            FileDevice::create(path, bytes)
                .with_context(|| format!("creating the device file {}", path.display()))?,
        );
        let store = Store::create(dev, &geometry, journal_blocks(&geometry), p.clone())
            .with_context(|| format!("making extalloc on {}", path.display()))?;
        // The lab's workloads free and reallocate within one transaction's window, as a
        // file system does: out of space with frees waiting, the store commits and retries.
        store.set_forced_commits(true);
        Ok(Backend(Box::new(Stored(store))))
    }
}

impl Backend {
    /// A journaled store on a synthetic device filled as `syn` says, opened as a real one.
    fn synthetic(
        policy: &LabPolicy,
        geometry: Geometry,
        syn: super::synthetic::Synthetic,
        seed: u64,
    ) -> Result<Self> {
        let LabPolicy::Extalloc(p) = policy else {
            bail!(
                "--synthetic runs extalloc policies only ({} has no on-disk format)",
                policy.name()
            );
        };
        let dev = syn.device(geometry, journal_blocks(&geometry), seed)?;
        let (store, _) = Store::open(dev, p.clone()).context("opening the synthetic device")?;
        store.set_forced_commits(true);
        Ok(Backend(Box::new(Stored(store))))
    }
}

/// An extalloc `Allocator` with its file layer, in memory.
pub struct InMemory(Files);

impl InMemory {
    fn core(&self) -> &Allocator {
        self.0.allocator()
    }
}

impl LabAllocator for InMemory {
    fn geometry(&self) -> &Geometry {
        self.core().geometry()
    }

    fn allocate(&self, req: &AllocRequest) -> extalloc::Result<Extent> {
        self.0.allocate_committing(req)
    }

    fn free(&self, extent: Extent) -> extalloc::Result<()> {
        self.core().free(extent)
    }

    fn commit(&self) -> Result<u64> {
        Ok(self.core().commit())
    }

    fn check(&self) -> Result<()> {
        self.0.check().map_err(Into::into)
    }

    fn free_space(&self) -> FreeSpace {
        self.core().free_space()
    }

    fn latency(&self) -> Latency {
        report::latency_of(&self.core().stats_handle().latency_histogram())
    }

    fn counters(&self, commits: u64) -> Counters {
        report::counters(&self.core().stats(), commits)
    }

    fn reset_stats(&self) {
        self.core().stats_handle().reset();
    }

    fn discard_preallocations(&self) {
        self.0.discard_preallocations();
    }

    fn extalloc(&self, _workload: &str) -> Result<&Files> {
        Ok(&self.0)
    }
}

/// An extalloc policy through a journaled store on a file device.
pub struct Stored(Store);

impl Stored {
    /// The store's read-only view of its allocator (stats, free space, check).
    fn view(&self) -> AllocatorView<'_> {
        self.0.allocator()
    }
}

impl LabAllocator for Stored {
    fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }

    fn allocate(&self, req: &AllocRequest) -> extalloc::Result<Extent> {
        self.0.allocate(req)
    }

    fn free(&self, extent: Extent) -> extalloc::Result<()> {
        self.0.free(extent)
    }

    fn commit(&self) -> Result<u64> {
        let before = self.view().pending_free_blocks();
        self.0.commit(&[]).context("journal commit")?;
        Ok(before.saturating_sub(self.view().pending_free_blocks()))
    }

    fn check(&self) -> Result<()> {
        self.view().check().map_err(Into::into)
    }

    fn free_space(&self) -> FreeSpace {
        self.view().free_space()
    }

    fn latency(&self) -> Latency {
        report::latency_of(&self.view().latency_histogram())
    }

    fn counters(&self, commits: u64) -> Counters {
        report::counters(&self.view().stats(), commits)
    }

    fn reset_stats(&self) {
        self.view().reset_stats();
    }

    fn extalloc(&self, workload: &str) -> Result<&Files> {
        bail!(
            "{workload} needs files and preallocation, which the journaled store does not \
             record: --device runs fallocate2, fallocate3 and frag"
        )
    }

    fn store(&self) -> Option<&Store> {
        Some(&self.0)
    }
}

enum Structure {
    Tlsf(Box<offset_allocator::Allocator>),
    FirstFit(range_alloc::RangeAllocator<u64>),
}

/// One live allocation of the outside allocator.
#[derive(Clone, Copy)]
struct Live {
    len: u64,
    /// offset-allocator's handle (its free needs it).
    handle: Option<offset_allocator::Allocation>,
    /// Freed, waiting for the commit.
    pending: bool,
}

struct Inner {
    structure: Structure,
    /// Live allocations by start: what a free must match, and the used space.
    live: BTreeMap<u64, Live>,
    pending: Vec<u64>,
    pending_blocks: u64,
}

/// An outside allocator behind a mutex, with deferred frees and the lab's measurements.
pub struct Outside {
    kind: OutsideKind,
    geometry: Geometry,
    inner: Mutex<Inner>,
    latency: Box<[Mutex<Histogram<u64>>]>,
    lock_waits: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    forced_commits: AtomicU64,
}

/// Latency shards (threads pick one by id, so recording seldom contends).
const LATENCY_SHARDS: usize = 16;

impl Outside {
    pub fn new(kind: OutsideKind, geometry: Geometry) -> Result<Self> {
        let blocks = u32::try_from(geometry.blocks_count)
            .ok()
            .filter(|&b| b < u32::MAX - 1)
            .with_context(|| {
                format!(
                    "{} blocks: the outside allocators count in 32 bits",
                    geometry.blocks_count
                )
            })?;
        let structure = match kind {
            // As many live allocations as blocks: a 4 KiB-append workload needs one per block.
            OutsideKind::Tlsf => Structure::Tlsf(Box::new(
                offset_allocator::Allocator::with_max_allocs(blocks, blocks.min(u32::MAX - 3)),
            )),
            OutsideKind::FirstFit => {
                Structure::FirstFit(range_alloc::RangeAllocator::new(0..u64::from(blocks)))
            }
        };
        Ok(Outside {
            kind,
            geometry,
            inner: Mutex::new(Inner {
                structure,
                live: BTreeMap::new(),
                pending: Vec::new(),
                pending_blocks: 0,
            }),
            latency: (0..LATENCY_SHARDS)
                .map(|_| {
                    Mutex::new(Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"))
                })
                .collect(),
            lock_waits: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            forced_commits: AtomicU64::new(0),
        })
    }

    pub fn name(&self) -> &'static str {
        match self.kind {
            OutsideKind::Tlsf => "tlsf",
            OutsideKind::FirstFit => "first-fit",
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        if let Some(g) = self.inner.try_lock() {
            return g;
        }
        self.lock_waits.fetch_add(1, Relaxed);
        self.inner.lock()
    }

    fn record(&self, started: Instant) {
        let ns = started.elapsed().as_nanos().max(1) as u64;
        let shard = thread_shard() % LATENCY_SHARDS;
        let _ = self.latency[shard].lock().record(ns);
    }

    fn latency_histogram(&self) -> Histogram<u64> {
        let mut all = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
        for h in self.latency.iter() {
            all.add(&*h.lock()).expect("same bounds");
        }
        all
    }
}

impl LabAllocator for Outside {
    fn allocate(&self, req: &AllocRequest) -> extalloc::Result<Extent> {
        if req.len == 0 {
            return Err(Error::ZeroLength);
        }
        let started = Instant::now();
        let mut inner = self.lock();
        let mut got = inner.take(req.len, req.min_len.max(1));
        if got.is_none() && inner.pending_blocks > 0 {
            self.forced_commits.fetch_add(1, Relaxed);
            inner.commit();
            got = inner.take(req.len, req.min_len.max(1));
        }
        let Some(extent) = got else {
            return Err(Error::NoSpace {
                pending_blocks: inner.pending_blocks,
                reserved_blocks: 0,
                requested: req.len,
                min_len: req.min_len,
                free_blocks: inner.free_blocks(self.geometry.blocks_count),
            });
        };
        drop(inner);
        self.record(started);
        self.allocs.fetch_add(1, Relaxed);
        Ok(extent)
    }

    /// Frees `extent`, which must be exactly a run of live allocations (the workloads free
    /// merged extents), none of them already waiting. Nothing changes when it fails.
    fn free(&self, extent: Extent) -> extalloc::Result<()> {
        self.geometry.validate(extent)?;
        let mut inner = self.lock();
        let mut at = extent.start;
        let mut starts = Vec::new();
        for (&s, l) in inner.live.range(extent.start..extent.end()) {
            if s != at {
                break;
            }
            if l.pending {
                return Err(Error::DoubleFree {
                    start: s,
                    len: l.len,
                });
            }
            starts.push(s);
            at = s + l.len;
        }
        if at != extent.end() {
            return Err(Error::NotAllocated {
                start: at,
                len: extent.end().saturating_sub(at),
            });
        }
        for s in starts {
            inner.live.get_mut(&s).expect("just seen").pending = true;
            inner.pending.push(s);
        }
        inner.pending_blocks += extent.len;
        drop(inner);
        self.frees.fetch_add(1, Relaxed);
        Ok(())
    }

    fn commit(&self) -> Result<u64> {
        Ok(self.lock().commit())
    }

    fn check(&self) -> Result<()> {
        let inner = self.lock();
        let mut end = 0;
        for (&s, l) in &inner.live {
            anyhow::ensure!(s >= end, "{}: allocations overlap at {s}", self.name());
            end = s + l.len;
        }
        anyhow::ensure!(
            end <= self.geometry.blocks_count,
            "allocation past the device"
        );
        let pending: u64 = inner.pending.iter().map(|s| inner.live[s].len).sum();
        anyhow::ensure!(pending == inner.pending_blocks, "pending count disagrees");
        Ok(())
    }

    /// The free space: the complement of the live allocations (pending ones count as used).
    fn free_space(&self) -> FreeSpace {
        let inner = self.lock();
        FreeSpace::from_used(&self.geometry, inner.live.iter().map(|(&s, l)| (s, l.len)))
            .expect("live allocations are sorted and inside the device")
    }

    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn latency(&self) -> Latency {
        report::latency_of(&self.latency_histogram())
    }

    fn counters(&self, commits: u64) -> Counters {
        Counters {
            groups_considered: 0,
            bitmaps_loaded: 0,
            prefetch_hits: 0,
            loaded_bitmaps: 0,
            groups_scanned: 0,
            trylock_skips: 0,
            lock_waits: self.lock_waits.load(Relaxed),
            allocs: self.allocs.load(Relaxed),
            frees: self.frees.load(Relaxed),
            stream_goal_hits: 0,
            forced_commits: self.forced_commits.load(Relaxed),
            commits,
            pass_hits: Default::default(),
        }
    }

    fn extalloc(&self, workload: &str) -> Result<&Files> {
        bail!(
            "{workload} needs files and preallocation, which {} does not have; outside \
             allocators run fallocate2 and frag",
            self.name()
        )
    }
}

impl Inner {
    /// Allocates `len` blocks, or the longest of `len / 2^k >= min_len` that fits.
    fn take(&mut self, len: u64, min_len: u64) -> Option<Extent> {
        let mut want = len;
        loop {
            let found = match &mut self.structure {
                Structure::Tlsf(a) => a
                    .allocate(want as u32)
                    .map(|h| (u64::from(h.offset), Some(h))),
                Structure::FirstFit(a) => a.allocate_range(want).ok().map(|r| (r.start, None)),
            };
            if let Some((start, handle)) = found {
                self.live.insert(
                    start,
                    Live {
                        len: want,
                        handle,
                        pending: false,
                    },
                );
                return Some(Extent::new(start, want));
            }
            if want <= min_len {
                return None;
            }
            want = (want / 2).max(min_len);
        }
    }

    fn commit(&mut self) -> u64 {
        let mut released = 0;
        for s in std::mem::take(&mut self.pending) {
            let l = self.live.remove(&s).expect("pending entries are live");
            match (&mut self.structure, l.handle) {
                (Structure::Tlsf(a), Some(h)) => a.free(h),
                (Structure::FirstFit(a), None) => a.free_range(s..s + l.len),
                _ => unreachable!("a handle comes with its structure"),
            }
            released += l.len;
        }
        self.pending_blocks = 0;
        released
    }

    fn free_blocks(&self, blocks_count: u64) -> u64 {
        blocks_count - self.live.values().map(|l| l.len).sum::<u64>()
    }
}

/// A small per-thread number, for picking latency shards.
fn thread_shard() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ID: usize = NEXT.fetch_add(1, Relaxed);
    }
    ID.with(|id| *id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicU8;

    fn policies() -> [LabPolicy; 3] {
        [
            LabPolicy::parse("tlsf").unwrap(),
            LabPolicy::parse("first-fit").unwrap(),
            LabPolicy::parse("extalloc").unwrap(),
        ]
    }

    /// Threads allocate and free while a committer commits; a shadow table (one atomic per
    /// block) catches a block handed out twice, as the library's stress test does.
    #[test]
    fn no_block_is_handed_out_twice() {
        let geometry = Geometry::new(4096, 1024, 16 * 1024 - 37).unwrap();
        for policy in policies() {
            let b = Backend::new(&policy, geometry).unwrap();
            let shadow: Vec<AtomicU8> = (0..geometry.blocks_count)
                .map(|_| AtomicU8::new(0))
                .collect();
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(Relaxed) {
                        b.commit().unwrap();
                        std::thread::yield_now();
                    }
                });
                let workers: Vec<_> = (0..3u64)
                    .map(|t| {
                        let (b, shadow) = (&b, &shadow);
                        s.spawn(move || {
                            use rand::{Rng, SeedableRng};
                            let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                            let mut held = Vec::new();
                            for _ in 0..5000 {
                                if held.len() < 60 && rng.gen_bool(0.55) {
                                    let len = rng.gen_range(1..=48);
                                    match b.allocate(&AllocRequest::new(t, len)) {
                                        Ok(e) => {
                                            for x in e.start..e.end() {
                                                let was = shadow[x as usize].swap(1, Relaxed);
                                                assert_eq!(was, 0, "block {x} handed out twice");
                                            }
                                            held.push(e);
                                        }
                                        Err(Error::NoSpace { .. }) => {}
                                        Err(e) => panic!("{e}"),
                                    }
                                } else if !held.is_empty() {
                                    let e: Extent = held.swap_remove(rng.gen_range(0..held.len()));
                                    for x in e.start..e.end() {
                                        shadow[x as usize].store(0, Relaxed);
                                    }
                                    b.free(e).unwrap();
                                }
                            }
                            for e in held {
                                for x in e.start..e.end() {
                                    shadow[x as usize].store(0, Relaxed);
                                }
                                b.free(e).unwrap();
                            }
                        })
                    })
                    .collect();
                let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
                stop.store(true, Relaxed);
                for r in results {
                    if let Err(p) = r {
                        std::panic::resume_unwind(p);
                    }
                }
            });
            b.commit().unwrap();
            b.check().unwrap();
            let fs = b.free_space();
            assert_eq!(fs.free_blocks, geometry.blocks_count, "{}", policy.name());
            assert_eq!(fs.free_extents, 1);
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64),
        /// Free the i-th held extent (modulo), or a bad extent.
        Free(usize),
        FreeTwice(usize),
        FreeUnallocated(u64, u64),
        Commit,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (1u64..300).prop_map(Op::Alloc),
            3 => any::<usize>().prop_map(Op::Free),
            1 => any::<usize>().prop_map(Op::FreeTwice),
            1 => (0u64..4096, 1u64..64).prop_map(|(s, l)| Op::FreeUnallocated(s, l)),
            2 => Just(Op::Commit),
        ]
    }

    proptest! {
        /// Against a reference model (the set of held blocks and of pending ones): no overlap,
        /// refused frees change nothing, commits return exactly the pending blocks, and the
        /// free-space figures agree with the model.
        #[test]
        fn adapters_follow_the_model(ops in prop::collection::vec(op(), 1..150)) {
            let geometry = Geometry::new(4096, 512, 4096).unwrap();
            for policy in policies() {
                let b = Backend::new(&policy, geometry).unwrap();
                let mut held: Vec<Extent> = Vec::new();
                let mut used: BTreeSet<u64> = BTreeSet::new();
                let mut pending: u64 = 0;
                let mut forced = 0;
                for op in &ops {
                    match *op {
                        Op::Alloc(len) => match b.allocate(&AllocRequest::new(1, len)).inspect(|_| {
                            // A full device commits the pending frees first.
                            if b.counters(0).forced_commits > forced {
                                forced = b.counters(0).forced_commits;
                                used = held.iter().flat_map(|e| e.start..e.end()).collect();
                                pending = 0;
                            }
                        }) {
                            Ok(e) => {
                                prop_assert!(e.len >= 1 && e.len <= len);
                                for x in e.start..e.end() {
                                    prop_assert!(used.insert(x), "{} reused {}", policy.name(), x);
                                }
                                held.push(e);
                            }
                            Err(Error::NoSpace { .. }) => {
                                prop_assert_eq!(pending, 0, "no space while frees were pending");
                            }
                            Err(e) => prop_assert!(false, "{e}"),
                        },
                        Op::Free(i) | Op::FreeTwice(i) if !held.is_empty() => {
                            let e = held.swap_remove(i % held.len());
                            b.free(e).unwrap();
                            pending += e.len;
                            if matches!(op, Op::FreeTwice(_)) {
                                let refused = matches!(b.free(e), Err(Error::DoubleFree { .. }));
                                prop_assert!(refused);
                            }
                        }
                        Op::FreeUnallocated(s, l) => {
                            // Blocks not all held (free, or pending): refused. (A range of
                            // held blocks would be a legitimate free; the model skips it.)
                            let e = Extent::new(s, l);
                            let held_blocks = held
                                .iter()
                                .map(|h| h.end().min(e.end()).saturating_sub(h.start.max(s)))
                                .sum::<u64>();
                            if held_blocks < l {
                                let before = b.free_space();
                                prop_assert!(b.free(e).is_err());
                                prop_assert_eq!(b.free_space(), before);
                            }
                        }
                        Op::Commit => {
                            let released = b.commit().unwrap();
                            prop_assert_eq!(released, pending);
                            let live: BTreeSet<u64> =
                                held.iter().flat_map(|e| e.start..e.end()).collect();
                            used = live;
                            pending = 0;
                        }
                        _ => {}
                    }
                    b.check().unwrap();
                }
                let fs = b.free_space();
                prop_assert_eq!(fs.free_blocks, geometry.blocks_count - used.len() as u64);
            }
        }
    }

    #[test]
    fn free_space_from_used_extents_matches_the_allocator() {
        let geometry = Geometry::new(4096, 256, 2000).unwrap();
        let a = Allocator::new(geometry, Policy::default()).unwrap();
        let mut kept = Vec::new();
        for i in 0..60u64 {
            let e = a.allocate(&AllocRequest::new(i, 1 + i % 13)).unwrap();
            if i % 3 == 0 {
                a.free(e).unwrap();
            } else {
                kept.push(e);
            }
        }
        a.commit();
        kept.sort_by_key(|e| e.start);
        let from_runs =
            FreeSpace::from_used(&geometry, kept.iter().map(|e| (e.start, e.len))).unwrap();
        let mut direct = a.free_space();
        for g in &mut direct.groups {
            g.class_tag = 0;
        }
        assert_eq!(from_runs, direct);
    }
}
