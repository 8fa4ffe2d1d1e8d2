//! File system tests on a memory device: the namespace through unmount and mount, POSIX
//! errors, files unlinked while open, crashes at random writes against what was fsync'd,
//! compaction, pending times racing links, and damage sent to /lost+found; and the helpers
//! `posix_tests.rs` shares.

use super::data::SetAttr;
use super::names::{NewNode, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
use super::*;
use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::{Geometry, Policy};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

pub(super) const ME: Caller = Caller { uid: 0, gid: 0 };

pub(crate) fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

pub(crate) fn fresh(dev: &Arc<FaultDevice<MemDevice>>) -> Fs {
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let (fs, r) = Fs::mount(vol, WritebackOptions::default()).unwrap();
    assert!(r.created && r.repaired.clean(), "{r:?}");
    fs
}

pub(super) fn remount(dev: &Arc<FaultDevice<MemDevice>>) -> (Fs, MountReport) {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    Fs::mount(vol, WritebackOptions::default()).unwrap()
}

pub(super) fn node(kind: Kind) -> NewNode<'static> {
    NewNode {
        kind,
        mode: 0o755,
        umask: 0o022,
        rdev: 0,
        target: None,
    }
}

pub(crate) fn mkdir(fs: &Fs, parent: u64, name: &str) -> u64 {
    fs.make(parent, name.as_bytes(), node(Kind::Dir), ME)
        .unwrap()
        .ino
}

pub(crate) fn put(fs: &Fs, parent: u64, name: &str, data: &[u8]) -> u64 {
    let ino = fs
        .make(parent, name.as_bytes(), node(Kind::File), ME)
        .unwrap()
        .ino;
    fs.write(ino, 0, data, false).unwrap();
    ino
}

pub(super) fn find(fs: &Fs, path: &str) -> FsResult<u64> {
    let mut ino = ROOT;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes())?.ino;
    }
    Ok(ino)
}

pub(super) fn contents(fs: &Fs, path: &str) -> FsResult<Vec<u8>> {
    let ino = find(fs, path)?;
    fs.read(ino, 0, 1 << 24)
}

/// The daemon dies with `fs` (nothing more reaches the device), and the device loses half
/// its unsynced writes, some torn.
pub(super) fn crash(fs: Fs, dev: &Arc<FaultDevice<MemDevice>>) {
    dev.fail_writes(true);
    drop(fs);
    dev.crash(Crash::Random {
        keep: 0.5,
        tear: true,
    })
    .unwrap();
}

/// Drops `vol` as a crash leaves a device after a read met damage (`Store::mark_damaged`,
/// on the device with a checkpoint, then `Store::abandon`): the next mount reads and
/// repairs the whole namespace. How the tests that damage a volume through its API make
/// the mount look (after a clean close, or a crash the store's promise covers, it reads
/// the root only, and damage is found where a call reads it, or by `fsck`).
pub(super) fn drop_as_crash(vol: Volume) {
    vol.store().mark_damaged();
    vol.checkpoint().unwrap();
    vol.store().abandon();
    drop(vol);
}

/// Takes the store's promise off the device (`INCOMPAT_CRASH_PENDING`), as a device
/// last mounted by a build before it is: a crash then leaves orphans and stray spill
/// files published, and the next mount counts the namespace to find them.
pub(super) fn before_the_promise(dev: &Arc<FaultDevice<MemDevice>>) {
    without_feature(dev, extalloc::disk::format::INCOMPAT_CRASH_PENDING);
}

/// Takes `INCOMPAT_TYPED_ENTRIES` off the device, as a device last mounted by a build
/// before directory adds carried kinds.
pub(super) fn before_typed_entries(dev: &Arc<FaultDevice<MemDevice>>) {
    without_feature(dev, extalloc::disk::format::INCOMPAT_TYPED_ENTRIES);
}

/// Clears incompatible feature `bit` in the device's superblock.
fn without_feature(dev: &Arc<FaultDevice<MemDevice>>, bit: u32) {
    let mut sb = extalloc::disk::format::read_superblock(dev.as_ref()).unwrap();
    sb.incompat &= !bit;
    sb.generation += 1;
    extalloc::disk::format::write_superblock(dev.as_ref(), &sb).unwrap();
    extalloc::disk::device::Device::flush(dev.as_ref()).unwrap();
}

