//! File system tests on a memory device: the namespace through unmount and mount, POSIX
//! errors, files unlinked while open, and crashes at random writes against what was
//! fsync'd.

use super::data::{SetAttr, SetTime};
use super::names::{NewNode, RENAME_EXCHANGE, RENAME_NOREPLACE};
use super::*;
use crate::inode::Time;
use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::{Geometry, Policy};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const ME: Caller = Caller { uid: 0, gid: 0 };

fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

fn fresh(dev: &Arc<FaultDevice<MemDevice>>) -> Fs {
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let (fs, r) = Fs::mount(vol, WritebackOptions::default()).unwrap();
    assert!(r.created && r.repaired.clean(), "{r:?}");
    fs
}

fn remount(dev: &Arc<FaultDevice<MemDevice>>) -> (Fs, MountReport) {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    Fs::mount(vol, WritebackOptions::default()).unwrap()
}

fn node(kind: Kind) -> NewNode<'static> {
    NewNode {
        kind,
        mode: 0o755,
        umask: 0o022,
        rdev: 0,
        target: None,
    }
}

fn mkdir(fs: &Fs, parent: u64, name: &str) -> u64 {
    fs.make(parent, name.as_bytes(), node(Kind::Dir), ME)
        .unwrap()
        .ino
}

fn put(fs: &Fs, parent: u64, name: &str, data: &[u8]) -> u64 {
    let ino = fs
        .make(parent, name.as_bytes(), node(Kind::File), ME)
        .unwrap()
        .ino;
    fs.write(ino, 0, data, false).unwrap();
    ino
}

fn find(fs: &Fs, path: &str) -> FsResult<u64> {
    let mut ino = ROOT;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes())?.ino;
    }
    Ok(ino)
}

fn contents(fs: &Fs, path: &str) -> FsResult<Vec<u8>> {
    let ino = find(fs, path)?;
    fs.read(ino, 0, 1 << 24)
}

/// Every volume check and the namespace check are clean after an unmount.
fn assert_clean(dev: &Arc<FaultDevice<MemDevice>>) {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean());
    let r = check(&vol).unwrap();
    assert!(r.clean(), "{r:?}");
    vol.close().unwrap();
}

#[test]
fn the_namespace_and_data_survive_unmount_and_mount() {
    let dev = device(1);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let e = mkdir(&fs, d, "e");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let f = put(&fs, e, "big", &big);
    put(&fs, ROOT, "small", b"hello");
    fs.link(f, ROOT, b"big-link").unwrap();
    let sym = NewNode {
        target: Some(b"d/e/big"),
        ..node(Kind::Symlink)
    };
    fs.make(ROOT, b"sym", sym, ME).unwrap();
    fs.rename(ROOT, b"small", d, b"moved", 0).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
    let (fs, r) = remount(&dev);
    assert!(!r.created && r.repaired.clean(), "{r:?}");
    assert_eq!(
        (r.repaired.dirs, r.repaired.files, r.repaired.symlinks),
        (3, 2, 1)
    );
    assert_eq!(contents(&fs, "d/e/big").unwrap(), big);
    assert_eq!(contents(&fs, "big-link").unwrap(), big);
    assert_eq!(contents(&fs, "d/moved").unwrap(), b"hello");
    assert_eq!(find(&fs, "small"), Err(Errno(libc::ENOENT)));
    assert_eq!(fs.readlink(find(&fs, "sym").unwrap()).unwrap(), b"d/e/big");
    assert_eq!(fs.getattr(f).unwrap().inode.nlink, 2);
    assert_eq!(fs.getattr(d).unwrap().inode.nlink, 3, "d holds e");
    assert_eq!(fs.getattr(ROOT).unwrap().inode.nlink, 3, "the root holds d");
    let mut names = Vec::new();
    let h = fs.opendir(d).unwrap();
    fs.readdir(h, 0, |n, _, _, _| {
        names.push(String::from_utf8_lossy(n).into_owned());
        false
    })
    .unwrap();
    fs.releasedir(h);
    assert_eq!(names, [".", "..", "e", "moved"]);
    fs.unmount().unwrap();
}

