//! The file system: a namespace of directories, files, symbolic links and special files
//! on a buffered extalloc volume ([`extalloc::writeback::Buffered`]), independent of FUSE
//! (`fuse.rs` turns kernel requests into these calls).
//!
//! - Every inode is a volume file; its number is the volume file's id, and the root is
//!   file 1. Its attributes ([`Inode`]) are the file's attribute blob; its size is the
//!   file's size; a directory's file holds its entry log (`dir/mod.rs`), a symbolic link's its
//!   target. Regular files' data goes through the volume's dirty cache and writeback
//!   contexts.
//! - A namespace change appends a record to each directory it touches and rewrites the
//!   attributes it changes, through the volume, so it rides the volume's journal: `fsync`
//!   of any file commits every namespace change made before it (as ext4's does).
//! - Timestamps that only a data write, a read or a times-only setattr changes (mtime,
//!   ctime; atime as the mount's atime mode says, `atime.rs`) are kept in memory and
//!   written at `fsync`, `release`, [`Fs::sync`] (the background commit) and unmount.
//! - A write, truncate or fallocate by an unprivileged caller clears set-user-id, and
//!   set-group-id when the group may execute (`data.rs`), written at once.
//! - After a clean close the mount reads the root only, and every other inode is read back
//!   when a call reaches it (`ondemand.rs`). After a crash (the store's `unchecked` mark)
//!   `scan/` counts the whole namespace in a few bytes an inode, repairs what a crash
//!   between two steps of one operation leaves, and mounts as after a clean close; damage
//!   it finds makes it read the whole namespace into memory and repair that (see
//!   `docs/mount.md`).
//!
//! Data structures: [`Fs`] owns the [`Buffered`] volume, the namespace (`Ns`: the nodes in
//! memory by number, every directory's a name has reached since the mount and any other
//! inode's while something holds it, `ondemand.rs`; and the count of the volume's files,
//! inodes and spill files), the open directory handles
//! (`listing.rs`) and the atime mode. They and the types every module here shares
//! ([`Errno`], [`FsResult`], [`Caller`], [`Attr`]) are defined in `core.rs` and
//! re-exported from here; this file keeps [`MountReport`] and mount, sync and unmount,
//! which call its children. A child imports `core.rs`, never this file.
//!
//! Invariant: for every directory node, `entries` equals its log on the volume replayed
//! (each entry with its inode's kind, when known), or is shelved with the count of
//! entries the log replays to (`ondemand.rs`); every entry names a node, or an inode on
//! the volume whose blob (and log) is its whole state; a file's `nlink` counts its entries
//! (those in directories not in memory among them), a directory's is 2 plus its
//! subdirectories; a node whose `nlink` is 0 is kept only while it is open or the
//! kernel still knows it (`lookups`), then its volume file is unlinked. Such a node is a
//! file unlinked while open, or an `O_TMPFILE` file never named (`tmpfile.rs`: made with
//! `nlink` 0, which [`Fs::link`] alone may name). An inode's birth time (`Inode::btime`)
//! is set when it is made and never changed. Every writer takes
//! `ns` through `Fs::ns_write`; in the unit tests letting it go checks this invariant in
//! memory and against the volume (`invariants.rs`, [`Fs::check_namespace`]). Directory
//! logs, link targets and spill files are changed through [`Buffered::uncached`], which
//! asserts the file has no cache entry.
//!
//! Lock order: `ns` (written by namespace changes; read by lookups, forgets and listings,
//! which count the kernel's references in each node's atomic `Refs`) -> `dir_handles`;
//! then the volume's locks. Data reads and writes call the volume without `ns`, then take
//! it briefly to update times. The stale-attribute callback ([`Fs::on_stale_attrs`]) is
//! called with no lock held. `pins` (`ondemand.rs`, the inodes calls under way pinned) is
//! taken after `ns` or alone, with nothing taken under it. An inode's attribute blob is
//! written only under `ns` written, from the node as it is then (never from a copy taken
//! earlier).

