//! The page path's mend (`leafkeep.rs`, `leafrepair.rs`) of a leaf a mount's open must
//! read: a marked leaf (maps in map segments) that fails its check, and a leaf holding
//! files the journal changed since the last checkpoint. Both once sent `fsck --repair`
//! to the salvage (every file in memory).

use super::tests::{device, geometry, pattern, BS};
use super::*;
use crate::disk::device::{Device, FaultDevice, MemDevice};

/// File `i`'s blocks: one (inline in its entry) for most, every other block of eight (a
/// long map, in a map segment) for every fourth when `long`.
fn blocks_of(i: u64, long: bool) -> Vec<u64> {
    match i % 4 {
        1 if long => (0..8).map(|b| b * 2).collect(),
        _ => vec![0],
    }
}

/// A volume of 600 such files, checkpointed; their ids.
fn volume_of_600(dev: &Arc<FaultDevice<MemDevice>>, long: bool) -> (Volume, Vec<u64>) {
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let ids = (0..600)
        .map(|i| {
            let id = vol.create(format!("file {i}").as_bytes()).unwrap();
            for b in blocks_of(i, long) {
                vol.write(id, b * BS, &pattern(i * 100 + b, BS as usize))
                    .unwrap();
            }
            id
        })
        .collect();
    vol.checkpoint().unwrap();
    (vol, ids)
}

/// Every file's attribute and data read back as written (but those of `except`).
fn assert_files(vol: &Volume, (ids, long): (&[u64], bool), except: &[u64]) {
    for (i, &id) in (0u64..).zip(ids).filter(|(_, id)| !except.contains(id)) {
        assert_eq!(vol.attr(id).unwrap(), format!("file {i}").as_bytes());
        for b in blocks_of(i, long) {
            let got = vol.read(id, b * BS, BS).unwrap();
            assert_eq!(
                got,
                pattern(i * 100 + b, BS as usize),
                "file {id} block {b}"
            );
        }
    }
}

/// Flips the last byte of the file tree leaf holding file `id`'s entry (free space past
/// its entries: the leaf fails its check, every entry's frame still checks), after `vol`
/// is dropped as a crash drops it.
fn flip_leaf_of(vol: Volume, dev: &Arc<FaultDevice<MemDevice>>, id: u64) {
    let place = (vol.places().unwrap().into_iter())
        .find(|p| p.id == id)
        .expect("its entry");
    vol.store().abandon();
    drop(vol);
    let last = place.table.start / BS * BS + BS - 1;
    let mut b = [0u8; 1];
    dev.read_at(&mut b, last).unwrap();
    dev.write_at(&[b[0] ^ 0x20], last).unwrap();
}

/// A marked leaf (holding maps in map segments) that fails its check: a mount's open must
/// read it (for the segments' accounts) and refuses; the repair's open leaves it in place,
/// and the mend keeps its entries, the maps in segments where they lie (held in the
/// accounts). Every file reads back, a checkpoint
/// after the mend keeps the accounts right, and the volume checks clean.
#[test]
fn a_failed_marked_leaf_is_mended_keeping_its_maps_in_segments() {
    let dev = device(91);
    let (vol, ids) = volume_of_600(&dev, true);
    let target = ids[301]; // a long map: its leaf is marked
    assert_eq!(blocks_of(301, true).len(), 8);
    flip_leaf_of(vol, &dev, target);
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    assert!(vol.checkpoint().is_err(), "no checkpoint before the mend");
    let mended = vol.mend_unreadable_leaves().unwrap();
    assert_eq!(mended.leaves.len(), 1, "{mended:?}");
    assert!(
        mended.tree_scan.is_none() && mended.lost.is_empty(),
        "{mended:?}"
    );
    assert!(mended.intact > 10, "{mended:?}");
    assert!(mended.recovered.contains(&(target, target)), "{mended:?}");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    vol.rebuild_allocation().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    assert_files(&vol, (&ids, true), &[]);
    // A kept map in a segment rewritten: its old place released by the checkpoint.
    vol.write(target, BS, &pattern(7, BS as usize)).unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    assert_eq!(vol.read(target, BS, BS).unwrap(), pattern(7, BS as usize));
}

/// Changes synced after the last checkpoint (a write, an unlink; a new file) then a
/// crash, and the leaf holding the changed files damaged: a mount's open must read it to
/// replay them and refuses; the repair's open sets their changes aside, and the mend
/// applies them to the entries it keeps (the unlinked file not kept: `removed`). Every
/// file reads as synced and the volume checks clean.
#[test]
fn a_damaged_leaf_under_journal_changes_is_mended_with_them() {
    let dev = device(92);
    let (vol, ids) = volume_of_600(&dev, false); // no leaf marked: none read at open
    let (written, unlinked) = (ids[300], ids[302]);
    vol.write(written, BS, &pattern(8, BS as usize)).unwrap();
    vol.unlink(unlinked).unwrap();
    let made = vol.create(b"made since").unwrap();
    vol.write(made, 0, &pattern(9, BS as usize)).unwrap();
    vol.sync().unwrap();
    flip_leaf_of(vol, &dev, written);
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    assert_eq!(mended.leaves.len(), 1, "{mended:?}");
    assert!(mended.lost.is_empty(), "{mended:?}");
    assert_eq!(mended.removed, [unlinked], "{mended:?}");
    assert!(mended.recovered.contains(&(written, written)), "{mended:?}");
    vol.rebuild_allocation().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    assert_files(&vol, (&ids, false), &[unlinked, written]);
    assert_eq!(vol.read(written, BS, BS).unwrap(), pattern(8, BS as usize));
    assert!(vol.attr(unlinked).is_err());
    assert_eq!(vol.read(made, 0, BS).unwrap(), pattern(9, BS as usize));
    assert_eq!(vol.file_count().unwrap(), ids.len() as u64);
}

/// A read of a kept entry's map in its segment fails (a bad sector) while the mend
/// judges it: the mend fails with the I/O error, changing nothing, instead of taking the
/// file for lost (the bitmaps' rebuild would then free its data).
#[test]
fn a_read_error_on_a_kept_map_fails_the_mend() {
    let dev = device(93);
    let (vol, ids) = volume_of_600(&dev, true);
    let target = ids[301];
    let map = (vol.places().unwrap().into_iter())
        .find(|p| p.id == target)
        .and_then(|p| p.map)
        .expect("a map in a segment");
    flip_leaf_of(vol, &dev, target);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    dev.fail_reads_in(map);
    let failed = vol.mend_unreadable_leaves().unwrap_err();
    assert!(matches!(failed, Error::Io { .. }), "{failed:?}");
    assert!(vol.checkpoint().is_err(), "still not mended");
}
