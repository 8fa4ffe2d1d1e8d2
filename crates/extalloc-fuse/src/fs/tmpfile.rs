//! What a new inode in a directory is ([`NewNode`], `new_inode`, `new_blob`: shared by
//! `names.rs`'s `make`, which re-exports [`NewNode`], and by `tmpfile` here), and
//! `O_TMPFILE`: a regular file made with no name ([`Fs::tmpfile`]).
//!
//! A new inode takes from its directory what `make` always gave it: the permission bits
//! and access ACL its default ACL allows (else the mode less the umask), its group when
//! the directory is set-group-id (a directory also the bit), and the inherited `chattr`
//! flags ([`flags::inherited`]).
//!
//! Data structures: [`NewNode`], what a new inode is made of; a tmpfile is a `Node` whose
//! `tmpfile` is set.
//!
//! Invariant: a node whose `tmpfile` is set is a regular file that no directory names,
//! with link count 0, kept while it is open or the kernel knows it: its last `release` and
//! `forget` remove it (`Fs::reap`), as they remove a file unlinked while open. On the
//! volume it is a pending file (and so is its spill file, if it has one: `Fs::retract`),
//! which the volume's next writable open removes after a crash. [`Fs::link`] gives it its
//! first name and publishes it in one atomic group and clears `tmpfile`; from then on it
//! is a file as any other.
//!
//! Lock order: `ns` written for the whole call, then the volume's locks.

use super::core::{Attr, Caller, Errno, Fs, FsResult, Node, Ns, Refs};
use super::flags;
use crate::inode::{Inode, Kind};
use crate::xattr::Xattrs;

/// What a new inode is made of.
#[derive(Debug, Clone, Copy)]
pub struct NewNode<'a> {
    /// Its kind.
    pub kind: Kind,
    /// Requested mode (permission bits; the type bits are ignored).
    pub mode: u32,
    /// The caller's umask.
    pub umask: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// A symbolic link's target.
    pub target: Option<&'a [u8]>,
}

impl NewNode<'static> {
    /// A regular file of `mode` under `umask` (`creat`, `O_TMPFILE`).
    pub fn file(mode: u32, umask: u32) -> NewNode<'static> {
        NewNode {
            kind: Kind::File,
            mode,
            umask,
            rdev: 0,
            target: None,
        }
    }
}

impl Fs {
    /// Makes a regular file with no name in directory `parent` and opens it
    /// (`open(parent, O_TMPFILE)`): owner, group, mode, flags and ACLs as [`Fs::make`]
    /// gives a file made there, link count 0, one kernel reference (the kernel's reply is
    /// an entry) and the open handle returned. `ENOTDIR` when `parent` is not a directory,
    /// `ENOENT` once it is removed, `EPERM` when it is immutable. Removed when its last
    /// open closes and the kernel forgets it, unless [`Fs::link`] named it first.
    pub fn tmpfile(
        &self,
        parent: u64,
        mode: u32,
        umask: u32,
        flags: i32,
        who: Caller,
    ) -> FsResult<(Attr, u64)> {
        self.live()?;
        let new = NewNode::file(mode, umask);
        let mut ns = self.ns_write();
        let (mut inode, xattrs) = self.new_inode(&ns, parent, &new, who)?;
        inode.nlink = 0;
        let (_, fits) = new_blob(&inode, &xattrs);
        // One volume call: a pending file (`Fs::retract`), which a crash leaves for the
        // volume's open to remove; its node is its whole state until `link` publishes it.
        let ino = self.vol.volume().create_pending_placed(parent)?;
        ns.add_new(
            ino,
            Node {
                lookups: Refs::new(1),
                xattrs: if fits { xattrs.clone() } else { Xattrs::new() },
                tmpfile: true,
                ..Node::plain(inode)
            },
        );
        let stored = if fits {
            Ok(())
        } else {
            self.store_set(&mut ns, ino, xattrs, who.privilege())
        };
        // Inherited flags are never immutable or append-only: any open of a new file is
        // allowed, as `create`'s `open` finds.
        if let Err(e) = stored.and_then(|()| flags::check_open(&ns, ino, flags)) {
            // The kernel gets no entry, so nothing would forget it: it goes now.
            ns.node(ino)?.lookups.forget(1);
            self.reap(&mut ns, ino)?;
            return Err(e);
        }
        ns.node_mut(ino)?.open += 1;
        let attr = self.attr_of(&ns, ino)?;
        debug_assert!(attr.inode.nlink == 0 && ns.node(ino)?.open == 1);
        Ok((attr, self.handle(Some(flags))))
    }

    /// The inode (and the extended attributes it inherits) that `who` makes as `new` in
    /// `parent`, which must be a live directory that takes new names: `EPERM` when it is
    /// immutable, `ENOTDIR` when it is not a directory, `ENOENT` once it is removed. See
    /// the module documentation for what it inherits. Changes nothing.
    pub(crate) fn new_inode(
        &self,
        ns: &Ns,
        parent: u64,
        new: &NewNode<'_>,
        who: Caller,
    ) -> FsResult<(Inode, Xattrs)> {
        flags::check(ns, parent, false)?;
        let pdir = ns.node(parent)?;
        if pdir.dir.is_none() {
            return Err(Errno(libc::ENOTDIR));
        }
        if pdir.inode.nlink == 0 {
            return Err(Errno(libc::ENOENT));
        }
        let (mut perm, xattrs) = self.inherit(pdir, new);
        let setgid = pdir.inode.perm & libc::S_ISGID as u16 != 0;
        let gid = if setgid { pdir.inode.gid } else { who.gid };
        if setgid && new.kind == Kind::Dir {
            perm |= libc::S_ISGID as u16;
        }
        let mut inode = Inode::new(new.kind, perm, who.uid, gid, new.rdev);
        inode.flags = flags::inherited(pdir.inode.flags, new.kind);
        debug_assert_eq!(
            inode.flags & (flags::IMMUTABLE | flags::APPEND),
            0,
            "immutable and append-only are never inherited"
        );
        Ok((inode, xattrs))
    }
}

/// A new inode's first blob: its inherited ACLs ride in it when they fit (nearly always,
/// and then true), else they are stored once the inode exists, in a group of their own.
pub(crate) fn new_blob(inode: &Inode, xattrs: &Xattrs) -> (Vec<u8>, bool) {
    if crate::xattr::fits_inline(inode, xattrs) {
        let inline = Node {
            xattrs: xattrs.clone(),
            ..Node::plain(*inode)
        };
        (inline.blob(), true)
    } else {
        (inode.encode(), false)
    }
}
