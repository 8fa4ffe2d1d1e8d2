//! What the kernel's cache relies on (`fuse.rs`'s long timeouts, READDIRPLUS, lookups
//! under a shared lock): the references a listing hands out, lookups and forgets racing an
//! unlink, times that wait in memory for a commit, and the notice of an atime a read set.

use super::atime::{AtimeMode, AtimeRule};
use super::data::{SetAttr, SetTime};
use super::tests::{device, fresh, put, remount, ME};
use super::*;
use crate::inode::Time;
use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use std::sync::Arc;

fn refs(fs: &Fs, ino: u64) -> Option<u64> {
    fs.ns.read().nodes.get(&ino).map(|n| n.lookups.get())
}

/// Every entry of a listing, with each callback call's answer `full(i)` (true: the reply
/// is full and that entry is not added).
fn list_plus(fs: &Fs, dir: u64, mut full: impl FnMut(usize) -> bool) -> Vec<(Vec<u8>, u64)> {
    let fh = fs.opendir(dir).unwrap();
    let mut got = Vec::new();
    let mut calls = 0;
    fs.readdirplus(fh, 0, |name, a, _next| {
        calls += 1;
        if full(calls - 1) {
            return true;
        }
        got.push((name.to_vec(), a.ino));
        false
    })
    .unwrap();
    fs.releasedir(fh);
    got
}

#[test]
fn a_listing_with_attributes_counts_a_reference_per_entry_but_dot_and_dotdot() {
    let dev = device(1);
    let fs = fresh(&dev);
    let a = put(&fs, ROOT, "a", b"aa");
    let b = put(&fs, ROOT, "b", b"bbb");
    fs.forget(a, 1);
    fs.forget(b, 1);
    let root_refs = refs(&fs, ROOT);
    assert_eq!((refs(&fs, a), refs(&fs, b)), (Some(0), Some(0)));

    let got = list_plus(&fs, ROOT, |_| false);
    let names: Vec<&[u8]> = got.iter().map(|(n, _)| n.as_slice()).collect();
    assert_eq!(names, [&b"."[..], b"..", b"a", b"b"]);
    assert_eq!(got[2].1, a);
    assert_eq!((refs(&fs, a), refs(&fs, b)), (Some(1), Some(1)));
    assert_eq!(
        refs(&fs, ROOT),
        root_refs,
        "the kernel takes none for . and .."
    );

    // A reply full at `b`: `b` is not sent, so it gains no reference.
    let got = list_plus(&fs, ROOT, |i| i == 3);
    assert_eq!(got.len(), 3);
    assert_eq!((refs(&fs, a), refs(&fs, b)), (Some(2), Some(1)));

    // The references hold an unlinked file until the kernel forgets them.
    fs.unlink(ROOT, b"a").unwrap();
    fs.forget(a, 1);
    assert_eq!(refs(&fs, a), Some(1), "one reference left keeps it");
    assert_eq!(fs.getattr(a).unwrap().inode.nlink, 0);
    fs.forget(a, 1);
    assert_eq!(refs(&fs, a), None, "removed at its last reference");
    assert!(
        fs.volume().volume().size(a).is_err(),
        "its volume file is gone"
    );
}

#[test]
fn lookups_and_forgets_racing_an_unlink_remove_the_file_once_after_the_last_reference() {
    for seed in 0..8u64 {
        let dev = device(seed);
        let fs = Arc::new(fresh(&dev));
        let f = put(&fs, ROOT, "f", b"data");
        std::thread::scope(|s| {
            for _ in 0..2 {
                let fs = fs.clone();
                s.spawn(move || {
                    // Each lookup that finds the name is forgotten again, as the kernel does.
                    for _ in 0..500 {
                        if let Ok(a) = fs.lookup(ROOT, b"f") {
                            assert_eq!(a.ino, f);
                            fs.forget(f, 1);
                        }
                    }
                });
            }
            let fs = fs.clone();
            s.spawn(move || {
                std::thread::yield_now();
                fs.unlink(ROOT, b"f").unwrap();
            });
        });
        assert_eq!(
            refs(&fs, f),
            Some(1),
            "seed {seed}: make's reference is left"
        );
        fs.forget(f, 1);
        assert_eq!(refs(&fs, f), None, "seed {seed}");
        assert!(fs.volume().volume().size(f).is_err(), "seed {seed}");
        assert!(fs.lookup(ROOT, b"f").is_err());
    }
}

