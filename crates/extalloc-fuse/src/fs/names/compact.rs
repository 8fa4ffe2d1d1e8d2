//! A directory log's compaction (`Fs::compact_due`, after each namespace change's group):
//! the live entries rewritten from the next block boundary, as a run (`dir/run.rs`) for a
//! large directory on a device that carries `INCOMPAT_DIR_RUNS`, else as a reset and an add
//! per entry, then the old log's blocks punched. A directory shelved with a run's view
//! (`runview.rs`) is compacted by merging its run, chunk by chunk, with the view's changes
//! (`dir/runbuild.rs`, `merge`), and shelved again with a view of the new run: changes
//! through a view keep a large directory out of memory, compactions included (one whose
//! run does not merge is read whole, which reports what is wrong, and viewed again).
//!
//! Data structures: none of their own (`DirState`'s log bounds and `live`). Invariant: the
//! log from `log_start` replays to the directory's entries before and after (a crash in
//! between leaves the old records and the new log, whole or cut short, which replay to the
//! same entries: `dir/mod.rs`). Lock order: called under the namespace lock held for
//! writing.

use super::super::runview::RunView;
use super::*;
use crate::dir::{run, runbuild};
use std::sync::atomic::Ordering::Relaxed;

impl Fs {
    /// Sets when a directory's log is compacted (once it exceeds `min_log` bytes and four
    /// times its live entries as records, or, from `run_from` bytes of live entries, twice
    /// those its run held; default 64 KiB) and when the compaction writes a run (from
    /// `run_from` bytes of live entries; default [`run::RUN_MIN_BYTES`]; only where the
    /// device carries `INCOMPAT_DIR_RUNS`). For tests and the tortures,
    /// which keep directories small: small values make compactions, and runs, frequent.
    /// Takes effect at the next change.
    pub fn set_compaction(&self, min_log: u64, run_from: u64) {
        self.compaction.min_log.store(min_log, Relaxed);
        self.compaction.run_from.store(run_from, Relaxed);
    }

    /// Compacts the logs of `dirs` that are over their yardstick (after a change's group:
    /// a compaction may take many volume calls, and a crash inside one is harmless), the
    /// log past `min_log` bytes: four times their live entries as records; or a large
    /// directory (a run's worth of entries) holding twice the entries its run held, or
    /// no run (so one that only grows gets runs, each twice the last: a directory of N
    /// entries made one by one writes about 2.4 N entries' records in runs); or, shelved
    /// with a run's view, changes after the run naming a quarter as many names as the
    /// run holds (the view keeps them in memory, at more bytes a name than the entries
    /// read whole).
    pub(super) fn compact_due(&self, ns: &mut Ns, dirs: &[u64]) -> FsResult<()> {
        for &dir in dirs {
            let Some(d) = ns.nodes.get_mut(&dir).and_then(|n| n.dir.as_mut()) else {
                continue; // removed by the change itself
            };
            debug_assert!(
                d.log_start <= d.log_bytes,
                "directory {dir}'s log starts past its end"
            );
            let min_log = self.compaction.min_log.load(Relaxed);
            let log = d.log_bytes - d.log_start;
            let view = d.view.as_deref();
            let grown = view.is_some_and(|v| 4 * v.changed() > v.index.shape.count);
            // A large directory grown to twice its run (or with none) gets a new one.
            let outgrown = self.dir_runs
                && d.live >= self.compaction.run_from.load(Relaxed)
                && d.live > 2 * d.run_live;
            if log <= min_log || (log <= 4 * d.live && !grown && !outgrown) {
                continue;
            }
            let viewed = view.is_some();
            if viewed && self.merge_viewed(dir, d)? {
                continue;
            }
            self.unshelve(ns, dir)?;
            let d = (ns.nodes.get_mut(&dir).and_then(|n| n.dir.as_deref_mut()))
                .expect("a directory in memory");
            if self.compact(dir, d)? && viewed {
                self.view_again(dir, d);
            }
        }
        Ok(())
    }

    /// Shelves directory `dir` (`d`, its entries just compacted into a log) with a view
    /// of its new run, as it was before the compaction read it whole; a log that is no
    /// run (the compaction wrote a reset) keeps the entries in memory.
    fn view_again(&self, dir: u64, d: &mut DirState) {
        let Some(view) = self.view_of_new_run(dir, d, d.entries.len() as u64) else {
            return;
        };
        assert_eq!(d.entries.listers(), 0, "a viewed directory has no listing");
        d.entries.shelve();
        d.view = Some(view);
        self.keep_listed(dir, d);
        debug_assert!(d.shelved(), "shelved with a view");
    }

