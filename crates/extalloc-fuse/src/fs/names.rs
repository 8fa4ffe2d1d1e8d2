//! Namespace calls: lookup, make (files, directories, links, special files), unlink,
//! rmdir, link, rename (`names/rename.rs`) and readlink (directory listing: `listing.rs`;
//! what a new inode inherits from its directory, and `O_TMPFILE`: `tmpfile.rs`).
//!
//! Each call holds the namespace lock written for its whole length, checks everything it
//! can before it changes anything, makes room for the records it will append (`reserve`:
//! the blocks of each directory log it appends to are mapped first, so no step inside the
//! change allocates), then makes its volume steps in one atomic group of the volume
//! ([`extalloc::volume::Volume::atomic`]): a crash keeps the whole change or none of it.
//! What may run long stays outside the group: removing an inode's file once its last name
//! is gone (`reap`: a crash before it leaves an inode with link count 0, which mount
//! removes) and compacting a directory's log (its reset record counts the adds that follow,
//! so a compaction cut short is ignored at mount). A large directory shelved with its
//! run's view (`runview.rs`) takes a create, link, unlink, rmdir or rename through the
//! view and stays shelved (as a listing of it does: `runlisting.rs`).
//!
//! A step that fails inside a group after an earlier step changed something leaves the
//! group unfinished: the volume commits nothing more ([`extalloc::Error::Aborted`]), so the
//! half change is never durable, and the file system answers `EIO` until it is mounted
//! again. Only a device error can do that: every check comes first.

use super::core::{Attr, Caller, DirState, Entry, Errno, Fs, FsResult, Node, Ns, Refs, ROOT};
use super::ondemand::SYNCED_UNLINK_WINDOW;
use super::{flags, scan, tmpfile};
use crate::dir::{record, NAME_MAX};
use crate::inode::{Inode, Kind, Time};
use crate::xattr::Xattrs;
use extalloc::volume::{Atomic, Fallocate, Privilege};

pub use super::tmpfile::NewNode;

mod compact;
mod rename;

/// Volume chunk calls of one namespace change at most (the room its atomic group makes
/// first): a create, a symbolic link's target and its undo, two appends (a record may
/// straddle a chunk's boundary), the parent's attributes.
const MAKE_CHUNKS: u64 = 6;
/// An unlink or rmdir: an append, the parent's and the inode's attributes (its last
/// name: the inode made pending, `Fs::retract`; its spill file too, one more: [`spill_chunks`]).
const REMOVE_CHUNKS: u64 = 4;
/// A link: the inode's attributes (a tmpfile's first name: it published, `Fs::publish`;
/// its spill file too, one more), an append, the parent's attributes.
const LINK_CHUNKS: u64 = 4;
/// A rename or exchange: four appends, four attribute blobs, with room for a record
/// straddling a chunk boundary in each append (a replaced inode's spill file made
/// pending: one more, [`spill_chunks`]).
const RENAME_CHUNKS: u64 = 12;

/// A rename that is not an exchange: the replaced name's remove (an append, the parent's
/// and the inode's attributes; its spill file made pending, one more), two appends, both
/// parents' and the inode's attributes.
const MOVE_CHUNKS: u64 = 11;

/// The chunk call of `ino`'s spill file made pending or published with it (`Fs::retract`,
/// `Fs::publish`), if it has one: 0 or 1, added to a group that may take or give its
/// last name (a fixed extra chunk would take the largest group, a rename with a
/// whiteout, past what a small journal's record holds).
pub(super) fn spill_chunks(ns: &Ns, ino: Option<u64>) -> u64 {
    u64::from(ino.is_some_and(|i| ns.node(i).is_ok_and(|n| n.spill.is_some())))
}
/// The whiteout a `RENAME_WHITEOUT` leaves: a create and an append.
const WHITEOUT_CHUNKS: u64 = 3;

/// `RENAME_NOREPLACE`.
pub const RENAME_NOREPLACE: u32 = 1;
/// `RENAME_EXCHANGE`.
pub const RENAME_EXCHANGE: u32 = 2;
/// `RENAME_WHITEOUT`: a whiteout (a character device 0:0, what overlayfs reads as "deleted
/// here") takes the old name, in the same atomic change.
pub const RENAME_WHITEOUT: u32 = 4;

