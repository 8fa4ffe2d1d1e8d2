//! A large directory looked up without reading its log whole: a shelved directory whose
//! log is a run (`dir/run.rs`) followed by adds and removes answers a lookup from a
//! [`RunView`]: the run's index and filter in memory and the changes after it, then one
//! entry chunk read from the volume (none for a name the filter rules out). A directory
//! read back by a lookup after a mount comes in so (`read_node`, `ondemand.rs`), as does one
//! let go by `Fs::shelve_dirs`. A create, link, unlink or rmdir in it is written through
//! the view too: the record appended to the log, the name's new state put in the view's
//! changes, the directory's count moved by one (`names.rs`); once those changes hold a
//! quarter as many names as the run, the log is compacted into a new run, and the
//! directory shelved with a view of it (`names/compact.rs`). Any call that needs the
//! entries themselves (a listing, a rename) reads the log whole as before
//! (`Fs::unshelve`), which drops the view.
//!
//! Data structures: [`RunView`] (`DirState::view`): the run's [`run::Index`], the
//! changes after it by name (`None`: removed), the last entry chunk read. Invariant: a
//! view is held only by a shelved directory, and the run it reads and its changes replay
//! to the entries the directory holds: its count and bytes as records are the
//! directory's (checked where a view is made, and by the namespace's invariant against
//! the whole log). A view costs about 1.3 bytes an entry of the run, plus the changes
//! and one chunk. Lock order: none of its own (the
//! namespace lock, held for writing, guards making, using and dropping one; a lookup reads
//! the volume under it, as `Fs::unshelve` does).

use crate::dir::{changes, run, Added};
use extalloc::volume::Volume;
use std::collections::BTreeMap;

/// Entry chunks a view reads, per chunk of its run, before the next call reads the log
/// whole: a chunk read through the view costs about 16 µs more than a lookup in entries
/// held whole, and the whole read of a run about as much as 7 to 8 reads of each of its
/// chunks (200,000 entries: 0.14 s against 1,300 chunks; docs/results.md), so a
/// directory used often pays at most about twice the cheaper of the two, and stays out
/// of memory until then.
pub(crate) const READS_PER_CHUNK: u64 = 8;

/// A shelved directory's run index and the changes after its run (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct RunView {
    /// The run's header, index and filter.
    pub(crate) index: run::Index,
    /// Each name the records after the run touched, with its entry after them.
    pub(crate) tail: BTreeMap<Vec<u8>, Option<Added>>,
    /// Entry chunks read through the view: once they reach [`READS_PER_CHUNK`] times the
    /// run's count of chunks, the next call reads the log whole (`runlookup.rs`), so a
    /// directory looked up often costs at most about twice its whole read, and one
    /// looked up seldom much less.
    pub(crate) chunks_read: u64,
    /// The last entry chunk read (its byte in the file, its bytes): a name looked up and
    /// then unlinked is read once (the run never changes under its view).
    pub(crate) last: Option<(u64, Vec<u8>)>,
}

impl RunView {
    /// Notes an add of `name` written after the run.
    pub(crate) fn add(&mut self, name: &[u8], entry: Added) {
        let before = self.tail.insert(name.to_vec(), Some(entry));
        debug_assert!(!matches!(before, Some(Some(_))), "an add over a live name");
    }

    /// Notes a remove of `name` written after the run: a name the run cannot hold (its
    /// filter rules it out) that the changes added leaves them; any other stays, as
    /// removed, hiding the run's entry.
    pub(crate) fn remove(&mut self, name: &[u8]) {
        let before = self.tail.get(name).copied();
        debug_assert!(!matches!(before, Some(None)), "a remove of a removed name");
        match self.tail.get_mut(name) {
            Some(_) if !self.index.may_hold(name) => drop(self.tail.remove(name)),
            Some(state) => *state = None,
            None => drop(self.tail.insert(name.to_vec(), None)),
        }
    }

    /// Names the changes after the run touch.
    pub(crate) fn changed(&self) -> u64 {
        self.tail.len() as u64
    }
}

/// A view of directory `ino`'s log from `start` to `end`, with the entries it holds and
/// their bytes as records, when the log is a run followed by adds and removes alone;
/// `None` otherwise (no run there, a chunk that does not check, a read that fails, a
/// record after the run that is not a plain change: the caller reads the log whole,
/// which reports what is wrong).
pub(crate) fn open(vol: &Volume, ino: u64, start: u64, end: u64) -> Option<(RunView, u64, u64)> {
    let mut read = |at: u64, len: u64| vol.read(ino, at, len).map_err(|e| e.to_string());
    let index = match run::Index::open(&mut read, start) {
        Ok(index) => index?,
        Err(why) => {
            log::debug!("directory {ino}: its run's index: {why}; the log is read whole");
            return None;
        }
    };
    let after = start
        .checked_add(index.shape.bytes())
        .filter(|&a| a <= end)?;
    let c = changes(&read(after, end - after).ok()?)?;
    let count = u64::try_from(index.shape.count as i64 + c.count).ok()?;
    let live = u64::try_from(index.shape.live_bytes() as i64 + c.live).ok()?;
    let view = RunView {
        index,
        tail: c.names,
        chunks_read: 0,
        last: None,
    };
    debug_assert!(
        view.index.at == start,
        "a view of the run at the log's start"
    );
    Some((view, count, live))
}
