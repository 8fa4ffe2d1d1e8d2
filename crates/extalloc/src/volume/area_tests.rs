//! The table's areas in pieces (`area.rs`): a table larger than a group, and a table that
//! grows on a device fragmented to single free blocks, both checkpoint and reopen; no piece
//! is longer than a piece may be.

use super::area::max_piece_blocks;
use super::tests::BS;
use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};

fn device(blocks: u64, seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(blocks * BS), seed))
}

/// Every piece and index block of both areas, and the pieces' longest run.
fn area_figures(vol: &Volume) -> (usize, u64) {
    let meta = vol.meta.lock();
    let pieces = meta.areas.iter().map(|a| a.pieces.len()).sum();
    let longest = meta
        .areas
        .iter()
        .flat_map(|a| a.pieces.iter().map(|p| p.len))
        .max()
        .unwrap_or(0);
    (pieces, longest)
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
    let root = checkpoint::volume_root(vol.store()).unwrap();
    assert!(
        root.table_bytes > 4 * 64 * BS,
        "a table of {} bytes, four groups' worth",
        root.table_bytes
    );
    let (pieces, longest) = area_figures(&vol);
    assert!(pieces > 4, "{pieces} pieces");
    assert!(
        longest <= max_piece_blocks(&g).min(64),
        "a piece of {longest} blocks"
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
    let (pieces, longest) = area_figures(&vol);
    assert!(pieces > 2, "a table in {pieces} pieces");
    assert_eq!(longest, 1, "only single blocks were free");
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
