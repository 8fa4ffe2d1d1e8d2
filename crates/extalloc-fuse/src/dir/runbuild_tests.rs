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
        let merged = merge(&index_of(&run), &mut reader(&run), &tail, now.len() as u64);
        prop_assert_eq!(merged, Ok(run_of(&now)));
    }
}

#[test]
fn a_merge_that_cannot_stand_says_so() {
    let e = entries(2000);
    let run = run_of(&e);
    let index = index_of(&run);
    let tail = BTreeMap::from([(b"new".to_vec(), Some((9, None)))]);
    let count = e.len() as u64 + 1;
    assert!(merge(&index, &mut reader(&run), &tail, count).is_ok());
    for wrong in [count - 1, count + 1] {
        let got = merge(&index, &mut reader(&run), &tail, wrong);
        assert!(got.is_err_and(|why| why.contains("entries")), "{wrong}");
    }
    let mut damaged = run.clone();
    damaged[2 * CHUNK + 100] ^= 0x10; // entry chunk 1
    let got = merge(&index, &mut reader(&damaged), &tail, count);
    assert!(got.is_err_and(|why| why.contains("entry chunk 1")));
}