pub mod atime;
#[cfg(test)]
mod cache_tests;
mod call;
mod compaction;
mod core;
pub mod data;
pub mod dirahead;
#[cfg(test)]
mod dirahead_tests;
#[cfg(test)]
mod dirrun_tests;
mod dirstate;
mod entries;
#[cfg(test)]
mod errno_tests;
pub mod flags;
#[cfg(test)]
mod flags_tests;
#[cfg(test)]
mod full_tests;
pub mod headroom;
#[cfg(test)]
mod headroom_tests;
mod invariants;
mod listing;
#[cfg(test)]
mod listing_tests;
pub mod names;
mod ondemand;
#[cfg(test)]
mod ondemand_tests;
mod parked;
mod pending;
#[cfg(test)]
mod posix_tests;
#[cfg(test)]
mod repair_node_tests;
#[cfg(test)]
mod repair_page_tests;
#[cfg(test)]
mod repair_tests;
#[cfg(test)]
mod replace_tests;
mod runlisting;
#[cfg(test)]
mod runlisting_tests;
mod runlookup;
mod runview;
pub(crate) mod scan;
#[cfg(test)]
mod shelve_tests;
mod shutdown;
#[cfg(test)]
mod space_tests;
pub mod syncmode;
#[cfg(test)]
pub(crate) mod tests;
mod tmpfile;
#[cfg(test)]
mod tmpfile_tests;
pub mod trim;
#[cfg(test)]
mod xattr_tests;
mod xattrs;

pub use self::core::{Attr, Caller, Errno, Fs, FsResult, StaleAttrs, ROOT};
pub use listing::Plus;
pub use ondemand::{DIR_CACHE_BYTES_PER_FILE, NODE_CACHE_SHARE, TRIM_SLACK_MIN};
pub use scan::{check, paths, resolve, walk, NamespaceReport};

use self::core::Ns;
use self::dirahead::DirAhead;
use crate::inode::{Inode, Kind};
use extalloc::volume::Volume;
use extalloc::writeback::{Buffered, WritebackOptions};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::OnceLock;

/// What mounting found and repaired.
#[derive(Debug, Clone, Default)]
pub struct MountReport {
    /// A new file system was made on an empty volume.
    pub created: bool,
    /// The whole namespace was read, checked and repaired (a new file system, or the
    /// first read-write mount after a crash: `Store::unchecked`). Otherwise the mount read
    /// the root only and `repaired` is empty: every other inode is read when a call names
    /// it.
    pub scanned: bool,
    /// The volume was not closed cleanly, and nothing was checked for it: every mount since
    /// the promise reached the device kept what a crash leaves (inodes no name reaches,
    /// their spill files) as pending files, which the volume's open removed
    /// ([`Store::promise_crash_pending`](extalloc::store::Store::promise_crash_pending)).
    pub crash_covered: bool,
    /// The volume's files: inodes and the spill files of their extended attributes (what
    /// `statfs` counts).
    pub inodes: u64,
    /// What the namespace check found (and mount repaired), when it ran (`scanned`).
    pub repaired: NamespaceReport,
    /// Groups whose metadata failed its checks so far (their bitmaps load on first use):
    /// held out of allocation, every block held used; files with data there still read.
    pub corrupt_groups: Vec<u64>,
    /// A read-only mount's salvage of damage (in memory only): what was kept and lost.
    pub salvage: extalloc::volume::Salvage,
}

impl Fs {
    /// Mounts the file system on `vol`: makes one on an empty volume (the root is its first
    /// file); after a clean close reads the root only (every other inode is read back when
    /// a call reaches it by a name); after a crash that the store's promise covers
    /// (`Store::crash_needs_check` false: the volume's open removed the pending files a
    /// crash leaves) likewise; after any other crash, or once damage was met, counts the
    /// whole namespace (`scan/census.rs`) and repairs what the crash left (orphans, stray
    /// spill files, torn entry logs), or, when it finds damage, reads the whole namespace
    /// into memory and repairs that too (link counts, names into `/lost+found`; see
    /// [`MountReport`]), then clears the mark. A read-write mount then promises that its
    /// own crash leaves only pending files (`Store::promise_crash_pending`: a build that
    /// does not keep that promise refuses the device from then on).
    pub fn mount(vol: Volume, opts: WritebackOptions) -> Result<(Fs, MountReport), String> {
        Fs::mount_with(vol, opts, true)
    }

