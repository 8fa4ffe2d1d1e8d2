//! Inodes in memory only while something holds them (`docs/format.md`, "Next", step 5).
//!
//! The namespace keeps the node of every directory a name has reached since the mount (its
//! entries and parent), and any other inode's node only while something holds it: the
//! kernel (a lookup not yet forgotten), an open file, times pending in memory, an unlink
//! while held (link count 0), an unnamed tmpfile, a rewrite or a recent fsync to act on
//! ([`Node::droppable`]). After a clean close the mount keeps the root only (after a crash
//! its whole read keeps every directory); when the last holder lets go, [`Fs::reap`] drops
//! a node; a call that names an inode not in memory reads it back from its attribute blob
//! (and its extended attributes' spill file; a directory's entries from its log), which is
//! then its whole state. A directory comes back only through a name ([`Fs::load_named`]),
//! which gives its parent: every directory in memory was reached through its parent, so
//! its ancestors are in memory too. A node only the
//! kernel holds ([`Node::parkable`]) is dropped too once more nodes than the node cache's
//! count are in memory ([`Fs::trim_nodes`], at each sync, and between syncs once past the
//! cache's slack, [`Fs::trim_overshoot`]): its lookup count stays, parked
//! in [`Ns::parked`] (16 bytes and a slot's overhead instead of a 184-byte node), and
//! moves back into the node when it is read back. A directory's node stays, but its
//! entries, which grow with its files, are let go ([`Fs::shelve_dirs`], at each sync) when
//! no call used it since the last sync and the entries in memory exceed the directory
//! cache; a call that needs them reads its log back first ([`Fs::unshelve`]: lookup,
//! listing, every namespace change, the rename's write-back check, a parent's search).
//!
//! Who reads nodes back: a lookup of a name, `readdirplus` for the entries it may return,
//! unlink, rmdir, rename and link for the inodes they change (with the namespace lock held
//! for writing), and every call naming an inode by number ([`Fs::ensure_loaded`]: the
//! kernel names only inodes it holds, which are in memory; a caller of this API that
//! names others gets them read back; so does a file handle kept across a remount: a
//! directory no name has reached since the mount has its parent found first by a walk from
//! the root, [`Fs::find_parent`]).
//! Damage met by a read back is logged, costs the call that name only, and marks the
//! store for the next mount's whole read (`Store::mark_damaged`).
//!
//! Data structures: none of their own (`Ns::nodes`, `Ns::parked`, `Ns::count`).
//! Invariant: a node not in memory is one whose attribute blob (and a directory's log) on
//! the volume is what its node would hold; a shelved directory's log replays to as many
//! entries, of as many record bytes, as it let go (asserted at the read back), and no
//! call reads a shelved directory's entries (each accessor asserts it: `entries.rs`); a
//! directory pinned by a call under way is not shelved; a directory in memory has its parent in memory
//! (the root is its own); an inode is in `nodes` or `parked`, never both, and a
//! parked one is named (parking needs a link count above 0, and every call that unnames
//! an inode reads it back first); a node is read back and inserted with the namespace
//! lock held for writing, so no namespace change falls between the read and the insert;
//! only [`Fs::reap`] (after the kernel's last reference or the last close) and
//! [`Fs::trim_nodes`] drop one, with the lock held for writing.
//! Lock order: `ns` (written) -> the volume's locks, as every namespace change.

use super::core::{dir_node, Errno, Fs, FsResult, Node, Ns, Refs};
use super::runlookup::viewed_node;
use super::scan::{self, NamespaceReport};
use crate::inode::{self, Inode, Kind};
use crate::xattr::{self, Tail};
use extalloc::volume::Volume;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;

