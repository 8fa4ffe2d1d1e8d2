//! The salvage after a device scan for a lost node's leaves, against the journal and the
//! previous checkpoint: an entry given back is judged on the map the journal's changes
//! give its file, and a file removed since the previous checkpoint is not brought back.

use super::super::salvage_tests::{poke, settle, BS};
use super::volume_tests::{assert_no_block_shared, fresh, made};
use crate::alloc::Policy;
use crate::volume::load::volume_root;
use crate::volume::Volume;

/// The root lost after a file's map moved (truncated to nothing and written anew: the
/// journal's changes free its old blocks, and the store's replay frees them) and before the
/// next checkpoint: the scan gives back its entry as that checkpoint left it, naming the
/// freed blocks. Judged on the map the journal's changes give it, it is kept with its new
/// bytes (it was lost, and every change to it skipped, which cost a directory and every
/// name under it in the damage campaign).
#[test]
fn a_scanned_entry_is_judged_on_the_map_the_journal_gives_it() {
    let (dev, vol) = fresh();
    let moved = vol.create(b"moved").unwrap();
    vol.write(moved, 0, &[1u8; 40_000]).unwrap();
    let ids = made(&vol, 300, &"x".repeat(100));
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let root = volume_root(vol.store()).unwrap().tree.unwrap().root;
    let before = vol.extents(moved).unwrap();
    vol.truncate(moved, 0).unwrap();
    vol.write(moved, 0, &[3u8; 20_000]).unwrap();
    vol.sync().unwrap();
    assert_ne!(
        vol.extents(moved).unwrap()[0].extent.start,
        before[0].extent.start
    );
    vol.store().abandon(); // a crash: the changes stay in the journal
    drop(vol);
    poke(&dev, root.block * BS + 100, |b| b ^ 0x40);
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(report.tree_scan.is_some(), "{report:?}");
    assert!(report.lost.is_empty(), "{report:?}");
    assert_eq!(report.changes_skipped, 0, "{report:?}");
    let vol = settle(&dev, vol);
    assert_eq!(vol.size(moved).unwrap(), 20_000);
    assert!(vol.read(moved, 0, 20_000).unwrap() == [3u8; 20_000]);
    assert_eq!(vol.file_count().unwrap(), 1 + ids.len() as u64);
    assert_no_block_shared(&vol);
}

/// A file removed between the previous checkpoint and the last, then the root lost: the
/// scan gives back the last tree's leaves, one of which spans the removed file's id
/// without it, so the previous table does not bring it back (an empty file's map always
/// survives: it came back, and the namespace pass linked it into `/lost+found`).
#[test]
fn a_file_removed_since_the_previous_checkpoint_stays_removed() {
    let (dev, vol) = fresh();
    let ids = made(&vol, 300, &"x".repeat(100));
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let removed = ids[150];
    vol.unlink(removed).unwrap();
    vol.close().unwrap();
    let root = {
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let tree = volume_root(vol.store()).unwrap().tree.unwrap();
        assert!(tree.previous.is_some(), "a previous tree to restore from");
        tree.root
    };
    poke(&dev, root.block * BS + 100, |b| b ^ 0x40);
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(report.tree_scan.is_some(), "{report:?}");
    assert!(!report.restored.contains(&removed), "{:?}", report.restored);
    assert!(report.lost.is_empty(), "{report:?}");
    assert!(vol.size(removed).is_err(), "removed before the damage");
    assert_eq!(vol.file_count().unwrap(), ids.len() as u64 - 1);
    assert_no_block_shared(&vol);
}
