//! `chattr` flags: what immutable and append-only refuse on files and directories, what
//! they still allow, the ioctls that carry them, and their survival across a remount.

use super::data::{SetAttr, SetTime};
use super::flags::*;
use super::tests::{device, find, fresh, mkdir, node, put, remount, ME};
use super::*;

fn eperm<T: std::fmt::Debug>(r: FsResult<T>, what: &str) {
    assert_eq!(r.expect_err(what), Errno(libc::EPERM), "{what}");
}

#[test]
fn an_immutable_file_refuses_every_change_and_still_reads() {
    let dev = device(11);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    fs.ioctl(f, FS_IOC_SETFLAGS, &IMMUTABLE.to_le_bytes(), Caller::ROOT)
        .unwrap();
    assert_eq!(
        fs.ioctl(f, FS_IOC_GETFLAGS, &[], Caller::ROOT).unwrap(),
        IMMUTABLE.to_le_bytes()
    );
    eperm(fs.open(f, libc::O_WRONLY), "open for writing");
    eperm(
        fs.open(f, libc::O_RDONLY | libc::O_TRUNC),
        "open truncating",
    );
    let s = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    eperm(fs.setattr(f, s, ME), "chmod");
    let s = SetAttr {
        mtime: Some(SetTime::Now),
        ..Default::default()
    };
    eperm(fs.setattr(f, s, ME), "touch");
    eperm(fs.unlink(ROOT, b"f"), "unlink");
    eperm(fs.rename(ROOT, b"f", ROOT, b"g", 0, ME), "rename");
    eperm(fs.link(f, ROOT, b"g", Caller::ROOT), "link");
    eperm(fs.setxattr(f, b"user.x", b"1", 0, ME, &[]), "setxattr");
    eperm(fs.fallocate(f, 0, 4096, 0, ME), "fallocate");
    let g = put(&fs, ROOT, "g", b"other");
    eperm(fs.rename(ROOT, b"g", ROOT, b"f", 0, ME), "replacing it");
    fs.open(f, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(f, 0, 10).unwrap(), b"data");
    fs.release(f).unwrap();
    assert_eq!(
        find(&fs, "g"),
        Ok(g),
        "the rename that would replace it changed nothing"
    );
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(fs.get_flags(f), Ok(IMMUTABLE), "kept across a remount");
    fs.set_flags(f, 0).unwrap();
    fs.unlink(ROOT, b"f").unwrap();
    fs.unmount().unwrap();
}

#[test]
fn an_append_only_file_takes_appends_only() {
    let dev = device(12);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    fs.set_flags(f, APPEND).unwrap();
    eperm(
        fs.open(f, libc::O_WRONLY),
        "open for writing without O_APPEND",
    );
    eperm(
        fs.open(f, libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC),
        "O_TRUNC",
    );
    fs.open(f, libc::O_WRONLY | libc::O_APPEND).unwrap();
    fs.release(f).unwrap();
    let s = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    eperm(fs.setattr(f, s, ME), "truncate");
    let s = SetAttr {
        mtime: Some(SetTime::At(crate::inode::Time { secs: 5, nanos: 0 })),
        ..Default::default()
    };
    eperm(fs.setattr(f, s, ME), "an explicit time");
    // utime(path, NULL) through the writeback cache: atime "now", mtime a time.
    let s = SetAttr {
        mtime: Some(SetTime::At(crate::inode::Time::now())),
        atime: Some(SetTime::Now),
        ..Default::default()
    };
    fs.setattr(f, s, ME).unwrap();
    eperm(fs.unlink(ROOT, b"f"), "unlink");
    eperm(fs.removexattr(f, b"user.x"), "removexattr");
    fs.unmount().unwrap();
}

#[test]
fn directories_keep_their_entries_as_their_flags_say() {
    let dev = device(13);
    let fs = fresh(&dev);
    let frozen = mkdir(&fs, ROOT, "frozen");
    let log = mkdir(&fs, ROOT, "log");
    put(&fs, frozen, "in", b"x");
    put(&fs, log, "old", b"x");
    fs.set_flags(frozen, IMMUTABLE).unwrap();
    fs.set_flags(log, APPEND).unwrap();
    eperm(
        fs.make(frozen, b"new", node(Kind::File), ME),
        "create in immutable",
    );
    eperm(fs.unlink(frozen, b"in"), "unlink in immutable");
    eperm(
        fs.rename(frozen, b"in", ROOT, b"out", 0, ME),
        "move out of immutable",
    );
    fs.make(log, b"new", node(Kind::File), ME).unwrap();
    eperm(fs.unlink(log, b"old"), "unlink in append-only");
    eperm(fs.rmdir(ROOT, b"log"), "rmdir of append-only");
    assert_eq!(
        fs.set_flags(log, 0x1),
        Err(Errno(libc::EOPNOTSUPP)),
        "secure deletion"
    );
    fs.unmount().unwrap();
}

