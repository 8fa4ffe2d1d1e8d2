//! The file system's core types, shared by `mod.rs` and every module under `fs/`: the
//! [`Fs`] itself, the namespace in memory ([`Ns`], [`Node`], [`DirState`], [`Refs`]), an
//! open directory's [`DirHandle`], and the methods on them that need nothing else of
//! `fs/` (attributes, persisting and reaping inodes). A call's own types ([`Errno`],
//! [`FsResult`], [`Caller`], [`Attr`]) are in `call.rs` and re-exported here. `mod.rs`
//! re-exports the public ones; mount, sync and unmount stay there, since they call its
//! children.
//!
//! Data structures: [`Fs`] owns the [`Buffered`] volume, the namespace ([`Ns`]: the
//! [`Node`]s in memory by number, `ondemand.rs`), the open directory handles
//! ([`DirHandle`], `listing.rs`) and the atime mode.
//!
//! Invariant: the namespace invariant of `mod.rs` (a directory node's `entries` is its
//! log replayed, every entry names a node or an inode whose blob is its whole state, `nlink`
//! counts the names); a node's attribute
//! blob ([`Node::blob`]) is written only under `ns` written ([`Fs::persist`]).
//!
//! Lock order: `ns` -> `dir_handles`, then the volume's locks, as in `mod.rs`; `pins`
//! after `ns` or alone, holding nothing else; `Ns::parked`'s mutex under `ns` (read, for
//! a forget), holding nothing else.

use super::dirahead::DirAhead;
use super::parked::Parked;
use crate::dir::DirLog;
use crate::inode::{Inode, Kind};
use crate::xattr::{Tail, Xattrs};
use extalloc::disk::device::FenceDevice;
use extalloc::writeback::Buffered;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Slots of the node map below which it is never shrunk ([`Fs::reap`]).
const SHRINK_FROM: usize = 4096;

/// The root directory's inode (FUSE's root id; the volume's first file).
pub const ROOT: u64 = 1;

pub use super::call::{Attr, Caller, Errno, FsResult};

pub(crate) use super::dirstate::{DirState, Used};
pub(crate) use super::entries::{Entries, Entry};

/// The kernel's references to a node (FUSE's lookup count): changed under the namespace
/// lock held for reading (lookups) or writing (makes, links), read under either. Only a
/// holder of the lock for writing acts on a count of 0 (`Fs::reap`), so a lookup racing a
/// forget can only keep a node alive, never lose one.
#[derive(Debug, Default)]
pub(crate) struct Refs(AtomicU64);

impl Refs {
    /// A count of `n`.
    pub(crate) fn new(n: u64) -> Refs {
        Refs(AtomicU64::new(n))
    }

    /// The count now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// One more reference.
    pub(crate) fn add(&self) {
        let before = self.0.fetch_add(1, Ordering::AcqRel);
        assert!(before < u64::MAX, "a lookup count cannot overflow");
    }

    /// `n` references fewer (never below 0: the kernel forgets no more than it got, but a
    /// remount's counts start at 0); the count left.
    pub(crate) fn forget(&self, n: u64) -> u64 {
        let prev = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(n))
            })
            .expect("the update always returns Some");
        prev.saturating_sub(n)
    }
}

impl Clone for Refs {
    fn clone(&self) -> Refs {
        Refs::new(self.get())
    }
}

/// One inode in memory.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) inode: Inode,
    /// A directory's state (boxed: most inodes are not directories, and a node is kept
    /// per inode).
    pub(crate) dir: Option<Box<DirState>>,
    /// Open file handles.
    pub(crate) open: u32,
    /// References the kernel holds (lookups not yet forgotten): counted under `ns` read,
    /// so a lookup never waits for another lookup.
    pub(crate) lookups: Refs,
    /// Times changed in memory and not yet written to the volume.
    pub(crate) attr_dirty: bool,
    /// Extended attributes (`xattrs.rs`), loaded at mount.
    pub(crate) xattrs: Xattrs,
    /// The spill file holding them, when they do not fit the inode's blob.
    pub(crate) spill: Option<u64>,
    /// Made by `Fs::tmpfile` (`O_TMPFILE`) and never named since: a regular file with link
    /// count 0 that `Fs::link` may give its first name (which clears this). Any other
    /// node with link count 0 was unlinked and `link` refuses it (`ENOENT`).
    pub(crate) tmpfile: bool,
    /// Truncated to zero from a non-zero size since its data was last written back: its
    /// last close writes its new data back before the next commit (ext4's
    /// `auto_da_alloc`), so a crash after truncate-and-rewrite leaves old or new content,
    /// not an empty file.
    pub(crate) rewritten: bool,
    /// When an fsync of it last succeeded: an unlink of a regular file within
    /// `ondemand::SYNCED_UNLINK_WINDOW` of that is committed before its reply (`names.rs`).
    pub(crate) synced: Option<std::time::Instant>,
}

