//! A lost root of the file tree made again over the leaves by the previous checkpoint's
//! tree (`rootleaves.rs`), end to end on a volume: the root lost with the path its
//! checkpoint wrote, with an older child (whose range is scanned for), with a child and
//! all its leaves; stale leaves and nodes in blocks a file holds left out (their entries,
//! if the scan meets them, judged as the salvage's are); nothing mapped free or twice.

use super::super::salvage_tests::{assert_intact, build, bytes_of, BS};
use super::holes_tests::{a_middle_leaf, ids_in, zero};
use super::tests::three_levels_then;
use super::tests::{children_of, rebuilt_and_reopened, stale_leaf, three_levels, tree_of, Attrs};
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::volume::record::MapRef;
use crate::volume::root::TreeRoot;
use crate::volume::table::{self, TableFile};
use crate::volume::{node, MendedLeaves, Volume};
use std::sync::Arc;

/// `lost` zeroed (`tree`'s root among them): a plain open refuses, the repair's open makes
/// the root again over the leaves, and the mend runs on the page path: nothing mapped free
/// or twice; the bitmaps rebuilt and the volume opened again, it checks clean, and every
/// file of `files` but those of `gone` is as it was. The volume and the mend's report.
fn over_the_leaves(
    dev: &Arc<MemDevice>,
    (tree, lost): (&TreeRoot, &[node::NodeRef]),
    (files, gone): (&Attrs, &[u64]),
) -> (Volume, MendedLeaves) {
    assert!(lost.contains(&tree.root));
    zero(dev, lost);
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let found = mended.root_found.clone().expect("the root made again");
    assert!(found.from_leaves && found.level == 1, "{found:?}");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    let vol = rebuilt_and_reopened(dev, vol, tree.root.block);
    for (id, attr) in files.iter().filter(|(id, _)| !gone.contains(id)) {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    (vol, mended)
}

/// The root lost with the whole path its checkpoint wrote (its last child and that
/// child's leaves of the root's generation: a checkpoint writes them close together, so
/// one failing region takes them all). No level of subtrees is whole; over the leaves,
/// the older ones the previous tree names are children, and the ranges the checkpoint
/// rewrote are scanned for: the leaves it replaced (held until the next checkpoint) give
/// their files back, judged, so only files newer than the previous checkpoint in the
/// zeroed leaves can be lost.
#[test]
fn a_root_lost_with_its_checkpoints_path_is_made_over_the_leaves() {
    let (dev, files, tree) = three_levels();
    let g = tree.root.generation;
    let (_, children) = children_of(&dev, tree.root);
    let last = children.last().unwrap().at;
    assert_eq!(last.generation, g, "the last child is the checkpoint's");
    let (_, leaves) = children_of(&dev, last);
    let newest: Vec<node::NodeRef> = (leaves.iter().map(|c| c.at))
        .filter(|at| at.generation == g)
        .collect();
    assert!(
        !newest.is_empty() && newest.len() < leaves.len(),
        "{leaves:?}"
    );
    let gone: Vec<u64> = newest.iter().flat_map(|&at| ids_in(&dev, at)).collect();
    let mut lost = vec![tree.root, last];
    lost.extend(&newest);
    let (vol, mended) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    let found = mended.root_found.clone().unwrap();
    assert_eq!(found.holes, 0, "every older leaf found: {found:?}");
    assert!(
        !found.scanned.is_empty() && mended.tree_scan.is_some(),
        "{mended:?}"
    );
    // The files the previous checkpoint's tree held come back from the leaves the lost
    // checkpoint replaced (held until the next one); only those made since are gone.
    let previous = tree.previous.unwrap().1;
    assert_eq!(vol.file_count().unwrap(), previous, "{mended:?}");
}

/// The root's last child (of its generation), the leaves under it, and the first of them
/// older than the root.
fn last_child(
    dev: &Arc<MemDevice>,
    tree: &TreeRoot,
) -> (node::NodeRef, Vec<node::ChildRef>, node::NodeRef) {
    let (_, children) = children_of(dev, tree.root);
    let last = children.last().unwrap().at;
    assert_eq!(last.generation, tree.root.generation);
    let (_, leaves) = children_of(dev, last);
    let older = (leaves.iter().map(|c| c.at))
        .find(|at| at.generation < tree.root.generation)
        .unwrap();
    (last, leaves, older)
}

/// The root lost with its last child (of the root's generation) and an older leaf under
/// it, after the journal took changes (a file of the newest leaf written and another
/// unlinked, a file made; the daemon gone before a checkpoint): over the leaves, the
/// older leaf is named (its files lost) and the newest leaf's range scanned for; the
/// changes to the files there, set aside by the open, apply to the entries the scan gives
/// back: the file reads as written, the new one exists, the unlinked one does not.
#[test]
fn the_journals_changes_apply_to_what_the_scan_gives_back() {
    let (dev, files, tree) = three_levels();
    let (last, leaves, older) = last_child(&dev, &tree);
    let newest = leaves.last().unwrap().at;
    assert_eq!(newest.generation, tree.root.generation);
    let ids = ids_in(&dev, newest);
    let (written, unlinked) = (ids[ids.len() - 1], ids[ids.len() - 2]);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    vol.write(written, 0, &bytes_of(written, 9000)).unwrap();
    vol.unlink(unlinked).unwrap();
    let made = vol.create(b"made after the checkpoint").unwrap();
    vol.write(made, 0, &bytes_of(made, 5000)).unwrap();
    vol.sync().unwrap();
    drop(vol);
    assert_eq!(tree_of(&dev).root, tree.root, "no checkpoint since");
    let mut gone = ids_in(&dev, older);
    gone.push(unlinked);
    let lost = [tree.root, last, older];
    let (vol, mended) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    assert_eq!(mended.root_found.unwrap().holes, 1);
    assert_eq!(vol.read(written, 0, 9000).unwrap(), bytes_of(written, 9000));
    assert_eq!(vol.read(made, 0, 5000).unwrap(), bytes_of(made, 5000));
    assert!(vol.size(unlinked).is_err(), "unlinked after the checkpoint");
}

/// The root lost with its first child, an older node the previous tree shares (so that
/// tree does not read whole either), and a leaf under that child: no level counts, and
/// the leaf's hole is named by nothing found. Over the leaves, the range under the child
/// is scanned for: every other leaf there, whole, gives its files back.
#[test]
fn a_root_lost_with_an_older_child_and_its_leaf_scans_for_the_childs_range() {
    let (dev, files, tree) = three_levels();
    let (_, children) = children_of(&dev, tree.root);
    assert!(children[0].at.generation < tree.root.generation);
    let leaf = a_middle_leaf(&dev, &tree);
    let gone = ids_in(&dev, leaf);
    let lost = [tree.root, children[0].at, leaf];
    let (vol, mended) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    assert!(mended.tree_scan.is_some(), "{mended:?}");
    assert_eq!(vol.file_count().unwrap(), (files.len() - gone.len()) as u64);
}

/// A copy of `dev`, for the salvage to open beside the page path.
fn copy_of(dev: &Arc<MemDevice>) -> Arc<MemDevice> {
    let size = dev.size();
    let mut bytes = vec![0u8; size as usize];
    dev.read_at(&mut bytes, 0).unwrap();
    let copy = Arc::new(MemDevice::new(size));
    copy.write_at(&bytes, 0).unwrap();
    copy
}

/// Whether file `id` is kept by the salvage of `dev` (a copy) as by the page path's
/// `vol`: a stale leaf in a file's block costs that file on both (the scan's leaf claims
/// the block the file maps).
fn as_the_salvage_keeps(dev: &Arc<MemDevice>, vol: &Volume, id: u64) {
    let (salvaged, _) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.attr(id).is_ok(), salvaged.attr(id).is_ok(), "file {id}");
    if let (Ok(size), Ok(_)) = (vol.size(id), salvaged.size(id)) {
        assert_eq!(
            vol.read(id, 0, size).unwrap(),
            salvaged.read(id, 0, size).unwrap()
        );
    }
}

