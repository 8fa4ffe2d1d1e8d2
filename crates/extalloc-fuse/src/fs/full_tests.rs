//! A full device through the file system, as `scripts/bench/full-volume.sh` drives a mount: one
//! directory filled with 4 KiB files to the first `ENOSPC` (a tenth of them fsync'd),
//! every other file removed, then creates, overwrites and unlinks to `ENOSPC` again, and
//! a crash. The promises: `ENOSPC` reaches a data write (or a create) first; no `fsync`,
//! unlink or sync fails for want of room before it; after the crash the volume mounts
//! and every file fsync'd and not changed since reads back.

use super::data::SetAttr;
use super::tests::{device, fresh, node, remount, ME};
use super::*;
use extalloc::disk::device::Crash;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

const FILE: usize = 4096;

/// What the workload saw: the first failure of each kind, with the blocks in use then.
#[derive(Default)]
struct Seen {
    /// Files fsync'd and not changed since: name -> content.
    synced: HashMap<Vec<u8>, Vec<u8>>,
    names: Vec<Vec<u8>>,
    next: u64,
}

/// Blocks in use as `df` counts them (free counts blocks waiting for a commit).
fn used(fs: &Fs) -> f64 {
    let s = fs.statfs().unwrap();
    100.0 * (1.0 - s.free as f64 / s.blocks as f64)
}

/// Writes `name` in `dir` whole (made, or truncated), a tenth of the time fsync'd, then
/// closed. `Err` is the errno of the create, truncate or write that failed (the caller's
/// `ENOSPC`); an fsync, release or unlink failure panics: none may fail for want of room.
fn put(fs: &Fs, dir: u64, name: &[u8], rng: &mut impl Rng, seen: &mut Seen) -> Result<(), i32> {
    seen.synced.remove(name);
    // The kernel keeps a reference to each inode it made or looked up while it caches it
    // (all of them here: the files are few), and gives it back (forget) once the name is
    // gone: a lookup's reference beyond the one held goes back at once.
    let ino = match fs.lookup(dir, name) {
        Ok(a) => {
            fs.forget(a.ino, 1);
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            fs.setattr(a.ino, set, ME).map_err(|e| e.0)?;
            a.ino
        }
        Err(_) => {
            fs.make(dir, name, node(Kind::File), ME)
                .map_err(|e| e.0)?
                .ino
        }
    };
    fs.open(ino, libc::O_WRONLY).unwrap();
    let body: Vec<u8> = (0..FILE).map(|_| rng.gen()).collect();
    let wrote = fs.write(ino, 0, &body, false);
    let result = match wrote {
        Err(e) => Err(e.0),
        Ok(n) => {
            assert_eq!(n as usize, FILE);
            if rng.gen_bool(0.1) {
                let used = used(fs);
                fs.fsync(ino)
                    .unwrap_or_else(|e| panic!("an fsync failed at {used:.2} % used: {e:?}"));
                seen.synced.insert(name.to_vec(), body);
            }
            Ok(())
        }
    };
    fs.release(ino).unwrap();
    assert!(
        result.is_err() || fs.getattr(ino).is_ok_and(|a| a.size == FILE as u64),
        "a file written whole"
    );
    result
}

/// Unlinks `name` from `dir`; the kernel then lets the inode go (its reference back).
fn unlink(fs: &Fs, dir: u64, name: &[u8], seen: &mut Seen) {
    let used = used(fs);
    let ino = fs.lookup(dir, name).unwrap().ino;
    fs.unlink(dir, name)
        .unwrap_or_else(|e| panic!("an unlink failed at {used:.2} % used: {e:?}"));
    fs.forget(ino, 2);
    seen.synced.remove(name);
    assert!(fs.lookup(dir, name).is_err(), "the name is gone");
}

/// Fills to the first failed write; returns the use then.
fn fill(fs: &Fs, dir: u64, rng: &mut impl Rng, seen: &mut Seen) -> f64 {
    loop {
        let name = format!("f{}", seen.next).into_bytes();
        seen.next += 1;
        match put(fs, dir, &name, rng, seen) {
            Ok(()) => seen.names.push(name),
            Err(e) => {
                assert_eq!(e, libc::ENOSPC, "the fill's first failure");
                let at = used(fs);
                if let Ok(a) = fs.lookup(dir, &name) {
                    // Made, its write refused: the name goes (the make's reference
                    // stays for `unlink`).
                    fs.forget(a.ino, 1);
                    unlink(fs, dir, &name, seen);
                }
                return at;
            }
        }
    }
}

