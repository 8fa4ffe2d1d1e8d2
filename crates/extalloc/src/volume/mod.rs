//! Persistent files on a store: a [`Volume`] holds files addressed by a 64-bit id, each with
//! a size, a small attribute blob of the caller's and an extent map, and writes and reads
//! their data on the store's device. `docs/volume.md` has the crash semantics.
//!
//! - Every data allocation goes through the file layer (`files/`: normalisation, the file's
//!   preallocations, locality chunks for small files, size classes), with the goal after
//!   the file's previous extent.
//! - Each operation logs its metadata changes (`record::Change`: a file's create, size,
//!   attribute blob, map, unmap, written, unlink and placement key; the volume's two table
//!   areas, and the map segments a checkpoint wrote and freed) and makes its allocations
//!   and frees in the store's open transaction; [`Volume::sync`] commits both in one
//!   journal record, after flushing the data (ext4's `data=ordered`: data reaches the
//!   device before the metadata that maps it).
//! - `fallocate` maps blocks unwritten: they read as zeros until written. A newly mapped
//!   block is written whole (zeros around the caller's bytes) before its mapping commits,
//!   or unwritten, so no file reads what another file, or a deleted one, left there.
//! - After a commit that leaves the journal more than half full, the volume writes the
//!   entries of the files changed since the last checkpoint to its file tree (a
//!   copy-on-write B+tree: the changed leaves and their parents, `tree.rs`) and
//!   checkpoints the store with a root naming the tree's new root (`checkpoint.rs`);
//!   `open` reads the tree and applies the changes logged in the records after it.
//!
//! Files: this one holds the [`Volume`]'s open and its commits; `state.rs` the `Volume`
//! itself (its fields, the file table, the constants every part uses), which the other
//! files name instead of this one; `path.rs` the one-call volumes on a file
//! ([`Volume::mkfs_file`], [`Volume::open_file`]); `create.rs` makes files; `io.rs` the
//! file calls (`fallocate.rs` fallocate, `share.rs` the superuser's share); `data.rs` what
//! a write places (one buffer, or a writeback's cached blocks as they lie); `publish.rs`
//! attribute blobs and the atomic publish; `keyed.rs` blobs by key (a put that replaces the
//! key's blob atomically, a get by key); `delalloc.rs` delayed allocation's reservations
//! and writeback (the cache itself is `crate::writeback`); `placement.rs` where a file's
//! data goes beyond the file layer's rules (a placed file's group, claimed runs of free
//! groups for large files, the write-life hint) and what a file's close gives back;
//! `atomic.rs` atomic groups; `checkpoint.rs` the checkpoint (tree and map segments
//! written), `load.rs` the open; `cache.rs` the files kept in memory and those read back
//! from the tree when named; `maps.rs` lazy extent maps and the map segments that hold the
//! long ones; `spill.rs` maps too long for a tree node; `file.rs` a file in memory;
//! `record.rs` the bytes (changes, map segments); `root.rs` the root; `table.rs` the file
//! table's frames and their salvage; `tree.rs` the file tree in memory (`node.rs` a node's
//! bytes, `walk.rs` a durable tree read whole, `treeio.rs` its I/O on the device);
//! `area.rs` the index chains (older volumes' table areas, the retired chain); `salvage.rs`
//! the open for repair ([`Volume::open_salvaging`]) and where each file's metadata lives
//! ([`Volume::places`]); `check.rs` the ownership check and the allocation rebuilt from the
//! owners ([`Volume::rebuild_allocation`]); `nodescan.rs`, `rootfind.rs` and `scanread.rs`
//! a repair's scans of the device for the tree's nodes. Tests: `tests.rs` (contents against
//! a model through crashes, bad input), `atomic_tests.rs`, `maps_tests.rs`,
//! `repair_tests.rs`, `salvage_tests.rs`, and `table_tests.rs` (declared in `table.rs`).
//!
//! - Several calls that must be durable together (a file system's rename) run in an
//!   atomic group ([`Volume::atomic`], `atomic.rs`): no commit falls between them.
//!
//! Data structures: the [`Volume`] owns the [`Store`], the device, the files in memory
//! (`id -> VFile` under a mutex each: a cache over the file tree, `cache.rs`), the log of changes since the last commit, the files changed
//! since the last checkpoint (`dirty`), `Meta` (the next id, the durable file tree, an
//! older volume's table areas), and the delayed-allocation reservation count.
//!
//! Invariant: the store's open transaction holds exactly the allocations and frees of the
//! changes in `log`: an operation makes both under the gate (read), and a commit takes
//! both under the gate (written). Durable state (the table, then the records after it)
//! maps a block to at most one file, and only blocks the store holds allocated.
//!
//! Lock order: `keys` (`keyed.rs`) -> `groups` -> `gate` -> a file's mutex -> `files` / `log` (-> `dirty`) / `meta` /
//! `claims` / `delalloc`; then the store's locks. `files` is held only briefly and never while waiting for a file's mutex (callers
//! clone a file's `Arc` out of it, then lock). Naming a file not in memory
//! (`Volume::file`) takes the gate for reading (recursively) to load it: never with a
//! file's mutex, `files` or `meta` held. Operations hold the gate for reading one chunk at a time (at most `CHUNK_BLOCKS`
//! blocks or `CHUNK_EXTENTS` extents), so a commit waits for at most one chunk.

