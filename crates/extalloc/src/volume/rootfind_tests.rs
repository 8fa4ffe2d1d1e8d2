//! A lost root of the file tree made again by a repair's open (`rootfind.rs`): over
//! internal nodes and over leaves, with the journal's changes after it, and refused (the
//! salvage then) when what was found does not count what the root counted.

use super::super::salvage_tests::{assert_intact, build, bytes_of, poke, Model, BS};
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::geometry::Geometry;
use crate::volume::load::volume_root;
use crate::volume::record::MapRef;
use crate::volume::root::{RootFound, TreeRoot};
use crate::volume::table::{self, TableFile};
use crate::volume::{node, MendedLeaves, NodeScans, Volume};
use std::collections::HashMap;
use std::sync::Arc;

/// Each file's id and attribute.
type Attrs = Vec<(u64, Vec<u8>)>;

/// A volume of 6,000 files whose tree has three levels, closed: the device, each file's id
/// and attribute, and the tree's root.
fn three_levels() -> (Arc<MemDevice>, Attrs, TreeRoot) {
    three_levels_then(|_, _| ())
}

/// [`three_levels`], `then` called on the volume and its files before it closes.
fn three_levels_then(then: impl FnOnce(&Volume, &Attrs)) -> (Arc<MemDevice>, Attrs, TreeRoot) {
    let dev = Arc::new(MemDevice::new(8192 * BS));
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let attr = |i: u64| format!("file {i:05} {}", "y".repeat(100)).into_bytes();
    let files: Attrs = (0..6000)
        .map(|i| (vol.create(&attr(i)).unwrap(), attr(i)))
        .collect();
    then(&vol, &files);
    vol.close().unwrap();
    let tree = tree_of(&dev);
    (dev, files, tree)
}

/// The durable file tree's root.
fn tree_of(dev: &Arc<MemDevice>) -> TreeRoot {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let t = volume_root(vol.store()).unwrap().tree.unwrap();
    drop(vol);
    t
}

/// The children of the node `at`, read and checked, and its level.
fn children_of(dev: &Arc<MemDevice>, at: node::NodeRef) -> (u8, Vec<node::ChildRef>) {
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, at.block * BS).unwrap();
    let d = node::decode(&raw, at).unwrap();
    (d.level, node::decode_children(&d, at.generation).unwrap())
}

/// Opens for repair and mends: the root made again, no hole scanned for, nothing lost, no
/// block mapped free or twice. The volume and the mend's report.
fn made_again(dev: &Arc<MemDevice>) -> (Volume, MendedLeaves) {
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    assert!(mended.root_found.is_some(), "{mended:?}");
    assert!(
        mended.tree_scan.is_none() && mended.lost.is_empty(),
        "{mended:?}"
    );
    assert!(
        mended.recovered.is_empty() && mended.leaves.is_empty(),
        "{mended:?}"
    );
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    (vol, mended)
}

/// The bitmaps rebuilt, `vol` closed and opened again: a clean volume, whose root lies
/// elsewhere than `lost`.
fn rebuilt_and_reopened(dev: &Arc<MemDevice>, vol: Volume, lost: u64) -> Volume {
    vol.rebuild_allocation().unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    let t = volume_root(vol.store()).unwrap().tree.unwrap();
    assert_ne!(t.root.block, lost, "a new root");
    vol
}

/// The root of a tree of three levels damaged (a byte flipped: it still reads as an
/// internal node, which fails its check): the repair's open makes it again over the
/// internal nodes under it, every file is kept as it was, and nothing is salvaged.
#[test]
fn a_lost_root_over_internal_nodes_is_made_again() {
    let (dev, files, tree) = three_levels();
    let (level, children) = children_of(&dev, tree.root);
    assert_eq!(level, 2, "three levels");
    poke(&dev, tree.root.block * BS + 200, |b| b ^ 0x40);
    let (vol, mended) = made_again(&dev);
    let found = mended.root_found.clone().unwrap();
    assert_eq!(found.lost.0, tree.root.block, "{found:?}");
    assert!(
        found.lost.1.contains("crc32c"),
        "why, as its check tells: {found:?}"
    );
    assert_eq!(found.level, 2, "{found:?}");
    assert_eq!(found.children, children.len() as u64, "{found:?}");
    let vol = rebuilt_and_reopened(&dev, vol, tree.root.block);
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    let (level, again) = children_of(&dev, volume_root(vol.store()).unwrap().tree.unwrap().root);
    assert_eq!(level, 2);
    let places = |c: &[node::ChildRef]| c.iter().map(|c| c.at).collect::<Vec<_>>();
    assert_eq!(places(&again), places(&children), "the same children");
}

