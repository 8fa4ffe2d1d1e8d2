//! Inodes read back when named (`ondemand.rs`): a mount keeps only the directories; a
//! lookup, a listing, an unlink, a rename or a call by number reads a node back whole
//! (attributes, link count, extended attributes inline or spilled), and the kernel's last
//! forget or the last close drops it again. Every change below runs the namespace's
//! invariant, which checks each inode not in memory against its blob.

use super::ondemand::TRIM_SLACK_MIN;
use super::tests::{device, fresh, mkdir, put, remount, ME};
use super::*;

fn in_memory(fs: &Fs, ino: u64) -> bool {
    fs.ns.read().nodes.contains_key(&ino)
}

#[test]
fn a_mount_keeps_directories_and_calls_read_inodes_back() {
    let dev = device(71);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let a = put(&fs, d, "a", b"alpha");
    let b = put(&fs, d, "b", b"beta");
    fs.link(a, ROOT, b"a2", Caller::ROOT).unwrap();
    fs.setxattr(a, b"user.small", b"x", 0, ME, &[]).unwrap();
    let big = vec![7u8; 3000];
    fs.setxattr(b, b"user.big", &big, 0, ME, &[]).unwrap();
    let inodes = fs.inodes();
    fs.unmount().unwrap();

    let (fs, _) = remount(&dev);
    assert_eq!(fs.inodes(), inodes, "statfs counts inodes not in memory");
    assert!(
        in_memory(&fs, ROOT) && !in_memory(&fs, d),
        "a clean close: the mount reads the root only"
    );
    // A directory comes back through its name, with its entries (their kinds unknown
    // until read) and its parent.
    assert_eq!(fs.lookup(ROOT, b"d").unwrap().ino, d);
    assert!(in_memory(&fs, d) && !in_memory(&fs, a));
    assert_eq!(fs.lookup(d, b"..").unwrap().ino, ROOT);
    assert!(
        !in_memory(&fs, a) && !in_memory(&fs, b),
        "files wait on the volume"
    );

    // A lookup reads the node back, with its link count and extended attributes.
    let got = fs.lookup(d, b"a").unwrap();
    assert_eq!((got.ino, got.inode.nlink), (a, 2));
    assert_eq!(fs.getxattr(a, b"user.small").unwrap(), b"x");
    fs.forget(a, 1);
    assert!(!in_memory(&fs, a), "the kernel's last forget drops it");

    // A call by number reads it back too (a spilled set with it).
    assert_eq!(fs.getxattr(b, b"user.big").unwrap(), big);
    assert_eq!(fs.read(b, 0, 4).unwrap(), b"beta");

    // An unlink of an inode not in memory: one link left, on the volume.
    fs.unlink(ROOT, b"a2").unwrap();
    assert!(!in_memory(&fs, a), "nothing holds it after the unlink");
    assert_eq!(fs.lookup(d, b"a").unwrap().inode.nlink, 1);
    fs.forget(a, 1);

    // A rename of one inode not in memory over another: the replaced one is removed.
    let vol_files = fs.volume().volume().list().len();
    fs.rename(d, b"a", d, b"b", 0, ME).unwrap();
    assert_eq!(
        fs.volume().volume().list().len(),
        vol_files - 2,
        "b and its spill file"
    );
    assert_eq!(fs.inodes(), inodes - 2, "statfs counts spill files too");
    assert!(!in_memory(&fs, a) && !in_memory(&fs, b));
    fs.check_namespace().unwrap();
    fs.unmount().unwrap();
    let (fs, report) = remount(&dev);
    assert!(report.repaired.clean(), "{:?}", report.repaired);
    assert_eq!(fs.lookup(ROOT, b"d").unwrap().ino, d);
    let got = fs.lookup(d, b"b").unwrap();
    assert_eq!((got.ino, got.inode.nlink, got.size), (a, 1, 5));
}

