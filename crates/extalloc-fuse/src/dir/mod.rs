//! A directory's entries and their log on the volume.
//!
//! Data structures: a directory's volume file holds a log of records, each
//! `tag u8 | ino u64 | name length u16 | name | crc32c u32` (little endian, the checksum
//! over everything before it). The tag's low four bits are the record's kind (1 add, 2
//! remove, 3 reset); an add's high four bits are its entry's kind when known
//! (`Kind::code`: 1 to 7, so that `readdir` gives `d_type` without reading the inode, as
//! ext4's `filetype` does), 0 when not (a log written before the volume carried
//! `INCOMPAT_TYPED_ENTRIES`, or a repair's add). A reset (no name; in place of the inode,
//! the number of adds that follow it) drops every entry before it, and applies only when
//! those adds are all there (a compaction cut short by a crash is the log's torn tail):
//! compaction appends a reset and the live entries, block-aligned, then punches
//! the blocks before them, which read as zeros. Zero bytes between records are skipped (no
//! record starts with a zero tag). [`DirLog::parse`] replays a log into the
//! entries (name -> inode, and the kind its add carried); [`record`]
//! encodes one record. Each change appends one record at the end of the log through the
//! volume, so it travels in the volume's journal with the operation that made it.
//!
//! Invariant: replaying the log's records in order gives the directory's entries; a
//! record that does not check ends the log there when nothing after it checks (a torn
//! tail), else the parse steps over the damage to the next record that checks and says so
//! (only the damaged records' names are lost; mount then rewrites the log whole).
//! An add names a name that is absent, a remove one that is present; a log that says
//! otherwise is reported, never followed blindly. A kind in a record is a hint the inode
//! overrules: whoever reads the inode takes its kind.
//!
//! A large directory's compaction writes a **run** in place of the reset and its adds
//! (`run.rs`: tag 4, the entries sorted by a keyed hash in chunks, with an index and a
//! filter), where the device carries `INCOMPAT_DIR_RUNS`. A run replaces every entry
//! before it, as a reset does, when it is whole; one that is not whole is a compaction cut
//! short (the log's torn tail) where the log before it still holds records and nothing
//! after it checks, and damage otherwise: its chunks that check give their entries, the
//! rest are stepped over. Bytes stepped over that hold a run's chunks but no header that
//! checks (a damaged header) give the entries of the chunks that check on their own
//! (`run::salvage`), but for the torn tail after records.
//!
//! Lock order: none (plain values; the namespace lock, `Fs::ns` in `fs/mod.rs`, guards them).

use crate::inode::Kind;
use std::collections::BTreeMap;

mod record;
pub mod run;
pub mod runbuild;

use record::{frame, ADD, REMOVE, RESET, RUN};
pub use record::{Added, NAME_MAX, RECORD_OVERHEAD};

/// The record for adding (`Some((ino, kind))`) or removing (`None`) `name`. A kind is
/// written only where the volume carries `INCOMPAT_TYPED_ENTRIES` (the caller's choice:
/// `None` writes an add an older build reads).
pub fn record(name: &[u8], entry: Option<Added>) -> Vec<u8> {
    debug_assert!(!name.is_empty() && name.len() <= NAME_MAX);
    let tag = match entry {
        Some((_, kind)) => ADD | kind.map_or(0, Kind::code) << 4,
        None => REMOVE,
    };
    frame(tag, entry.map_or(0, |e| e.0), name)
}

/// The log that replaces a whole directory: a reset counting the adds that follow, then
/// an add for each entry, with its kind when given (as [`record`]).
pub fn compacted<'a>(entries: impl ExactSizeIterator<Item = (&'a [u8], Added)>) -> Vec<u8> {
    let mut out = frame(RESET, entries.len() as u64, &[]);
    for (name, entry) in entries {
        out.extend(record(name, Some(entry)));
    }
    out
}

