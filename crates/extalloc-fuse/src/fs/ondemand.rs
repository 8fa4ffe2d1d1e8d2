//! Inodes in memory only while something holds them (`docs/format.md`, "Next", step 5).
//!
//! The namespace keeps every directory's node (its entries and parent), and any other
//! inode's node only while something holds it: the kernel (a lookup not yet forgotten),
//! an open file, times pending in memory, an unlink while held (link count 0), an unnamed
//! tmpfile, a rewrite or a recent fsync to act on ([`Node::droppable`]). The mount keeps
//! the directories only; when the last holder lets go, [`Fs::reap`] drops the node; a
//! call that names an inode not in memory reads it back from its attribute blob (and its
//! extended attributes' spill file), which is then its whole state. A node only the
//! kernel holds ([`Node::parkable`]) is dropped too once more nodes than the node cache's
//! count are in memory ([`Fs::trim_nodes`], at each sync): its lookup count stays, parked
//! in [`Ns::parked`] (16 bytes and a slot's overhead instead of a 184-byte node), and
//! moves back into the node when it is read back.
//!
//! Who reads nodes back: a lookup of a name, `readdirplus` for the entries it may return,
//! unlink, rmdir, rename and link for the inodes they change (with the namespace lock held
//! for writing), and every call naming an inode by number ([`Fs::ensure_loaded`]: the
//! kernel names only inodes it holds, which are in memory; a caller of this API that
//! names others gets them read back).
//!
//! Data structures: none of their own (`Ns::nodes`, `Ns::parked`, `Ns::count`).
//! Invariant: a node not in memory is a non-directory whose attribute blob on the volume
//! is what its node would hold; an inode is in `nodes` or `parked`, never both, and a
//! parked one is named (parking needs a link count above 0, and every call that unnames
//! an inode reads it back first); a node is read back and inserted with the namespace
//! lock held for writing, so no namespace change falls between the read and the insert;
//! only [`Fs::reap`] (after the kernel's last reference or the last close) and
//! [`Fs::trim_nodes`] drop one, with the lock held for writing.
//! Lock order: `ns` (written) -> the volume's locks, as every namespace change.

use super::core::{Errno, Fs, FsResult, Node, Ns};
use crate::inode::{self, Inode, Kind};
use crate::xattr::{self, Tail};
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

impl Fs {
    /// Inode `ino`'s node as the volume holds it, for an inode not in memory: `ENOENT` if
    /// there is no such inode, or it is a directory (every directory the namespace reaches
    /// is in memory), `EIO` if its blob or extended attributes are damaged (logged).
    fn read_node(&self, ino: u64) -> FsResult<Node> {
        let vol = self.vol.volume();
        let blob = vol.attr(ino)?;
        let damaged = |what: &str| {
            log::error!("inode {ino}: {what}: run `extalloc fsck`");
            Errno(libc::EIO)
        };
        let inode = Inode::decode(&blob).ok_or_else(|| damaged("its blob is not an inode"))?;
        if inode.kind == Kind::Dir {
            return Err(Errno(libc::ENOENT));
        }
        let mut node = Node::plain(inode);
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
        debug_assert!(node.droppable(), "a node read back is held by nothing yet");
        Ok(node)
    }

    /// Reads `ino`'s node back into `ns` unless it is there (the lock held for writing),
    /// with the kernel's references parked for it ([`Ns::parked`]). On an error `ns` is
    /// unchanged.
    pub(crate) fn load_into(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        if let std::collections::hash_map::Entry::Vacant(v) = ns.nodes.entry(ino) {
            let mut node = self.read_node(ino)?;
            if let Some(refs) = ns.parked.remove(&ino) {
                node.lookups = refs;
            }
            v.insert(node);
        }
        debug_assert!(ns.nodes.contains_key(&ino) && !ns.parked.contains_key(&ino));
        Ok(())
    }

    /// Sets how many nodes the file system keeps in memory beyond those something other
    /// than the kernel's references holds (by default `extalloc::volume::DEFAULT_FILE_CACHE`;
    /// the mount's `--file-cache` sets it with the volume's). Takes effect at the next
    /// [`Fs::sync`] (the background commit's). 0 keeps only what must stay.
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
        let before = (ns.nodes.len(), ns.parked.len());
        for &ino in &victims {
            let node = ns.nodes.remove(&ino).expect("a victim is in memory");
            if node.lookups.get() > 0 {
                let was = ns.parked.insert(ino, node.lookups);
                assert!(was.is_none(), "inode {ino} in memory and parked");
            }
        }
        ns.shrink_nodes();
        assert_eq!(
            ns.nodes.len(),
            before.0 - victims.len(),
            "each victim left once"
        );
        debug_assert!(ns.parked.len() <= before.1 + victims.len());
        victims.len()
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
