//! The direct-write rule and the latch of `headroom.rs` through the file system: opens
//! for writing go direct only near full, and a write back that finds no room refuses its
//! writer's next cached write.

use super::data::SetAttr;
use super::tests::{device, fresh, node, ME};
use super::*;
use std::sync::atomic::Ordering::Relaxed;

fn truncate(fs: &Fs, ino: u64) {
    let set = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    fs.setattr(ino, set, ME).unwrap();
}

/// Writes `ino` from offset 0 in 256 KiB pieces (as write backs from the kernel's
/// cache with `from_cache`) until one fails, and returns that error.
fn fill(fs: &Fs, ino: u64, from_cache: bool) -> Errno {
    let piece = vec![0x5a_u8; 256 << 10];
    let mut at = 0;
    loop {
        match fs.write_from(ino, at, &piece, false, from_cache, ME) {
            Ok((n, _)) => at += u64::from(n),
            Err(e) => return e,
        }
        assert!(at < 1 << 30, "a 32 MiB device took 1 GiB");
    }
}

#[test]
fn opens_for_writing_go_direct_only_near_full_and_when_the_kernel_maps_them() {
    let dev = device(3);
    let fs = fresh(&dev);
    let f = fs.make(ROOT, b"f", node(Kind::File), ME).unwrap().ino;
    let d = fs.make(ROOT, b"d", node(Kind::Dir), ME).unwrap().ino;
    let room = fs.room_blocks();
    fs.headroom().set_margin_blocks(room + 1);
    assert!(
        !fs.writes_direct(f, libc::O_WRONLY),
        "not before the kernel maps them"
    );
    fs.headroom().allow_direct();
    assert!(fs.writes_direct(f, libc::O_WRONLY) && fs.writes_direct(f, libc::O_RDWR));
    assert!(!fs.writes_direct(f, libc::O_RDONLY), "reads keep the cache");
    assert!(!fs.writes_direct(d, libc::O_WRONLY), "only regular files");
    // A margin of half the room: writing three quarters of it crosses it, and a
    // truncate brings it back (freed blocks count before the commit).
    fs.headroom().set_margin_blocks(room / 2);
    assert!(
        !fs.writes_direct(f, libc::O_WRONLY),
        "{room} blocks of room"
    );
    fs.open(f, libc::O_WRONLY).unwrap();
    let piece = vec![7u8; 4096 * 64];
    let mut at = 0;
    while fs.room_blocks() >= room / 4 {
        fs.write(f, at, &piece, false).unwrap();
        at += piece.len() as u64;
    }
    assert!(
        fs.writes_direct(f, libc::O_WRONLY),
        "{} blocks left",
        fs.room_blocks()
    );
    assert!(!fs.writes_direct(f, libc::O_RDONLY));
    truncate(&fs, f);
    assert!(
        !fs.writes_direct(f, libc::O_WRONLY),
        "{} blocks left",
        fs.room_blocks()
    );
    fs.release(f).unwrap();
}

#[test]
fn a_write_back_that_finds_no_room_refuses_its_writers_next_cached_write() {
    let dev = device(4);
    let fs = fresh(&dev);
    fs.headroom().set_margin_blocks(64);
    let f = fs.make(ROOT, b"f", node(Kind::File), ME).unwrap().ino;
    let g = fs.make(ROOT, b"g", node(Kind::File), ME).unwrap().ino;
    let (w, r) = (
        fs.open(f, libc::O_WRONLY).unwrap(),
        fs.open(f, libc::O_RDONLY).unwrap(),
    );
    let gw = fs.open(g, libc::O_RDWR).unwrap();
    // A direct write's ENOSPC is the call's own: nothing is marked.
    assert_eq!(fill(&fs, g, false).0, libc::ENOSPC);
    assert!(
        fs.getattr_through(g, Some(gw)).is_ok(),
        "a direct writer is not latched"
    );
    truncate(&fs, g);
    // A write back from the cache that finds no room latches f's writers, not its
    // readers nor a plain stat, nor another file's writer.
    assert_eq!(fill(&fs, f, true).0, libc::ENOSPC);
    let refused = fs.getattr_through(f, Some(w)).unwrap_err();
    assert_eq!(refused.0, libc::ENOSPC);
    assert_eq!(
        fs.getattr_through(f, Some(w)).unwrap_err().0,
        libc::ENOSPC,
        "latched"
    );
    assert!(fs.getattr_through(f, Some(r)).is_ok() && fs.getattr_through(f, None).is_ok());
    assert!(fs.getattr_through(g, Some(gw)).is_ok());
    // Room back above the margin: the question is answered and the mark goes.
    truncate(&fs, f);
    assert!(fs.getattr_through(f, Some(w)).is_ok());
    assert!(!fs.headroom.is_marked(f));
    // Marked again, the last close takes the mark off (not the first).
    assert_eq!(fill(&fs, f, true).0, libc::ENOSPC);
    assert!(fs.headroom.is_marked(f));
    fs.release(f).unwrap();
    assert!(fs.headroom.is_marked(f), "one open is left");
    fs.release(f).unwrap();
    assert!(!fs.headroom.is_marked(f), "the last close");
    // A write back after the last close (the kernel's own, late) marks a file no handle
    // can ask about: the mark goes when the kernel forgets the inode.
    assert_eq!(fill(&fs, f, true).0, libc::ENOSPC);
    assert!(fs.headroom.is_marked(f));
    fs.forget(f, 1);
    assert!(!fs.headroom.is_marked(f), "forgotten");
    fs.release(g).unwrap();
    assert_eq!(fs.headroom.marked_count.load(Relaxed), 0);
}

/// What an open and a create are answered with (`replies::open_flags`): the cache while
/// there is room, direct for writing near full, direct for a file a synchronous
/// directory made synchronous (`chattr +S` is inherited) however much room there is.
#[test]
fn opens_and_creates_are_answered_direct_near_full_or_synchronous() {
    use crate::replies::open_flags;
    use extalloc_fuse_transport::FOPEN_DIRECT_IO;
    let dev = device(5);
    let fs = fresh(&dev);
    fs.headroom().allow_direct();
    let f = fs.make(ROOT, b"f", node(Kind::File), ME).unwrap().ino;
    let room = fs.room_blocks();
    fs.headroom().set_margin_blocks(room / 2);
    assert_eq!(
        open_flags(&fs, f, libc::O_WRONLY) & FOPEN_DIRECT_IO,
        0,
        "room to spare"
    );
    fs.headroom().set_margin_blocks(room + 1);
    assert_ne!(
        open_flags(&fs, f, libc::O_WRONLY) & FOPEN_DIRECT_IO,
        0,
        "near full"
    );
    assert_eq!(
        open_flags(&fs, f, libc::O_RDONLY) & FOPEN_DIRECT_IO,
        0,
        "a read"
    );
    fs.headroom().set_margin_blocks(0);
    let d = fs.make(ROOT, b"s", node(Kind::Dir), ME).unwrap().ino;
    fs.set_flags(d, flags::SYNC).unwrap();
    let (a, _) = fs.create(d, b"new", 0o644, 0, libc::O_WRONLY, ME).unwrap();
    assert_ne!(
        open_flags(&fs, a.ino, libc::O_WRONLY) & FOPEN_DIRECT_IO,
        0,
        "inherited +S"
    );
    fs.release(a.ino).unwrap();
}
