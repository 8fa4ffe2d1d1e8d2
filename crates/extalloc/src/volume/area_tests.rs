//! The file table on small groups and fragmented devices: a table larger than a group, and
//! a table that grows on a device fragmented to single free blocks, both checkpoint and
//! reopen; every tree node is one block, allocated one at a time.

use super::tests::BS;
use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};

fn device(blocks: u64, seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(blocks * BS), seed))
}

/// The tree's nodes, and how many of them lie in runs of adjacent nodes longer than one
/// group (none can: each is allocated alone).
fn tree_figures(vol: &Volume) -> (usize, u64) {
    let meta = vol.meta.lock();
    let nodes = meta.tree.as_ref().unwrap().nodes();
    let mut blocks: Vec<u64> = nodes.iter().map(|n| n.block).collect();
    blocks.sort_unstable();
    let groups: std::collections::BTreeSet<u64> = blocks.iter().map(|b| b / 64).collect();
    (nodes.len(), groups.len() as u64)
}

/// Blocks `f` writes to `dev`.
fn written_by(dev: &Arc<FaultDevice<MemDevice>>, f: impl FnOnce()) -> u64 {
    let before = dev.bytes_written();
    f();
    (dev.bytes_written() - before) / BS
}

/// Small-scale version of the ~620,000-file wall: groups of 64 blocks (256 KiB), a table of
/// several times that. Before pieces the checkpoint asked for twice the table in one
/// extent, larger than any group, and every later checkpoint (and so the volume) failed.
#[test]
fn a_table_larger_than_a_group_checkpoints_and_reopens() {
    let g = Geometry::new(4096, 64, 16384).unwrap();
    let dev = device(16384, 1);
    let vol = Volume::mkfs(dev.clone(), &g, 256, Policy::default()).unwrap();
    let attr = vec![7u8; 200];
    let mut ids = Vec::new();
    for _ in 0..6000 {
        ids.push(vol.create(&attr).unwrap());
    }
    vol.checkpoint().unwrap();
    let (nodes, groups) = tree_figures(&vol);
    assert!(
        nodes as u64 > 4 * 64,
        "a tree of {nodes} nodes, four groups' worth"
    );
    assert!(groups > 4, "its nodes in {groups} groups");
    // One more file changes one leaf and its parents, not the table: a few blocks with
    // the journal's and the store's own.
    ids.push(vol.create(&attr).unwrap());
    let blocks = written_by(&dev, || vol.checkpoint().unwrap());
    assert!(
        blocks < 48,
        "a checkpoint of one new file wrote {blocks} blocks"
    );
    vol.close().unwrap();
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.list().len(), ids.len());
    assert_eq!(vol.attr(ids[4321]).unwrap(), attr);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol.store().allocator().check().unwrap();
}

/// A volume whose device is fragmented to single free blocks: filled with one-block files,
/// every other one removed. Returns it with the files kept (each 4 KiB of 1s).
fn fragmented(dev: &Arc<FaultDevice<MemDevice>>) -> (Volume, Vec<u64>) {
    let g = Geometry::new(4096, 1024, 4096).unwrap();
    let vol = Volume::mkfs(dev.clone(), &g, 128, Policy::default()).unwrap();
    let mut files = Vec::new();
    while let Ok(id) = vol.create(b"") {
        if vol.write(id, 0, &[1u8; 4096]).is_err() {
            vol.unlink(id).unwrap();
            break;
        }
        files.push(id);
        if files.len() % 256 == 0 {
            vol.sync().unwrap();
        }
    }
    vol.sync().unwrap();
    for id in files.iter().step_by(2) {
        vol.unlink(*id).unwrap();
    }
    vol.sync().unwrap();
    let kept = files.iter().skip(1).step_by(2).copied().collect();
    (vol, kept)
}

/// A device fragmented to single free blocks: the table still finds room as it grows, the
/// volume checkpoints, and it reopens with every file, its checks clean.
#[test]
fn a_growing_table_fits_a_device_fragmented_to_single_blocks() {
    let dev = device(4096, 2);
    let (vol, kept) = fragmented(&dev);
    // Many empty files with large attributes: the table grows past every free run.
    let attr = vec![3u8; 1000];
    let mut empty = Vec::new();
    for _ in 0..300 {
        empty.push(vol.create(&attr).unwrap());
    }
    vol.checkpoint().unwrap();
    vol.checkpoint().unwrap();
    let (nodes, _) = tree_figures(&vol);
    assert!(nodes > 2, "a tree of {nodes} nodes");
    vol.close().unwrap();
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for id in &kept {
        assert_eq!(vol.read(*id, 0, 4096).unwrap(), vec![1u8; 4096]);
    }
    assert_eq!(vol.attr(empty[299]).unwrap(), attr);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol.store().allocator().check().unwrap();
}