impl Node {
    /// A node of `inode` with no directory, no attributes, nothing open or looked up.
    pub(crate) fn plain(inode: Inode) -> Node {
        Node {
            inode,
            dir: None,
            open: 0,
            lookups: Refs::default(),
            attr_dirty: false,
            xattrs: Xattrs::new(),
            spill: None,
            tmpfile: false,
            rewritten: false,
            synced: None,
        }
    }

    /// Where its extended attributes are, as its blob's tail says.
    pub(crate) fn tail(&self) -> Tail {
        match self.spill {
            Some(id) => Tail::Spill(id),
            None if self.xattrs.is_empty() => Tail::None,
            None => {
                debug_assert!(
                    crate::xattr::fits_inline(&self.inode, &self.xattrs),
                    "a set without a spill file fits in the inode's blob (`store_set`)"
                );
                Tail::Inline(self.xattrs.clone())
            }
        }
    }

    /// Its attribute blob: the inode and where its extended attributes are.
    pub(crate) fn blob(&self) -> Vec<u8> {
        self.inode.encode_with_tail(&self.tail().encode())
    }
}

/// A map keyed by inode number, hashed by foldhash's seeded hasher: std's SipHash was a
/// fifth of the mount's scan at 1M inodes (`docs/results.md`, "The mount's scan").
pub(crate) type InoMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;
/// A set of inode numbers, hashed as [`InoMap`].
pub(crate) type InoSet = std::collections::HashSet<u64, foldhash::fast::RandomState>;

/// The inodes in memory by number (`ondemand.rs`: every directory, and every other inode
/// while something holds it), and how many the file system has.
#[derive(Debug, Default)]
pub(crate) struct Ns {
    /// The nodes, boxed: the map keeps about a third of its slots empty and the cache's
    /// count of nodes in it, and an empty slot of a 184-byte node cost its size (97 MiB
    /// of slots at 2M creates, heaptrack), where a box's costs 8 bytes.
    pub(crate) nodes: InoMap<Box<Node>>,
    /// Inodes of the file system, in memory or not, and the spill files of their extended
    /// attributes: the volume's files (`statfs`; [`Volume::file_count`] at mount).
    ///
    /// [`Volume::file_count`]: extalloc::volume::Volume::file_count
    pub(crate) count: u64,
    /// The inodes whose times wait in memory (`attr_dirty`), so that a sync writes them
    /// without walking every inode under the lock (it did: about 40 ns an inode at every
    /// background commit, 0.4 s at 10M files). Holds every such inode; may hold inodes
    /// since written or removed, which a sync passes over.
    pub(crate) dirty_attrs: InoSet,
    /// The kernel's references to inodes whose node was dropped while only those
    /// references held it (`ondemand.rs`, [`Fs::trim_nodes`]): a few bits an inode in a
    /// compressed bitmap where counts are 1 and numbers come in runs (`parked.rs`) instead
    /// of a node's 184 bytes. An inode is here or in `nodes`, never both; a load moves its
    /// count back into the node. Its own mutex, taken under this lock, lets a forget
    /// (this lock held for reading) change it.
    pub(crate) parked: Mutex<Parked>,
}

impl Ns {
    /// Adds the node of an inode just made (or named by a whiteout): one inode more.
    pub(crate) fn add_new(&mut self, ino: u64, node: Node) {
        let before = self.nodes.insert(ino, Box::new(node));
        assert!(before.is_none(), "inode {ino} made twice");
        self.count += 1;
    }

