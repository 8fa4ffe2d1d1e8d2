//! Writeback contexts: a bounded pool of worker threads, each owning a contiguous range of
//! the device's groups, and the routing of a dirty file to the context that owns the group
//! its next allocation is predicted to land in.
//!
//! Data structures: [`Shared`] (the volume, the cached files by id, the dirty byte count,
//! the contexts and the first writeback error) and one [`Context`] per worker: a queue of
//! file ids under a mutex with a condition variable, and its counters.
//!
//! Invariant: a file id is in at most one queue, and only while its `queued` flag is set;
//! the worker that pops it clears the flag under the file's lock before writing back, so
//! data cached after that is queued again. A scan queues files oldest data first
//! (`dirty_oldest_first`), so files written one after another are placed in that order. With `Affinity::None` every worker serves the
//! one queue of context 0.
//!
//! Lock order: a file's cache mutex -> (the volume: gate -> its file mutex) -> a queue
//! mutex; `files` and `cleaned` are leaves, never held while waiting for another lock
//! (`Shared::sweep_clean` only tries an entry's lock while holding `files`).
//!
//! An entry stays in `files` while its file is open, holds cached data or is queued; a
//! closed file with nothing cached leaves it (`Shared::forget_clean`, `sweep_clean`).

use super::cache::DirtyFile;
use super::options::{Affinity, WritebackOptions, WRITE_PIECE_BLOCKS};
use crate::alloc::thread_lock_waits;
use crate::error::{Error, Result};
use crate::volume::Volume;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Blocks one writeback trip takes from a file at most (its cache lock is held across the
/// trip): 32 MiB of 4 KiB blocks.
pub(super) const TRIP_BLOCKS: u64 = 8192;
/// How far a trip looks along its dirty run (1 GiB of 4 KiB blocks), to ask for windows
/// that cover the run: more than the largest extent (a group).
const RUN_SCAN_MAX: u64 = 1 << 18;
/// Dirty runs one trip writes at most (each is a writeback call on the volume).
const TRIP_RUNS: usize = 1024;

/// A file's cache, shared between callers and contexts.
pub(super) type Entry = Arc<Mutex<DirtyFile>>;

/// One writeback context: its queue and counters.
#[derive(Default)]
pub(super) struct Context {
    queue: Mutex<VecDeque<u64>>,
    wake: Condvar,
    pub(super) runs: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) allocations: AtomicU64,
    pub(super) lock_waits: AtomicU64,
}

/// State shared by the callers and the workers.
pub(super) struct Shared {
    pub(super) vol: Volume,
    pub(super) opts: WritebackOptions,
    pub(super) block_size: u64,
    pub(super) files: Mutex<HashMap<u64, Entry>>,
    pub(super) dirty_bytes: AtomicU64,
    pub(super) dirty_peak_bytes: AtomicU64,
    /// Numbers writes, so a sync knows which dirty data is older than itself.
    pub(super) seq: AtomicU64,
    pub(super) contexts: Vec<Context>,
    pub(super) shutdown: AtomicBool,
    /// Signalled whenever cached data is written back or dropped.
    cleaned: (Mutex<()>, Condvar),
    /// The first writeback failure since a caller last heard of one.
    error: Mutex<Option<Error>>,
    last_kick_ns: AtomicU64,
    last_age_scan_ns: AtomicU64,
    started: Instant,
    pub(super) switches: AtomicU64,
    /// The trips callers run themselves (`fsync`, `truncate`, `fallocate`).
    pub(super) caller: Context,
    pub(super) throttled: AtomicU64,
    pub(super) throttled_ns: AtomicU64,
    /// Checkpoints run because a space check failed while files held cached data's
    /// reservations (`Buffered::after_writeback`).
    pub(super) cache_remedies: AtomicU64,
}

impl Context {
    /// Wakes every worker waiting on this context's queue (shutdown).
    pub(super) fn notify_all(&self) {
        let _q = self.queue.lock();
        self.wake.notify_all();
    }
}

