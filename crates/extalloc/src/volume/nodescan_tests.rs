//! The salvage's scan of the device for the file tree's leaves (`nodescan.rs`) on whole
//! volumes: a zeroed root, a damaged internal node, the newest leaves gone, and a tree's
//! only leaf lost with no copy of it held.

use super::super::salvage_tests::{assert_intact, build, bytes_of, poke, settle, Model, BS};
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::geometry::Geometry;
use crate::volume::load::volume_root;
use crate::volume::record::MapRef;
use crate::volume::root::TreeRoot;
use crate::volume::table::{Table, TableFile};
use crate::volume::{node, table, NodeScans, Volume};
use std::sync::Arc;

/// A fresh volume of 8,192 blocks of 4 KiB.
pub(super) fn fresh() -> (Arc<MemDevice>, Volume) {
    let dev = Arc::new(MemDevice::new(8192 * BS));
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    (dev, vol)
}

/// A leaf's payload: empty files of `ids`, each with attribute `attr`.
fn leaf_payload(ids: impl Iterator<Item = u64>, attr: &[u8]) -> Vec<u8> {
    let files = ids
        .map(|id| TableFile {
            id,
            size: 0,
            attr: attr.to_vec(),
            placement: None,
            map: MapRef::Inline(Vec::new()),
        })
        .collect();
    let retired = Vec::new();
    table::encode_table(&Table { files, retired })[table::HEADER_BYTES..].to_vec()
}

/// `n` empty files made on `vol`, file `i` with the attribute "`name` `i`".
pub(super) fn made(vol: &Volume, n: u64, name: &str) -> Vec<u64> {
    (0..n)
        .map(|i| vol.create(format!("{name} {i}").as_bytes()).unwrap())
        .collect()
}

/// No block is mapped while free, nor by two files.
pub(super) fn assert_no_block_shared(vol: &Volume) {
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
}

/// Two checkpoints after [`build`]: an empty file in the previous table and unlinked after
/// the last (the journal holds the unlink), and a file made after the previous one. Returns
/// the device, the model, the last tree's root, the empty file and the newer one (with its
/// bytes).
fn two_checkpoints() -> (Arc<MemDevice>, Model, TreeRoot, u64, (u64, Vec<u8>)) {
    let (dev, model) = build();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let empty = vol.create(b"empty, in the previous table").unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let newer = vol.create(b"made after the previous checkpoint").unwrap();
    vol.write(newer, 0, &bytes_of(newer, 9000)).unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    assert!(tree.previous.is_some());
    vol.unlink(empty).unwrap();
    vol.sync().unwrap();
    drop(vol);
    (dev, model, tree, empty, (newer, bytes_of(newer, 9000)))
}

/// The tree's root wholly zeroed (an internal node: no magic left to say so): the walk
/// loses every key, and the salvage's scan of the device finds the leaves under it, so
/// every file comes back whole, the newest too; the one the journal unlinks after the
/// last checkpoint stays unlinked.
#[test]
fn a_wholly_lost_root_gives_back_every_file_through_the_device_scan() {
    let (dev, model, tree, empty, (newer, bytes)) = two_checkpoints();
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert_eq!(scan.nodes_lost.len(), 1, "{report:?}");
    assert_eq!(scan.nodes_lost[0].0, tree.root.block);
    assert!(scan.leaves_found >= 2, "{scan:?}");
    let mut recovered: Vec<u64> = report.recovered.iter().map(|r| r.0).collect();
    recovered.sort_unstable();
    let mut all: Vec<u64> = model.keys().copied().chain([newer]).collect();
    all.sort_unstable();
    assert_eq!(recovered, all, "{report:?}");
    assert!(report.restored.is_empty(), "none needed the previous tree");
    assert!(
        report.lost.is_empty(),
        "the zeroed root's bytes are no file lost"
    );
    assert!(
        vol.size(empty).is_err(),
        "unlinked after the last checkpoint"
    );
    assert_eq!(vol.read(newer, 0, 9000).unwrap(), bytes);
    assert_intact(&vol, &model, &[]);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &[]);
    assert_eq!(vol.read(newer, 0, 9000).unwrap(), bytes);
    assert_no_block_shared(&vol);
}

