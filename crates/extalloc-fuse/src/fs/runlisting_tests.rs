//! Listings through a run's view (`runlisting.rs`): a large directory read back after a
//! mount is listed in its run's order without being read whole, with the changes after
//! the run; changes during the listing, a compaction into a new run under it, and the
//! directory read whole under it list every name present throughout once;
//! positions the listing did not give end it. The namespace's invariant (after every
//! change in test builds) checks the view's adds in order against its changes.

use super::dirrun_tests::{run_key, shelved_viewed, viewed, KEPT};
use super::tests::{assert_clean, device, put};
use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// One call of a listing from position `from`, at most `per` entries, as the kernel
/// makes it: (name, inode, kind) each, and the position the last one gave (`from` if
/// none).
fn call(fs: &Fs, fh: u64, from: u64, per: usize) -> (Vec<(String, u64, Option<Kind>)>, u64) {
    let (mut got, mut next) = (Vec::new(), from);
    fs.readdir(fh, from, |name, ino, kind, n| {
        if got.len() == per {
            return true; // full: this one not added
        }
        got.push((String::from_utf8_lossy(name).into_owned(), ino, kind));
        next = n;
        false
    })
    .unwrap();
    (got, next)
}

/// The rest of a listing from `from`, in calls of `per`: each name's count and entry.
fn rest(fs: &Fs, fh: u64, mut from: u64, per: usize) -> BTreeMap<String, (usize, u64)> {
    let mut seen: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    loop {
        let (got, next) = call(fs, fh, from, per);
        if got.is_empty() {
            return seen;
        }
        for (name, ino, _) in got {
            seen.entry(name).or_insert((0, ino)).0 += 1;
        }
        from = next;
    }
}

/// What a listing of `d` from the start gives (dots left out): name to inode, each
/// once (asserted).
fn once_each(fs: &Fs, fh: u64, per: usize) -> BTreeMap<String, u64> {
    let seen = rest(fs, fh, 0, per);
    let twice: Vec<&String> = seen.iter().filter(|s| s.1 .0 != 1).map(|s| s.0).collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    (seen.into_iter())
        .filter(|(n, _)| n != "." && n != "..")
        .map(|(n, (_, ino))| (n, ino))
        .collect()
}

/// A whole `readdirplus` listing through handle `fh`, in calls of `per`: each name's
/// inode and kind, each name given once (asserted).
fn listed_plus(fs: &Fs, fh: u64, per: usize) -> BTreeMap<String, (u64, Kind)> {
    let (mut plus, mut from) = (BTreeMap::new(), 0);
    loop {
        let mut n = 0;
        fs.readdirplus(fh, from, |name, a, next| {
            if n == per {
                return true;
            }
            n += 1;
            let name = String::from_utf8_lossy(name).into_owned();
            assert!(plus.insert(name, (a.ino, a.inode.kind)).is_none(), "once");
            from = next;
            false
        })
        .unwrap();
        if n == 0 {
            return plus;
        }
    }
}

/// The kept names of `viewed`'s directory, `keep0000` to `keep0999`.
fn keep(i: usize) -> String {
    format!("keep{i:04}")
}

