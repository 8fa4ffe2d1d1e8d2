//! Extended attribute tests on a memory device: Linux's errors, sets inline and spilled
//! surviving unmount and mount, the per-inode limit, removal with the inode, crashes at
//! every write against a model of committed sets, and stray or damaged spill files.

use super::tests::{crash, device, fresh, put, remount, ME};
use super::xattrs::{XATTR_CREATE, XATTR_REPLACE};
use super::*;
use crate::repair::repair;
use crate::xattr::Xattrs;
use crate::xattr::{self, MAX_SET_BYTES, VALUE_MAX};
use extalloc::Policy;
use rand::{Rng, SeedableRng};

fn e<T: std::fmt::Debug>(r: FsResult<T>) -> i32 {
    r.expect_err("the call fails").0
}

fn set_of(fs: &Fs, ino: u64) -> Xattrs {
    let _pin = fs.ensure_loaded(&[ino]).unwrap(); // after a remount, read back (`ondemand.rs`)
    fs.ns.read().node(ino).unwrap().xattrs.clone()
}

#[test]
fn calls_follow_linux_and_survive_a_remount() {
    let dev = device(1);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    let before = fs.getattr(f).unwrap().inode.ctime;
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs.setxattr(f, b"user.a", b"one", 0, ME, &[]).unwrap();
    let after = fs.getattr(f).unwrap().inode.ctime;
    assert!(
        (after.secs, after.nanos) > (before.secs, before.nanos),
        "ctime moves"
    );
    assert_eq!(fs.getxattr(f, b"user.a").unwrap(), b"one");
    assert_eq!(
        e(fs.setxattr(f, b"user.a", b"x", XATTR_CREATE, ME, &[])),
        libc::EEXIST
    );
    assert_eq!(
        e(fs.setxattr(f, b"user.b", b"x", XATTR_REPLACE, ME, &[])),
        libc::ENODATA
    );
    assert_eq!(e(fs.setxattr(f, b"user.b", b"x", 4, ME, &[])), libc::EINVAL);
    assert_eq!(e(fs.setxattr(f, b"user.", b"x", 0, ME, &[])), libc::EINVAL);
    assert_eq!(
        e(fs.setxattr(f, b"os2.x", b"x", 0, ME, &[])),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        e(fs.setxattr(f, b"user.big", &vec![0; VALUE_MAX + 1], 0, ME, &[])),
        libc::E2BIG
    );
    assert_eq!(e(fs.getxattr(f, b"user.none")), libc::ENODATA);
    assert_eq!(e(fs.removexattr(f, b"user.none")), libc::ENODATA);
    assert_eq!(e(fs.getxattr(99, b"user.a")), libc::ENOENT);
    fs.setxattr(f, b"user.a", b"two", XATTR_REPLACE, ME, &[])
        .unwrap();
    fs.setxattr(f, b"trusted.t", b"", XATTR_CREATE, ME, &[])
        .unwrap();
    fs.setxattr(f, b"security.s", b"sec", 0, ME, &[]).unwrap();
    assert_eq!(
        fs.listxattr(f, || true).unwrap(),
        b"security.s\0trusted.t\0user.a\0"
    );
    assert_eq!(fs.listxattr(f, || false).unwrap(), b"security.s\0user.a\0");
    fs.removexattr(f, b"security.s").unwrap();
    fs.unmount().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    assert_eq!(fs.getxattr(f, b"user.a").unwrap(), b"two");
    assert_eq!(fs.getxattr(f, b"trusted.t").unwrap(), b"");
    assert_eq!(e(fs.getxattr(f, b"security.s")), libc::ENODATA);
    assert_eq!(fs.read(f, 0, 10).unwrap(), b"data", "the data stays");
}