    /// Makes the new view's adds in order (`RunView::listed`) where a listing by hash of
    /// directory `dir` (`d`) is open, as the view it replaces had them or its next batch
    /// would: lookups under the listing go uncounted (`runlookup.rs`) from the first call
    /// after a compaction. Takes `dir_handles` (after `ns`, which the caller holds).
    fn keep_listed(&self, dir: u64, d: &mut DirState) {
        let Some(v) = d.view.as_deref_mut() else {
            return;
        };
        let handles = self.dir_handles.lock();
        let open = handles
            .values()
            .any(|h| h.ino == dir && h.by_hash.is_some());
        if open {
            v.listed_adds();
        }
        debug_assert!(!open || v.listed.is_some(), "the adds in order made");
    }

    /// A view of the run directory `dir` (`d`) just wrote (read back from the volume's
    /// cache), which holds `count` entries and `d.live` bytes of them (asserted); `None`
    /// where it cannot be read or the log is no run (a reset): the next call that needs
    /// one makes it again, or reads the log whole.
    fn view_of_new_run(&self, dir: u64, d: &DirState, count: u64) -> Option<Box<RunView>> {
        let vol = self.vol.volume();
        let (view, c, live) = super::super::runview::open(vol, dir, d.log_start, d.log_bytes)?;
        assert_eq!(
            (c, live),
            (count, d.live),
            "directory {dir}: its new run holds its entries"
        );
        Some(Box::new(view))
    }

    /// Rewrites `dir`'s log as its live entries from the next block boundary, then punches
    /// the blocks before them: a run (`dir/run.rs`) where the entries take
    /// [`run::RUN_MIN_BYTES`] as records (by default) and the device carries `INCOMPAT_DIR_RUNS`,
    /// else a reset and an add per entry. A crash in between leaves the old records and
    /// the new log, whole or cut short, which replay to the same entries. False: no room
    /// for the new log (the old one stands, whole and valid, until a later change).
    fn compact(&self, dir: u64, d: &mut DirState) -> FsResult<bool> {
        let vol = self.vol.uncached(dir);
        let bs = vol.block_size();
        let as_run = self.dir_runs && d.live >= self.compaction.run_from.load(Relaxed);
        // The new log is written before the old one's blocks go: it grows the directory
        // for a while, so it leaves the room kept for metadata as a create does. Without
        // that room the old log stays, whole and valid, until a later change finds it.
        // Checked before the log is built: a change that finds the room short pays a
        // check, not a copy of every entry.
        let bound = match as_run {
            true => run::max_bytes(d.entries.len() as u64, d.live),
            false => (crate::dir::RECORD_OVERHEAD as u64) + d.live, // the reset, the adds
        };
        match vol.check_room(bound.div_ceil(bs)) {
            Err(e) if e.kind() == extalloc::ErrorKind::NoSpace => return Ok(false),
            other => other?,
        }
        let live = (d.entries.iter()).map(|(n, e)| (n, (e.ino, self.kind_to_log(e.kind))));
        let log = match as_run {
            true => {
                let key = run::Key::random().map_err(|e| {
                    log::error!("directory {dir}: no random key for its run: {e}");
                    Errno(libc::EIO)
                })?;
                runbuild::build(live, key)
            }
            false => crate::dir::compacted(live.collect::<Vec<_>>().into_iter()),
        };
        debug_assert!(
            log.len() as u64 <= bound && (as_run || log.len() as u64 == bound),
            "the compacted log's length"
        );
        self.replace_log(dir, d, &log, as_run)?;
        Ok(true)
    }

    /// Writes `log`, the compacted log of directory `dir` (`d`; a run if `as_run`), from
    /// the block after the old one's end, then punches the old one's blocks.
    fn replace_log(&self, dir: u64, d: &mut DirState, log: &[u8], as_run: bool) -> FsResult<()> {
        let at = self.new_log_at(dir, d);
        self.vol.uncached(dir).write(dir, at, log)?;
        self.adopt_log(dir, d, (at, log.len() as u64), as_run)?;
        debug_assert_eq!(
            d.log_bytes,
            at + log.len() as u64,
            "the log written is the one kept"
        );
        Ok(())
    }

    /// Where the compacted log of directory `dir` (`d`) is written: the block after the old
    /// log's end.
    fn new_log_at(&self, dir: u64, d: &DirState) -> u64 {
        let bs = self.vol.uncached(dir).block_size();
        d.log_bytes.div_ceil(bs) * bs
    }