/// An unlink of a regular file fsync'd less than this ago is committed before its reply
/// (the background commit's default interval). A database's rollback journal is written,
/// fsync'd and unlinked, and the unlink is its commit point: SQLite then fsyncs the
/// directory, but takes a directory it cannot open as synced, which is what it meets when
/// the daemon dies right after the unlink (the mount is gone, the program goes on), and
/// the next open rolls back a transaction it reported committed. ext4 needs no such rule:
/// a crash that loses the unlink ends the program too. Files fsync'd longer ago (a build
/// tree, old objects) are unlinked as before, committed with the next commit.
pub(crate) const SYNCED_UNLINK_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// The volume's file cache over the node cache: a node is its file's attribute blob
/// decoded, and a node read back from a file the volume still holds costs that decode and
/// no read, so the file system keeps an eighth as many (a node cache as large as the file
/// cache held every clean file twice: 52 MiB of nodes beside the files' 110 at 262,144
/// files; `docs/results.md`, "The daemon's memory at 2M").
pub const NODE_CACHE_SHARE: usize = 8;

/// The least overshoot of a cache that [`Fs::trim_overshoot`] trims between syncs.
pub const TRIM_SLACK_MIN: usize = 1024;

/// Bytes of directory entries kept in memory per file of the volume's file cache, for
/// directories not used since the last trim ([`Fs::shelve_dirs`]): 64 MiB with the default
/// cache of 262,144 files, about 3M entries of 8-byte names (an entry takes about 21
/// bytes: `entries.rs`).
pub const DIR_CACHE_BYTES_PER_FILE: usize = 256;

impl Node {
    /// Nothing in the node but the kernel's references holds what it is (a call under way
    /// may still: [`Fs::pinned`]): not a directory, not open, no times pending, named (an unlinked node stays until removed),
    /// not an unnamed tmpfile, no rewrite or recent fsync to act on (an unlink within
    /// `SYNCED_UNLINK_WINDOW` of an fsync commits before its reply: such a node stays, until
    /// a later trim or reap finds its window over). Its attribute blob is then its whole
    /// state, and [`Fs::trim_nodes`] may park its lookup count and drop it.
    pub(crate) fn parkable(&self) -> bool {
        self.dir.is_none()
            && self.open == 0
            && !self.attr_dirty
            && self.inode.nlink > 0
            && !self.tmpfile
            && !self.rewritten
            && self
                .synced
                .is_none_or(|t| t.elapsed() >= SYNCED_UNLINK_WINDOW)
    }

    /// Parkable and not known to the kernel either: [`Fs::reap`] drops it at once.
    pub(crate) fn droppable(&self) -> bool {
        self.parkable() && self.lookups.get() == 0
    }
}

/// Inode `ino`'s node as `vol` holds it, for an inode not in memory: a directory's with
/// its entries replayed from its log (or, for a log that is a run and its changes, shelved
/// with a view of the run: `runview.rs`) and `parent` as its parent (`None`: not known, and a
/// directory is then `EISDIR`, for the caller to find its parent: [`Fs::load_into`]),
/// its entries' kinds from `known` (the nodes in memory), else from their add records,
/// else not known yet (`Entry`).
/// `ENOENT` if there is no such inode, `EIO` if its blob, its log or its extended
/// attributes are damaged (logged, with what to run). A log with a torn tail is cut, one
/// parsed over damage rewritten (`scan::fix_log`), as the mount's repair did.
pub(crate) fn read_node(
    vol: &Volume,
    ino: u64,
    parent: Option<u64>,
    known: impl Fn(u64) -> Option<Kind>,
) -> FsResult<Node> {
    let blob = vol.attr(ino).map_err(|e| {
        if !matches!(e, extalloc::Error::NoSuchFile { .. }) {
            vol.store().mark_damaged(); // its leaf failed: as damage below
        }
        Errno::from(e)
    })?;
    // Damage: the next mount reads the whole namespace and repairs what it can, as after
    // a crash (`Store::mark_damaged`); `fsck --repair` does the rest.
    let damaged = |what: &str| {
        log::error!("inode {ino}: {what}: run `extalloc fsck`");
        vol.store().mark_damaged();
        Errno(libc::EIO)
    };
    let inode = Inode::decode(&blob).ok_or_else(|| damaged("its blob is not an inode"))?;
    let mut node = match (inode.kind, parent) {
        // Its parent is to be found first (`Fs::find_parent`).
        (Kind::Dir, None) => return Err(Errno(libc::EISDIR)),
        (Kind::Dir, Some(parent)) if let Some(node) = viewed_node(vol, ino, inode, parent) => node,
        (Kind::Dir, Some(parent)) => {
            let mut found = NamespaceReport::default();
            let mut log = scan::read_log(vol, ino, false, &mut found)
                .map_err(|e| damaged(&format!("its entry log cannot be read ({e})")))?;
            if let Some(problem) = found.logs.first() {
                log::warn!(
                    "{problem}: the log is cut or rewritten; `extalloc fsck` checks the rest"
                );
                // What the damage cut from the log comes back at the next mount's whole read.
                vol.store().mark_damaged();
                scan::fix_log(vol, ino, &mut log)
                    .map_err(|e| damaged(&format!("its entry log cannot be repaired ({e})")))?;
            }
            dir_node(inode, &log, parent, known)
        }
        _ => Node::plain(inode),
    };
    match Tail::decode(inode::tail(&blob)) {
        None => return Err(damaged("its blob's tail does not decode")),
        Some(Tail::None) => {}
        Some(Tail::Inline(set)) => node.xattrs = set,
        Some(Tail::Spill(id)) => {
            let data = vol.read(id, 0, vol.size(id)?)?;
            node.xattrs = xattr::read_spill(&data)
                .ok_or_else(|| damaged("its extended attributes fail their checksum"))?;
            node.spill = Some(id);
        }
    }
    debug_assert!(
        node.dir.is_some() || node.droppable(),
        "a node read back is held by nothing yet"
    );
    Ok(node)
}