/// The root of a tree of two levels zeroed after the journal took changes (a file made
/// and written, another unlinked, the daemon gone before a checkpoint): the root is made
/// again over the leaves, the changes replay onto it, and every file reads as the journal
/// left it.
#[test]
fn a_zeroed_root_over_leaves_is_made_again_under_the_journals_changes() {
    let (dev, mut model): (Arc<MemDevice>, Model) = build();
    let tree = tree_of(&dev);
    assert_eq!(children_of(&dev, tree.root).0, 1, "two levels");
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let newer = vol.create(b"made after the checkpoint").unwrap();
    vol.write(newer, 0, &bytes_of(newer, 9000)).unwrap();
    let gone = *model.keys().nth(3).unwrap();
    vol.unlink(gone).unwrap();
    vol.sync().unwrap();
    drop(vol);
    model.remove(&gone);
    assert_eq!(tree_of(&dev).root, tree.root, "no checkpoint since");
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    let (vol, mended) = made_again(&dev);
    assert_eq!(mended.root_found.clone().unwrap().level, 1, "{mended:?}");
    assert_intact(&vol, &model, &[]);
    assert_eq!(vol.read(newer, 0, 9000).unwrap(), bytes_of(newer, 9000));
    assert!(vol.size(gone).is_err(), "unlinked after the checkpoint");
    let vol = rebuilt_and_reopened(&dev, vol, tree.root.block);
    assert_intact(&vol, &model, &[]);
    assert_eq!(vol.read(newer, 0, 9000).unwrap(), bytes_of(newer, 9000));
    assert!(vol.size(gone).is_err());
}

/// The root lost with its first child (older than the root's generation): the other
/// child alone counts too few entries, so the root is made again a level down, over every
/// leaf (more than a node holds: the checkpoint's settle splits it), and every file is
/// kept.
#[test]
fn a_lost_root_and_child_are_made_again_a_level_down() {
    let (dev, files, tree) = three_levels();
    let (_, children) = children_of(&dev, tree.root);
    let (_, leaves) = children_of(&dev, children[0].at);
    assert!(children[0].at.generation < tree.root.generation);
    for b in [tree.root.block, children[0].at.block] {
        dev.write_at(&[0u8; BS as usize], b * BS).unwrap();
    }
    let (vol, mended) = made_again(&dev);
    let found = mended.root_found.clone().unwrap();
    assert_eq!(found.level, 1, "over the leaves: {found:?}");
    assert!(found.children > leaves.len() as u64, "{found:?}");
    let vol = rebuilt_and_reopened(&dev, vol, tree.root.block);
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    let root = volume_root(vol.store()).unwrap().tree.unwrap().root;
    assert_eq!(
        children_of(&dev, root).0,
        2,
        "split into three levels again"
    );
}

/// The keys of the leaf `at`, read and checked.
fn ids_in(dev: &Arc<MemDevice>, at: node::NodeRef) -> Vec<u64> {
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, at.block * BS).unwrap();
    let d = node::decode(&raw, at).unwrap();
    assert_eq!(d.level, 0, "a leaf");
    let items = crate::volume::tree::leaf_items(&d.payload).unwrap();
    items.keys().copied().collect()
}

/// Zeroes the first block of each node of `at`.
fn zero(dev: &Arc<MemDevice>, at: &[node::NodeRef]) {
    for n in at {
        dev.write_at(&[0u8; BS as usize], n.block * BS).unwrap();
    }
}

/// Mends `vol` (opened for repair, the root made again with a hole at the leaf `leaf`, of
/// which nothing survived but what the previous checkpoint's tree gives back: each of its
/// `gone` entries restored from there, lost, or uncounted; no other damage): nothing
/// mapped free or twice; the bitmaps rebuilt and the volume opened again, it checks
/// clean, every file of `files` is as it was but those of `gone` not restored, which are
/// gone. The root made again, as the mend reports it.
fn all_but_the_leaf(
    (dev, vol): (&Arc<MemDevice>, Volume),
    (leaf, gone): (u64, &[u64]),
    (files, lost_root): (&Attrs, u64),
) -> RootFound {
    let mended = vol.mend_unreadable_leaves().unwrap();
    assert_eq!(mended.leaves.len(), 1, "{mended:?}");
    assert_eq!(mended.leaves[0].0, leaf, "{mended:?}");
    // Each entry of the leaf counted once: restored, or found nowhere (uncounted, or in a
    // stretch of its bytes that decodes as no entry: reported lost, with no id).
    let (restored, uncounted) = (mended.restored.len(), mended.uncounted as usize);
    assert!(restored + uncounted <= gone.len(), "{mended:?}");
    assert!(
        restored + uncounted + mended.lost.len() >= gone.len(),
        "{mended:?}"
    );
    assert!(mended.restored.iter().all(|id| gone.contains(id)));
    assert!(mended.tree_scan.is_none(), "{mended:?}");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    let vol = rebuilt_and_reopened(dev, vol, lost_root);
    let lost = |id: &u64| gone.contains(id) && !mended.restored.contains(id);
    for (id, attr) in files {
        match lost(id) {
            true => assert!(vol.attr(*id).is_err(), "file {id} was the leaf's"),
            false => assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}"),
        }
    }
    let kept = files.iter().filter(|(id, _)| !lost(id)).count();
    assert_eq!(vol.file_count().unwrap(), kept as u64);
    mended.root_found.expect("the root made again")
}