mod area;
#[cfg(test)]
mod area_tests;
mod atomic;
#[cfg(test)]
mod atomic_tests;
mod cache;
#[cfg(test)]
mod cache_tests;
mod check;
mod checkpoint;
mod chunk;
mod create;
mod data;
mod delalloc;
mod fallocate;
mod file;
mod io;
mod keyed;
#[cfg(test)]
mod keyed_tests;
mod keyindex;
#[cfg(test)]
mod latch_tests;
mod leafkeep;
#[cfg(test)]
mod leafkeep_tests;
mod leafrepair;
mod least;
mod load;
mod maps;
#[cfg(test)]
mod maps_tests;
mod node;
mod nodescan;
mod page;
#[cfg(test)]
mod page_tests;
mod path;
mod placement;
#[cfg(test)]
mod placement_tests;
mod pool;
pub(crate) mod publish;
#[cfg(test)]
mod publish_tests;
mod read;
mod record;
#[cfg(test)]
mod repair_tests;
mod room;
mod root;
mod rootfind;
mod salvage;
#[cfg(test)]
mod salvage_tests;
mod scanread;
mod share;
#[cfg(test)]
mod shutdown_tests;
mod spill;
mod state;
mod table;
mod tail;
#[cfg(test)]
mod tail_tests;
#[cfg(test)]
mod tests;
mod tree;
mod treeio;
mod walk;

pub use atomic::Atomic;
pub use cache::{DEFAULT_FILE_CACHE, MIN_CHECKPOINT_FILES};
pub use check::VolumeCheck;
pub use delalloc::WroteBack;
pub use fallocate::Fallocate;
pub(crate) use io::check_range;
pub use io::{MAX_ATTR_BYTES, MAX_FILE_BYTES};
pub use page::ListPage;
pub use salvage::{
    ClearedMap, FilePlace, KeyRange, LostEntry, MendedLeaves, RootFound, Salvage, TreeNodePlace,
    TreeScan,
};
pub use scanread::{NodeScans, ScanProgress};
#[cfg(any(test, feature = "testing"))]
pub(crate) use state::CHUNK_BLOCKS;
use state::{Claims, FileTable, Meta, Segs, CHUNK_BUDGET, EMPTY_RECORD_BYTES, NEXT_IDENTITY};
pub use state::{FileExtent, FileInfo, Volume};
pub use {path::DEFAULT_BLOCK_SIZE, read::Advised, share::Privilege};

use crate::alloc::Policy;
use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::{Extent, Geometry};
use crate::store::{Statfs, Store};
use data::Data;
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use record::{Change, PAYLOAD_MAGIC};
use std::collections::BTreeMap;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;

impl Volume {
    /// Makes a volume on `dev` (a new store with a random uuid, see [`Store::create`]) and
    /// returns it open.
    pub fn mkfs(
        dev: Arc<dyn Device>,
        geometry: &Geometry,
        journal_blocks: u64,
        policy: Policy,
    ) -> Result<Volume> {
        crate::disk::format::mkfs(dev.as_ref(), geometry, journal_blocks, rand::random())?;
        Volume::format(dev, policy)
    }