impl Fs {
    /// Reads `ino`'s node back into `ns` unless it is there (the lock held for writing),
    /// with the kernel's references parked for it ([`Ns::parked`]); a directory only with
    /// its `parent` known ([`read_node`]). On an error `ns` is unchanged.
    pub(crate) fn load_with(&self, ns: &mut Ns, ino: u64, parent: Option<u64>) -> FsResult<()> {
        if !ns.nodes.contains_key(&ino) {
            let known = |i: u64| ns.nodes.get(&i).map(|n| n.inode.kind);
            let mut node = read_node(self.vol.volume(), ino, parent, known)?;
            let refs = ns.parked.get_mut().take(ino);
            if refs > 0 {
                node.lookups = Refs::new(refs);
            }
            ns.nodes.insert(ino, Box::new(node));
        }
        debug_assert!(ns.nodes.contains_key(&ino) && !ns.parked.get_mut().contains(ino));
        Ok(())
    }

    /// [`Fs::load_with`] for an inode named by number. The kernel names by number what a
    /// name reached, which read it back, except through a file handle kept across a
    /// remount: a directory not in memory then needs its parent found first
    /// ([`Fs::find_parent`]).
    pub(crate) fn load_into(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        let loaded = match self.load_with(ns, ino, None) {
            Err(Errno(libc::EISDIR)) => {
                let parent = self.find_parent(ns, ino)?;
                self.load_with(ns, ino, Some(parent))
            }
            other => other,
        };
        assert!(
            loaded.is_err() || ns.nodes.contains_key(&ino),
            "inode {ino} read back"
        );
        loaded
    }