    /// [`Fs::mount`] for a volume under a read-only overlay (`extalloc mount --read-only`):
    /// the repairs are committed into the overlay when they can be, and kept in memory when
    /// they cannot (a full or fragmented device has no room for the metadata they would
    /// write); a repair that finds no room leaves the namespace served as the volume holds
    /// it. A read-only mount never refuses for lack of space.
    pub fn mount_read_only(
        vol: Volume,
        opts: WritebackOptions,
    ) -> Result<(Fs, MountReport), String> {
        Fs::mount_with(vol, opts, false)
    }

    fn mount_with(
        vol: Volume,
        opts: WritebackOptions,
        must_commit: bool,
    ) -> Result<(Fs, MountReport), String> {
        let mut report = MountReport::default();
        if vol.is_empty().map_err(|e| e.to_string())? {
            make_root(&vol)?;
            report.created = true;
        }
        // After a clean close (or on a read-only mount, which repairs nothing durable)
        // only the root is read: every other inode, directories too, is read back when a
        // call reaches it by a name (`ondemand.rs`). A crash of a mount that did not keep
        // its inodes no name reaches pending (a build before the promise) may leave
        // orphans and stray spill files, which no call reaches: until a mount has read the
        // whole namespace and repaired them, the store keeps the crash marked
        // (`Store::unchecked`, across clean closes by other tools). Under the promise a
        // crash leaves only pending files, which the volume's open has removed by now:
        // only damage met needs the read (`Store::crash_needs_check`).
        let crashed = vol.store().unchecked();
        let check = vol.store().crash_needs_check();
        let quick = (!check || !must_commit) && !report.created;
        report.crash_covered = crashed && !check;
        let mut root = None;
        if quick {
            root = read_root(&vol).ok();
        } else if !report.created {
            // After a crash: what a crash alone leaves (orphans, stray spill files, torn
            // log tails) is found by a census of a few bytes an inode and repaired without
            // the namespace in memory (`scan/census.rs`); damage needs the whole read.
            if let Some(found) = scan::repair_crash(&vol)? {
                report.repaired = found;
                report.scanned = true;
                root = read_root(&vol).ok();
            }
        }
        let nodes = match root {
            Some(nodes) => nodes,
            // A root that does not read: the scan says why, in full.
            None => {
                let (mut nodes, found) = scan_and_repair(&vol, must_commit)?;
                report.repaired = found;
                report.scanned = true;
                // Only the directories stay in memory; any other inode is read back when
                // a call names it (`ondemand.rs`).
                nodes.retain(|_, n| n.dir.is_some());
                nodes.shrink_to_fit();
                nodes
            }
        };
        assert!(
            nodes.get(&ROOT).is_some_and(|n| n.dir.is_some()),
            "a mount keeps the root directory in memory"
        );
        report.corrupt_groups = vol.store().corrupt_groups();
        match vol.sync() {
            Ok(()) => {}
            Err(e) if !must_commit => {
                log::warn!("read-only: the repairs stay in memory, none committed: {e}")
            }
            Err(e) => return Err(format!("cannot commit the repairs: {e}")),
        }
        let (typed_entries, dir_runs) = settle_marks(&vol, must_commit, quick, crashed);
        // Inodes and their spill files: the volume's files (`Ns::count`).
        let count = vol.file_count().map_err(|e| e.to_string())?;
        report.inodes = count;
        let vol = Buffered::new(vol, opts).map_err(|e| e.to_string())?;
        let geometry = vol.statfs();
        let fs = Fs {
            headroom: headroom::Headroom::new(geometry.blocks, geometry.block_size),
            vol,
            ns: RwLock::new(Ns {
                nodes: nodes.into_iter().map(|(i, n)| (i, Box::new(n))).collect(),
                count,
                dirty_attrs: Default::default(),
                parked: Default::default(),
            }),
            dir_handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            atime_mode: AtomicU8::new(atime::AtimeMode::default().code()),
            acls: AtomicBool::new(false),
            sync_mode: AtomicU8::new(0),
            down: AtomicBool::new(false),
            fence: OnceLock::new(),
            stale_attrs: OnceLock::new(),
            dir_ahead: Mutex::new(DirAhead::default()),
            dir_ahead_on: AtomicBool::new(true),
            // The unit tests keep none, so every trim drops what the kernel alone holds and
            // later calls read it back (`ondemand.rs`).
            node_cache: AtomicUsize::new(match cfg!(test) {
                true => 0,
                false => extalloc::volume::DEFAULT_FILE_CACHE / ondemand::NODE_CACHE_SHARE,
            }),
            // As the node cache: the unit tests shelve every directory at each sync.
            dir_cache: AtomicUsize::new(match cfg!(test) {
                true => 0,
                false => extalloc::volume::DEFAULT_FILE_CACHE * ondemand::DIR_CACHE_BYTES_PER_FILE,
            }),
            pins: Mutex::new(Default::default()),
            typed_entries,
            dir_runs,
            compaction: Default::default(),
        };
        Ok((fs, report))
    }