#[test]
fn a_large_set_spills_into_a_file_that_follows_the_set() {
    let dev = device(2);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    let files = fs.volume().volume().list().len();
    let big: Vec<u8> = (0..VALUE_MAX).map(|i| (i % 251) as u8).collect();
    fs.setxattr(f, b"user.big", &big, 0, ME, &[]).unwrap();
    let spill = fs.ns.read().node(f).unwrap().spill.expect("64 KiB spills");
    assert_eq!(fs.volume().volume().list().len(), files + 1);
    // A thousand small ones (fstests generic/020's count for FUSE) on top.
    for i in 0..1000 {
        fs.setxattr(f, format!("user.n{i}").as_bytes(), b"v", 0, ME, &[])
            .unwrap();
    }
    let replaced = fs.ns.read().node(f).unwrap().spill.unwrap();
    assert_ne!(replaced, spill, "each change writes a new spill file");
    assert_eq!(
        fs.volume().volume().list().len(),
        files + 1,
        "the old one is gone"
    );
    fs.unmount().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
    assert_eq!(fs.getxattr(f, b"user.n999").unwrap(), b"v");
    // Back under the inline limit: the spill file goes.
    fs.removexattr(f, b"user.big").unwrap();
    for i in 0..1000 {
        fs.removexattr(f, format!("user.n{i}").as_bytes()).unwrap();
    }
    fs.setxattr(f, b"user.small", b"s", 0, ME, &[]).unwrap();
    assert_eq!(fs.ns.read().node(f).unwrap().spill, None);
    assert_eq!(fs.volume().volume().list().len(), files);
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(set_of(&fs, f).len(), 1);
    fs.unmount().unwrap();
}

#[test]
fn a_set_past_the_limit_is_enospc_and_changes_nothing() {
    let dev = device(3);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    let value = vec![7u8; VALUE_MAX];
    let mut i = 0;
    let err = loop {
        match fs.setxattr(f, format!("user.v{i}").as_bytes(), &value, 0, ME, &[]) {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.0, libc::ENOSPC);
    assert!(xattr::set_bytes(&set_of(&fs, f)) <= MAX_SET_BYTES);
    assert_eq!(set_of(&fs, f).len(), i);
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(set_of(&fs, f).len(), i);
    fs.unmount().unwrap();
}

#[test]
fn an_inode_removed_takes_its_spill_file_with_it() {
    let dev = device(4);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    let files = fs.volume().volume().list().len();
    fs.setxattr(f, b"user.big", &vec![1; 5000], 0, ME, &[])
        .unwrap();
    assert_eq!(fs.volume().volume().list().len(), files + 1);
    fs.unlink(ROOT, b"f").unwrap();
    fs.forget(f, 1);
    assert_eq!(fs.volume().volume().list().len(), files - 1);
    fs.unmount().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    fs.unmount().unwrap();
}

/// Random sets and removals with a commit after each; a crash at a random write. After
/// the remount every file's set is one the model held since its last commit.
#[test]
fn crashes_keep_each_set_whole_old_or_new() {
    let mut cut = 0;
    for seed in 0..24u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = device(seed);
        let fs = fresh(&dev);
        let files: Vec<u64> = (0..3)
            .map(|i| put(&fs, ROOT, &format!("f{i}"), b"x"))
            .collect();
        fs.sync().unwrap();
        // Per file: the sets it held since its last commit that completed.
        let mut may: Vec<Vec<Xattrs>> = files.iter().map(|_| vec![Xattrs::new()]).collect();
        dev.fail_after(rng.gen_range(0..300));
        for _ in 0..80 {
            let k = rng.gen_range(0..files.len());
            let name = format!("user.k{}", rng.gen_range(0..6));
            let r = if rng.gen_bool(0.7) {
                let len = [3, 900, 5000, 40_000][rng.gen_range(0..4)];
                let v = vec![rng.gen::<u8>(); len];
                fs.setxattr(files[k], name.as_bytes(), &v, 0, ME, &[])
            } else {
                fs.removexattr(files[k], name.as_bytes())
            };
            match r {
                Ok(()) => may[k].push(set_of(&fs, files[k])),
                Err(Errno(libc::ENODATA)) => {}
                Err(_) => {
                    cut += 1; // the device failed
                    break;
                }
            }
            if fs.sync().is_err() {
                cut += 1;
                break;
            }
            // Committed: only the newest set may come back.
            for m in &mut may {
                let last = m.pop().unwrap();
                *m = vec![last];
            }
        }
        crash(fs, &dev);
        let (fs, r) = remount(&dev);
        for (k, &f) in files.iter().enumerate() {
            let got = set_of(&fs, f);
            assert!(
                may[k].contains(&got),
                "seed {seed}: file {f} came back with a set it never held whole ({r:?})"
            );
        }
        fs.unmount().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(check(&vol).unwrap().clean(), "seed {seed}");
        vol.close().unwrap();
    }
    assert!(
        cut >= 20,
        "only {cut} of 24 runs were cut by the device: the test cut too little"
    );
}

