//! `O_TMPFILE` and birth-time tests on a memory device: a tmpfile written, read, linked in
//! and found again after a remount or a crash; one never linked removed at its last close
//! and forget, or by the mount after a crash; `link` still refusing a file unlinked while open; what a
//! tmpfile inherits from its directory as `make` gives it; and birth times kept across
//! remounts and changes, absent (and the old encoding kept) on an inode of an old volume.

use super::data::SetAttr;
use super::tests::{crash, device, fresh, mkdir, node, put, remount, ME};
use super::*;
use crate::inode::Time;
use crate::xattr::{ACL_ACCESS, ACL_DEFAULT};
use extalloc::disk::device::{FaultDevice, MemDevice};
use extalloc::Policy;
use std::sync::Arc;

fn e<T: std::fmt::Debug>(r: FsResult<T>) -> i32 {
    r.unwrap_err().0
}

/// Is there a volume file `ino` (published or pending: a tmpfile is pending until named)?
fn on_volume(fs: &Fs, ino: u64) -> bool {
    fs.volume().volume().size(ino).is_ok()
}

fn btime(fs: &Fs, ino: u64) -> Option<Time> {
    fs.getattr(ino).unwrap().inode.btime
}

/// Every volume check and the namespace check are clean (after an unmount).
fn assert_clean(dev: &Arc<FaultDevice<MemDevice>>) {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean());
    let r = check(&vol).unwrap();
    assert!(r.clean(), "{r:?}");
    vol.close().unwrap();
}

#[test]
fn a_tmpfile_is_written_linked_in_and_kept_with_its_birth_time() {
    let dev = device(41);
    let fs = fresh(&dev);
    let (attr, _fh) = fs.tmpfile(ROOT, 0o644, 0o022, libc::O_RDWR, ME).unwrap();
    let t = attr.ino;
    assert_eq!((attr.inode.nlink, attr.inode.kind), (0, Kind::File));
    assert_eq!(attr.inode.perm, 0o644);
    let born = attr.inode.btime.expect("a new inode has a birth time");
    assert!(
        fs.ns.read().dir(ROOT).unwrap().entries.is_empty(),
        "no name"
    );
    fs.write(t, 0, b"made with no name", false).unwrap();
    assert_eq!(fs.read(t, 0, 100).unwrap(), b"made with no name");
    assert_eq!(fs.getattr(t).unwrap().inode.nlink, 0);
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    fs.setattr(t, chmod, ME).unwrap();
    fs.write(t, 4, b"-", false).unwrap();
    assert_eq!(btime(&fs, t), Some(born), "a write or setattr keeps it");
    let linked = fs.link(t, ROOT, b"named", Caller::ROOT).unwrap();
    assert_eq!((linked.ino, linked.inode.nlink), (t, 1));
    assert_eq!(fs.lookup(ROOT, b"named").unwrap().ino, t);
    fs.set_flags(t, flags::NODUMP).unwrap();
    fs.rename(ROOT, b"named", ROOT, b"kept", 0, ME).unwrap();
    assert_eq!(btime(&fs, t), Some(born), "chattr and rename keep it");
    fs.release(t).unwrap();
    fs.forget(t, 3);
    assert!(on_volume(&fs, t), "named: kept after its last close");
    fs.unmount().unwrap();
    assert_clean(&dev);
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    let a = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!((a.ino, a.inode.nlink, a.inode.perm), (t, 1, 0o600));
    assert_eq!(a.inode.btime, Some(born), "kept on the volume");
    assert_eq!(fs.read(t, 0, 100).unwrap(), b"made-with no name");
    // Linked and unlinked again, it is a file as any other: no second first name.
    fs.open(t, libc::O_RDWR).unwrap();
    fs.unlink(ROOT, b"kept").unwrap();
    assert_eq!(e(fs.link(t, ROOT, b"again", Caller::ROOT)), libc::ENOENT);
    fs.release(t).unwrap();
    fs.forget(t, 1);
    assert!(!on_volume(&fs, t));
    fs.unmount().unwrap();
    assert_clean(&dev);
}