/// Every volume check and the namespace check are clean after an unmount.
pub(super) fn assert_clean(dev: &Arc<FaultDevice<MemDevice>>) {
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
    fs.link(f, ROOT, b"big-link", Caller::ROOT).unwrap();
    let sym = NewNode {
        target: Some(b"d/e/big"),
        ..node(Kind::Symlink)
    };
    fs.make(ROOT, b"sym", sym, ME).unwrap();
    fs.rename(ROOT, b"small", d, b"moved", 0, ME).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let seen = check(&vol).unwrap();
    assert_eq!((seen.dirs, seen.files, seen.symlinks), (3, 2, 1));
    vol.close().unwrap();
    let (fs, r) = remount(&dev);
    assert!(!r.created && r.repaired.clean(), "{r:?}");
    assert_eq!(
        (r.scanned, r.repaired.dirs, r.inodes),
        (false, 0, 6),
        "a clean close: the mount reads the root only (and counts the volume's files)"
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
        fs.rename(ROOT, b"d", sub, b"loop", 0, ME),
        Err(Errno(libc::EINVAL))
    );
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"d", 0, ME),
        Err(Errno(libc::EISDIR))
    );
    assert_eq!(
        fs.rename(d, b"sub", ROOT, b"f", 0, ME),
        Err(Errno(libc::ENOTDIR))
    );
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"d", RENAME_NOREPLACE, ME),
        Err(Errno(libc::EEXIST))
    );
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"g", RENAME_EXCHANGE, ME),
        Err(Errno(libc::ENOENT))
    );
    assert_eq!(e(fs.link(d, ROOT, b"dlink", Caller::ROOT)), libc::EPERM);
    assert_eq!(fs.readlink(f), Err(Errno(libc::EINVAL)));
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
    fs.rename(ROOT, b"f", d, b"sub", RENAME_EXCHANGE, ME)
        .unwrap();
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
    // Kept while open, pending on the volume (no listing shows it; a crash leaves it for
    // the volume's open to remove).
    let vol = fs.volume().volume();
    assert!(
        vol.size(f).is_ok() && vol.is_pending(f),
        "open: kept, pending"
    );
    assert!(
        !fs.volume().list().iter().any(|i| i.id == f),
        "no listing shows it"
    );
    fs.release(f).unwrap();
    assert!(fs.volume().volume().size(f).is_err(), "last close: gone");
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
fn crashes_at_random_writes_keep_every_fsynced_file_and_leave_nothing_to_repair() {
    let mut covered = 0;
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
        // Under the store's promise (written at the first mount) every crash leaves only
        // pending files, which the volume's open removed: nothing to count or repair.
        assert!(r.crash_covered && !r.scanned, "seed {seed}: {r:?}");
        covered += 1;
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
    assert_eq!(covered, 48, "every crash covered by the promise");
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
                // Half of them leave a whiteout: the move and the whiteout, one change.
                let flags = if rng.gen_bool(0.5) {
                    RENAME_WHITEOUT
                } else {
                    0
                };
                let _ = fs.rename(work, name.as_bytes(), work, &to.as_bytes()[5..], flags, ME);
                vec![path, to]
            }
            3 => {
                let _ = fs.unlink(work, name.as_bytes());
                vec![path]
            }
            4 => {
                let to = format!("l{}", rng.gen_range(0..12));
                if let Ok(ino) = fs.lookup(work, name.as_bytes()).map(|a| a.ino) {
                    let _ = fs.link(ino, work, to.as_bytes(), Caller::ROOT);
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
            crash(fs, &dev);
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
            match fs.link(f, ROOT, name.as_bytes(), Caller::ROOT) {
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
pub(super) fn damage_root_log(
    seed: u64,
    byte: usize,
) -> (Arc<FaultDevice<MemDevice>>, [u64; 4], usize) {
    let dev = device(seed);
    let fs = fresh(&dev);
    let a = put(&fs, ROOT, "a", b"first");
    let d = mkdir(&fs, ROOT, "d");
    let inner = put(&fs, d, "inner", b"below d");
    let b = put(&fs, ROOT, "b", b"second");
    fs.link(b, d, b"b-again", Caller::ROOT).unwrap();
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let files_before = vol.list().len();
    let mut log = vol.read(ROOT, 0, 64).unwrap();
    log[byte] ^= 0x40;
    vol.write(ROOT, 0, &log).unwrap();
    vol.sync().unwrap();
    drop_as_crash(vol);
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

/// `RENAME_WHITEOUT`: the file moves, a character device 0:0 of the caller's takes its old
/// name in the same change, and both survive a remount; with `RENAME_EXCHANGE` it is
/// `EINVAL`.
#[test]
fn a_rename_with_whiteout_leaves_a_whiteout_at_the_old_name() {
    let dev = device(9);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let user = Caller { uid: 7, gid: 8 };
    let both = RENAME_WHITEOUT | RENAME_EXCHANGE;
    assert_eq!(
        fs.rename(ROOT, b"f", ROOT, b"g", both, user),
        Err(Errno(libc::EINVAL))
    );
    fs.rename(ROOT, b"f", ROOT, b"g", RENAME_WHITEOUT, user)
        .unwrap();
    fs.unmount().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    assert_eq!(find(&fs, "g"), Ok(f));
    let wh = fs.lookup(ROOT, b"f").unwrap();
    assert_eq!(wh.inode.kind, Kind::CharDevice);
    assert_eq!((wh.inode.rdev, wh.inode.perm), (0, 0));
    assert_eq!((wh.inode.uid, wh.inode.gid), (7, 8));
    fs.unmount().unwrap();
    assert_clean(&dev);
}