/// The root lost with a leaf under its first child (zeroed: its block holds no node). The
/// child's subtree is taken with a hole where the leaf was: every node found lies under
/// the children taken, and what they hold, plus an entry for the hole, is no more than
/// the root counted. So the root is made again; the mend then finds the leaf as it finds
/// any leaf that does not read, and rebuilds its range (nothing of it survives: its
/// entries uncounted) on the page path, every other file kept as it was.
#[test]
fn a_lost_root_and_leaf_are_made_again_with_a_hole_for_the_mend() {
    let (dev, files, tree) = three_levels();
    let (_, children) = children_of(&dev, tree.root);
    let (_, leaves) = children_of(&dev, children[0].at);
    let leaf = leaves[leaves.len() / 2].at;
    let gone = ids_in(&dev, leaf);
    zero(&dev, &[tree.root, leaf]);
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let found = all_but_the_leaf((&dev, vol), (leaf.block, &gone), (&files, tree.root.block));
    assert_eq!(
        (found.level, found.levels_down, found.holes),
        (2, 0, 1),
        "{found:?}"
    );
    assert_eq!(found.children, children.len() as u64, "{found:?}");
}

/// The root lost with one of its children, and a leaf under another: no level counts what
/// the root counted, and with a hole for the leaf the lost child's leaves (found, whole)
/// lie under no node taken; below the children's level (the leaves') no node names a
/// hole. So no root is made (a range would be missing that the count can no longer
/// tell): the repair's open refuses, and the salvage's scan gives every file back but
/// the leaf's.
#[test]
fn a_node_found_under_nothing_taken_makes_no_root_with_holes() {
    let (dev, files, tree) = three_levels();
    let (_, children) = children_of(&dev, tree.root);
    // The last child carries the root's generation (the newest files), so a root over it
    // alone would pass that check.
    let last = children.last().unwrap().at;
    assert!(children.len() >= 2 && last.generation == tree.root.generation);
    let (_, leaves) = children_of(&dev, last);
    let leaf = leaves[leaves.len() / 2].at;
    let gone = ids_in(&dev, leaf);
    zero(&dev, &[tree.root, children[0].at, leaf]);
    assert!(Volume::open_for_repair(dev.clone(), Policy::default()).is_err());
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(
        report.tree_scan.is_some() && report.root_found.is_none(),
        "{report:?}"
    );
    for (id, attr) in files.iter().filter(|(id, _)| !gone.contains(id)) {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
}

/// A whole leaf of this volume, no newer than the root, in a block the allocator holds
/// (a freed leaf's bytes in a block handed out again and not written yet), with keys the
/// tree no longer holds, and the root lost with a leaf: the count cannot refuse a root
/// with a hole (the stale leaf's keys could stand for the hole's), but the stale leaf
/// lies under no node taken at any level, so no root is made; the salvage's scan judges
/// each entry and every file but the lost leaf's is kept.
#[test]
fn a_stale_leaf_in_a_held_block_makes_no_root_with_holes() {
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
    let stale = stale_leaf(&tree, carrier.1);
    dev.write_at(&stale, carrier.1 * BS).unwrap();
    zero(&dev, &[tree.root, leaf]);
    assert!(Volume::open_for_repair(dev.clone(), Policy::default()).is_err());
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(report.root_found.is_none(), "{report:?}");
    for (id, attr) in files.iter().filter(|(id, _)| !gone.contains(id)) {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
}

/// The root lost with the leaf holding a map outside the tree (a long map, in a map
/// segment: the leaf is marked, so the repair's open must read it). The root is made
/// again with a hole there; the walk under it finds the leaf failed and gives a partial
/// tree (no checkpoint runs before the mend), and the mend rebuilds the leaf's range: its
/// files are lost (nothing of the leaf survives), the segment owned by no one is freed by
/// the bitmaps' rebuild, and every other file is kept as it was.
#[test]
fn a_lost_root_and_marked_leaf_are_made_again_and_mended() {
    let (dev, files, tree) = three_levels_then(|vol, files| {
        let long = files[3000].0;
        for b in 0..8 {
            vol.write(long, 2 * b * BS, &bytes_of(long + b, BS as usize))
                .unwrap();
        }
    });
    let long = files[3000].0;
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let place = (vol.places().unwrap().into_iter())
        .find(|p| p.id == long)
        .unwrap();
    assert!(place.map.is_some(), "a map in a segment: {place:?}");
    drop(vol);
    let block = place.table.start / BS;
    let (_, children) = children_of(&dev, tree.root);
    let leaf = (children.iter())
        .flat_map(|c| children_of(&dev, c.at).1)
        .map(|c| c.at)
        .find(|at| at.block == block)
        .expect("the leaf under a child of the root");
    let gone = ids_in(&dev, leaf);
    assert!(gone.contains(&long));
    zero(&dev, &[tree.root, leaf]);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    assert!(vol.checkpoint().is_err(), "no checkpoint before the mend");
    let found = all_but_the_leaf((&dev, vol), (leaf.block, &gone), (&files, tree.root.block));
    assert_eq!(found.holes, 1, "{found:?}");
}

/// A whole leaf of the volume `tree` is the root of, at its root's generation, at
/// `block`, with the keys 9,000 to 9,004 (files no tree holds): a freed leaf's bytes.
fn stale_leaf(tree: &TreeRoot, block: u64) -> Vec<u8> {
    let stamp = tree.stamp.expect("a stamped tree").value;
    let mut payload = Vec::new();
    for id in 9_000..9_005 {
        let f = TableFile {
            id,
            size: 0,
            attr: b"stale".to_vec(),
            placement: None,
            map: MapRef::Inline(Vec::new()),
        };
        table::put_file_frame(&mut payload, &table::file_body(&f));
    }
    let at = node::NodeRef {
        block,
        generation: tree.root.generation,
    };
    node::encode(BS as usize, (0, 5), &payload, at, stamp)
}

/// A whole leaf of this volume, no newer than the root, in a block the allocator holds
/// (as a freed leaf's bytes stay in a block handed out again and not written yet), with
/// keys the tree no longer holds: made a child of the new root it would bring those files
/// back, so the count refuses the root (the salvage's scan then judges each entry).
#[test]
fn a_stale_leaf_in_a_held_block_makes_no_root() {
    let (dev, model) = build();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let carrier = vol.create(b"the carrier").unwrap();
    vol.write(carrier, 0, &[7u8; BS as usize]).unwrap();
    let block = vol.extents(carrier).unwrap()[0].extent.start;
    vol.close().unwrap();
    let tree = tree_of(&dev);
    dev.write_at(&stale_leaf(&tree, block), block * BS).unwrap();
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    assert!(Volume::open_for_repair(dev.clone(), Policy::default()).is_err());
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(report.root_found.is_none(), "{report:?}");
    assert_intact(&vol, &model, &[]);
}

/// The scan for a lost root's children tells its caller how far it has gone, to the end of
/// what it reads, and the mend reports as many blocks read.
#[test]
fn the_scan_for_a_lost_roots_children_reports_its_progress() {
    let (dev, _, tree) = three_levels();
    poke(&dev, tree.root.block * BS + 200, |b| b ^ 0x40);
    let seen = std::cell::RefCell::new(Vec::new());
    let progress = |p| seen.borrow_mut().push(p);
    let scans = NodeScans::new(&progress);
    let vol = Volume::open_for_repair_reporting(dev.clone(), Policy::default(), &scans).unwrap();
    let found = vol.mend_unreadable_leaves().unwrap().root_found.unwrap();
    let seen = seen.into_inner();
    assert!(seen.len() > 1, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].blocks_read < w[1].blocks_read));
    let last = seen.last().unwrap();
    assert_eq!(last.blocks_read, last.blocks_to_read);
    assert_eq!(last.blocks_read, found.blocks_read);
}