#[test]
fn a_full_device_of_small_files_fails_writes_first_and_keeps_what_was_synced() {
    for seed in 0..2u64 {
        let dev = device(seed);
        let fs = fresh(&dev);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = fs.make(ROOT, b"c", node(Kind::Dir), ME).unwrap().ino;
        let mut seen = Seen::default();
        let filled = fill(&fs, dir, &mut rng, &mut seen);
        assert!(
            filled > 97.0,
            "seed {seed}: the fill stopped at {filled:.2} %"
        );
        let names = std::mem::take(&mut seen.names);
        for (i, name) in names.into_iter().enumerate() {
            match i % 2 {
                0 => unlink(&fs, dir, &name, &mut seen),
                _ => seen.names.push(name),
            }
        }
        let churned = loop {
            let r: f64 = rng.gen();
            let step = if r < 0.45 || seen.names.is_empty() {
                let name = format!("f{}", seen.next).into_bytes();
                seen.next += 1;
                let made = put(&fs, dir, &name, &mut rng, &mut seen);
                if let Ok(a) = fs.lookup(dir, &name) {
                    fs.forget(a.ino, 1);
                    seen.names.push(name);
                }
                made
            } else if r < 0.7 {
                let name = seen.names[rng.gen_range(0..seen.names.len())].clone();
                put(&fs, dir, &name, &mut rng, &mut seen)
            } else {
                let name = seen.names.swap_remove(rng.gen_range(0..seen.names.len()));
                unlink(&fs, dir, &name, &mut seen);
                Ok(())
            };
            if let Err(e) = step {
                assert_eq!(e, libc::ENOSPC, "seed {seed}: the churn's first failure");
                break used(&fs);
            }
        };
        // The device is small (8,192 blocks, a 1/256 room of 64): 97 % leaves room for the
        // tree's share of the files changed since the last checkpoint.
        assert!(
            churned > 97.0,
            "seed {seed}: churn stopped at {churned:.2} %"
        );
        fs.sync().unwrap();
        // A crash on top of the sync: what was synced reads back.
        dev.fail_writes(true);
        drop(fs);
        dev.crash(Crash::DropAll).unwrap();
        let (fs, _) = remount(&dev);
        let dir = fs.lookup(ROOT, b"c").unwrap().ino;
        for (name, body) in &seen.synced {
            let ino = fs.lookup(dir, name).unwrap().ino;
            let back = fs.read(ino, 0, FILE as u32 + 1).unwrap();
            fs.forget(ino, 1);
            assert!(
                back == *body,
                "seed {seed}: {} reads back",
                String::from_utf8_lossy(name)
            );
        }
        eprintln!(
            "seed {seed}: fill to {filled:.2} %, churn to {churned:.2} %, {} files synced",
            seen.synced.len()
        );
        fs.unmount().unwrap();
    }
}

/// Once data writes get `ENOSPC`, creates get it too before they take the room kept for
/// metadata (`Volume::check_room`), and every name made can still be unlinked: an
/// unlink's records may use that room.
#[test]
fn creates_on_a_full_device_get_enospc_and_leave_room_for_unlinks() {
    let dev = device(7);
    let fs = fresh(&dev);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let dir = fs.make(ROOT, b"c", node(Kind::Dir), ME).unwrap().ino;
    let mut seen = Seen::default();
    fill(&fs, dir, &mut rng, &mut seen);
    let mut made = Vec::new();
    let refused = loop {
        let name = format!("empty-with-a-long-name-{:08}", made.len()).into_bytes();
        match fs.make(dir, &name, node(Kind::File), ME) {
            Ok(a) => made.push((name, a.ino)),
            Err(e) => break e,
        }
        assert!(made.len() < 1_000_000, "a create got ENOSPC at last");
    };
    assert_eq!(refused.0, libc::ENOSPC);
    // The fill's thousands of cached files are written back now: their entries grow and
    // their leaves split into blocks the room kept for them (`volume/delalloc.rs`). Before
    // cached files were counted, this sync failed with ENOSPC.
    fs.sync()
        .unwrap_or_else(|e| panic!("sync after {} creates: {e:?}", made.len()));
    // What is left beyond cached data's reservations is the room kept, less what the
    // checkpoints of the creates' own files took (a block here): no directory block of a
    // create came from it. Before creates checked the room, 1,553 of them left it empty.
    let v = fs.vol.volume();
    let have = v.store().allocatable_blocks() + v.store().allocator().pending_free_blocks();
    let beyond = have.saturating_sub(v.delalloc_reserved_blocks());
    assert!(
        beyond >= v.fixed_margin() / 2,
        "{beyond} blocks beyond cached data after {} creates",
        made.len()
    );
    for (name, ino) in &made {
        fs.unlink(dir, name)
            .unwrap_or_else(|e| panic!("unlinking {}: {e:?}", String::from_utf8_lossy(name)));
        fs.forget(*ino, 1);
    }
    eprintln!(
        "{} empty files made after the fill, {beyond} blocks left",
        made.len()
    );
}
