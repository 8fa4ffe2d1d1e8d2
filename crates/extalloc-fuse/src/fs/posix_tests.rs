//! File system tests of POSIX behaviour (listings are `listing_tests.rs`'): atime under each
//! mount mode, set-id bits cleared by unprivileged data changes, the largest file, `O_DIRECT`
//! opens (`st_blocks` and `statfs` are `space_tests.rs`'). The helpers are `tests.rs`'.

use super::data::{SetAttr, SetTime};
use super::listing_tests::listed;
use super::tests::{device, find, fresh, mkdir, put, remount, ME};
use super::*;
use crate::inode::Time;

fn ago(secs: i64) -> Time {
    let now = Time::now();
    Time {
        secs: now.secs - secs,
        nanos: now.nanos,
    }
}

/// Sets `ino`'s atime, mtime and ctime to `a`, `m`, `c` seconds ago.
fn set_times(fs: &Fs, ino: u64, a: i64, m: i64, c: i64) {
    let set = SetAttr {
        atime: Some(SetTime::At(ago(a))),
        mtime: Some(SetTime::At(ago(m))),
        ctime: Some(ago(c)),
        ..Default::default()
    };
    fs.setattr(ino, set, ME).unwrap();
}

fn atime_after_read(fs: &Fs, ino: u64) -> i64 {
    fs.read(ino, 0, 10).unwrap();
    fs.getattr(ino).unwrap().inode.atime.secs
}

/// generic/003: a read updates atime as relatime (atime not after mtime or ctime, or a
/// day old), strictatime (always) and noatime (never) say; a listing from the start
/// updates a directory's unless nodiratime; an updated atime is written at close.
#[test]
fn reads_update_atime_as_the_mount_mode_says() {
    use super::atime::{AtimeMode, AtimeRule};
    let dev = device(5);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    assert_eq!(fs.atime_mode(), AtimeMode::default(), "relatime by default");
    let now = Time::now().secs;
    set_times(&fs, f, 100, 200, 200);
    assert_eq!(
        atime_after_read(&fs, f),
        ago(100).secs,
        "relatime: after mtime, ctime"
    );
    set_times(&fs, f, 100, 50, 200);
    assert!(
        atime_after_read(&fs, f) >= now,
        "relatime: mtime after atime"
    );
    set_times(&fs, f, 100, 200, 50);
    assert!(
        atime_after_read(&fs, f) >= now,
        "relatime: ctime after atime"
    );
    set_times(&fs, f, 2 * 86_400, 3 * 86_400, 3 * 86_400);
    assert!(atime_after_read(&fs, f) >= now, "relatime: a day old");
    let mode = |rule, nodiratime| AtimeMode { rule, nodiratime };
    fs.set_atime_mode(mode(AtimeRule::Strict, false));
    set_times(&fs, f, 100, 200, 200);
    assert!(atime_after_read(&fs, f) >= now, "strictatime");
    fs.set_atime_mode(mode(AtimeRule::NoAtime, false));
    set_times(&fs, f, 100, 50, 50);
    assert_eq!(atime_after_read(&fs, f), ago(100).secs, "noatime");
    // Directories: a listing from the start is an access.
    let d = mkdir(&fs, ROOT, "d");
    let h = fs.opendir(d).unwrap();
    fs.set_atime_mode(mode(AtimeRule::Strict, true));
    set_times(&fs, d, 100, 200, 200);
    listed(&fs, h, 0, 10);
    assert_eq!(
        fs.getattr(d).unwrap().inode.atime.secs,
        ago(100).secs,
        "nodiratime"
    );
    fs.set_atime_mode(mode(AtimeRule::Strict, false));
    listed(&fs, h, 0, 10);
    assert!(
        fs.getattr(d).unwrap().inode.atime.secs >= now,
        "strictatime, a directory"
    );
    fs.releasedir(h);
    // An updated atime is in memory until the close, then on the volume.
    set_times(&fs, f, 100, 200, 200);
    fs.open(f, libc::O_RDONLY).unwrap();
    let read_at = atime_after_read(&fs, f);
    fs.release(f).unwrap();
    // A commit of what the volume holds, then a crash: the close wrote the atime.
    fs.volume().volume().sync().unwrap();
    drop(fs);
    let (fs, _) = remount(&dev);
    assert_eq!(fs.getattr(f).unwrap().inode.atime.secs, read_at);
    fs.unmount().unwrap();
}