/// The root lost where the tree's nodes lie in a group held corrupt (its bitmap damaged):
/// that bitmap cannot say which of the group's nodes are held, and every node ever freed
/// there would pass for one, so none of them is taken; the root is not made again and the
/// salvage (which judges each entry) gives every file back.
#[test]
fn nodes_in_a_group_held_corrupt_make_no_root() {
    let (dev, files, tree) = three_levels();
    let sb = crate::disk::format::read_superblock(dev.as_ref()).unwrap();
    let group = tree.root.block / 1024;
    poke(
        &dev,
        (sb.bitmap_start + group * u64::from(sb.bitmap_blocks)) * BS + 100,
        |b| b ^ 1,
    );
    dev.write_at(&[0u8; BS as usize], tree.root.block * BS)
        .unwrap();
    assert!(Volume::open_for_repair(dev.clone(), Policy::default()).is_err());
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(vol.store().corrupt_groups().contains(&group), "{report:?}");
    assert!(report.root_found.is_none(), "{report:?}");
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
}

/// The nodes a scan would note under a lost root of a tree of four levels (generation 2):
/// three nodes of level 2, each over three of level 1, each over three leaves of two
/// entries (keys `10 i` and `10 i + 1` in leaf `i`); the path to the last leaf at the
/// root's generation, the rest older. Leaf `i` lies at block `1000 + i`, the nodes of
/// level 1 at `100 + j`, those of level 2 at `10 + k`. And the lost root's.
fn four_levels() -> (HashMap<u64, super::Node>, TreeRoot) {
    let at = |block, newest| node::NodeRef {
        block,
        generation: if newest { 2 } else { 1 },
    };
    let child = |first, at| node::ChildRef {
        first,
        at,
        marks: 0,
    };
    let mut nodes = HashMap::new();
    for i in 0..27u64 {
        let sum = super::Sum {
            lo: 10 * i,
            hi: 10 * i + 1,
            count: 2,
            marks: 0,
            holes: 0,
        };
        let n = super::Node {
            at: at(1000 + i, i == 26),
            level: 0,
            leaf: Some(sum),
            children: Vec::new(),
        };
        nodes.insert(n.at.block, n);
    }
    for (level, base, under, fan) in [(1u8, 100u64, 1000u64, 9u64), (2, 10, 100, 3)] {
        for j in 0..fan {
            let children = (3 * j..3 * j + 3)
                .map(|c| {
                    let first = 10 * c * if level == 1 { 1 } else { 3 };
                    child(first, nodes[&(under + c)].at)
                })
                .collect();
            let n = super::Node {
                at: at(base + j, j == fan - 1),
                level,
                leaf: None,
                children,
            };
            nodes.insert(n.at.block, n);
        }
    }
    let t = TreeRoot {
        root: at(1, true),
        count: 54,
        generation: 2,
        retired: 0,
        previous: None,
        holds: 0,
        stamp: None,
    };
    (nodes, t)
}