/// Files of long maps (400 one-block extents: maps of three blocks) on a device
/// fragmented to single free blocks: no run holds a map segment, so the maps stay in the
/// table (before, the checkpoint asked for a run of the segment's length and failed, and
/// `fsck --repair` could not write its repairs home). Several short maps are cut into
/// one-block pieces between maps.
#[test]
fn long_maps_on_a_device_fragmented_to_single_blocks_checkpoint() {
    let dev = device(4096, 3);
    let (vol, kept) = fragmented(&dev);
    let mut long = Vec::new();
    for f in 0..3u8 {
        let id = vol.create(b"long").unwrap();
        // Every other logical block: one entry per block, even where runs would merge.
        for b in 0..400u64 {
            vol.write(id, b * 2 * 4096, &[f + 10; 4096]).unwrap();
        }
        long.push(id);
    }
    // Short maps (6 entries: 150 bytes each): many fit a one-block piece.
    let mut short = Vec::new();
    for f in 0..40u8 {
        let id = vol.create(b"short").unwrap();
        for b in 0..6u64 {
            vol.write(id, b * 2 * 4096, &[f; 4096]).unwrap();
        }
        short.push(id);
    }
    vol.checkpoint().unwrap();
    vol.close().unwrap();
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for (i, id) in long.iter().enumerate() {
        assert!(vol.extents(*id).unwrap().len() >= 400);
        for b in [0u64, 177, 399] {
            assert_eq!(
                vol.read(*id, b * 2 * 4096, 4096).unwrap(),
                vec![i as u8 + 10; 4096]
            );
        }
    }
    for (i, id) in short.iter().enumerate() {
        assert_eq!(
            vol.read(*id, 5 * 2 * 4096, 4096).unwrap(),
            vec![i as u8; 4096]
        );
    }
    assert_eq!(vol.read(kept[7], 0, 4096).unwrap(), vec![1u8; 4096]);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol.store().allocator().check().unwrap();
    // A change to a long map goes back to a segment when a run allows: here none does.
    vol.write(long[0], 0, &[99; 4096]).unwrap();
    vol.checkpoint().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.read(long[0], 0, 4096).unwrap(), vec![99; 4096]);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
}

/// An allocating `fallocate` larger than the space left fails before it maps anything (it
/// used to map what it could, then fail: a failed 1 TiB `posix_fallocate` left 128 MiB
/// allocated); one that fits all but the room kept for metadata fails too, and the
/// metadata path (`fallocate_metadata`, a file system's directory records) still gets it.
#[test]
fn a_fallocate_that_cannot_fit_changes_nothing_and_metadata_keeps_its_room() {
    let g = Geometry::new(4096, 1024, 4096).unwrap();
    let dev = device(4096, 4);
    let vol = Volume::mkfs(dev.clone(), &g, 128, Policy::default()).unwrap();
    let f = vol.create(b"f").unwrap();
    let free = vol.statfs().free_blocks;
    let e = vol
        .fallocate(f, Fallocate::Allocate, 0, 1 << 40)
        .expect_err("1 TiB on 16 MiB");
    assert_eq!(e.kind(), crate::ErrorKind::NoSpace, "{e}");
    assert_eq!(vol.statfs().free_blocks, free, "nothing mapped");
    assert!(vol.extents(f).unwrap().is_empty());
    assert_eq!(vol.size(f).unwrap(), 0);
    let margin = vol.reserve_margin();
    let data = (free - margin) * BS;
    vol.fallocate(f, Fallocate::Allocate, 0, data).unwrap();
    let more = vol.fallocate(f, Fallocate::Allocate, data, BS).unwrap_err();
    assert_eq!(more.kind(), crate::ErrorKind::NoSpace, "{more}");
    let dir = vol.create(b"dir").unwrap();
    vol.fallocate_metadata(dir, Fallocate::KeepSize, 0, 8 * BS)
        .expect("the room kept for metadata");
    vol.sync().unwrap();
    vol.checkpoint().unwrap();
    assert!(vol.check().unwrap().clean());
}