    /// Makes a volume on `dev`, which holds a store no one has used yet (fresh from
    /// [`format::mkfs`](crate::disk::format::mkfs)): its first, empty file table.
    ///
    /// A store used already ([`Error::StoreInUse`]) or one whose journal is too small for
    /// a volume ([`Error::JournalTooSmall`]) is refused before anything is written. A
    /// failure writing the first table (a checkpoint) leaves the store without a volume:
    /// format it again.
    pub fn format(dev: Arc<dyn Device>, policy: Policy) -> Result<Volume> {
        let (store, records) = Store::open(dev.clone(), policy)?;
        if !store.root().is_empty() || !records.is_empty() {
            return Err(Error::StoreInUse);
        }
        let vol = Volume::with_store(store, (BTreeMap::new(), Meta::empty(), Segs::default()))?;
        vol.fill_node_reserve();
        {
            let _closed = vol.gate.write();
            vol.checkpoint_locked()?;
        }
        debug_assert!(
            !vol.store.root().is_empty(),
            "a volume without its table's root"
        );
        Ok(vol)
    }

    /// Opens the volume on `dev`: the store's open and journal replay, the file table, and
    /// the changes logged after it. A file's map is read, and checked against the
    /// allocator, when first used ([`Volume::check`] reads them all); only the maps the
    /// journal's records change are read now. Files left pending by a crash (made by
    /// [`Volume::create_pending`], never published) are removed and their blocks freed.
    ///
    /// Fails on a device that holds no volume ([`Error::NoVolume`]), a volume of another
    /// format version ([`Error::UnsupportedVolumeVersion`]) or a journal too small for a
    /// volume ([`Error::JournalTooSmall`]), and with the store's errors
    /// ([`Store::open`]); the volume's table and maps are not written.
    pub fn open(dev: Arc<dyn Device>, policy: Policy) -> Result<Volume> {
        let (store, records) = Store::open(dev.clone(), policy)?;
        let vol = Volume::open_store(store, dev.as_ref(), &records, None)?;
        // Files a crash left pending are removed; on a device that refuses writes they
        // stay, hidden, for the next open (`publish.rs`).
        let _ = vol.remove_pending();
        Ok(vol)
    }

    /// The volume on `store` and `dev`, its journal's `records` replayed, pending files kept;
    /// with `repair` (its scans), a tree the mend mends opens ([`Volume::open_for_repair`]).
    pub(super) fn open_store(
        store: Store,
        dev: &dyn Device,
        records: &[crate::disk::journal::Record],
        repair: Option<&NodeScans<'_>>,
    ) -> Result<Volume> {
        let loaded = load::load(&store, dev, records, repair)?;
        let vol = Volume::with_store(store, loaded)?;
        // Before anything commits: the runs a node needs, while a crash left them free.
        vol.fill_node_reserve();
        Ok(vol)
    }

