//! A run merged with the changes after it is byte for byte the run built from what they
//! replay to; a merge that cannot stand (a damaged chunk, a count that does not add up)
//! says so instead of writing a run.

use super::*;
use crate::dir::run::{Index, Key};
use proptest::prelude::*;
use std::collections::BTreeMap;

const KEY: Key = Key(*b"0123456789abcdef");

/// A reader of `run`'s bytes, as a directory's file.
fn reader(run: &[u8]) -> impl FnMut(u64, u64) -> Result<Vec<u8>, String> + '_ {
    |at, len| {
        (run.get(at as usize..(at + len) as usize))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "past the end".to_string())
    }
}

fn run_of(e: &BTreeMap<Vec<u8>, Added>) -> Vec<u8> {
    build(e.iter().map(|(n, &a)| (n.as_slice(), a)), KEY)
}

/// [`merge`] written into memory: the run's bytes, as long as its shape says, and the
/// offsets it wrote in order (the header's chunk last).
fn merged(
    run: &[u8],
    tail: &BTreeMap<Vec<u8>, Option<Added>>,
    count: u64,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut order = Vec::new();
    let mut write = |at: u64, bytes: &[u8]| {
        let end = at as usize + bytes.len();
        out.resize(out.len().max(end), 0);
        out[at as usize..end].copy_from_slice(bytes);
        order.push(at);
        Ok(())
    };
    let shape = merge(&index_of(run), (&mut reader(run), &mut write), tail, count)?;
    assert_eq!(out.len() as u64, shape.bytes());
    assert_eq!(order.last(), Some(&0), "the header's chunk written last");
    Ok(out)
}

fn index_of(run: &[u8]) -> Index {
    Index::open(&mut reader(run), 0).unwrap().unwrap()
}

/// `n` names of 3 to 30 bytes, by name.
fn entries(n: u64) -> BTreeMap<Vec<u8>, Added> {
    (0..n)
        .map(|i| {
            let name = format!("{i:03}{}", "y".repeat((i % 28) as usize)).into_bytes();
            (name, (100 + i, Kind::from_code((i % 8) as u8)))
        })
        .collect()
}

proptest! {
    #[test]
    fn a_merge_is_the_build_of_what_the_changes_replay_to(
        names in proptest::collection::btree_set("[a-z]{1,12}", 0..600),
        changes in proptest::collection::vec(("[a-z]{1,12}", any::<bool>(), 1u64..1000), 0..400),
    ) {
        let base: BTreeMap<Vec<u8>, Added> = (names.iter().enumerate())
            .map(|(i, n)| (n.as_bytes().to_vec(), (i as u64 + 1, Some(Kind::File))))
            .collect();
        let run = run_of(&base);
        let (mut now, mut tail) = (base.clone(), BTreeMap::new());
        for (name, add, ino) in changes {
            let name = name.into_bytes();
            match (add, now.contains_key(&name)) {
                (true, false) => {
                    now.insert(name.clone(), (ino, None));
                    tail.insert(name, Some((ino, None)));
                }
                (false, true) => {
                    now.remove(&name);
                    tail.insert(name, None);
                }
                _ => {}
            }
        }
        prop_assert_eq!(merged(&run, &tail, now.len() as u64), Ok(run_of(&now)));
    }
}

#[test]
fn a_merge_that_cannot_stand_says_so() {
    let e = entries(2000);
    let run = run_of(&e);
    let tail = BTreeMap::from([(b"new".to_vec(), Some((9, None)))]);
    let count = e.len() as u64 + 1;
    assert!(merged(&run, &tail, count).is_ok());
    for wrong in [count - 1, count + 1] {
        let got = merged(&run, &tail, wrong);
        assert!(got.is_err_and(|why| why.contains("entries")), "{wrong}");
    }
    let mut damaged = run.clone();
    damaged[2 * CHUNK + 100] ^= 0x10; // entry chunk 1
    let got = merged(&damaged, &tail, count);
    assert!(got.is_err_and(|why| why.contains("entry chunk 1")));
}

/// A merge of a run larger than a batch hands its entry chunks over batch by batch: what
/// it holds at once is a batch and the run's index and filter, not the run.
#[test]
fn a_large_merge_writes_batch_by_batch() {
    let e = entries(100_000);
    let run = run_of(&e);
    let index = index_of(&run);
    assert!(
        u64::from(index.shape.entry_chunks) > 2 * MERGE_BATCH,
        "more than two batches"
    );
    let tail = BTreeMap::from([(b"new".to_vec(), Some((9, None)))]);
    let mut writes: Vec<(u64, usize)> = Vec::new();
    let mut write = |at: u64, bytes: &[u8]| {
        writes.push((at, bytes.len()));
        Ok(())
    };
    let count = e.len() as u64 + 1;
    let shape = merge(&index, (&mut reader(&run), &mut write), &tail, count).unwrap();
    let largest = writes.iter().map(|w| w.1).max().unwrap();
    assert!(
        largest as u64 <= (MERGE_BATCH + 1) * CHUNK as u64,
        "{writes:?}"
    );
    assert_eq!(writes.last(), Some(&(0, CHUNK)), "the header last");
    let total: usize = writes.iter().map(|w| w.1).sum();
    assert_eq!(total as u64, shape.bytes(), "every byte once");
}
