//! Inodes in memory only while something holds them (`docs/format.md`, "Next", step 5).
//!
//! The namespace keeps every directory's node (its entries and parent), and any other
//! inode's node only while something holds it: the kernel (a lookup not yet forgotten),
//! an open file, times pending in memory, an unlink while held (link count 0), an unnamed
//! tmpfile, a rewrite or a recent fsync to act on ([`Node::droppable`]). The mount keeps
//! the directories only; when the last holder lets go, [`Fs::reap`] drops the node; a
//! call that names an inode not in memory reads it back from its attribute blob (and its
//! extended attributes' spill file), which is then its whole state.
//!
//! Who reads nodes back: a lookup of a name, `readdirplus` for the entries it may return,
//! unlink, rmdir, rename and link for the inodes they change (with the namespace lock held
//! for writing), and every call naming an inode by number ([`Fs::ensure_loaded`]: the
//! kernel names only inodes it holds, which are in memory; a caller of this API that
//! names others gets them read back).
//!
//! Data structures: none of their own (`Ns::nodes`, `Ns::count`). Invariant: a node not
//! in memory is a non-directory whose attribute blob on the volume is what its node would
//! hold; a node is read back and inserted with the namespace lock held for writing, so no
//! namespace change falls between the read and the insert; only [`Fs::reap`] drops one,
//! with the lock held for writing, after the kernel's last reference or the last close.
//! Lock order: `ns` (written) -> the volume's locks, as every namespace change.

use super::core::{Errno, Fs, FsResult, Node, Ns};
use crate::inode::{self, Inode, Kind};
use crate::xattr::{self, Tail};

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
    /// Nothing but the volume holds what it is: not a directory, not open, not known to
    /// the kernel, no times pending, named (an unlinked node stays until removed), not an
    /// unnamed tmpfile, no rewrite or recent fsync to act on (an unlink within
    /// `SYNCED_UNLINK_WINDOW` of an fsync commits before its reply: such a node stays, until
    /// a later reap finds its window over). Its attribute blob is then its whole state.
    pub(crate) fn droppable(&self) -> bool {
        self.dir.is_none()
            && self.open == 0
            && self.lookups.get() == 0
            && !self.attr_dirty
            && self.inode.nlink > 0
            && !self.tmpfile
            && !self.rewritten
            && self
                .synced
                .is_none_or(|t| t.elapsed() >= SYNCED_UNLINK_WINDOW)
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

    /// Reads `ino`'s node back into `ns` unless it is there (the lock held for writing).
    pub(crate) fn load_into(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        if let std::collections::hash_map::Entry::Vacant(v) = ns.nodes.entry(ino) {
            v.insert(self.read_node(ino)?);
        }
        debug_assert!(ns.nodes.contains_key(&ino));
        Ok(())
    }

    /// Reads back the nodes of `inos` not in memory, for a call that names them by number;
    /// one that does not exist is left for the call to find missing (`ENOENT`).
    pub(crate) fn ensure_loaded(&self, inos: &[u64]) -> FsResult<()> {
        if inos.iter().all(|i| self.ns.read().nodes.contains_key(i)) {
            return Ok(());
        }
        let mut ns = self.ns_write();
        for &ino in inos {
            match self.load_into(&mut ns, ino) {
                Ok(()) | Err(Errno(libc::ENOENT)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
