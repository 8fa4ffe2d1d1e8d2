//! Directory read-ahead: a reader walking a listed directory's files (`grep -r`, `tar c`,
//! `cp -r`, a backup) has the next files' data advised to the device before it asks.
//!
//! A file's data lies where it was written: files rewritten one at a time over months (a
//! git checkout replaces the files it changes) end up far from their directory's other
//! files, and a cold walk of the tree then waits for one small read after another, where
//! a fresh copy of it is read in few large ones. The kernel's read-ahead works within a
//! file; this works across the files of a directory, as the kernel's does within one:
//!
//! - A listing from its start (`readdir`/`readdirplus` at position 0) remembers the
//!   directory's regular files in listing order.
//! - A read from offset 0 of one of them is a walk's step. The first file of the listing,
//!   or a file after the one the last step read, continues a walk; any other step
//!   restarts the window. A step that continues the walk advises the device of the next
//!   files (`Volume::will_need`: the first [`PER_FILE_BYTES`] of each, in block order) so
//!   that `window` files past the one read are advised; the window starts at
//!   [`FIRST_WINDOW`] files and doubles with each step up to [`MAX_WINDOW`], and advice
//!   is given only once the lead has fallen to half the window (few, larger calls).
//! - A lone read of one file that is not the listing's first advises nothing, and a
//!   listing that nobody reads (`ls -l`) costs a map entry per file.
//!
//! Advice is a hint to the device's cache (an image file's page cache): it changes nothing
//! a read returns, and a failure to give it is logged and otherwise ignored.
//!
//! Data structures: [`DirAhead`] (in `Fs::dir_ahead`): the walks by directory, each with
//! its files in listing order, the position read last and how far advice reached; an
//! index from file to (directory, position); the directories in the order they were
//! listed, for eviction.
//!
//! Invariant: `files` holds exactly the positions of the files of the walks in `dirs`; at
//! most [`MAX_FILES`] files and [`MAX_DIRS`] walks are remembered (the oldest listings
//! are forgotten first; a longer listing is remembered up to that many files; one of
//! fewer than two files not at all); a file is in one walk once (a hard link at its
//! first name in its newest listing); `advised` never passes a walk's end.
//!
//! Lock order: `dir_ahead` is a leaf: taken with `ns` read or with no lock, never held
//! while the volume is called.

use std::collections::{HashMap, HashSet, VecDeque};

/// Files advised past the one read, at a walk's first step.
pub const FIRST_WINDOW: usize = 8;
/// The most files advised past the one read.
pub const MAX_WINDOW: usize = 64;
/// Bytes advised from each file's start (the kernel's own read-ahead takes a long file
/// on from there).
pub const PER_FILE_BYTES: u64 = 256 << 10;
/// Files remembered over every listing.
pub const MAX_FILES: usize = 1 << 16;
/// Directories remembered.
pub const MAX_DIRS: usize = 4096;

/// One listed directory's walk.
#[derive(Debug)]
struct Walk {
    /// Its regular files in listing order.
    files: Vec<u64>,
    /// The position read last.
    last: Option<usize>,
    /// Positions below this one have been advised.
    advised: usize,
    /// Files to keep advised past the one read.
    window: usize,
}

/// The walks of listed directories (see the module documentation).
#[derive(Debug, Default)]
pub struct DirAhead {
    dirs: HashMap<u64, Walk>,
    /// File -> (directory, position in its walk).
    files: HashMap<u64, (u64, usize)>,
    /// Directories in the order they were listed (the oldest first).
    order: VecDeque<u64>,
}