    /// Gives the node map's room back once it is mostly empty (after the kernel forgot a
    /// listing of many inodes, or a trim): its slots are the nodes' memory.
    pub(crate) fn shrink_nodes(&mut self) {
        if self.nodes.capacity() > SHRINK_FROM && self.nodes.len() * 4 < self.nodes.capacity() {
            self.nodes.shrink_to(self.nodes.len() * 2);
        }
        self.parked.get_mut().shrink(SHRINK_FROM);
    }

    /// Marks `ino`'s times as waiting in memory for the next sync, last close or unmount.
    pub(crate) fn times_dirty(&mut self, ino: u64) -> FsResult<()> {
        self.node_mut(ino)?.attr_dirty = true;
        self.dirty_attrs.insert(ino);
        // What the next sync relies on: every node marked dirty is listed.
        debug_assert!(
            self.node(ino).is_ok_and(|n| n.attr_dirty) && self.dirty_attrs.contains(&ino)
        );
        Ok(())
    }

    pub(crate) fn node(&self, ino: u64) -> FsResult<&Node> {
        self.nodes
            .get(&ino)
            .map(|n| &**n)
            .ok_or(Errno(libc::ENOENT))
    }

    pub(crate) fn node_mut(&mut self, ino: u64) -> FsResult<&mut Node> {
        self.nodes
            .get_mut(&ino)
            .map(|n| &mut **n)
            .ok_or(Errno(libc::ENOENT))
    }

    /// Directory `ino`'s state, marked used (`Fs::shelve_dirs`). Its entries may be
    /// shelved: a call that reads them calls `Fs::unshelve` first.
    pub(crate) fn dir(&self, ino: u64) -> FsResult<&DirState> {
        let d = self.node(ino)?.dir.as_deref().ok_or(Errno(libc::ENOTDIR))?;
        d.used.mark();
        Ok(d)
    }

    /// The inode `name` names in directory `parent`.
    pub(crate) fn entry(&self, parent: u64, name: &[u8]) -> FsResult<u64> {
        self.dir(parent)?
            .entries
            .get(name)
            .map(|e| e.ino)
            .ok_or(Errno(libc::ENOENT))
    }

    /// An entry naming inode `ino` (in memory), with its kind.
    pub(crate) fn entry_of(&self, ino: u64) -> FsResult<Entry> {
        Ok(Entry {
            ino,
            kind: Some(self.node(ino)?.inode.kind),
        })
    }
}

/// One open directory handle (`listing.rs`): the directory it lists (which counts it,
/// `Entries::open_lister`, when the listing is of its entries in memory), and, for a
/// listing begun through its run's view, the order it lists in (`runlisting.rs`).
#[derive(Debug, Clone)]
pub(crate) struct DirHandle {
    /// The directory.
    pub(crate) ino: u64,
    /// A listing in the order of a run's hashes (the directory counts no lister for it).
    pub(crate) by_hash: Option<super::runview::ByHash>,
}

/// A file handle's bit: opened for writing.
const HANDLE_WRITES: u64 = 1;
/// A file handle's bit: opened with `O_APPEND`.
const HANDLE_APPENDS: u64 = 2;

