//! Inodes read back when named (`ondemand.rs`): a mount keeps only the directories; a
//! lookup, a listing, an unlink, a rename or a call by number reads a node back whole
//! (attributes, link count, extended attributes inline or spilled), and the kernel's last
//! forget or the last close drops it again. Every change below runs the namespace's
//! invariant, which checks each inode not in memory against its blob.

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
    fs.link(a, ROOT, b"a2").unwrap();
    fs.setxattr(a, b"user.small", b"x", 0, ME, &[]).unwrap();
    let big = vec![7u8; 3000];
    fs.setxattr(b, b"user.big", &big, 0, ME, &[]).unwrap();
    let inodes = fs.inodes();
    fs.unmount().unwrap();

    let (fs, _) = remount(&dev);
    assert_eq!(fs.inodes(), inodes, "statfs counts inodes not in memory");
    assert!(in_memory(&fs, ROOT) && in_memory(&fs, d));
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
    assert_eq!(fs.inodes(), inodes - 1);
    assert!(!in_memory(&fs, a) && !in_memory(&fs, b));
    fs.check_namespace().unwrap();
    fs.unmount().unwrap();
    let (fs, report) = remount(&dev);
    assert!(report.repaired.clean(), "{:?}", report.repaired);
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
    let fh = fs.opendir(d).unwrap();
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
