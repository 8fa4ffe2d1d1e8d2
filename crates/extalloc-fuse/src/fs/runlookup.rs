//! Lookups answered from a shelved directory's run view (`runview.rs`): [`Fs::view_entry`],
//! the lookup's read back of a name through it ([`Fs::load_looked_up`]), and a change's
//! ([`Fs::entry_for_change`]: `names.rs` then writes the change through the view).
//!
//! Data structures: none of their own (`DirState::view`). Invariant: a view answers only
//! for a shelved directory whose run and changes hold its entries (count and bytes as
//! records, checked as the view is made); anything else is read whole (`Fs::unshelve`).
//! Lock order: called with the namespace lock held for writing; reads the volume under it.

use super::core::{DirState, Entries, Entry, Errno, Fs, FsResult, Node, Ns, Used};
use super::runview::{self, RunView};
use crate::dir::Changed;
use crate::inode::Inode;
use extalloc::volume::Volume;

/// Directory `ino`'s node (its `inode` read) when its log is a run and plain changes:
/// shelved, with a view of the run, its entries not read (`runview::open`); `None`
/// otherwise (the caller reads the log whole). The log starts at the first block still
/// mapped, as `scan::read_log` reads it.
pub(crate) fn viewed_node(vol: &Volume, ino: u64, inode: Inode, parent: u64) -> Option<Node> {
    let end = vol.size(ino).ok()?;
    let bs = vol.block_size();
    let extents = vol.extents(ino).ok()?;
    let start = extents.iter().map(|e| e.logical * bs).min()?.min(end);
    let (view, count, live) = runview::open(vol, ino, start, end)?;
    let run_live = view.index.shape.live_bytes();
    let node = Node {
        inode,
        dir: Some(Box::new(DirState {
            entries: Entries::shelved_with(usize::try_from(count).ok()?),
            parent,
            log_bytes: end,
            log_start: start,
            live,
            run_live,
            mapped_to: 0,
            used: Used::default(),
            view: Some(Box::new(view)),
        })),
        ..Node::plain(inode)
    };
    debug_assert!(
        node.dir.as_ref().is_some_and(|d| d.shelved()),
        "read back shelved"
    );
    Some(node)
}

impl Fs {
    /// The entry `name` has in directory `parent` when it is shelved with a run view (made
    /// here for a shelved directory whose log is a run and its changes): the changes
    /// after the run, else the run's filter and at most one chunk. `None`: no view can
    /// answer (not shelved, no run, or a chunk that cannot be read or does not check,
    /// logged): the caller reads the entries whole ([`Fs::unshelve`]), which says what is
    /// wrong. The kind is the inode's when it is in memory, else the record's.
    pub(crate) fn view_entry(
        &self,
        ns: &mut Ns,
        parent: u64,
        name: &[u8],
    ) -> Option<Option<Entry>> {
        let vol = self.vol.volume();
        let v = self.view_mut(ns, parent)?;
        if v.chunks_read >= runview::READS_PER_CHUNK * u64::from(v.index.shape.entry_chunks) {
            return None; // used often: read whole (see `RunView::chunks_read`)
        }
        let found = match v.tail.state(name) {
            Some(state) => state,
            None => {
                // While a listing by hash of the directory is open (`listed`), its caller
                // walks the entries (`rm -rf`, `find -delete`: each name looked up about
                // once, in an order of its own), which is no reason to read it whole: its
                // reads are not counted, as the listing's own are not.
                let mut walked = 0;
                let counted = match v.listed.is_some() {
                    true => &mut walked,
                    false => &mut v.chunks_read,
                };
                let mut read = runview::cached_read(vol, parent, counted, &mut v.last);
                match v.index.lookup(&mut read, name) {
                    Ok(found) => found,
                    Err(why) => {
                        log::warn!("directory {parent}: its run: {why}; the log is read whole");
                        return None;
                    }
                }
            }
        };
        debug_assert!(
            ns.dir(parent)
                .is_ok_and(|d| d.shelved() && d.view.is_some()),
            "a lookup through the view reads no entry back"
        );
        Some(found.map(|(ino, logged)| Entry {
            ino,
            kind: ns.nodes.get(&ino).map(|n| n.inode.kind).or(logged),
        }))
    }

