//! Directories' entries let go and read back (`ondemand.rs`, `Fs::shelve_dirs` and
//! `Fs::unshelve`): each sync of a test file system (a directory cache of 0) shelves every
//! directory no call holds, and every call that needs a directory's entries reads them back
//! from its log, with the namespace's invariant checked after each change (a shelved
//! directory's log against the count and bytes it let go).

use super::tests::{device, fresh, mkdir, put, ME};
use super::*;

/// Whether `dir`'s entries are shelved (read without marking it used, as `Ns::dir` does).
fn shelved(fs: &Fs, dir: u64) -> bool {
    fs.ns.read().nodes[&dir].dir.as_ref().unwrap().shelved()
}

/// Every name a listing of `dir` gives, `.` and `..` left out, sorted.
fn names(fs: &Fs, dir: u64) -> Vec<Vec<u8>> {
    let fh = fs.opendir(dir).unwrap();
    let mut out = Vec::new();
    fs.readdir(fh, 0, |name, _, _, _| {
        out.push(name.to_vec());
        false
    })
    .unwrap();
    fs.releasedir(fh);
    out.retain(|n| n != b"." && n != b"..");
    out.sort();
    out
}

#[test]
fn every_call_reads_a_shelved_directory_back_whole() {
    let dev = device(91);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let a = put(&fs, d, "a", b"alpha");
    put(&fs, d, "b", b"beta");
    let sub = mkdir(&fs, d, "sub");
    let empty = mkdir(&fs, ROOT, "empty");
    fs.sync().unwrap();
    assert!(shelved(&fs, d) && shelved(&fs, ROOT) && shelved(&fs, empty));
    assert_eq!(
        fs.ns.read().nodes[&d]
            .dir
            .as_ref()
            .unwrap()
            .entries
            .heap_bytes(),
        0
    );

    // A lookup reads the entries back; `..` needs none, and a bad name is refused first.
    assert_eq!(fs.lookup(sub, b"..").unwrap().ino, d);
    assert_eq!(fs.lookup(d, b".").unwrap().ino, d);
    assert!(shelved(&fs, d), "`.` and `..` are the node and its parent");
    let long = vec![b'x'; 256];
    assert_eq!(
        fs.lookup(d, &long).map(|a| a.ino),
        Err(Errno(libc::ENAMETOOLONG))
    );
    assert!(shelved(&fs, d), "refused before any read");
    assert_eq!(fs.lookup(d, b"a").unwrap().ino, a);
    assert!(!shelved(&fs, d));
    fs.sync().unwrap();

    // A listing, a create, an unlink, a link and a rename, each after a sync.
    assert_eq!(names(&fs, d), [&b"a"[..], b"b", b"sub"]);
    fs.sync().unwrap();
    put(&fs, d, "c", b"gamma");
    fs.sync().unwrap();
    fs.unlink(d, b"b").unwrap();
    fs.sync().unwrap();
    fs.link(a, sub, b"a-again", Caller::ROOT).unwrap();
    fs.sync().unwrap();
    fs.rename(d, b"c", sub, b"c-moved", 0, ME).unwrap();
    fs.sync().unwrap();
    assert_eq!(names(&fs, d), [&b"a"[..], b"sub"]);
    fs.sync().unwrap();
    assert_eq!(names(&fs, sub), [&b"a-again"[..], b"c-moved"]);

    // Emptiness needs no read back: a shelved directory kept its count.
    fs.sync().unwrap();
    assert_eq!(fs.rmdir(ROOT, b"d"), Err(Errno(libc::ENOTEMPTY)));
    assert!(shelved(&fs, d), "refused by the count it kept");
    fs.rmdir(ROOT, b"empty").unwrap();
    fs.check_namespace().unwrap();
}

#[test]
fn a_directory_in_use_keeps_its_entries_and_a_cold_one_lets_them_go() {
    let dev = device(92);
    let fs = fresh(&dev);
    fs.set_dir_cache(1);
    let hot = mkdir(&fs, ROOT, "hot");
    let cold = mkdir(&fs, ROOT, "cold");
    for i in 0..20 {
        put(&fs, hot, &format!("h{i}"), b"");
        put(&fs, cold, &format!("c{i}"), b"");
    }
    fs.sync().unwrap();
    assert!(
        !shelved(&fs, hot) && !shelved(&fs, cold),
        "both used since the last sync"
    );
    put(&fs, hot, "h20", b"");
    fs.sync().unwrap();
    assert!(!shelved(&fs, hot), "used since the last sync");
    assert!(shelved(&fs, cold), "not used: over the cache, let go");
    // A cache that holds both lets nothing go.
    fs.set_dir_cache(1 << 20);
    assert_eq!(
        fs.lookup(cold, b"c0").unwrap().ino,
        fs.lookup(cold, b"c0").unwrap().ino
    );
    fs.sync().unwrap();
    fs.sync().unwrap();
    assert!(!shelved(&fs, hot) && !shelved(&fs, cold));
}

/// Directory `d` of one file `a`, shelved, then its log changed by `damage` (given the
/// volume, `d` and its log's size) behind the mount's back: a lookup in it fails with
/// `EIO`, reads nothing back and marks the store damaged. Returns the mount and `d`.
fn damaged_since(seed: u64, damage: impl FnOnce(&Volume, u64, u64)) -> (Fs, u64) {
    let dev = device(seed);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    put(&fs, d, "a", b"alpha");
    fs.sync().unwrap();
    assert!(shelved(&fs, d));
    let vol = fs.volume().volume();
    damage(vol, d, vol.size(d).unwrap());
    assert_eq!(fs.lookup(d, b"a").map(|a| a.ino), Err(Errno(libc::EIO)));
    assert!(shelved(&fs, d), "nothing read back");
    assert!(
        vol.store().damaged(),
        "the next mount reads the whole namespace"
    );
    (fs, d)
}

#[test]
fn a_shelved_log_damaged_since_costs_its_calls_eio_and_marks_the_store() {
    let (fs, d) = damaged_since(93, |vol, d, _| {
        let mut log = vol.read(d, 0, 16).unwrap();
        log[3] ^= 0x40; // inside the first record's inode: its checksum fails
        vol.write(d, 0, &log).unwrap();
    });
    let fh = fs.opendir(d);
    assert_eq!(fh, Err(Errno(libc::EIO)));
}

/// A shelved log changed since in a way no checksum sees (its record zeroed, as a stale
/// or rewritten block would leave it: the log reads as a shorter one) costs its calls
/// `EIO` and marks the store, as damage does; the daemon does not stop.
#[test]
fn a_shelved_log_cut_since_costs_its_calls_eio_not_the_daemon() {
    damaged_since(94, |vol, d, size| {
        vol.write(d, 0, &vec![0u8; size as usize]).unwrap();
    });
}
