//! Directory listing: opendir, readdir and releasedir.
//!
//! Data structures: [`DirHandle`] (defined in `core.rs`, where [`Fs`] names it), one per
//! open directory handle in `Fs::dir_handles`: the directory's inode and a snapshot of
//! its entries (`.` and `..` first, then the entries in the order the directory keeps
//! them, `entries.rs`).
//!
//! Invariant: a position (the `offset` readdir gets and gives) is an index into the
//! handle's snapshot, so positions stay stable while entries come and go. A readdir at
//! position 0 (the first read after `opendir`, or after `rewinddir`/`lseek(fd, 0)`, which
//! is how the kernel asks again from the start) takes a new snapshot, so a rewound listing
//! shows the directory as it is now (POSIX: entries added or removed after `opendir` may or
//! may not appear, but `rewinddir` must show the current state).
//!
//! Lock order: `ns` (read, to take a snapshot or the entries' attributes) ->
//! `dir_handles`, as in `mod.rs`; `dir_ahead` (a leaf) is taken with no lock held.

use super::core::{Attr, DirHandle, Errno, Fs, FsResult, Listed, Ns};
use crate::inode::Kind;
use std::sync::atomic::Ordering::Relaxed;

/// One entry of [`Fs::readdirplus_entries`].
#[derive(Debug)]
pub enum Plus<'a> {
    /// The entry's inode, read.
    Read(&'a Attr),
    /// An entry whose inode could not be read (damaged, or an I/O error; logged): its
    /// number and its kind as the directory knows it, if it does.
    Unread {
        /// The inode the entry names.
        ino: u64,
        /// Its kind, when known.
        kind: Option<Kind>,
    },
}

/// Inodes `readdirplus` reads back at once (`ondemand.rs`), with the namespace lock held
/// for writing: a reply holds a few hundred entries at most.
const READ_BACK_BATCH: usize = 128;