#[test]
fn fsxattr_carries_the_flags_and_refuses_project_ids() {
    let dev = device(14);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    let mut x = vec![0u8; FSXATTR_BYTES];
    x[..4].copy_from_slice(&to_xflags(APPEND | NODUMP).to_le_bytes());
    fs.ioctl(f, FS_IOC_FSSETXATTR, &x, Caller::ROOT).unwrap();
    assert_eq!(fs.get_flags(f), Ok(APPEND | NODUMP));
    assert_eq!(
        fs.ioctl(f, FS_IOC_FSGETXATTR, &[], Caller::ROOT).unwrap()[..4],
        x[..4]
    );
    x[12] = 1;
    assert_eq!(
        fs.ioctl(f, FS_IOC_FSSETXATTR, &x, Caller::ROOT),
        Err(Errno(libc::EOPNOTSUPP))
    );
    assert_eq!(
        fs.ioctl(f, 0x1234, &[], Caller::ROOT),
        Err(Errno(libc::ENOTTY))
    );
    assert_eq!(
        fs.ioctl(f, FS_IOC_SETFLAGS, &[1], Caller::ROOT),
        Err(Errno(libc::EINVAL))
    );
    fs.unmount().unwrap();
}

#[test]
fn copy_range_copies_through_the_cache_and_refuses_an_immutable_target() {
    let dev = device(15);
    let fs = fresh(&dev);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let src = put(&fs, ROOT, "src", &data);
    let dst = put(&fs, ROOT, "dst", b"head");
    assert_eq!(fs.copy_range((src, 1000), (dst, 4), 50_000, ME), Ok(50_000));
    assert_eq!(
        fs.copy_range((src, 99_000), (dst, 50_004), 5_000, ME),
        Ok(1_000),
        "short at the end"
    );
    assert_eq!(
        fs.copy_range((src, 200_000), (dst, 0), 10, ME),
        Ok(0),
        "past the end"
    );
    let got = fs.read(dst, 0, 60_000).unwrap();
    assert_eq!(&got[..4], b"head");
    assert_eq!(&got[4..50_004], &data[1000..51_000]);
    assert_eq!(&got[50_004..], &data[99_000..]);
    fs.set_flags(dst, IMMUTABLE).unwrap();
    eperm(
        fs.copy_range((src, 0), (dst, 0), 10, ME),
        "copy into an immutable file",
    );
    fs.unmount().unwrap();
}

/// A file opened for writing before `chattr +i` (or `+a`, without `O_APPEND`): the kernel
/// is never let cache its attributes, the attributes asked through that handle (as the
/// kernel asks before it caches a write) are `EPERM`, through a read-only or `O_APPEND`
/// handle and through none they are served, and the writeback cache's time update for data
/// cached before the flag is applied while a caller's explicit time is refused.
#[test]
fn handles_opened_before_the_flag_are_refused_their_writes() {
    let dev = device(12);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let w = fs.open(f, libc::O_WRONLY).unwrap();
    let a = fs.open(f, libc::O_WRONLY | libc::O_APPEND).unwrap();
    let r = fs.open(f, libc::O_RDONLY).unwrap();
    let plain = fs.getattr(f).unwrap();
    assert_eq!(
        Fs::attr_ttl(&plain, TTL_FOR_TEST),
        TTL_FOR_TEST,
        "cached until flagged"
    );
    fs.set_flags(f, IMMUTABLE).unwrap();
    eperm(
        fs.getattr_through(f, Some(w)),
        "attributes through a writing handle",
    );
    eperm(
        fs.getattr_through(f, Some(a)),
        "... through an appending one",
    );
    fs.getattr_through(f, Some(r)).unwrap();
    let attr = fs.getattr_through(f, None).unwrap();
    assert_eq!(Fs::attr_ttl(&attr, TTL_FOR_TEST), std::time::Duration::ZERO);
    let t = crate::inode::Time {
        secs: 1_700_000_000,
        nanos: 5,
    };
    let cached = SetAttr {
        mtime: Some(SetTime::At(t)),
        ctime: Some(t),
        cached_times: true,
        ..Default::default()
    };
    let after = fs
        .setattr(f, cached, ME)
        .expect("the cache's own times are applied");
    assert_eq!(after.inode.mtime, t);
    let explicit = SetAttr {
        cached_times: false,
        ..cached
    };
    eperm(fs.setattr(f, explicit, ME), "a caller's explicit mtime");
    fs.set_flags(f, APPEND).unwrap();
    eperm(
        fs.getattr_through(f, Some(w)),
        "append-only, through a handle without O_APPEND",
    );
    fs.getattr_through(f, Some(a)).unwrap();
    fs.set_flags(f, 0).unwrap();
    fs.getattr_through(f, Some(w)).unwrap();
    for _ in 0..3 {
        fs.release(f).unwrap();
    }
    fs.unmount().unwrap();
}

const TTL_FOR_TEST: std::time::Duration = std::time::Duration::from_secs(3600);