impl Shared {
    pub(super) fn new(vol: Volume, opts: WritebackOptions, contexts: usize) -> Shared {
        Shared {
            block_size: vol.block_size(),
            vol,
            opts,
            files: Mutex::new(HashMap::new()),
            dirty_bytes: AtomicU64::new(0),
            dirty_peak_bytes: AtomicU64::new(0),
            seq: AtomicU64::new(1),
            contexts: (0..contexts).map(|_| Context::default()).collect(),
            shutdown: AtomicBool::new(false),
            cleaned: (Mutex::new(()), Condvar::new()),
            error: Mutex::new(None),
            last_kick_ns: AtomicU64::new(0),
            last_age_scan_ns: AtomicU64::new(0),
            started: Instant::now(),
            switches: AtomicU64::new(0),
            caller: Context::default(),
            throttled: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            cache_remedies: AtomicU64::new(0),
        }
    }

    /// File `id`'s cache entry, made (from the volume's size) on first use.
    pub(super) fn entry(&self, id: u64) -> Result<Entry> {
        if let Some(e) = self.files.lock().get(&id) {
            return Ok(e.clone());
        }
        let size = self.vol.size(id)?;
        Ok(self
            .files
            .lock()
            .entry(id)
            .or_insert_with(|| Arc::new(Mutex::new(DirtyFile::new(size))))
            .clone())
    }

    /// The entry of file `id` if it has one.
    pub(super) fn existing(&self, id: u64) -> Option<Entry> {
        self.files.lock().get(&id).cloned()
    }

    /// Drops file `id`'s entry (`entry`, its state `d` locked) once it holds nothing a
    /// later call needs: closed, nothing cached, not queued. The next call that names the
    /// file makes it again from the volume's size, which a clean file's cached size is.
    /// Kept while another thread holds the entry: the map's reference and the caller's are
    /// the only ones, counted under the map's lock, where every other reference is taken.
    /// Without this the map kept an entry for every file ever closed (140 bytes a file,
    /// and a copy of the whole map at every sync and age scan).
    pub(super) fn forget_clean(&self, id: u64, entry: &Entry, d: &DirtyFile) {
        let clean = d.closed && d.pages.is_empty() && d.dirty_since.is_none();
        if !clean || d.queued || d.unlinked {
            return;
        }
        let mut files = self.files.lock();
        let ours = files.get(&id).is_some_and(|e| Arc::ptr_eq(e, entry));
        if ours && Arc::strong_count(entry) == 2 {
            files.remove(&id);
        }
        // Kept, or gone with nothing cached.
        debug_assert!(files.contains_key(&id) || d.pages.is_empty());
    }

    /// Drops every entry [`Shared::forget_clean`] would, that no thread holds: those a
    /// close or a trip kept while a scan held a copy of the map. Takes no entry's lock
    /// while holding the map's (`try_lock`: an entry someone holds is busy, so kept).
    pub(super) fn sweep_clean(&self) {
        let mut files = self.files.lock();
        let before = files.len();
        files.retain(|_, e| {
            if Arc::strong_count(e) != 1 {
                return true;
            }
            let Some(d) = e.try_lock() else {
                return true;
            };
            let clean = d.closed && d.pages.is_empty() && d.dirty_since.is_none();
            !clean || d.queued || d.unlinked
        });
        debug_assert!(files.len() <= before);
    }

    fn entries(&self) -> Vec<(u64, Entry)> {
        self.files
            .lock()
            .iter()
            .map(|(&id, e)| (id, e.clone()))
            .collect()
    }