#[test]
fn bad_calls_get_posix_errors_and_change_nothing() {
    let dev = device(2);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let sub = mkdir(&fs, d, "sub");
    let f = put(&fs, ROOT, "f", b"x");
    let e = |r: FsResult<Attr>| r.map(|_| ()).unwrap_err().0;
    assert_eq!(e(fs.make(ROOT, b"d", node(Kind::File), ME)), libc::EEXIST);
    assert_eq!(e(fs.make(f, b"x", node(Kind::File), ME)), libc::ENOTDIR);
    assert_eq!(
        e(fs.make(ROOT, &[b'a'; 256], node(Kind::File), ME)),
        libc::ENAMETOOLONG
    );
    assert_eq!(e(fs.lookup(ROOT, b"nope")), libc::ENOENT);
    assert_eq!(fs.rmdir(ROOT, b"d"), Err(Errno(libc::ENOTEMPTY)));
    assert_eq!(fs.rmdir(ROOT, b"f"), Err(Errno(libc::ENOTDIR)));
    assert_eq!(fs.unlink(ROOT, b"d"), Err(Errno(libc::EISDIR)));
    assert_eq!(
        fs.rename(ROOT, b"d", sub, b"loop", 0),
        Err(Errno(libc::EINVAL))
    );
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"d", 0),
        Err(Errno(libc::EISDIR))
    );
    assert_eq!(
        fs.rename(d, b"sub", ROOT, b"f", 0),
        Err(Errno(libc::ENOTDIR))
    );
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"d", RENAME_NOREPLACE),
        Err(Errno(libc::EEXIST))
    );
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"g", RENAME_EXCHANGE),
        Err(Errno(libc::ENOENT))
    );
    assert_eq!(e(fs.link(d, ROOT, b"dlink")), libc::EPERM);
    assert_eq!(fs.readlink(f), Err(Errno(libc::EINVAL)));
    assert_eq!(fs.open(f, libc::O_DIRECT), Err(Errno(libc::EINVAL)));
    assert_eq!(
        fs.fallocate(f, 0, 4096, 0x8, ME),
        Err(Errno(libc::EOPNOTSUPP)),
        "collapse range"
    );
    let too_far = SetAttr {
        size: Some(u64::MAX),
        ..Default::default()
    };
    assert!(fs.setattr(f, too_far, ME).is_err());
    assert_eq!(fs.getattr(f).unwrap().size, 1);
    // Exchange swaps a file and a directory, and the link counts follow.
    fs.rename(ROOT, b"f", d, b"sub", RENAME_EXCHANGE).unwrap();
    assert_eq!(find(&fs, "d/sub"), Ok(f));
    assert_eq!(find(&fs, "f"), Ok(sub));
    assert_eq!(fs.getattr(d).unwrap().inode.nlink, 2);
    assert_eq!(fs.getattr(ROOT).unwrap().inode.nlink, 4);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

#[test]
fn a_file_unlinked_while_open_keeps_its_data_until_the_last_close() {
    let dev = device(3);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"still here");
    fs.open(f, libc::O_RDWR).unwrap();
    fs.unlink(ROOT, b"f").unwrap();
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"still here");
    assert_eq!(fs.getattr(f).unwrap().inode.nlink, 0);
    fs.forget(f, 1);
    assert!(fs.volume().list().iter().any(|i| i.id == f), "open: kept");
    fs.release(f).unwrap();
    assert!(
        !fs.volume().list().iter().any(|i| i.id == f),
        "last close: gone"
    );
    // One left open at unmount goes too.
    let g = put(&fs, ROOT, "g", b"x");
    fs.open(g, 0).unwrap();
    fs.unlink(ROOT, b"g").unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// What the crash test's churn did to one name.
#[derive(Clone)]
struct Durable {
    path: String,
    data: Vec<u8>,
}