#[test]
fn a_listing_reads_back_what_it_returns_and_forgets_drop_it() {
    let dev = device(72);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    // More than one read-back batch.
    let files: Vec<u64> = (0..300)
        .map(|i| put(&fs, d, &format!("f{i:03}"), b""))
        .collect();
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert!(files.iter().all(|&f| !in_memory(&fs, f)));
    assert!(!in_memory(&fs, d), "only the root after a clean close");
    // Named by number (a file handle across the remount): its parent is found first.
    let fh = fs.opendir(d).unwrap();
    assert_eq!(fs.lookup(d, b"..").unwrap().ino, ROOT);
    let mut got = Vec::new();
    fs.readdirplus(fh, 0, |name, a, _| {
        got.push((name.to_vec(), a.ino, a.inode.kind));
        false
    })
    .unwrap();
    fs.releasedir(fh);
    assert_eq!(got.len(), 302, ". and .. and every file");
    for (i, &f) in files.iter().enumerate() {
        assert_eq!(got[i + 2], (format!("f{i:03}").into_bytes(), f, Kind::File));
        assert!(in_memory(&fs, f), "a listed entry is held by the kernel");
        fs.forget(f, 1);
        assert!(!in_memory(&fs, f), "and dropped at its forget");
    }
    // A plain listing reads no inode: the kinds are the entries'.
    let fh = fs.opendir(d).unwrap();
    let mut kinds = Vec::new();
    fs.readdir(fh, 0, |_, _, kind, _| {
        kinds.push(kind);
        false
    })
    .unwrap();
    assert_eq!(kinds.len(), 302);
    assert!(files.iter().all(|&f| !in_memory(&fs, f)));
}

fn parked(fs: &Fs, ino: u64) -> Option<u64> {
    Some(fs.ns.read().parked.lock().count(ino)).filter(|&c| c > 0)
}

#[test]
fn a_sync_parks_what_only_the_kernel_holds_and_a_call_takes_it_back() {
    let dev = device(73);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    // Made and looked up again: the kernel holds each twice.
    let a = put(&fs, d, "a", b"alpha");
    let b = put(&fs, d, "b", b"beta");
    fs.lookup(d, b"a").unwrap();
    fs.lookup(d, b"b").unwrap();
    fs.open(b, libc::O_RDONLY).unwrap();

    // The tests keep no node cache: the sync drops a (the kernel holds it only), not b
    // (open) nor the directories.
    assert_eq!(fs.trim_nodes(), 0, "a's times still wait in memory");
    fs.sync().unwrap();
    assert!(!in_memory(&fs, a) && in_memory(&fs, b) && in_memory(&fs, d));
    assert_eq!(parked(&fs, a), Some(2), "its lookup count stays, parked");

    // A call by number reads it back with its count: one forget leaves it held.
    assert_eq!(fs.read(a, 0, 5).unwrap(), b"alpha");
    assert_eq!((in_memory(&fs, a), parked(&fs, a)), (true, None));
    fs.forget(a, 1);
    assert!(in_memory(&fs, a), "one reference is left");

    // Parked again; the last forget of a parked count ends it, with nothing read.
    fs.sync().unwrap();
    assert_eq!(parked(&fs, a), Some(1));
    fs.forget(a, 1);
    assert_eq!((in_memory(&fs, a), parked(&fs, a)), (false, None));

    // An unlink of a parked inode reads it back; the inode lives until its last forget.
    fs.lookup(d, b"a").unwrap();
    fs.sync().unwrap();
    assert_eq!(parked(&fs, a), Some(1));
    let vol_files = fs.volume().volume().list().len();
    fs.unlink(d, b"a").unwrap();
    assert!(in_memory(&fs, a) && parked(&fs, a).is_none());
    assert_eq!(fs.getattr(a).unwrap().inode.nlink, 0, "held, unnamed");
    fs.forget(a, 1);
    assert!(!in_memory(&fs, a));
    assert_eq!(fs.volume().volume().list().len(), vol_files - 1, "removed");

    // The open file stays through syncs; its last close and forgets let it go.
    fs.sync().unwrap();
    assert!(in_memory(&fs, b));
    fs.release(b).unwrap();
    fs.sync().unwrap();
    assert_eq!(parked(&fs, b), Some(2));
    fs.forget(b, 2);
    assert_eq!(parked(&fs, b), None);
    fs.check_namespace().unwrap();
    fs.unmount().unwrap();
    let (fs, report) = remount(&dev);
    assert!(report.repaired.clean(), "{:?}", report.repaired);
    assert_eq!(fs.lookup(ROOT, b"d").unwrap().ino, d);
    assert_eq!(fs.lookup(d, b"b").unwrap().size, 4);
}