/// A file system on a buffered volume (see the module documentation).
pub struct Fs {
    pub(crate) vol: Buffered,
    pub(crate) ns: RwLock<Ns>,
    /// Open directory handles: the directory each lists.
    pub(crate) dir_handles: Mutex<HashMap<u64, DirHandle>>,
    pub(crate) next_fh: AtomicU64,
    /// The atime mode's code (`atime::AtimeMode`, `atime.rs`).
    pub(crate) atime_mode: AtomicU8,
    /// The kernel enforces POSIX ACLs (FUSE_POSIX_ACL): the daemon keeps them and the mode
    /// arithmetic they bring (`xattrs.rs`); without it, ACL names are `EOPNOTSUPP`.
    pub(crate) acls: AtomicBool,
    /// The `syncmode::SyncMode`'s code (`syncmode.rs`: `-o sync`, `-o dirsync`).
    pub(crate) sync_mode: AtomicU8,
    /// Shut down (`shutdown.rs`): every change fails with `EIO`, nothing is written.
    pub(crate) down: AtomicBool,
    /// The fence over the device, for a shutdown (`shutdown.rs`).
    pub(crate) fence: OnceLock<Arc<FenceDevice>>,
    /// Told the inode whose attributes the daemon changed on its own (an atime a read
    /// set): the FUSE layer drops the kernel's cached copy ([`Fs::on_stale_attrs`]).
    pub(crate) stale_attrs: OnceLock<StaleAttrs>,
    /// Directory read-ahead (`dirahead.rs`): the walks of listed directories.
    pub(crate) dir_ahead: Mutex<DirAhead>,
    /// Directory read-ahead is on (the default; [`Fs::set_dir_readahead`]).
    pub(crate) dir_ahead_on: AtomicBool,
    /// Nodes kept in memory beyond those something other than the kernel's references
    /// holds ([`Fs::set_node_cache`], [`Fs::trim_nodes`]).
    pub(crate) node_cache: AtomicUsize,
    /// Bytes of entries kept for directories not used since the last trim
    /// ([`Fs::set_dir_cache`], [`Fs::shelve_dirs`]).
    pub(crate) dir_cache: AtomicUsize,
    /// Inodes pinned by calls under way, and how many pin each (`ondemand.rs`, `Pinned`):
    /// taken after `ns` (or alone), never before it.
    pub(crate) pins: Mutex<InoMap<u32>>,
    /// Direct writes near full and the latch of cached writers that found no room
    /// (`headroom.rs`).
    pub(crate) headroom: super::headroom::Headroom,
    /// Directory adds carry their entries' kinds (`dir/mod.rs`): the device carries
    /// `INCOMPAT_TYPED_ENTRIES` (set at mount, `fs/mod.rs`'s `settle_marks`).
    pub(crate) typed_entries: bool,
    /// A large directory's compaction writes a run (`dir/run.rs`): the device carries
    /// `INCOMPAT_DIR_RUNS` (set at mount, as `typed_entries`).
    pub(crate) dir_runs: bool,
    /// When a directory's log is compacted, and when into a run (`names/compact.rs`).
    pub(crate) compaction: super::compaction::Compaction,
}

/// What [`Fs`] calls with an inode whose attributes the kernel may hold stale.
pub type StaleAttrs = Box<dyn Fn(u64) + Send + Sync>;

impl Fs {
    /// Sets what is told of an inode whose attributes changed without a request that
    /// changed them (an atime a read set): the kernel keeps attributes for as long as a
    /// reply said, so the FUSE layer drops its copy. Set once; a second call is ignored.
    pub fn on_stale_attrs(&self, f: StaleAttrs) {
        if self.stale_attrs.set(f).is_err() {
            log::warn!("the stale-attribute callback is set already");
        }
    }

    /// `ino`'s attributes changed behind the kernel's back (see [`Fs::on_stale_attrs`]).
    /// Called with no lock held: the callback writes to the FUSE device.
    pub(crate) fn attrs_changed(&self, ino: u64) {
        if let Some(f) = self.stale_attrs.get() {
            f(ino);
        }
    }

    /// The buffered volume underneath (figures, checks).
    pub fn volume(&self) -> &Buffered {
        &self.vol
    }

    /// Writes the pending times of `only` (or of every inode).
    ///
    /// The blobs are written under the namespace lock: a copy written after the lock was
    /// let go could carry a link count a namespace change has since replaced (found by
    /// `extalloc torture --fs`: a sync's stale blob undid an unlink's count).
    pub(crate) fn flush_attrs(&self, only: Option<u64>) -> FsResult<()> {
        self.flush_attrs_locked(&mut self.ns_write(), only)
    }

    /// [`Fs::flush_attrs`] with the namespace lock held.
    pub(crate) fn flush_attrs_locked(&self, ns: &mut Ns, only: Option<u64>) -> FsResult<()> {
        let dirty: Vec<u64> = match only {
            // One inode: a lookup, not a scan of every inode (this runs at every close).
            Some(ino) => ns
                .nodes
                .get(&ino)
                .filter(|n| n.attr_dirty)
                .map(|_| ino)
                .into_iter()
                .collect(),
            // The inodes marked, not every inode (`Ns::dirty_attrs`).
            None => std::mem::take(&mut ns.dirty_attrs)
                .into_iter()
                .filter(|ino| ns.nodes.get(ino).is_some_and(|n| n.attr_dirty))
                .collect(),
        };
        for (i, &ino) in dirty.iter().enumerate() {
            if let Err(e) = self.persist(ns, ino) {
                // What was not written stays marked for the next sync.
                ns.dirty_attrs.extend(&dirty[i..]);
                return Err(e);
            }
            debug_assert!(
                ns.nodes.get(&ino).is_none_or(|n| !n.attr_dirty),
                "{ino} written"
            );
        }
        debug_assert!(only.is_some() || ns.nodes.values().all(|n| !n.attr_dirty));
        Ok(())
    }

