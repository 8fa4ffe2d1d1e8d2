//! The namespace check of `fsck` with memory bounded by a few bytes an inode ([`check`]):
//! what [`super::load`] would find, without keeping any inode's attributes or more than
//! one directory's log at a time.
//!
//! Data structures: [`Census`]: every inode's number in one sorted array with a radix
//! index over it ([`Index`]), and beside it, per inode, its kind, its recorded link count,
//! the names the walk found and whether the walk reached it: about 18 bytes an inode, plus
//! the index's 4 bytes a bucket (at most two buckets an inode), against the hundreds of
//! bytes an inode that a [`super::read::Read`] keeps (its attributes, every directory's
//! entries and the walk's maps). The logs are read one at a time, in the walk's order,
//! and dropped.
//!
//! After a crash, [`repair_crash`] repairs what the census found when it is only what a
//! crash leaves, so a mount after a crash keeps no more than a check does; damage is left
//! to the full read, which rescues names into `/lost+found` first.
//!
//! Invariant: [`check`] reports what `load_once` reports for the same volume, lists
//! sorted (checked against it on small volumes in debug builds, `scan::check`); a
//! volume [`repair_crash`] repaired checks clean.
//!
//! Lock order: none (runs on a read-only view of the volume).

use super::leftovers::{load_xattrs, remove_leftovers};
use super::read::{fix_log, read_log, visit_inodes, walk_with, Tally};
use super::report::NamespaceReport;
use crate::fs::core::{InoMap, ROOT};
use crate::inode::Kind;
use extalloc::volume::Volume;
use std::borrow::Cow;

/// Checks the file system on `vol` without changing it, in memory of a few bytes an inode
/// and one directory's log (see the module documentation). Fails as a full read does: not
/// a file system, or a leaf or log that cannot be read.
pub(super) fn check(vol: &Volume) -> Result<NamespaceReport, String> {
    Ok(census(vol)?.report)
}

/// After a crash: finds what the crash left with the census, and when that is only what a
/// crash leaves (orphans, stray spill files of extended attributes, torn directory log
/// tails), repairs it as a full read's repair would (tails cut, orphans then stray spill
/// files removed) and returns the report. `None` when it found damage (anything else):
/// nothing was written, and the caller reads the whole namespace, which rescues into
/// `/lost+found` before it repairs.
pub(crate) fn repair_crash(vol: &Volume) -> Result<Option<NamespaceReport>, String> {
    let Found {
        report,
        problems: logs,
        ..
    } = census(vol)?;
    let crash_only = report.unnamed.is_empty()
        && report.damaged_inodes.is_empty()
        && report.bad_entries.is_empty()
        && report.link_counts.is_empty()
        && report.damaged_xattrs.is_empty()
        && logs.iter().all(|l| l.tail_only);
    if !crash_only {
        return Ok(None);
    }
    for l in &logs {
        let mut log = read_log(vol, l.dir, false, &mut NamespaceReport::default())?;
        debug_assert!(!log.skipped_damage && !log.contradicted, "a torn tail only");
        fix_log(vol, l.dir, &mut log)?;
    }
    remove_leftovers(vol, &report)?;
    debug_assert!(
        census(vol).is_ok_and(|f| f.report.clean()),
        "a crash's leftovers repaired leave a clean check"
    );
    Ok(Some(report))
}

/// A directory whose log had a problem.
pub(super) struct LogProblem {
    pub dir: u64,
    /// Only a tail to cut (a torn record, a compaction cut short), which a crash leaves;
    /// else damage (a record stepped over, a record that contradicts the log).
    pub tail_only: bool,
}

/// What [`census`] found.
pub(super) struct Found {
    /// The report (lists sorted).
    pub report: NamespaceReport,
    /// The directories whose logs had a problem.
    pub problems: Vec<LogProblem>,
    /// The census itself (each inode's kind and the link count the walk found).
    pub census: Census,
    /// The entries to drop (`report.bad_entries`): directory and name.
    pub drop: Vec<(u64, Vec<u8>)>,
}