/// The mount's atime flags come from its mountinfo line (the last mount at the path).
#[test]
fn the_atime_mode_is_read_from_mountinfo() {
    use super::atime::{mount_atime, AtimeMode, AtimeRule};
    let info = "\
36 35 0:50 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:1 - fuse.extalloc /i rw
37 35 0:51 / /mnt/p rw,noatime - fuse.extalloc /p rw
38 35 0:51 / /mnt/q rw,nodiratime - fuse.extalloc /q rw
39 35 0:52 / /mnt/p rw,nosuid,relatime - fuse.extalloc /p2 rw";
    let at = |p: &str| mount_atime(info, std::path::Path::new(p));
    let mode = |rule, nodiratime| Some(AtimeMode { rule, nodiratime });
    assert_eq!(at("/mnt/a b"), mode(AtimeRule::Relatime, false));
    assert_eq!(
        at("/mnt/p"),
        mode(AtimeRule::Relatime, false),
        "the last mount"
    );
    assert_eq!(at("/mnt/q"), mode(AtimeRule::Strict, true));
    assert_eq!(at("/mnt/none"), None);
    let only = "37 35 0:51 / /mnt/p rw,noatime - fuse.extalloc /p rw";
    assert_eq!(
        mount_atime(only, std::path::Path::new("/mnt/p")),
        mode(AtimeRule::NoAtime, false)
    );
}

const SUIDGID: u16 = 0o6000;

fn perm(fs: &Fs, ino: u64) -> u16 {
    fs.getattr(ino).unwrap().inode.perm
}

/// A regular file with mode `perm` owned by user 1000.
fn set_id_file(fs: &Fs, name: &str, perm: u16) -> u64 {
    let ino = put(fs, ROOT, name, &[7; 8192]);
    let set = SetAttr {
        mode: Some(u32::from(perm)),
        ..Default::default()
    };
    let owner = SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        ..Default::default()
    };
    fs.setattr(ino, owner, ME).unwrap();
    fs.setattr(ino, set, ME).unwrap();
    ino
}

/// A change of a file's data or size by `who`, for the set-id tests.
type Change = Box<dyn Fn(&Fs, u64, Caller) -> FsResult<()>>;

/// The changes that clear set-id bits with the caller known: truncate, fallocate, punch
/// hole and zero range (generic/683-685).
fn set_id_changes() -> Vec<(&'static str, Change)> {
    const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
    vec![
        (
            "truncate",
            Box::new(|fs, i, who| {
                let set = SetAttr {
                    size: Some(100),
                    ..Default::default()
                };
                fs.setattr(i, set, who).map(|_| ())
            }),
        ),
        (
            "fallocate",
            Box::new(|fs, i, who| fs.fallocate(i, 0, 1 << 16, 0, who)),
        ),
        (
            "punch",
            Box::new(|fs, i, who| fs.fallocate(i, 0, 4096, libc::FALLOC_FL_PUNCH_HOLE | KEEP, who)),
        ),
        (
            "zero",
            Box::new(|fs, i, who| fs.fallocate(i, 0, 4096, libc::FALLOC_FL_ZERO_RANGE, who)),
        ),
    ]
}

/// generic/683-685: an unprivileged write, truncate, fallocate, punch or zero range
/// clears set-user-id, and set-group-id when the group may execute (without it, for a
/// caller in the file's group, the bit marks mandatory locking and stays); root keeps
/// both; a change of owner clears them.
#[test]
fn unprivileged_data_changes_clear_set_id_bits() {
    let dev = device(6);
    let fs = fresh(&dev);
    let user = Caller {
        uid: 1000,
        gid: 1000,
    };
    let mut changes: Vec<(&str, Change)> = vec![(
        "write",
        Box::new(|fs, i, who| fs.write(i, 0, b"x", who.uid != 0).map(|_| ())),
    )];
    changes.extend(set_id_changes());
    for (n, (what, change)) in changes.iter().enumerate() {
        let a = set_id_file(&fs, &format!("gx{n}"), 0o6755);
        change(&fs, a, user).unwrap();
        assert_eq!(perm(&fs, a), 0o755, "{what}: both bits go (group execute)");
        let b = set_id_file(&fs, &format!("nogx{n}"), 0o6745);
        change(&fs, b, user).unwrap();
        assert_eq!(
            perm(&fs, b),
            0o2745,
            "{what}: set-group-id without group execute stays"
        );
        let c = set_id_file(&fs, &format!("root{n}"), 0o6755);
        change(&fs, c, ME).unwrap();
        assert_eq!(perm(&fs, c) & SUIDGID, SUIDGID, "{what}: root keeps both");
    }
    let d = set_id_file(&fs, "chown", 0o6755);
    let chown = SetAttr {
        uid: Some(1001),
        ..Default::default()
    };
    fs.setattr(d, chown, ME).unwrap();
    assert_eq!(perm(&fs, d), 0o755, "chown, even by root");
    // The write's clearing is written at once (no fsync, no close): a crash keeps it.
    let e = set_id_file(&fs, "crash", 0o4755);
    fs.sync().unwrap();
    fs.write(e, 0, b"x", true).unwrap();
    fs.volume().volume().sync().unwrap();
    drop(fs);
    let (fs, _) = remount(&dev);
    assert_eq!(perm(&fs, e), 0o755);
    fs.unmount().unwrap();
}