/// The root lost with one of its children, and a leaf under another: no level counts what
/// the root counted, and with a hole for the leaf the lost child's leaves (found, whole)
/// lie under no node taken. Over the leaves: the child's range scanned for, the leaf (the
/// checkpoint's, under the last child) in a range it rewrote; every file but the leaf's
/// kept.
#[test]
fn a_node_found_under_nothing_taken_is_scanned_for_over_the_leaves() {
    let (dev, files, tree) = three_levels();
    let (_, children) = children_of(&dev, tree.root);
    // The last child carries the root's generation (the newest files), so a root over it
    // alone would pass that check.
    let last = children.last().unwrap().at;
    assert!(children.len() >= 2 && last.generation == tree.root.generation);
    let (_, leaves) = children_of(&dev, last);
    let leaf = leaves[leaves.len() / 2].at;
    let gone = ids_in(&dev, leaf);
    let lost = [tree.root, children[0].at, leaf];
    over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
}

/// The root, its first child and every leaf under it lost, and a leaf under the second
/// child: nothing names the first child's range, whose entries are more than one leaf
/// holds, so no root is made with holes (it would drop that range unseen). Over the
/// leaves the previous tree, whose node there did not read either, leaves that range to
/// the scan (nothing of it survives), and names the other leaf as lost: every other file
/// kept.
#[test]
fn a_child_lost_with_all_its_leaves_leaves_its_range_to_the_scan() {
    let (dev, files, tree) = three_levels();
    let (_, children) = children_of(&dev, tree.root);
    let (_, first) = children_of(&dev, children[0].at);
    let (_, second) = children_of(&dev, children[1].at);
    let leaf = second[second.len() / 2].at;
    let mut gone: Vec<u64> = first.iter().flat_map(|c| ids_in(&dev, c.at)).collect();
    gone.extend(ids_in(&dev, leaf));
    let mut lost: Vec<node::NodeRef> = first.iter().map(|c| c.at).collect();
    lost.extend([tree.root, children[0].at, leaf]);
    let (vol, mended) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    let found = mended.root_found.clone().unwrap();
    assert_eq!(found.holes, 1, "the second child's leaf: {found:?}");
    assert_eq!(mended.leaves.len(), 1, "{mended:?}");
    let kept = vol.file_count().unwrap();
    assert!(kept >= (files.len() - gone.len()) as u64, "{kept}");
}

