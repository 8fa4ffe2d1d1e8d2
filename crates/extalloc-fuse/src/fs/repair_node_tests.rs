//! `fsck --repair`'s page path on a file tree that lost an internal node: the volume
//! opened with a hole where the node was, mended from the device scan for the leaves under
//! it (`extalloc`'s `leafrepair.rs`), no file read into memory for it.

use super::repair_page_tests::mended_in_a_page;
use super::repair_tests::flip;
use super::tests::{device, fresh, mkdir, node, remount, ME};
use super::*;
use crate::repair::{repair, repair_reporting};
use extalloc::disk::device::{FaultDevice, MemDevice};
use extalloc::Policy;
use std::sync::Arc;

/// A file tree of three levels (6,000 empty files in 10 directories) with one internal
/// node under the root flipped: the page path opens the volume with a hole where the node
/// was and mends it from the device scan for the leaves under it, with no file read into
/// memory for it (the salvage read every one); every name reads back, and a second
/// repair finds nothing.
#[test]
fn a_lost_file_tree_node_is_mended_a_page_at_a_time() {
    const FILES: usize = 6000;
    let dev = device(54);
    let fs = fresh(&dev);
    let dirs: Vec<u64> = (0..10)
        .map(|d| mkdir(&fs, ROOT, &format!("d{d}")))
        .collect();
    for i in 0..FILES {
        fs.make(
            dirs[i % 10],
            format!("f{i}").as_bytes(),
            node(Kind::File),
            ME,
        )
        .unwrap();
    }
    fs.unmount().unwrap();
    let nodes = |dev: &Arc<FaultDevice<MemDevice>>| {
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let nodes = vol.tree_nodes();
        vol.close().unwrap();
        nodes
    };
    let before = nodes(&dev);
    assert_eq!(nodes(&dev), before, "an open and a close change no node");
    let inner = (before.iter())
        .find(|n| !n.root)
        .expect("a tree of three levels");
    flip(dev.as_ref(), inner.bytes.start + 200);
    let mended = mended_in_a_page(&dev, FILES);
    let scan = mended.tree_scan.clone().expect("the hole scanned for");
    assert_eq!(scan.nodes_lost.len(), 1, "{mended:?}");
    assert!(mended.lost.is_empty() && scan.entries > 100, "{mended:?}");
    // The scan's progress told as it goes, up to every block it read (the look's, then
    // the repair's).
    let told = std::sync::Mutex::new(Vec::new());
    let r = repair_reporting(dev.clone(), Policy::default(), &|p| {
        told.lock().unwrap().push(p)
    })
    .unwrap();
    assert_eq!(r.salvage.tree_scan, mended.tree_scan, "{r:?}");
    let told = told.into_inner().unwrap();
    let read = mended.tree_scan.as_ref().unwrap().blocks_read;
    let ends = told
        .iter()
        .filter(|p| p.blocks_read == p.blocks_to_read)
        .count();
    assert!(
        ends == 2 && told.iter().all(|p| p.blocks_to_read == read),
        "{told:?}"
    );
    let (fs, _) = remount(&dev);
    for i in 0..FILES {
        fs.lookup(dirs[i % 10], format!("f{i}").as_bytes())
            .unwrap_or_else(|e| panic!("f{i}: {e:?}"));
    }
    fs.unmount().unwrap();
    let again = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!again.changed(), "a second repair finds nothing: {again:?}");
}