#[test]
fn a_node_cache_keeps_that_many_nodes() {
    let dev = device(74);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let files: Vec<u64> = (0..40)
        .map(|i| put(&fs, d, &format!("f{i}"), b""))
        .collect();
    fs.set_node_cache(12);
    fs.sync().unwrap();
    let ns = fs.ns.read();
    assert_eq!(ns.nodes.len(), 12, "the root, d and ten files");
    assert_eq!(ns.parked.lock().len(), 30);
    assert!(files
        .iter()
        .all(|f| ns.nodes.contains_key(f) != ns.parked.lock().contains(*f)));
}

/// Between syncs the background thread trims a cache only past its slack: lookups that
/// read back fewer nodes than the slack leave them, more are trimmed to the cache.
#[test]
fn an_overshoot_past_the_slack_is_trimmed_between_syncs() {
    let dev = device(77);
    let fs = fresh(&dev);
    let n = TRIM_SLACK_MIN + 100;
    for i in 0..n {
        put(&fs, ROOT, &format!("f{i}"), b"");
    }
    fs.sync().unwrap();
    let nodes = |fs: &Fs| fs.ns.read().nodes.len();
    assert_eq!(
        nodes(&fs),
        1,
        "the unit tests' node cache is 0: the root stays"
    );
    let mut kept = (0, 0);
    for i in 0..TRIM_SLACK_MIN / 2 {
        fs.lookup(ROOT, format!("f{i}").as_bytes()).unwrap();
    }
    assert_eq!(fs.trim_overshoot(&mut kept).1, 0, "within the slack");
    assert_eq!(nodes(&fs), 1 + TRIM_SLACK_MIN / 2);
    // Nodes a call pins cannot go: the trim leaves them, and is not tried again for them
    // until the count passes what it left by the slack, or `kept` is forgotten.
    let inos: Vec<u64> = (0..n)
        .map(|i| fs.lookup(ROOT, format!("f{i}").as_bytes()).unwrap().ino)
        .collect();
    let pin = fs.ensure_loaded(&inos[..n - 100]).unwrap();
    assert_eq!(
        fs.trim_overshoot(&mut kept).1,
        100,
        "past it: every unpinned node goes"
    );
    assert_eq!(
        (nodes(&fs), kept.1),
        (n - 99, n - 99),
        "the root and the pinned stay"
    );
    drop(pin);
    assert_eq!(
        fs.trim_overshoot(&mut kept),
        (0, 0),
        "within the slack of what the last trim left"
    );
    kept = (0, 0); // forgotten (at a commit, or every few checks)
    assert_eq!(
        fs.trim_overshoot(&mut kept).1,
        n - 100,
        "tried again: they go"
    );
    assert_eq!(nodes(&fs), 1);
    assert_eq!(
        fs.getattr(fs.lookup(ROOT, b"f7").unwrap().ino)
            .unwrap()
            .size,
        0
    );
}

#[test]
fn a_call_pins_what_it_read_back_until_it_ends() {
    let dev = device(75);
    let fs = fresh(&dev);
    let a = put(&fs, ROOT, "a", b"alpha");
    fs.sync().unwrap();
    assert_eq!(parked(&fs, a), Some(1));
    // A call named `a` by number and read it back; a trim (a background commit's) comes
    // before the call takes its own lock: `a` stays.
    let pin = fs.ensure_loaded(&[a]).unwrap();
    assert_eq!(fs.trim_nodes(), 0);
    assert!(in_memory(&fs, a), "a pinned node is not dropped");
    assert_eq!(fs.getattr(a).unwrap().size, 5, "pins nest");
    drop(pin);
    assert_eq!(fs.trim_nodes(), 1);
    assert_eq!(parked(&fs, a), Some(1));
    // A missing inode pins nothing.
    assert!(fs.ensure_loaded(&[a + 1000]).is_ok());
}