    /// The directory that names directory `ino`, for a directory named by number that no
    /// name has reached since the mount (a file handle across a remount): searched breadth
    /// first from the root through the directories' entries, reading back the
    /// directories on the way, as a walk from the root would (an entry whose kind is not
    /// known yet costs a read of its inode's blob, and a directory's search stops once its
    /// link count's subdirectories are found). `ENOENT` if no directory names it. A walk
    /// of the namespace, once: afterwards the directory is in memory.
    fn find_parent(&self, ns: &mut Ns, ino: u64) -> FsResult<u64> {
        let mut queue = std::collections::VecDeque::from([super::core::ROOT]);
        let mut seen = super::core::InoSet::default();
        while let Some(d) = queue.pop_front() {
            if !seen.insert(d) {
                continue;
            }
            self.unshelve(ns, d)?;
            let dir = ns.dir(d)?;
            if dir.entries.values().any(|e| e.ino == ino) {
                // Every directory in memory has its parent in memory: `d` came by its name.
                debug_assert!(ns.dir(ns.dir(d)?.parent).is_ok(), "{d}'s parent in memory");
                return Ok(d);
            }
            let entries: Vec<(Vec<u8>, super::core::Entry)> =
                (dir.entries.iter()).map(|(n, e)| (n.to_vec(), e)).collect();
            let mut subdirs = ns.node(d)?.inode.nlink.saturating_sub(2);
            for (name, e) in entries {
                if subdirs == 0 {
                    break;
                }
                let kind = match (e.kind, ns.nodes.get(&e.ino)) {
                    (Some(k), _) => Some(k),
                    (None, Some(n)) => Some(n.inode.kind),
                    (None, None) => (self.vol.volume().attr(e.ino).ok())
                        .and_then(|b| Inode::decode(&b))
                        .map(|i| i.kind),
                };
                if kind == Some(Kind::Dir) {
                    subdirs -= 1;
                    if self.load_named(ns, d, &name).is_ok() {
                        queue.push_back(e.ino);
                    }
                }
            }
        }
        Err(Errno(libc::ENOENT))
    }

    /// Reads back the inode `name` names in directory `parent` (in memory), a directory
    /// with `parent` as its parent, and notes its kind in the entry; returns the inode.
    /// On an error `ns` is unchanged.
    pub(crate) fn load_named(&self, ns: &mut Ns, parent: u64, name: &[u8]) -> FsResult<u64> {
        self.unshelve(ns, parent)?;
        let ino = ns.entry(parent, name)?;
        self.load_with(ns, ino, Some(parent))?;
        let kind = ns.node(ino)?.inode.kind;
        let d = (ns.nodes.get_mut(&parent).and_then(|n| n.dir.as_mut()))
            .expect("the parent named it a moment ago");
        debug_assert!(
            (d.entries.get(name)).is_some_and(|e| e.kind.is_none_or(|k| k == kind)),
            "an entry's kind is its inode's"
        );
        let set = d.entries.set_kind(name, Some(kind));
        assert!(set, "the entry just read");
        if let Some(dir) = ns.node(ino)?.dir.as_ref() {
            assert_eq!(
                dir.parent, parent,
                "directory {ino} read back under another parent"
            );
        }
        Ok(ino)
    }

    /// Sets how many nodes the file system keeps in memory beyond those something other
    /// than the kernel's references holds (by default an eighth of
    /// `extalloc::volume::DEFAULT_FILE_CACHE`, [`NODE_CACHE_SHARE`]; the mount's
    /// `--file-cache` sets it with the volume's). Takes effect at the next [`Fs::sync`]
    /// (the background commit's). 0 keeps only what must stay.
    pub fn set_node_cache(&self, nodes: usize) {
        self.node_cache.store(nodes, Ordering::Relaxed);
    }

    /// Drops nodes that only the kernel's references hold (`Node::parkable`, and not
    /// pinned by a call under way) until at most the node cache's count of nodes stays in
    /// memory, parking each one's lookup count (`Ns::parked`); the next call that names one
    /// reads it back. After a create
    /// storm the kernel holds every inode made, and a node each was the daemon's memory
    /// (1,103 MiB after 1M creates). Victims are taken in the map's order, which is
    /// arbitrary: a node dropped and named again costs one read of its blob. Walks the
    /// nodes in memory (only when more than the cache holds); returns how many it dropped.
    pub fn trim_nodes(&self) -> usize {
        let limit = self.node_cache.load(Ordering::Relaxed);
        let mut ns = self.ns_write();
        let Some(excess) = ns.nodes.len().checked_sub(limit).filter(|&e| e > 0) else {
            return 0;
        };
        let pins = self.pins.lock();
        let victims: Vec<u64> = (ns.nodes.iter())
            .filter(|(ino, n)| n.parkable() && !pins.contains_key(ino))
            .map(|(&ino, _)| ino)
            .take(excess)
            .collect();
        drop(pins);
        let before = (ns.nodes.len(), ns.parked.get_mut().len());
        for &ino in &victims {
            let node = ns.nodes.remove(&ino).expect("a victim is in memory");
            if node.lookups.get() > 0 {
                ns.parked.get_mut().park(ino, node.lookups.get());
            }
        }
        ns.shrink_nodes();
        assert_eq!(
            ns.nodes.len(),
            before.0 - victims.len(),
            "each victim left once"
        );
        debug_assert!(ns.parked.get_mut().len() <= before.1 + victims.len() as u64);
        victims.len()
    }