    /// The files holding dirty data, the oldest data first (by the number of the write
    /// that first dirtied them since their last writeback; ties by id). Writeback queues
    /// them in this order, as the kernel's takes inodes in the order they were dirtied, so
    /// that files written one after another (a checkout, an archive extracted, a tree
    /// copied) are allocated, and land on the device, in that order: a directory's files
    /// are read back in one sweep. (A hash map's order scattered them within their
    /// locality group.)
    fn dirty_oldest_first(&self) -> Vec<(u64, Entry)> {
        let mut dirty: Vec<(u64, u64, Entry)> = self
            .entries()
            .into_iter()
            .filter_map(|(id, e)| {
                let since = e.lock().dirty_since.map(|(s, _)| s)?;
                Some((since, id, e))
            })
            .collect();
        dirty.sort_unstable_by_key(|&(since, id, _)| (since, id));
        debug_assert!(dirty
            .windows(2)
            .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        dirty.into_iter().map(|(_, id, e)| (id, e)).collect()
    }

    /// The queue worker `i` serves.
    fn queue_of(&self, i: usize) -> usize {
        if self.opts.affinity == Affinity::None {
            0
        } else {
            i
        }
    }

    /// The context that owns group `g`: contexts own contiguous ranges of groups.
    fn owner(&self, g: u64) -> usize {
        let groups = self.vol.store().geometry().groups_count();
        debug_assert!(g < groups, "group {g} of {groups}");
        let c = (u128::from(g) * self.contexts.len() as u128 / u128::from(groups)) as usize;
        debug_assert!(c < self.contexts.len(), "every group has an owner");
        c
    }

    /// The context file `id`'s dirty data goes to (under its cache lock, `d`).
    fn route(&self, id: u64, d: &DirtyFile) -> Result<usize> {
        let n = self.contexts.len();
        Ok(match self.opts.affinity {
            Affinity::None => 0,
            Affinity::File => ((id ^ (id >> 32)) % n as u64) as usize,
            Affinity::Group => match d.first_run(TRIP_BLOCKS) {
                Some((start, len)) => {
                    // A placed file's first run is placed by the size it will have.
                    let want = len.max(d.size.div_ceil(self.block_size));
                    self.owner(self.vol.predicted_group(id, start, want)?)
                }
                None => d.last_context.unwrap_or(0),
            },
        })
    }

    /// Queues file `id` (cache lock held: `d`) to its context, unless queued already.
    pub(super) fn queue(&self, id: u64, d: &mut DirtyFile) -> Result<()> {
        if d.queued || d.pages.is_empty() {
            return Ok(());
        }
        let c = self.route(id, d)?;
        self.push(id, d, c);
        debug_assert!(d.queued, "file {id} queued");
        Ok(())
    }

    fn push(&self, id: u64, d: &mut DirtyFile, c: usize) {
        debug_assert!(c < self.contexts.len(), "context {c}");
        debug_assert!(!d.pages.is_empty(), "a queued file holds cached data");
        if d.last_context.is_some_and(|last| last != c) {
            self.switches.fetch_add(1, Relaxed);
        }
        d.last_context = Some(c);
        d.queued = true;
        let ctx = &self.contexts[c];
        ctx.queue.lock().push_back(id);
        ctx.wake.notify_one();
    }

    /// Queues every dirty file dirtied before `upto` (see [`Shared::dirty_upto`]), oldest
    /// first; `u64::MAX`: every dirty file.
    pub(super) fn queue_dirty(&self, upto: u64) -> Result<()> {
        for (id, e) in self.dirty_oldest_first() {
            let mut d = e.lock();
            if d.dirty_since.is_some_and(|(s, _)| s < upto) {
                self.queue(id, &mut d)?;
            }
        }
        Ok(())
    }

    /// True while some file holds data dirtied before `upto` (the sequence's next number
    /// when the caller read it: a file dirtied after that read gets `upto` or later, and
    /// is not waited for; counting `upto` in once failed "cached data outlived a sync"
    /// when a writer dirtied a file between a sync's last look and the caller's).
    pub(super) fn dirty_upto(&self, upto: u64) -> bool {
        self.entries()
            .iter()
            .any(|(_, e)| e.lock().dirty_since.is_some_and(|(s, _)| s < upto))
    }

    /// Background writeback: above the background threshold, queue every dirty file (at
    /// most once a millisecond).
    pub(super) fn kick_if_over_background(&self) -> Result<()> {
        // Background writeback starts before writers are throttled (`options.rs` checks it).
        debug_assert!(self.opts.background_bytes <= self.opts.dirty_limit_bytes);
        if self.dirty_bytes.load(Relaxed) <= self.opts.background_bytes {
            return Ok(());
        }
        let now = self.started.elapsed().as_nanos() as u64;
        let last = self.last_kick_ns.load(Relaxed);
        if now.saturating_sub(last) < 1_000_000
            || self
                .last_kick_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return Ok(());
        }
        self.queue_dirty(u64::MAX)
    }