    /// The volume over `store`; its data goes to the store's device, through the store's
    /// latch ([`Store::device`]), never around it.
    fn with_store(
        store: Store,
        (files, mut meta, segs): (FileTable, Meta, Segs),
    ) -> Result<Volume> {
        let dev = store.device();
        let table_blocks = load::volume_root(&store).map_or(0, |r| {
            r.table_bytes
                .div_ceil(u64::from(store.geometry().block_size))
                + meta.tree_blocks
                // A tree the first checkpoint builds again: its old nodes.
                + meta.old_nodes.iter().map(|e| e.len).sum::<u64>()
        });
        let tree_fixed = room::fixed_need(meta.tree.as_ref());
        let dirty = std::mem::take(&mut meta.replayed);
        let prepared_root: Arc<Mutex<Option<Vec<u8>>>> = Arc::new(Mutex::new(None));
        let slot = prepared_root.clone();
        store.set_checkpoint_hook(Box::new(move || {
            slot.lock().take().ok_or(Error::CheckpointOutsideVolume)
        }));
        let block_size = u64::from(store.geometry().block_size);
        debug_assert!(block_size.is_power_of_two(), "block size {block_size}");
        let budget = CHUNK_BUDGET * 16;
        if store.max_transaction_bytes() < budget {
            return Err(Error::JournalTooSmall {
                max_record: store.max_transaction_bytes(),
                needed: budget,
            });
        }
        Ok(Volume {
            store,
            dev,
            block_size,
            groups: RwLock::new(()),
            aborted: Mutex::new(None),
            shut: AtomicBool::new(false),
            identity: NEXT_IDENTITY.fetch_add(1, Relaxed),
            gate: RwLock::new(()),
            files: RwLock::new(files),
            log: Mutex::new(Vec::new()),
            meta: Mutex::new(meta),
            prepared_root,
            delalloc: Mutex::new(0),
            cached_files: AtomicU64::new(0),
            claims: Mutex::new(Claims::default()),
            unflushed: AtomicBool::new(false),
            tails: Mutex::new(std::collections::BTreeSet::new()),
            segs: Mutex::new(segs),
            maps_read: AtomicU64::new(0),
            table_blocks: AtomicU64::new(table_blocks),
            tree_fixed: AtomicU64::new(tree_fixed),
            tree_dirty_limit: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            node_reserve_short_at: AtomicU64::new(u64::MAX),
            dirty: Mutex::new(dirty),
            // The library's own tests keep none: every checkpoint evicts what it can, so
            // the model, crash and damage tests run on files read back from the tree.
            file_cache: AtomicUsize::new(match cfg!(test) {
                true => 0,
                false => cache::DEFAULT_FILE_CACHE,
            }),
            evict_from: AtomicU64::new(0),
            files_loaded: AtomicU64::new(0),
            files_evicted: AtomicU64::new(0),
            keys: RwLock::new(()),
            key_index: Mutex::new(keyindex::IndexState::NotBuilt),
            key_index_used: AtomicBool::new(false),
            key_index_build: Mutex::new(()),
        })
    }

    /// The store under the volume (read-only use: figures, `allocator()`, `check`).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// The figures of `statfs` (see [`Statfs`]).
    pub fn statfs(&self) -> Statfs {
        self.store.statfs()
    }

    /// File `id`'s mapped extents, in logical order.
    pub fn extents(&self, id: u64) -> Result<Vec<FileExtent>> {
        let f = self.file(id)?;
        let f = self.lock_loaded(&f)?;
        Ok(f.entries()
            .into_iter()
            .map(|(logical, extent, unwritten)| FileExtent {
                logical,
                extent,
                unwritten,
            })
            .collect())
    }

    /// File `id`'s size in bytes.
    pub fn size(&self, id: u64) -> Result<u64> {
        Ok(self.file(id)?.lock().size)
    }

    /// File `id`'s size in bytes and the blocks it maps (written or not), under one lock
    /// of the file: [`Volume::size`] and the sum of [`Volume::extents`] without the list,
    /// nor a read of a map not in memory (its entry counts its blocks).
    pub fn size_and_blocks(&self, id: u64) -> Result<(u64, u64)> {
        let f = self.file(id)?;
        let f = f.lock();
        Ok((f.size, cache::mapped_blocks(&f)))
    }

    /// File `id`'s attribute blob (empty while it is pending: `publish.rs`).
    pub fn attr(&self, id: u64) -> Result<Vec<u8>> {
        let attr = self.file(id)?.lock().attr.clone();
        Ok(match attr == publish::PENDING {
            true => Vec::new(),
            false => attr,
        })
    }

    /// Every file's id and handle, taken under the table's lock and let go of it before
    /// the caller locks any file's mutex (the lock order: a file's mutex before `files`).
    fn file_handles(&self) -> Vec<(u64, Arc<Mutex<file::VFile>>)> {
        self.files
            .read()
            .iter()
            .map(|(&id, f)| (id, f.clone()))
            .collect()
    }

    /// Appends `changes` to the log (under the gate, read).
    fn log(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        // A change and its allocations land in one transaction only under the gate.
        debug_assert!(self.gate.is_locked(), "a change logged outside the gate");
        let mut log = self.log.lock();
        let mut dirty = self.dirty.lock();
        for c in changes {
            c.encode(&mut log);
            dirty.extend(c.file());
        }
        // Under `log`'s lock: the index sees the changes in log order.
        self.index_changes(changes);
    }

