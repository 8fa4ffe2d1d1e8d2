//! What the file system says of space: `st_blocks` (blocks mapped and reserved, not the
//! size's) and `statfs` (a removed file's blocks free at once, and never more available
//! after an `rm` on a full volume than on a fresh one). The helpers are `tests.rs`'.

use super::tests::{device, fresh, node, put, remount, ME};
use super::*;

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

/// A removed file's blocks are free in statfs at once, with no commit (as ext4 counts
/// them), not at the next fsync or mount; a write that needs them gets them (the volume
/// commits the waiting frees when it finds no room).
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
    assert!(
        fs.volume().statfs().pending_blocks >= 2048,
        "statfs committed nothing: the frees still wait"
    );
    // A file as large as what statfs says is available (less a little for its map): it
    // needs the waiting blocks, and gets them.
    let g = put(&fs, ROOT, "g", b"");
    let bytes = (after.available - 64) * u64::from(after.block_size);
    fs.fallocate(g, 0, bytes, 0, ME).unwrap();
    fs.unmount().unwrap();
}

/// On a full volume a removed file's blocks come back to `df` less the room kept for
/// metadata, as after the commit: the room and cached data's reservations come off free
/// and waiting blocks together. Taken off the committed part alone (0 on a full volume),
/// `df` after `rm` showed the whole file available, more than the fresh volume offered.
#[test]
fn statfs_after_a_full_volumes_rm_shows_no_more_than_a_fresh_one() {
    let dev = device(10);
    let fs = fresh(&dev);
    let fresh_stat = fs.statfs().unwrap();
    let f = put(&fs, ROOT, "f", b"");
    let mut size = 0;
    let bs = u64::from(fresh_stat.block_size);
    while fs.fallocate(f, size, 64 * bs, 0, ME).is_ok() {
        size += 64 * bs;
    }
    fs.fsync(f).unwrap();
    assert!(fs.statfs().unwrap().available < 64, "{:?}", fs.statfs());
    fs.unlink(ROOT, b"f").unwrap();
    fs.forget(f, 1);
    let after = fs.statfs().unwrap();
    assert!(
        after.available <= fresh_stat.available && after.free <= fresh_stat.free,
        "fresh {fresh_stat:?}, after the rm {after:?}"
    );
    assert!(
        after.available + 64 >= fresh_stat.available,
        "the space came back: fresh {fresh_stat:?}, after the rm {after:?}"
    );
    fs.sync().unwrap();
    let committed = fs.statfs().unwrap();
    assert_eq!(
        committed.available, after.available,
        "the same after the commit"
    );
    fs.unmount().unwrap();
}

/// An unprivileged caller (uid 1000, [`Caller::privilege`]).
const USER: Caller = Caller {
    uid: 1000,
    gid: 1000,
};

/// A fresh volume on which [`USER`] wrote file `f` in pieces of 16 blocks until refused:
/// the refusal is `ENOSPC` where `statfs`'s available figure ran out, with root's share
/// still free, and only then is whose write it is asked for (`Fs::room_for_anyone`).
struct FilledByUser {
    fs: Fs,
    f: u64,
    /// The file's size: where the next piece goes.
    size: u64,
    /// Root's share, in blocks.
    share: u64,
    piece: Vec<u8>,
}

fn filled_by_user(seed: u64) -> FilledByUser {
    let fs = fresh(&device(seed));
    let share = fs.vol.statfs().root_reserved_blocks;
    let bs = u64::from(fs.statfs().unwrap().block_size);
    assert!(share >= 64, "a share to write into: {share} blocks");
    let f = put(&fs, ROOT, "f", b"");
    let piece = vec![7u8; 16 * bs as usize];
    // Far from full the writer's ids are not asked for.
    assert!(fs.room_for_anyone(piece.len() as u64));
    let mut size = 0;
    let refused = loop {
        match fs.write_from(f, size, &piece, false, false, USER) {
            Ok(_) => size += piece.len() as u64,
            Err(e) => break e,
        }
    };
    assert_eq!(refused, Errno(libc::ENOSPC));
    assert!(
        !fs.room_for_anyone(piece.len() as u64),
        "near the share, whose write it is matters"
    );
    let st = fs.statfs().unwrap();
    assert!(
        st.available < 16 && st.free >= share,
        "the user stopped where available ran out, the share free: {st:?}"
    );
    FilledByUser {
        fs,
        f,
        size,
        share,
        piece,
    }
}

/// Root's share of the device, as ext4's reserved blocks: once a user's writes stop
/// where `statfs`'s available figure runs out, the user's allocating `fallocate` is
/// refused too; an overwrite of the user's own mapped blocks still works, a write back
/// from the kernel's cache (no writer) is not stopped there, and root's writes go on into
/// the share until the device itself is full.
#[test]
fn only_root_writes_into_its_share_of_the_device() {
    let FilledByUser {
        fs,
        f,
        mut size,
        share,
        piece,
    } = filled_by_user(12);
    let bs = u64::from(fs.statfs().unwrap().block_size);
    assert_eq!(
        fs.fallocate(f, size, 16 * bs, 0, USER),
        Err(Errno(libc::ENOSPC)),
        "an unprivileged fallocate"
    );
    assert_eq!(
        fs.write_from(f, 0, &piece, false, false, USER),
        Ok((piece.len() as u32, false)),
        "an overwrite takes no block"
    );
    assert!(
        fs.write_from(f, size, &piece, false, true, USER).is_ok(),
        "a write back from the kernel's cache"
    );
    size += piece.len() as u64;
    let mut root_wrote = 0;
    while fs.write_from(f, size, &piece, false, false, ME).is_ok() {
        size += piece.len() as u64;
        root_wrote += 16;
    }
    // The share less the cached write's piece, in whole pieces.
    assert!(
        root_wrote + 32 >= share,
        "root wrote {root_wrote} blocks into a share of {share}"
    );
    fs.fsync(f).unwrap();
    assert_eq!(fs.read(f, 0, 4).unwrap(), [7; 4]);
    fs.unmount().unwrap();
}

/// Near root's share, a user's create or link whose directory needs a block, and a
/// user's extended attribute set that spills past the inode's blob, are refused with
/// `ENOSPC`; root's are accepted.
#[test]
fn only_root_names_and_spills_into_its_share_of_the_device() {
    let FilledByUser { fs, f, .. } = filled_by_user(13);
    let d = fs.make(ROOT, b"d", node(Kind::Dir), ME).unwrap().ino;
    assert_eq!(
        fs.make(d, b"by-user", node(Kind::File), USER).map(|_| ()),
        Err(Errno(libc::ENOSPC)),
        "an unprivileged create that grows its directory"
    );
    assert_eq!(
        fs.link(f, d, b"link-by-user", USER).map(|_| ()),
        Err(Errno(libc::ENOSPC)),
        "an unprivileged link that grows its directory"
    );
    fs.make(d, b"by-root", node(Kind::File), ME).unwrap();
    fs.link(f, d, b"link-by-root", ME).unwrap();
    let big = vec![5u8; 64 << 10];
    assert_eq!(
        fs.setxattr(f, b"user.big", &big, 0, USER, &[]),
        Err(Errno(libc::ENOSPC)),
        "an unprivileged spilled set"
    );
    fs.setxattr(f, b"user.big", &big, 0, ME, &[]).unwrap();
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
    fs.unmount().unwrap();
}