    /// The run view of directory `dir`, made if it is shelved without one and its log is a
    /// run and plain changes that come to the count and bytes it let go; `None` when it is
    /// not shelved, not a directory, or no view can be made (logged when the log and
    /// memory disagree). Marks the directory used.
    pub(crate) fn view_mut<'n>(&self, ns: &'n mut Ns, dir: u64) -> Option<&'n mut RunView> {
        let d = ns.nodes.get_mut(&dir)?.dir.as_deref_mut()?;
        let count = d.entries.shelved()?;
        d.used.mark();
        if d.view.is_none() {
            let vol = self.vol.volume();
            let (view, c, live) = runview::open(vol, dir, d.log_start, d.log_bytes)?;
            if (c, live) != (count as u64, d.live) {
                log::warn!(
                    "directory {dir}: its run and changes hold {c} entries of {live} \
                     bytes, it let go {count} of {}: the log is read whole",
                    d.live
                );
                return None;
            }
            d.view = Some(Box::new(view));
        }
        // A view stands only beside entries let go, and makes none come back.
        assert_eq!(
            d.entries.shelved(),
            Some(count),
            "a view of a shelved directory"
        );
        d.view.as_deref_mut()
    }

    /// The entry `name` has in directory `parent`, for a change that adds or removes it:
    /// through the run's view where the directory is shelved with one (it stays shelved,
    /// and the change is written through the view: `names.rs`'s `append`), else from
    /// the entries, read back whole first if shelved. `ENOTDIR` if `parent` is not a
    /// directory; on an error `ns` is unchanged but for a view made.
    pub(crate) fn entry_for_change(
        &self,
        ns: &mut Ns,
        parent: u64,
        name: &[u8],
    ) -> FsResult<Option<Entry>> {
        if let Some(found) = self.view_entry(ns, parent, name) {
            debug_assert!(ns.dir(parent)?.view.is_some(), "answered by a view");
            return Ok(found);
        }
        self.unshelve(ns, parent)?;
        let d = ns.dir(parent)?;
        debug_assert!(!d.shelved() && d.view.is_none(), "read whole");
        Ok(d.entries.get(name))
    }

    /// [`Fs::load_named`] for a lookup: a shelved directory with a run answers from its
    /// view ([`Fs::view_entry`]) and stays shelved (its entries are not read whole); any
    /// other directory, or one whose view cannot answer, reads its entries back first.
    /// On an error `ns` is unchanged but for a view made.
    pub(crate) fn load_looked_up(&self, ns: &mut Ns, parent: u64, name: &[u8]) -> FsResult<u64> {
        let Some(found) = self.view_entry(ns, parent, name) else {
            return self.load_named(ns, parent, name);
        };
        let ino = found.ok_or(Errno(libc::ENOENT))?.ino;
        self.load_with(ns, ino, Some(parent))?;
        if let Some(dir) = ns.node(ino)?.dir.as_ref() {
            assert_eq!(
                dir.parent, parent,
                "directory {ino} read back under another parent"
            );
        }
        debug_assert!(
            ns.dir(parent)?.shelved(),
            "a lookup through the view reads no entry"
        );
        Ok(ino)
    }
}

impl Ns {
    /// What memory says `name` names in directory `parent`, for the assertions around a
    /// change: its entries, or a view's changes after the run; `None` when only a read
    /// could say (shelved, and no change after the run touched the name).
    pub(crate) fn entry_known(&self, parent: u64, name: &[u8]) -> Option<FsResult<u64>> {
        let d = match self.dir(parent) {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        if !d.shelved() {
            return Some(self.entry(parent, name));
        }
        let state = d.view.as_deref()?.tail.state(name)?;
        Some(state.map(|(ino, _)| ino).ok_or(Errno(libc::ENOENT)))
    }
}
