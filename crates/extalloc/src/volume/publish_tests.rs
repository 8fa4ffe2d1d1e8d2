//! Atomic publish (`publish.rs`): a pending file is never listed, a crash before its
//! publish committed leaves nothing (its blocks free again), a put cut at any write
//! boundary leaves the object whole or absent, a replacement swaps in one commit.

use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};

fn geometry() -> Geometry {
    Geometry::new(4096, 1024, 8192).unwrap()
}

fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// Power lost: writes fail, the volume dropped, unflushed writes lost, opened again.
fn power_loss(dev: &Arc<FaultDevice<MemDevice>>, vol: Volume) -> Volume {
    dev.fail_writes(true);
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    Volume::open(dev.clone(), Policy::default()).unwrap()
}

#[test]
fn a_pending_file_is_hidden_until_published_and_a_crash_before_leaves_nothing() {
    let dev = device(1);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    vol.sync().unwrap();
    let free = vol.statfs().free_blocks;
    let id = vol.create_pending().unwrap();
    vol.write(id, 0, &data(1, 3 << 20)).unwrap();
    vol.sync().unwrap(); // the data and the pending file are durable, unpublished
    assert!(vol.list().is_empty() && vol.list_with_attrs().is_empty());
    assert!(vol.is_pending(id) && vol.pending() == [id]);
    assert_eq!(vol.attr(id).unwrap(), b"");
    assert!(matches!(vol.set_attr(id, b"k"), Err(Error::Pending { .. })));
    let vol = power_loss(&dev, vol);
    assert!(vol.list().is_empty() && vol.pending().is_empty());
    assert!(matches!(vol.size(id), Err(Error::NoSuchFile { .. })));
    vol.sync().unwrap();
    assert_eq!(
        vol.statfs().free_blocks,
        free,
        "the pending file's blocks are free"
    );
    assert!(vol.check().unwrap().clean());
}

#[test]
fn a_published_and_synced_file_survives_with_all_its_data() {
    let dev = device(2);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    let bytes = data(2, 1 << 20);
    let id = vol.create_pending().unwrap();
    vol.write(id, 0, &bytes).unwrap();
    vol.publish(id, b"key:a").unwrap();
    assert_eq!(vol.list().len(), 1);
    assert_eq!(vol.attr(id).unwrap(), b"key:a");
    vol.sync().unwrap();
    let vol = power_loss(&dev, vol);
    assert_eq!(vol.read(id, 0, bytes.len() as u64).unwrap(), bytes);
    assert_eq!(vol.attr(id).unwrap(), b"key:a");
    // Misuse: published twice, the reserved mark, a file that is not there.
    assert!(matches!(vol.publish(id, b"x"), Err(Error::Pending { .. })));
    let p = vol.create_pending().unwrap();
    assert!(matches!(
        vol.publish(p, publish::PENDING),
        Err(Error::AttrReserved)
    ));
    assert!(matches!(
        vol.create(publish::PENDING),
        Err(Error::AttrReserved)
    ));
    assert!(matches!(
        vol.publish(999, b"x"),
        Err(Error::NoSuchFile { .. })
    ));
    assert!(vol.is_pending(p), "refusals changed nothing");
}

/// A put of 16 MiB through a 20-block journal commits several times by itself. Cut at
/// every 7th device write (and the last few), the volume opened after the loss holds the
/// object whole or not at all, and every block not in a file is free.
/// A put leaves what a careful writer would: one extent a blob where the free space
/// allows, every block written, no preallocation held, and free space that is the device's
/// less the blobs' blocks once synced.
#[test]
fn a_put_leaves_one_extent_and_no_space_held() {
    let vol = Volume::mkfs(device(9), &geometry(), 256, Policy::default()).unwrap();
    vol.sync().unwrap();
    let free = vol.statfs().free_blocks;
    let mut blocks = 0;
    for (i, len) in [1_000usize, 4_096, 70_000, 300_001, 1 << 20, 2_000_000]
        .iter()
        .enumerate()
    {
        let id = vol
            .put(format!("k{i}").as_bytes(), &data(i as u8, *len))
            .unwrap();
        let map = vol.extents(id).unwrap();
        assert_eq!(
            map.len(),
            1,
            "blob {i} of {len} bytes in one extent: {map:?}"
        );
        assert!(!map[0].unwritten, "blob {i}: every block written");
        assert_eq!(vol.read(id, 0, *len as u64).unwrap(), data(i as u8, *len));
        blocks += (*len as u64).div_ceil(4096);
    }
    assert!(
        vol.list().iter().all(|f| f.prealloc_blocks == 0),
        "{:?}",
        vol.list()
    );
    vol.sync().unwrap();
    assert_eq!(vol.statfs().free_blocks, free - blocks);
    assert!(vol.check().unwrap().clean());
}