#[test]
fn a_stray_spill_file_is_removed_at_mount() {
    let dev = device(5);
    let fs = fresh(&dev);
    put(&fs, ROOT, "f", b"x");
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let stray = vol.create(&xattr::spill_blob(12345)).unwrap();
    vol.sync().unwrap();
    super::tests::drop_as_crash(vol); // a crash left it: the mount reads every inode
    let (fs, r) = remount(&dev);
    assert_eq!(r.repaired.stray_xattrs, vec![stray]);
    assert!(fs.volume().volume().list().iter().all(|f| f.id != stray));
    fs.unmount().unwrap();
}

/// A spill file's data overwritten: the check reports it, mount refuses, and the repair
/// drops the attributes and keeps the file, its name and its data.
#[test]
fn damaged_attributes_are_dropped_by_repair_and_the_file_kept() {
    let dev = device(6);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"file data");
    fs.setxattr(f, b"user.big", &vec![3; 9000], 0, ME, &[])
        .unwrap();
    let spill = fs.ns.read().node(f).unwrap().spill.unwrap();
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    vol.write(spill, 100, b"damage").unwrap();
    vol.sync().unwrap();
    let seen = check(&vol).unwrap();
    assert_eq!(seen.damaged_xattrs.len(), 1, "{seen:?}");
    assert_eq!(seen.damaged_xattrs[0].0, f);
    // After a crash the mount reads every inode, and refuses.
    super::tests::drop_as_crash(vol);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let why = Fs::mount(vol, Default::default()).err().unwrap();
    assert!(why.contains("fsck --repair"), "{why}");
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.xattrs_dropped.len(), 1, "{r:?}");
    assert_eq!(r.namespace.stray_xattrs, vec![spill]);
    let (fs, m) = remount(&dev);
    assert!(m.repaired.clean(), "{m:?}");
    assert_eq!(fs.lookup(ROOT, b"f").unwrap().ino, f);
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"file data");
    assert!(set_of(&fs, f).is_empty());
    fs.unmount().unwrap();
}

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    crate::acl::Acl {
        entries: entries.to_vec(),
    }
    .encode()
}

const NONE: u32 = u32::MAX;

/// An ACL with a named user and a mask of `mask`, owner rwx, group r-x, other nothing.
fn named(mask: u16) -> Vec<u8> {
    use crate::acl::*;
    acl(&[
        (USER_OBJ, 7, NONE),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NONE),
        (MASK, mask, NONE),
        (OTHER, 0, NONE),
    ])
}

fn chmod(fs: &Fs, ino: u64, mode: u32) {
    let set = data::SetAttr {
        mode: Some(mode),
        ..Default::default()
    };
    fs.setattr(ino, set, ME).unwrap();
}

#[test]
fn an_access_acl_sets_the_mode_and_a_chmod_sets_the_acl() {
    use crate::acl::*;
    use crate::xattr::{ACL_ACCESS, ACL_DEFAULT};
    let dev = device(7);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    assert_eq!(
        e(fs.setxattr(f, ACL_ACCESS, &named(6), 0, ME, &[])),
        libc::EOPNOTSUPP,
        "no ACLs unless the kernel enforces them"
    );
    fs.enable_acls();
    fs.setxattr(f, ACL_ACCESS, &named(6), 0, ME, &[]).unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().inode.perm,
        0o760,
        "group bits are the mask"
    );
    assert_eq!(fs.getxattr(f, ACL_ACCESS).unwrap(), named(6));
    chmod(&fs, f, 0o750);
    assert_eq!(
        fs.getxattr(f, ACL_ACCESS).unwrap(),
        named(5),
        "chmod sets the mask"
    );
    // An ACL the mode says all of is not kept; the mode takes it.
    let minimal = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 0, NONE)]);
    fs.setxattr(f, ACL_ACCESS, &minimal, 0, ME, &[]).unwrap();
    assert_eq!(fs.getattr(f).unwrap().inode.perm, 0o640);
    assert_eq!(e(fs.getxattr(f, ACL_ACCESS)), libc::ENODATA);
    assert_eq!(
        e(fs.setxattr(f, ACL_ACCESS, b"junk", 0, ME, &[])),
        libc::EINVAL
    );
    assert_eq!(
        e(fs.setxattr(f, ACL_DEFAULT, &named(7), 0, ME, &[])),
        libc::EACCES
    );
    // Set-group-id goes when the caller is outside the file's group and not root.
    chmod(&fs, f, 0o2770);
    let user = Caller { uid: 5, gid: 5 };
    fs.setxattr(f, ACL_ACCESS, &named(7), 0, user, &[0])
        .unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().inode.perm,
        0o2770,
        "a member keeps it"
    );
    fs.setxattr(f, ACL_ACCESS, &named(7), 0, user, &[9])
        .unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().inode.perm,
        0o770,
        "a stranger clears it"
    );
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    fs.enable_acls();
    assert_eq!(fs.getxattr(f, ACL_ACCESS).unwrap(), named(7));
    fs.unmount().unwrap();
}

