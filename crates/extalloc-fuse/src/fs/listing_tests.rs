//! Directory listings (`listing.rs`): what a handle opened before a change lists, positions
//! that hold through removals while the arena waits to compact, made-up positions, a
//! directory removed while open. The helpers are `tests.rs`'.

use super::tests::{device, find, fresh, mkdir, put};
use super::*;

/// The names a listing of handle `h` from position `from` gives, at most `max`.
pub(super) fn listed(fs: &Fs, h: u64, from: u64, max: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    fs.readdir(h, from, |n, _, _, next| {
        out.push((String::from_utf8_lossy(n).into_owned(), next));
        out.len() == max
    })
    .unwrap();
    out
}

fn names(l: &[(String, u64)]) -> Vec<&str> {
    l.iter().map(|(n, _)| n.as_str()).collect()
}

/// generic/471: a handle opened before a create lists it once read from the start (the
/// kernel's first read and every `rewinddir` ask for position 0), and positions stay
/// stable while a listing is under way.
#[test]
fn a_listing_from_the_start_shows_the_directory_as_it_is_now() {
    let dev = device(4);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let h = fs.opendir(d).unwrap();
    put(&fs, d, "b", b"x");
    let first = listed(&fs, h, 0, 3);
    assert_eq!(names(&first), [".", "..", "b"], "made after opendir");
    // Mid-listing changes move no position: the rest of the listing goes on after "b",
    // and names made meanwhile come after it (POSIX: they may or may not appear).
    put(&fs, d, "a", b"x");
    put(&fs, d, "c", b"x");
    assert_eq!(names(&listed(&fs, h, first[2].1, 10)), ["a", "c"]);
    fs.unlink(d, b"b").unwrap();
    assert_eq!(
        names(&listed(&fs, h, 0, 10)),
        [".", "..", "a", "c"],
        "rewound"
    );
    fs.releasedir(h);
    assert_eq!(
        fs.readdir(h, 0, |_, _, _, _| false),
        Err(Errno(libc::EBADF))
    );
    assert_eq!(
        fs.opendir(find(&fs, "d/a").unwrap()),
        Err(Errno(libc::ENOTDIR))
    );
    fs.unmount().unwrap();
}

/// Lists handle `h` of directory `d` seven entries at a time; after each batch removes 40
/// of the names `name(0..600)` (some listed, some ahead) and, for the first 20 rounds,
/// makes `new-ROUND` (listed after the old names: an endless maker would list forever).
/// Returns the names listed, in order, and those removed.
fn list_while_churning(
    fs: &Fs,
    d: u64,
    h: u64,
    name: impl Fn(usize) -> String,
) -> (Vec<String>, Vec<String>) {
    let (mut seen, mut removed) = (Vec::new(), Vec::new());
    let (mut pos, mut round) = (0, 0);
    loop {
        let batch = listed(fs, h, pos, 7);
        let Some(last) = batch.last() else {
            return (seen, removed);
        };
        pos = last.1;
        seen.extend(batch.into_iter().map(|(n, _)| n));
        for i in (0..600).filter(|i| i % 15 == round % 15).take(40) {
            if fs.unlink(d, name(i).as_bytes()).is_ok() {
                removed.push(name(i));
            }
        }
        if round < 20 {
            put(fs, d, &format!("new-{round}"), b"");
        }
        round += 1;
    }
}

