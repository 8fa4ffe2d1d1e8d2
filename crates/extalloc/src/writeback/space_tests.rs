//! Buffered writes on a full device: no space is found at write time (not at writeback),
//! every reservation comes back, and small files fill the device past the file tree's
//! size, the room kept for metadata following the changed files (`volume/room.rs`).

use super::tests::{buffered, device, fill, reopen, BS};
use super::*;

/// Writes past the free space fail at write time; every reservation is written back or
/// released, and what was accepted is all there after a crash.
#[test]
fn no_space_is_found_at_write_time_and_every_reservation_returns() {
    let dev = device(4096, 3);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let mut accepted: Vec<(u64, u64)> = Vec::new();
    let mut files = Vec::new();
    let mut refused = 0;
    'fill: for i in 0..64u64 {
        let f = b.create(b"").unwrap();
        files.push(f);
        for k in 0..64u64 {
            match b.write(f, k * BS, &fill((i % 200) as u8 + 1, BS as usize)) {
                Ok(()) => accepted.push((f, k)),
                Err(Error::NoSpace { .. }) => {
                    refused += 1;
                    if refused > 3 {
                        break 'fill;
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(refused > 0, "the device filled");
    // What is cached holds its reservations (the rest was written back when a refusal
    // checkpointed: `Buffered::after_writeback`).
    let reserved = b.stats().reserved_blocks;
    let held: u64 = files.iter().map(|&f| b.cached_reserved_blocks(f)).sum();
    assert_eq!(reserved, held);
    assert!(b.stats().space_checkpoints > 0);
    b.sync().unwrap();
    assert_eq!(b.stats().reserved_blocks, 0);
    // One more file's data, then unlinked while cached: its reservation is released.
    let last = accepted.last().unwrap().0;
    b.unlink(last).unwrap();
    accepted.retain(|&(f, _)| f != last);
    b.sync().unwrap();
    let b = reopen(&dev, b, WritebackOptions::default());
    for &(f, k) in &accepted {
        assert_ne!(b.read(f, k * BS, 1).unwrap(), vec![0], "file {f} block {k}");
    }
    assert!(b.check().unwrap().clean());
    assert_eq!(b.stats().reserved_blocks, 0);
}

/// Many one-block files through the cache fill the device past what the file tree takes
/// (`volume/room.rs`: the room kept is the changed files' need, not the tree's size): the
/// first refusal comes with less free than the tree and the fixed part, every accepted file is written back
/// (the checkpoints made as the room shrank found their blocks), half of them unlinked
/// on the full device, and after a crash the rest read back and the check is clean.
#[test]
fn small_files_fill_the_device_past_the_trees_size() {
    let dev = device(4096, 5);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let mut accepted = Vec::new();
    let left = loop {
        let f = b.create(b"one block").unwrap();
        match b.write(f, 0, &fill((f % 200) as u8 + 1, BS as usize)) {
            Ok(()) => accepted.push(f),
            Err(Error::NoSpace { .. }) => {
                let s = b.statfs();
                b.unlink(f).unwrap();
                break s.free_blocks + s.pending_blocks;
            }
            Err(e) => panic!("{e}"),
        }
    };
    b.sync().unwrap();
    let vol = b.volume();
    let tree = vol.tree_blocks();
    assert!(accepted.len() > 3000, "{} files accepted", accepted.len());
    // The old room, the tree plus the fixed part (64 blocks on this device), would have
    // refused with at least that much left.
    assert!(
        left < tree + 64,
        "{left} blocks left at the refusal, the tree {tree}"
    );
    for &f in accepted.iter().step_by(2) {
        b.unlink(f).unwrap();
    }
    b.sync().unwrap();
    let b = reopen(&dev, b, WritebackOptions::default());
    for &f in accepted.iter().skip(1).step_by(2) {
        assert_eq!(
            b.read(f, 0, 1).unwrap(),
            vec![(f % 200) as u8 + 1],
            "file {f}"
        );
    }
    assert!(b.check().unwrap().clean());
}

/// Files holding cached data's reservations are counted in the room kept for metadata
/// until written back (`volume/delalloc.rs`): one-block files cached to the first refusal
/// with none synced, then one sync finds the blocks their entries' growth needs. Before
/// they were counted, the tree's growth at writeback took blocks promised to cached data
/// and that sync failed with `NoSpace`, every write having succeeded.
#[test]
fn a_sync_after_caching_to_the_first_refusal_finds_its_blocks() {
    let dev = device(8192, 11);
    let b = buffered(&dev, 2048, WritebackOptions::default());
    let vol = b.volume();
    let mut accepted = Vec::new();
    loop {
        let f = b.create(b"one block").unwrap();
        match b.write(f, 0, &fill((f % 200) as u8 + 1, BS as usize)) {
            Ok(()) => accepted.push(f),
            Err(Error::NoSpace { .. }) => {
                b.unlink(f).unwrap();
                break;
            }
            Err(e) => panic!("{e}"),
        }
        // Paired with the count the volume keeps: one per file whose cached data holds a
        // reservation.
        if accepted.len() % 512 == 0 {
            let holding = accepted
                .iter()
                .filter(|&&f| b.cached_reserved_blocks(f) > 0)
                .count() as u64;
            assert_eq!(vol.cached_files(), holding);
        }
    }
    assert!(accepted.len() > 6000, "{} files accepted", accepted.len());
    // The refusals on the way were met by writing the cache back, as ext4 forces a commit.
    assert!(b.stats().space_checkpoints > 0);
    b.sync()
        .unwrap_or_else(|e| panic!("sync after {} files: {e}", accepted.len()));
    assert_eq!(vol.cached_files(), 0);
    assert_eq!(b.stats().reserved_blocks, 0);
    let b = reopen(&dev, b, WritebackOptions::default());
    for &f in accepted.iter().step_by(97) {
        assert_eq!(
            b.read(f, 0, 1).unwrap(),
            vec![(f % 200) as u8 + 1],
            "file {f}"
        );
    }
    assert!(b.check().unwrap().clean());
}

/// [`Buffered::available_at_least`] answers as the whole figure does at every fill level,
/// with preallocations held (which its lock-free bound leaves out), and down to none left.
#[test]
fn available_at_least_answers_as_the_whole_figure() {
    let dev = device(4096, 3);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let agree = |b: &Buffered| {
        let avail = b.free_and_available_with_pending().1;
        for blocks in [0, 1, avail / 2, avail, avail + 1, avail + 4096] {
            assert_eq!(
                b.available_at_least(blocks),
                avail >= blocks,
                "{blocks} of {avail}"
            );
        }
        avail
    };
    let start = agree(&b);
    assert!(start > 0, "an empty device has room");
    let mut refused = false;
    for i in 0..64u64 {
        let f = b.create(b"").unwrap();
        for k in 0..64u64 {
            match b.write(f, k * BS, &fill((i % 200) as u8 + 1, BS as usize)) {
                Ok(()) => {}
                Err(Error::NoSpace { .. }) => refused = true,
                Err(e) => panic!("{e}"),
            }
        }
        agree(&b);
        if refused {
            break;
        }
    }
    assert!(refused, "the device filled");
    b.sync().unwrap();
    assert!(agree(&b) < start, "writes took room");
}

/// `size_and_blocks` counts cached data's reserved blocks before its writeback and the
/// mapped ones after, with the cached size, as `stat` shows them.
#[test]
fn size_and_blocks_counts_cached_data() {
    let dev = device(4096, 3);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let f = b.create(b"").unwrap();
    assert_eq!(b.size_and_blocks(f).unwrap(), (0, 0));
    b.write(f, 0, &fill(9, 3 * BS as usize)).unwrap();
    assert_eq!(
        b.size_and_blocks(f).unwrap(),
        (3 * BS, 3),
        "reserved while cached"
    );
    assert_eq!(b.cached_reserved_blocks(f), 3);
    b.sync().unwrap();
    assert_eq!(
        b.size_and_blocks(f).unwrap(),
        (3 * BS, 3),
        "mapped once written back"
    );
    assert_eq!(b.cached_reserved_blocks(f), 0);
    b.unlink(f).unwrap();
    assert!(b.size_and_blocks(f).is_err(), "gone");
}

/// An unprivileged writer ([`Privilege::User`]) is refused where `statfs`'s available
/// figure runs out, and its error's free figure is that figure; `fallocate_for` refuses
/// it there too; the superuser's writes ([`Buffered::write`]) go on into its share.
#[test]
fn an_unprivileged_writer_stops_where_available_runs_out() {
    let dev = device(4096, 3);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let share = b.statfs().root_reserved_blocks;
    assert!(share > 8, "a share: {share} blocks");
    let f = b.create(b"").unwrap();
    let mut k = 0u64;
    let err = loop {
        match b.write_for(f, k * BS, &fill(9, BS as usize), Privilege::User) {
            Ok(()) => k += 1,
            Err(e) => break e,
        }
    };
    let available = b.free_and_available_with_pending().1;
    let Error::NoSpace { free_blocks, .. } = err.clone() else {
        panic!("{err}")
    };
    // Where available runs out, within the room a file holding cached data adds to what
    // is kept for metadata (its entry, `room.rs`): the refusal's checkpoint wrote the
    // file back, so the figure read after it no longer keeps that room.
    assert!(
        available < 16 && free_blocks <= available,
        "refused where available ({available}) ran out: {err}"
    );
    let past = (available + 1) * BS;
    assert!(matches!(
        b.fallocate_for(f, Fallocate::Allocate, k * BS, past, Privilege::User),
        Err(Error::NoSpace { .. })
    ));
    let mut root = 0;
    while b.write(f, (k + root) * BS, &fill(9, BS as usize)).is_ok() {
        root += 1;
    }
    assert!(
        root + 1 >= share,
        "the superuser wrote {root} of its {share}"
    );
    b.sync().unwrap();
    assert_eq!(b.read(f, 0, 1).unwrap(), [9]);
}
