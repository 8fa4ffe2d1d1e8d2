//! `fsck --repair`'s page path at the volume level on a file tree that lost an internal
//! node under its root: the repair's open takes the tree with a hole, no checkpoint writes
//! it, and the mend (`leafrepair.rs`) fills it from the device scan; over a pending file
//! too, over maps in map segments (kept where they lie), and whatever the hole's block
//! reads as now.

use super::super::salvage_tests::{poke, BS};
use super::volume_tests::fresh;
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::volume::load::volume_root;
use crate::volume::root::TreeRoot;
use crate::volume::{node, MendedLeaves, TreeScan, Volume};
use std::sync::Arc;

/// Each file's id and attribute.
type Attrs = Vec<(u64, Vec<u8>)>;

/// A volume of 6,000 files whose tree has three levels, with one internal node under the
/// root flipped (returned: its block), and each file's attribute.
fn internal_node_flipped() -> (Arc<MemDevice>, Attrs, u64) {
    internal_node_damaged(|dev, at, _| poke(dev, at.block * BS + 200, |b| b ^ 0x40))
}

/// [`internal_node_flipped`] with the damage `damage` makes to the node (given its place and
/// the volume's stamp).
fn internal_node_damaged(
    damage: impl Fn(&MemDevice, node::NodeRef, u64),
) -> (Arc<MemDevice>, Attrs, u64) {
    let (dev, vol) = fresh();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let files: Vec<(u64, Vec<u8>)> = (0..6000)
        .map(|i| (vol.create(&attr(i)).unwrap(), attr(i)))
        .collect();
    vol.close().unwrap();
    let (inner, stamp) = middle_child(&dev);
    damage(&dev, inner.at, stamp);
    (dev, files, inner.at.block)
}

/// The middle child of the durable file tree's root (a tree of three levels), with the
/// tree's stamp.
fn middle_child(dev: &Arc<MemDevice>) -> (node::ChildRef, u64) {
    let tree = {
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        volume_root(vol.store()).unwrap().tree.unwrap()
    };
    let children = root_children(dev, &tree);
    let stamp = tree.stamp.expect("a stamped tree").value;
    (children[children.len() / 2], stamp)
}

/// Flips a byte of the node at `block`, then opens for repair and mends: the node lost,
/// no entry lost, no block mapped free or twice. The volume, the mend's report, its scan.
fn mend_flipped(dev: &Arc<MemDevice>, block: u64) -> (Volume, MendedLeaves, TreeScan) {
    poke(dev, block * BS + 200, |b| b ^ 0x40);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let scan = mended.tree_scan.clone().expect("the hole scanned for");
    assert_eq!(scan.nodes_lost[0].0, block, "{scan:?}");
    // Why, as its check tells it (not only that the open lost it).
    assert!(scan.nodes_lost[0].1.contains("crc32c"), "{scan:?}");
    assert!(mended.lost.is_empty(), "{mended:?}");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    (vol, mended, scan)
}

/// The bitmaps rebuilt, `vol` closed and opened again: a clean volume.
fn rebuilt_and_reopened(dev: &Arc<MemDevice>, vol: Volume) -> Volume {
    vol.rebuild_allocation().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol
}

/// The children of `tree`'s root, a node of level 2 (a tree of three levels).
fn root_children(dev: &Arc<MemDevice>, tree: &TreeRoot) -> Vec<node::ChildRef> {
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, tree.root.block * BS).unwrap();
    let d = node::decode(&raw, tree.root).unwrap();
    assert_eq!(d.level, 2, "three levels");
    node::decode_children(&d, tree.root.generation).unwrap()
}

/// An internal node's block overwritten by a whole empty leaf naming that very place,
/// checkpoint and stamp (what its parent names is a node of level 1): the open loses the
/// node, and the mend fills the hole without reading it as the leaf it now looks like
/// (it once took it for a good leaf, left the hole, and tripped an assertion).
#[test]
fn a_hole_whose_block_reads_as_a_leaf_is_still_mended() {
    let (dev, files, inner) = internal_node_damaged(|dev, at, stamp| {
        let leaf = node::encode(BS as usize, (0, 0), &[], at, stamp);
        dev.write_at(&leaf, at.block * BS).unwrap();
    });
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let scan = mended.tree_scan.clone().expect("the hole scanned for");
    assert_eq!(scan.nodes_lost[0].0, inner, "{scan:?}");
    vol.rebuild_allocation().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    assert!(vol.check().unwrap().clean());
}