fn err<T>(e: i32) -> FsResult<T> {
    Err(Errno(e))
}

/// A name a directory may hold.
fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return err(libc::EINVAL);
    }
    Ok(())
}

impl Fs {
    /// Finds `name` in directory `parent` (the kernel now holds one more reference).
    /// Takes the namespace lock for reading only (lookups run side by side, `Refs`), unless
    /// the inode is not in memory: then for writing, to read it back (`ondemand.rs`).
    pub fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Attr> {
        let dots = name == b"." || name == b"..";
        if !dots {
            check_name(name)?;
        }
        let resolve = |ns: &Ns| match name {
            b"." => Ok(parent),
            b".." => Ok(ns.dir(parent)?.parent),
            _ => ns.entry(parent, name),
        };
        // A parent not in memory (named by number only: a file handle across a remount,
        // or a caller of this API) is read back with the lock held for writing.
        let ns = self.ns.read();
        if ns.nodes.contains_key(&parent) {
            // A shelved directory's entries are read back with the lock held for writing
            // (`.` and `..` need none).
            let shelved = !dots && ns.dir(parent).is_ok_and(|d| d.shelved());
            let ino = if shelved { 0 } else { resolve(&ns)? };
            if !shelved && ns.nodes.contains_key(&ino) {
                let attr = self.attr_of(&ns, ino)?;
                ns.node(ino)?.lookups.add();
                return Ok(attr);
            }
        }
        drop(ns);
        let mut ns = self.ns_write();
        // Again: a change may have come between the locks. `.` and `..` name the
        // directory by number (a file handle across a remount: `ondemand.rs`).
        let ino = match name {
            b"." | b".." => {
                self.load_into(&mut ns, parent)?;
                let ino = resolve(&ns)?;
                self.load_into(&mut ns, ino)?;
                ino
            }
            // A large shelved directory answers from its run (`runlookup.rs`).
            _ => {
                let read_back = !ns.nodes.contains_key(&parent);
                self.load_into(&mut ns, parent)?;
                if let Err(e) = ns.dir(parent) {
                    // Not a directory: a node read back for nothing goes again.
                    let idle = ns.node(parent).is_ok_and(|n| n.droppable());
                    if read_back && idle && !self.pinned(parent) {
                        ns.nodes.remove(&parent);
                    }
                    // Only a node this call read back and nothing else holds goes.
                    debug_assert!(
                        !read_back
                            || !idle
                            || !ns.nodes.contains_key(&parent)
                            || self.pinned(parent)
                    );
                    return Err(e);
                }
                self.load_looked_up(&mut ns, parent, name)?
            }
        };
        let attr = self.attr_of(&ns, ino)?;
        ns.node(ino)?.lookups.add();
        Ok(attr)
    }

    /// The kernel drops `n` references to `ino`. The count drops under the namespace lock
    /// held for reading (the node's, or its parked count when the node was dropped while
    /// the kernel held it); only a node left closed and unreferenced takes it for writing,
    /// to be removed if unnamed, else dropped from memory if nothing else holds it, and a
    /// parked count of 0 to leave the parked set (`Fs::reap` looks again: a lookup may have
    /// come between).
    pub fn forget(&self, ino: u64, n: u64) {
        self.forget_many(&[(ino, n)]);
    }

    /// [`Fs::forget`] of each `(inode, references)`, as the kernel's batched forgets come
    /// (thousands at an unmount or a cache drop): one read of the namespace lock for the
    /// counts, and one write for every inode left unused.
    pub fn forget_many(&self, forgets: &[(u64, u64)]) {
        let unused: Vec<u64> = {
            let ns = self.ns.read();
            (forgets.iter())
                .filter(|&&(ino, n)| match ns.nodes.get(&ino) {
                    Some(node) => node.lookups.forget(n) == 0 && node.open == 0,
                    // Dropped while the kernel held it (`Fs::trim_nodes`): its count is parked.
                    // It leaves the parked set at 0: nothing to reap.
                    None => {
                        ns.parked.lock().forget(ino, n);
                        false
                    }
                })
                .map(|&(ino, _)| ino)
                .collect()
        };
        if unused.is_empty() {
            return;
        }
        let mut ns = self.ns_write();
        for ino in unused {
            if let Err(e) = self.reap(&mut ns, ino) {
                log::error!("cannot remove inode {ino} after its last reference: {e}");
            }
        }
    }