/// Counts every inode and walks the namespace from the root (see the module
/// documentation).
pub(super) fn census(vol: &Volume) -> Result<Found, String> {
    let expect = usize::try_from(vol.file_count().map_err(|e| e.to_string())?).unwrap_or(0);
    let mut census = Census::with_capacity(expect);
    let files = visit_inodes(vol, |id, inode| census.push(id, inode.kind, inode.nlink))?;
    census.index = Index::new(&census.ids);
    let mut report = NamespaceReport::default();
    let mut problems = Vec::new();
    let mut read = |d: u64, report: &mut NamespaceReport| {
        let log = read_log(vol, d, false, report)?;
        if log.problem.is_some() {
            let tail_only = !log.skipped_damage && !log.contradicted;
            problems.push(LogProblem { dir: d, tail_only });
        }
        Ok::<_, String>(log)
    };
    census.reach(ROOT);
    let drop = walk_with(&mut census, |d, r| read(d, r).map(Cow::Owned), &mut report)?;
    // The logs of directories the walk did not reach: their problems are reported too.
    for i in 0..census.ids.len() {
        if census.kinds[i] == Kind::Dir && !census.reached[i] {
            read(census.ids[i], &mut report)?;
        }
    }
    census.judge(&mut report);
    report.damaged_inodes = files.damaged;
    let reached = |ino: u64| census.at(ino).is_some_and(|i| census.reached[i]);
    load_xattrs(
        vol,
        (&reached, &mut InoMap::default()),
        (&files.tails, files.spills),
        false,
        &mut report,
    )?;
    sort_lists(&mut report);
    debug_assert_eq!(problems.len(), report.logs.len(), "a problem a log");
    debug_assert_eq!(
        drop.len(),
        report.bad_entries.len(),
        "an entry dropped a bad one"
    );
    Ok(Found {
        report,
        problems,
        census,
        drop,
    })
}

/// Sorts the lists a check's order leaves unordered (by directory and inode number).
pub(super) fn sort_lists(report: &mut NamespaceReport) {
    let key = |s: &String| {
        let digits = s
            .split(|c: char| !c.is_ascii_digit())
            .find(|p| !p.is_empty());
        (digits.and_then(|d| d.parse::<u64>().ok()), s.clone())
    };
    report.logs.sort_by_cached_key(key);
    report.link_counts.sort_by_cached_key(key);
}

/// Every inode's number, kind, recorded link count, names found and whether the walk
/// reached it, in parallel arrays in number order.
pub(super) struct Census {
    ids: Vec<u64>,
    kinds: Vec<Kind>,
    nlinks: Vec<u32>,
    /// Names found for a non-directory; subdirectories found for a directory.
    found: Vec<u32>,
    reached: Vec<bool>,
    index: Index,
}

impl Census {
    fn with_capacity(n: usize) -> Census {
        Census {
            ids: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            nlinks: Vec::with_capacity(n),
            found: Vec::new(),
            reached: Vec::new(),
            index: Index::default(),
        }
    }

    /// Adds inode `id`: ids come in increasing order.
    fn push(&mut self, id: u64, kind: Kind, nlink: u32) {
        assert!(
            self.ids.last().is_none_or(|&l| l < id),
            "inodes are visited in number order"
        );
        self.ids.push(id);
        self.kinds.push(kind);
        self.nlinks.push(nlink);
        self.found.push(0);
        self.reached.push(false);
    }

    /// Where inode `ino` is in the arrays.
    fn at(&self, ino: u64) -> Option<usize> {
        self.index.find(&self.ids, ino)
    }

    /// Marks `ino`, which exists, reached.
    fn reach(&mut self, ino: u64) {
        let i = self.at(ino).expect("a reached inode exists");
        assert!(!self.reached[i], "inode {ino} reached once");
        self.reached[i] = true;
    }

    /// The link count each inode the walk reached should have, where it differs from the
    /// recorded one: `(inode, count found)`, in number order.
    pub(super) fn link_fixes(&self) -> Vec<(u64, u32)> {
        let want = |i: usize| match self.kinds[i] {
            Kind::Dir => 2 + self.found[i],
            _ => self.found[i],
        };
        let fixes: Vec<(u64, u32)> = (0..self.ids.len())
            .filter(|&i| self.reached[i] && self.nlinks[i] != want(i))
            .map(|i| (self.ids[i], want(i)))
            .collect();
        debug_assert!(fixes.windows(2).all(|w| w[0].0 < w[1].0));
        fixes
    }

