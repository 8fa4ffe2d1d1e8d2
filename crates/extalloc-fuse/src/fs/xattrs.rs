//! Extended attribute calls: get, list, set and remove (the encoding and limits are
//! `xattr.rs`'s).
//!
//! An inode's set lives in its node (loaded at mount) and on the volume, inline in the
//! inode's blob while the blob stays within the volume's attribute limit, else in a spill
//! file. A change replaces the set whole in one atomic group of the volume: the inode's new
//! blob (its ctime with it), the new spill file when one is needed, and the old spill
//! file's removal. A crash keeps the old set or the new one. The kernel checks permissions
//! before it asks (`trusted.` and `security.` need privilege, `user.` only on regular files
//! and directories, write access to the inode); the daemon checks names, flags and sizes.
//!
//! POSIX ACLs (when the kernel enforces them, FUSE_POSIX_ACL) are the two `system.`
//! attributes, with what the kernel leaves to the daemon (`acl.rs`): an access ACL sets
//! the mode's bits (and is not kept when the mode says all it says), and clears
//! set-group-id when the caller is outside the file's group and not root; a chmod
//! rewrites it (`data.rs`); a new inode in a directory with a default ACL takes its
//! access ACL and mode from it instead of the umask, and a new directory the default ACL
//! itself ([`Fs::inherit`]).
//!
//! Invariant: a node's `xattrs` is what its blob's tail (and spill file) holds on the
//! volume, and `spill` names the spill file its tail names.
//!
//! Lock order: `ns` written for a change's whole length, then the volume's locks.

use super::core::{Caller, Errno, Fs, FsResult, Node, Ns};
use super::names::NewNode;
use crate::acl::Acl;
use crate::inode::{Kind, Time};
use crate::xattr::{self, Tail, Xattrs, ACL_ACCESS, ACL_DEFAULT};
use extalloc::volume::Privilege;
use std::sync::atomic::Ordering::Relaxed;

/// `XATTR_CREATE`: fail if the attribute exists.
pub const XATTR_CREATE: i32 = 1;
/// `XATTR_REPLACE`: fail if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;

fn err<T>(e: i32) -> FsResult<T> {
    Err(Errno(e))
}