/// What the root made again over `nodes` names: its children's level, how far below the
/// highest level of the root's generation, the holes, the children.
fn chosen(nodes: &HashMap<u64, super::Node>, t: &TreeRoot) -> Option<(u8, u8, u64, usize)> {
    let c = super::choose(nodes, t)?;
    Some((c.level, c.top - c.level, c.holes, c.children.len()))
}

/// The choice of children, on a tree of four levels (too many files for a volume in a
/// test): whole, over the three nodes of level 2; a leaf lost, with a hole there; a node
/// of level 2 lost too, a level down, over the nine of level 1 with the hole (the nodes
/// above are left to the bitmaps' rebuild); with a stale leaf besides (in no subtree
/// taken), none at all. (A stale leaf holding exactly as many entries as the lost one
/// would pass the leaves' count, as it always could: the count is the whole check there.)
#[test]
fn a_root_with_holes_is_made_at_the_highest_level_that_holds_every_node_found() {
    let (mut nodes, t) = four_levels();
    assert_eq!(chosen(&nodes, &t), Some((2, 0, 0, 3)));
    nodes.remove(&1013); // leaf 13, under the node of level 1 at 104, under 11
    assert_eq!(chosen(&nodes, &t), Some((2, 0, 1, 3)));
    nodes.remove(&10); // a node of level 2, over 100..=102
    assert_eq!(chosen(&nodes, &t), Some((1, 1, 1, 9)));
    let stale = super::Node {
        at: node::NodeRef {
            block: 2000,
            generation: 1,
        },
        level: 0,
        leaf: Some(super::Sum {
            lo: 900,
            hi: 902,
            count: 3, // not the lost leaf's 2: the leaves' count refuses too
            marks: 0,
            holes: 0,
        }),
        children: Vec::new(),
    };
    nodes.insert(2000, stale);
    assert_eq!(chosen(&nodes, &t), None);
}
