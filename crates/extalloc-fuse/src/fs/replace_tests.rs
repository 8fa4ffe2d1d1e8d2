//! Replacing a file's content the way editors and databases do, then a crash: old or new
//! content, never an empty file (ext4's `auto_da_alloc`; `docs/mount.md`, crash table).
//! Each test commits the namespace change while the new data is still cached (a commit
//! another caller's fsync or the background commit makes at any moment), then crashes.

use super::data::SetAttr;
use super::tests::{device, find, fresh, put, remount, ME};
use super::*;
use extalloc::disk::device::Crash;

/// Write `cfg.tmp`, close without fsync, rename it over `cfg` (fsynced before): a commit
/// that carries the rename carries the new data, so after a crash `cfg` reads old or new.
#[test]
fn a_rename_over_a_file_never_leaves_it_empty() {
    for commit_rename in [false, true] {
        let dev = device(31);
        let fs = fresh(&dev);
        let old = vec![b'o'; 10_000];
        let new = vec![b'n'; 12_345];
        let cfg = put(&fs, ROOT, "cfg", &old);
        fs.fsync(cfg).unwrap();
        let tmp = put(&fs, ROOT, "cfg.tmp", &new);
        fs.open(tmp, libc::O_WRONLY).unwrap();
        fs.release(tmp).unwrap();
        fs.rename(ROOT, b"cfg.tmp", ROOT, b"cfg", 0, ME).unwrap();
        if commit_rename {
            // Commits what is logged, writing no cached data back.
            fs.vol.volume().sync().unwrap();
        }
        drop(fs);
        dev.crash(Crash::DropAll).unwrap();
        let (fs, _) = remount(&dev);
        let ino = find(&fs, "cfg").unwrap();
        let got = fs.read(ino, 0, 1 << 20).unwrap();
        let want = if commit_rename { &new } else { &old };
        assert_eq!(got.len(), want.len(), "committed rename {commit_rename}");
        assert!(
            &got == want,
            "committed rename {commit_rename}: foreign bytes"
        );
    }
}

/// Truncate to zero, rewrite, close: the last close writes the new data back, so a commit
/// after it carries data and truncate together.
#[test]
fn a_truncate_and_rewrite_never_leaves_an_empty_file() {
    let dev = device(32);
    let fs = fresh(&dev);
    let old = vec![b'o'; 20_000];
    let new = vec![b'n'; 7_000];
    let f = put(&fs, ROOT, "db", &old);
    fs.fsync(f).unwrap();
    fs.open(f, libc::O_WRONLY).unwrap();
    let size0 = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    fs.setattr(f, size0, ME).unwrap();
    fs.write(f, 0, &new, false).unwrap();
    fs.release(f).unwrap();
    fs.vol.volume().sync().unwrap();
    drop(fs);
    dev.crash(Crash::DropAll).unwrap();
    let (fs, _) = remount(&dev);
    let got = fs.read(find(&fs, "db").unwrap(), 0, 1 << 20).unwrap();
    assert_eq!(got, new);
}

/// A database's rollback journal: written, fsync'd, unlinked, and the unlink is the
/// transaction's commit point. It is committed before its reply, so a crash right after it
/// (the daemon killed before the directory fsync the database sends next) never brings the
/// journal back; a file whose last fsync is older than the window, or that was never
/// fsync'd, is unlinked lazily as before (here: back after the crash).
#[test]
fn an_unlink_right_after_an_fsync_is_durable_at_once() {
    for fsynced in [true, false] {
        let dev = device(31);
        let fs = fresh(&dev);
        let journal = put(&fs, ROOT, "db-journal", &[7u8; 25_136]);
        if fsynced {
            fs.fsync(journal).unwrap();
        } else {
            fs.sync().unwrap(); // durable, but no fsync of the file itself
        }
        fs.unlink(ROOT, b"db-journal").unwrap();
        drop(fs);
        dev.crash(Crash::DropAll).unwrap();
        let (fs, _) = remount(&dev);
        let back = find(&fs, "db-journal").is_ok();
        assert_eq!(
            back, !fsynced,
            "fsynced {fsynced}: the journal is back: {back}"
        );
        fs.unmount().unwrap();
    }
}