    /// Every inode's verdict into `report`, in number order: unreached (unnamed or
    /// orphan), or reached with its link count checked and its kind counted.
    fn judge(&self, report: &mut NamespaceReport) {
        let judged = |r: &NamespaceReport| {
            r.dirs + r.files + r.symlinks + r.others + (r.unnamed.len() + r.orphans.len()) as u64
        };
        let before = judged(report);
        for (i, &ino) in self.ids.iter().enumerate() {
            let nlink = self.nlinks[i];
            if !self.reached[i] {
                if nlink > 0 {
                    report.unnamed.push(ino);
                } else {
                    report.orphans.push(ino);
                }
                continue;
            }
            let want = match self.kinds[i] {
                Kind::Dir => 2 + self.found[i],
                _ => self.found[i],
            };
            if nlink != want {
                report
                    .link_counts
                    .push(format!("inode {ino}: {nlink} recorded, {want} found"));
            }
            report.count(self.kinds[i]);
        }
        debug_assert_eq!(
            judged(report) - before,
            self.ids.len() as u64,
            "every inode judged once"
        );
    }
}

impl Tally for Census {
    fn kind(&self, ino: u64) -> Option<Kind> {
        self.at(ino).map(|i| self.kinds[i])
    }

    fn reach_dir(&mut self, ino: u64, from: u64) -> bool {
        let i = self.at(ino).expect("the walk names inodes that exist");
        debug_assert_eq!(self.kinds[i], Kind::Dir, "a directory is reached");
        if self.reached[i] {
            return false;
        }
        self.reached[i] = true;
        let f = self.at(from).expect("the walk's directory exists");
        self.found[f] += 1;
        true
    }

    fn name(&mut self, ino: u64, _from: u64) {
        let i = self.at(ino).expect("the walk names inodes that exist");
        debug_assert_ne!(
            self.kinds[i],
            Kind::Dir,
            "a directory is reached, not named"
        );
        self.reached[i] = true;
        self.found[i] += 1;
    }
}

/// A radix index over a sorted array of numbers: bucket `b` holds the numbers whose value
/// shifted right by `shift` is `b`, and `starts[b]..starts[b + 1]` is where they are. The
/// shift makes at most about two buckets a number, so a lookup searches a bucket of a few
/// numbers on average, whatever their spread.
#[derive(Default)]
struct Index {
    shift: u32,
    starts: Vec<u32>,
}

impl Index {
    fn new(ids: &[u64]) -> Index {
        debug_assert!(ids.is_sorted(), "the index is over sorted numbers");
        let Some(&max) = ids.last() else {
            return Index::default();
        };
        let limit = 2 * ids.len() as u64 + 1;
        let mut shift = 0;
        while (max >> shift) >= limit {
            shift += 1;
        }
        let buckets = usize::try_from(max >> shift).expect("buckets fit memory") + 1;
        let mut starts = Vec::with_capacity(buckets + 1);
        let mut at = 0usize;
        for b in 0..=buckets as u64 {
            while at < ids.len() && (ids[at] >> shift) < b {
                at += 1;
            }
            starts.push(u32::try_from(at).expect("at most 2^32 inodes"));
        }
        debug_assert_eq!(starts.len(), buckets + 1);
        Index { shift, starts }
    }

    /// Where `ino` is in `ids` (the array the index was made over).
    fn find(&self, ids: &[u64], ino: u64) -> Option<usize> {
        let b = usize::try_from(ino >> self.shift).ok()?;
        if b >= self.starts.len().saturating_sub(1) {
            return None;
        }
        let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        let found = ids[lo..hi].binary_search(&ino).ok().map(|i| lo + i);
        debug_assert!(found.is_none_or(|i| ids[i] == ino));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::Index;

    #[test]
    fn the_index_finds_every_number_and_no_other() {
        for ids in [
            vec![],
            vec![1],
            vec![1, 2, 3, 4, 5],
            vec![1, 7, 8, 1000, 1_000_000, u64::MAX / 3],
            (1..5000).map(|i| i * 37 + (i % 5)).collect(),
        ] {
            let index = Index::new(&ids);
            for (i, &id) in ids.iter().enumerate() {
                assert_eq!(index.find(&ids, id), Some(i), "{id}");
                assert_eq!(
                    index.find(&ids, id + 1).map(|j| ids[j]),
                    ids.get(i + 1).copied().filter(|&n| n == id + 1)
                );
            }
            assert_eq!(index.find(&ids, 0), None);
            assert_eq!(index.find(&ids, u64::MAX), None);
            assert!(
                index.starts.len() <= 2 * ids.len() + 2,
                "{}",
                index.starts.len()
            );
        }
    }
}