    /// Makes `name` in `parent`: a file, directory, symbolic link or special file.
    /// `ENOSPC` when its blocks (the directory's next block, a symlink's target) would
    /// take the room kept for metadata, once the cache is written back and checkpointed;
    /// nothing is made then.
    pub fn make(&self, parent: u64, name: &[u8], new: NewNode<'_>, who: Caller) -> FsResult<Attr> {
        self.adding(|| self.make_once(parent, name, new, who))
    }

    /// Runs `op`, a change that adds names or data and changes nothing when it fails for
    /// want of space, and once more after writing the cache back and checkpointing when
    /// it got `ENOSPC` while files held cached data's reservations: each is counted in
    /// the room kept for metadata until written (`Buffered::cache_holds_room`).
    fn adding<T>(&self, mut op: impl FnMut() -> FsResult<T>) -> FsResult<T> {
        match op() {
            Err(Errno(libc::ENOSPC)) if self.vol.volume().cached_files() > 0 => {
                // Called outside any group (`make_once` and `link_once` open their own).
                self.vol.checkpoint()?;
                op()
            }
            r => r,
        }
    }

    fn make_once(&self, parent: u64, name: &[u8], new: NewNode<'_>, who: Caller) -> FsResult<Attr> {
        self.live()?;
        check_name(name)?;
        let mut ns = self.ns_write();
        let (inode, xattrs) = self.new_inode(&ns, parent, &new, who)?;
        // A large shelved directory answers through its run's view (`runlookup.rs`).
        if self.entry_for_change(&mut ns, parent, name)?.is_some() {
            return err(libc::EEXIST);
        }
        // Files of one directory start near each other; directories spread by name.
        let key = match new.kind {
            Kind::Dir => parent ^ fnv(name),
            _ => parent,
        };
        if let Some(t) = new.target {
            // A symlink's target is its file's data: it leaves the room as data does (checked
            // before the directory's blocks are mapped, so a refusal maps nothing).
            let bs = self.vol.volume().block_size();
            self.vol
                .volume()
                .check_room_for((t.len() as u64).div_ceil(bs), who.privilege())?;
        }
        let grows = Some(who.privilege());
        self.reserve(&mut ns, &[(parent, record_bytes(name))], grows)?;
        let group = self.group(MAKE_CHUNKS)?;
        // Inherited ACLs that do not fit the blob are stored once it is named.
        let (blob, fits) = tmpfile::new_blob(&inode, &xattrs);
        let ino = self.vol.volume().create_placed(&blob, key)?;
        if let Some(t) = new.target {
            if let Err(e) = self.vol.uncached(ino).write(ino, 0, t) {
                // Nothing names it yet: undoing the create leaves the group whole.
                self.vol.uncached(ino).unlink(ino)?;
                group.finish();
                return Err(e.into());
            }
        }
        self.link_new(&mut ns, parent, name, ino, new.kind)?;
        group.finish();
        self.compact_due(&mut ns, &[parent])?;
        let dir = (new.kind == Kind::Dir).then(|| {
            Box::new(DirState {
                entries: Default::default(),
                parent,
                log_bytes: 0,
                log_start: 0,
                live: 0,
                run_live: 0,
                mapped_to: 0,
                used: Default::default(),
                view: None,
            })
        });
        ns.add_new(
            ino,
            Node {
                dir,
                lookups: Refs::new(1),
                xattrs: if fits { xattrs.clone() } else { Xattrs::new() },
                ..Node::plain(inode)
            },
        );
        if !fits {
            self.store_set(&mut ns, ino, xattrs, who.privilege())?;
        }
        self.attr_of(&ns, ino)
    }