/// The first position at or after `from` where a whole record checks (a reset only with
/// all the adds it counts): where the log goes on after damage in its middle. A name
/// cannot hold a record (a record's inode and length fields hold zero bytes, which no name
/// does), so nothing a caller named is taken for one.
fn resume(log: &[u8], from: usize) -> Option<usize> {
    (from..log.len()).find(|&q| {
        log[q] != 0
            && match parse_one(&log[q..]) {
                Ok(r) if r.op == RESET => complete(&log[q + r.len..], r.ino),
                Ok(_) => true,
                Err(_) => false,
            }
    })
}

/// Do the `count` records after a reset that ends at `b`'s start all check, and add?
/// A compaction cut short by a crash leaves fewer: its reset must not apply.
fn complete(b: &[u8], count: u64) -> bool {
    let mut pos = 0;
    for _ in 0..count {
        match parse_one(&b[pos..]) {
            Ok(r) if r.op == ADD => pos += r.len,
            _ => return false,
        }
    }
    true
}

/// Bytes a directory's entries take as add records.
pub fn live_bytes<'a>(entries: impl Iterator<Item = &'a Vec<u8>>) -> u64 {
    entries.map(|n| (RECORD_OVERHEAD + n.len()) as u64).sum()
}

/// A directory log read back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DirLog {
    /// The entries: name -> inode, and the kind its add carried (`None`: an untyped add).
    pub entries: BTreeMap<Vec<u8>, Added>,
    /// Bytes of the log that parsed (the rest is a torn or damaged tail).
    pub valid_bytes: u64,
    /// Where the parsed bytes started in the directory's file (what came before is punched
    /// history).
    pub start: u64,
    /// Records read.
    pub records: u64,
    /// What stopped the parse before the end, or what it stepped over, if anything.
    pub problem: Option<String>,
    /// Damage in the middle was stepped over (the records after it were read): the log
    /// must be rewritten whole to be clean again (mount does, `fs/scan/`).
    pub skipped_damage: bool,
    /// A record added a name already there or removed one not there (damage: a crash
    /// leaves at most a torn tail).
    pub contradicted: bool,
    /// Bytes as records of the entries the log's last run holds (0: no run, or a reset
    /// after it): a directory grown to twice that is compacted into a new run.
    pub run_live: u64,
}

impl DirLog {
    /// Replays `log`.
    pub fn parse(log: &[u8]) -> DirLog {
        let mut d = DirLog::default();
        let mut pos = 0usize;
        while pos < log.len() {
            if log[pos] == 0 {
                pos += 1; // a punched or padded stretch
                continue;
            }
            match parse_one(&log[pos..]) {
                Ok(r) if r.op == RESET && !complete(&log[pos + r.len..], r.ino) => {
                    d.problem = Some(format!(
                        "record {} at byte {pos}: a compaction cut short (a reset for {} \
                         entries without them all)",
                        d.records, r.ino
                    ));
                    break;
                }
                Ok(r) if r.op == RUN => match d.run(log, pos, &r) {
                    Some(end) => pos = end,
                    None => break,
                },
                Ok(r) => {
                    d.apply(&r, pos);
                    pos += r.len;
                    d.records += 1;
                }
                Err(why) => {
                    let next = resume(log, pos + 1);
                    // A run whose header is damaged: its chunks that check give their
                    // entries, unless this is the log's torn tail after records (a
                    // compaction cut short, whose run holds the entries already there).
                    let saved = match next.is_some() || d.records == 0 {
                        true => run::salvage(&log[pos..next.unwrap_or(log.len())]),
                        false => run::Salvaged::default(),
                    };
                    if saved.chunks > 0 {
                        for (name, e) in saved.entries {
                            d.entries.entry(name).or_insert(e);
                        }
                        d.problem = Some(format!(
                            "record {} at byte {pos}: {why}; a run's header lost: the \
                             entries of {} entry chunks that check read, bytes {pos}..{} \
                             stepped over",
                            d.records,
                            saved.chunks,
                            next.unwrap_or(log.len())
                        ));
                        d.skipped_damage = true;
                        d.records += 1;
                        pos = next.unwrap_or(log.len());
                        continue;
                    }
                    let Some(next) = next else {
                        // Nothing checks after it: a torn tail, where the log ends.
                        d.problem = Some(format!("record {} at byte {pos}: {why}", d.records));
                        break;
                    };
                    d.problem = Some(format!(
                        "record {} at byte {pos}: {why}; bytes {pos}..{next} stepped over, \
                         the records after them read",
                        d.records
                    ));
                    d.skipped_damage = true;
                    pos = next;
                }
            }
        }
        d.valid_bytes = pos as u64;
        d
    }