#[test]
fn a_tmpfile_never_linked_goes_at_its_last_close_and_forget() {
    let dev = device(42);
    let fs = fresh(&dev);
    let before = (fs.inodes(), fs.statfs().unwrap().files);
    let (attr, _fh) = fs.tmpfile(ROOT, 0o600, 0, libc::O_RDWR, ME).unwrap();
    let t = attr.ino;
    fs.write(t, 0, &[7; 10_000], false).unwrap();
    assert_eq!(
        fs.statfs().unwrap().files,
        before.1 + 1,
        "counted while open"
    );
    fs.release(t).unwrap();
    assert!(on_volume(&fs, t), "the kernel still knows it");
    fs.forget(t, 1);
    assert!(!on_volume(&fs, t), "closed and forgotten: gone");
    assert_eq!((fs.inodes(), fs.statfs().unwrap().files), before);
    // Forgotten first, then closed: gone too.
    let u = fs.tmpfile(ROOT, 0o600, 0, libc::O_RDWR, ME).unwrap().0.ino;
    fs.forget(u, 1);
    assert!(on_volume(&fs, u), "still open");
    fs.release(u).unwrap();
    assert!(!on_volume(&fs, u));
    // One left open at unmount goes with it.
    let w = fs
        .tmpfile(ROOT, 0o600, 0, libc::O_WRONLY, ME)
        .unwrap()
        .0
        .ino;
    fs.write(w, 0, b"x", false).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    assert_eq!(fs.inodes(), before.0);
    fs.unmount().unwrap();
}

#[test]
fn a_tmpfile_open_at_a_crash_is_pending_and_the_open_removes_it() {
    for power_cut in [false, true] {
        let dev = device(43);
        let fs = fresh(&dev);
        let kept = put(&fs, ROOT, "kept", b"named");
        let t = fs.tmpfile(ROOT, 0o644, 0, libc::O_RDWR, ME).unwrap().0.ino;
        fs.write(t, 0, &[1; 20_000], false).unwrap();
        // Another, linked in before the crash: its name and data stay.
        let l = fs.tmpfile(ROOT, 0o644, 0, libc::O_RDWR, ME).unwrap().0.ino;
        fs.write(l, 0, b"linked before", false).unwrap();
        fs.link(l, ROOT, b"linked", Caller::ROOT).unwrap();
        fs.fsync(l).unwrap();
        fs.fsync(t).unwrap();
        if power_cut {
            crash(fs, &dev);
        } else {
            drop(fs); // the daemon dies; the device keeps what it was sent
        }
        // Pending since it was made (`Fs::retract`): the volume's open removes it, and
        // the check finds nothing; the mount reads what a clean close leaves.
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(vol.size(t).is_err(), "the open removed the pending tmpfile");
        let found = check(&vol).unwrap();
        assert!(found.clean(), "{found:?}");
        vol.close().unwrap();
        let (fs, r) = remount(&dev);
        assert!(r.crash_covered && !r.scanned, "{r:?}");
        assert!(!on_volume(&fs, t));
        assert_eq!(fs.lookup(ROOT, b"kept").unwrap().ino, kept);
        let a = fs.lookup(ROOT, b"linked").unwrap();
        assert_eq!((a.ino, a.inode.nlink), (l, 1));
        assert_eq!(fs.read(l, 0, 100).unwrap(), b"linked before");
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn link_still_refuses_a_file_unlinked_while_open() {
    let dev = device(44);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"data");
    fs.open(f, libc::O_RDWR).unwrap();
    fs.unlink(ROOT, b"f").unwrap();
    assert_eq!(e(fs.link(f, ROOT, b"back", Caller::ROOT)), libc::ENOENT);
    fs.release(f).unwrap();
    fs.forget(f, 1);
    assert!(!on_volume(&fs, f));
    fs.unmount().unwrap();
}

#[test]
fn a_tmpfile_needs_a_live_directory_that_takes_names() {
    let dev = device(45);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"");
    let d = mkdir(&fs, ROOT, "d");
    let before = fs.inodes();
    assert_eq!(e(fs.tmpfile(f, 0o644, 0, libc::O_RDWR, ME)), libc::ENOTDIR);
    assert_eq!(e(fs.tmpfile(999, 0o644, 0, libc::O_RDWR, ME)), libc::ENOENT);
    fs.set_flags(d, flags::IMMUTABLE).unwrap();
    assert_eq!(e(fs.tmpfile(d, 0o644, 0, libc::O_RDWR, ME)), libc::EPERM);
    fs.set_flags(d, 0).unwrap();
    fs.rmdir(ROOT, b"d").unwrap();
    assert_eq!(e(fs.tmpfile(d, 0o644, 0, libc::O_RDWR, ME)), libc::ENOENT);
    assert_eq!(fs.inodes(), before, "nothing made");
    // Nor may a tmpfile be linked into a removed directory.
    let t = fs.tmpfile(ROOT, 0o644, 0, libc::O_RDWR, ME).unwrap().0.ino;
    assert_eq!(e(fs.link(t, d, b"x", Caller::ROOT)), libc::ENOENT);
    fs.forget(d, 1);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

#[test]
fn a_tmpfile_inherits_group_flags_and_acls_as_a_made_file() {
    use crate::acl::*;
    let dev = device(46);
    let fs = fresh(&dev);
    fs.enable_acls();
    let d = mkdir(&fs, ROOT, "d");
    let set = SetAttr {
        mode: Some(0o2777),
        gid: Some(50),
        ..Default::default()
    };
    fs.setattr(d, set, ME).unwrap();
    fs.set_flags(d, flags::SYNC | flags::NODUMP | flags::NOATIME)
        .unwrap();
    let none = u32::MAX;
    let default = Acl {
        entries: vec![
            (USER_OBJ, 7, none),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, none),
            (MASK, 7, none),
            (OTHER, 0, none),
        ],
    };
    fs.setxattr(d, ACL_DEFAULT, &default.encode(), 0, ME, &[])
        .unwrap();
    let who = Caller {
        uid: 1000,
        gid: 1000,
    };
    let file = super::names::NewNode {
        mode: 0o666,
        umask: 0o077,
        ..node(Kind::File)
    };
    let made = fs.make(d, b"made", file, who).unwrap();
    let (tmp, _) = fs.tmpfile(d, 0o666, 0o077, libc::O_RDWR, who).unwrap();
    assert_eq!(tmp.inode.gid, 50, "the set-group-id directory's group");
    assert_eq!(tmp.inode.uid, 1000);
    assert_eq!(tmp.inode.perm, 0o660, "the default ACL, not the umask");
    let key = |i: &crate::inode::Inode| (i.uid, i.gid, i.perm, i.flags, i.kind);
    assert_eq!(
        key(&tmp.inode),
        key(&made.inode),
        "as make gives a file there"
    );
    assert_eq!(
        tmp.inode.flags,
        flags::SYNC | flags::NODUMP | flags::NOATIME
    );
    let access = fs.getxattr(tmp.ino, ACL_ACCESS).unwrap();
    assert_eq!(access, fs.getxattr(made.ino, ACL_ACCESS).unwrap());
    assert_eq!(
        fs.getxattr(tmp.ino, ACL_DEFAULT).unwrap_err().0,
        libc::ENODATA
    );
    fs.link(tmp.ino, d, b"tmp", Caller::ROOT).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    fs.enable_acls();
    assert_eq!(fs.lookup(ROOT, b"d").unwrap().ino, d);
    let t = fs.lookup(d, b"tmp").unwrap();
    assert_eq!(key(&t.inode), key(&made.inode));
    assert_eq!(fs.getxattr(t.ino, ACL_ACCESS).unwrap(), access);
    fs.unmount().unwrap();
}