/// A pin's drop takes no namespace lock: a caller may hold `ns` for reading then (a
/// temporary of a tail expression outlives the function's locals), and a second read
/// behind a waiting writer (the background commit) would never be granted.
#[test]
fn a_pin_drops_while_its_caller_reads_and_a_writer_waits() {
    let dev = device(76);
    let fs = std::sync::Arc::new(fresh(&dev));
    let a = put(&fs, ROOT, "a", b"alpha");
    let pin = fs.ensure_loaded(&[a]).unwrap();
    let reading = fs.ns.read();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || drop(fs.ns_write()))
    };
    // Long enough for the writer to queue behind the read (if it has not, the drop below
    // meets no writer and the test proves less, but cannot fail wrongly).
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(pin);
    drop(reading);
    writer.join().unwrap();
    assert!(!fs.pinned(a));
}

#[test]
fn a_batch_of_forgets_drops_nodes_and_parked_counts_alike() {
    let dev = device(77);
    let fs = fresh(&dev);
    let a = put(&fs, ROOT, "a", b"");
    let b = put(&fs, ROOT, "b", b"");
    fs.sync().unwrap();
    let _ = fs.lookup(ROOT, b"b").unwrap(); // read back: in memory, held twice
    assert_eq!((parked(&fs, a), in_memory(&fs, b)), (Some(1), true));
    fs.forget_many(&[(a, 1), (b, 1), (ROOT + 9999, 3)]);
    assert_eq!(parked(&fs, a), None);
    assert!(in_memory(&fs, b), "one reference of two left");
    fs.forget_many(&[(b, 1)]);
    assert!(!in_memory(&fs, b) && parked(&fs, b).is_none());
    fs.check_namespace().unwrap();
}

#[test]
fn an_unmount_for_exit_leaves_a_clean_file_system() {
    let dev = device(78);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let a = put(&fs, d, "a", b"alpha");
    fs.sync().unwrap();
    fs.unlink(d, b"a").unwrap(); // held by the kernel: removed at the unmount
    let b = put(&fs, d, "b", b"beta");
    fs.unmount_for_exit().unwrap();
    let (fs, report) = remount(&dev);
    assert!(report.repaired.clean(), "{:?}", report.repaired);
    let store = fs.volume().volume().store();
    assert_eq!(store.unclean_close(), None, "closed cleanly");
    assert_eq!(fs.lookup(ROOT, b"d").unwrap().ino, d);
    assert_eq!(fs.lookup(d, b"a"), Err(Errno(libc::ENOENT)));
    assert_eq!(fs.lookup(d, b"b").unwrap().ino, b);
    assert_eq!(fs.read(b, 0, 9).unwrap(), b"beta");
    assert_eq!(
        fs.getattr(a),
        Err(Errno(libc::ENOENT)),
        "the unlinked inode is gone"
    );
    fs.check_namespace().unwrap();
}

/// The kinds a plain listing of ROOT gives, by name (`.` and `..` left out).
fn listed_kinds(fs: &Fs) -> Vec<(Vec<u8>, Option<Kind>)> {
    let fh = fs.opendir(ROOT).unwrap();
    let mut kinds = Vec::new();
    fs.readdir(fh, 0, |name, _, kind, _| {
        kinds.push((name.to_vec(), kind));
        false
    })
    .unwrap();
    fs.releasedir(fh);
    kinds.retain(|(n, _)| n != b"." && n != b"..");
    kinds.sort_by(|a, b| a.0.cmp(&b.0));
    kinds
}

/// A volume whose adds were written before it carried `INCOMPAT_TYPED_ENTRIES`: its
/// entries list as kind unknown after a remount (what such a log holds), the first
/// read-write mount sets the feature, and from then on the adds carry their kinds, across
/// remounts; an old entry's kind is known once a call reads its inode.
#[test]
fn adds_before_the_typed_feature_list_unknown_and_new_ones_typed() {
    let dev = device(80);
    let mut fs = fresh(&dev);
    fs.typed_entries = false; // the adds a build before the feature wrote
    let d = mkdir(&fs, ROOT, "old-d");
    put(&fs, ROOT, "old-f", b"x");
    fs.unmount().unwrap();
    super::tests::before_typed_entries(&dev);
    let (fs, _) = remount(&dev);
    assert!(fs.typed_entries && fs.vol.volume().store().typed_entries_promised());
    let sb = extalloc::disk::format::read_superblock(dev.as_ref()).unwrap();
    assert_ne!(
        sb.incompat & extalloc::disk::format::INCOMPAT_TYPED_ENTRIES,
        0,
        "the mount's checkpoint wrote the feature before any typed add"
    );
    put(&fs, ROOT, "new-f", b"y");
    let want = |old: Option<Kind>| {
        vec![
            (b"new-f".to_vec(), Some(Kind::File)),
            (b"old-d".to_vec(), old),
            (b"old-f".to_vec(), None),
        ]
    };
    assert_eq!(listed_kinds(&fs), want(None));
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(
        listed_kinds(&fs),
        want(None),
        "the new add's kind is on the volume"
    );
    assert_eq!(fs.lookup(ROOT, b"old-d").unwrap().ino, d);
    assert_eq!(listed_kinds(&fs), want(Some(Kind::Dir)), "read, so known");
    fs.check_namespace().unwrap();
}