#[test]
fn crashes_at_random_writes_keep_every_fsynced_file_and_mount_repairs_the_rest() {
    let mut repaired = 0;
    for seed in 0..48u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = device(seed);
        let fs = fresh(&dev);
        let keep = mkdir(&fs, ROOT, "keep");
        let kept: Vec<Durable> = (0..4)
            .map(|i| {
                let data = vec![i as u8 + 1; 5000 * (i + 1)];
                put(&fs, keep, &format!("k{i}"), &data);
                Durable {
                    path: format!("keep/k{i}"),
                    data,
                }
            })
            .collect();
        fs.sync().unwrap();
        let mut synced = kept.clone();
        dev.fail_after(rng.gen_range(0..400));
        churn(&fs, &mut rng, &mut synced);
        dev.fail_writes(true);
        drop(fs);
        let how = match seed % 3 {
            0 => Crash::DropAll,
            1 => Crash::KeepAll,
            _ => Crash::Random {
                keep: 0.5,
                tear: true,
            },
        };
        dev.crash(how).unwrap();
        let (fs, r) = remount(&dev);
        repaired += usize::from(!r.repaired.clean());
        for d in &synced {
            assert_eq!(
                contents(&fs, &d.path).as_deref(),
                Ok(&d.data[..]),
                "seed {seed}: {} was fsync'd ({r:?})",
                d.path
            );
        }
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
    assert!(
        repaired > 0,
        "no crash left anything to repair: the test cut nothing"
    );
}

/// Random namespace changes under `work/`, with fsyncs; `synced` gains what each fsync
/// made durable and loses what a later change touched.
fn churn(fs: &Fs, rng: &mut impl Rng, synced: &mut Vec<Durable>) {
    let Ok(work) = fs.make(ROOT, b"work", node(Kind::Dir), ME).map(|a| a.ino) else {
        return;
    };
    let mut live: Vec<String> = Vec::new();
    for step in 0..120 {
        let name = format!("n{}", rng.gen_range(0..12));
        let path = format!("work/{name}");
        let touched = match rng.gen_range(0..7) {
            0 | 1 => {
                let data = vec![step as u8; rng.gen_range(1..20_000)];
                match fs.make(work, name.as_bytes(), node(Kind::File), ME) {
                    Ok(a) if fs.write(a.ino, 0, &data, false).is_ok() => {
                        live.push(path.clone());
                        if rng.gen_bool(0.5) && fs.fsync(a.ino).is_ok() {
                            synced.push(Durable {
                                path: path.clone(),
                                data,
                            });
                        }
                    }
                    _ => {}
                }
                vec![path]
            }
            2 => {
                let to = format!("work/m{}", rng.gen_range(0..12));
                let _ = fs.rename(work, name.as_bytes(), work, &to.as_bytes()[5..], 0);
                vec![path, to]
            }
            3 => {
                let _ = fs.unlink(work, name.as_bytes());
                vec![path]
            }
            4 => {
                let to = format!("l{}", rng.gen_range(0..12));
                if let Ok(ino) = fs.lookup(work, name.as_bytes()).map(|a| a.ino) {
                    let _ = fs.link(ino, work, to.as_bytes());
                }
                vec![format!("work/{to}")]
            }
            5 => {
                let _ = fs.make(work, name.as_bytes(), node(Kind::Dir), ME);
                vec![path]
            }
            _ => {
                let _ = fs.rmdir(work, name.as_bytes());
                vec![path]
            }
        };
        synced.retain(|d| !touched.contains(&d.path));
    }
}