    /// Between syncs (the background thread's check, every second): trims the volume's
    /// clean files (`Volume::trim_file_cache`) and the nodes only the kernel holds
    /// ([`Fs::trim_nodes`]) when either holds more than its slack (a quarter of the cache,
    /// at least [`TRIM_SLACK_MIN`]) past its cache's count, or past what `kept` says
    /// the last such trim left (files dirty
    /// or in use, nodes the kernel does not hold alone: a storm's, until its sync), so
    /// a trim that can do nothing is not repeated every second; sets `kept` to what each
    /// trim left (the caller resets it after a sync). A walk reads back 20-40 thousand
    /// inodes a second, about 620 bytes each; trimmed only at the sync, the peak held five
    /// seconds of them. Returns how many files and nodes it dropped.
    pub fn trim_overshoot(&self, kept: &mut (usize, usize)) -> (usize, usize) {
        let vol = self.vol.volume();
        let mut files = 0;
        let file_limit = vol.file_cache_limit().max(kept.0);
        let (held, _, evicted) = vol.file_cache_figures();
        if over_slack(held, file_limit) {
            files = vol.trim_file_cache();
            let (now, _, evicted_now) = vol.file_cache_figures();
            kept.0 = now;
            // Other trims may run beside this one: the count only grows by at least ours.
            assert!(
                evicted_now - evicted >= files as u64,
                "every file dropped counted"
            );
        }
        let mut nodes = 0;
        let node_limit = self.node_cache.load(Ordering::Relaxed).max(kept.1);
        if over_slack(self.ns.read().nodes.len(), node_limit) {
            nodes = self.trim_nodes();
            kept.1 = self.ns.read().nodes.len();
        }
        (files, nodes)
    }

    /// Sets how many bytes of entries the file system keeps for directories no call used
    /// since the last trim (by default [`DIR_CACHE_BYTES_PER_FILE`] per file of
    /// `extalloc::volume::DEFAULT_FILE_CACHE`; the mount's `--file-cache` sets it with the
    /// others). Takes effect at the next [`Fs::sync`]. 0 shelves every directory no call
    /// under way holds, used or not, at each sync (the unit tests' setting).
    pub fn set_dir_cache(&self, bytes: usize) {
        self.dir_cache.store(bytes, Ordering::Relaxed);
    }

    /// Lets go of the entries of directories no call used since the last trim while the
    /// entries in memory take more than the directory cache's bytes ([`Fs::set_dir_cache`]):
    /// each one's log holds them, and the next call that needs them reads it back
    /// (`Fs::unshelve`). The node stays (its parent, its log's bounds, the kernel's
    /// references): only the entries go, which grow with the files. A directory a call
    /// under way pinned keeps them; one used since the last trim keeps them too (a create
    /// storm over a thousand directories reads none back), unless the cache is 0. Returns
    /// how many directories it shelved.
    pub fn shelve_dirs(&self) -> usize {
        let limit = self.dir_cache.load(Ordering::Relaxed);
        let mut ns = self.ns_write();
        let pins = self.pins.lock();
        let mut held = 0usize;
        let mut victims = Vec::new();
        let mut unviewed = Vec::new();
        for (&ino, node) in &ns.nodes {
            let Some(d) = node.dir.as_deref() else {
                continue;
            };
            let used = d.used.take();
            if d.entries.shelved().is_some() {
                // A run's view no call used since the last trim goes too (`runview.rs`):
                // the next lookup makes it again.
                if d.view.is_some() && !used && !pins.contains_key(&ino) {
                    unviewed.push(ino);
                }
                continue;
            }
            let bytes = d.entries.heap_bytes();
            held += bytes;
            // A directory an open handle lists keeps its entries where they are: the
            // handle's positions are offsets in them (`listing.rs`).
            if !pins.contains_key(&ino) && (!used || limit == 0) && d.entries.listers() == 0 {
                victims.push((ino, bytes));
            }
        }
        drop(pins);
        for ino in unviewed {
            let d = (ns.nodes.get_mut(&ino).and_then(|n| n.dir.as_deref_mut()))
                .expect("a viewed directory is in memory");
            let view = d.view.take();
            debug_assert!(
                view.is_some() && d.shelved(),
                "a shelved directory's view let go"
            );
        }
        let mut shelved = 0;
        for (ino, bytes) in victims {
            if held <= limit && limit > 0 {
                break;
            }
            let d = (ns.nodes.get_mut(&ino).and_then(|n| n.dir.as_deref_mut()))
                .expect("a victim is a directory in memory");
            let freed = d.entries.shelve();
            debug_assert_eq!(freed, bytes, "directory {ino}'s entries as counted");
            held -= freed;
            shelved += 1;
        }
        shelved
    }

