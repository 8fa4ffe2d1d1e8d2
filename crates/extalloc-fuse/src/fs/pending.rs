//! Inodes no name reaches, as pending files of the volume (`docs/mount.md`, the crash
//! semantics, and "Mount").
//!
//! An inode whose last name goes (unlinked while open or known to the kernel, a directory
//! removed while held) is made pending, with its spill file, in the atomic group that takes
//! the name ([`Fs::retract`], which [`Fs::persist`] calls for a link count of 0); an
//! `O_TMPFILE` file is made pending and its first name publishes it ([`Fs::publish`]). The
//! volume's writable open removes pending files, so a crash leaves no orphan and no stray
//! spill file, which is what the store's promise says (`Store::promise_crash_pending`,
//! given by the mount).
//!
//! Data structures: none of their own (the nodes, the volume's pending mark).
//! Invariant: a node with link count 0 is pending on the volume, and so is its spill file;
//! a node with a name is published (`invariants.rs` checks both). Lock order: `ns`
//! (written, by the caller) -> the volume's locks.

use super::core::{Fs, FsResult, Ns};

impl Fs {
    /// Makes `ino`'s volume file and its spill file pending, those not pending already
    /// (at most two volume calls, one chunk each): what a change that takes an inode's
    /// last name does in its atomic group, and what an `O_TMPFILE` file is from its start.
    pub(crate) fn retract(&self, ns: &Ns, ino: u64) -> FsResult<()> {
        let n = ns.node(ino)?;
        debug_assert_eq!(n.inode.nlink, 0, "only an inode no name reaches");
        let vol = self.vol.volume();
        for id in std::iter::once(ino).chain(n.spill) {
            if !vol.is_pending(id) {
                vol.retract(id)?;
            }
        }
        debug_assert!(vol.is_pending(ino) && n.spill.is_none_or(|s| vol.is_pending(s)));
        Ok(())
    }

    /// Publishes `ino`'s volume file with its node's blob, and its spill file (pending
    /// since it had no name: [`Fs::retract`]): an `O_TMPFILE` file's first name, in the
    /// atomic group that gives it (two volume calls at most).
    pub(crate) fn publish(&self, ns: &mut Ns, ino: u64) -> FsResult<()> {
        let n = ns.node(ino)?;
        debug_assert!(n.inode.nlink > 0, "a published inode has a name");
        let vol = self.vol.volume();
        vol.publish(ino, &n.blob())?;
        if let Some(s) = n.spill {
            vol.publish(s, &crate::xattr::spill_blob(ino))?;
        }
        ns.node_mut(ino)?.attr_dirty = false;
        Ok(())
    }
}