    /// `stat` of `ino`.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        let ns = self.ns.read();
        self.attr_of(&ns, ino)
    }

    /// `stat` of `ino` asked through the open file `fh` (the kernel asks so before it
    /// takes a write into its cache, when the attributes it holds have expired): `EPERM`
    /// for a file opened for writing that is immutable now (`chattr +i` after the open),
    /// or opened for writing without `O_APPEND` and append-only now (`chattr +a`), which
    /// the kernel then answers the `write(2)` with, as ext4 refuses it. The kernel never
    /// caches such a file's attributes (`Fs::attr_ttl`), so it asks before every write
    /// it would cache. `lseek(SEEK_END)` and reads past the cached size through that
    /// handle get the same answer (ext4 would serve them): the kernel's question does not
    /// say which call asks. Through a handle opened for writing, `ENOSPC` while a write
    /// back of the file's cached data found no room and the device is still nearly full
    /// (`headroom.rs`).
    pub fn getattr_through(&self, ino: u64, fh: Option<u64>) -> FsResult<Attr> {
        let a = self.getattr(ino)?;
        let flags = a.inode.flags;
        let refused = match fh {
            Some(fh) if fh & HANDLE_WRITES != 0 => {
                flags & crate::inode::IMMUTABLE != 0
                    || (flags & crate::inode::APPEND != 0 && fh & HANDLE_APPENDS == 0)
            }
            _ => false,
        };
        if refused {
            return Err(Errno(libc::EPERM));
        }
        if fh.is_some_and(|fh| fh & HANDLE_WRITES != 0) {
            self.check_headroom(ino)?;
        }
        Ok(a)
    }

    /// How long the kernel may keep `a`: not at all for an immutable or append-only
    /// regular file (the kernel does not know the flags; asking for the attributes before
    /// each cached write is where the daemon refuses it, [`Fs::getattr_through`]), `ttl`
    /// otherwise.
    pub fn attr_ttl(a: &Attr, ttl: std::time::Duration) -> std::time::Duration {
        let fixed = crate::inode::IMMUTABLE | crate::inode::APPEND;
        if a.inode.kind == Kind::File && a.inode.flags & fixed != 0 {
            std::time::Duration::ZERO
        } else {
            ttl
        }
    }

    /// A new open file handle for an open with `open(2)`'s `flags` (`None`: a directory):
    /// a number never handed out before, whose low bits say whether it was opened for
    /// writing and with `O_APPEND` ([`Fs::getattr_through`]).
    pub(crate) fn handle(&self, flags: Option<i32>) -> u64 {
        let n = self.next_fh.fetch_add(1, Ordering::Relaxed);
        debug_assert!(n < 1 << 62, "file handles exhausted");
        let f = flags.unwrap_or(libc::O_RDONLY);
        let writes = f & libc::O_ACCMODE != libc::O_RDONLY;
        let appends = f & libc::O_APPEND != 0;
        (n << 2) | if writes { HANDLE_WRITES } else { 0 } | if appends { HANDLE_APPENDS } else { 0 }
    }

    pub(crate) fn attr_of(&self, ns: &Ns, ino: u64) -> FsResult<Attr> {
        let n = ns.node(ino)?;
        let bs = self.vol.volume().block_size();
        // Data still in the cache has no blocks yet: the blocks reserved for it count.
        let (file_size, blocks) = self.vol.size_and_blocks(ino)?;
        let size = match &n.dir {
            // A directory's size: its live log, in blocks (the log's file is sparse).
            Some(d) => (d.log_bytes - d.log_start).div_ceil(bs).max(1) * bs,
            None => file_size,
        };
        let allocated = bs * blocks;
        Ok(Attr {
            ino,
            inode: n.inode,
            size,
            allocated,
        })
    }

    /// Writes `ino`'s attributes to the volume now. An inode no name reaches (link count
    /// 0: unlinked while held, or an `O_TMPFILE` file never named) is instead a pending
    /// file on the volume, and so is its spill file (`Fs::retract`, `pending.rs`): its node is its
    /// whole state until it is removed, and a crash leaves it for the volume's open to
    /// remove (no orphan for the mount to find).
    pub(crate) fn persist(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        let n = ns.node(ino)?;
        if n.inode.nlink == 0 {
            self.retract(ns, ino)?;
        } else {
            let blob = n.blob();
            self.vol.set_attr(ino, &blob)?;
        }
        // Clean only once written: a failed write leaves the times for the next try.
        let n = ns.node_mut(ino)?;
        n.attr_dirty = false;
        // Paired with the read back (`ondemand.rs`): a named inode's blob on the volume
        // is its node's now.
        debug_assert!(
            n.inode.nlink == 0 || self.vol.volume().attr(ino).is_ok_and(|b| b == n.blob()),
            "inode {ino} persisted"
        );
        Ok(())
    }

    /// Removes `ino` from the volume if nothing names, opens or remembers it any more;
    /// else, if nothing holds its node ([`Node::droppable`]), drops the node from memory
    /// (`ondemand.rs`: the next call naming it reads it back).
    /// An inode not in memory whose parked references ([`Ns::parked`]) are all forgotten
    /// leaves the parked set.
    pub(crate) fn reap(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        let Some(n) = ns.nodes.get(&ino) else {
            // A parked count leaves as it reaches 0 (`Parked::forget`).
            debug_assert!(!ns.parked.get_mut().contains(ino) || ns.parked.get_mut().count(ino) > 0);
            return Ok(());
        };
        let unheld = n.open == 0 && n.lookups.get() == 0;
        if unheld {
            // No handle is left to ask through: a late write back's latch goes with it.
            self.headroom.unmark(ino);
        }
        if unheld && n.inode.nlink == 0 {
            self.remove_inode(ns, ino)?;
        } else if n.droppable() && !self.pinned(ino) {
            ns.nodes.remove(&ino);
            ns.shrink_nodes();
        }
        Ok(())
    }

    /// Unlinks `ino`'s volume file, then its extended attributes' spill file (both
    /// pending since its last name went, [`Fs::persist`]: a crash between the two leaves
    /// the spill file for the volume's open to remove), and forgets it.
    pub(super) fn remove_inode(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        let spill = ns.node(ino)?.spill;
        debug_assert_eq!(
            ns.node(ino)?.inode.nlink,
            0,
            "only an inode no name refers to"
        );
        self.vol.unlink(ino)?;
        ns.nodes.remove(&ino);
        assert!(
            ns.count > 0,
            "inode {ino} removed from an empty file system"
        );
        ns.count -= 1;
        if let Some(s) = spill {
            self.vol.uncached(s).unlink(s)?;
            assert!(ns.count > 0, "spill file {s} of inode {ino} not counted");
            ns.count -= 1;
        }
        Ok(())
    }

    /// Number of inodes (for `statfs`): the volume's files, each spill file of extended
    /// attributes among them (`xattrs.rs`: a set too large for the inode's blob).
    pub fn inodes(&self) -> u64 {
        self.ns.read().count
    }
}

/// A directory node loaded from its log; `kind` gives each entry's kind (the inode's, when
/// known: [`Entry`]), else the log's ([`entries_of`]).
pub(crate) fn dir_node(
    inode: Inode,
    log: &DirLog,
    parent: u64,
    kind: impl Fn(u64) -> Option<Kind>,
) -> Node {
    let entries = entries_of(log, kind);
    Node {
        inode,
        dir: Some(Box::new(DirState {
            entries,
            parent,
            log_bytes: log.valid_bytes,
            log_start: log.start,
            live: crate::dir::live_bytes(log.entries.keys()),
            run_live: log.run_live,
            mapped_to: 0,
            used: Used::default(),
            view: None,
        })),
        ..Node::plain(inode)
    }
}

/// A log's entries in memory, each with its kind from `kind` (the inode's, when known),
/// else the kind its add carried (`dir/mod.rs`), else none.
pub(crate) fn entries_of(log: &DirLog, kind: impl Fn(u64) -> Option<Kind>) -> Entries {
    (log.entries.iter())
        .map(|(name, &(ino, logged))| {
            (
                name.as_slice(),
                Entry {
                    ino,
                    kind: kind(ino).or(logged),
                },
            )
        })
        .collect()
}
