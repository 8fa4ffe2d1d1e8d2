//! The repair's scans read the device (`scanread.rs`): a bad sector in a file's data is
//! skipped and counted (in a run of one block too), 256 blocks in a row that do not read
//! fail the scan, and a second scan of one repair reads only the nodes the first found,
//! and again the blocks that did not read.

use super::super::salvage_tests::{bytes_of, BS};
use super::{NodeScans, CHUNK_BLOCKS};
use crate::alloc::Policy;
use crate::disk::device::{Device, FaultDevice, MemDevice, OverlayDevice};
use crate::error::{Error, Result};
use crate::geometry::{Extent, Geometry};
use crate::volume::load::volume_root;
use crate::volume::root::TreeRoot;
use crate::volume::Volume;
use parking_lot::Mutex;
use std::sync::Arc;

/// Each file's id and attribute.
type Attrs = Vec<(u64, Vec<u8>)>;

/// A device that fails as a bad sector does where it is told to (`FaultDevice`), and
/// counts the reads that touch a range of blocks.
struct Watched {
    inner: FaultDevice<MemDevice>,
    /// Blocks watched, and the reads that touched them.
    watch: Mutex<(Extent, u64)>,
}

impl Watched {
    fn watch(&self, blocks: Extent) {
        *self.watch.lock() = (blocks, 0);
    }

    fn reads_watched(&self) -> u64 {
        self.watch.lock().1
    }
}

impl Device for Watched {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut w = self.watch.lock();
        let (start, end) = (w.0.start * BS, w.0.end() * BS);
        if offset < end && start < offset + buf.len() as u64 {
            w.1 += 1;
        }
        drop(w);
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}

/// A volume of 3,000 files (its tree of more than one level once closed) on a device
/// that can fail reads: the device, the volume, each file's id and attribute.
fn three_thousand_files() -> (Arc<Watched>, Volume, Attrs) {
    let dev = Arc::new(Watched {
        inner: FaultDevice::new(MemDevice::new(8192 * BS), 5),
        watch: Mutex::new((Extent::new(0, 0), 0)),
    });
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let attr = |i: u64| format!("file {i:05} {}", "z".repeat(100)).into_bytes();
    let files: Vec<_> = (0..3000)
        .map(|i| (vol.create(&attr(i)).unwrap(), attr(i)))
        .collect();
    (dev, vol, files)
}

/// A closed volume of 3,000 files whose tree has more than one level, 24 of them with
/// 64 KiB of data and one with `big` blocks (at most two extents), and its root zeroed:
/// the device, the files' ids and attributes, the big file's id and its longest extent.
fn root_lost_with_data(big: u64) -> (Arc<Watched>, Attrs, (u64, Extent)) {
    let (dev, vol, files) = three_thousand_files();
    for &(id, _) in files.iter().step_by(125) {
        vol.write(id, 0, &bytes_of(id, 65536)).unwrap();
    }
    let big_id = files[7].0;
    vol.write(big_id, 0, &bytes_of(big_id, (big * BS) as usize))
        .unwrap();
    let extents = vol.extents(big_id).unwrap();
    let longest = (extents.iter().map(|e| e.extent))
        .max_by_key(|e| e.len)
        .unwrap();
    assert!(longest.len >= big.min(512), "{extents:?}");
    vol.close().unwrap();
    zero_the_root(&dev);
    (dev, files, (big_id, longest))
}

/// The newest leaf (level 0 in its node's header) on `dev` that holds `attr`.
fn leaf_holding(dev: &Watched, attr: &[u8]) -> u64 {
    let mut node = vec![0u8; BS as usize];
    let leaves = (0..dev.size() / BS).filter_map(|b| {
        dev.read_at(&mut node, b * BS).unwrap();
        let generation = u64::from_le_bytes(node[16..24].try_into().unwrap());
        let holds = node.windows(attr.len()).any(|w| w == attr);
        (&node[..4] == b"XVBN" && node[4] == 0 && holds).then_some((generation, b))
    });
    leaves.max().expect("a leaf holding the attribute").1
}

/// The closed volume on `dev` with its file tree's root zeroed.
fn zero_the_root(dev: &Arc<Watched>) {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let t: TreeRoot = volume_root(vol.store()).unwrap().tree.unwrap();
    drop(vol);
    assert!(t.root.generation > 0);
    dev.write_at(&[0u8; BS as usize], t.root.block * BS)
        .unwrap();
}

/// A bad sector in a file's data does not stop the repair's search for a lost root's
/// children (it failed the open before, and the salvage after it): the block is skipped,
/// counted and reported, the root is made again over the nodes found elsewhere, and every
/// file keeps its entry; only the bad block itself fails to read.
#[test]
fn a_bad_sector_in_data_is_skipped_by_the_scan_for_a_lost_root() {
    let (dev, files, (big, data)) = root_lost_with_data(16);
    let bad = data.start + 5;
    dev.inner.fail_reads_in(bad * BS..(bad + 1) * BS);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let mended = vol.mend_unreadable_leaves().unwrap();
    let found = mended.root_found.clone().expect("the root made again");
    assert_eq!(found.blocks_unreadable, 1, "{found:?}");
    assert!(found.blocks_read > data.len, "{found:?}");
    assert!(
        mended.tree_scan.is_none() && mended.lost.is_empty(),
        "{mended:?}"
    );
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    let failed = vol.read(big, 5 * BS, BS).unwrap_err();
    assert!(matches!(failed, Error::Io { .. }), "{failed:?}");
    assert_eq!(vol.read(big, 0, BS).unwrap(), bytes_of(big, BS as usize));
}