#[test]
fn a_put_cut_at_any_write_holds_the_object_whole_or_not_at_all() {
    let bytes = data(3, 16 << 20);
    let mut whole = 0;
    let mut absent = 0;
    let mut commits_inside = 0;
    for cut in (0..4000u64).step_by(7) {
        let dev = device(cut);
        // Its flushes counted: one inside the put is a commit the volume made by itself.
        let counted = Arc::new(crate::sequence::Counted::new(dev.clone()));
        let vol = Volume::mkfs(counted.clone(), &geometry(), 20, Policy::default()).unwrap();
        vol.sync().unwrap();
        let flushes = counted.flushes();
        dev.fail_after(cut);
        let put = vol.put(b"key:big", &bytes);
        let inside = counted.flushes() - flushes;
        let put = put.and_then(|id| vol.sync().map(|()| id));
        let done = put.is_ok();
        if done {
            commits_inside = inside;
        }
        let vol = power_loss(&dev, vol);
        let list = vol.list_with_attrs();
        match list.as_slice() {
            [] => absent += 1,
            [(info, attr)] => {
                assert_eq!(attr, b"key:big", "cut {cut}");
                let got = vol.read(info.id, 0, info.size).unwrap();
                assert!(
                    got == bytes,
                    "cut {cut}: a partial object ({} bytes)",
                    got.len()
                );
                whole += 1;
            }
            more => panic!("cut {cut}: {} files", more.len()),
        }
        assert!(
            !done || !list.is_empty(),
            "cut {cut}: a synced put was lost"
        );
        assert!(vol.pending().is_empty());
        let check = vol.check().unwrap();
        assert!(check.clean(), "cut {cut}: {check:?}");
        vol.store().allocator().check().unwrap();
        if done {
            break; // every later cut lets the whole put through
        }
    }
    assert!(whole > 0 && absent > 10, "whole {whole}, absent {absent}");
    assert!(
        commits_inside >= 2,
        "the put committed {commits_inside} times by itself"
    );
}

#[test]
fn a_replacement_swaps_the_old_file_for_the_new_in_one_commit() {
    let dev = device(4);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    let old = vol.put(b"key:a", &data(4, 200_000)).unwrap();
    let empty = vol.create(b"empty").unwrap();
    vol.sync().unwrap();
    let new = vol.create_pending().unwrap();
    vol.write(new, 0, &data(5, 300_000)).unwrap();
    assert!(matches!(
        vol.publish_replacing(new, b"key:a", new),
        Err(Error::Pending { .. })
    ));
    assert!(matches!(
        vol.publish_replacing(new, b"key:a", 999),
        Err(Error::NoSuchFile { .. })
    ));
    assert!(vol.is_pending(new), "refusals changed nothing");
    vol.publish_replacing(new, b"key:a", old).unwrap();
    // A file with no blocks, replaced by a new empty one.
    let blank = vol.create_pending().unwrap();
    vol.publish_replacing(blank, b"empty", empty).unwrap();
    let ids: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
    assert_eq!(ids, [new, blank]);
    // Not synced: a power loss brings the old one back and drops the new one whole.
    let vol = power_loss(&dev, vol);
    let ids: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
    assert_eq!(ids, [old, empty]);
    assert_eq!(vol.read(old, 0, 200_000).unwrap(), data(4, 200_000));
    assert!(vol.pending().is_empty() && vol.check().unwrap().clean());
}