/// `Volume::mkfs_file` never wipes what a path holds: a volume or a file of data is
/// refused (`Occupied`, kind `Exists`) and left whole; a new path or an empty file is made;
/// `mkfs_file_replacing` discards on purpose.
#[test]
fn mkfs_file_refuses_a_volume_or_data_and_replacing_discards() {
    let dir = std::env::temp_dir().join(format!("extalloc-mkfsfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("v.img");
    let _ = std::fs::remove_file(&path);
    let vol = Volume::mkfs_file(&path, 32 << 20).unwrap();
    let id = vol.put(b"k", b"kept").unwrap();
    vol.close().unwrap();
    let e = Volume::mkfs_file(&path, 32 << 20).err().expect("refused");
    assert!(
        matches!(&e, crate::error::Error::Occupied { holds, .. } if holds.contains("volume")),
        "{e}"
    );
    assert_eq!(e.kind(), crate::ErrorKind::Exists);
    let vol = Volume::open_file(&path).unwrap();
    assert_eq!(vol.read(id, 0, 4).unwrap(), b"kept", "left whole");
    vol.close().unwrap();
    let data = dir.join("data.bin");
    std::fs::write(&data, b"not a volume").unwrap();
    let e = Volume::mkfs_file(&data, 32 << 20).err().expect("refused");
    assert!(e.to_string().contains("a file of 12 bytes"), "{e}");
    assert_eq!(std::fs::read(&data).unwrap(), b"not a volume");
    let empty = dir.join("empty.img");
    std::fs::write(&empty, b"").unwrap();
    Volume::mkfs_file(&empty, 32 << 20)
        .unwrap()
        .close()
        .unwrap();
    let vol = Volume::mkfs_file_replacing(&path, 32 << 20).unwrap();
    assert!(vol.list().is_empty(), "replaced");
    vol.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A crash at any write of a checkpoint, after checkpoints that replaced nodes (the
/// durable root has a retired chain): the open finds the durable tree and its chain whole,
/// every file's attribute as last synced, and nothing leaked or owned twice. (The first
/// build freed the durable root's chain with the blocks it listed; the nodes written next
/// could take its blocks, and a crash before the new root left a root naming a chain that
/// was gone: `torture --volume` found it, 2 blocks owned twice.)
#[test]
fn a_crash_at_any_write_of_a_checkpoint_leaves_the_tree_and_its_chain_whole() {
    let g = Geometry::new(4096, 256, 2048).unwrap();
    let mut n = 0;
    loop {
        let dev = device(2048, 10 + n);
        let vol = Volume::mkfs(dev.clone(), &g, 128, Policy::default()).unwrap();
        let mut model = std::collections::BTreeMap::new();
        let mut round = |vol: &Volume, r: u64| {
            for i in 0..150u64 {
                let attr = format!("round {r} file {i} {}", "y".repeat(60)).into_bytes();
                let id = vol.create(&attr).unwrap();
                model.insert(id, attr);
            }
            let gone: Vec<u64> = model.keys().copied().step_by(3).collect();
            for id in gone {
                vol.unlink(id).unwrap();
                model.remove(&id);
            }
        };
        round(&vol, 0);
        vol.checkpoint().unwrap();
        round(&vol, 1);
        vol.checkpoint().unwrap();
        round(&vol, 2);
        vol.sync().unwrap();
        dev.fail_after(n);
        let done = vol.checkpoint().is_ok();
        drop(vol);
        dev.crash(Crash::Random {
            keep: 0.5,
            tear: true,
        })
        .unwrap();
        let vol = Volume::open(dev.clone(), Policy::default())
            .unwrap_or_else(|e| panic!("cut after {n} writes: {e}"));
        assert_eq!(vol.list().len(), model.len(), "cut after {n} writes");
        for (id, attr) in &model {
            assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}, cut after {n}");
        }
        super::tests::clean_through_close(&dev, vol, n);
        if done {
            break;
        }
        n += 1;
    }
    assert!(n >= 8, "the checkpoint was cut at {n} points");
}

/// A volume of 1 KiB blocks, whose tree nodes are runs of four blocks (`node.rs`),
/// fragmented to single free blocks by files of 1,000 bytes with every other one removed,
/// then crashed: it reopens, checkpoints and takes new files. Before the node pool
/// (`volume/pool.rs`) the reopen refused ("cannot commit the repairs: no space ... none in
/// a run of 4") with half the device free: no four adjacent blocks were left.
#[test]
fn a_small_block_volume_fragmented_to_single_blocks_reopens_after_a_crash() {
    const SMALL: u64 = 1024;
    let g = Geometry::new(SMALL as u32, 4096, 16384).unwrap();
    let dev = Arc::new(FaultDevice::new(MemDevice::new(16384 * SMALL), 4));
    let vol = Volume::mkfs(dev.clone(), &g, 512, Policy::default()).unwrap();
    let mut files = Vec::new();
    while let Ok(id) = vol.create(b"") {
        if vol.write(id, 0, &[1u8; 1000]).is_err() || vol.sync().is_err() {
            let _ = vol.unlink(id);
            break;
        }
        files.push(id);
    }
    assert!(files.len() > 8000, "{} files", files.len());
    for id in files.iter().step_by(2) {
        vol.unlink(*id).unwrap();
    }
    vol.sync().unwrap();
    let kept: Vec<u64> = files.iter().skip(1).step_by(2).copied().collect();
    // Killed: nothing closed, the unsynced state dropped.
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for id in kept.iter().step_by(97) {
        assert_eq!(vol.read(*id, 0, 1000).unwrap(), vec![1u8; 1000]);
    }
    for _ in 0..200 {
        let id = vol.create(b"after").unwrap();
        vol.write(id, 0, &[2u8; 1000]).unwrap();
    }
    vol.checkpoint().unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol.close().unwrap();
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.read(kept[0], 0, 1000).unwrap(), vec![1u8; 1000]);
    vol.store().allocator().check().unwrap();
}