fn is_acl(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

impl Fs {
    /// The kernel enforces POSIX ACLs (it accepted FUSE_POSIX_ACL): keep them.
    pub fn enable_acls(&self) {
        self.acls.store(true, Relaxed);
    }

    /// A name this mount takes: ACL names only when the kernel enforces ACLs.
    fn check_name(&self, name: &[u8]) -> FsResult<()> {
        xattr::check_name(name).map_err(Errno)?;
        if is_acl(name) && !self.acls.load(Relaxed) {
            return err(libc::EOPNOTSUPP);
        }
        Ok(())
    }

    /// The value of attribute `name` of `ino`; `ENODATA` when it has none of that name.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.check_name(name)?;
        let ns = self.ns.read();
        match ns.node(ino)?.xattrs.get(name) {
            Some(v) => Ok(v.clone()),
            None => err(libc::ENODATA),
        }
    }

    /// The names of `ino`'s attributes, each followed by a NUL; `trusted.` names only for a
    /// `privileged` caller (as ext4 lists them to `CAP_SYS_ADMIN` only).
    pub fn listxattr(&self, ino: u64, privileged: impl FnOnce() -> bool) -> FsResult<Vec<u8>> {
        let _pin = self.ensure_loaded(&[ino]); // `ondemand.rs`: missing reads as false
        let ns = self.ns.read();
        let set = &ns.node(ino)?.xattrs;
        // Who asks matters only when there is a name to hide from the unprivileged.
        let hides = set.keys().any(|n| xattr::privileged(n));
        Ok(xattr::listing(set, hides && privileged()))
    }

    /// Sets attribute `name` of `ino` to `value`. `flags`: `XATTR_CREATE` (`EEXIST` if it
    /// exists) or `XATTR_REPLACE` (`ENODATA` if it does not); other bits are `EINVAL`. A
    /// value over 64 KiB is `E2BIG`, a set past the per-inode limit `ENOSPC`. On failure
    /// nothing changed. An ACL that is not valid is `EINVAL`, a default ACL on anything
    /// but a directory `EACCES`; `who` and its supplementary `groups` decide whether an
    /// access ACL clears set-group-id. A set that spills past the inode's blob leaves
    /// root's share of the device free unless `who` is root ([`Caller::privilege`]).
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        who: Caller,
        groups: &[u32],
    ) -> FsResult<()> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        self.check_name(name)?;
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return err(libc::EINVAL);
        }
        if value.len() > xattr::VALUE_MAX {
            return err(libc::E2BIG);
        }
        let mut ns = self.ns_write();
        super::flags::check(&ns, ino, true)?;
        let node = ns.node(ino)?;
        let exists = node.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return err(libc::EEXIST);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return err(libc::ENODATA);
        }
        let mut set = node.xattrs.clone();
        if !is_acl(name) {
            set.insert(name.to_vec(), value.to_vec());
            return self.store_set(&mut ns, ino, set, who.privilege());
        }
        let acl = Acl::parse(value).ok_or(Errno(libc::EINVAL))?;
        if name == ACL_DEFAULT {
            if node.inode.kind != Kind::Dir {
                return err(libc::EACCES);
            }
            set.insert(name.to_vec(), value.to_vec());
            return self.store_set(&mut ns, ino, set, who.privilege());
        }
        let old = node.inode.perm;
        let mut perm = (old & !0o777) | acl.mode_bits();
        let gid = node.inode.gid;
        if who.uid != 0 && who.gid != gid && !groups.contains(&gid) {
            perm &= !(libc::S_ISGID as u16);
        }
        if acl.is_minimal() {
            set.remove(name);
        } else {
            set.insert(name.to_vec(), acl.encode());
        }
        ns.node_mut(ino)?.inode.perm = perm;
        let r = self.store_set(&mut ns, ino, set, who.privilege());
        if r.is_err() {
            ns.node_mut(ino)?.inode.perm = old;
        }
        r
    }

    /// A new inode's permission bits and attributes in `parent`: with a default ACL there
    /// (and ACLs enforced), what it and the asked mode both allow, its access ACL unless
    /// the mode says it all, and for a directory the default ACL too; else the asked mode
    /// less the umask. Symbolic links take no ACLs.
    pub(crate) fn inherit(&self, parent: &Node, new: &NewNode<'_>) -> (u16, Xattrs) {
        let mut xattrs = Xattrs::new();
        let default = parent.xattrs.get(ACL_DEFAULT);
        let acl = default.and_then(|d| Acl::parse(d));
        match acl {
            Some(mut acl) if self.acls.load(Relaxed) && new.kind != Kind::Symlink => {
                let bits = acl.create_masq((new.mode & 0o777) as u16);
                if !acl.is_minimal() {
                    xattrs.insert(ACL_ACCESS.to_vec(), acl.encode());
                }
                if new.kind == Kind::Dir {
                    let d = default.expect("an ACL parsed from it").clone();
                    xattrs.insert(ACL_DEFAULT.to_vec(), d);
                }
                ((new.mode & 0o7000) as u16 | bits, xattrs)
            }
            _ => ((new.mode & !new.umask & 0o7777) as u16, xattrs),
        }
    }

    /// Removes attribute `name` of `ino`; `ENODATA` when it has none. On failure nothing
    /// changed.
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> FsResult<()> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        self.check_name(name)?;
        let mut ns = self.ns_write();
        super::flags::check(&ns, ino, true)?;
        let mut set = ns.node(ino)?.xattrs.clone();
        if set.remove(name).is_none() {
            return err(libc::ENODATA);
        }
        // A removal: the set shrinks, whoever asks.
        self.store_set(&mut ns, ino, set, Privilege::Superuser)
    }

    /// Replaces `ino`'s set by `set` on the volume and in its node, its ctime now (see the
    /// module documentation). Fails with nothing changed when the set is over the limit or
    /// the device is full (for `who` not the superuser, where a spill file would take
    /// root's share: `extalloc::volume::Privilege`); a device error part way leaves the
    /// group unfinished, so the volume commits nothing more (`names.rs`).
    pub(crate) fn store_set(
        &self,
        ns: &mut Ns,
        ino: u64,
        set: Xattrs,
        who: Privilege,
    ) -> FsResult<()> {
        let bytes = xattr::set_bytes(&set);
        if bytes > xattr::MAX_SET_BYTES {
            return err(libc::ENOSPC);
        }
        let vol = self.vol.volume();
        let bs = vol.block_size();
        let node = ns.node(ino)?;
        let old = node.spill;
        let mut inode = node.inode;
        inode.ctime = Time::now();
        // Chunk calls of removing the old spill file: its blocks 16 at a time, then itself.
        let old_chunks = match old {
            Some(o) => vol.size(o)?.div_ceil(bs).div_ceil(16) + 1,
            None => 0,
        };
        let inline = xattr::fits_inline(&inode, &set);
        let data = (!set.is_empty() && !inline).then(|| xattr::spill_data(&set));
        let new_chunks = data
            .as_ref()
            .map_or(0, |d| (d.len() as u64).div_ceil(bs).div_ceil(16) + 2);
        if let Some(d) = &data {
            // The spill file is the attributes' data: it leaves the room as data does.
            vol.check_room_for((d.len() as u64).div_ceil(bs), who)?;
        }
        let group = vol.atomic(1 + old_chunks + new_chunks)?;
        // An inode no name reaches is pending on the volume, and its spill file with it
        // (`Fs::retract`); its blob stays the pending mark, its node its whole state.
        let orphan = inode.nlink == 0;
        let tail = match &data {
            Some(d) => {
                let id = match orphan {
                    true => vol.create_pending()?,
                    false => vol.create(&xattr::spill_blob(ino))?,
                };
                if let Err(e) = self.vol.uncached(id).write(id, 0, d) {
                    // Nothing names it yet: undoing the create leaves the group whole.
                    self.vol.uncached(id).unlink(id)?;
                    group.finish();
                    return Err(e.into());
                }
                Tail::Spill(id)
            }
            None if set.is_empty() => Tail::None,
            None => Tail::Inline(set.clone()),
        };
        if !orphan {
            vol.set_attr(ino, &inode.encode_with_tail(&tail.encode()))?;
        }
        if let Some(o) = old {
            self.vol.uncached(o).unlink(o)?;
        }
        group.finish();
        // `Ns::count` counts spill files too (the volume's files).
        ns.count = ns.count + u64::from(data.is_some()) - u64::from(old.is_some());
        let node = ns.node_mut(ino)?;
        node.inode = inode;
        node.spill = match tail {
            Tail::Spill(id) => Some(id),
            _ => None,
        };
        node.xattrs = set;
        // The blob just written carries the times too.
        node.attr_dirty = false;
        debug_assert!(
            match orphan {
                true => vol.is_pending(ino) && node.spill.is_none_or(|s| vol.is_pending(s)),
                false => crate::inode::tail(&vol.attr(ino)?) == node.tail().encode().as_slice(),
            },
            "the node's attributes are the ones its blob names, or it is pending"
        );
        Ok(())
    }
}
