//! A lost root of the file tree made again by a repair's open with holes (`rootfind.rs`,
//! `Take::WithHoles`): a leaf lost with the root, marked or not, mended on the page path;
//! and no root with holes where a node found lies under no child taken, a stale node the
//! previous tree does not name would be taken, or the entries missing are more than the
//! holes hold (the root is then made over the leaves: `rootleaves_tests.rs`).

use super::super::salvage_tests::{bytes_of, BS};
use super::tests::{children_of, rebuilt_and_reopened, three_levels, three_levels_then, Attrs};
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::volume::root::{RootFound, TreeRoot};
use crate::volume::{node, Volume};
use std::collections::HashMap;
use std::sync::Arc;

/// The keys of the leaf `at`, read and checked.
pub(super) fn ids_in(dev: &Arc<MemDevice>, at: node::NodeRef) -> Vec<u64> {
    let mut raw = vec![0u8; BS as usize];
    dev.read_at(&mut raw, at.block * BS).unwrap();
    let d = node::decode(&raw, at).unwrap();
    assert_eq!(d.level, 0, "a leaf");
    let items = crate::volume::tree::leaf_items(&d.payload).unwrap();
    items.keys().copied().collect()
}

/// Zeroes the first block of each node of `at`.
pub(super) fn zero(dev: &Arc<MemDevice>, at: &[node::NodeRef]) {
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

/// The nodes a scan would note under a lost root of a tree of four levels (generation 2):
/// three nodes of level 2, each over three of level 1, each over three leaves of 150
/// entries (keys `1000 i` to `1000 i + 149` in leaf `i`); the path to the last leaf at the
/// root's generation, the rest older (shared with the previous checkpoint's tree, whose
/// nodes are returned, with its leaves as routed: the older ones, and the last leaf's
/// previous copy at block 1926, which the lost root's checkpoint replaced). Leaf `i` lies
/// at block `1000 + i`, the nodes of level 1 at `100 + j`, those of level 2 at `10 + k`.
/// And the lost root's.
fn four_levels() -> (HashMap<u64, super::Node>, TreeRoot, super::leaves::Previous) {
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
        let n = super::Node {
            at: at(1000 + i, i == 26),
            level: 0,
            leaf: Some(leaf_sum(1000 * i, 150)),
            children: Vec::new(),
        };
        nodes.insert(n.at.block, n);
    }
    for (level, base, under, fan) in [(1u8, 100u64, 1000u64, 9u64), (2, 10, 100, 3)] {
        for j in 0..fan {
            let children = (3 * j..3 * j + 3)
                .map(|c| {
                    let first = 1000 * c * if level == 1 { 1 } else { 3 };
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
        count: 27 * 150,
        generation: 2,
        retired: 0,
        previous: Some((at(2, false), 27 * 150)),
        holds: 0,
        stamp: None,
    };
    let mut previous = super::leaves::Previous {
        nodes: (nodes.values().map(|n| n.at))
            .filter(|at| at.generation == 1)
            .collect(),
        ..Default::default()
    };
    for i in 0..27u64 {
        let at = match i {
            26 => REPLACED,
            _ => at(1000 + i, false),
        };
        let keys = (
            if i == 0 { 0 } else { 1000 * i },
            (i < 26).then_some(1000 * (i + 1)),
        );
        previous.nodes.insert(at);
        previous.leaves.push((at, keys, 0));
    }
    (nodes, t, previous)
}

/// The previous copy of [`four_levels`]' last leaf, which the lost root's checkpoint
/// replaced (its chain lists it).
const REPLACED: node::NodeRef = node::NodeRef {
    block: 1926,
    generation: 1,
};

/// What a leaf of `count` entries from key `lo` on holds.
fn leaf_sum(lo: u64, count: u64) -> super::Sum {
    super::Sum {
        lo,
        hi: lo + count - 1,
        count,
        marks: 0,
        holes: 0,
        room: 0,
    }
}

/// What the root made again over `nodes` names (nodes of 4 KiB; `previous`: the previous
/// tree's nodes): its children's level, how far below the highest level of the root's
/// generation, the holes, the children.
fn chosen(
    nodes: &HashMap<u64, super::Node>,
    t: &TreeRoot,
    previous: &super::leaves::Previous,
) -> Option<(u8, u8, u64, usize)> {
    let previous = || Some(previous.clone());
    let retired = [crate::geometry::Extent::new(REPLACED.block, 1)];
    let c = super::choose(nodes, t, (4096, previous), (Some(&retired), 1))?;
    Some((c.level, c.top - c.level, c.holes, c.children.len()))
}

/// The choice of children, on a tree of four levels (too many files for a volume in a
/// test): whole, over the three nodes of level 2; a leaf lost, with a hole there; a node
/// of level 2 lost too, a level down, over the nine of level 1 with the hole (the nodes
/// above are left to the bitmaps' rebuild); with a stale leaf besides (in no subtree
/// taken), no level at all, but the leaves by the previous tree (`rootleaves.rs`): the
/// 25 older ones it names and the lost leaf 13 named as it named it (a hole), the stale
/// leaf left out (the previous tree does not name it), and the last leaf (the lost
/// root's generation, its range one the checkpoint rewrote) left to the mend's scan.
/// (A stale leaf holding exactly as many entries as the lost one would pass the leaves'
/// count with holes, as it always could: the count is the whole check there.)
#[test]
fn a_root_with_holes_is_made_at_the_highest_level_that_holds_every_node_found() {
    let (mut nodes, t, previous) = four_levels();
    assert_eq!(chosen(&nodes, &t, &previous), Some((2, 0, 0, 3)));
    nodes.remove(&1013); // leaf 13, under the node of level 1 at 104, under 11
    assert_eq!(chosen(&nodes, &t, &previous), Some((2, 0, 1, 3)));
    nodes.remove(&10); // a node of level 2, over 100..=102
    assert_eq!(chosen(&nodes, &t, &previous), Some((1, 1, 1, 9)));
    let stale = super::Node {
        at: node::NodeRef {
            block: 2000,
            generation: 1,
        },
        level: 0,
        leaf: Some(leaf_sum(900_000, 151)), // not the lost leaf's 150: the count refuses
        children: Vec::new(),
    };
    nodes.insert(2000, stale);
    assert_eq!(chosen(&nodes, &t, &previous), Some((0, 2, 1, 26)));
    // With no previous tree to tell the stale leaf from the tree's, none.
    let retired = [crate::geometry::Extent::new(REPLACED.block, 1)];
    let none = super::choose(&nodes, &t, (4096, || None), (Some(&retired), 1));
    assert!(none.is_none());
}

/// A stale internal node (one the previous tree does not name: freed before it, its bytes
/// left in a block handed out again), its keys overlapping none of the tree's, naming a
/// child found nowhere: with a leaf lost too, it would be taken with a hole of its own
/// and bring back entries no one judged. The previous tree does not name it: no root
/// with holes; over the leaves, the stale node is left out as every internal node is.
#[test]
fn a_stale_node_the_previous_tree_does_not_name_is_left_out() {
    let (mut nodes, t, previous) = four_levels();
    nodes.remove(&1013);
    let stale = super::Node {
        at: node::NodeRef {
            block: 3000,
            generation: 1,
        },
        level: 1,
        leaf: None,
        children: vec![node::ChildRef {
            first: 500_000,
            at: node::NodeRef {
                block: 3001,
                generation: 1,
            },
            marks: 0,
        }],
    };
    nodes.insert(3000, stale);
    assert_eq!(chosen(&nodes, &t, &previous), Some((0, 2, 1, 26)));
    // Named by the previous tree, the same node is one the root may take.
    let mut named = previous.clone();
    named.nodes.extend([3000, 3001].map(|block| node::NodeRef {
        block,
        generation: 1,
    }));
    assert!(chosen(&nodes, &t, &named).is_some());
}

/// A child of the root lost with every node under it, and a leaf elsewhere: nothing found
/// names the child, so it leaves no hole, and the nodes found all lie under the other
/// children. Its 1,350 entries cannot have been the lost leaf's (a leaf holds at most
/// about 200 in 4 KiB): no root with holes, where one would have dropped the child's
/// range unseen. Over the leaves, the previous tree names each of the child's nine leaves
/// and the one elsewhere: ten holes, none of their ranges dropped.
#[test]
fn a_subtree_lost_whole_is_more_than_its_holes_hold_but_the_previous_tree_names_it() {
    let (mut nodes, t, previous) = four_levels();
    for block in [10, 100, 101, 102]
        .into_iter()
        .chain(1000..=1008)
        .chain([1013])
    {
        nodes.remove(&block);
    }
    assert_eq!(chosen(&nodes, &t, &previous), Some((0, 2, 10, 26)));
    assert!(super::room(0, 4096) < 1350 && super::room(1, 4096) > 1350);
}

/// The leaf in the middle of the root's first child (of a tree of three levels).
pub(super) fn a_middle_leaf(dev: &Arc<MemDevice>, tree: &TreeRoot) -> node::NodeRef {
    let (_, children) = children_of(dev, tree.root);
    let (_, leaves) = children_of(dev, children[0].at);
    leaves[leaves.len() / 2].at
}