    /// Applies the run whose header `r` was read at byte `pos` of `log` (the module
    /// documentation says what a run that is not whole stands for): where the parse goes
    /// on, or `None` where the log ends before it (a compaction cut short).
    fn run(&mut self, log: &[u8], pos: usize, r: &Rec<'_>) -> Option<usize> {
        let shape = run::Shape::from_body(r.ino, r.name).expect("parse_one checked the shape");
        let end = pos.saturating_add(shape.bytes() as usize);
        let read = run::read(&shape, &log[pos..end.min(log.len())]);
        if !read.whole() {
            let why = read.problems.join("; ");
            if self.records > 0 && resume(log, end).is_none() {
                self.problem = Some(format!(
                    "record {} at byte {pos}: a compaction cut short (a run of {} entries \
                     that is not whole: {why})",
                    self.records, shape.count
                ));
                return None;
            }
            self.problem = Some(format!(
                "record {} at byte {pos}: a damaged run of {} entries ({why}); the \
                 entries of its chunks that check read",
                self.records, shape.count
            ));
            self.skipped_damage = true;
        }
        self.entries = read.entries.into_iter().collect();
        self.records += 1;
        self.run_live = shape.live_bytes();
        Some(end.min(log.len()))
    }

    /// Applies the record `r` (read at byte `pos`) to the entries, reporting an add of a
    /// name already there or a remove of one not there.
    fn apply(&mut self, r: &Rec<'_>, pos: usize) {
        let applied = match r.op {
            ADD => (self.entries)
                .insert(r.name.to_vec(), (r.ino, r.kind))
                .is_none(),
            RESET => {
                self.entries.clear();
                self.run_live = 0;
                true
            }
            _ => self.entries.remove(r.name).is_some(),
        };
        if !applied {
            self.contradicted = true;
            let (verb, state) = if r.op == ADD {
                ("adds", "is already there")
            } else {
                ("removes", "is not there")
            };
            self.problem = Some(format!(
                "record {} at byte {pos} {verb} {:?}, which {state}",
                self.records,
                String::from_utf8_lossy(r.name),
            ));
        }
    }
}

/// The state, after a run, of each name the records after it touched ([`changes_into`],
/// `runbuild::merge`): a map by name here, a packed table in a run's view
/// (`fs/runview.rs`).
pub trait Changed {
    /// `None`: untouched; `Some(None)`: removed; `Some(Some(entry))`: its entry now.
    fn state(&self, name: &[u8]) -> Option<Option<Added>>;
    /// Notes `name`'s state now.
    fn note(&mut self, name: &[u8], state: Option<Added>);
    /// Calls `f` with every name touched and its state, in no set order.
    fn each(&self, f: &mut dyn FnMut(&[u8], Option<Added>));
}

impl Changed for BTreeMap<Vec<u8>, Option<Added>> {
    fn state(&self, name: &[u8]) -> Option<Option<Added>> {
        self.get(name).copied()
    }

    fn note(&mut self, name: &[u8], state: Option<Added>) {
        match self.get_mut(name) {
            Some(s) => *s = state,
            None => drop(self.insert(name.to_vec(), state)),
        }
    }

    fn each(&self, f: &mut dyn FnMut(&[u8], Option<Added>)) {
        for (name, &state) in self {
            f(name, state);
        }
    }
}