/// The root and every leaf of the last tree zeroed: the newest copies are gone, but the
/// leaf the last checkpoint replaced (adding the newest file) is still held (freed only by
/// the checkpoint after it), so the scan gives back its files as the previous checkpoint
/// left them, whole; a file made after that checkpoint is lost, and one the journal
/// unlinks after it stays unlinked.
#[test]
fn the_scan_takes_an_older_leaf_still_held_when_the_newest_is_lost() {
    let (dev, model, tree, empty, (newer, _)) = two_checkpoints();
    // The root's children (a tree of two levels), read before the damage.
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, tree.root.block * BS).unwrap();
    let d = node::decode(&raw, tree.root).unwrap();
    assert_eq!(d.level, 1, "a root over leaves");
    let children = node::decode_children(&d, tree.root.generation).unwrap();
    let blocks = children.iter().map(|c| c.at.block).chain([tree.root.block]);
    for b in blocks {
        dev.write_at(&[0u8; BS as usize], b * BS).unwrap();
    }
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert_eq!(scan.leaves_found, 1, "the replaced leaf: {report:?}");
    let recovered: Vec<u64> = report.recovered.iter().map(|r| r.0).collect();
    assert!(
        !recovered.is_empty() && !recovered.contains(&newer),
        "{report:?}"
    );
    assert!(
        vol.size(newer).is_err(),
        "made after the previous checkpoint: lost"
    );
    assert!(
        vol.size(empty).is_err(),
        "unlinked after the last checkpoint"
    );
    let gone: Vec<u64> = model
        .keys()
        .copied()
        .filter(|id| !recovered.contains(id))
        .collect();
    assert_intact(&vol, &model, &gone);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &gone);
    assert_no_block_shared(&vol);
}

/// A tree of three levels, one internal node under the root damaged (a byte flipped): the
/// walk loses its key range, the scan gives back the entries of its leaves, and no file is
/// lost.
#[test]
fn a_damaged_internal_node_costs_no_file() {
    let (dev, vol) = fresh();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let ids: Vec<u64> = (0..6000).map(|i| vol.create(&attr(i)).unwrap()).collect();
    vol.close().unwrap();
    let tree = {
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        volume_root(vol.store()).unwrap().tree.unwrap()
    };
    let read = |at: node::NodeRef| {
        let mut raw = vec![0u8; BS as usize];
        dev.read_at(&mut raw, at.block * BS).unwrap();
        node::decode(&raw, at).unwrap()
    };
    let d = read(tree.root);
    assert_eq!(d.level, 2, "three levels");
    let children = node::decode_children(&d, tree.root.generation).unwrap();
    let inner = children[children.len() / 2].at;
    assert_eq!(read(inner).level, 1);
    poke(&dev, inner.block * BS + 200, |b| b ^ 0x40);
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert_eq!(scan.nodes_lost.len(), 1, "{scan:?}");
    assert_eq!(scan.nodes_lost[0].0, inner.block);
    assert!(scan.entries > 100 && report.lost.is_empty(), "{report:?}");
    assert_eq!(report.recovered.len() as u64, scan.entries);
    let vol = settle(&dev, vol);
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(vol.attr(id).unwrap(), attr(i as u64), "file {id}");
    }
    assert_no_block_shared(&vol);
}

/// A tree of one leaf zeroed, with no copy of it held: as when a checkpoint that changed
/// nothing freed the copy the last one replaced (seen in the damage campaign: the repair
/// then refused the volume, no file left to hold an inode). The freed copy is made here
/// by writing the leaf's payload, one generation older, as a node at a free block; the
/// scan finds it there and every file it held comes back.
#[test]
fn a_lost_only_leaf_comes_back_from_a_freed_copy() {
    let (dev, vol) = fresh();
    let ids = made(&vol, 20, "old");
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let newer = vol.create(b"made by the last checkpoint").unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, tree.root.block * BS).unwrap();
    let leaf = node::decode(&raw, tree.root).unwrap();
    assert_eq!((leaf.level, leaf.count), (0, 21), "one leaf");
    // The copy before `newer`: its frames, at a free block, one checkpoint older.
    let frames = table::frames(&leaf.payload).unwrap();
    let mut payload = Vec::new();
    for body in frames
        .iter()
        .filter(|b| table::frame_id(b).unwrap() != newer)
    {
        table::put_file_frame(&mut payload, body);
    }
    let free = (tree.root.block + 1..8192)
        .find(|&b| vol.store().allocator().is_free(b).unwrap())
        .unwrap();
    let at = node::NodeRef {
        block: free,
        generation: tree.root.generation - 1,
    };
    let stamp = tree.stamp.expect("a stamped root").value;
    let old = node::encode(BS as usize, (0, 20), &payload, at, stamp);
    drop(vol);
    // The copy the last checkpoint retired (still held) gone, as a reuse would leave it.
    for b in (0..8192).filter(|&b| b != tree.root.block) {
        dev.read_at(&mut raw, b * BS).unwrap();
        if node::has_magic(&raw) {
            dev.write_at(&[0u8; BS as usize], b * BS).unwrap();
        }
    }
    dev.write_at(&old, free * BS).unwrap();
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert_eq!(
        (scan.leaves_found, scan.freed_leaves_found),
        (0, 1),
        "{scan:?}"
    );
    assert_eq!((scan.entries, scan.entries_freed), (20, 20), "{scan:?}");
    assert!(
        vol.size(newer).is_err(),
        "made by the last checkpoint: lost"
    );
    let vol = settle(&dev, vol);
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(vol.attr(id).unwrap(), format!("old {i}").into_bytes());
    }
    assert_no_block_shared(&vol);
}

