//! A lost root of the file tree made again by a repair's open (`rootfind.rs`): over
//! internal nodes and over leaves, with the journal's changes after it, and refused (the
//! salvage then) when what was found does not count what the root counted.

use super::super::salvage_tests::{assert_intact, build, bytes_of, poke, Model, BS};
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::geometry::Geometry;
use crate::volume::load::volume_root;
use crate::volume::record::MapRef;
use crate::volume::root::TreeRoot;
use crate::volume::table::{self, TableFile};
use crate::volume::{node, MendedLeaves, NodeScans, Volume};
use std::sync::Arc;

/// Each file's id and attribute.
pub(super) type Attrs = Vec<(u64, Vec<u8>)>;

/// A volume of 6,000 files whose tree has three levels, closed: the device, each file's id
/// and attribute, and the tree's root.
pub(super) fn three_levels() -> (Arc<MemDevice>, Attrs, TreeRoot) {
    three_levels_then(|_, _| ())
}

/// [`three_levels`], `then` called on the volume and its files before it closes.
pub(super) fn three_levels_then(
    then: impl FnOnce(&Volume, &Attrs),
) -> (Arc<MemDevice>, Attrs, TreeRoot) {
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
pub(super) fn tree_of(dev: &Arc<MemDevice>) -> TreeRoot {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let t = volume_root(vol.store()).unwrap().tree.unwrap();
    drop(vol);
    t
}

/// The children of the node `at`, read and checked, and its level.
pub(super) fn children_of(dev: &Arc<MemDevice>, at: node::NodeRef) -> (u8, Vec<node::ChildRef>) {
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
pub(super) fn rebuilt_and_reopened(dev: &Arc<MemDevice>, vol: Volume, lost: u64) -> Volume {
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

/// A whole leaf of the volume `tree` is the root of, at its root's generation, at
/// `block`, with the keys 9,000 to 9,004 (files no tree holds): a freed leaf's bytes.
pub(super) fn stale_leaf(tree: &TreeRoot, block: u64) -> Vec<u8> {
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