/// A write reaching past the largest file (2^56 bytes) is EFBIG at once and changes
/// nothing; later calls work.
#[test]
fn a_write_past_the_largest_file_is_efbig_and_changes_nothing() {
    // Up to the kernel's largest file, a write is a sparse write like any other.
    let far = {
        let dev = device(17);
        let fs = fresh(&dev);
        let f = put(&fs, ROOT, "far", b"");
        let far = [1u64 << 56, 1 << 62, extalloc::volume::MAX_FILE_BYTES - 4];
        for (i, at) in far.into_iter().enumerate() {
            fs.write(f, at, b"abcd", false).unwrap();
            fs.fsync(f).unwrap();
            assert_eq!(fs.read(f, at, 4).unwrap(), b"abcd", "at {at}");
            // One block each: sparse.
            assert_eq!(fs.getattr(f).unwrap().allocated, 4096 * (i as u64 + 1));
        }
        fs.unmount().unwrap();
        let (fs, r) = remount(&dev);
        assert!(r.repaired.clean(), "{r:?}");
        fs.getattr(find(&fs, "far").unwrap()).unwrap().size
    };
    assert_eq!(far, extalloc::volume::MAX_FILE_BYTES);
    let dev = device(7);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"four");
    let max = extalloc::volume::MAX_FILE_BYTES;
    for at in [max, max - 2, 1 << 63, u64::MAX - 1] {
        assert_eq!(
            fs.write(f, at, b"abcd", false),
            Err(Errno(libc::EFBIG)),
            "at {at}"
        );
        assert_eq!(fs.getattr(f).unwrap().size, 4, "at {at}");
    }
    fs.fsync(f).unwrap();
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"four");
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(fs.getattr(f).unwrap().size, 4);
    fs.unmount().unwrap();
}

/// generic/683-685, tests 1 and 3: an unprivileged truncate or fallocate (plain, punch,
/// zero range) by a caller outside the file's group clears set-group-id even without
/// group execute (the kernel's `setattr_should_drop_sgid`); inside the group it stays.
#[test]
fn a_caller_outside_the_group_clears_set_group_id() {
    let dev = device(7);
    let fs = fresh(&dev);
    let outsider = Caller {
        uid: 1001,
        gid: 1001,
    };
    let member = Caller {
        uid: 1001,
        gid: 1000,
    };
    for (n, (what, change)) in set_id_changes().iter().enumerate() {
        let a = set_id_file(&fs, &format!("out{n}"), 0o6666);
        change(&fs, a, outsider).unwrap();
        assert_eq!(
            perm(&fs, a),
            0o666,
            "{what}: outside the group, both bits go"
        );
        let b = set_id_file(&fs, &format!("in{n}"), 0o6666);
        change(&fs, b, member).unwrap();
        assert_eq!(
            perm(&fs, b),
            0o2666,
            "{what}: in the group, set-group-id stays"
        );
    }
    fs.unmount().unwrap();
}

/// generic/003: under FUSE's writeback cache the kernel stamps a write's mtime and ctime
/// from its coarse clock, up to a tick before the atime the daemon gave the file at its
/// create; relatime must still update atime at the first read.
#[test]
fn relatime_updates_atime_when_mtime_is_a_coarse_tick_before_it() {
    let dev = device(8);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let created = ago(1);
    let tick_before = Time {
        secs: created.secs - i64::from(created.nanos < 4_000_000),
        nanos: (created.nanos + 1_000_000_000 - 4_000_000) % 1_000_000_000,
    };
    let set = SetAttr {
        atime: Some(SetTime::At(created)),
        mtime: Some(SetTime::At(tick_before)),
        ctime: Some(tick_before),
        ..Default::default()
    };
    fs.setattr(f, set, ME).unwrap();
    fs.read(f, 0, 10).unwrap();
    let first = fs.getattr(f).unwrap().inode.atime;
    assert!(first.secs > created.secs, "the first read updates atime");
    fs.read(f, 0, 10).unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().inode.atime,
        first,
        "a second read does not"
    );
    fs.unmount().unwrap();
}

/// generic/003: a read-only mount (here a bind remount with `ro,strictatime`) never
/// updates atime.
#[test]
fn a_read_only_mount_never_updates_atime() {
    use super::atime::{mount_atime, AtimeMode, AtimeRule};
    let info = "40 35 0:50 / /mnt/r ro,relatime - fuse /r rw\n\
                41 35 0:51 / /mnt/s ro - fuse /s rw";
    let at = |p: &str| mount_atime(info, std::path::Path::new(p)).unwrap();
    assert_eq!(at("/mnt/r").rule, AtimeRule::NoAtime, "ro,relatime");
    assert_eq!(at("/mnt/s").rule, AtimeRule::NoAtime, "ro,strictatime");
    assert_eq!(
        AtimeMode::from_options("rw").rule,
        AtimeRule::Strict,
        "rw,strictatime"
    );
}