    /// Writes every inode's pending times, then the dirty data, and commits; then drops the
    /// volume's clean files beyond its cache (`Volume::trim_file_cache`) and the nodes
    /// beyond the node cache that only the kernel's references hold ([`Fs::trim_nodes`]),
    /// and the entries of directories not used since the last sync beyond the directory
    /// cache ([`Fs::shelve_dirs`]). `EIO` once the file system is shut down.
    pub fn sync(&self) -> FsResult<()> {
        self.live()?;
        self.flush_attrs(None)?;
        self.vol.sync()?;
        self.trim_caches();
        Ok(())
    }

    /// The trims a sync ends with: the volume's files that reads loaded beyond its cache
    /// (`Volume::trim_file_cache`), the nodes only the kernel's references hold beyond the
    /// node cache ([`Fs::trim_nodes`]), the entries of directories no call used since the
    /// last trim beyond the directory cache ([`Fs::shelve_dirs`]). For a mount that
    /// commits nothing (read-only) the background thread calls it on its own. Returns the
    /// files, nodes and directories it let go.
    pub fn trim_caches(&self) -> (usize, usize, usize) {
        let files = self.vol.volume().trim_file_cache();
        let nodes = self.trim_nodes();
        let dirs = self.shelve_dirs();
        (files, nodes, dirs)
    }

    /// Unmounts: files unlinked while open are removed, everything is written and the
    /// volume closed. After a shutdown nothing is written: the volume is dropped as in a
    /// crash (the next mount recovers it).
    pub fn unmount(self) -> Result<(), String> {
        self.unmount_with(false)
    }

    /// [`Fs::unmount`] for a process that exits next (the mount's daemon): the namespace in
    /// memory and the volume's tables are left to the exit instead of freed piece by piece
    /// ([`Buffered::close_for_exit`]), which was most of an unmount's time. In a process
    /// that goes on, that memory leaks.
    pub fn unmount_for_exit(self) -> Result<(), String> {
        self.unmount_with(true)
    }

    fn unmount_with(self, exiting: bool) -> Result<(), String> {
        if self.is_down() {
            log::warn!("unmounting a file system that was shut down: nothing written");
            return Ok(());
        }
        let orphans: Vec<u64> = {
            let ns = self.ns.read();
            ns.nodes
                .iter()
                .filter(|(_, n)| n.inode.nlink == 0)
                .map(|(&i, _)| i)
                .collect()
        };
        for ino in orphans {
            let mut ns = self.ns_write();
            self.remove_inode(&mut ns, ino)
                .map_err(|e| format!("cannot remove unlinked inode {ino}: {e}"))?;
        }
        self.sync().map_err(|e| format!("cannot sync: {e}"))?;
        debug_assert!(
            self.ns
                .read()
                .nodes
                .values()
                .all(|n| n.inode.nlink > 0 && !n.attr_dirty),
            "no orphan and no pending times left"
        );
        let closed = match exiting {
            true => {
                std::mem::forget(std::mem::take(&mut *self.ns.write()));
                self.vol.close_for_exit()
            }
            false => self.vol.close(),
        };
        closed.map_err(|e| format!("cannot close the volume: {e}"))
    }
}