/// A listing read a few entries at a time while other calls remove and make names lists
/// every name present throughout exactly once and no removed name after its removal; the
/// arena waits for the handle to close before it compacts (its positions are offsets in
/// it), a second handle's positions hold as well, a directory listed is not shelved, and
/// a position the directory never gave ends the listing.
#[test]
fn positions_hold_through_removals_and_compaction_waits_for_the_last_handle() {
    let dev = device(5);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let name = |i: usize| format!("entry-with-a-longer-name-{i:05}");
    for i in 0..600 {
        put(&fs, d, &name(i), b"");
    }
    let (h, h2) = (fs.opendir(d).unwrap(), fs.opendir(d).unwrap());
    let heap = |fs: &Fs| fs.ns.read().dir(d).unwrap().entries.heap_bytes();
    let (seen, removed) = list_while_churning(&fs, d, h, name);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "a name listed twice");
    for i in 0..600 {
        let n = name(i);
        assert!(
            seen.contains(&n) || removed.contains(&n),
            "{n} never listed"
        );
    }
    assert!(removed.len() > 500, "most names removed: {}", removed.len());
    assert!(
        (0..20).all(|r| seen.contains(&format!("new-{r}"))),
        "appended names listed"
    );
    // The second handle, opened before all this, still reads from a position it got.
    let early = listed(&fs, h2, 0, 3);
    assert_eq!(names(&early)[..2], [".", ".."]);
    let rest: Vec<String> = listed(&fs, h2, early[2].1, 10_000)
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(
        rest.iter().all(|n| !removed.contains(n)),
        "a removed name listed"
    );
    // Listed directories are not shelved; compaction waited for both handles.
    fs.set_dir_cache(0);
    fs.shelve_dirs();
    assert!(
        !fs.ns.read().dir(d).unwrap().shelved(),
        "shelved while listed"
    );
    let before = heap(&fs);
    fs.releasedir(h);
    assert_eq!(heap(&fs), before, "one handle still lists");
    // Made-up positions: another generation's, one past the arena, no mark at all.
    for made_up in [
        1 << 62 | 5 << 32 | 40,
        1 << 62 | (1 << 31),
        3,
        u64::MAX >> 1,
    ] {
        assert_eq!(names(&listed(&fs, h2, made_up, 10)), Vec::<&str>::new());
    }
    fs.releasedir(h2);
    put(&fs, d, "after", b"");
    fs.unlink(d, b"after").unwrap();
    assert!(heap(&fs) < before / 2, "compacted once no handle lists");
    fs.unmount().unwrap();
}

/// A directory removed while a handle lists it: the handle still reads (its entries are
/// gone: the dots only) and closes, and the namespace's invariant holds throughout, also
/// when the kernel's last forget comes before the release.
#[test]
fn a_removed_directory_still_open_lists_nothing_and_closes() {
    let dev = device(6);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let h = fs.opendir(d).unwrap();
    fs.rmdir(ROOT, b"d").unwrap();
    fs.check_namespace().unwrap();
    let after: Vec<String> = listed(&fs, h, 0, 10).into_iter().map(|e| e.0).collect();
    assert_eq!(after, [".", ".."]);
    fs.releasedir(h);
    fs.check_namespace().unwrap();
    // The kernel may send the last forget before the release: the release finds no
    // directory to count it, and the invariant holds at each step.
    let d2 = mkdir(&fs, ROOT, "d2");
    let h2 = fs.opendir(d2).unwrap();
    fs.rmdir(ROOT, b"d2").unwrap();
    fs.forget(d2, 1);
    fs.check_namespace().unwrap();
    fs.releasedir(h2);
    fs.check_namespace().unwrap();
    fs.unmount().unwrap();
}

/// Listings open and close under the namespace lock held for reading (`opendir`,
/// `releasedir`): two threads list a directory over and over while a third makes and
/// removes names in it, so compactions wait for listings and run at their close. Every
/// listing shows each name present throughout; after the threads, no lister is counted
/// and the namespace's invariant holds (checked after each change in test builds).
#[test]
fn listings_open_and_close_beside_changes_from_other_threads() {
    let dev = device(17);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    for i in 0..50 {
        put(&fs, d, &format!("kept-{i:03}"), b"");
    }
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..200 {
                    let h = fs.opendir(d).unwrap();
                    let seen = listed(&fs, h, 0, 100_000);
                    fs.releasedir(h);
                    let kept = seen.iter().filter(|e| e.0.starts_with("kept-")).count();
                    assert_eq!(kept, 50, "every name present throughout listed once");
                }
            });
        }
        s.spawn(|| {
            for i in 0..2_000 {
                let n = format!("churn-with-a-longer-name-{i:05}");
                put(&fs, d, &n, b"");
                fs.unlink(d, n.as_bytes()).unwrap();
            }
        });
    });
    assert_eq!(fs.ns.read().dir(d).unwrap().entries.listers(), 0);
    assert_eq!(fs.ns.read().dir(d).unwrap().entries.len(), 50);
    fs.unmount().unwrap();
}