/// A directory that sees many creates and removes keeps a bounded log (compaction), and
/// crashes in the middle of compacting lose no entry that was fsync'd.
#[test]
fn directory_logs_are_compacted_and_survive_crashes_while_compacting() {
    for seed in 0..12u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = device(100 + seed);
        let fs = fresh(&dev);
        let d = mkdir(&fs, ROOT, "d");
        for i in 0..50 {
            put(&fs, d, &format!("keep{i}"), b"k");
        }
        fs.sync().unwrap();
        if seed > 0 {
            dev.fail_after(rng.gen_range(0..3000));
        }
        for i in 0..4000u32 {
            let name = format!("churn{i:05}");
            if fs.make(d, name.as_bytes(), node(Kind::File), ME).is_err()
                || fs.unlink(d, name.as_bytes()).is_err()
            {
                break;
            }
        }
        if seed == 0 {
            let log = fs.getattr(d).unwrap().allocated;
            assert!(
                log <= 128 << 10,
                "the log maps {log} bytes after compaction"
            );
            let start = fs.ns.read().dir(d).unwrap().log_start;
            assert!(start > 0, "4,000 creates and removes compacted the log");
            fs.unmount().unwrap();
        } else {
            dev.fail_writes(true);
            drop(fs);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: true,
            })
            .unwrap();
        }
        let (fs, _) = remount(&dev);
        for i in 0..50 {
            assert_eq!(
                contents(&fs, &format!("d/keep{i}")).as_deref(),
                Ok(&b"k"[..]),
                "seed {seed}: keep{i}"
            );
        }
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// The names a listing of handle `h` from position `from` gives, at most `max`.
fn listed(fs: &Fs, h: u64, from: u64, max: usize) -> Vec<(String, u64)> {
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
    // Mid-listing changes move no position: the rest of the listing goes on from 3.
    put(&fs, d, "a", b"x");
    put(&fs, d, "c", b"x");
    assert_eq!(names(&listed(&fs, h, first[2].1, 10)), Vec::<&str>::new());
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

/// st_blocks is the blocks mapped plus those reserved for cached data, not the size's:
/// a 4 KiB write at 8 MiB is one block, cached, written back and after a remount; a
/// cached overwrite of a mapped block adds none.
#[test]
fn allocated_counts_mapped_and_reserved_blocks_not_the_size() {
    let dev = device(8);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"");
    fs.write(f, 8 << 20, &[1; 4096], false).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.allocated), ((8 << 20) + 4096, 4096), "cached");
    fs.fsync(f).unwrap();
    assert_eq!(fs.getattr(f).unwrap().allocated, 4096, "written back");
    fs.write(f, 8 << 20, &[2; 100], false).unwrap();
    assert_eq!(fs.getattr(f).unwrap().allocated, 4096, "a cached overwrite");
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(fs.getattr(f).unwrap().allocated, 4096, "remounted");
    fs.unmount().unwrap();
}

/// A removed file's blocks are free in statfs at once (its free is made durable first),
/// not at the next fsync or mount.
#[test]
fn statfs_counts_a_removed_files_blocks_as_free() {
    let dev = device(9);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"");
    fs.sync().unwrap();
    let before = fs.statfs().unwrap();
    fs.fallocate(f, 0, 8 << 20, 0, ME).unwrap();
    fs.fsync(f).unwrap();
    let full = fs.statfs().unwrap();
    assert!(full.free + 2048 <= before.free, "{before:?} -> {full:?}");
    fs.unlink(ROOT, b"f").unwrap();
    fs.forget(f, 1);
    let after = fs.statfs().unwrap();
    assert_eq!(
        (after.free, after.available),
        (before.free, before.available),
        "{before:?} -> {after:?}"
    );
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

/// A sync writing an inode's pending times races links and unlinks of that inode: the
/// blob it writes must carry the link count of the moment it is written, never one a
/// namespace change has replaced since. The interleaving that broke it (a sync's copy
/// taken, a link, then the copy written) is rare here: `extalloc torture --fs` found it,
/// about once in a thousand crashes; this stress checks the property after every round.
#[test]
fn pending_times_never_write_a_stale_link_count() {
    let dev = device(21);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let recorded = |fs: &Fs| Inode::decode(&fs.volume().attr(f).unwrap()).unwrap().nlink;
    let barrier = std::sync::Barrier::new(2);
    for i in 0..2000 {
        fs.write(f, 0, b"more", false).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                fs.sync().unwrap();
            });
            barrier.wait();
            let name = format!("l{}", i % 3);
            match fs.link(f, ROOT, name.as_bytes()) {
                Ok(_) => fs.forget(f, 1),
                Err(_) => fs.unlink(ROOT, name.as_bytes()).unwrap(),
            }
        });
        let want = fs.getattr(f).unwrap().inode.nlink;
        assert_eq!(
            recorded(&fs),
            want,
            "round {i}: the volume holds a stale link count"
        );
    }
    fs.sync().unwrap();
    drop(fs);
    dev.crash(Crash::DropAll).unwrap();
    let (_, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
}