/// A whole leaf of this volume carrying the root's generation (as a leaf of a checkpoint
/// cut short, whose blocks were handed out again and not written), in a block a file
/// holds, with keys the tree no longer holds, and the root lost: the count refuses every
/// level; over the leaves the range it lies in is one the checkpoint rewrote, so it is
/// met only by the scan, whose entries are judged as the salvage's are (its files, with
/// no blocks, kept as the salvage keeps them); every file is as it was, but the carrier
/// whose block the stale leaf lies in, which fares as on the salvage.
#[test]
fn a_stale_leaf_of_the_roots_generation_is_judged_by_the_scan() {
    let (dev, model) = build();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let carrier = vol.create(b"the carrier").unwrap();
    vol.write(carrier, 0, &[7u8; BS as usize]).unwrap();
    let block = vol.extents(carrier).unwrap()[0].extent.start;
    vol.close().unwrap();
    let tree = tree_of(&dev);
    dev.write_at(&stale_leaf(&tree, block), block * BS).unwrap();
    zero(&dev, &[tree.root]);
    let copy = copy_of(&dev);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let found = mended.root_found.clone().unwrap();
    assert!(found.from_leaves, "{found:?}");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    let vol = rebuilt_and_reopened(&dev, vol, tree.root.block);
    assert_intact(&vol, &model, &[]);
    as_the_salvage_keeps(&copy, &vol, carrier);
}

/// The same leaf with the root and a leaf lost (the count with holes cannot refuse: the
/// stale keys could stand for the hole's): over the leaves, every file but the lost
/// leaf's is kept, and the carrier fares as on the salvage.
#[test]
fn a_stale_leaf_in_a_held_block_with_a_leaf_lost() {
    let mut carrier = (0, 0);
    let (dev, files, tree) = three_levels_then(|vol, _| {
        let id = vol.create(b"the carrier").unwrap();
        vol.write(id, 0, &[7u8; BS as usize]).unwrap();
        carrier = (id, vol.extents(id).unwrap()[0].extent.start);
    });
    let (_, children) = children_of(&dev, tree.root);
    let (_, leaves) = children_of(&dev, children.last().unwrap().at);
    let leaf = leaves[leaves.len() / 2].at;
    let gone = ids_in(&dev, leaf);
    dev.write_at(&stale_leaf(&tree, carrier.1), carrier.1 * BS)
        .unwrap();
    let lost = [tree.root, leaf];
    zero(&dev, &lost);
    let copy = copy_of(&dev);
    let gone: Vec<u64> = gone.into_iter().chain([carrier.0]).collect();
    let (vol, _) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    as_the_salvage_keeps(&copy, &vol, carrier.0);
}