/// Notes in `into` the changes the records `log` hold (the records after a run, to its
/// end), and returns the entries they add less those they remove, and the same in bytes
/// as records; `None` where they are anything but adds and removes that all check (a
/// reset, a run, zeros, a torn or damaged record) or contradict each other (an add of a
/// name added, a remove of one removed, an add of inode 0): the caller then reads the log
/// whole, which says what is wrong. A remove of a name no record here added is taken to
/// remove one of the run's: the whole read checks that. A name made and removed here
/// stays, removed.
pub fn changes_into(log: &[u8], into: &mut dyn Changed) -> Option<(i64, i64)> {
    let (mut count, mut live) = (0i64, 0i64);
    let mut pos = 0;
    while pos < log.len() {
        let r = parse_one(&log[pos..]).ok()?;
        let bytes = (RECORD_OVERHEAD + r.name.len()) as i64;
        let was = into.state(r.name);
        match r.op {
            // No file is inode 0 (a view's changes mark a removed name so): damage.
            ADD if r.ino == 0 => return None,
            ADD if !matches!(was, Some(Some(_))) => {
                into.note(r.name, Some((r.ino, r.kind)));
                (count, live) = (count + 1, live + bytes);
            }
            REMOVE if !matches!(was, Some(None)) => {
                into.note(r.name, None);
                (count, live) = (count - 1, live - bytes);
            }
            _ => return None,
        }
        pos += r.len;
    }
    Some((count, live))
}

/// One record read: its kind of change (`ADD`, `REMOVE`, `RESET`, `RUN`), the kind of
/// entry an add carries, the inode (a reset's or run's count), the name (a run's body),
/// and its bytes.
struct Rec<'a> {
    op: u8,
    kind: Option<Kind>,
    ino: u64,
    name: &'a [u8],
    len: usize,
}

