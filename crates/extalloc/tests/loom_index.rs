//! Loom model of the lock-free group index (`AtomicBitset`): every interleaving of a remover
//! that empties a word and an inserter that refills it leaves the summaries consistent and the
//! member findable. Run with `RUSTFLAGS="--cfg loom" cargo test --release --test loom_index`.
#![cfg(loom)]

use extalloc::groups::AtomicBitset;
use loom::sync::Arc;

#[test]
fn remove_and_insert_in_the_same_word() {
    loom::model(|| {
        let set = Arc::new(AtomicBitset::new(128));
        set.insert(3);
        let a = set.clone();
        let t = loom::thread::spawn(move || a.remove(3));
        set.insert(5);
        t.join().unwrap();
        set.check().unwrap();
        assert_eq!(set.next_set(0), Some(5));
        assert!(!set.contains(3));
    });
}

#[test]
fn lookup_never_misses_a_stable_member() {
    loom::model(|| {
        // 150 stays a member throughout; 64 is removed (emptying its word, so a summary bit
        // is cleared) while 70 is inserted into that same word and a lookup runs.
        let set = Arc::new(AtomicBitset::new(192));
        set.insert(64);
        set.insert(150);
        let a = set.clone();
        let t = loom::thread::spawn(move || a.remove(64));
        let b = set.clone();
        let u = loom::thread::spawn(move || {
            let found = b.next_set(0);
            assert!(
                matches!(found, Some(64) | Some(70) | Some(150)),
                "{found:?}"
            );
        });
        set.insert(70);
        t.join().unwrap();
        u.join().unwrap();
        set.check().unwrap();
        assert_eq!(set.next_set(0), Some(70));
        assert_eq!(set.next_set(71), Some(150));
    });
}