    /// A new inode's entry in `parent`, and the parent's link count and times.
    fn link_new(
        &self,
        ns: &mut Ns,
        parent: u64,
        name: &[u8],
        ino: u64,
        kind: Kind,
    ) -> FsResult<()> {
        self.append(
            ns,
            parent,
            name,
            Some(Entry {
                ino,
                kind: Some(kind),
            }),
        )?;
        debug_assert!(
            ns.entry_known(parent, name).is_none_or(|e| e == Ok(ino)),
            "the new name is linked"
        );
        let p = ns.node_mut(parent)?;
        if kind == Kind::Dir {
            p.inode.nlink += 1;
        }
        touch(&mut p.inode);
        self.persist(ns, parent)
    }

    /// Opens the atomic group of one namespace change of at most `chunks` volume calls.
    fn group(&self, chunks: u64) -> FsResult<Atomic<'_>> {
        Ok(self.vol.volume().atomic(chunks)?)
    }

    /// Maps the blocks the records about to be appended to each directory will take
    /// (`(dir, bytes)`; a directory may come twice), so that no append inside a group
    /// allocates: running out of space fails here, before anything changed. Blocks mapped
    /// past a log's end read as zeros, which a log skips.
    ///
    /// A change that adds a name (`grows`: create, mkdir, link, for whom) leaves the room
    /// the volume keeps for metadata, as data does, and gets `ENOSPC` where a write would
    /// (an unprivileged caller's where `df` shows none available: root's share is kept
    /// from it, `Volume::check_room_for`); one that removes or moves a name (`None`) may
    /// use that room, so an unlink or a rename on a full volume finds its records' blocks.
    fn reserve(
        &self,
        ns: &mut Ns,
        appends: &[(u64, u64)],
        grows: Option<Privilege>,
    ) -> FsResult<()> {
        let bs = self.vol.volume().block_size();
        for (i, &(dir, _)) in appends.iter().enumerate() {
            if appends[..i].iter().any(|&(d, _)| d == dir) {
                continue;
            }
            let bytes: u64 = appends.iter().filter(|a| a.0 == dir).map(|a| a.1).sum();
            let d = ns.node_mut(dir)?.dir.as_mut().ok_or(Errno(libc::ENOTDIR))?;
            let end = d.log_bytes + bytes;
            if end <= d.mapped_to {
                continue;
            }
            let to = end.div_ceil(bs) * bs;
            let vol = self.vol.uncached(dir);
            if let Some(who) = grows {
                // The blocks past what is mapped: an upper bound of the holes.
                vol.check_room_for(to.div_ceil(bs) - d.mapped_to.div_ceil(bs), who)?;
            }
            vol.fallocate_metadata(dir, Fallocate::KeepSize, d.log_bytes, to - d.log_bytes)?;
            d.mapped_to = to;
        }
        // What `append` relies on: every record of the change lands in mapped blocks.
        debug_assert!(appends.iter().all(|&(dir, _)| ns.dir(dir).is_ok_and(|d| {
            let bytes: u64 = appends.iter().filter(|a| a.0 == dir).map(|a| a.1).sum();
            d.log_bytes + bytes <= d.mapped_to
        })));
        Ok(())
    }

    /// The kind an add record carries: `kind`, where the device carries
    /// `INCOMPAT_TYPED_ENTRIES` ([`Fs::typed_entries`]), else none.
    fn kind_to_log(&self, kind: Option<Kind>) -> Option<Kind> {
        kind.filter(|_| self.typed_entries)
    }

    /// Appends an add (`Some(entry)`) or remove record for `name` to `dir`'s log, and
    /// notes it in the entries, or in the run's view of a directory shelved with one
    /// (`runview.rs`: it stays shelved, its count one more or one fewer).
    fn append(&self, ns: &mut Ns, dir: u64, name: &[u8], entry: Option<Entry>) -> FsResult<()> {
        let logged = entry.map(|e| (e.ino, self.kind_to_log(e.kind)));
        let rec = record(name, logged);
        let d = ns.node_mut(dir)?.dir.as_mut().ok_or(Errno(libc::ENOTDIR))?;
        // A shelved directory takes a change only through its view.
        assert_eq!(d.shelved(), d.view.is_some(), "directory {dir}: a change");
        scan::append(self.vol.uncached(dir), dir, d.log_bytes, &rec)?;
        d.log_bytes += rec.len() as u64;
        let bytes = (crate::dir::RECORD_OVERHEAD + name.len()) as u64;
        match (entry, d.view.as_deref_mut()) {
            (Some(_), Some(view)) => {
                view.add(name, logged.expect("an add"));
                d.entries.shelved_change(true);
            }
            (None, Some(view)) => {
                view.remove(name);
                d.entries.shelved_change(false);
            }
            (Some(e), None) => drop(d.entries.insert(name, e)),
            (None, None) => drop(d.entries.remove(name)),
        }
        match entry {
            Some(_) => d.live += bytes,
            None => d.live -= bytes,
        }
        debug_assert!(
            d.log_bytes <= d.mapped_to,
            "an append past the reserved blocks"
        );
        Ok(())
    }

    /// Removes the name `name` of a non-directory from `parent`.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        self.live()?;
        check_name(name)?;
        let synced_file = {
            let mut ns = self.ns_write();
            // A large shelved directory answers through its run's view (`runlookup.rs`).
            let ino = self.load_looked_up(&mut ns, parent, name)?;
            // As the kernel's may_delete: the flags come before the kind and emptiness.
            flags::check(&ns, parent, true)?;
            flags::check(&ns, ino, true)?;
            let n = ns.node(ino)?;
            if n.dir.is_some() {
                return err(libc::EISDIR);
            }
            let synced = n.inode.kind == Kind::File
                && n.synced.is_some_and(|t| t.elapsed() < SYNCED_UNLINK_WINDOW);
            self.remove(&mut ns, parent, name, ino)?;
            synced
        };
        // Outside the namespace lock: the commit waits for the device.
        if synced_file {
            self.vol.volume().sync()?;
        }
        Ok(())
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        self.live()?;
        match name {
            b"." => return err(libc::EINVAL),
            b".." => return err(libc::ENOTEMPTY),
            _ => check_name(name)?,
        }
        let mut ns = self.ns_write();
        let ino = self.load_looked_up(&mut ns, parent, name)?;
        // As the kernel's may_delete: the flags come before the kind and emptiness.
        flags::check(&ns, parent, true)?;
        flags::check(&ns, ino, true)?;
        if !ns.dir(ino)?.is_empty() {
            return err(libc::ENOTEMPTY);
        }
        self.remove(&mut ns, parent, name, ino)
    }

    /// Unlink and rmdir, once checked: the name goes in one group, then the inode's file
    /// if nothing else holds it.
    fn remove(&self, ns: &mut Ns, parent: u64, name: &[u8], ino: u64) -> FsResult<()> {
        self.reserve(ns, &[(parent, record_bytes(name))], None)?;
        let group = self.group(REMOVE_CHUNKS + spill_chunks(ns, Some(ino)))?;
        self.remove_name(ns, parent, name, ino)?;
        group.finish();
        debug_assert!(
            ns.entry_known(parent, name).is_none_or(|e| e.is_err()),
            "the name left its directory"
        );
        self.compact_due(ns, &[parent])?;
        self.reap(ns, ino)
    }

    /// Inside a group: `name` (naming `ino`) leaves `parent`; `ino` loses a link (a
    /// directory all of them, and its parent the one its `..` held).
    fn remove_name(&self, ns: &mut Ns, parent: u64, name: &[u8], ino: u64) -> FsResult<()> {
        debug_assert!(ns.entry_known(parent, name).is_none_or(|e| e == Ok(ino)));
        self.append(ns, parent, name, None)?;
        let is_dir = ns.node(ino)?.dir.is_some();
        let p = ns.node_mut(parent)?;
        if is_dir {
            assert!(
                p.inode.nlink > 2,
                "a directory with a subdirectory has 3+ links"
            );
            p.inode.nlink -= 1;
        }
        touch(&mut p.inode);
        self.persist(ns, parent)?;
        let n = ns.node_mut(ino)?;
        assert!(n.inode.nlink > 0, "inode {ino} had a name but no link");
        n.inode.nlink = if is_dir { 0 } else { n.inode.nlink - 1 };
        n.inode.ctime = Time::now();
        self.persist(ns, ino)
    }

    /// Gives the non-directory `ino` one more name, `newname` in `newparent`. An inode
    /// with link count 0 is refused (`ENOENT`: it was unlinked) unless it is a tmpfile
    /// never named ([`Fs::tmpfile`]; the kernel sends its link only when it was opened
    /// without `O_EXCL`): that one gets its first name, link count 0 -> 1, and is a file as
    /// any other from then on.
    /// A new name's directory blocks leave root's share of the device free unless `who`
    /// is root ([`Caller::privilege`]), as a create's do.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8], who: Caller) -> FsResult<Attr> {
        self.adding(|| self.link_once(ino, newparent, newname, who))
    }

    fn link_once(&self, ino: u64, newparent: u64, newname: &[u8], who: Caller) -> FsResult<Attr> {
        self.live()?;
        check_name(newname)?;
        let mut ns = self.ns_write();
        match self.load_into(&mut ns, ino) {
            Ok(()) | Err(Errno(libc::ENOENT)) => {}
            Err(e) => return Err(e),
        }
        flags::check(&ns, ino, true)?;
        flags::check(&ns, newparent, false)?;
        let node = ns.node(ino)?;
        if node.dir.is_some() {
            return err(libc::EPERM);
        }
        if node.inode.nlink == 0 && !node.tmpfile {
            return err(libc::ENOENT);
        }
        if node.inode.nlink >= u32::from(u16::MAX) {
            return err(libc::EMLINK);
        }
        let exists = self
            .entry_for_change(&mut ns, newparent, newname)?
            .is_some();
        let pdir = ns.node(newparent)?;
        if exists {
            return err(libc::EEXIST);
        }
        if pdir.inode.nlink == 0 {
            return err(libc::ENOENT);
        }
        let grows = Some(who.privilege());
        self.reserve(&mut ns, &[(newparent, record_bytes(newname))], grows)?;
        let group = self.group(LINK_CHUNKS + spill_chunks(&ns, Some(ino)))?;
        let n = ns.node_mut(ino)?;
        debug_assert!(!n.tmpfile || n.inode.nlink == 0, "a tmpfile has no name");
        let first = n.tmpfile;
        n.inode.nlink += 1;
        n.inode.ctime = Time::now();
        n.tmpfile = false;
        match first {
            // Pending since it was made (`Fs::retract`): its first name publishes it.
            true => self.publish(&mut ns, ino)?,
            false => self.persist(&mut ns, ino)?,
        }
        let entry = ns.entry_of(ino)?;
        self.append(&mut ns, newparent, newname, Some(entry))?;
        touch(&mut ns.node_mut(newparent)?.inode);
        self.persist(&mut ns, newparent)?;
        group.finish();
        self.compact_due(&mut ns, &[newparent])?;
        ns.node(ino)?.lookups.add();
        self.attr_of(&ns, ino)
    }

    /// A symbolic link's target.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        if self.ns.read().node(ino)?.inode.kind != Kind::Symlink {
            return err(libc::EINVAL);
        }
        let size = self.vol.size(ino)?;
        Ok(self.vol.read(ino, 0, size)?)
    }
}

/// A directory's contents changed: its mtime and ctime are now.
fn touch(inode: &mut Inode) {
    let t = Time::now();
    inode.mtime = t;
    inode.ctime = t;
}

/// Bytes one record for `name` takes in a directory log.
fn record_bytes(name: &[u8]) -> u64 {
    (crate::dir::RECORD_OVERHEAD + name.len()) as u64
}

/// FNV-1a of a name (spreads directories' placement keys).
fn fnv(name: &[u8]) -> u64 {
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