/// The salvage's scan (the root lost; the salvaging open itself, no look before it) skips
/// a bad sector the same way and reports it in its `TreeScan`.
#[test]
fn a_bad_sector_in_data_is_skipped_by_the_salvages_scan() {
    let (dev, files, (_, data)) = root_lost_with_data(16);
    let bad = data.start + 9;
    dev.inner.fail_reads_in(bad * BS..(bad + 1) * BS);
    salvage_keeps_every_file(&dev, &files, &NodeScans::unwatched(), 1);
}

/// The salvaging open of `dev`, sharing `scans`: its scan counts `unreadable` blocks that
/// did not read, and it keeps every file of `files` as it was.
fn salvage_keeps_every_file(dev: &Arc<Watched>, files: &Attrs, scans: &NodeScans, unreadable: u64) {
    let (vol, report) =
        Volume::open_salvaging_reporting(dev.clone(), Policy::default(), scans).unwrap();
    let scan = report.tree_scan.clone().expect("a scan");
    assert_eq!(scan.blocks_unreadable, unreadable, "{scan:?}");
    let kept = (files.iter()).filter(|(id, attr)| vol.attr(*id).ok().as_ref() == Some(attr));
    assert_eq!(kept.count(), files.len(), "{report:?}");
}

/// 256 blocks in a row that do not read (a file's 700 blocks of data unreadable: a failing
/// region, or a device gone) fail the scan with the device's error, as every read error
/// did before: the repair does not take a failing device's silence for lost nodes.
#[test]
fn blocks_in_a_row_that_do_not_read_fail_the_scan() {
    let (dev, _, (_, data)) = root_lost_with_data(700);
    dev.inner.fail_reads_in(data.start * BS..data.end() * BS);
    let failed = Volume::open_for_repair(dev.clone(), Policy::default()).err();
    assert!(
        matches!(failed, Some(Error::Io { op: "read", .. })),
        "{failed:?}"
    );
    let failed = Volume::open_salvaging(dev.clone(), Policy::default()).err();
    assert!(
        matches!(failed, Some(Error::Io { op: "read", .. })),
        "{failed:?}"
    );
}

/// `fsck --repair`'s look (an open under an overlay) then its repair (the open on the
/// device), sharing one `NodeScans`: the look reads every used block, the repair reads
/// none of a file's data but the bad block (again: it still fails) and finds the same
/// root; its report counts the same blocks and the unreadable one.
#[test]
fn a_second_scan_of_one_repair_reads_only_the_nodes() {
    let (dev, files, (_, data)) = root_lost_with_data(64);
    let bad = data.end() - 1;
    dev.inner.fail_reads_in(bad * BS..(bad + 1) * BS);
    let data = Extent::new(data.start, data.len - 1);
    dev.watch(data);
    let vol = look_then_repair(&dev, &files, 1, || {
        assert!(dev.reads_watched() > 0, "the look read the data");
        dev.watch(data);
    });
    assert_eq!(dev.reads_watched(), 0, "the repair read no data");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
}

/// A bad sector in a file of one block whose neighbours are free (its files on either
/// side removed): the scan reads that block as a run of its own, a chunk of one block,
/// skips it, and goes on; the root is made again.
#[test]
fn a_bad_sector_in_a_run_of_one_block_is_skipped() {
    let (dev, vol, mut files) = three_thousand_files();
    for &(id, _) in &files[..40] {
        vol.write(id, 0, &bytes_of(id, BS as usize)).unwrap();
        vol.sync().unwrap();
    }
    for &(id, _) in files[..40].iter().step_by(2) {
        vol.unlink(id).unwrap();
    }
    vol.close().unwrap();
    let gone: Vec<u64> = files[..40].iter().step_by(2).map(|f| f.0).collect();
    files.retain(|(id, _)| !gone.contains(id));
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let alone = (files[..20].iter()).find_map(|&(id, _)| {
        let block = vol.extents(id).unwrap()[0].extent.start;
        let group = vol.store().geometry().group_of(block);
        let runs = vol.store().allocator().used_runs(group).unwrap();
        runs.contains(&Extent::new(block, 1)).then_some((id, block))
    });
    drop(vol);
    let (id, block) = alone.expect("a file's block with free blocks on either side");
    zero_the_root(&dev);
    dev.inner.fail_reads_in(block * BS..(block + 1) * BS);
    let vol = Volume::open_for_repair(dev.clone(), Policy::default()).unwrap();
    let found = (vol.mend_unreadable_leaves().unwrap().root_found).expect("the root made again");
    assert_eq!(found.blocks_unreadable, 1, "{found:?}");
    for (id, attr) in &files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    assert!(matches!(vol.read(id, 0, BS), Err(Error::Io { .. })));
}

