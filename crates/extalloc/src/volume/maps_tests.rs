//! Lazy maps and map segments: an open reads no map, a checkpoint writes only changed maps,
//! segments are retired and freed, and a crash at any write of a checkpoint loses nothing
//! and leaks nothing.

use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};

const BS: u64 = 4096;

fn geometry() -> Geometry {
    Geometry::new(4096, 1024, 8192).unwrap()
}

fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

/// `files` files of `extents` one-block extents each (every other block of the file), each
/// block holding its file id and logical block.
fn fragmented(vol: &Volume, files: u64, extents: u64) -> Vec<u64> {
    let ids: Vec<u64> = (0..files).map(|_| vol.create(b"f").unwrap()).collect();
    for k in 0..extents {
        for &id in &ids {
            vol.write(id, k * 2 * BS, &block(id, k * 2)).unwrap();
        }
    }
    ids
}

fn block(id: u64, l: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS as usize];
    b[..8].copy_from_slice(&id.to_le_bytes());
    b[8..16].copy_from_slice(&l.to_le_bytes());
    b
}

fn verify(vol: &Volume, ids: &[u64], extents: u64) {
    for &id in ids {
        for k in 0..extents {
            let got = vol.read(id, k * 2 * BS, BS).unwrap();
            assert_eq!(got, block(id, k * 2), "file {id} block {}", k * 2);
        }
    }
}

thread_local! {
    /// Every segment a test's volume has named (its retired list also holds tree nodes).
    static SEEN: std::cell::RefCell<std::collections::BTreeSet<crate::geometry::Extent>> =
        Default::default();
}

/// Segments named, and segments retired (of the retired blocks, those once named).
fn segments(vol: &Volume) -> (usize, usize) {
    let s = vol.segs.lock();
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        seen.extend(s.named.iter().copied());
        let retired = s.retired.iter().filter(|e| seen.contains(e)).count();
        (s.named.len(), retired)
    })
}

#[test]
fn an_open_reads_no_map_until_a_file_is_used() {
    let dev = device(1);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    let ids = fragmented(&vol, 20, 9);
    let small = vol.create(b"small").unwrap();
    vol.write(small, 0, &block(small, 0)).unwrap();
    // Preallocations are given back at the close.
    let listed: Vec<FileInfo> = vol
        .list()
        .into_iter()
        .map(|f| FileInfo {
            prealloc_blocks: 0,
            ..f
        })
        .collect();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.maps_read(), 0, "a clean open reads no map");
    assert_eq!(vol.list(), listed, "listing needs no map");
    assert!(listed
        .iter()
        .filter(|f| f.id != small)
        .all(|f| f.extents > 4));
    assert_eq!(vol.read(ids[3], 0, 10).unwrap()[..8], ids[3].to_le_bytes());
    assert_eq!(vol.maps_read(), 1, "a read reads its file's map only");
    assert_eq!(vol.size(ids[4]).unwrap(), 17 * BS);
    assert_eq!(vol.maps_read(), 1, "a size needs no map");
    assert!(vol.check().unwrap().clean());
    assert_eq!(
        vol.maps_read() as usize,
        listed.len(),
        "check reads every map"
    );
    verify(&vol, &ids, 9);
    assert_eq!(segments(&vol), (1, 0), "twenty maps share one segment");
}

/// A checkpoint writes only the maps that changed; a segment no file uses is retired and
/// freed by the next checkpoint; a sparse one is cleaned; nothing leaks.
#[test]
fn segments_are_written_copy_on_write_retired_and_freed() {
    let dev = device(2);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    let ids = fragmented(&vol, 12, 8);
    let checkpoint = |vol: &Volume| {
        let _closed = vol.gate.write();
        vol.checkpoint_locked().unwrap();
    };
    checkpoint(&vol);
    let first = *vol.segs.lock().named.iter().next().unwrap();
    assert_eq!(segments(&vol), (1, 0));
    // One file changes: its map goes to a new segment, the first stays named by the rest.
    vol.write(ids[0], 40 * BS, &block(ids[0], 40)).unwrap();
    checkpoint(&vol);
    assert_eq!(segments(&vol), (2, 0));
    // Every file but one unlinked: the first segment is sparse, cleaned and retired.
    for &id in &ids[2..] {
        vol.unlink(id).unwrap();
    }
    checkpoint(&vol);
    let segs = vol.segs.lock().clone();
    assert_eq!(segments(&vol).1, 2, "{segs:?}");
    assert!(segs.retired.contains(&first) && !segs.named.contains(&first));
    assert!(vol.check().unwrap().clean(), "retired segments are owned");
    checkpoint(&vol);
    assert!(segments(&vol).1 == 0, "freed by the next checkpoint");
    assert!(vol.store().allocator().is_free(first.start).unwrap());
    assert!(vol.check().unwrap().clean());
    vol.close().unwrap();
    let vol = Volume::open(dev, Policy::default()).unwrap();
    verify(&vol, &ids[..2], 8);
    assert!(vol.check().unwrap().clean());
}

/// A power cut at every write of a checkpoint (its segments, their commit, the table, the
/// store's checkpoint): every synced file reads back, the ownership check is clean, and the
/// next checkpoint frees what the cut one left.
#[test]
fn a_crash_at_any_write_of_a_checkpoint_loses_and_leaks_nothing() {
    let mut n = 0;
    loop {
        let dev = device(3 + n);
        let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
        let ids = fragmented(&vol, 8, 7);
        vol.close().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        for &id in &ids[..3] {
            vol.write(id, 30 * BS, &block(id, 30)).unwrap();
        }
        vol.unlink(ids[7]).unwrap();
        vol.sync().unwrap();
        dev.fail_after(n);
        let done = {
            let _closed = vol.gate.write();
            vol.checkpoint_locked().is_ok()
        };
        drop(vol);
        dev.crash(Crash::Random {
            keep: 0.5,
            tear: true,
        })
        .unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        verify(&vol, &ids[..7], 7);
        for &id in &ids[..3] {
            assert_eq!(vol.read(id, 30 * BS, BS).unwrap(), block(id, 30));
        }
        super::tests::clean_through_close(&dev, vol, n);
        if done {
            break;
        }
        n += 1;
    }
    assert!(n >= 4, "the checkpoint was cut at {n} points");
}