    /// Makes room for one chunk call: see [`Volume::make_room`]. Inside an atomic group of
    /// this thread the room was made when the group opened: the call only counts against
    /// the group's budget.
    fn ensure_room(&self) -> Result<room::Admitted<'_>> {
        if self.inside_group() {
            self.debit_group(1);
            return Ok(room::Admitted::inside_group(self));
        }
        self.make_room(CHUNK_BUDGET)
    }

    /// Commits first if `bytes` more might take the open transaction's record past an
    /// eighth of the largest (about a sixteenth of the journal). A commit leaves the
    /// journal at most half full (else the volume checkpoints), so the next record and its
    /// mirror always fit without the store checkpointing by itself, which a volume refuses
    /// (its table must go with the tail).
    fn make_room(&self, bytes: u64) -> Result<room::Admitted<'_>> {
        let open = self.store.open_transaction_bytes_bound() + self.log.lock().len() as u64;
        if open + bytes > self.store.max_transaction_bytes() / 8 {
            self.sync()?;
        }
        self.keep_tree_room(bytes)
    }

    /// Makes every change so far durable: the data written is flushed, then the logged
    /// changes and the store's open transaction commit in one journal record. A journal
    /// half full, or more changed files than an eighth of the file cache (at least
    /// [`MIN_CHECKPOINT_FILES`]), makes the
    /// volume write its table and checkpoint afterwards. On failure
    /// nothing is lost: the changes stay for the next commit.
    ///
    /// Waits for the atomic groups under way ([`Volume::atomic`]); called from inside one
    /// (which would split it) it panics. After a group was left half made it fails with
    /// [`Error::Aborted`].
    pub fn sync(&self) -> Result<()> {
        let (_groups, _closed) = self.close_gate();
        self.commit_locked()?;
        let s = self.store.statfs();
        let changed = self.dirty.lock().len();
        if s.journal_used_bytes > s.journal_bytes / 2 || changed > self.checkpoint_files() {
            self.checkpoint_locked()?;
        }
        Ok(())
    }

    /// Syncs and writes the volume's table now (a checkpoint: the changed maps, the table,
    /// the store's home state; the journal is then empty), as `close` does, without
    /// closing. A sync checkpoints by itself once the journal is half full.
    pub fn checkpoint(&self) -> Result<()> {
        let (_groups, _closed) = self.close_gate();
        self.checkpoint_locked()
    }

    /// Takes the locks a commit needs: the groups' (every group under way has ended) and
    /// the gate (every chunk under way has ended).
    fn close_gate(&self) -> (RwLockWriteGuard<'_, ()>, RwLockWriteGuard<'_, ()>) {
        assert!(
            !self.inside_group(),
            "a commit from inside an atomic group would split it"
        );
        (self.groups.write(), self.gate.write())
    }

    /// Syncs and closes the volume, writing its table (a checkpoint), so that the next open
    /// replays no record and reads no map. Dropping it without `close` loses what was not
    /// synced, as a crash would.
    pub fn close(self) -> Result<()> {
        match self.shut.load(Acquire) {
            true => Ok(()), // written whole by the shutdown
            false => self.checkpoint(),
        }
    }

    /// [`Volume::close`] for a process that exits next (the mount's daemon): the same
    /// checkpoint and clean close (the device marked no longer in use, its claim let go),
    /// but the file table, the map segments' accounts and the dirty set are left to the
    /// exit instead of freed piece by piece. Freeing millions of small allocations was
    /// most of an unmount's time (`docs/results.md`, "Unmount"). In a process that goes on,
    /// that memory leaks: use [`Volume::close`]. On failure, as `close`.
    pub fn close_for_exit(self) -> Result<()> {
        if !self.shut.load(Acquire) {
            self.checkpoint()?;
        }
        debug_assert!(self.log.lock().is_empty(), "nothing left to commit");
        std::mem::forget(std::mem::take(&mut *self.files.write()));
        std::mem::forget(std::mem::take(&mut *self.segs.lock()));
        std::mem::forget(std::mem::take(&mut *self.dirty.lock()));
        drop(self); // the store's clean close
        Ok(())
    }

    /// [`Volume::close`] through a shared reference (a volume in an `Arc` that other
    /// threads still hold): waits for the calls under way, checkpoints, and from then on
    /// refuses every change and commit with [`Error::Closed`] (reads still work). The
    /// device stays claimed until the last reference is dropped. On failure (the
    /// checkpoint's error) the volume is not shut down and nothing else changed.
    pub fn shutdown(&self) -> Result<()> {
        let (_groups, _closed) = self.close_gate();
        if self.shut.load(Acquire) {
            return Ok(());
        }
        self.checkpoint_locked()?;
        self.shut.store(true, Release);
        debug_assert!(self.log.lock().is_empty(), "nothing left to commit");
        Ok(())
    }

    /// Refuses a change or commit once the volume is shut down. Called with the gate held
    /// (read by a chunk, written by a commit), so no change starts after a shutdown began.
    fn check_open(&self) -> Result<()> {
        match self.shut.load(Acquire) {
            true => Err(Error::Closed),
            false => self.store.check_not_latched(),
        }
    }

    /// `fsync` of one file: the volume commits everything (one journal), so this is
    /// [`Volume::sync`] once the file is known.
    pub fn fsync(&self, id: u64) -> Result<()> {
        self.file(id)?;
        self.sync()
    }

    /// Writes `data` at byte `offset` (see [`Volume::write_data`]): one buffer as it is, a
    /// list of whole blocks in one vectored write.
    fn write_blocks_at(&self, data: Data<'_>, offset: u64) -> Result<()> {
        match data {
            Data::One(buf) => self.write_data(buf, offset),
            Data::Blocks(blocks) => {
                let bs = self.block_size;
                debug_assert!(!blocks.is_empty(), "a write of nothing");
                debug_assert!(blocks.iter().all(|b| b.len() as u64 == bs), "whole blocks");
                self.data_write_starts(offset, blocks.len() as u64 * bs);
                self.dev.write_vectored_at(blocks, offset)
            }
        }
    }

    /// Writes file data (or zeros into a file's block) at byte `offset` of the device,
    /// under the gate (read): the next commit or sync flushes it.
    fn write_data(&self, buf: &[u8], offset: u64) -> Result<()> {
        debug_assert!(!buf.is_empty(), "a write of nothing");
        self.data_write_starts(offset, buf.len() as u64);
        self.dev.write_at(buf, offset)
    }

    /// What every data write relies on and leaves: data (whole blocks, a block's tail
    /// zeroed, or bytes inside a block written before), never over the device's own metadata; the next commit or sync flushes the
    /// device.
    fn data_write_starts(&self, offset: u64, len: u64) {
        let (bs, end) = (self.block_size, offset + len);
        debug_assert!(self
            .store
            .check_not_metadata(Extent::new(offset / bs, end.div_ceil(bs) - offset / bs))
            .is_ok());
        self.unflushed.store(true, Relaxed);
    }

    /// Under the gate (written): flush data, commit the log with the store's transaction.
    /// With nothing to log, data written in place since the last flush (an overwrite maps
    /// nothing new) is still flushed: a sync makes it durable too.
    fn commit_locked(&self) -> Result<()> {
        // The log and the store's open transaction are taken together under the gate.
        debug_assert!(self.gate.is_locked_exclusive(), "a commit, the gate open");
        self.check_open()?;
        self.check_not_aborted()?;
        // The bytes appended in place but kept back go first (`tail.rs`): the sizes this
        // record logs cover them, and the flush below makes them durable before it.
        self.write_tails()?;
        let log = std::mem::take(&mut *self.log.lock());
        let unflushed = self.unflushed.swap(false, Relaxed);
        if log.is_empty() && self.store.statfs().open_transaction_bytes <= EMPTY_RECORD_BYTES {
            // Nothing to commit (no record for nothing).
            if unflushed {
                self.dev
                    .flush()
                    .inspect_err(|_| self.unflushed.store(true, Relaxed))?;
            }
            return Ok(());
        }
        let mut payload = Vec::with_capacity(PAYLOAD_MAGIC.len() + log.len());
        if !log.is_empty() {
            payload.extend_from_slice(PAYLOAD_MAGIC);
            payload.extend_from_slice(&log);
        }
        let result = self
            .dev
            .flush()
            .and_then(|()| self.store.commit(&payload).map(|_| ()));
        if result.is_err() {
            // Not recorded: the changes wait for the next commit, as the store's do.
            self.unflushed.store(true, Relaxed);
            let mut now = self.log.lock();
            let later = std::mem::replace(&mut *now, log);
            now.extend_from_slice(&later);
        } else {
            // The commit may have released frees (a checkpoint's old nodes among them).
            self.top_up_node_reserve();
        }
        result
    }
}