/// [`three_levels`] with a victim (a file of one block: its id and block) and a carrier
/// (a file of `blocks` blocks in one extent, whose first block is returned) made last.
fn victim_and_carrier(blocks: u64) -> (Arc<MemDevice>, Attrs, TreeRoot, (u64, u64), u64) {
    let (mut carrier, mut victim) = (0, (0, 0));
    let (dev, files, tree) = three_levels_then(|vol, _| {
        let v = vol.create(b"the victim").unwrap();
        vol.write(v, 0, &[9u8; BS as usize]).unwrap();
        victim = (v, vol.extents(v).unwrap()[0].extent.start);
        let id = vol.create(b"the carrier").unwrap();
        vol.write(id, 0, &vec![7u8; (blocks * BS) as usize])
            .unwrap();
        let e = vol.extents(id).unwrap()[0].extent;
        assert!(e.len >= blocks, "{e:?}");
        carrier = e.start;
    });
    (dev, files, tree, victim, carrier)
}

/// A stale subtree of two levels (an internal node over a leaf, both whole, of an older
/// generation, in blocks a file holds: a freed subtree's bytes in blocks handed out again
/// and not written, as fallocated ones are) whose keys lie outside every other's, its
/// leaf's first file mapping another file's block; the root lost with a leaf. No root with
/// holes (the previous tree does not name the stale node); over the leaves it is left
/// out, and where the scan meets its leaf each entry is judged: the one mapping the
/// victim's block is not kept, nothing is mapped twice, the victim's data is its own.
#[test]
fn a_stale_subtree_is_left_out_of_a_root_over_the_leaves() {
    let (dev, files, tree, victim, carrier) = victim_and_carrier(2);
    let leaf = a_middle_leaf(&dev, &tree);
    let gone = ids_in(&dev, leaf);
    let (stamp, g) = (tree.stamp.unwrap().value, tree.root.generation);
    let mut payload = Vec::new();
    for id in 9_000..9_005u64 {
        let map = match id {
            9_000 => vec![(0u64, crate::geometry::Extent::new(victim.1, 1), false)],
            _ => Vec::new(),
        };
        let f = TableFile {
            id,
            size: if id == 9_000 { BS } else { 0 },
            attr: b"stale".to_vec(),
            placement: None,
            map: MapRef::Inline(map),
        };
        table::put_file_frame(&mut payload, &table::file_body(&f));
    }
    let at = |block| node::NodeRef {
        block,
        generation: g - 1,
    };
    let stale_leaf = node::encode(BS as usize, (0, 5), &payload, at(carrier + 1), stamp);
    let over = node::ChildRef {
        first: 9_000,
        at: at(carrier + 1),
        marks: 0,
    };
    let children_bytes = node::encode_children(&[over]);
    let stale_node = node::encode(BS as usize, (1, 1), &children_bytes, at(carrier), stamp);
    dev.write_at(&stale_node, carrier * BS).unwrap();
    dev.write_at(&stale_leaf, (carrier + 1) * BS).unwrap();
    let (vol, _) = over_the_leaves(&dev, (&tree, &[tree.root, leaf]), (&files, &gone));
    assert!(
        vol.attr(9_000).is_err(),
        "the stale entry mapping the victim's block"
    );
    assert_eq!(vol.read(victim.0, 0, BS).unwrap(), vec![9u8; BS as usize]);
}