/// The same damage repaired a page at a time (`fsck --repair`'s page path): the open for
/// repair takes the tree with a hole where the node was, refuses to write it until it is
/// mended, and the mend fills it from the device scan: every file back, nothing lost, a
/// clean volume after the bitmaps' rebuild, and the node's key range under new nodes.
#[test]
fn a_lost_internal_node_is_mended_without_every_file_in_memory() {
    let (dev, files, inner) = internal_node_flipped();
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    // No checkpoint writes a tree with a hole: the close fails and changes nothing.
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    assert!(vol.close().is_err(), "a close before the mend");
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let scan = mended.tree_scan.clone().expect("the holes scanned for");
    assert_eq!(scan.nodes_lost.len(), 1, "{scan:?}");
    assert_eq!(scan.nodes_lost[0].0, inner);
    assert!(scan.entries > 100, "{scan:?}");
    assert!(
        mended.leaves.is_empty() && mended.lost.is_empty(),
        "{mended:?}"
    );
    assert_eq!(mended.recovered.len() as u64, scan.entries);
    assert!(mended.recovered.iter().all(|&(now, was)| now == was));
    assert_eq!(
        mended.leaked_bound(),
        None,
        "the subtree's blocks are not counted"
    );
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    vol.rebuild_allocation().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    assert_eq!(vol.file_count().unwrap(), files.len() as u64);
    assert!(vol.check().unwrap().clean());
}

/// A pending file (made, written and checkpointed, never published, then a crash) under
/// the lost node: the root marks that node as holding one, which a repair's open does not
/// need (it removes pending files), so the page path still mends the hole; the mend does
/// not keep the pending file (as an open removes it), and the rebuild frees its blocks.
#[test]
fn a_lost_node_over_a_pending_file_is_mended_without_it() {
    let (dev, vol) = fresh();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let ids: Vec<u64> = (0..6000).map(|i| vol.create(&attr(i)).unwrap()).collect();
    let pending = vol.create_pending().unwrap();
    vol.write(pending, 0, &[5u8; 20_000]).unwrap();
    vol.checkpoint().unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    vol.store().abandon(); // a crash: the pending file stays in the tree
    drop(vol);
    // The root's last child holds the newest ids, the pending file's among them.
    let last = *root_children(&dev, &tree).last().unwrap();
    assert_eq!(last.marks, node::MARK_PENDING, "{last:?}");
    poke(&dev, last.at.block * BS + 200, |b| b ^ 0x40);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let scan = mended.tree_scan.clone().expect("the hole scanned for");
    assert_eq!(scan.nodes_lost[0].0, last.at.block, "{scan:?}");
    let dropped: Vec<Option<u64>> = mended.lost.iter().map(|l| l.id).collect();
    assert_eq!(dropped, [Some(pending)], "{mended:?}");
    assert_eq!(mended.recovered.len() as u64 + 1, scan.entries);
    vol.rebuild_allocation().unwrap();
    vol.remove_pending().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(vol.attr(id).unwrap(), attr(i as u64), "file {id}");
    }
    assert!(vol.size(pending).is_err(), "the pending file dropped");
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
}

/// Block `b` of file `id`'s data.
fn block_of(id: u64, b: u64) -> Vec<u8> {
    (0..BS).map(|i| (id * 31 + b * 7 + i / 64) as u8).collect()
}

/// Files whose maps lie in map segments (every other block written: eight extents, more
/// than an entry holds) under the lost node: the root marks that node as holding maps
/// outside the tree, and the page path still mends the hole. It keeps those maps where
/// they lie and holds them in the segments' accounts, so the files read back whole, the
/// checkpoints after the mend (one rewriting a kept map, which releases its old place)
/// keep the accounts right, and the volume checks clean.
#[test]
fn a_lost_node_over_maps_in_segments_is_mended_keeping_them() {
    let (dev, vol) = fresh();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let ids: Vec<u64> = (0..6000).map(|i| vol.create(&attr(i)).unwrap()).collect();
    let long: Vec<u64> = ids.iter().copied().step_by(250).collect();
    for &id in &long {
        for b in 0..8 {
            vol.write(id, b * 2 * BS, &block_of(id, b)).unwrap();
        }
    }
    vol.close().unwrap();
    let (inner, _) = middle_child(&dev);
    assert_eq!(inner.marks, node::MARK_MAPS, "{inner:?}");
    let (vol, mended, scan) = mend_flipped(&dev, inner.at.block);
    assert_eq!(mended.recovered.len() as u64, scan.entries);
    assert!(mended.recovered.iter().all(|&(now, was)| now == was));
    let under: Vec<u64> = (long.iter().copied())
        .filter(|id| mended.recovered.iter().any(|&(now, _)| now == *id))
        .collect();
    assert!(!under.is_empty(), "a long map under the lost node");
    let vol = rebuilt_and_reopened(&dev, vol);
    let read_back = |vol: &Volume| {
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(vol.attr(id).unwrap(), attr(i as u64), "file {id}");
        }
        for &id in &long {
            for b in 0..8 {
                let got = vol.read(id, b * 2 * BS, BS).unwrap();
                assert_eq!(got, block_of(id, b), "file {id} block {b}");
            }
        }
    };
    read_back(&vol);
    // A kept map rewritten (its old place released) and checkpointed.
    vol.write(under[0], BS, &block_of(under[0], 99)).unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    assert_eq!(vol.read(under[0], BS, BS).unwrap(), block_of(under[0], 99));
    assert_eq!(
        vol.read(under[0], 2 * BS, BS).unwrap(),
        block_of(under[0], 1)
    );
}

