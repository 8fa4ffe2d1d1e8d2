//! Listings: every file at once ([`Volume::list`], [`Volume::list_with_attrs`] and their
//! `try_` forms), and in pages ([`Volume::list_page`]): every file in id order, a page at
//! a time, so a caller that lists a volume of any size (the C and Python bindings'
//! listings) holds one page and the pass one tree leaf, where
//! [`Volume::try_list_with_attrs`] collects every file at once.
//!
//! Data structures: [`ListPage`], the files of one page and where the next one starts.
//! A page merges, as every whole-volume pass does (`cache.rs`), the files in memory with
//! those only the file tree holds; it takes handles to at most `max` files in memory (from
//! the page's first id on), since no page shows more, and the tree pass stops at the last
//! of those when there were `max` (a later id may be in memory without a handle here).
//!
//! Invariant: a page's files are in id order, above the `after` it was asked for, each
//! once, at most `max` of them; `next` is the last id the page covers (every file at or
//! below it and above `after` is in this page) or `None` when no file follows. Locks: the
//! gate (read) for the page's pass, then `files` briefly, as `Volume::try_visit_with_attrs`.

use super::cache::{info_of, strip, tree_info};
use super::publish::PENDING;
use super::state::FileTable;
use super::{FileInfo, Volume};
use crate::error::{Error, Result};

/// One page of a listing ([`Volume::list_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// The page's files with their attribute blobs, in id order.
    pub files: Vec<(FileInfo, Vec<u8>)>,
    /// What to pass as `after` for the next page: the last id this page covers; `None`
    /// when none follows (the listing is done).
    pub next: Option<u64>,
}

impl Volume {
    /// Every file, in id order (pending files, `publish.rs`, are not shown). Files not in
    /// memory are read from the file tree leaf by leaf; should a leaf fail to read (an
    /// I/O error, damage since the open), this lists only the files in memory:
    /// [`Volume::try_list`] says why.
    pub fn list(&self) -> Vec<FileInfo> {
        self.try_list()
            .unwrap_or_else(|_| strip(self.list_with(|_| (), false).unwrap_or_default()))
    }

    /// [`Volume::list`], failing with the error of a file tree leaf that cannot be read
    /// ([`Error::Io`], [`Error::Corrupt`]).
    pub fn try_list(&self) -> Result<Vec<FileInfo>> {
        Ok(strip(self.list_with(|_| (), true)?))
    }

    /// Every file with its attribute blob, in id order: one pass to rebuild an index of
    /// the caller's keys (instead of [`Volume::attr`] per file). A snapshot: each file as
    /// it is when the pass reaches it. On a leaf that fails to read, as [`Volume::list`].
    pub fn list_with_attrs(&self) -> Vec<(FileInfo, Vec<u8>)> {
        self.try_list_with_attrs()
            .unwrap_or_else(|_| self.list_with(<[u8]>::to_vec, false).unwrap_or_default())
    }

    /// [`Volume::list_with_attrs`], failing as [`Volume::try_list`] does.
    pub fn try_list_with_attrs(&self) -> Result<Vec<(FileInfo, Vec<u8>)>> {
        self.list_with(<[u8]>::to_vec, true)
    }

    /// Every file's figures and `extra(its attribute blob)`, in id order: those in memory and, if
    /// `tree`, read leaf by leaf, those in the file tree only (`cache.rs`).
    fn list_with<T>(
        &self,
        mut extra: impl FnMut(&[u8]) -> T,
        tree: bool,
    ) -> Result<Vec<(FileInfo, T)>> {
        let mut out = Vec::new();
        match tree {
            true => self.try_visit_with_attrs(|info, attr| out.push((info, extra(attr))))?,
            false => {
                let files: Vec<_> = self.files.read().values().cloned().collect();
                for f in files {
                    let f = f.lock();
                    if let Some(info) = info_of(f.alloc.id(), &f) {
                        out.push((info, extra(&f.attr)));
                    }
                }
            }
        }
        debug_assert!(
            out.windows(2).all(|w| w[0].0.id < w[1].0.id),
            "each file once, in order"
        );
        Ok(out)
    }