/// A leaf whose read fails during the look (a read error that then passes) and the root
/// lost: the look cannot make the root again from its children (the leaf's entries are
/// missing from the count); over the leaves, the leaf's range (one the lost checkpoint
/// rewrote) is left to the mend's scan, which skips the block and finds older copies.
/// The repair after it, sharing its notes, reads that block again and finds the leaf
/// itself: every file kept as it was, on the page path and by the salvage alike (taking
/// the look's silence for a lost leaf would keep older copies or drop the files).
#[test]
fn a_block_that_did_not_read_is_read_again_by_the_next_scan() {
    let (dev, files, _) = root_lost_with_data(16);
    let leaf = leaf_holding(&dev, &files[1500].1);
    dev.inner.fail_reads_in(leaf * BS..(leaf + 1) * BS);
    let scans = NodeScans::unwatched();
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let looked = Volume::open_for_repair_reporting(view, Policy::default(), &scans).unwrap();
    let seen = looked.mend_unreadable_leaves_reporting(&scans).unwrap();
    let found = seen.root_found.expect("made again over the leaves");
    assert!(
        found.from_leaves && found.blocks_unreadable == 1,
        "{found:?}"
    );
    dev.inner.heal_reads();
    dev.watch(Extent::new(leaf, 1));
    let vol = Volume::open_for_repair_reporting(dev.clone(), Policy::default(), &scans).unwrap();
    let mended = vol.mend_unreadable_leaves_reporting(&scans).unwrap();
    let found = mended.root_found.expect("the root made again");
    assert_eq!(found.blocks_unreadable, 0, "{found:?}");
    let kept = (files.iter()).filter(|(id, attr)| vol.attr(*id).ok().as_ref() == Some(attr));
    assert_eq!(kept.count(), files.len());
    assert!(dev.reads_watched() > 0, "the leaf read again");
    drop(vol);
    salvage_keeps_every_file(&dev, &files, &scans, 0);
}

/// A leaf the look read whole that does not read for the repair after it (the device
/// failing between them): the repair's scan fails with the device's error instead of
/// going on without the leaf's entries.
#[test]
fn a_node_that_read_before_and_does_not_now_fails_the_scan() {
    let (dev, files, _) = root_lost_with_data(16);
    let scans = NodeScans::unwatched();
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let looked = Volume::open_for_repair_reporting(view, Policy::default(), &scans).unwrap();
    let _ = looked.close();
    let leaf = leaf_holding(&dev, &files[1500].1);
    dev.inner.fail_reads_in(leaf * BS..(leaf + 1) * BS);
    let failed = Volume::open_for_repair_reporting(dev.clone(), Policy::default(), &scans).err();
    assert!(
        matches!(failed, Some(Error::Io { op: "read", .. })),
        "{failed:?}"
    );
}

/// Bad sectors scattered through a file's data, 256 of them or more but never two in a
/// row: the look skips each, and the repair after it, reading only them again (they
/// still fail), does not take them for blocks in a row either.
#[test]
fn scattered_bad_sectors_do_not_add_up_to_a_failing_device() {
    let (dev, files, (_, data)) = root_lost_with_data(700);
    let bad: Vec<u64> = (data.start..data.end()).step_by(2).collect();
    assert!(bad.len() as u64 >= CHUNK_BLOCKS, "{data:?}");
    for &b in &bad {
        dev.inner.fail_reads_in(b * BS..(b + 1) * BS);
    }
    look_then_repair(&dev, &files, bad.len() as u64, || {});
}

/// `fsck --repair`'s look at `dev` (an open under an overlay, and its mend) then, after
/// `between`, its repair (the open on the device, and its mend), sharing one `NodeScans`:
/// both make the same root again, counting `unreadable` blocks that did not read, and the
/// repair keeps every file of `files`. The repair's volume.
fn look_then_repair(
    dev: &Arc<Watched>,
    files: &Attrs,
    unreadable: u64,
    between: impl FnOnce(),
) -> Volume {
    let scans = NodeScans::unwatched();
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let looked = Volume::open_for_repair_reporting(view, Policy::default(), &scans).unwrap();
    let first = looked.mend_unreadable_leaves_reporting(&scans).unwrap();
    let _ = looked.close();
    between();
    let vol = Volume::open_for_repair_reporting(dev.clone(), Policy::default(), &scans).unwrap();
    let second = vol.mend_unreadable_leaves_reporting(&scans).unwrap();
    let (a, b) = (first.root_found.unwrap(), second.root_found.unwrap());
    assert_eq!(a, b, "the same root, counted alike");
    assert_eq!(b.blocks_unreadable, unreadable, "{b:?}");
    for (id, attr) in files {
        assert_eq!(&vol.attr(*id).unwrap(), attr, "file {id}");
    }
    vol
}
