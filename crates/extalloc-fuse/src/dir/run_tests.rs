//! A run built and read back, whole, cut short and damaged, alone and inside a log.

use super::*;
use crate::dir::runbuild::build;
use crate::dir::{changes_into, record, DirLog, RECORD_OVERHEAD};
use proptest::prelude::*;
use std::collections::BTreeMap;

const KEY: Key = Key(*b"0123456789abcdef");

/// `n` entries with names of 4 to 40 bytes and every kind, by name.
fn entries(n: u64) -> BTreeMap<Vec<u8>, Added> {
    (0..n)
        .map(|i| {
            let name = format!("{i:04}{}", "x".repeat((i % 37) as usize)).into_bytes();
            (name, (1000 + i, Kind::from_code((i % 8) as u8)))
        })
        .collect()
}

fn run_of(e: &BTreeMap<Vec<u8>, Added>) -> Vec<u8> {
    build(e.iter().map(|(n, &a)| (n.as_slice(), a)), KEY)
}

/// The shape a run's header says.
fn shape(run: &[u8]) -> Shape {
    let count = u64::from_le_bytes(run[1..9].try_into().unwrap());
    Shape::from_body(count, &run[11..11 + BODY]).expect("a shape build wrote")
}

#[test]
fn a_run_reads_back_whole_and_in_hash_order() {
    for n in [1, 14, 500, 3000] {
        let e = entries(n);
        let run = run_of(&e);
        let s = shape(&run);
        assert_eq!(run.len() as u64, s.bytes(), "{n} entries");
        let live = crate::dir::live_bytes(e.keys());
        assert!(run.len() as u64 <= max_bytes(n, live));
        assert_eq!(s.live_bytes(), live, "the header knows the entries' size");
        let r = read(&s, &run);
        assert!(r.whole(), "{n} entries: {:?}", r.problems);
        let hashes: Vec<u64> = r.entries.iter().map(|(name, _)| KEY.hash(name)).collect();
        assert!(hashes.windows(2).all(|w| w[0] <= w[1]), "hash order");
        assert_eq!(r.entries.into_iter().collect::<BTreeMap<_, _>>(), e);
    }
    // An empty run: only the header.
    let run = run_of(&BTreeMap::new());
    assert_eq!(run.len(), CHUNK);
    assert!(read(&shape(&run), &run).whole());
}

/// The filter lets every entry through and few names that are not there.
#[test]
fn the_filter_holds_every_entry_and_little_else() {
    let e = entries(3000);
    let run = run_of(&e);
    let s = shape(&run);
    let at = (1 + s.entry_chunks as usize + s.index_chunks as usize) * CHUNK;
    let bits: Vec<u8> = run[at..]
        .chunks(CHUNK)
        .flat_map(|c| c[HEAD..].to_vec())
        .collect();
    assert!(e.keys().all(|n| may_hold(&bits, KEY.hash(n))));
    let through = (0..10_000)
        .filter(|i| may_hold(&bits, KEY.hash(format!("absent-{i}").as_bytes())))
        .count();
    assert!(
        through < 300,
        "{through} of 10,000 absent names let through"
    );
}

/// Damage in one entry chunk costs only that chunk's entries; the index and filter
/// chunks that check are still checked against what was read.
#[test]
fn a_damaged_chunk_costs_its_own_entries() {
    let e = entries(2000);
    let mut run = run_of(&e);
    let s = shape(&run);
    assert!(s.entry_chunks >= 3);
    run[2 * CHUNK + 100] ^= 0x10; // entry chunk 1
    let r = read(&s, &run);
    assert!(!r.whole());
    assert!(
        r.problems[0].starts_with("entry chunk 1: checksum"),
        "{:?}",
        r.problems
    );
    assert_eq!(r.problems.len(), 1, "only that chunk: {:?}", r.problems);
    let good = read(&s, &run_of(&e)).entries;
    let lost = good.len() - r.entries.len();
    assert!(lost > 0 && lost < 200, "{lost} entries lost");
    assert!(r.entries.iter().all(|x| good.contains(x)));
}