/// A replacement of a file of many extents through a small journal: the group is two
/// changes whatever the old file holds, and a cut at any write leaves old or new.
#[test]
fn a_replacement_of_a_fragmented_file_is_atomic_at_any_cut() {
    for cut in (0..400u64).step_by(3) {
        let dev = device(100 + cut);
        let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
        // 300 extents: every other block of a 600-block file punched.
        let old = vol.put(b"key:a", &data(6, 600 * 4096)).unwrap();
        for b in (0..600u64).step_by(2) {
            vol.fallocate(old, Fallocate::PunchHole, b * 4096, 4096)
                .unwrap();
        }
        vol.sync().unwrap();
        let want_old = vol.read(old, 0, 600 * 4096).unwrap();
        let new = vol.create_pending().unwrap();
        vol.write(new, 0, &data(7, 10_000)).unwrap();
        dev.fail_after(cut);
        let done = vol
            .publish_replacing(new, b"key:a", old)
            .and_then(|()| vol.sync())
            .is_ok();
        let vol = power_loss(&dev, vol);
        let list = vol.list_with_attrs();
        assert_eq!(list.len(), 1, "cut {cut}: {list:?}");
        let (info, attr) = &list[0];
        assert_eq!(attr, b"key:a");
        let got = vol.read(info.id, 0, info.size).unwrap();
        match info.id {
            id if id == new => assert_eq!(got, data(7, 10_000), "cut {cut}"),
            id if id == old => {
                assert!(!done, "cut {cut}: a synced replacement undone");
                assert_eq!(got, want_old, "cut {cut}");
            }
            id => panic!("cut {cut}: file {id}"),
        }
        assert!(
            vol.pending().is_empty() && vol.check().unwrap().clean(),
            "cut {cut}"
        );
        if done {
            return;
        }
    }
    panic!("no cut let the replacement through");
}

/// A published file retracted (made pending again) stays readable and writable, leaves
/// every listing, and is gone after a crash once the retract committed, its blocks free;
/// one published again survives. A retract of a pending file, or of none, is refused.
#[test]
fn a_retracted_file_is_removed_by_the_open_after_a_crash() {
    let dev = device(11);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    vol.sync().unwrap();
    let free = vol.statfs().free_blocks;
    let gone = vol.create_placed(b"inode a", 7).unwrap();
    let back = vol.create_pending_placed(7).unwrap();
    assert!(vol.is_pending(back));
    vol.write(gone, 0, &data(3, 1 << 20)).unwrap();
    vol.write(back, 0, &data(4, 1 << 20)).unwrap();
    vol.sync().unwrap();
    vol.retract(gone).unwrap();
    assert!(matches!(vol.retract(gone), Err(Error::Pending { .. })));
    assert!(matches!(vol.retract(back), Err(Error::Pending { .. })));
    assert!(matches!(vol.retract(999), Err(Error::NoSuchFile { .. })));
    assert_eq!(vol.read(gone, 0, 4096).unwrap(), data(3, 1 << 20)[..4096]);
    vol.write(gone, 4096, b"still writable").unwrap();
    vol.publish(back, b"inode b").unwrap();
    assert_eq!(vol.pending(), [gone]);
    assert_eq!(vol.list_with_attrs().len(), 1);
    vol.sync().unwrap();
    let vol = power_loss(&dev, vol);
    assert!(vol.pending().is_empty());
    assert!(matches!(vol.size(gone), Err(Error::NoSuchFile { .. })));
    assert_eq!(vol.attr(back).unwrap(), b"inode b");
    assert_eq!(vol.read(back, 0, 1 << 20).unwrap(), data(4, 1 << 20));
    vol.unlink(back).unwrap();
    vol.sync().unwrap();
    assert_eq!(
        vol.statfs().free_blocks,
        free,
        "both files' blocks are free"
    );
    assert!(vol.check().unwrap().clean());
}