/// After a clean close the mount reads the root only: a listing gives the kinds the
/// entries' add records carry without reading an inode, `readdirplus` reads directories
/// back through their names (with their parent), and a rename of a directory read back so
/// checks its ancestry.
#[test]
fn directories_come_back_through_their_names() {
    let dev = device(79);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let e = mkdir(&fs, d, "e");
    let f = put(&fs, ROOT, "f", b"file");
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(
        listed_kinds(&fs),
        [
            (b"d".to_vec(), Some(Kind::Dir)),
            (b"f".to_vec(), Some(Kind::File))
        ],
        "kinds from the add records"
    );
    let fh = fs.opendir(ROOT).unwrap();
    assert!(
        !in_memory(&fs, d) && !in_memory(&fs, f),
        "a plain listing reads no inode"
    );
    let mut plus = Vec::new();
    fs.readdirplus(fh, 0, |name, a, _| {
        plus.push((name.to_vec(), a.ino, a.inode.kind));
        false
    })
    .unwrap();
    fs.releasedir(fh);
    assert!(plus.contains(&(b"d".to_vec(), d, Kind::Dir)), "{plus:?}");
    assert!(plus.contains(&(b"f".to_vec(), f, Kind::File)), "{plus:?}");
    assert_eq!(fs.lookup(d, b"..").unwrap().ino, ROOT, "d's parent");
    assert_eq!(fs.lookup(d, b"e").unwrap().ino, e);
    // A directory cannot move under itself, even one read back moments ago.
    assert_eq!(
        fs.rename(ROOT, b"d", e, b"loop", 0, ME),
        Err(Errno(libc::EINVAL))
    );
    fs.rename(d, b"e", ROOT, b"e2", 0, ME).unwrap();
    assert_eq!(fs.lookup(e, b"..").unwrap().ino, ROOT);
    // A directory two levels down, named by number after a remount (a file handle kept
    // across it): found from the root, its parent read back on the way.
    let deep = mkdir(&fs, e, "deep");
    let inner = mkdir(&fs, deep, "inner");
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    // A name looked up in it first: the lookup reads the directory back by number (it
    // once said ENOENT, having looked for the directory in memory only).
    assert_eq!(fs.lookup(deep, b"inner").unwrap().ino, inner);
    // A file named as a parent: ENOTDIR, and its node, read back for nothing, goes again.
    assert_eq!(fs.lookup(f, b"x"), Err(Errno(libc::ENOTDIR)));
    assert!(
        !fs.ns.read().nodes.contains_key(&f),
        "the file's node dropped"
    );
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(fs.lookup(deep, b".").unwrap().ino, deep);
    assert_eq!(fs.lookup(deep, b"..").unwrap().ino, e);
    assert_eq!(fs.lookup(e, b"..").unwrap().ino, ROOT);
    assert_eq!(
        fs.lookup(f, b".").unwrap().inode.kind,
        Kind::File,
        "a file by number"
    );
    fs.unmount().unwrap();
}