/// A header whose counts disagree with each other is no run: the log takes it for
/// damage, not data.
#[test]
fn a_shape_build_never_writes_is_refused() {
    let run = run_of(&entries(500));
    let s = shape(&run);
    let body = s.body();
    let mut spare = body;
    spare[28] = 1;
    assert!(
        Shape::from_body(s.count, &spare).is_none(),
        "the spare field"
    );
    for (field, at) in [("entries", 16), ("index", 20), ("filter", 24)] {
        let mut b = body;
        b[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        assert!(Shape::from_body(s.count, &b).is_none(), "{field}");
    }
    assert!(
        Shape::from_body(0, &body).is_none(),
        "a count of 0 with chunks"
    );
    assert!(Shape::from_body(s.count, &body[..31]).is_none());
}

/// In a log, a run replaces everything before it, as a reset does, and the records
/// after it apply; the log before it punched reads the same.
#[test]
fn a_run_in_a_log_replaces_what_came_before() {
    let mut log = record(b"old", Some((1, None)));
    log.resize(CHUNK, 0);
    let e = entries(600);
    log.extend(run_of(&e));
    log.extend(record(b"after", Some((7, Some(Kind::File)))));
    log.extend(record(b"0001x", None));
    let d = DirLog::parse(&log);
    assert_eq!(d.problem, None);
    let mut want = e.clone();
    want.insert(b"after".to_vec(), (7, Some(Kind::File)));
    want.remove(&b"0001x"[..]);
    assert_eq!(d.entries, want);
    assert_eq!(d.valid_bytes, log.len() as u64);
    log[..CHUNK].fill(0);
    assert_eq!(DirLog::parse(&log).entries, want);
}

/// A run cut short by a crash, with the records before it still there and nothing after
/// it, is the log's torn tail: the entries before it stand.
#[test]
fn a_run_cut_short_leaves_the_entries_before_it() {
    let mut log = record(b"a", Some((1, None)));
    log.extend(record(b"b", Some((2, None))));
    let before = DirLog::parse(&log).entries;
    let at = log.len();
    let run = run_of(&entries(800));
    for cut in [
        RECORD_OVERHEAD + BODY,
        CHUNK + 10,
        3 * CHUNK,
        run.len() - CHUNK / 2,
    ] {
        let mut torn = log.clone();
        torn.extend_from_slice(&run[..cut]);
        torn.resize(at + run.len() + 100, 0); // the rest a hole, read as zeros
        let d = DirLog::parse(&torn);
        assert!(
            d.entries == before,
            "cut at {cut}: {} entries",
            d.entries.len()
        );
        assert_eq!(d.valid_bytes, at as u64, "cut at {cut}");
        assert!(d.problem.unwrap().contains("cut short"), "cut at {cut}");
    }
}

/// A run that is not whole with records after it (or with nothing live before it: the
/// compaction finished and punched the old log) is damage: the chunks that check give
/// their entries, the parse goes on after the run and says the log must be rewritten.
#[test]
fn a_damaged_run_gives_the_chunks_that_check() {
    let e = entries(2000);
    let mut run = run_of(&e);
    run[CHUNK + 50] ^= 0x01; // entry chunk 0
    let mut log = record(b"a", Some((1, None)));
    log.extend_from_slice(&run);
    log.extend(record(b"later", Some((9, None))));
    let d = DirLog::parse(&log);
    assert!(d.skipped_damage && d.problem.as_deref().unwrap().contains("damaged run"));
    assert!(d.entries.contains_key(&b"later"[..]) && !d.entries.contains_key(&b"a"[..]));
    assert!(d.entries.len() > 1800 && d.entries.len() < e.len());
    let mut punched = vec![0u8; CHUNK];
    punched.extend_from_slice(&run);
    let d = DirLog::parse(&punched);
    assert!(d.skipped_damage, "{:?}", d.problem);
    assert!(d.entries.len() > 1800 && d.entries.len() < e.len());
}

/// A run whose header is damaged (zeroed, or a byte of it flipped) still gives the
/// entries of its chunks that check, each naming its run and checking on its own; the
/// records after it apply, and the parse says the log must be rewritten. Where nothing
/// after it checks and records come before it, it is a compaction cut short: the entries
/// before it stand (its chunks hold the same ones).
#[test]
fn a_run_whose_header_is_damaged_gives_its_chunks() {
    let e = entries(2000);
    let run = run_of(&e);
    let mut want = e.clone();
    want.insert(b"later".to_vec(), (9, None));
    want.remove(&b"0002xx"[..]);
    let logged = |run: &[u8]| {
        let mut log = vec![0u8; CHUNK]; // the log before it punched
        log.extend_from_slice(run);
        log.extend(record(b"later", Some((9, None))));
        log.extend(record(b"0002xx", None));
        DirLog::parse(&log)
    };
    let mut zeroed = run.clone();
    zeroed[..CHUNK].fill(0);
    let mut flipped = run.clone();
    flipped[3] ^= 0x40; // the entry count
    for (what, damaged) in [("zeroed", &zeroed), ("flipped", &flipped)] {
        let d = logged(damaged);
        assert!(d.skipped_damage, "{what}");
        assert!(
            d.problem.as_deref().unwrap().contains("header lost"),
            "{what}: {:?}",
            d.problem
        );
        assert_eq!(d.entries, want, "{what}");
    }
    // A stray chunk of another run (a stale block) where the header was: not taken.
    let strays: BTreeMap<Vec<u8>, Added> = (0..50u64)
        .map(|i| (format!("stray{i}").into_bytes(), (9000 + i, None)))
        .collect();
    let other = build(
        strays.iter().map(|(n, &a)| (n.as_slice(), a)),
        Key(*b"fedcba9876543210"),
    );
    let mut stray = run.clone();
    stray[..CHUNK].copy_from_slice(&other[CHUNK..2 * CHUNK]);
    assert_eq!(logged(&stray).entries, want, "a stray chunk");
    let mut both = zeroed.clone();
    both[2 * CHUNK + 100] ^= 0x10; // entry chunk 1 too
    let d = logged(&both);
    assert!(d.entries.len() > 1800 && d.entries.len() < want.len());
    assert!(d.entries.iter().all(|(n, a)| want.get(n) == Some(a)));
    // Nothing after it, records before it: the torn tail of a compaction cut short.
    let mut log = record(b"a", Some((1, None)));
    log.extend_from_slice(&zeroed);
    let d = DirLog::parse(&log);
    assert_eq!(d.entries.len(), 1, "{:?}", d.problem);
    assert!(!d.skipped_damage, "{:?}", d.problem);
    // Nothing before it either: the old log punched, the compaction finished: damage.
    let d = DirLog::parse(&zeroed);
    assert_eq!(d.entries, e);
    assert!(d.skipped_damage);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any set of names reads back as it went in.
    #[test]
    fn any_names_read_back(names in proptest::collection::btree_set(
        proptest::collection::vec(1u8..=255, 1..=NAME_MAX), 0..300)) {
        let e: BTreeMap<Vec<u8>, Added> =
            names.into_iter().enumerate().map(|(i, n)| (n, (i as u64, None))).collect();
        let run = run_of(&e);
        let r = read(&shape(&run), &run);
        prop_assert!(r.whole());
        prop_assert_eq!(r.entries.into_iter().collect::<BTreeMap<_, _>>(), e);
    }

    /// Bytes flipped anywhere in a log with a run never panic the parse, and never give
    /// a name the log did not hold.
    #[test]
    fn a_flipped_run_never_panics(flips in proptest::collection::vec((0usize..6 * CHUNK, 0u8..8), 1..6)) {
        let e = entries(300);
        let mut log = run_of(&e);
        log.extend(record(b"tail", Some((5, None))));
        for (at, bit) in flips {
            let at = at % log.len();
            log[at] ^= 1 << bit;
        }
        let d = DirLog::parse(&log);
        prop_assert!(d.valid_bytes <= log.len() as u64);
        for name in d.entries.keys() {
            prop_assert!(e.contains_key(name) || name == b"tail", "{:?}", name);
        }
    }
}

/// A run's index finds every entry reading one entry chunk (the header, index and filter
/// read once), and rules out most absent names without reading any.
#[test]
fn the_index_finds_each_name_in_one_chunk() {
    let e = entries(3000);
    let mut log = vec![0u8; 3 * CHUNK]; // punched history before the run
    let at = log.len() as u64;
    log.extend(run_of(&e));
    let reads = std::cell::Cell::new(0);
    let mut read = |off: u64, len: u64| {
        reads.set(reads.get() + 1);
        Ok(log[off as usize..(off + len) as usize].to_vec())
    };
    let index = Index::open(&mut read, at).unwrap().expect("a run there");
    assert_eq!(
        (index.shape.count, reads.get()),
        (3000, 2),
        "the header, then index and filter"
    );
    for (name, &added) in &e {
        reads.set(0);
        assert_eq!(index.lookup(&mut read, name).unwrap(), Some(added));
        assert_eq!(reads.get(), 1, "one chunk for {name:?}");
    }
    reads.set(0);
    for i in 0..1000 {
        assert_eq!(
            index
                .lookup(&mut read, format!("no{i}").as_bytes())
                .unwrap(),
            None
        );
    }
    assert!(
        reads.get() < 40,
        "{} chunks read for 1,000 absent names",
        reads.get()
    );
    assert!(
        Index::open(&mut read, 0).unwrap().is_none(),
        "no run at a hole"
    );
    assert!(index.heap_bytes() < 3000 * 2);
}

/// The changes after a run: adds and removes by name, their count and bytes; anything
/// else, or changes that contradict each other, is for the whole read.
/// [`changes_into`] a map by name, its counts alone.
fn changes(log: &[u8]) -> Option<(i64, i64)> {
    changes_into(log, &mut BTreeMap::new())
}

#[test]
fn changes_after_a_run_replay_by_name() {
    let mut log = record(b"new", Some((5, None)));
    log.extend(record(b"old", None));
    log.extend(record(b"old", Some((6, Some(Kind::File)))));
    log.extend(record(b"new", None));
    log.extend(record(b"gone", None)); // one of the run's
    let mut names = BTreeMap::new();
    let (count, live) = changes_into(&log, &mut names).unwrap();
    assert_eq!(names[&b"new"[..]], None, "made and removed here: removed");
    assert_eq!(names[&b"gone"[..]], None);
    assert_eq!(names[&b"old"[..]], Some((6, Some(Kind::File))));
    assert_eq!((count, live), (-1, -(RECORD_OVERHEAD as i64 + 4)));
    let mut twice = record(b"a", Some((1, None)));
    twice.extend(record(b"a", Some((2, None))));
    assert!(changes(&twice).is_none(), "an add of a name added");
    let mut gone = record(b"a", None);
    gone.extend(record(b"a", None));
    assert!(changes(&gone).is_none(), "a remove of a name removed");
    assert!(changes(&[0u8; 8]).is_none(), "zeros");
    let zero = record(b"z", Some((0, None)));
    assert!(changes(&zero).is_none(), "an add of inode 0");
    let mut torn = record(b"a", Some((1, None)));
    torn.pop();
    assert!(changes(&torn).is_none(), "a torn record");
    assert!(changes(&run_of(&entries(3))).is_none(), "a run");
    assert_eq!(changes(&[]), Some((0, 0)));
}