    /// Takes the log of `len` bytes written `at` as directory `dir`'s (`d`; a run if
    /// `as_run`): punches the old one's blocks.
    fn adopt_log(
        &self,
        dir: u64,
        d: &mut DirState,
        (at, len): (u64, u64),
        as_run: bool,
    ) -> FsResult<()> {
        let vol = self.vol.uncached(dir);
        let bs = vol.block_size();
        debug_assert_eq!(at, self.new_log_at(dir, d), "the new log after the old");
        if at > d.log_start {
            vol.fallocate(dir, Fallocate::PunchHole, d.log_start, at - d.log_start)?;
        }
        d.log_start = at;
        d.log_bytes = at + len;
        d.run_live = if as_run { d.live } else { 0 };
        d.mapped_to = d.mapped_to.max(d.log_bytes.div_ceil(bs) * bs);
        // The new log holds the live entries only, each at least as long as its add.
        debug_assert!(
            d.log_bytes - d.log_start >= d.live,
            "compacted log of {dir} lost entries"
        );
        Ok(())
    }

    /// Cuts what a merge that stopped wrote after directory `dir`'s log (`d`): headerless
    /// chunks are no run, but a read of the log to the file's end would take them for a
    /// torn tail (and mark the store damaged). The blocks the log had mapped ahead go too
    /// (`mapped_to` unknown again). A cut that fails is logged, and the call's error only
    /// when `fail` says no other error stands.
    pub(in crate::fs) fn cut_merge(&self, dir: u64, d: &mut DirState, fail: bool) -> FsResult<()> {
        let cut = self.vol.uncached(dir).truncate(dir, d.log_bytes);
        d.mapped_to = 0;
        // The log's own bytes are untouched: the cut starts at its end.
        debug_assert!(d.log_start <= d.log_bytes, "the log before the cut");
        match cut {
            Ok(()) => Ok(()),
            Err(e) => {
                log::error!("directory {dir}: cannot cut a merge that stopped: {e}");
                if fail {
                    return Err(e.into());
                }
                Ok(())
            }
        }
    }

    /// Compacts directory `dir` (`d`, shelved with a run's view) without reading its log
    /// whole: its run's entry chunks merged with the view's changes into a new run under
    /// the same key (`runbuild::merge`: no sort, no replay, no entry held by name), then
    /// a view of the new run. True when done, or when the room for the new run is short
    /// (the old log stands, whole and valid, until a later change); false when the run
    /// and changes do not merge (a chunk that cannot be read or does not check, a count
    /// that does not add up: logged), for the caller to read the log whole, which says
    /// what is wrong.
    fn merge_viewed(&self, dir: u64, d: &mut DirState) -> FsResult<bool> {
        let count = d.entries.shelved().expect("a viewed directory is shelved") as u64;
        let vol = self.vol.uncached(dir);
        let bound = run::max_bytes(count, d.live);
        match vol.check_room(bound.div_ceil(vol.block_size())) {
            Err(e) if e.kind() == extalloc::ErrorKind::NoSpace => return Ok(true),
            other => other?,
        }
        let view = d.view.as_deref().expect("a viewed directory");
        let reader = self.vol.volume();
        let mut read = |at: u64, len: u64| reader.read(dir, at, len).map_err(|e| e.to_string());
        // The new run is written as it is merged, after the old log (no run's bytes held
        // whole); a write that fails is the call's error, not a reason to read whole.
        let new_at = self.new_log_at(dir, d);
        let (mut failed, mut wrote) = (None, false);
        let mut write = |off: u64, bytes: &[u8]| {
            wrote = true;
            vol.write(dir, new_at + off, bytes).map_err(|e| {
                let why = e.to_string();
                failed = Some(e);
                why
            })
        };
        let merged = runbuild::merge(&view.index, (&mut read, &mut write), &view.tail, count);
        if wrote && (failed.is_some() || merged.is_err()) {
            self.cut_merge(dir, d, failed.is_none())?;
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        let shape = match merged {
            Ok(shape) => shape,
            Err(why) => {
                log::warn!("directory {dir}: its run and its changes: {why}; read whole");
                return Ok(false);
            }
        };
        debug_assert!(shape.bytes() <= bound, "the merged run's length");
        debug_assert!(
            (reader.read(dir, new_at, shape.bytes()).ok())
                .is_some_and(|b| run::read(&shape, &b).whole()),
            "the merged run reads back whole"
        );
        self.adopt_log(dir, d, (new_at, shape.bytes()), true)?;
        d.view = self.view_of_new_run(dir, d, count);
        self.keep_listed(dir, d);
        debug_assert!(d.shelved(), "a merge reads no entry");
        Ok(true)
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod merge_tests;
