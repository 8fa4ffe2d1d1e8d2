//! A large directory looked up without reading its log whole: a shelved directory whose
//! log is a run (`dir/run.rs`) followed by adds and removes answers a lookup from a
//! [`RunView`]: the run's index and filter in memory and the changes after it, then one
//! entry chunk read from the volume (none for a name the filter rules out). A directory
//! read back by a lookup after a mount comes in so (`read_node`, `ondemand.rs`), as does one
//! let go by `Fs::shelve_dirs`; any call that needs the entries themselves (a change, a
//! listing) reads the log whole as before (`Fs::unshelve`), which drops the view.
//!
//! Data structures: [`RunView`] (`DirState::view`): the run's [`run::Index`] and the
//! changes after it by name (`None`: removed). Invariant: a view is held only by a
//! shelved directory, and the run it reads and its changes replay to the entries the
//! directory let go: its count and bytes as records are the directory's (checked where a
//! view is made, and by the namespace's invariant against the whole log). A view costs
//! about 1.3 bytes an entry of the run, plus the changes. Lock order: none of its own (the
//! namespace lock, held for writing, guards making, using and dropping one; a lookup reads
//! the volume under it, as `Fs::unshelve` does).

use crate::dir::{changes, run, Added};
use extalloc::volume::Volume;
use std::collections::BTreeMap;

/// A shelved directory's run index and the changes after its run (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct RunView {
    /// The run's header, index and filter.
    pub(crate) index: run::Index,
    /// Each name the records after the run touched, with its entry after them.
    pub(crate) tail: BTreeMap<Vec<u8>, Option<Added>>,
    /// Entry chunks read through the view: once they reach the run's count of chunks,
    /// lookups have read as much as the whole log, and the next one reads it whole
    /// (`runlookup.rs`), so a directory looked up often costs at most about twice its
    /// whole read, and one looked up seldom much less.
    pub(crate) chunks_read: u64,
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
    };
    debug_assert!(
        view.index.at == start,
        "a view of the run at the log's start"
    );
    Some((view, count, live))
}