#[test]
fn a_default_acl_is_inherited_instead_of_the_umask() {
    use crate::acl::*;
    use crate::xattr::{ACL_ACCESS, ACL_DEFAULT};
    let dev = device(8);
    let fs = fresh(&dev);
    fs.enable_acls();
    let d = super::tests::mkdir(&fs, ROOT, "d");
    fs.setxattr(d, ACL_DEFAULT, &named(7), 0, ME, &[]).unwrap();
    let file = super::names::NewNode {
        mode: 0o666,
        umask: 0o077,
        ..super::tests::node(Kind::File)
    };
    let f = fs.make(d, b"f", file, ME).unwrap();
    assert_eq!(
        f.inode.perm, 0o660,
        "the default ACL, not the umask, and the mode"
    );
    let masked = acl(&[
        (USER_OBJ, 6, NONE),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NONE),
        (MASK, 6, NONE),
        (OTHER, 0, NONE),
    ]);
    assert_eq!(fs.getxattr(f.ino, ACL_ACCESS).unwrap(), masked);
    assert_eq!(e(fs.getxattr(f.ino, ACL_DEFAULT)), libc::ENODATA);
    let sub = fs
        .make(d, b"sub", super::tests::node(Kind::Dir), ME)
        .unwrap();
    assert_eq!(fs.getxattr(sub.ino, ACL_DEFAULT).unwrap(), named(7));
    assert_eq!(sub.inode.perm, 0o750, "mode 0755 masked by the default ACL");
    let plain = super::tests::mkdir(&fs, ROOT, "plain");
    let g = fs.make(plain, b"g", file, ME).unwrap();
    assert_eq!(g.inode.perm, 0o600, "no default ACL: the umask");
    fs.unmount().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    fs.enable_acls();
    assert_eq!(fs.lookup(ROOT, b"d").unwrap().ino, d);
    assert_eq!(fs.lookup(d, b"sub").unwrap().ino, sub.ino);
    assert_eq!(fs.getxattr(sub.ino, ACL_DEFAULT).unwrap(), named(7));
    fs.unmount().unwrap();
}

/// An inode that lost its name to damage (its link count says it has one) keeps its spill
/// file: the check does not call it stray, and mount links the inode into /lost+found with
/// its attributes.
#[test]
fn an_unnamed_inode_keeps_its_spill_file() {
    let dev = device(16);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"x");
    fs.setxattr(f, b"user.big", &vec![9; 5000], 0, ME, &[])
        .unwrap();
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let end = vol.size(ROOT).unwrap();
    scan::append(&vol, ROOT, end, &crate::dir::record(b"f", None)).unwrap();
    vol.sync().unwrap();
    let seen = check(&vol).unwrap();
    assert_eq!(seen.unnamed, vec![f], "{seen:?}");
    assert!(seen.stray_xattrs.is_empty(), "{seen:?}");
    super::tests::drop_as_crash(vol); // the mount after a crash reads every inode
    let (fs, r) = remount(&dev);
    assert_eq!(r.repaired.lost_found, vec![f], "{r:?}");
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), vec![9; 5000]);
    fs.unmount().unwrap();
}