/// The tree's root block holding a stale leaf (a whole node of an older checkpoint, as a
/// lost write of the root leaves): the walk takes it for a stale leaf and loses every key;
/// the scan's leaves are newer and go first, so no file takes the stale copy's bytes.
#[test]
fn a_stale_leaf_where_the_root_lies_yields_to_the_scan() {
    let (dev, model) = build();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    drop(vol);
    // A leaf of five files with other attributes, one checkpoint older, at the root's block.
    let payload = leaf_payload(model.keys().take(5).copied(), b"stale");
    let at = node::NodeRef {
        block: tree.root.block,
        generation: tree.root.generation - 1,
    };
    let stamp = tree.stamp.expect("a stamped root").value;
    let leaf = node::encode(BS as usize, (0, 5), &payload, at, stamp);
    dev.write_at(&leaf, tree.root.block * BS).unwrap();
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert_eq!(scan.nodes_lost.first().map(|n| n.0), Some(tree.root.block));
    assert_intact(&vol, &model, &[]);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &[]);
    assert_no_block_shared(&vol);
}

/// A volume made over a former one (no discard: its leaves still lie in the new volume's
/// free blocks, whole, naming their own blocks and older generations), then its only leaf
/// lost: the scan takes no leaf of the former volume, so none of its files comes back as
/// this volume's.
#[test]
fn a_former_volumes_leaves_give_no_file() {
    let (dev, vol) = fresh();
    for i in 0..300u64 {
        vol.create(format!("former {i}").as_bytes()).unwrap();
    }
    vol.close().unwrap();
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let ours: Vec<u64> = (0..3u64)
        .map(|i| vol.create(format!("ours {i}").as_bytes()).unwrap())
        .collect();
    vol.close().unwrap();
    // Checkpoints that change nothing: the leaf's earlier copies are freed, and this
    // volume's generation passes the former's.
    for _ in 0..4 {
        Volume::open(dev.clone(), Policy::default())
            .unwrap()
            .close()
            .unwrap();
    }
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    drop(vol);
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let former: Vec<u64> = report
        .recovered
        .iter()
        .map(|r| r.1)
        .chain(report.lost.iter().filter_map(|l| l.id))
        .filter(|id| !ours.contains(id))
        .collect();
    assert!(former.is_empty(), "the former volume's files: {former:?}");
    let scan = report.tree_scan.clone().expect("a scan");
    assert!(scan.foreign_leaves > 0, "{scan:?}");
    for (i, &id) in ours.iter().enumerate() {
        if let Ok(attr) = vol.attr(id) {
            assert_eq!(attr, format!("ours {i}").into_bytes(), "file {id}");
        }
    }
}