    /// Reads back the entries of directory `dir` (in memory) from its log if they were
    /// shelved ([`Fs::shelve_dirs`]), and marks it used; nothing for an inode that is not
    /// a directory in memory (the caller's own checks find it). Each entry's kind is its
    /// node's when that is in memory, else its add record's (`dir/mod.rs`), else not known
    /// yet. `EIO` if the log cannot be read, no longer checks or no longer gives the count,
    /// record bytes and end that were let go (logged, the store marked damaged: it held
    /// these entries when they were let go); the entries stay shelved then.
    pub(crate) fn unshelve(&self, ns: &mut Ns, dir: u64) -> FsResult<()> {
        let Some(d) = ns.nodes.get(&dir).and_then(|n| n.dir.as_deref()) else {
            return Ok(());
        };
        d.used.mark();
        let Some(count) = d.entries.shelved() else {
            return Ok(());
        };
        let vol = self.vol.volume();
        let mut found = NamespaceReport::default();
        let (live, log_bytes) = (d.live, d.log_bytes);
        // The log written as the entries changed gives back what was let go, unless it
        // changed since behind the mount's back in a way no checksum sees (a stale or
        // rewritten block): damage, not a broken invariant.
        let log = scan::read_log(vol, dir, false, &mut found).and_then(|log| {
            let (n, bytes) = (
                log.entries.len(),
                crate::dir::live_bytes(log.entries.keys()),
            );
            match &log.problem {
                Some(p) => Err(p.clone()),
                None if (n, bytes, log.valid_bytes) != (count, live, log_bytes) => Err(format!(
                    "{n} entries of {bytes} bytes as records in {} bytes of log, where {count} \
                     of {live} in {log_bytes} were let go",
                    log.valid_bytes
                )),
                None => Ok(log),
            }
        });
        let log = log.map_err(|e| {
            log::error!(
                "directory {dir}: its entry log read back fails ({e}): run `extalloc fsck`"
            );
            vol.store().mark_damaged();
            Errno(libc::EIO)
        })?;
        let entries = super::core::entries_of(&log, |i| ns.nodes.get(&i).map(|n| n.inode.kind));
        let d = (ns.nodes.get_mut(&dir).and_then(|n| n.dir.as_deref_mut())).expect("checked above");
        debug_assert_eq!(entries.len(), count, "directory {dir}: entries read back");
        d.entries = entries;
        d.view = None;
        Ok(())
    }

