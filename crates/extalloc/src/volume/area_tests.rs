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

/// A device fragmented to single free blocks (every other block of a full device freed):
/// the table still finds room as it grows, the volume checkpoints, and it reopens with
/// every file, its checks clean.
#[test]
fn a_growing_table_fits_a_device_fragmented_to_single_blocks() {
    let g = Geometry::new(4096, 1024, 4096).unwrap();
    let dev = device(4096, 2);
    let vol = Volume::mkfs(dev.clone(), &g, 128, Policy::default()).unwrap();
    // One-block files until the device is full.
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
    // Every other one removed: single free blocks between used ones.
    for id in files.iter().step_by(2) {
        vol.unlink(*id).unwrap();
    }
    vol.sync().unwrap();
    let kept: Vec<u64> = files.iter().skip(1).step_by(2).copied().collect();
    // Many empty files with large attributes: the table grows past every free run.
    let attr = vec![3u8; 1000];
    let mut empty = Vec::new();
    for _ in 0..300 {
        empty.push(vol.create(&attr).unwrap());
    }
    vol.checkpoint().unwrap();
    vol.checkpoint().unwrap();
    let (pieces, longest) = area_figures(&vol);
    assert_eq!(longest, 1, "only single blocks were free");
    assert!(pieces > 2, "a table in {pieces} pieces");
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