    /// Age: queue files dirty for longer than `expire` (by one worker, at most every
    /// quarter of it).
    fn age_scan(&self) -> Result<()> {
        let expire = self.opts.expire;
        debug_assert!(
            !expire.is_zero(),
            "a zero expire age would queue every write at once"
        );
        let now = self.started.elapsed().as_nanos() as u64;
        let last = self.last_age_scan_ns.load(Relaxed);
        let due = now.saturating_sub(last) >= (expire.as_nanos() / 4) as u64;
        if !due
            || self
                .last_age_scan_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return Ok(());
        }
        for (id, e) in self.dirty_oldest_first() {
            let mut d = e.lock();
            if d.dirty_since.is_some_and(|(_, t)| t.elapsed() >= expire) {
                self.queue(id, &mut d)?;
            }
        }
        self.sweep_clean();
        Ok(())
    }

    /// Waits until data is written back or dropped, or `timeout`.
    pub(super) fn wait_cleaned(&self, timeout: Duration) {
        let mut g = self.cleaned.0.lock();
        self.cleaned.1.wait_for(&mut g, timeout);
    }

    fn signal_cleaned(&self) {
        let _g = self.cleaned.0.lock();
        self.cleaned.1.notify_all();
    }

    /// Hands the first writeback failure since the last call, if any.
    pub(super) fn take_error(&self) -> Result<()> {
        match self.error.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Blocks a writer while the cache is at its hard limit (writeback runs meanwhile);
    /// a writeback failure ends the wait with its error.
    pub(super) fn throttle(&self) -> Result<()> {
        // A zero limit would block every writer for ever (`options.rs` refuses it).
        debug_assert!(self.opts.dirty_limit_bytes > 0);
        if self.dirty_bytes.load(Relaxed) < self.opts.dirty_limit_bytes {
            return Ok(());
        }
        let t = Instant::now();
        self.throttled.fetch_add(1, Relaxed);
        while self.dirty_bytes.load(Relaxed) >= self.opts.dirty_limit_bytes {
            self.queue_dirty(u64::MAX)?;
            self.wait_cleaned(Duration::from_millis(10));
            self.take_error()?;
        }
        self.throttled_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        Ok(())
    }

    /// Counts `blocks` more cached blocks.
    pub(super) fn add_dirty(&self, blocks: u64) {
        let bytes = blocks * self.block_size;
        let before = self.dirty_bytes.fetch_add(bytes, Relaxed);
        let now = before.checked_add(bytes);
        debug_assert!(now.is_some(), "cached bytes {before} + {bytes} overflow");
        self.dirty_peak_bytes
            .fetch_max(now.unwrap_or(u64::MAX), Relaxed);
    }

    /// Drops cached blocks `start .. start + len` of a file: their count and reservations.
    pub(super) fn drop_cached(&self, d: &mut DirtyFile, start: u64, len: u64) {
        let held = d.reserved > 0;
        let (blocks, reserved) = d.drop_range(start, len);
        debug_assert!(
            reserved <= blocks,
            "a reservation is held by a cached block"
        );
        debug_assert!(
            len == 0 || d.run_len(start, 1) == 0,
            "block {start} dropped"
        );
        // The file's last reservation: it is no longer counted as cached (written back, it
        // is a changed file of the volume, or its data is gone).
        let last = held && d.reserved == 0;
        self.vol.release_delalloc(reserved, u64::from(last));
        let before = self
            .dirty_bytes
            .fetch_sub(blocks * self.block_size, Relaxed);
        // Paired with `add_dirty`: every block dropped was counted when cached.
        debug_assert!(
            before >= blocks * self.block_size,
            "dropped {blocks} blocks, {before} bytes counted"
        );
        if blocks > 0 {
            self.signal_cleaned();
        }
    }

    /// One writeback trip on file `id` (cache lock held): its dirty runs in logical order,
    /// at most `TRIP_BLOCKS` blocks and `TRIP_RUNS` runs, each allocated whole and written.
    /// `by`: the context doing it, which hands the file over (returns `Ok(false)`) if the
    /// first run's allocation is predicted in another context's groups; `None` for a
    /// caller (fsync). Returns `Ok(false)` when the file is clean.
    pub(super) fn trip(&self, id: u64, d: &mut DirtyFile, by: Option<usize>) -> Result<bool> {
        let runs = d.runs(TRIP_BLOCKS, TRIP_RUNS);
        if runs.is_empty() {
            return Ok(false);
        }
        if let Some(me) = by {
            let c = self.route(id, d)?;
            if self.opts.affinity == Affinity::Group && c != me {
                self.push(id, d, c);
                return Ok(false);
            }
        }
        for &(start, len) in &runs {
            self.write_run(id, d, (start, len), by)?;
        }
        // Each run written is gone from the cache (a writer cannot add meanwhile: the
        // file's cache lock is held).
        debug_assert!(
            runs.iter().all(|&(s, _)| d.run_len(s, 1) == 0),
            "file {id}'s trip"
        );
        if d.pages.is_empty() && d.closed {
            // A closed file written back in full keeps no preallocation.
            self.vol.close_file(id)?;
        }
        Ok(true)
    }

    /// Writes back cached blocks `start .. start + len` of file `id` (a run, or the head
    /// of one), as the cache holds them (no copy into one buffer: a vectored write), and
    /// drops them from the cache.
    fn write_run(
        &self,
        id: u64,
        d: &mut DirtyFile,
        (start, len): (u64, u64),
        by: Option<usize>,
    ) -> Result<()> {
        debug_assert!(len > 0, "a run of no blocks");
        let blocks = d.blocks(start, len);
        let run = d.run_len(start, RUN_SCAN_MAX);
        debug_assert!(run >= len, "the run {start}+{len} is cached whole");
        let waits = thread_lock_waits();
        let wb = self
            .vol
            .write_back(id, start, &blocks, d.size, d.closed, run)
            .map_err(|e| Error::Writeback {
                id,
                source: Box::new(e),
            })?;
        drop(blocks);
        let waited = thread_lock_waits() - waits;
        let ctx = by.map_or(&self.caller, |c| &self.contexts[c]);
        ctx.lock_waits.fetch_add(waited, Relaxed);
        ctx.runs.fetch_add(1, Relaxed);
        ctx.bytes.fetch_add(len * self.block_size, Relaxed);
        ctx.allocations.fetch_add(wb.allocations, Relaxed);
        self.drop_cached(d, start, len);
        Ok(())
    }

    /// Writes back file `id` in full from the caller's thread (fsync, truncate).
    pub(super) fn flush_locked(&self, id: u64, d: &mut DirtyFile) -> Result<()> {
        while self.trip(id, d, None)? {}
        // What the callers rely on (fsync, truncate, fallocate): nothing of it is cached,
        // nothing holds a reservation.
        debug_assert!(
            d.pages.is_empty() && d.reserved == 0,
            "file {id} written back"
        );
        Ok(())
    }

    /// Worker `me`: serves its queue until shutdown, trip by trip (the file's lock is
    /// released between trips so its writers and readers go on).
    pub(super) fn work(self: &Arc<Self>, me: usize) {
        let q = self.queue_of(me);
        let nap = (self.opts.expire / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        loop {
            let next = {
                let ctx = &self.contexts[q];
                let mut queue = ctx.queue.lock();
                if queue.is_empty() && !self.shutdown.load(Relaxed) {
                    ctx.wake.wait_for(&mut queue, nap);
                }
                queue.pop_front()
            };
            let result = match next {
                Some(id) => self.serve(id, me),
                None if self.shutdown.load(Relaxed) => return,
                None => self.age_scan(),
            };
            if let Err(e) = result {
                self.error.lock().get_or_insert(e);
                self.signal_cleaned();
            }
        }
    }

    fn serve(&self, id: u64, me: usize) -> Result<()> {
        let Some(e) = self.existing(id) else {
            return Ok(());
        };
        e.lock().queued = false;
        loop {
            let mut d = e.lock();
            if d.queued || !self.trip(id, &mut d, Some(me))? {
                // Handed over (or queued again by a writer), or clean: a closed file
                // written back in full leaves the map.
                self.forget_clean(id, &e, &d);
                return Ok(());
            }
        }
    }
}

/// Blocks a write is cut into, each throttled on its own (so the cache passes its limit
/// by at most one piece per writer).
pub(super) fn pieces(offset: u64, len: u64, block_size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = offset;
    let end = offset + len;
    while pos < end {
        let stop = end.min((pos / block_size + WRITE_PIECE_BLOCKS) * block_size);
        out.push((pos, stop));
        pos = stop;
    }
    out
}