/// A crash under the store's promise (`Store::promise_crash_pending`) leaves the inode
/// unlinked while held as a pending file, which the volume's open removes, and the mount
/// reads only the root; a crash of a build before the promise leaves a published orphan,
/// and the crash stays marked through another tool's clean close until a mount's census
/// has removed it.
#[test]
fn a_crash_under_the_promise_leaves_nothing_and_one_before_it_is_counted() {
    let dev = device(72);
    let fs = fresh(&dev);
    let e = mkdir(&fs, ROOT, "e2");
    // Unlinked while the kernel holds it, then a crash: pending since its last name went
    // (`Fs::retract`), so the volume's open removes it, and the mount under the store's
    // promise reads nothing more than after a clean close.
    let g = put(&fs, ROOT, "g", b"held");
    fs.lookup(ROOT, b"g").unwrap();
    fs.unlink(ROOT, b"g").unwrap();
    assert!(fs.volume().volume().is_pending(g));
    fs.sync().unwrap();
    super::tests::crash(fs, &dev);
    let vol = Volume::open(dev.clone(), extalloc::Policy::default()).unwrap();
    assert!(vol.store().unchecked() && !vol.store().crash_needs_check());
    assert!(vol.size(g).is_err(), "the open removed the pending file");
    vol.close().unwrap();
    let (fs, report) = remount(&dev);
    assert!(report.crash_covered && !report.scanned, "{report:?}");
    assert_eq!(
        fs.ns.read().nodes.keys().copied().collect::<Vec<_>>(),
        vec![ROOT]
    );
    assert!(!fs.volume().volume().store().unchecked(), "checked now");
    // An orphan as a build before the promise leaves it (an inode of link count 0,
    // published), then a crash of that build.
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), extalloc::Policy::default()).unwrap();
    let mut inode = Inode::new(Kind::File, 0o644, 0, 0, 0);
    inode.nlink = 0;
    let g = vol.create(&inode.encode()).unwrap();
    vol.sync().unwrap();
    vol.store().abandon();
    drop(vol);
    super::tests::before_the_promise(&dev);
    // Another tool opens the volume and closes it cleanly: the crash stays marked.
    let vol = Volume::open(dev.clone(), extalloc::Policy::default()).unwrap();
    assert!(vol.store().unchecked(), "found not closed cleanly");
    vol.close().unwrap();
    let (fs, report) = remount(&dev);
    assert!(
        report.scanned && !report.crash_covered,
        "the crash stayed marked: the whole read ran"
    );
    assert_eq!(report.repaired.orphans, vec![g], "{report:?}");
    assert_eq!(
        fs.ns.read().nodes.keys().copied().collect::<Vec<_>>(),
        vec![ROOT],
        "a crash's leftovers repaired by the census: only the root in memory"
    );
    assert!(!fs.volume().volume().store().unchecked(), "checked now");
    fs.unmount().unwrap();
    let (fs, report) = remount(&dev);
    assert!(!report.scanned, "a clean close again: the root only");
    assert_eq!(fs.lookup(ROOT, b"e2").unwrap().ino, e);
    fs.unmount().unwrap();
}

/// A torn tail on a directory's log after a crash (an append cut short): the census finds
/// it, the mount cuts it and keeps only the root, and the directory reads back whole.
#[test]
fn a_torn_log_tail_after_a_crash_is_cut_by_the_census() {
    let dev = device(73);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let a = put(&fs, d, "a", b"alpha");
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), extalloc::Policy::default()).unwrap();
    let end = vol.size(d).unwrap();
    let rec = crate::dir::record(b"never-made", Some((a + 100, None)));
    vol.write(d, end, &rec[..rec.len() / 2]).unwrap();
    vol.sync().unwrap();
    super::tests::drop_as_crash(vol);

    let (fs, report) = remount(&dev);
    assert!(report.scanned, "{report:?}");
    assert_eq!(report.repaired.logs.len(), 1, "{report:?}");
    assert!(report.repaired.logs[0].starts_with(&format!("directory {d}:")));
    assert!(report.repaired.lost_found.is_empty() && report.repaired.orphans.is_empty());
    assert_eq!(
        fs.ns.read().nodes.keys().copied().collect::<Vec<_>>(),
        vec![ROOT],
        "repaired by the census: only the root in memory"
    );
    assert_eq!(super::tests::find(&fs, "d/a").unwrap(), a);
    assert_eq!(fs.read(a, 0, 10).unwrap(), b"alpha");
    assert_eq!(
        fs.volume().volume().size(d).unwrap(),
        end,
        "the tail cut where the last whole record ends"
    );
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), extalloc::Policy::default()).unwrap();
    let after = scan::check(&vol).unwrap();
    assert!(after.clean(), "{after:?}");
}