/// A stale internal node naming, as its leaf, a block that holds a live file's data (no
/// node there), and the root lost with a leaf: taken with holes, the mend would replace
/// that "leaf" and retire its block, a live file's. No root with holes (the previous tree
/// does not name the node); over the leaves no internal node is taken: the victim's data
/// is its own.
#[test]
fn a_stale_node_naming_a_data_block_is_left_out_of_a_root_over_the_leaves() {
    let (dev, files, tree, victim, carrier) = victim_and_carrier(1);
    let leaf = a_middle_leaf(&dev, &tree);
    let gone = ids_in(&dev, leaf);
    let (stamp, g) = (tree.stamp.unwrap().value, tree.root.generation);
    let at = |block| node::NodeRef {
        block,
        generation: g - 1,
    };
    let over = node::ChildRef {
        first: 9_000,
        at: at(victim.1),
        marks: 0,
    };
    let children_bytes = node::encode_children(&[over]);
    let stale_node = node::encode(BS as usize, (1, 1), &children_bytes, at(carrier), stamp);
    dev.write_at(&stale_node, carrier * BS).unwrap();
    let (vol, _) = over_the_leaves(&dev, (&tree, &[tree.root, leaf]), (&files, &gone));
    assert_eq!(vol.read(victim.0, 0, BS).unwrap(), vec![9u8; BS as usize]);
}

/// A file unlinked between the previous checkpoint and the lost one (its entry gone from
/// the lost checkpoint's leaf, which survives), the root lost with the last child and the
/// older leaf before that leaf: the older leaf is named as lost, and the new root routes
/// it up to the next child's least key, over the range left to the scan. The previous
/// tree's entries are given back only outside that range: the file stays removed, as the
/// salvage leaves it (a review's case).
#[test]
fn a_file_the_lost_checkpoint_removed_stays_removed() {
    let mut x = 0;
    let (dev, files, tree) = three_levels_then(|vol, files| {
        vol.checkpoint().unwrap();
        x = files[files.len() - 3].0;
        vol.unlink(x).unwrap();
    });
    let g = tree.root.generation;
    let (_, children) = children_of(&dev, tree.root);
    let last = children.last().unwrap().at;
    let (_, leaves) = children_of(&dev, last);
    let i = (0..leaves.len())
        .find(|&i| leaves[i].at.generation == g)
        .unwrap();
    let ids = ids_in(&dev, leaves[i].at);
    assert!(ids.iter().any(|&id| id < x) && ids.iter().any(|&id| id > x) && !ids.contains(&x));
    let older = leaves[i - 1].at;
    assert!(older.generation < g);
    let mut gone = ids_in(&dev, older);
    gone.push(x);
    let lost = [tree.root, last, older];
    let copy = copy_of(&dev);
    zero(&copy, &lost);
    let (vol, _) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    assert!(
        vol.attr(x).is_err(),
        "file {x}, unlinked before the lost checkpoint"
    );
    as_the_salvage_keeps(&copy, &vol, x);
}

/// The previous tree's last child, which the lost checkpoint replaced (held until the next
/// checkpoint), does not read either: its range is scanned for with the root's generation,
/// so the lost checkpoint's own leaves there give their files back (a review's case:
/// scanned with the older node's generation, the files made since were lost).
#[test]
fn an_unread_previous_node_the_checkpoint_replaced_keeps_its_newer_leaves() {
    let (dev, files, tree) = three_levels();
    let (last, _, older) = last_child(&dev, &tree);
    let (_, previous) = children_of(&dev, tree.previous.unwrap().0);
    let replaced = previous.last().unwrap().at;
    assert_ne!(replaced, last);
    let gone = ids_in(&dev, older);
    let lost = [tree.root, last, older, replaced];
    over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
}

/// The root lost with a middle child (older, shared by the previous tree, so that tree's
/// node there does not read either) and a leaf under the first child: the middle child's
/// range is scanned for, every file but the leaf's kept (a review's case, which a checked
/// build's assertion on the previous tree's leaves refused).
#[test]
fn an_unread_middle_node_of_the_previous_tree_is_scanned_for() {
    let (dev, files, tree) = three_levels_then(|vol, _| {
        for i in 0..12_000u64 {
            let attr = format!("more {i:05} {}", "z".repeat(100));
            vol.create(attr.as_bytes()).unwrap();
        }
    });
    let (_, children) = children_of(&dev, tree.root);
    assert!(children.len() >= 3 && children[1].at.generation < tree.root.generation);
    let leaf = a_middle_leaf(&dev, &tree);
    let gone = ids_in(&dev, leaf);
    let lost = [tree.root, children[1].at, leaf];
    let (vol, _) = over_the_leaves(&dev, (&tree, &lost), (&files, &gone));
    assert!(vol.file_count().unwrap() >= (files.len() - gone.len()) as u64);
}
