//! Directory listing: opendir, readdir and releasedir.
//!
//! Data structures: [`DirHandle`] (defined in `core.rs`, where [`Fs`] names it), one per
//! open directory handle in `Fs::dir_handles`: the directory's inode, and for a listing
//! through a run's view its order (below). A listing reads the directory's entries in
//! memory where they are (`entries.rs`), so an open handle costs no copy of them,
//! whatever the directory's size and however many handles are open (each took a snapshot
//! of every entry before: about 67 bytes an entry a handle). A directory opened while
//! shelved with a run's view is listed through the view instead, a chunk of the run at a
//! time, and stays shelved (`runlisting.rs`: its positions are hashes, and the rest of
//! this documentation is about listings of entries in memory).
//!
//! Invariant: a position (the `offset` readdir gets and gives) is 0 (the start), 1 (after
//! `.`), 2 (after `..`), or a cookie of an entry's record in the directory's arena
//! (`Entries::cookie`). While a handle is open its directory counts it as a lister
//! (`Entries::open_lister`), and the arena is not shelved and not compacted below 64 MiB
//! of removed records (`entries.rs`, `FORCED_DEAD`): a removed entry's record stays
//! (skipped), a new one is appended, so every position a handle was given stays where it
//! was, and an entry present for the whole listing is listed once (POSIX: entries added
//! or removed after `opendir` may or may not appear; a name a rename replaced may come
//! again, its record moved to the end when the new inode needs more bytes; `rewinddir`,
//! which the kernel passes on as a read from position 0, shows the directory as it is
//! then). A position from before a compaction forced under open listings fails with
//! `EIO`, never silently short; one the directory did not give ends the listing, and a
//! guessed one lists only records the directory holds.
//!
//! Lock order: `ns` (read, to list, to open a handle of a directory in memory and to close
//! one; write, to read a shelved directory back or open its view, to list through a
//! view, or to run a compaction that waited for the last handle to close) ->
//! `dir_handles`, as in `mod.rs`; `dir_ahead` (a leaf) is taken with no lock held. The
//! lister count is an atomic, so handles of one directory come and go beside lookups and
//! listings; a compaction or a shelving, under `ns` held for writing, sees a count no one
//! changes.

use super::core::{Attr, DirHandle, Errno, Fs, FsResult, Ns};
use super::entries::Position;
use super::runview::ByHash;
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

/// Entries a plain listing by hash reads at once (a reply holds about a hundred).
const LIST_BATCH: usize = 256;

/// Inodes `readdirplus` reads back at once (`ondemand.rs`), with the namespace lock held
/// for writing: a reply holds a few hundred entries at most.
const READ_BACK_BATCH: usize = 128;