impl DirAhead {
    /// Directory `dir` was listed from its start; `files` are its regular files in
    /// listing order. Replaces the directory's walk.
    pub fn listed(&mut self, dir: u64, mut files: Vec<u64>) {
        self.forget(dir);
        // Hard links to one file under two names of this directory: walked once, at the
        // first name.
        let mut seen = HashSet::with_capacity(files.len());
        files.retain(|&f| seen.insert(f));
        files.truncate(MAX_FILES);
        if files.len() < 2 {
            // Nothing would ever be advised: a walk advises the files after the one read.
            return;
        }
        while self.files.len() + files.len() > MAX_FILES || self.dirs.len() >= MAX_DIRS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.forget(oldest);
        }
        for (i, &f) in files.iter().enumerate() {
            if let Some((d, _)) = self.files.insert(f, (dir, i)) {
                debug_assert_ne!(d, dir, "a file listed twice in one listing");
                // A hard link listed in another directory too: the newer listing has it.
                self.unlist(d, f);
            }
        }
        self.order.push_back(dir);
        self.dirs.insert(
            dir,
            Walk {
                files,
                last: None,
                advised: 0,
                window: FIRST_WINDOW,
            },
        );
        self.check();
    }

    /// More of directory `dir`'s regular files, in listing order, after those its walk
    /// holds (a listing through a run's view gives its entries a batch at a time:
    /// `runlisting.rs`): each not in the walk yet is appended, while every walk holds
    /// fewer than [`MAX_FILES`] files; a directory with no walk starts one ([`Self::listed`]).
    pub fn listed_more(&mut self, dir: u64, files: Vec<u64>) {
        if !self.dirs.contains_key(&dir) {
            return self.listed(dir, files);
        }
        for f in files {
            if self.files.len() >= MAX_FILES {
                break;
            }
            match self.files.get(&f) {
                Some(&(d, _)) if d == dir => continue, // listed already
                // A hard link listed in another directory too: the newer listing has it.
                Some(&(d, _)) => self.unlist(d, f),
                None => {}
            }
            let w = self.dirs.get_mut(&dir).expect("checked above");
            self.files.insert(f, (dir, w.files.len()));
            w.files.push(f);
        }
        self.check();
    }

    /// File `ino` is being read from its start: the files to advise now (empty for a file
    /// of no remembered listing, a step that does not continue a walk, or a lead long
    /// enough already).
    pub fn step(&mut self, ino: u64) -> Vec<u64> {
        let Some(&(dir, at)) = self.files.get(&ino) else {
            return Vec::new();
        };
        let w = self
            .dirs
            .get_mut(&dir)
            .expect("an indexed file's walk is kept");
        debug_assert_eq!(w.files.get(at), Some(&ino), "the index points at the file");
        let onward = w.last.map_or(at == 0, |l| at > l);
        w.last = Some(at);
        if !onward {
            w.window = FIRST_WINDOW;
            return Vec::new();
        }
        let lead = w.advised.saturating_sub(at + 1);
        let out = if lead * 2 <= w.window {
            let from = w.advised.max(at + 1);
            let to = (at + 1 + w.window).min(w.files.len());
            w.advised = to.max(w.advised);
            w.files[from.min(to)..to].to_vec()
        } else {
            Vec::new()
        };
        if at > 0 {
            w.window = (w.window * 2).min(MAX_WINDOW);
        }
        debug_assert!(w.advised <= w.files.len());
        out
    }

    /// Takes file `f` out of directory `dir`'s walk (its index entry is another walk's
    /// now), and indexes the files after it at their new positions.
    fn unlist(&mut self, dir: u64, f: u64) {
        let w = self
            .dirs
            .get_mut(&dir)
            .expect("an indexed file's walk is kept");
        let Some(at) = w.files.iter().position(|&x| x == f) else {
            return;
        };
        w.files.remove(at);
        w.advised -= usize::from(w.advised > at);
        w.last = w.last.filter(|&l| l < at);
        debug_assert!(w.advised <= w.files.len(), "advised past the walk's end");
        for (i, &x) in w.files.iter().enumerate().skip(at) {
            self.files.insert(x, (dir, i));
        }
    }

    /// Drops directory `dir`'s walk, if any.
    fn forget(&mut self, dir: u64) {
        if let Some(w) = self.dirs.remove(&dir) {
            for f in w.files {
                if self.files.get(&f).is_some_and(|&(d, _)| d == dir) {
                    self.files.remove(&f);
                }
            }
            self.order.retain(|&d| d != dir);
        }
        debug_assert!(
            !self.files.values().any(|&(d, _)| d == dir),
            "a forgotten walk's index"
        );
    }

    /// The invariant of the module documentation (debug builds).
    fn check(&self) {
        if cfg!(debug_assertions) {
            assert!(self.files.len() <= MAX_FILES);
            assert_eq!(self.order.len(), self.dirs.len());
            for (&f, &(d, i)) in &self.files {
                assert_eq!(self.dirs[&d].files.get(i), Some(&f), "file {f} in walk {d}");
            }
            for w in self.dirs.values() {
                assert!(w.advised <= w.files.len());
            }
            let walked: usize = self.dirs.values().map(|w| w.files.len()).sum();
            assert_eq!(walked, self.files.len(), "each walk's file indexed once");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(r: std::ops::Range<u64>) -> Vec<u64> {
        r.collect()
    }

    #[test]
    fn a_walk_from_the_first_file_advises_ahead_in_growing_windows() {
        let mut a = DirAhead::default();
        a.listed(1, ids(100..300));
        assert_eq!(a.step(100), ids(101..109), "the first file: a window of 8");
        assert!(
            a.step(101).is_empty(),
            "a lead of 7 in a window of 8, now 16"
        );
        assert_eq!(
            a.step(102),
            ids(109..119),
            "a lead of 6 in 16: advise to 16 ahead"
        );
        assert_eq!(a.step(103), ids(119..136), "window 32");
        assert_eq!(a.step(104), ids(136..169), "window 64, the most");
        assert!(a.step(105).is_empty(), "a lead of 63");
        let mut advised = 169;
        for f in 106..300 {
            let got = a.step(f);
            if let Some(&first) = got.first() {
                assert_eq!(first, advised, "advice continues where it stopped");
                advised = *got.last().unwrap() + 1;
                assert!(advised <= f + 1 + MAX_WINDOW as u64);
            }
            assert!(
                advised > f + MAX_WINDOW as u64 / 2 || advised == 300,
                "lead at {f}"
            );
        }
        assert_eq!(advised, 300, "advice stops at the listing's end");
    }

    #[test]
    fn a_lone_read_or_a_step_back_advises_nothing_and_restarts_the_window() {
        let mut a = DirAhead::default();
        a.listed(1, ids(10..50));
        assert!(a.step(20).is_empty(), "a lone read of a file not first");
        assert_eq!(a.step(21), ids(22..30), "the next one continues the walk");
        assert!(a.step(15).is_empty(), "a step back");
        assert!(
            a.step(16).is_empty(),
            "onward again, files up to 29 advised already"
        );
        assert!(
            a.step(17).is_empty(),
            "a lead of 12 in a window of 16 (8, doubled)"
        );
        assert_eq!(
            a.step(18),
            ids(30..50),
            "a lead of 11 in 32: to the listing's end"
        );
        assert!(a.step(999).is_empty(), "a file of no listing");
    }

    #[test]
    fn a_new_listing_replaces_the_walk_and_old_listings_are_forgotten_past_the_cap() {
        let mut a = DirAhead::default();
        a.listed(1, ids(0..10));
        assert_eq!(a.step(0), ids(1..9));
        a.listed(1, ids(0..10));
        assert_eq!(a.step(0), ids(1..9), "a listing again starts a new walk");
        let half = (MAX_FILES / 2) as u64;
        a.listed(2, ids(1_000_000..1_000_000 + half));
        a.listed(3, ids(2_000_000..2_000_000 + half));
        assert!(
            a.step(0).is_empty(),
            "directory 1, the oldest, was forgotten"
        );
        assert_eq!(a.step(1_000_000).len(), FIRST_WINDOW);
        a.listed(4, ids(3_000_000..3_000_000 + 2 * half + 5));
        assert_eq!(a.files.len(), MAX_FILES, "a long listing is cut to the cap");
        assert!(a.step(2_000_000).is_empty());
    }

    #[test]
    fn a_hard_link_belongs_to_its_newest_listing_and_tiny_listings_are_not_kept() {
        let mut a = DirAhead::default();
        a.listed(1, vec![5, 6, 7, 8]);
        a.listed(2, vec![6, 9]);
        assert_eq!(a.step(5), vec![7, 8], "6 moved to directory 2's walk");
        assert_eq!(a.step(6), vec![9]);
        a.listed(3, vec![42]);
        assert!(!a.dirs.contains_key(&3) && a.step(42).is_empty());
        // Two names of one file in one directory (found by `torture --fs-damage`).
        a.listed(4, vec![50, 51, 50, 52, 51, 53]);
        assert_eq!(
            a.step(50),
            vec![51, 52, 53],
            "each file once, at its first name"
        );
        a.listed(4, vec![50, 50]);
        assert!(
            !a.dirs.contains_key(&4),
            "one file under two names is a listing of one"
        );
        a.check();
    }
}