/// The whole namespace read and repaired (`scan::load`); read-only (`!must_commit`), a
/// repair that finds no room leaves it served as the volume holds it.
fn scan_and_repair(
    vol: &Volume,
    must_commit: bool,
) -> Result<(core::InoMap<core::Node>, NamespaceReport), String> {
    match scan::load(vol, true) {
        Ok(loaded) => Ok(loaded),
        // Read-only: a repair that finds no room (an orphan's removal commits) leaves the
        // namespace as the volume holds it, served unrepaired.
        Err(e) if !must_commit => {
            log::warn!("read-only: served unrepaired, a repair failed: {e}");
            scan::load(vol, false)
        }
        Err(e) => Err(e),
    }
}

/// The root directory's node alone, as the mount keeps it after a clean close.
fn read_root(vol: &Volume) -> Result<core::InoMap<core::Node>, String> {
    let root = ondemand::read_node(vol, ROOT, Some(ROOT), |_| None)
        .map_err(|e| format!("the root directory does not read: {e:?}"))?;
    if root.dir.is_none() {
        return Err("the root is not a directory".into());
    }
    Ok(core::InoMap::from_iter([(ROOT, root)]))
}

/// Makes the root directory as the first file of an empty volume.
fn make_root(vol: &Volume) -> Result<(), String> {
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let root = Inode::new(Kind::Dir, 0o755, uid, gid, 0);
    let id = vol
        .create(&root.encode())
        .map_err(|e| format!("cannot make the root directory: {e}"))?;
    if id != ROOT {
        // Ids are never reused: a volume whose files were all removed cannot give id 1.
        let _ = vol.unlink(id);
        return Err(format!(
            "this volume has held files before (its next file would be {id}, the root must \
             be 1): make a fresh one with `extalloc mkfs`"
        ));
    }
    Ok(())
}

/// After a mount's repairs are committed: clears the store's crash and damage marks when
/// the mount checked (`!quick`: the census or the whole read ran and repaired), or when
/// the crash was one the store's promise covers and the mount's own reads met no damage;
/// then, on a read-write mount, gives the promise and the directory features if the device
/// lacks them. Returns whether directory adds may carry their kinds, and whether a
/// compaction may write runs (each only once the device carries its feature).
fn settle_marks(vol: &Volume, must_commit: bool, quick: bool, crashed: bool) -> (bool, bool) {
    let store = vol.store();
    if must_commit && (!quick || (crashed && !store.damaged())) {
        // Repaired and committed, or a crash the promise covers: the next mount reads
        // only the root.
        store.mark_checked();
    }
    // Directory adds carry their kinds, and compactions write runs, only once the device
    // says so: a mount that finds the features there writes them at once.
    let mut typed = store.typed_entries_promised();
    let mut runs = store.dir_runs_promised();
    if must_commit && !(store.crash_pending_promised() && typed && runs) {
        // From here every inode no name reaches is pending (`Fs::persist`), so this
        // mount's own crash leaves nothing to check; directory adds may carry their
        // kinds, and compactions write runs. A new file system, or one last mounted by a
        // build before any of these features: written now (a checkpoint writes the
        // superblock), so that a crash of this very mount is covered. A checkpoint that
        // finds no room (a full or fragmented device) keeps every change for the next one
        // and leaves the features in memory: a crash before that is counted as before,
        // the mount goes on, its adds carry no kind and its compactions write no run.
        store.promise_crash_pending();
        store.promise_typed_entries();
        store.promise_dir_runs();
        match vol.checkpoint() {
            Ok(()) => (typed, runs) = (true, true),
            Err(e) => log::warn!("the superblock's features wait for the next checkpoint: {e}"),
        }
    }
    // Checked, unless the mount's own reads met damage (`Store::mark_damaged`: the next
    // mount reads the whole namespace).
    debug_assert!(
        !must_commit || (store.crash_pending_promised() && (!store.unchecked() || store.damaged())),
        "a read-write mount leaves the store promised, and checked unless it met damage"
    );
    debug_assert!(
        (!typed || store.typed_entries_promised()) && (!runs || store.dir_runs_promised()),
        "typed adds and runs only under their features"
    );
    (typed, runs)
}