/// A flipped byte in a record of the root directory's log costs only that record's name:
/// the parse steps over it, mount links the inode that lost its name into /lost+found with
/// its data (a directory with what it holds), removes nothing, rewrites the log, and the
/// next check is clean. `byte` picks the record: 3 is in "a"'s, 19 in "d"'s.
fn damage_root_log(seed: u64, byte: usize) -> (Arc<FaultDevice<MemDevice>>, [u64; 4], usize) {
    let dev = device(seed);
    let fs = fresh(&dev);
    let a = put(&fs, ROOT, "a", b"first");
    let d = mkdir(&fs, ROOT, "d");
    let inner = put(&fs, d, "inner", b"below d");
    let b = put(&fs, ROOT, "b", b"second");
    fs.link(b, d, b"b-again").unwrap();
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let files_before = vol.list().len();
    let mut log = vol.read(ROOT, 0, 64).unwrap();
    log[byte] ^= 0x40;
    vol.write(ROOT, 0, &log).unwrap();
    vol.close().unwrap();
    (dev, [a, d, inner, b], files_before)
}

#[test]
fn damage_in_a_log_costs_only_the_damaged_name_which_goes_to_lost_and_found() {
    // The first record, a file's.
    let (dev, [a, d, inner, b], files_before) = damage_root_log(31, 3);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let seen = check(&vol).unwrap();
    assert_eq!(
        seen.unnamed,
        vec![a],
        "only a's name was in the damage: {seen:?}"
    );
    drop(vol);
    let (fs, r) = remount(&dev);
    assert_eq!(r.repaired.lost_found, vec![a], "{r:?}");
    assert!(r.repaired.orphans.is_empty(), "{r:?}");
    let made = fs.volume().list().len() - files_before;
    assert_eq!(made, 1, "nothing removed, /lost+found made");
    assert_eq!(find(&fs, &format!("lost+found/#{a}")).unwrap(), a);
    assert_eq!(fs.read(a, 0, 100).unwrap(), b"first");
    assert_eq!(find(&fs, "d/inner").unwrap(), inner);
    assert_eq!(find(&fs, "b").unwrap(), b);
    assert_eq!(
        fs.getattr(b).unwrap().inode.nlink,
        2,
        "both of b's names kept"
    );
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let after = check(&vol).unwrap();
    assert!(after.clean(), "the log was rewritten: {after:?}");
    drop(vol);

    // The second record, a directory's: it comes back in /lost+found with its contents.
    let (dev, [_, d2, inner2, b2], _) = damage_root_log(32, 19);
    assert_eq!((d2, inner2, b2), (d, inner, b));
    let (fs, r) = remount(&dev);
    assert_eq!(r.repaired.lost_found, vec![d], "{r:?}");
    assert_eq!(find(&fs, &format!("lost+found/#{d}/inner")).unwrap(), inner);
    assert_eq!(fs.read(inner, 0, 100).unwrap(), b"below d");
    assert_eq!(
        fs.getattr(b).unwrap().inode.nlink,
        2,
        "b: / and /lost+found/#d"
    );
    let lf = find(&fs, "lost+found").unwrap();
    assert_eq!(
        fs.getattr(lf).unwrap().inode.nlink,
        3,
        "one directory in it"
    );
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let after = check(&vol).unwrap();
    assert!(after.clean(), "{after:?}");
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