fn mtime_after_crash(sync: impl FnOnce(&Fs, u64)) -> Time {
    let dev = device(7);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    fs.sync().unwrap();
    let set = SetAttr {
        mtime: Some(SetTime::At(Time {
            secs: 1_000_000,
            nanos: 5,
        })),
        ..SetAttr::default()
    };
    let a = fs.setattr(f, set, ME).unwrap();
    assert_eq!(
        a.inode.mtime.secs, 1_000_000,
        "the reply carries the new time"
    );
    assert!(fs.ns.read().node(f).unwrap().attr_dirty, "kept in memory");
    sync(&fs, f);
    attr_after_crash(fs, &dev).mtime
}

/// `f`'s attributes after the daemon dies with `fs` and the device loses every write since
/// its last flush.
fn attr_after_crash(fs: Fs, dev: &Arc<FaultDevice<MemDevice>>) -> crate::inode::Inode {
    dev.fail_writes(true);
    drop(fs);
    dev.crash(Crash::DropAll).unwrap();
    dev.fail_writes(false);
    let (fs, _) = remount(dev);
    let f = fs.lookup(ROOT, b"f").unwrap().ino;
    fs.getattr(f).unwrap().inode
}

#[test]
fn times_alone_wait_in_memory_for_the_next_commit_fsync_or_close() {
    let set = Time {
        secs: 1_000_000,
        nanos: 5,
    };
    // A commit of the volume alone (what a namespace change's commit does) does not carry
    // them: they are not in its transaction.
    let lost = mtime_after_crash(|fs, _| fs.volume().volume().sync().unwrap());
    assert_ne!(lost, set);
    // The background commit (`Fs::sync`), an fsync and the last close write them first.
    assert_eq!(mtime_after_crash(|fs, _| fs.sync().unwrap()), set);
    assert_eq!(mtime_after_crash(|fs, f| fs.fsync(f).unwrap()), set);
    let closed = mtime_after_crash(|fs, f| {
        fs.open(f, libc::O_RDONLY).unwrap();
        fs.release(f).unwrap();
        fs.volume().volume().sync().unwrap();
    });
    assert_eq!(closed, set);
}

#[test]
fn a_mode_change_is_written_at_once_not_with_the_times() {
    let dev = device(8);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    let set = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    fs.setattr(f, set, ME).unwrap();
    // Written (into the volume's transaction), so the inode's times are clean again.
    assert!(!fs.ns.read().node(f).unwrap().attr_dirty);
    fs.volume().volume().sync().unwrap();
    assert_eq!(attr_after_crash(fs, &dev).perm, 0o600);
}

#[test]
fn an_atime_a_read_sets_is_told_so_the_kernel_drops_its_copy() {
    let dev = device(9);
    let fs = fresh(&dev);
    let told = Arc::new(Mutex::new(Vec::new()));
    let sink = told.clone();
    fs.on_stale_attrs(Box::new(move |ino| sink.lock().push(ino)));
    let f = put(&fs, ROOT, "f", b"hello");
    // An atime a tick old (a setattr is the kernel's own change: nothing is told).
    let old = SetAttr {
        atime: Some(SetTime::At(Time { secs: 1, nanos: 0 })),
        ..SetAttr::default()
    };
    fs.setattr(f, old, ME).unwrap();
    assert!(told.lock().is_empty());
    fs.set_atime_mode(AtimeMode {
        rule: AtimeRule::Strict,
        nodiratime: false,
    });
    fs.read(f, 0, 5).unwrap();
    assert_eq!(*told.lock(), [f]);
    assert_ne!(fs.getattr(f).unwrap().inode.atime.secs, 1);
    fs.setattr(f, old, ME).unwrap();
    fs.set_atime_mode(AtimeMode {
        rule: AtimeRule::NoAtime,
        nodiratime: false,
    });
    fs.read(f, 0, 5).unwrap();
    assert_eq!(*told.lock(), [f], "no atime set, nothing told");
}

#[test]
fn an_open_keeps_the_kernels_pages_only_when_a_read_would_set_no_atime() {
    let dev = device(10);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"hello");
    // Relatime (the default): an atime not after mtime and ctime is set by a read.
    assert!(!fs.access_keeps_atime(f));
    let later = Time {
        secs: Time::now().secs + 3600,
        nanos: 0,
    };
    let set = SetAttr {
        atime: Some(SetTime::At(later)),
        ..SetAttr::default()
    };
    fs.setattr(f, set, ME).unwrap();
    assert!(fs.access_keeps_atime(f), "an atime after both is kept");
    fs.set_atime_mode(AtimeMode {
        rule: AtimeRule::Strict,
        nodiratime: false,
    });
    assert!(
        !fs.access_keeps_atime(f),
        "strictatime sets it at every read"
    );
    fs.set_atime_mode(AtimeMode {
        rule: AtimeRule::NoAtime,
        nodiratime: false,
    });
    assert!(fs.access_keeps_atime(f));
    assert!(!fs.access_keeps_atime(9999), "no such inode");
}