#[test]
fn a_large_directory_is_listed_through_its_run_without_reading_it_whole() {
    let dev = device(401);
    let (fs, d) = viewed(&dev);
    // Changes after the run: a name added, one removed, one removed and made again.
    let after = put(&fs, d, "after", b"new");
    fs.unlink(d, b"keep0001").unwrap();
    fs.unlink(d, b"keep0002").unwrap();
    let again = put(&fs, d, "keep0002", b"again");
    let fh = fs.opendir(d).unwrap();
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "opened through the view"
    );
    let listed = once_each(&fs, fh, 37);
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "listed through the view"
    );
    let mut want: BTreeSet<String> = (0..KEPT).filter(|&i| i != 1).map(keep).collect();
    want.extend(["after".into(), "sub".into()]);
    assert_eq!(listed.keys().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!((listed["after"], listed["keep0002"]), (after, again));
    for i in [0, 3, 500, 999] {
        assert_eq!(
            Ok(listed[&keep(i)]),
            fs.lookup(d, keep(i).as_bytes()).map(|a| a.ino)
        );
    }
    // Kinds as the entries carry them; the dots first, `..` the parent.
    let (first, _) = call(&fs, fh, 0, 2);
    assert_eq!(
        first,
        [
            (".".into(), d, Some(Kind::Dir)),
            ("..".into(), ROOT, Some(Kind::Dir))
        ]
    );
    let sub = fs.lookup(d, b"sub").unwrap().ino;
    let kinds = rest(&fs, fh, 2, 1000);
    assert_eq!(kinds["sub"].1, sub);
    fs.releasedir(fh);
    assert!(
        fs.ns
            .read()
            .dir(d)
            .unwrap()
            .view
            .as_ref()
            .unwrap()
            .listed
            .is_none(),
        "the last listing closed: the adds in order let go"
    );
    // With attributes: each entry's inode read back (the directory stays shelved).
    let fh = fs.opendir(d).unwrap();
    let plus = listed_plus(&fs, fh, 25);
    fs.releasedir(fh);
    assert_eq!(plus.len(), want.len() + 2, "every name and the dots");
    assert_eq!(plus["sub"], (sub, Kind::Dir));
    assert_eq!(plus["keep0002"], (again, Kind::File));
    assert_eq!(shelved_viewed(&fs, d), (true, true), "never read whole");
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// `rm -rf`'s walk: a listing, each name it gives unlinked before the next call. Every
/// name goes, through compactions of the run under the listing (the changes pass a
/// quarter of the run), and the directory is never read whole.
#[test]
fn a_listing_that_removes_what_it_lists_empties_the_directory_through_its_view() {
    let dev = device(402);
    let (fs, d) = viewed(&dev);
    let key = run_key(&fs, d);
    let fh = fs.opendir(d).unwrap();
    let (mut from, mut removed, mut merged) = (0, 0, 0);
    let mut start = fs.ns.read().dir(d).unwrap().log_start;
    loop {
        let (got, next) = call(&fs, fh, from, 50);
        if got.is_empty() {
            break;
        }
        for (name, _, kind) in got {
            match (name.as_str(), kind) {
                ("." | "..", _) => {}
                (_, Some(Kind::Dir)) => fs.rmdir(d, name.as_bytes()).unwrap(),
                _ => fs.unlink(d, name.as_bytes()).unwrap(),
            }
            removed += 1;
        }
        from = next;
        assert_eq!(shelved_viewed(&fs, d), (true, true), "never read whole");
        let now = fs.ns.read().dir(d).unwrap().log_start;
        if now != start {
            // Compacted under the listing: merged into a new run of the same key.
            assert_eq!(run_key(&fs, d), key);
            (start, merged) = (now, merged + 1);
        }
    }
    fs.releasedir(fh);
    assert_eq!(removed, KEPT + 1 + 2, "every name once, and the dots");
    assert!(merged >= 1, "{merged} merges under the listing");
    fs.rmdir(ROOT, b"d").unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// A walk that lists the directory and then removes its names in an order of its own
/// (`find -delete`: by inode; here by name, unrelated to the hashes) reads a chunk for
/// each name, past the view's cap, but under its open listing the directory stays out of
/// memory, through the merges its removals make; once the listing is closed, lookups
/// count towards the cap again.
#[test]
fn removals_under_an_open_listing_keep_the_directory_out_of_memory() {
    let dev = device(403);
    let (fs, d) = viewed(&dev);
    let fh = fs.opendir(d).unwrap();
    let listed = once_each(&fs, fh, 100);
    assert_eq!(listed.len(), KEPT + 1, "the kept and after");
    // Removals until their changes are merged into a new run (under the listing).
    let start = fs.ns.read().dir(d).unwrap().log_start;
    let mut removed = 0;
    while fs.ns.read().dir(d).unwrap().log_start == start {
        fs.unlink(d, keep(removed).as_bytes()).unwrap();
        removed += 1;
        assert_eq!(shelved_viewed(&fs, d), (true, true), "never read whole");
    }
    assert!(removed < KEPT, "a merge before the last name");
    assert!(
        listed_adds(&fs, d),
        "the new run's view keeps the listing's adds in order"
    );
    // Then the rest looked up three times each: past the new view's cap, were they
    // counted.
    for _ in 0..3 {
        for i in removed..KEPT {
            assert!(fs.lookup(d, keep(i).as_bytes()).is_ok());
        }
        assert_eq!(shelved_viewed(&fs, d), (true, true), "never read whole");
    }
    fs.releasedir(fh);
    assert!(
        !listed_adds(&fs, d),
        "lookups count again once the listing closed"
    );
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Whether `d`'s view holds its adds in order (`RunView::listed`): a listing by hash of
/// it is open, and lookups in it go uncounted (`runlookup.rs`).
fn listed_adds(fs: &Fs, d: u64) -> bool {
    let ns = fs.ns.read();
    let v = ns.dir(d).unwrap().view.as_deref().expect("viewed");
    v.listed.is_some()
}

/// Names made and removed in the middle of a listing: every name present throughout is
/// listed once, a name removed before the listing reaches it is not listed, and the
/// listing goes on the same way once the directory is read whole under it (a view
/// used too often), from the names the handle then takes.
#[test]
fn changes_and_a_whole_read_under_a_listing_keep_every_name_once() {
    for whole in [false, true] {
        let dev = device(403 + u64::from(whole));
        let (fs, d) = viewed(&dev);
        let fh = fs.opendir(d).unwrap();
        let (first, next) = call(&fs, fh, 0, 300);
        let seen: BTreeSet<String> = first.iter().map(|f| f.0.clone()).collect();
        let unseen: Vec<String> = (0..KEPT).map(keep).filter(|k| !seen.contains(k)).collect();
        // Removed: ten listed and ten not listed yet; made: twenty new names.
        for name in seen
            .iter()
            .filter(|n| n.starts_with("keep"))
            .take(10)
            .chain(&unseen[..10])
        {
            fs.unlink(d, name.as_bytes()).unwrap();
        }
        for i in 0..20 {
            put(&fs, d, &format!("new{i}"), b"n");
        }
        if whole {
            fs.unshelve(&mut fs.ns_write(), d).unwrap();
            assert_eq!(shelved_viewed(&fs, d), (false, false), "read whole");
        }
        let later = rest(&fs, fh, next, 41);
        fs.releasedir(fh);
        let twice: Vec<_> = (later.keys())
            .filter(|k| seen.contains(*k) || later[*k].0 > 1)
            .collect();
        assert!(twice.is_empty(), "whole {whole}: listed twice: {twice:?}");
        for name in &unseen[10..] {
            assert!(later.contains_key(name), "whole {whole}: {name} not listed");
        }
        for name in &unseen[..10] {
            assert!(
                !later.contains_key(name),
                "whole {whole}: removed {name} listed"
            );
        }
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// Positions no listing through the view gave end it (an arena's cookie, made-up ones),
/// and one from a listing of the same directory in memory is not taken for a hash.
#[test]
fn positions_a_listing_through_the_view_did_not_give_end_it() {
    let dev = device(405);
    let (fs, d) = viewed(&dev);
    let fh = fs.opendir(d).unwrap();
    for made_up in [1 << 62 | 77, u64::MAX >> 1, 1 << 61 | 3] {
        assert_eq!(call(&fs, fh, made_up, 10).0, [], "{made_up:#x}");
    }
    // Any position below 2^61 goes on from its group: names after it, never a panic.
    for guess in [3, 1000, 1 << 40, (1 << 61) + 2] {
        let (got, _) = call(&fs, fh, guess, 10);
        assert!(got.len() <= 10);
    }
    fs.releasedir(fh);
    assert_eq!(
        fs.readdir(fh, 0, |_, _, _, _| false),
        Err(Errno(libc::EBADF))
    );
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Directory read-ahead (`dirahead.rs`) follows a listing through the view: a walk of
/// its files in listing order is advised the next files past the first batch too.
#[test]
fn a_walk_of_a_directory_listed_through_its_view_is_read_ahead() {
    let dev = device(406);
    let (fs, d) = viewed(&dev);
    let fh = fs.opendir(d).unwrap();
    let (mut from, mut files) = (0, Vec::new());
    loop {
        let (got, next) = call(&fs, fh, from, 100);
        if got.is_empty() {
            break;
        }
        let kinds = got.into_iter().filter(|g| g.2 == Some(Kind::File));
        files.extend(kinds.map(|g| g.1));
        from = next;
    }
    fs.releasedir(fh);
    assert_eq!(files.len(), KEPT);
    let mut advised = BTreeSet::new();
    for &f in &files {
        advised.extend(fs.dir_ahead.lock().step(f));
    }
    let past_first_batch = files[300..KEPT].iter().filter(|f| advised.contains(f));
    assert_eq!(
        past_first_batch.count(),
        KEPT - 300,
        "every later file advised"
    );
    fs.unmount().unwrap();
    assert_clean(&dev);
}