/// A leaf's bytes written into a file's data by its owner (who can write a file but not
/// read the device, so knows no stamp): whole, naming the block it lies in and the lost
/// root's generation (or generation 0 or 1, older than any stamp), with entries for files
/// there are and one there is not. The root then
/// lost: the scan leaves the forged leaf out, so no file takes its bytes.
#[test]
fn a_leaf_forged_in_a_files_data_gives_nothing() {
    let (dev, vol) = fresh();
    let ids = made(&vol, 20, "file");
    let carrier = vol.create(b"the forger's file").unwrap();
    vol.write(carrier, 0, &[7u8; BS as usize]).unwrap();
    let block = vol.extents(carrier).unwrap()[0].extent.start;
    vol.close().unwrap();
    let payload = leaf_payload(ids.iter().copied().take(5).chain([9_999]), b"forged");
    // The stamp guessed, and the generation named: the root node's, or the oldest ones
    // (an unstamped node older than the stamp would be an upgraded volume's own).
    for (guess, old) in [(0, None), (1, None), (0, Some(0)), (0, Some(1))] {
        let image = Arc::new(MemDevice::new(8192 * BS));
        let mut raw = vec![0u8; BS as usize];
        for b in 0..8192 {
            dev.read_at(&mut raw, b * BS).unwrap();
            image.write_at(&raw, b * BS).unwrap();
        }
        // Written through the volume, as the file's owner would, naming the root node's
        // generation (the overwrite changes no entry: the root node stays).
        let vol = Volume::open(image.clone(), Policy::default()).unwrap();
        let generation = volume_root(vol.store())
            .unwrap()
            .tree
            .unwrap()
            .root
            .generation;
        let at = node::NodeRef {
            block,
            generation: old.unwrap_or(generation),
        };
        let leaf = node::encode(BS as usize, (0, 6), &payload, at, guess);
        vol.write(carrier, 0, &leaf).unwrap();
        vol.close().unwrap();
        image.read_at(&mut raw, block * BS).unwrap();
        assert_eq!(raw, leaf, "the file's data lies in block {block}");
        let vol = Volume::open(image.clone(), Policy::default()).unwrap();
        let tree = volume_root(vol.store()).unwrap().tree.unwrap();
        assert_eq!(tree.root.generation, generation, "the root node stays");
        drop(vol);
        image
            .write_at(&[0u8; BS as usize], tree.root.block * BS)
            .unwrap();
        let (salvaged, report) = Volume::open_salvaging(image, Policy::default()).unwrap();
        let scan = report.tree_scan.clone().expect("a scan");
        assert_eq!(scan.foreign_leaves, 1, "stamp {guess}, {old:?}: {scan:?}");
        assert!(
            salvaged.attr(9_999).is_err(),
            "stamp {guess}, {old:?}: {report:?}"
        );
        for &id in &ids {
            if let Ok(attr) = salvaged.attr(id) {
                assert_ne!(
                    attr,
                    b"forged".to_vec(),
                    "stamp {guess}, {old:?}: file {id}"
                );
            }
        }
    }
}

/// A former volume's leaf where this volume's leaf lies, naming the same block and
/// generation (a stale block from before the volume was made over it): whole, so only
/// its stamp tells it apart. The walk loses its keys instead of taking its entries, and
/// no file takes the former volume's bytes.
#[test]
fn a_former_volumes_leaf_where_a_leaf_lies_gives_nothing() {
    let (dev, model, tree, _, _) = two_checkpoints();
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, tree.root.block * BS).unwrap();
    let d = node::decode(&raw, tree.root).unwrap();
    assert_eq!(d.level, 1, "a root over leaves");
    let child = node::decode_children(&d, tree.root.generation).unwrap()[0];
    dev.read_at(&mut raw, child.at.block * BS).unwrap();
    let leaf = node::decode(&raw, child.at).unwrap();
    let ids: Vec<u64> = table::frames(&leaf.payload)
        .unwrap()
        .iter()
        .map(|b| table::frame_id(b).unwrap())
        .collect();
    let stamp = tree.stamp.expect("a stamped root").value;
    let payload = leaf_payload(ids.iter().copied(), b"former");
    let former = node::encode(
        BS as usize,
        (0, ids.len() as u32),
        &payload,
        child.at,
        !stamp,
    );
    dev.write_at(&former, child.at.block * BS).unwrap();
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert!(
        scan.nodes_lost
            .iter()
            .any(|(b, why)| *b == child.at.block && why.contains("stamp")),
        "{scan:?}"
    );
    let vol = settle(&dev, vol);
    for &id in model.keys() {
        if let Ok(attr) = vol.attr(id) {
            assert_ne!(attr, b"former".to_vec(), "file {id}");
        }
    }
    assert_no_block_shared(&vol);
}

/// The scan tells its caller how far it has read: after each chunk, the blocks read so
/// far, rising, never past the blocks it says it will read, and at the end all of them.
#[test]
fn the_scan_reports_its_progress() {
    let (dev, _, tree, _, _) = two_checkpoints();
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let progress = |p: crate::volume::ScanProgress| seen.lock().unwrap().push(p);
    let (_, report) = Volume::open_salvaging_reporting(
        dev.clone(),
        Policy::default(),
        &NodeScans::new(&progress),
    )
    .unwrap();
    let scan = report.tree_scan.expect("a scan");
    let seen = seen.into_inner().unwrap();
    assert!(seen.len() > 1, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].blocks_read < w[1].blocks_read));
    assert!(seen.iter().all(|p| p.blocks_read <= p.blocks_to_read));
    let last = seen.last().unwrap();
    assert_eq!(
        (last.blocks_read, last.blocks_to_read),
        (scan.blocks_read, scan.blocks_read)
    );
}
