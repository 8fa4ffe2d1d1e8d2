//! A large directory looked up without reading its log whole: a shelved directory whose
//! log is a run (`dir/run.rs`) followed by adds and removes answers a lookup from a
//! [`RunView`]: the run's index and filter in memory and the changes after it, then one
//! entry chunk read from the volume (none for a name the filter rules out). A directory
//! read back by a lookup after a mount comes in so (`read_node`, `ondemand.rs`), as does
//! one let go by `Fs::shelve_dirs`. A create, link, unlink or rmdir in it is written
//! through the view too: the record appended to the log, the name's new state put in the
//! view's changes, the directory's count moved by one (`names.rs`); once those changes
//! hold a quarter as many names as the run, the run and the changes are merged chunk by
//! chunk into a new run, and the directory keeps a view of it (`names/compact.rs`,
//! `dir/runbuild.rs`). A listing reads the run's chunks one at a time in the run's order,
//! merged with the changes' adds kept in that order (`runlisting.rs`); a rename goes
//! through the view as a create and an unlink do (`names/rename.rs`).
//!
//! Data structures: [`RunView`] (`DirState::view`): the run's [`run::Index`], the changes
//! after it by name ([`Tail`]: packed, a removed name an entry of inode 0), the last two
//! entry chunks read, and while a listing is open the changes' adds by hash
//! (`RunView::listed`; the invariant checks them against the changes); [`ByHash`], a
//! listing's order, in its handle. Invariant: a view is held only by a shelved
//! directory, and the run it reads and its changes replay to the entries the directory
//! holds: its count and bytes as records are the directory's (checked where a view is
//! made, and by the namespace's invariant against the whole log). A view costs about 1.3
//! bytes an entry of the run, about 30 bytes a name changed after it, and two chunks
//! (and, while a listing is open, about 60 bytes an add after the run). Lock order: none
//! of its own (the namespace lock, held for writing, guards making, using and dropping
//! one; a lookup reads the volume under it, as `Fs::unshelve` does).

use super::entries::{Entries, Entry};
use crate::dir::{changes_into, run, Added, Changed};
use extalloc::volume::Volume;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The changes after a run, by name, packed as a directory's entries are (`entries.rs`:
/// about 30 bytes a name, against about 100 in a map of names): a removed name is an
/// entry of inode 0, which no file has.
#[derive(Debug, Default)]
pub(crate) struct Tail(Entries);

/// A name and its hash under a run's key, as listings order names (`runlisting.rs`).
pub(crate) type Hashed = (u64, Box<[u8]>);

/// A listing in the order of a run's hashes (`runlisting.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ByHash {
    /// The key of the run the listing began on.
    pub(crate) key: run::Key,
    /// The directory's names by (hash under `key`, name), taken when the listing found
    /// the directory without a view of a run of that key.
    pub(crate) names: Option<Arc<SortedNames>>,
}

/// Names sorted by (hash, name), packed: each name's hash (8 bytes), where it starts in
/// `bytes` (4), and its length and bytes there (1 + its length): about 21 bytes for an
/// 8-byte name, against about 48 for a boxed name beside its hash.
#[derive(Debug, Default)]
pub(crate) struct SortedNames {
    hashes: Vec<u64>,
    starts: Vec<u32>,
    bytes: Vec<u8>,
}

impl SortedNames {
    /// `names` with their hashes under `key`, sorted.
    pub(crate) fn new<'a>(key: &run::Key, names: impl Iterator<Item = &'a [u8]>) -> Self {
        let mut hashed: Vec<(u64, &[u8])> = names.map(|n| (key.hash(n), n)).collect();
        hashed.sort_unstable();
        let mut out = SortedNames {
            hashes: Vec::with_capacity(hashed.len()),
            starts: Vec::with_capacity(hashed.len()),
            bytes: Vec::with_capacity(hashed.iter().map(|h| 1 + h.1.len()).sum()),
        };
        for (hash, name) in hashed {
            let start = u32::try_from(out.bytes.len()).expect("names of one directory in 4 GiB");
            out.hashes.push(hash);
            out.starts.push(start);
            out.bytes
                .push(u8::try_from(name.len()).expect("a name of 255 bytes at most"));
            out.bytes.extend_from_slice(name);
            debug_assert_eq!(out.name(out.hashes.len() - 1), name, "packed");
        }
        out
    }

    /// Name `i`'s bytes.
    fn name(&self, i: usize) -> &[u8] {
        let at = self.starts[i] as usize;
        &self.bytes[at + 1..at + 1 + usize::from(self.bytes[at])]
    }

    /// The names from the first whose hash is `from` or more: (hash, name) each.
    pub(crate) fn since(&self, from: u64) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let first = self.hashes.partition_point(|&h| h < from);
        (first..self.hashes.len()).map(|i| (self.hashes[i], self.name(i)))
    }
}

/// A removed name's entry in a [`Tail`].
const REMOVED: Entry = Entry { ino: 0, kind: None };

impl Changed for Tail {
    fn state(&self, name: &[u8]) -> Option<Option<Added>> {
        let e = self.0.get(name)?;
        Some((e.ino != 0).then_some((e.ino, e.kind)))
    }

    fn note(&mut self, name: &[u8], state: Option<Added>) {
        let e = state.map_or(REMOVED, |(ino, kind)| Entry { ino, kind });
        assert!(state.is_none_or(|(ino, _)| ino != 0), "a name of inode 0");
        self.0.insert(name, e);
        debug_assert_eq!(self.state(name), Some(state), "noted");
    }