/// A write or fallocate says whether it cleared a set-id bit (the FUSE layer then drops
/// the kernel's cached mode): once, not on the writes after.
#[test]
fn data_calls_say_when_they_cleared_set_id_bits() {
    let dev = device(41);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let other = Caller {
        uid: 1000,
        gid: 1000,
    };
    let set = SetAttr {
        mode: Some(0o6755),
        ..SetAttr::default()
    };
    fs.setattr(f, set, ME).unwrap();
    assert_eq!(fs.write_clearing(f, 0, b"x", true), Ok((1, true)));
    assert_eq!(
        fs.write_clearing(f, 0, b"y", true),
        Ok((1, false)),
        "nothing left"
    );
    fs.setattr(f, set, ME).unwrap();
    assert_eq!(
        fs.write_clearing(f, 0, b"z", false),
        Ok((1, false)),
        "a privileged write"
    );
    assert_eq!(fs.fallocate_clearing(f, 0, 4096, 0, other), Ok(true));
    assert_eq!(fs.fallocate_clearing(f, 0, 4096, 0, other), Ok(false));
    assert_eq!(fs.getattr(f).unwrap().inode.perm & 0o6000, 0);
    fs.unmount().unwrap();
}

/// `O_DIRECT` opens and creates are served (fstests' `_require_odirect`): the kernel
/// bypasses its page cache and sends plain reads and writes, which take the buffered path
/// through the volume's cache, so a direct write is read back through another open before
/// any writeback, and survives fsync and remount. Sizes and offsets need no alignment.
#[test]
fn direct_opens_share_the_buffered_path() {
    let dev = device(11);
    let fs = fresh(&dev);
    let direct = libc::O_RDWR | libc::O_DIRECT;
    let (a, _) = fs.create(ROOT, b"d", 0o644, 0, direct, ME).unwrap();
    let f = a.ino;
    let block: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(fs.write(f, 4096, &block, false), Ok(8192));
    fs.open(f, libc::O_RDONLY).unwrap();
    let mut want = vec![0u8; 4096];
    want.extend_from_slice(&block);
    assert_eq!(
        fs.read(f, 0, 1 << 20).unwrap(),
        want,
        "cached, not written back"
    );
    fs.open(f, direct).unwrap();
    assert_eq!(fs.write(f, 1000, b"unaligned", false), Ok(9));
    want[1000..1009].copy_from_slice(b"unaligned");
    assert_eq!(fs.read(f, 0, 1 << 20).unwrap(), want);
    fs.fsync(f).unwrap();
    for _ in 0..3 {
        fs.release(f).unwrap();
    }
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(fs.read(find(&fs, "d").unwrap(), 0, 1 << 20).unwrap(), want);
    fs.unmount().unwrap();
}

/// Under the writeback cache the kernel owns a file's mtime and ctime: a write from its
/// cache leaves the times the kernel set (with its SETATTR, served before or after the
/// write), while a write straight from a caller (direct I/O) stamps them now. A cached
/// write that clears set-id bits still moves ctime (a mode change).
#[test]
fn a_write_from_the_kernels_cache_leaves_the_times_to_the_kernel() {
    let dev = device(41);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let kernels = Time {
        secs: 1_000_000,
        nanos: 5,
    };
    let set = SetAttr {
        mtime: Some(SetTime::At(kernels)),
        ctime: Some(kernels),
        ..SetAttr::default()
    };
    fs.setattr(f, set, ME).unwrap();
    assert_eq!(
        fs.write_from(f, 0, b"more", false, true, ME),
        Ok((4, false))
    );
    let i = fs.getattr(f).unwrap().inode;
    assert_eq!((i.mtime, i.ctime), (kernels, kernels));
    assert_eq!(fs.read(f, 0, 4).unwrap(), b"more");
    let (_, _) = fs.write_clearing(f, 0, b"again", false).unwrap();
    let i = fs.getattr(f).unwrap().inode;
    assert!(
        i.mtime.secs > kernels.secs && i.ctime.secs > kernels.secs,
        "a direct write stamps now"
    );
    let setid = SetAttr {
        mode: Some(0o6755),
        mtime: Some(SetTime::At(kernels)),
        ctime: Some(kernels),
        ..SetAttr::default()
    };
    fs.setattr(f, setid, ME).unwrap();
    assert_eq!(fs.write_from(f, 0, b"x", true, true, ME), Ok((1, true)));
    let i = fs.getattr(f).unwrap().inode;
    assert_eq!(i.mtime, kernels);
    assert!(
        i.ctime.secs > kernels.secs,
        "clearing set-id bits is a change of the inode"
    );
}