    /// Reads back the nodes of `inos` not in memory, for a call that names them by number,
    /// and pins those in memory until the returned guard drops, so that no trim
    /// ([`Fs::trim_nodes`]) or reap drops one between this and the call's own lock. One
    /// that does not exist is left for the call to find missing (`ENOENT`). Drop the guard
    /// with no namespace lock held (it takes the lock for reading).
    pub(crate) fn ensure_loaded(&self, inos: &[u64]) -> FsResult<Pinned<'_>> {
        {
            let ns = self.ns.read();
            if inos.iter().all(|i| ns.nodes.contains_key(i)) {
                return Ok(Pinned::new(self, &ns, inos));
            }
        }
        let mut ns = self.ns_write();
        for &ino in inos {
            match self.load_into(&mut ns, ino) {
                Ok(()) | Err(Errno(libc::ENOENT)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Pinned::new(self, &ns, inos))
    }

    /// [`Fs::ensure_loaded`] for the entries `names` of directory `dir` (a listing's): each
    /// read back through its name ([`Fs::load_named`]), so directories among them come
    /// back too. A name gone or naming another inode since is passed over (the listing
    /// leaves it out); the inodes whose read failed otherwise (damage, an I/O error:
    /// logged) are returned, for the listing to give without attributes.
    pub(crate) fn ensure_loaded_in(
        &self,
        dir: u64,
        names: &[(&[u8], u64)],
    ) -> FsResult<(Pinned<'_>, Vec<u64>)> {
        let mut ns = self.ns_write();
        self.unshelve(&mut ns, dir)?;
        let mut failed = Vec::new();
        for &(name, ino) in names {
            if ns.nodes.contains_key(&ino) || ns.entry(dir, name) != Ok(ino) {
                continue;
            }
            match self.load_named(&mut ns, dir, name) {
                Ok(_) | Err(Errno(libc::ENOENT)) => {}
                Err(_) => failed.push(ino),
            }
        }
        let inos: SmallVec<[u64; 2]> = names.iter().map(|n| n.1).collect();
        Ok((Pinned::new(self, &ns, &inos), failed))
    }
}

/// Nodes a call named by number, pinned in memory while it runs ([`Fs::ensure_loaded`]):
/// neither a trim nor a reap drops a pinned node ([`Fs::pinned`]). The counts live in
/// their own map under their own mutex, not in the nodes, so that the guard's drop takes
/// no namespace lock: a caller may still hold one then (a temporary of a function's tail
/// expression outlives its locals), and a second read of `ns` behind a waiting writer
/// deadlocks (the mount tests' fsx found that). A node removed meanwhile (its last name
/// unlinked by another call) keeps its count here until the guard drops.
#[must_use = "the nodes stay pinned only while this lives"]
pub(crate) struct Pinned<'a> {
    fs: &'a Fs,
    inos: SmallVec<[u64; 2]>,
}

impl<'a> Pinned<'a> {
    /// Pins the nodes of `inos` that `ns` holds (`ns` held, so none leaves meanwhile).
    fn new(fs: &'a Fs, ns: &Ns, inos: &[u64]) -> Pinned<'a> {
        let inos: SmallVec<[u64; 2]> = (inos.iter())
            .filter(|&&ino| ns.nodes.contains_key(&ino))
            .copied()
            .collect();
        if !inos.is_empty() {
            let mut pins = fs.pins.lock();
            for &ino in &inos {
                let n = pins.entry(ino).or_insert(0);
                assert!(*n < u32::MAX, "inode {ino} pinned by too many calls");
                *n += 1;
            }
        }
        Pinned { fs, inos }
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        if self.inos.is_empty() {
            return;
        }
        let mut pins = self.fs.pins.lock();
        for ino in &self.inos {
            let n = pins.get_mut(ino).expect("a pinned inode has a count");
            assert!(*n > 0, "inode {ino} unpinned more than pinned");
            *n -= 1;
            if *n == 0 {
                pins.remove(ino);
            }
        }
    }
}

impl Fs {
    /// A call under way pinned `ino` ([`Pinned`]): it stays in memory.
    pub(crate) fn pinned(&self, ino: u64) -> bool {
        self.pins.lock().contains_key(&ino)
    }
}

/// Whether `held` entries overshoot a cache of `limit` by more than its slack between
/// syncs: a quarter of the cache, and at least [`TRIM_SLACK_MIN`] (a small cache is not
/// trimmed every second for a few entries).
fn over_slack(held: usize, limit: usize) -> bool {
    held > limit + (limit / 4).max(TRIM_SLACK_MIN)
}