    fn each(&self, f: &mut dyn FnMut(&[u8], Option<Added>)) {
        let mut seen = 0;
        for (name, e) in self.0.iter() {
            f(name, (e.ino != 0).then_some((e.ino, e.kind)));
            seen += 1;
        }
        debug_assert_eq!(seen, self.len(), "every name touched, once");
    }
}

impl Tail {
    /// Names touched.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Entry chunks a view reads, per chunk of its run, before the next call reads the log
/// whole: a lookup through the view costs about 3-4 µs more than one in entries held
/// whole (a chunk read from the volume), and the whole read of a run about as much as 30
/// to 60 reads of each of its chunks (200,000 entries: 150-210 ms against 1,334 chunks;
/// `examples/view-lookup-cost.rs`, docs/results.md), so a directory used often pays at
/// most about twice the cheaper of the two, and stays out of memory until then. Reads
/// while a listing by hash of the directory is open do not count (`runlookup.rs`).
pub(crate) const READS_PER_CHUNK: u64 = 32;

/// A shelved directory's run index and the changes after its run (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct RunView {
    /// The run's header, index and filter.
    pub(crate) index: run::Index,
    /// Each name the records after the run touched, with its entry after them.
    pub(crate) tail: Tail,
    /// Entry chunks read through the view: once they reach [`READS_PER_CHUNK`] times the
    /// run's count of chunks, the next call reads the log whole (`runlookup.rs`), so a
    /// directory looked up often costs at most about twice its whole read, and one
    /// looked up seldom much less.
    pub(crate) chunks_read: u64,
    /// The last two entry chunks read (each its byte in the file and its bytes, the
    /// latest last): a name looked up and then unlinked is read once (the run never
    /// changes under its view), and a listing's next call, which goes on from a chunk
    /// its last one read, reads it again from here.
    pub(crate) last: Vec<(u64, Vec<u8>)>,
    /// The names the changes add (inode not 0), by (hash under the run's key, name):
    /// made by the first listing through the view (`runlisting.rs`), kept up by every
    /// change while it stands, let go when the directory's last such listing closes.
    pub(crate) listed: Option<BTreeSet<Hashed>>,
}

impl RunView {
    /// Notes an add of `name` written after the run.
    pub(crate) fn add(&mut self, name: &[u8], entry: Added) {
        debug_assert!(
            !matches!(self.tail.state(name), Some(Some(_))),
            "an add over a live name"
        );
        self.tail.note(name, Some(entry));
        if let Some(listed) = self.listed.as_mut() {
            let fresh = listed.insert((self.index.shape.key.hash(name), name.into()));
            assert!(fresh, "an add listed twice");
        }
    }

    /// Notes a remove of `name` written after the run: a name the run cannot hold (its
    /// filter rules it out) that the changes added leaves them; any other stays, as
    /// removed, hiding the run's entry.
    pub(crate) fn remove(&mut self, name: &[u8]) {
        let before = self.tail.state(name);
        debug_assert!(!matches!(before, Some(None)), "a remove of a removed name");
        match before {
            Some(Some(_)) if !self.index.may_hold(name) => drop(self.tail.0.remove(name)),
            _ => self.tail.note(name, None),
        }
        if let (Some(listed), Some(Some(_))) = (self.listed.as_mut(), before) {
            let held = listed.remove(&(self.index.shape.key.hash(name), name.into()));
            assert!(held, "a listed add removed");
        }
    }

    /// The adds after the run in the run's order ([`RunView::listed`]), made if not yet.
    pub(crate) fn listed_adds(&mut self) -> &BTreeSet<Hashed> {
        let (tail, key) = (&self.tail, &self.index.shape.key);
        self.listed.get_or_insert_with(|| {
            let (mut set, mut adds) = (BTreeSet::new(), 0);
            tail.each(&mut |name, state| {
                if state.is_some() {
                    adds += 1;
                    set.insert((key.hash(name), name.into()));
                }
            });
            assert_eq!(set.len(), adds, "every add once");
            set
        })
    }

    /// Names the changes after the run touch.
    pub(crate) fn changed(&self) -> u64 {
        self.tail.len() as u64
    }
}

/// A read of directory `ino`'s file for a view's run (see [`run::ReadAt`]): one of the
/// view's last chunks when it is the one asked for, else the volume, each read counted in
/// `reads` and kept in `last`.
pub(crate) fn cached_read<'a>(
    vol: &'a Volume,
    ino: u64,
    reads: &'a mut u64,
    last: &'a mut Vec<(u64, Vec<u8>)>,
) -> impl FnMut(u64, u64) -> Result<Vec<u8>, String> + 'a {
    move |at, len| {
        if let Some((_, bytes)) = last.iter().find(|l| l.0 == at && l.1.len() as u64 == len) {
            return Ok(bytes.clone());
        }
        *reads += 1;
        let bytes = vol.read(ino, at, len).map_err(|e| e.to_string())?;
        if last.len() == LAST_CHUNKS {
            last.remove(0);
        }
        last.push((at, bytes.clone()));
        debug_assert!(last.len() <= LAST_CHUNKS, "chunks kept");
        Ok(bytes)
    }
}

/// Entry chunks a view keeps ([`RunView::last`]).
const LAST_CHUNKS: usize = 2;

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
    let mut tail = Tail::default();
    let (added, bytes) = changes_into(&read(after, end - after).ok()?, &mut tail)?;
    let count = u64::try_from(index.shape.count as i64 + added).ok()?;
    let live = u64::try_from(index.shape.live_bytes() as i64 + bytes).ok()?;
    let view = RunView {
        index,
        tail,
        chunks_read: 0,
        last: Vec::new(),
        listed: None,
    };
    debug_assert!(
        view.index.at == start,
        "a view of the run at the log's start"
    );
    Some((view, count, live))
}