#[test]
fn an_inode_of_an_old_volume_has_no_birth_time_and_keeps_its_version() {
    let dev = device(47);
    let fs = fresh(&dev);
    let f = put(&fs, ROOT, "f", b"old");
    let g = put(&fs, ROOT, "g", b"new");
    fs.setxattr(g, b"user.k", b"v", 0, ME, &[]).unwrap();
    fs.unmount().unwrap();
    // Rewrite f as a volume made before birth times holds it: version 1.
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let mut old = crate::inode::Inode::decode(&vol.attr(f).unwrap()).unwrap();
    old.btime = None;
    vol.set_attr(f, &old.encode()).unwrap();
    let blob = |vol: &Volume, ino| vol.attr(ino).unwrap();
    assert_eq!((blob(&vol, f)[4], blob(&vol, f).len()), (1, 64));
    assert_eq!(blob(&vol, g)[4], 4, "a new inode with a tail");
    vol.close().unwrap();
    let (fs, r) = remount(&dev);
    assert!(r.repaired.clean(), "{r:?}");
    assert_eq!(btime(&fs, f), None);
    assert!(btime(&fs, g).is_some());
    let chmod = SetAttr {
        mode: Some(0o640),
        ..Default::default()
    };
    fs.setattr(f, chmod, ME).unwrap();
    assert_eq!(
        fs.volume().volume().attr(f).unwrap()[4],
        1,
        "still version 1"
    );
    fs.setxattr(f, b"user.k", b"v", 0, ME, &[]).unwrap();
    assert_eq!(fs.volume().volume().attr(f).unwrap()[4], 2, "version 2");
    fs.link(f, ROOT, b"f2", Caller::ROOT).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
    let (fs, _) = remount(&dev);
    let a = fs.getattr(f).unwrap().inode;
    assert_eq!((a.btime, a.perm, a.nlink), (None, 0o640, 2));
    assert_eq!(fs.getxattr(f, b"user.k").unwrap(), b"v");
    fs.unmount().unwrap();
}