/// Changes synced after the last checkpoint (in the journal only, then a crash) to files
/// under the lost node, its last child (whose keys have no end, so new files lie under it
/// too): the open sets them aside and the mend applies them to the entries it keeps. A
/// file written since reads its new bytes, one unlinked since stays unlinked (reported
/// `removed`), one made since is there with its bytes, one made and unlinked since is
/// not; every other file is as it was, and the volume checks clean.
#[test]
fn a_lost_node_under_journal_changes_is_mended_with_them() {
    let (dev, vol) = fresh();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let ids: Vec<u64> = (0..6000).map(|i| vol.create(&attr(i)).unwrap()).collect();
    let (written, unlinked) = (ids[5990], ids[5991]);
    vol.write(written, 0, &block_of(written, 0)).unwrap();
    vol.checkpoint().unwrap();
    vol.write(written, BS, &block_of(written, 1)).unwrap();
    vol.unlink(unlinked).unwrap();
    let made = vol.create(b"made since").unwrap();
    vol.write(made, 0, &block_of(made, 0)).unwrap();
    let gone = vol.create(b"made and gone").unwrap();
    vol.unlink(gone).unwrap();
    vol.sync().unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    vol.store().abandon(); // a crash: the changes live in the journal only
    drop(vol);
    let last = *root_children(&dev, &tree).last().unwrap();
    assert!(last.first <= written, "{last:?}");
    let (vol, mended, _) = mend_flipped(&dev, last.at.block);
    assert_eq!(mended.removed, [unlinked], "{mended:?}");
    let vol = rebuilt_and_reopened(&dev, vol);
    for (i, &id) in ids.iter().enumerate().filter(|&(_, &id)| id != unlinked) {
        assert_eq!(vol.attr(id).unwrap(), attr(i as u64), "file {id}");
    }
    assert_eq!(
        vol.read(written, 0, 2 * BS).unwrap(),
        [block_of(written, 0), block_of(written, 1)].concat()
    );
    assert!(vol.attr(unlinked).is_err() && vol.attr(gone).is_err());
    assert_eq!(vol.attr(made).unwrap(), b"made since");
    assert_eq!(vol.read(made, 0, BS).unwrap(), block_of(made, 0));
    assert_eq!(vol.file_count().unwrap(), ids.len() as u64);
}

/// A volume of 6,000 files, `before`, a checkpoint, then `after` (synced, then a crash),
/// and the root's last child (keys with no end) flipped; the page path's mend of it (its
/// report), then the bitmaps' rebuild and a plain open. Returns the volume and the ids.
fn mended_after(
    before: impl Fn(&Volume, &[u64]),
    after: impl Fn(&Volume, &[u64]),
) -> (Volume, Vec<u64>, MendedLeaves) {
    let (dev, vol) = fresh();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let ids: Vec<u64> = (0..6000).map(|i| vol.create(&attr(i)).unwrap()).collect();
    before(&vol, &ids);
    vol.checkpoint().unwrap();
    after(&vol, &ids);
    vol.sync().unwrap();
    let tree = volume_root(vol.store()).unwrap().tree.unwrap();
    vol.store().abandon();
    drop(vol);
    let last = *root_children(&dev, &tree).last().unwrap();
    assert!(last.first <= ids[5990], "{last:?}");
    let (vol, mended, _) = mend_flipped(&dev, last.at.block);
    (rebuilt_and_reopened(&dev, vol), ids, mended)
}

/// An id unlinked and made again (`create_at`) after the checkpoint, under the lost node:
/// the scan's copy of the old file is not kept (under a fresh id, as the mend once kept
/// it: one file too many), as the replay drops it; the new file is there.
#[test]
fn an_id_made_again_since_does_not_bring_back_the_old_file() {
    let (vol, ids, mended) = mended_after(
        |_, _| {},
        |vol, ids| {
            vol.unlink(ids[5995]).unwrap();
            vol.create_at(ids[5995], b"made again").unwrap();
        },
    );
    assert_eq!(mended.removed, [ids[5995]], "{mended:?}");
    assert!(mended.recovered.iter().all(|(now, was)| now == was));
    assert_eq!(vol.attr(ids[5995]).unwrap(), b"made again");
    assert_eq!(vol.file_count().unwrap(), ids.len() as u64);
}

/// A sparse file (its size past its last mapped block) under the lost node, written
/// within its size after the checkpoint (no size change logged): the scan's entry is a
/// whole leaf's, so its size is its own (a damaged entry's is cut to its map's end).
#[test]
fn a_sparse_file_under_a_lost_node_keeps_its_size() {
    let (vol, ids, _) = mended_after(
        |vol, ids| {
            vol.write(ids[5993], 0, &block_of(ids[5993], 0)).unwrap();
            vol.truncate(ids[5993], 8 * BS).unwrap();
        },
        |vol, ids| {
            vol.write(ids[5993], 5 * BS, &block_of(ids[5993], 5))
                .unwrap()
        },
    );
    let x = ids[5993];
    assert_eq!(vol.size(x).unwrap(), 8 * BS);
    assert_eq!(vol.read(x, 0, BS).unwrap(), block_of(x, 0));
    assert_eq!(vol.read(x, 5 * BS, BS).unwrap(), block_of(x, 5));
}