impl Fs {
    /// Opens directory `ino` for listing (`ENOTDIR` for anything else): a directory in
    /// memory is listed from its entries, which stay where they are until the handle
    /// closes ([`Fs::releasedir`]); a shelved one with a run is listed through the run's
    /// view (`runlisting.rs`) and stays shelved; any other is read back first.
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        // The namespace lock for reading: a directory in memory counts its lister
        // without excluding every other call; a shelved one is read back first, under
        // the lock for writing.
        let ns = self.ns.read();
        let fh = match ns.dir(ino)? {
            // ENOTDIR before anything changes
            d if !d.shelved() => self.open_listing(ino, d),
            _ => {
                drop(ns);
                let mut ns = self.ns_write();
                ns.dir(ino)?;
                if let Some(v) = self.view_mut(&mut ns, ino) {
                    let key = v.index.shape.key;
                    let by_hash = Some(ByHash { key, names: None });
                    let fh = self.handle(None);
                    let h = DirHandle { ino, by_hash };
                    let fresh = self.dir_handles.lock().insert(fh, h).is_none();
                    debug_assert!(fresh, "directory handle {fh} handed out twice");
                    return Ok(fh);
                }
                self.unshelve(&mut ns, ino)?;
                self.open_listing(ino, ns.dir(ino)?)
            }
        };
        Ok(fh)
    }

    /// Counts a listing of directory `ino` (`d`, in memory) and hands out its handle:
    /// the namespace lock held, for reading at least.
    fn open_listing(&self, ino: u64, d: &super::core::DirState) -> u64 {
        debug_assert!(!d.shelved(), "a listing of entries in memory");
        d.entries.open_lister();
        let fh = self.handle(None);
        let fresh = (self.dir_handles.lock())
            .insert(fh, DirHandle { ino, by_hash: None })
            .is_none();
        debug_assert!(fresh, "directory handle {fh} handed out twice");
        fh
    }

    /// Entries of an open directory from position `offset`: (name, inode, kind, position
    /// of the next). `f` returns true when the reply is full. Position 0 starts the
    /// listing again (see the module documentation) and counts as an access of the
    /// directory (atime, as the mount's atime mode says).
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        mut f: impl FnMut(&[u8], u64, Option<Kind>, u64) -> bool,
    ) -> FsResult<()> {
        let DirHandle { ino, by_hash } = self.dir_handle(fh)?;
        if offset == 0 {
            self.listed_from_start(ino)?;
        }
        if let Some(h) = by_hash {
            return self.readdir_by_hash(fh, (ino, h), offset, f);
        }
        let ns = self.ns.read();
        let d = ns.dir(ino)?;
        let dots = [(&b"."[..], ino), (&b".."[..], d.parent)];
        for (i, (name, dot)) in dots.into_iter().enumerate().skip(offset.min(2) as usize) {
            if f(name, dot, Some(Kind::Dir), i as u64 + 1) {
                return Ok(());
            }
        }
        let Some(from) = start_of(d, ino, offset.max(2))? else {
            return Ok(());
        };
        for (_, next, name, e) in d.entries.iter_from(from) {
            // A kind not noted yet is the node's, when it is in memory.
            let kind = e
                .kind
                .or_else(|| ns.nodes.get(&e.ino).map(|n| n.inode.kind));
            if f(name, e.ino, kind, d.entries.cookie(next)) {
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
    /// inode is gone is left out; one whose inode cannot be read (damage, an I/O error:
    /// logged) comes as [`Plus::Unread`], its name listed without attributes (the kernel
    /// makes no dentry of it, and a lookup of it gets the error), so one damaged inode
    /// costs the listing nothing else. The references of the entries added stand only if
    /// the reply carries them.
    pub fn readdirplus_entries(
        &self,
        fh: u64,
        offset: u64,
        mut f: impl FnMut(&[u8], Plus<'_>, u64) -> bool,
    ) -> FsResult<()> {
        let DirHandle { ino, by_hash } = self.dir_handle(fh)?;
        if offset == 0 {
            self.listed_from_start(ino)?;
        }
        if let Some(h) = by_hash {
            return self.readdirplus_by_hash(fh, (ino, h), offset, f);
        }
        let mut at = offset;
        let mut added = 0usize;
        // Records before this arena offset were read back or found missing.
        let mut tried = 0usize;
        let mut _held = None;
        // Inodes whose read back failed: listed without attributes.
        let mut unread = super::core::InoSet::default();
        loop {
            let absent = {
                let ns = self.ns.read();
                let d = ns.dir(ino)?;
                if self.hand_dots(&ns, ino, at, &unread, &mut f, &mut added)? {
                    return Ok(());
                }
                let Some(from) = start_of(d, ino, at.max(2))? else {
                    return Ok(());
                };
                let mut stop = None;
                for (here, next, name, e) in d.entries.iter_from(from) {
                    if here >= tried && !ns.nodes.contains_key(&e.ino) {
                        stop = Some(here); // read back below, then on from here
                        break;
                    }
                    let next = d.entries.cookie(next);
                    match self.hand_one(&ns, (name, e.ino, e.kind), next, &unread, &mut f)? {
                        Handed::Full => return Ok(()),
                        Handed::Added => added += 1,
                        Handed::Skipped => {}
                    }
                }
                let Some(here) = stop else {
                    return Ok(());
                };
                at = d.entries.cookie(here);
                let absent: Vec<(usize, Vec<u8>, u64)> = (d.entries.iter_from(here))
                    .filter(|e| !ns.nodes.contains_key(&e.3.ino))
                    .take(READ_BACK_BATCH)
                    .map(|(p, _, name, e)| (p, name.to_vec(), e.ino))
                    .collect();
                tried = absent.last().map_or(here, |a| a.0) + 1;
                absent
            };
            let names: Vec<(&[u8], u64)> = (absent.iter())
                .map(|(_, name, ino)| (name.as_slice(), *ino))
                .collect();
            // Pinned until the next batch is read back: a trim between this and the loop's
            // lock would drop them, and the listing would pass them over as gone. Read back
            // through their names, so directories among them come back too.
            _held = match self.ensure_loaded_in(ino, &names) {
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

    /// Hands `.` and `..` of directory `ino` past position `offset` to `f`
    /// ([`Fs::hand_one`]), counting each added in `added`; true when the reply is full.
    fn hand_dots(
        &self,
        ns: &Ns,
        ino: u64,
        offset: u64,
        unread: &super::core::InoSet,
        f: &mut impl FnMut(&[u8], Plus<'_>, u64) -> bool,
        added: &mut usize,
    ) -> FsResult<bool> {
        let (dots, before) = (
            [(&b"."[..], ino), (&b".."[..], ns.dir(ino)?.parent)],
            *added,
        );
        for (i, (name, dot)) in dots.into_iter().enumerate().skip(offset.min(2) as usize) {
            let entry = (name, dot, Some(Kind::Dir));
            match self.hand_one(ns, entry, i as u64 + 1, unread, f)? {
                Handed::Full => return Ok(true),
                Handed::Added => *added += 1,
                Handed::Skipped => {}
            }
        }
        // Past position 2 no dot is given; before it, at most each one left.
        debug_assert!(
            *added - before <= 2 - offset.min(2) as usize,
            "the dots handed"
        );
        Ok(false)
    }

    /// Hands one entry (`name` naming `ino`, of `kind`) to `f` with its attributes,
    /// `next` the position after it (see [`Fs::readdirplus_entries`]): left out if its
    /// inode is gone; without attributes if its read back
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
            // Gone (damage the read back logged): left out.
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

    /// A listing read from position 0: remembered for directory read-ahead
    /// (`dirahead.rs`: its first files, in listing order) and an access of the directory
    /// (atime, as the mount's atime mode says).
    fn listed_from_start(&self, ino: u64) -> FsResult<()> {
        if self.dir_ahead_on.load(Relaxed) {
            let files: Vec<u64> = {
                let ns = self.ns.read();
                let d = ns.dir(ino)?;
                // A kind not known yet (an add that carried none: `dir/mod.rs`) may be a
                // file's: advising anything else is harmless. A shelved directory (listed
                // through its run's view) advises nothing.
                let entries = (!d.shelved()).then_some(&d.entries);
                (entries.into_iter().flat_map(|e| e.iter()))
                    .filter(|(_, e)| e.kind.is_none_or(|k| k == Kind::File))
                    .map(|(_, e)| e.ino)
                    .take(super::dirahead::MAX_FILES)
                    .collect()
            };
            self.dir_ahead.lock().listed(ino, files);
        }
        self.accessed(ino)
    }

    /// Closes an open directory: its directory lists one handle fewer (a compaction of
    /// its entries that waited may run now; the last listing through its run's view lets
    /// go of the view's adds in order).
    pub fn releasedir(&self, fh: u64) {
        let ns = self.ns.read();
        let Some(h) = self.dir_handles.lock().remove(&fh) else {
            return;
        };
        if h.by_hash.is_some() {
            let others =
                (self.dir_handles.lock().values()).any(|o| o.ino == h.ino && o.by_hash.is_some());
            drop(ns);
            if !others {
                let mut ns = self.ns_write();
                let d = ns.nodes.get_mut(&h.ino).and_then(|n| n.dir.as_deref_mut());
                if let Some(v) = d.and_then(|d| d.view.as_deref_mut()) {
                    v.listed = None;
                }
            }
            return;
        }
        // Gone from memory only when removed and forgotten: the kernel may send the last
        // forget before the release, and then nothing counts the handle any more.
        let waited = ns.nodes.get(&h.ino).and_then(|n| n.dir.as_deref());
        if waited.is_some_and(|d| d.entries.close_lister()) {
            // The last listing closed and its entries' compaction waited for it: under
            // the lock for writing, where no listing can open meanwhile.
            drop(ns);
            let mut ns = self.ns_write();
            if let Some(d) = ns.nodes.get_mut(&h.ino).and_then(|n| n.dir.as_deref_mut()) {
                d.entries.compact_waiting();
            }
        }
        debug_assert!(
            !self.dir_handles.lock().contains_key(&fh),
            "directory handle {fh} closed"
        );
    }

    /// An open handle (`EBADF` for an unknown one).
    fn dir_handle(&self, fh: u64) -> FsResult<DirHandle> {
        let handles = self.dir_handles.lock();
        Ok(handles.get(&fh).ok_or(Errno(libc::EBADF))?.clone())
    }

    /// [`Fs::readdir`] of a listing by hash (`runlisting.rs`): the dots, then batches of
    /// entries, each read under the namespace lock held for writing.
    fn readdir_by_hash(
        &self,
        fh: u64,
        (ino, mut h): (u64, ByHash),
        offset: u64,
        mut f: impl FnMut(&[u8], u64, Option<Kind>, u64) -> bool,
    ) -> FsResult<()> {
        {
            let ns = self.ns.read();
            let dots = [(&b"."[..], ino), (&b".."[..], ns.dir(ino)?.parent)];
            for (i, (name, dot)) in dots.into_iter().enumerate().skip(offset.min(2) as usize) {
                if f(name, dot, Some(Kind::Dir), i as u64 + 1) {
                    return Ok(());
                }
            }
        }
        let mut at = offset.max(2);
        loop {
            let batch = {
                let mut ns = self.ns_write();
                let batch = self.by_hash_batch(&mut ns, ino, &mut h, at, LIST_BATCH)?;
                self.keep_names(fh, &h);
                batch
            };
            if batch.is_empty() {
                return Ok(());
            }
            self.listed_batch(ino, &batch, at == 2 && offset == 0);
            for (name, e, next) in batch {
                if f(&name, e.ino, e.kind, next) {
                    return Ok(());
                }
                at = next;
            }
        }
    }

    /// [`Fs::readdirplus_entries`] of a listing by hash (`runlisting.rs`): the dots, then
    /// batches of entries, each read, its inodes read back and handed out under the
    /// namespace lock held for writing.
    fn readdirplus_by_hash(
        &self,
        fh: u64,
        (ino, mut h): (u64, ByHash),
        offset: u64,
        mut f: impl FnMut(&[u8], Plus<'_>, u64) -> bool,
    ) -> FsResult<()> {
        let mut unread = super::core::InoSet::default();
        let mut added = 0usize;
        if self.hand_dots(&self.ns.read(), ino, offset, &unread, &mut f, &mut added)? {
            return Ok(());
        }
        let mut at = offset.max(2);
        loop {
            let mut ns = self.ns_write();
            let batch = match self.by_hash_batch(&mut ns, ino, &mut h, at, READ_BACK_BATCH) {
                Ok(batch) => batch,
                Err(e) if added == 0 => return Err(e),
                Err(e) => {
                    log::warn!("listing stops short: {e}");
                    return Ok(());
                }
            };
            self.keep_names(fh, &h);
            if batch.is_empty() {
                return Ok(());
            }
            self.listed_batch(ino, &batch, at == 2 && offset == 0);
            for (_, e, _) in &batch {
                if !ns.nodes.contains_key(&e.ino) {
                    match self.load_with(&mut ns, e.ino, Some(ino)) {
                        Ok(()) | Err(Errno(libc::ENOENT)) => {}
                        Err(_) => drop(unread.insert(e.ino)),
                    }
                }
            }
            for (name, e, next) in batch {
                match self.hand_one(&ns, (&name, e.ino, e.kind), next, &unread, &mut f)? {
                    Handed::Full => return Ok(()),
                    Handed::Added => added += 1,
                    Handed::Skipped => {}
                }
                at = next;
            }
        }
    }

    /// A batch of a listing by hash handed to directory read-ahead (`dirahead.rs`): its
    /// files start the directory's walk (`first`: the first batch of a listing from
    /// position 0) or go on with it. Takes `dir_ahead`, a leaf.
    fn listed_batch(&self, ino: u64, batch: &[super::runlisting::Listed], first: bool) {
        if !self.dir_ahead_on.load(Relaxed) {
            return;
        }
        // A kind not known yet may be a file's: advising anything else is harmless.
        let files: Vec<u64> = (batch.iter())
            .filter(|(_, e, _)| e.kind.is_none_or(|k| k == Kind::File))
            .map(|(_, e, _)| e.ino)
            .collect();
        let mut ahead = self.dir_ahead.lock();
        match first {
            true => ahead.listed(ino, files),
            false => ahead.listed_more(ino, files),
        }
    }

    /// Keeps the names a listing by hash took (`ByHash::names`) in its handle, for the
    /// calls after this one.
    fn keep_names(&self, fh: u64, h: &ByHash) {
        if h.names.is_none() {
            return;
        }
        if let Some(DirHandle {
            by_hash: Some(kept),
            ..
        }) = self.dir_handles.lock().get_mut(&fh)
        {
            if kept.names.is_none() {
                kept.names.clone_from(&h.names);
            }
        }
    }
}

/// What handing one entry of a listing to its caller did ([`Fs::hand_one`]).
enum Handed {
    /// Its inode is gone: left out.
    Skipped,
    /// Added to the reply.
    Added,
    /// The reply is full: not added, the listing ends.
    Full,
}

/// The arena offset a listing of directory `ino` goes on from after position `offset` (at
/// least 2: past `.` and `..`), `None` when the position names nothing (a made-up one:
/// the listing's end), `EIO` for a position of the listing's that a compaction forced
/// under it took away (see the module documentation).
fn start_of(d: &super::core::DirState, ino: u64, offset: u64) -> FsResult<Option<usize>> {
    debug_assert!(offset >= 2, "past the dots");
    match offset {
        2 => Ok(Some(0)),
        _ => match d.entries.position(offset) {
            Position::At(p) => Ok(Some(p)),
            Position::Unknown => Ok(None),
            Position::Stale => {
                log::warn!("directory {ino}: a listing's position from before a compaction");
                Err(Errno(libc::EIO))
            }
        },
    }
}