impl Fs {
    /// Opens directory `ino` for listing (`ENOTDIR` for anything else).
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        let list = self.snapshot(ino)?;
        let fh = self.handle(None);
        let fresh = self
            .dir_handles
            .lock()
            .insert(fh, DirHandle { ino, list })
            .is_none();
        debug_assert!(fresh, "directory handle {fh} handed out twice");
        Ok(fh)
    }

    /// Entries of an open directory from position `offset`: (name, inode, kind, position
    /// of the next). `f` returns true when the reply is full. Position 0 takes a new
    /// snapshot of the directory (see the module documentation) and counts as an access
    /// of it (atime, as the mount's atime mode says).
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        mut f: impl FnMut(&[u8], u64, Option<Kind>, u64) -> bool,
    ) -> FsResult<()> {
        if offset == 0 {
            self.relist(fh)?;
        }
        let handles = self.dir_handles.lock();
        let h = handles.get(&fh).ok_or(Errno(libc::EBADF))?;
        for (i, (name, ino, kind)) in h.list.iter().enumerate().skip(offset as usize) {
            if f(name, *ino, *kind, i as u64 + 1) {
                break;
            }
        }
        Ok(())
    }

    /// [`Fs::readdirplus_entries`] with the entries whose inode cannot be read left out.
    pub fn readdirplus(
        &self,
        fh: u64,
        offset: u64,
        mut f: impl FnMut(&[u8], &Attr, u64) -> bool,
    ) -> FsResult<()> {
        self.readdirplus_entries(fh, offset, |name, e, next| match e {
            Plus::Read(a) => f(name, a, next),
            Plus::Unread { .. } => false,
        })
    }

    /// [`Fs::readdir`] with each entry's attributes (`READDIRPLUS`): `f` gets the name,
    /// the entry ([`Plus`]) and the position of the next, and returns true when the reply
    /// is full (that entry was not added). Every entry added with its attributes but `.`
    /// and `..` counts as a lookup: the kernel makes a dentry of it and forgets it later,
    /// as after [`Fs::lookup`] (it takes no reference for `.` and `..`). An entry whose
    /// inode is gone since the snapshot is left out, as a new snapshot would; one whose
    /// inode cannot be read (damage, an I/O error: logged) comes as [`Plus::Unread`], its
    /// name listed without attributes (the kernel makes no dentry of it, and a lookup of
    /// it gets the error), so one damaged inode costs the listing nothing else. The
    /// references of the entries added stand only if the reply carries them.
    pub fn readdirplus_entries(
        &self,
        fh: u64,
        offset: u64,
        mut f: impl FnMut(&[u8], Plus<'_>, u64) -> bool,
    ) -> FsResult<()> {
        if offset == 0 {
            self.relist(fh)?;
        }
        let mut at = offset as usize;
        let mut added = 0usize;
        // Entries before this were read back (`ondemand.rs`) or found missing.
        let mut tried = at;
        let mut _held = None;
        // Inodes whose read back failed: listed without attributes.
        let mut unread = super::core::InoSet::default();
        loop {
            let absent = {
                let ns = self.ns.read();
                let handles = self.dir_handles.lock();
                let h = handles.get(&fh).ok_or(Errno(libc::EBADF))?;
                let mut stop = None;
                for (i, (name, ino, kind)) in h.list.iter().enumerate().skip(at) {
                    if i >= tried && !ns.nodes.contains_key(ino) {
                        stop = Some(i); // read back below, then on from here
                        break;
                    }
                    let entry = (name.as_slice(), *ino, *kind);
                    match self.hand_one(&ns, entry, i as u64 + 1, &unread, &mut f)? {
                        Handed::Full => return Ok(()),
                        Handed::Added => added += 1,
                        Handed::Skipped => {}
                    }
                }
                let Some(i) = stop else {
                    return Ok(());
                };
                at = i;
                let absent: Vec<(usize, Vec<u8>, u64)> = (h.list.iter().enumerate().skip(i))
                    .filter(|(_, e)| !ns.nodes.contains_key(&e.1))
                    .take(READ_BACK_BATCH)
                    .map(|(j, e)| (j, e.0.clone(), e.1))
                    .collect();
                tried = absent.last().map_or(i, |a| a.0) + 1;
                (h.ino, absent)
            };
            let names: Vec<(&[u8], u64)> = (absent.1.iter())
                .map(|(_, name, ino)| (name.as_slice(), *ino))
                .collect();
            // Pinned until the next batch is read back: a trim between this and the loop's
            // lock would drop them, and the listing would pass them over as gone. Read back
            // through their names, so directories among them come back too.
            _held = match self.ensure_loaded_in(absent.0, &names) {
                Ok((pinned, failed)) => {
                    unread.extend(failed);
                    Some(pinned)
                }
                Err(e) if added == 0 => return Err(e),
                Err(e) => {
                    log::warn!("listing stops short: {e}");
                    return Ok(());
                }
            };
        }
    }

    /// Hands one snapshot entry (`name` naming `ino`, of `kind`) to `f` with its
    /// attributes, `next` the position after it (see [`Fs::readdirplus_entries`]): left
    /// out if its inode is gone since the snapshot; without attributes if its read back
    /// failed (`unread`) or its attributes do; with them, counted as a lookup (but `.`
    /// and `..`), else.
    fn hand_one(
        &self,
        ns: &Ns,
        (name, ino, kind): (&[u8], u64, Option<Kind>),
        next: u64,
        unread: &super::core::InoSet,
        f: &mut impl FnMut(&[u8], Plus<'_>, u64) -> bool,
    ) -> FsResult<Handed> {
        let attr = match self.attr_of(ns, ino) {
            Ok(a) => a,
            // Gone since the snapshot: left out.
            Err(Errno(libc::ENOENT)) if !unread.contains(&ino) => return Ok(Handed::Skipped),
            // Its read back failed, or its attributes do: the name without them, and the
            // listing goes on.
            Err(e) => {
                if e.0 != libc::ENOENT {
                    log::warn!("listing: inode {ino}'s attributes: {e}");
                }
                return Ok(match f(name, Plus::Unread { ino, kind }, next) {
                    true => Handed::Full,
                    false => Handed::Added,
                });
            }
        };
        if f(name, Plus::Read(&attr), next) {
            return Ok(Handed::Full);
        }
        if name != b"." && name != b".." {
            ns.node(ino)?.lookups.add();
        }
        // An entry handed with attributes counts as a lookup: its node is in memory.
        debug_assert!(ns.node(ino).is_ok(), "inode {ino} handed");
        Ok(Handed::Added)
    }

    /// A listing read from position 0: a new snapshot of the directory, remembered for
    /// directory read-ahead (`dirahead.rs`), and an access of it (atime, as the mount's
    /// atime mode says).
    fn relist(&self, fh: u64) -> FsResult<()> {
        let ino = self.dir_handle_ino(fh)?;
        let list = self.snapshot(ino)?;
        if self.dir_ahead_on.load(Relaxed) {
            // A kind not known yet (after a mount, or read back from a shelved directory's
            // log: `ondemand.rs`) may be a file's: advising anything else is harmless.
            let files = (list.iter().skip(2))
                .filter(|e| e.2.is_none_or(|k| k == Kind::File))
                .map(|e| e.1);
            self.dir_ahead.lock().listed(ino, files.collect());
        }
        if let Some(h) = self.dir_handles.lock().get_mut(&fh) {
            h.list = list;
        }
        self.accessed(ino)
    }

    /// [`snapshot`] of directory `ino`, its entries read back first if shelved
    /// (`ondemand.rs`), with the lock held for writing then.
    fn snapshot(&self, ino: u64) -> FsResult<Vec<Listed>> {
        {
            let ns = self.ns.read();
            if !ns.dir(ino)?.shelved() {
                return snapshot(&ns, ino);
            }
        }
        let mut ns = self.ns_write();
        self.unshelve(&mut ns, ino)?;
        snapshot(&ns, ino)
    }

    /// Closes an open directory.
    pub fn releasedir(&self, fh: u64) {
        self.dir_handles.lock().remove(&fh);
    }

    /// The directory an open handle lists (`EBADF` for an unknown handle).
    fn dir_handle_ino(&self, fh: u64) -> FsResult<u64> {
        let handles = self.dir_handles.lock();
        Ok(handles.get(&fh).ok_or(Errno(libc::EBADF))?.ino)
    }
}

/// What handing one entry of a listing to its caller did ([`Fs::hand_one`]).
enum Handed {
    /// Its inode is gone since the snapshot: left out.
    Skipped,
    /// Added to the reply.
    Added,
    /// The reply is full: not added, the listing ends.
    Full,
}

/// Directory `ino`'s entries now: `.` and `..` first, then the entries in the order the
/// directory keeps them (not by name).
fn snapshot(ns: &Ns, ino: u64) -> FsResult<Vec<Listed>> {
    let d = ns.dir(ino)?;
    let mut list = Vec::with_capacity(d.entries.len() + 2);
    list.push((b".".to_vec(), ino, Some(Kind::Dir)));
    list.push((b"..".to_vec(), d.parent, Some(Kind::Dir)));
    for (name, e) in &d.entries {
        // A kind not noted yet is the node's, when it is in memory.
        let kind = e
            .kind
            .or_else(|| ns.nodes.get(&e.ino).map(|n| n.inode.kind));
        list.push((name.to_vec(), e.ino, kind));
    }
    Ok(list)
}