    /// One page of a listing of every file in id order: up to `max` files with ids above
    /// `after` (from the first for `None`), each with its attribute blob, and where the
    /// next page starts ([`ListPage::next`]). Listing page by page holds one page and one
    /// tree leaf, whatever the file count (pending files, `publish.rs`, are not shown).
    /// Each page is a snapshot of its files as the pass reaches them; a file made or
    /// removed between two pages is listed or not as its id falls before or after the
    /// next page's start (ids only grow, so a file made during a listing comes after every
    /// id listed before it, or not at all).
    ///
    /// Refused, nothing read: [`Error::InvalidSetting`] for `max` 0. Fails as
    /// [`Volume::try_list`] does on a tree leaf it cannot read (a later call from the same
    /// `after` tries it again).
    pub fn list_page(&self, after: Option<u64>, max: usize) -> Result<ListPage> {
        let Some(from) = first_id(after, max)? else {
            return Ok(ListPage {
                files: Vec::new(),
                next: None,
            });
        };
        let _open = self.gate.read_recursive();
        // The files in memory from `from` on, at most `max`: no page shows more.
        let cached: FileTable = (self.files.read().range(from..).take(max))
            .map(|(&id, f)| (id, f.clone()))
            .collect();
        // With `max` of them, a later id may be in memory without a handle here: the tree
        // pass stops at the last one (its copy of such a file may be older).
        let bound = (cached.len() == max).then(|| *cached.keys().next_back().expect("max > 0"));
        let mut files: Vec<(FileInfo, Vec<u8>)> = Vec::new();
        let mut memory = cached.iter().peekable();
        // The files in memory below `upto` (every one left, for `None`), until the page is
        // full.
        let mut from_memory = |upto: Option<u64>, files: &mut Vec<(FileInfo, Vec<u8>)>| {
            while files.len() < max {
                let Some((_, file)) = memory.next_if(|(&id, _)| upto.is_none_or(|u| id < u)) else {
                    return;
                };
                let file = file.lock();
                if let Some(info) = info_of(file.alloc.id(), &file) {
                    files.push((info, file.attr.clone()));
                }
            }
        };
        let mut tree_done = true;
        self.visit_tree_only(&cached, from, &mut |id, entry| {
            if bound.is_some_and(|b| id > b) {
                tree_done = false;
                return Ok(false);
            }
            from_memory(Some(id), &mut files);
            if files.len() == max {
                tree_done = false;
                return Ok(false);
            }
            if entry.attr != PENDING {
                files.push((tree_info(id, &entry), entry.attr));
            }
            Ok(true)
        })?;
        from_memory(None, &mut files);
        let memory_done = memory.peek().is_none();
        drop(memory);
        let next = match (
            files.len() == max,
            tree_done && memory_done && bound.is_none(),
        ) {
            (true, _) => files.last().map(|(f, _)| f.id),
            (false, true) => None,
            // Not full, and files in memory past the handles taken: go on after them.
            (false, false) => bound,
        };
        // What it leaves: ids in order above `after`, at most `max`, `next` covering them.
        debug_assert!(
            files.windows(2).all(|w| w[0].0.id < w[1].0.id)
                && files.first().is_none_or(|(f, _)| f.id >= from)
                && files.len() <= max,
            "a page's files in order, above {after:?}, at most {max}"
        );
        debug_assert!(
            next.is_none_or(|n| files.last().is_none_or(|(f, _)| f.id <= n) && n >= from),
            "the next page starts after this one"
        );
        Ok(ListPage { files, next })
    }
}

/// The first id a page after `after` may hold (`None`: no id can follow), or the refusal
/// of a page of `max` 0.
fn first_id(after: Option<u64>, max: usize) -> Result<Option<u64>> {
    if max == 0 {
        return Err(Error::InvalidSetting {
            setting: "listing page size",
            value: "0 files".into(),
            expected: "at least 1 file".into(),
        });
    }
    Ok(match after {
        None => Some(0),
        Some(a) => a.checked_add(1),
    })
}