/// One record at the start of `b`.
fn parse_one(b: &[u8]) -> Result<Rec<'_>, String> {
    if b.len() < RECORD_OVERHEAD {
        return Err(format!(
            "{} bytes left, a record takes at least {RECORD_OVERHEAD}",
            b.len()
        ));
    }
    let tag = b[0];
    let (op, code) = (tag & 0x0f, tag >> 4);
    let kind = Kind::from_code(code);
    let ino = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
    let name_len = usize::from(u16::from_le_bytes([b[9], b[10]]));
    let len = RECORD_OVERHEAD + name_len;
    let shape_ok = match op {
        // Only an add carries a kind, and only a kind `Kind::code` gives.
        ADD => (1..=NAME_MAX).contains(&name_len) && (code == 0 || kind.is_some()),
        REMOVE => (1..=NAME_MAX).contains(&name_len) && code == 0,
        RUN => {
            tag == RUN
                && b.len() >= len
                && run::Shape::from_body(ino, &b[11..11 + name_len]).is_some()
        }
        _ => tag == RESET && name_len == 0,
    };
    if !shape_ok || b.len() < len {
        return Err(format!(
            "no record here (tag {tag}, name length {name_len})"
        ));
    }
    let stored = u32::from_le_bytes(b[len - 4..len].try_into().expect("4 bytes"));
    if crc32c::crc32c(&b[..len - 4]) != stored {
        return Err("checksum mismatch".into());
    }
    Ok(Rec {
        op,
        kind,
        ino,
        name: &b[11..11 + name_len],
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn adds_and_removes_replay_in_order() {
        let mut log = record(b"a", Some((5, None)));
        log.extend(record(b"b", Some((6, None))));
        log.extend(record(b"a", None));
        log.extend(record(b"a", Some((7, None))));
        let d = DirLog::parse(&log);
        assert_eq!(d.problem, None);
        assert_eq!(d.records, 4);
        assert_eq!(d.valid_bytes, log.len() as u64);
        let want: BTreeMap<Vec<u8>, Added> =
            [(b"a".to_vec(), (7, None)), (b"b".to_vec(), (6, None))].into();
        assert_eq!(d.entries, want);
    }

    #[test]
    fn a_torn_tail_ends_the_log_where_it_starts() {
        let mut log = record(b"keep", Some((2, None)));
        let good = log.len();
        log.extend(record(b"torn", Some((3, None))));
        log.truncate(log.len() - 2);
        let d = DirLog::parse(&log);
        assert_eq!(d.valid_bytes, good as u64);
        assert!(
            d.problem
                .as_deref()
                .unwrap()
                .contains("record 1 at byte 19"),
            "{d:?}"
        );
        assert_eq!(d.entries.len(), 1);
        let mut flipped = record(b"x", Some((2, None)));
        flipped[11] ^= 1;
        assert!(DirLog::parse(&flipped)
            .problem
            .unwrap()
            .contains("checksum"));
    }

    /// A damaged record in the middle costs only its own name: the parse steps over it
    /// to the next record that checks, says so, and ends where the log ends.
    #[test]
    fn damage_in_the_middle_is_stepped_over() {
        let mut log = record(b"first", Some((2, None)));
        let hit = log.len();
        log.extend(record(b"damaged", Some((3, None))));
        log.extend(record(b"after", Some((4, None))));
        log.extend(record(b"first", None));
        log[hit + 12] ^= 0x40; // inside the name of "damaged"
        let d = DirLog::parse(&log);
        let names: Vec<&[u8]> = d.entries.keys().map(|k| &k[..]).collect();
        assert_eq!(names, [&b"after"[..]], "{d:?}");
        assert!(d.skipped_damage);
        assert_eq!(d.valid_bytes, log.len() as u64);
        assert!(d.problem.unwrap().contains("stepped over"));
        // Damage in the last record is a torn tail, as before.
        let mut tail = record(b"first", Some((2, None)));
        tail.extend(record(b"last", Some((3, None))));
        let n = tail.len();
        tail[n - 3] ^= 1;
        let d = DirLog::parse(&tail);
        assert!(!d.skipped_damage && d.entries.len() == 1, "{d:?}");
    }

    #[test]
    fn a_log_that_contradicts_itself_is_reported() {
        let mut log = record(b"a", Some((5, None)));
        log.extend(record(b"a", Some((6, None))));
        log.extend(record(b"zz", None));
        let d = DirLog::parse(&log);
        assert!(d.problem.unwrap().contains("removes \"zz\""));
    }

    #[test]
    fn a_reset_after_zeros_replaces_everything_before_it() {
        let mut log = record(b"old", Some((1, None)));
        log.extend(record(b"gone", Some((2, None))));
        log.resize(4096, 0);
        let live: Vec<(Vec<u8>, u64)> = vec![(b"kept".to_vec(), 3), (b"new".to_vec(), 4)];
        log.extend(compacted(
            live.iter().map(|(n, i)| (n.as_slice(), (*i, None))),
        ));
        log.extend(record(b"after", Some((5, None))));
        let d = DirLog::parse(&log);
        assert_eq!(d.problem, None);
        let names: Vec<&[u8]> = d.entries.keys().map(|k| &k[..]).collect();
        assert_eq!(names, [&b"after"[..], b"kept", b"new"]);
        // The blocks before the reset punched: the same result.
        log[..4096].fill(0);
        assert_eq!(DirLog::parse(&log).entries, d.entries);
        assert_eq!(live_bytes([b"ab".to_vec()].iter()), 17);
    }

    /// A compaction cut short by a crash (its reset, and some of the adds it counts) is a
    /// torn tail: the entries before it stand, whatever follows in the cut part.
    #[test]
    fn a_compaction_cut_short_leaves_the_entries_before_it() {
        let mut log = record(b"a", Some((1, None)));
        log.extend(record(b"b", Some((2, None))));
        log.extend(record(b"c", Some((3, None))));
        let before = DirLog::parse(&log);
        let valid = log.len();
        let live: Vec<(Vec<u8>, u64)> = (1..=3).map(|i| (vec![b'`' + i as u8], i)).collect();
        let full = compacted(live.iter().map(|(n, i)| (n.as_slice(), (*i, None))));
        let add = RECORD_OVERHEAD + 1;
        for cut in [RECORD_OVERHEAD, RECORD_OVERHEAD + add, full.len() - 1] {
            let mut torn = log.clone();
            torn.extend_from_slice(&full[..cut]);
            torn.resize(torn.len() + 100, 0); // a hole read back as zeros
            let d = DirLog::parse(&torn);
            assert_eq!(d.entries, before.entries, "cut at {cut}");
            assert_eq!(d.valid_bytes, valid as u64, "cut at {cut}");
            assert!(
                d.problem.as_deref().unwrap().contains("cut short"),
                "{:?}",
                d.problem
            );
        }
        let mut whole = log.clone();
        whole.extend_from_slice(&full);
        assert_eq!(DirLog::parse(&whole).problem, None);
    }

    /// An add carries its entry's kind in the tag's high bits; an untyped add is the
    /// record every earlier build wrote, byte for byte; each entry keeps the kind its
    /// last add carried.
    #[test]
    fn kinds_ride_in_adds() {
        let plain = record(b"a", Some((5, None)));
        assert_eq!(plain[0], ADD, "an untyped add is the old record");
        let mut log = record(b"a", Some((5, Some(Kind::Dir))));
        assert_eq!(log[0], ADD | 2 << 4);
        log.extend(record(b"b", Some((6, Some(Kind::Symlink)))));
        log.extend(record(b"c", Some((7, Some(Kind::File)))));
        log.extend(record(b"c", None));
        log.extend(record(b"c", Some((7, None)))); // an add the writer knew no kind of
        let d = DirLog::parse(&log);
        assert_eq!(d.problem, None);
        let want: BTreeMap<Vec<u8>, Added> = [
            (b"a".to_vec(), (5, Some(Kind::Dir))),
            (b"b".to_vec(), (6, Some(Kind::Symlink))),
            (b"c".to_vec(), (7, None)),
        ]
        .into();
        assert_eq!(d.entries, want);
        // A compacted log keeps the kinds it is given.
        let mut whole = log.clone();
        whole.resize(4096, 0);
        whole.extend(compacted([(&b"a"[..], (5, Some(Kind::Dir)))].into_iter()));
        let d = DirLog::parse(&whole);
        assert_eq!(d.entries, [(b"a".to_vec(), (5, Some(Kind::Dir)))].into());
        for code in 1..=7 {
            let k = Kind::from_code(code).unwrap();
            let d = DirLog::parse(&record(b"x", Some((9, Some(k)))));
            assert_eq!(d.entries[&b"x"[..]], (9, Some(k)), "{k:?}");
        }
    }

    /// A tag no build writes is damage, as before: a kind beyond [`Kind::code`]'s, or a
    /// kind on a remove or a reset.
    #[test]
    fn a_kind_where_none_belongs_is_damage() {
        let reseal = |mut r: Vec<u8>, tag: u8| {
            r[0] = tag;
            let n = r.len();
            let crc = crc32c::crc32c(&r[..n - 4]);
            r[n - 4..].copy_from_slice(&crc.to_le_bytes());
            r
        };
        for (rec, tag) in [
            (record(b"a", Some((5, None))), ADD | 8 << 4),
            (record(b"a", Some((5, None))), ADD | 15 << 4),
            (record(b"a", None), REMOVE | 1 << 4),
            (compacted(std::iter::empty()), RESET | 1 << 4),
        ] {
            let d = DirLog::parse(&reseal(rec, tag));
            assert_eq!(d.valid_bytes, 0, "tag {tag:#x}");
            assert!(
                d.problem.unwrap().contains("no record here"),
                "tag {tag:#x}"
            );
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let d = DirLog::parse(&b);
            prop_assert!(d.valid_bytes <= b.len() as u64);
        }
    }
}
