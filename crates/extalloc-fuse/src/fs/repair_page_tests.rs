//! `fsck --repair`'s page path (`repair::whole_volume`): a volume that opens whole below
//! its namespace, or whose damage the page path takes (a superblock copy, a bitmap after a
//! crash that left a pending file, a journal damaged in the middle, a map that fails its
//! check, a file tree leaf that does not read), is repaired a page of files at a time.

use super::repair_tests::{assert_repaired, flip, image, Files, BS};
use super::tests::{device, fresh, put, remount};
use super::*;
use crate::repair::repair;
use extalloc::disk::device::{Device, FaultDevice, MemDevice, OverlayDevice};
use extalloc::disk::format::read_superblock;
use extalloc::volume::{MendedLeaves, NodeScans};
use extalloc::Policy;
use std::sync::Arc;

/// A volume whole below its namespace (it opens, and the ownership check finds every
/// block owned once; a damaged superblock copy or bitmap allowed) is
/// repaired as a mount opens it, and its passes over every file read them a page at a
/// time: no file is read into memory for them (the salvaging open reads every one, and
/// `vol.attr` per file did: 616 MB at 1M files). So is a damaged file tree leaf.
#[test]
fn a_volume_whole_below_its_namespace_is_repaired_a_page_at_a_time() {
    const FILES: usize = 600;
    let dev = device(48);
    let fs = fresh(&dev);
    for i in 0..FILES {
        put(&fs, ROOT, &format!("f{i}"), b"x");
    }
    fs.unmount().unwrap();
    let any: Arc<dyn Device> = dev.clone();
    let vol = crate::repair::whole_volume(&any, &Policy::default(), &NodeScans::unwatched())
        .expect("whole")
        .0;
    assert!(!crate::repair::make_root_again(&vol).unwrap());
    assert!(crate::repair::remake_inodes(&vol).unwrap().is_empty());
    let (in_memory, loaded, _) = vol.file_cache_figures();
    assert!(
        in_memory < FILES / 10 && loaded < FILES as u64 / 10,
        "{in_memory} files in memory, {loaded} read, of {FILES}"
    );
    vol.close().unwrap();
    // The primary superblock damaged: the store checks damaged, the volume opens from
    // the backup, and the repair writes both copies (the look is not called here: a
    // volume it opens rewrites the copy itself when dropped).
    flip(dev.as_ref(), 20);
    assert!(!extalloc::store::fsck::check(dev.as_ref()).unwrap().clean());
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.superblocks_rewritten, vec!["primary"], "{r:?}");
    assert!(extalloc::store::fsck::check(dev.as_ref()).unwrap().clean());
    // A file's entry in a tree leaf damaged: the leaf fails its check, and is mended in
    // place (`a_zeroed_tree_leaf_is_mended_from_the_previous_checkpoint` below).
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let places = vol.places().unwrap();
    vol.close().unwrap();
    let at = (places.iter().rev())
        .find(|p| !p.table.is_empty())
        .expect("a file in the tree")
        .table
        .start;
    flip(dev.as_ref(), at + 2);
    let (vol, _, mended) =
        crate::repair::whole_volume(&any, &Policy::default(), &NodeScans::unwatched())
            .expect("whole");
    assert_eq!(mended.leaves.len(), 1, "{mended:?}");
    vol.store().abandon();
    drop(vol);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.salvage.leaves_mended.len(), 1, "{r:?}");
    let again = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!again.changed(), "a second repair finds nothing: {again:?}");
}

/// A file tree leaf zeroed after the checkpoint that rewrote it (one file's attributes
/// set), then a crash: the page path mends it from the previous checkpoint's copy of its
/// key range (every file there restored, its map surviving), with no file read into
/// memory for it; every file reads back whole, and a second repair finds nothing.
#[test]
fn a_zeroed_tree_leaf_is_mended_from_the_previous_checkpoint() {
    const FILES: usize = 600;
    let dev = files_600(50);
    let (fs, _) = remount(&dev);
    let f = fs.lookup(ROOT, b"f300").unwrap().ino;
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    vol.set_attr(f, &vol.attr(f).unwrap()).unwrap();
    vol.checkpoint().unwrap(); // its leaf written anew; the old one the previous tree's
    zero_leaf_of(vol, &dev, f);
    let mended = mended_in_a_page(&dev, FILES);
    assert_eq!((mended.leaves.len(), mended.intact), (1, 0), "{mended:?}");
    assert!(
        mended.restored.contains(&f) && mended.restored.len() > 5,
        "{mended:?}"
    );
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.salvage.restored, mended.restored, "{r:?}");
    assert_600_repaired(&dev, None);
    assert!(extalloc::store::fsck::check(dev.as_ref()).unwrap().clean());
}

/// The page path's look at `dev` (under an overlay: nothing written), which must take it:
/// what its mend did, after checking that fewer than a tenth of the `files` were read into
/// memory for it.
pub(super) fn mended_in_a_page(dev: &Arc<FaultDevice<MemDevice>>, files: usize) -> MendedLeaves {
    let any: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let (vol, _, mended) =
        crate::repair::whole_volume(&any, &Policy::default(), &NodeScans::unwatched())
            .expect("whole");
    let (in_memory, loaded, _) = vol.file_cache_figures();
    assert!(
        in_memory < files / 10 && loaded < files as u64 / 10,
        "{in_memory} files in memory, {loaded} read, of {files}"
    );
    vol.store().abandon();
    mended
}

/// After a crash that left a pending file (made, written and checkpointed, never
/// published), a zeroed bitmap: the group is held corrupt, the volume still opens and owns
/// every block once, so the page path; the pending file waits for the bitmaps' rebuild (a
/// free into a group held corrupt is refused) and is removed after it.
#[test]
fn a_zeroed_bitmap_after_a_crash_is_repaired_a_page_at_a_time() {
    let (dev, _) = image(46);
    let any: Arc<dyn Device> = dev.clone();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let pending = vol.create_pending().unwrap();
    vol.write(pending, 0, &[7u8; 3 * BS as usize]).unwrap();
    // Written home (a journal holding the bitmap's block would write it again at replay),
    // then the process gone: the volume stays marked in use.
    vol.checkpoint().unwrap();
    assert!(
        vol.size_and_blocks(pending).unwrap().1 > 0,
        "it holds blocks to free"
    );
    vol.store().abandon();
    drop(vol);
    let sb = read_superblock(dev.as_ref()).unwrap();
    dev.write_at(&vec![0u8; BS as usize], sb.bitmap_start * BS)
        .unwrap();
    assert!(!extalloc::store::fsck::check(dev.as_ref()).unwrap().clean());
    let vol = crate::repair::whole_volume(&any, &Policy::default(), &NodeScans::unwatched())
        .expect("whole")
        .0;
    assert_eq!(vol.pending(), vec![pending], "left for after the rebuild");
    assert_eq!(
        vol.check().unwrap().corrupt_groups,
        1,
        "the bitmap loads corrupt"
    );
    vol.store().abandon();
    drop(vol);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.allocation.corrupt_cleared, vec![0], "{r:?}");
    assert_eq!(r.pending_removed, 1, "{r:?}");
    assert!(r.salvage.clean(), "nothing salvaged: {r:?}");
    assert!(extalloc::store::fsck::check(dev.as_ref()).unwrap().clean());
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(
        vol.check().unwrap().clean(),
        "its blocks free again, none leaked"
    );
    assert!(vol.size(pending).is_err(), "the pending file is gone");
    vol.close().unwrap();
}

/// A journal damaged in the middle (one of its blocks zeroed between committed records)
/// is repaired as a mount opens a volume, a page of files at a time, not salvaged: the
/// records before the damage replay, the groups later ones touch are held corrupt until
/// the bitmaps' rebuild, and the report says what was lost. Every file checkpointed
/// before reads back whole, each later file is there whole or not at all, and a second
/// repair finds nothing.
#[test]
fn a_journal_damaged_in_the_middle_is_repaired_a_page_at_a_time() {
    let (dev, files, data) = journal_damaged(43);
    // The page path (looked at over an overlay: an open accepting the loss wipes the
    // stranded records).
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let vol = crate::repair::whole_volume(&view, &Policy::default(), &NodeScans::unwatched())
        .expect("whole")
        .0;
    assert!(vol.store().journal_loss().is_some());
    drop(vol);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    let (_, stranded) = r.salvage.journal_loss.expect("the loss reported");
    assert!(stranded > 0 && r.changed(), "{r:?}");
    assert!(
        r.changes()[0].starts_with("journal damaged at record"),
        "{r:?}"
    );
    assert_repaired(&dev, &files);
    let (fs, _) = remount(&dev);
    let mut kept = 0;
    for i in 0..LATER {
        if let Ok(a) = fs.lookup(ROOT, format!("b{i}").as_bytes()) {
            assert_eq!(fs.read(a.ino, 0, 1 << 20).unwrap(), data(i), "b{i}");
            kept += 1;
        }
    }
    assert!(
        kept > 0 && kept < LATER,
        "{kept} of {LATER} later files kept"
    );
    fs.unmount().unwrap();
    let again = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!again.changed(), "a second repair finds nothing: {again:?}");
}

/// The device, the image's files and what `b{i}` holds ([`journal_damaged`]).
type JournalDamaged = (Arc<FaultDevice<MemDevice>>, Files, fn(usize) -> Vec<u8>);

/// Files written after the image's, one journal record each, in [`journal_damaged`].
const LATER: usize = 40;

/// An image (`image(seed)`'s files checkpointed) crashed with [`LATER`] files `b{i}` in
/// the journal only, then the first journal block whose loss strands intact records
/// after it zeroed: a plain open refuses the device. Returns the device, the image's
/// files and what `b{i}` holds.
fn journal_damaged(seed: u64) -> JournalDamaged {
    let (dev, files) = image(seed);
    let (fs, _) = remount(&dev);
    let data: fn(usize) -> Vec<u8> = |i| vec![i as u8 + 1; 3000 + i * 100];
    for i in 0..LATER {
        put(&fs, ROOT, &format!("b{i}"), &data(i));
        fs.sync().unwrap(); // a record each
    }
    drop(fs); // a crash: the journal holds every later file
    dev.crash(extalloc::disk::device::Crash::DropAll).unwrap();
    let sb = read_superblock(dev.as_ref()).unwrap();
    let journal = |k: u64| (sb.journal_start + (sb.journal_tail / BS + k) % sb.journal_blocks) * BS;
    // The first journal block past the tail's whose loss strands intact records after it.
    let damaged = (1..sb.journal_blocks).find(|&k| {
        let mut was = vec![0u8; BS as usize];
        dev.read_at(&mut was, journal(k)).unwrap();
        dev.write_at(&vec![0u8; BS as usize], journal(k)).unwrap();
        let lost = extalloc::store::fsck::check(dev.as_ref())
            .unwrap()
            .journal_records_lost;
        if lost == 0 {
            dev.write_at(&was, journal(k)).unwrap();
        }
        lost > 0
    });
    assert!(damaged.is_some(), "no journal block strands records");
    assert!(
        Volume::open(dev.clone(), Policy::default()).is_err(),
        "refused"
    );
    (dev, files, data)
}

/// A repair of a journal damaged in the middle cut short by a crash at each of its writes:
/// the loss it accepted (the stranded records wiped at its open) is never forgotten. Until
/// a repair finishes (its last checkpoint written), a plain open refuses the device and
/// `fsck` reports the loss, and the
/// next repair reports it (the loss itself, or an earlier repair's that did not finish);
/// after that repair the device checks clean and opens. (Before the loss was marked on the
/// device ahead of the wipe, a repair cut short left a journal that read clean and a loss
/// no one reported.)
#[test]
fn a_journal_loss_outlives_a_repair_cut_short() {
    let (image, _, _) = journal_damaged(46);
    let (mut earlier, mut finished) = (0, 0);
    let cut = each_cut_repair(&image, 200, |n, dev| {
        if let Ok(vol) = Volume::open(dev.clone(), Policy::default()) {
            // Cut after the checkpoint that ended the repair (the close's last writes).
            assert!(vol.check().unwrap().clean(), "cut after {n} writes");
            vol.close().unwrap();
            finished += 1;
            return;
        }
        assert!(!(extalloc::store::fsck::check(dev.as_ref()).unwrap()).clean());
        let r = repair(dev.clone(), Policy::default())
            .unwrap_or_else(|e| panic!("cut after {n} writes: the next repair fails: {e}"));
        assert!(
            r.salvage.journal_loss.is_some() || r.salvage.journal_loss_earlier,
            "cut after {n} writes: the loss unreported: {r:?}"
        );
        earlier += usize::from(r.salvage.journal_loss_earlier);
        assert!(extalloc::store::fsck::check(dev.as_ref()).unwrap().clean());
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(vol.check().unwrap().clean(), "cut after {n} writes");
        vol.close().unwrap();
    });
    assert!(
        cut > 5 && earlier > 0 && finished < cut - earlier,
        "cut {cut} times, {earlier} after the wipe, {finished} after the last checkpoint"
    );
}

/// Damage to a directory's log (a file's name, then a directory's, lost in it, after a
/// crash) is repaired by the census's pass (`scan/paged.rs`: a few bytes an inode) as the
/// full read (`scan::load`, every inode in memory) repairs it: the same report, the same
/// paths afterwards, and a clean check.
#[test]
fn a_damaged_namespace_is_repaired_as_the_full_read_repairs_it() {
    for byte in [3, 19] {
        let (dev, [a, d, ..], _) = super::tests::damage_root_log(33, byte);
        let (paged, r, want) = repaired_both_ways(&dev);
        assert_eq!(r, want, "byte {byte}");
        assert_eq!(r.lost_found, vec![if byte == 3 { a } else { d }], "{r:?}");
        assert!(scan::check(&paged).unwrap().clean(), "byte {byte}");
    }
}

/// 600 files of data `data(i)` named `f{i}` in the root, unmounted; returns the device.
fn files_600(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    let dev = device(seed);
    let fs = fresh(&dev);
    for i in 0..600 {
        put(&fs, ROOT, &format!("f{i}"), &data_600(i));
    }
    fs.unmount().unwrap();
    dev
}

/// What `f{i}` of [`files_600`] holds.
fn data_600(i: usize) -> Vec<u8> {
    format!("file {i} ").repeat(600).into_bytes()
}

/// Drops `vol` as a crash does, then zeroes the file tree leaf holding file `id`'s entry.
fn zero_leaf_of(vol: Volume, dev: &Arc<FaultDevice<MemDevice>>, id: u64) {
    let place = (vol.places().unwrap().into_iter())
        .find(|x| x.id == id)
        .expect("its entry");
    vol.store().abandon();
    drop(vol);
    dev.write_at(&vec![0u8; BS as usize], place.table.start / BS * BS)
        .unwrap();
}

/// After a repair of a [`files_600`] device: every `f{i}` but `except` reads back whole,
/// and a second repair finds nothing.
fn assert_600_repaired(dev: &Arc<FaultDevice<MemDevice>>, except: Option<usize>) {
    let (fs, _) = remount(dev);
    for i in (0..600).filter(|&i| Some(i) != except) {
        let a = fs.lookup(ROOT, format!("f{i}").as_bytes()).unwrap();
        assert!(fs.read(a.ino, 0, 1 << 20).unwrap() == data_600(i), "f{i}");
    }
    fs.unmount().unwrap();
    let again = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!again.changed(), "a second repair finds nothing: {again:?}");
}

/// A file pending at one checkpoint and published at the next, then its leaf zeroed: the
/// previous checkpoint's copy of it is pending, so the mend does not keep it (an open
/// removes a pending file, as the salvage's repair does), and the repair finishes: the
/// other files read back and a second repair finds nothing. (The mend once kept it in
/// the tree only: the checkpoint wrote a leaf marked pending under a root that did not
/// say so, and every repair panicked.)
#[test]
fn a_mended_leaf_keeps_no_pending_file() {
    let dev = files_600(53);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let p = vol.create_pending().unwrap();
    vol.write(p, 0, &[7u8; 5000]).unwrap();
    vol.checkpoint().unwrap(); // pending in the tree
    let blob = crate::inode::Inode::new(crate::inode::Kind::File, 0o644, 0, 0, 0).encode();
    vol.publish(p, &blob).unwrap();
    vol.checkpoint().unwrap(); // published: its leaf written anew
    zero_leaf_of(vol, &dev, p);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.salvage.leaves_mended.len(), 1, "{r:?}");
    assert!(!r.salvage.restored.contains(&p), "{r:?}");
    assert_600_repaired(&dev, None);
}

/// One bit of a file's id flipped in its leaf entry, so the damaged entry names its
/// neighbour's id: the mend keeps it under a fresh id, as the salvage does, and the file's
/// data comes back through `/lost+found` (its name named the old id). (The mend once
/// skipped it, reporting nothing, and the bitmaps' rebuild freed its data.)
#[test]
fn a_damaged_entry_naming_another_files_id_is_kept_under_a_fresh_one() {
    let dev = files_600(51);
    let (fs, _) = remount(&dev);
    let f = fs.lookup(ROOT, b"f300").unwrap().ino;
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let place = (vol.places().unwrap().into_iter())
        .find(|p| p.id == f)
        .expect("its entry");
    vol.close().unwrap();
    // The frame's header is 12 bytes; the body starts with the id, low byte first.
    let at = place.table.start + 12;
    let mut b = [0u8];
    dev.read_at(&mut b, at).unwrap();
    dev.write_at(&[b[0] ^ 1], at).unwrap();
    let r = repair(dev.clone(), Policy::default()).unwrap();
    let &(now, was) = r.salvage.recovered.first().expect("kept");
    assert_eq!((r.salvage.recovered.len(), was), (1, f ^ 1), "{r:?}");
    assert!(now != f && now != f ^ 1, "a fresh id: {r:?}");
    assert_eq!(r.namespace.lost_found, vec![now], "{r:?}");
    let (fs, _) = remount(&dev);
    let lf = fs.lookup(ROOT, b"lost+found").unwrap().ino;
    let kept = fs.lookup(lf, format!("#{now}").as_bytes()).unwrap();
    assert!(fs.read(kept.ino, 0, 1 << 20).unwrap() == data_600(300));
    fs.unmount().unwrap();
    assert_600_repaired(&dev, Some(300));
}

/// `/lost+found` already holds `#INO` (another file) when inode INO loses its name: the
/// rescue links it as `#INO~`, overwriting nothing, in the census's pass as in the full
/// read (the same report). (The add once overwrote the other name, leaving that inode
/// unnamed, and the census's pass panicked.)
#[test]
fn a_rescue_never_takes_a_name_lost_and_found_holds() {
    let dev = device(52);
    let fs = fresh(&dev);
    let a = put(&fs, ROOT, "a", b"first");
    let lf = super::tests::mkdir(&fs, ROOT, "lost+found");
    let other = put(&fs, lf, &format!("#{a}"), b"other");
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let size = vol.size(ROOT).unwrap();
    vol.write(ROOT, size, &crate::dir::record(b"a", None))
        .unwrap(); // "a" removed
    vol.close().unwrap();
    let (paged, r, want) = repaired_both_ways(&dev);
    assert_eq!((&r, &r.lost_found), (&want, &vec![a]));
    let names = scan::paths(&paged).unwrap();
    assert_eq!(names[&a].0, format!("/lost+found/#{a}~"));
    assert_eq!(names[&other].0, format!("/lost+found/#{a}"));
    assert!(scan::check(&paged).unwrap().clean());
}

/// The namespace on `dev` repaired on two copies: by the census's pass (the volume and its
/// report) and by the full read (its report); the two repaired namespaces' paths are the
/// same.
fn repaired_both_ways(
    dev: &Arc<FaultDevice<MemDevice>>,
) -> (Volume, scan::NamespaceReport, scan::NamespaceReport) {
    let open = || {
        let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
        Volume::open(view, Policy::default()).unwrap()
    };
    let (paged, full) = (open(), open());
    let r = scan::repair_paged(&paged)
        .unwrap()
        .expect("the census's pass");
    let (_, want) = scan::load(&full, true).unwrap();
    assert_eq!(scan::paths(&paged).unwrap(), scan::paths(&full).unwrap());
    (paged, r, want)
}

/// A byte of a file's map in its map segment flipped: the map fails its check, and the
/// repair clears it as the salvage does (the file keeps its name, size and inode and reads
/// as holes; the blocks the map named are freed by the bitmaps' rebuild), on the page
/// path: every other file reads back whole, and a second repair finds nothing.
#[test]
fn a_map_that_fails_its_check_is_cleared_a_page_at_a_time() {
    const PIECES: u64 = 24;
    let (dev, files) = image(44);
    let (fs, _) = remount(&dev);
    let frag = fragmented(&fs, PIECES);
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let places = vol.places().unwrap();
    vol.close().unwrap();
    let map = (places.iter().find(|p| p.id == frag))
        .and_then(|p| p.map.clone())
        .expect("its map in a segment");
    flip(dev.as_ref(), map.start + 3);
    let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(dev.clone()));
    let (vol, cleared, _) =
        crate::repair::whole_volume(&view, &Policy::default(), &NodeScans::unwatched())
            .expect("whole");
    assert_eq!(cleared.iter().map(|c| c.id).collect::<Vec<_>>(), vec![frag]);
    drop(vol);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    let ids: Vec<u64> = r.salvage.maps_cleared.iter().map(|c| c.id).collect();
    assert_eq!(ids, vec![frag], "{r:?}");
    assert!(
        r.allocation.marked_free >= PIECES,
        "its blocks freed: {r:?}"
    );
    assert_repaired(&dev, &files);
    let (fs, _) = remount(&dev);
    let a = fs.lookup(ROOT, b"frag").unwrap();
    assert_eq!((a.ino, a.size), (frag, (2 * PIECES - 1) * BS));
    let data = fs.read(a.ino, 0, 1 << 20).unwrap();
    assert!(data.len() as u64 == a.size && data.iter().all(|&b| b == 0));
    fs.unmount().unwrap();
    let again = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!again.changed(), "a second repair finds nothing: {again:?}");
}

/// A repair cut short by a crash at each of its writes, on a full volume whose one
/// fragmented file's map fails its check (the rebuild frees its blocks, the only free
/// ones, which the repair's later commits then take): the next repair always opens the
/// device, and after it every other file reads back whole and the volume checks clean.
/// (Before the rebuilt bitmaps were written home first, a commit that took a freed block
/// replayed over the old bitmap, which held it used, and no open took the device.)
#[test]
fn a_repair_cut_short_at_any_write_is_repaired_again() {
    let damaged = || {
        let (dev, files) = image(45);
        let (fs, _) = remount(&dev);
        let frag = fragmented(&fs, 24);
        // Every block taken: the cleared map's are the only ones a commit can be given.
        let filler = put(&fs, ROOT, "filler", b"");
        let chunk = vec![0x5au8; 1 << 20];
        let mut at = 0;
        while fs.write(filler, at, &chunk, false).is_ok() && fs.sync().is_ok() {
            at += chunk.len() as u64;
        }
        let mut at_block = at;
        while fs
            .write(filler, at_block, &[1u8; BS as usize], false)
            .is_ok()
            && fs.sync().is_ok()
        {
            at_block += BS;
        }
        fs.unmount().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let map = (vol.places().unwrap().into_iter())
            .find(|p| p.id == frag)
            .and_then(|p| p.map)
            .expect("its map in a segment");
        vol.close().unwrap();
        flip(dev.as_ref(), map.start + 3);
        (dev, files)
    };
    let (image, files) = damaged();
    let cut = each_cut_repair(&image, 80, |n, dev| {
        let r = repair(dev.clone(), Policy::default())
            .unwrap_or_else(|e| panic!("cut after {n} writes: the next repair fails: {e}"));
        assert!(r.salvage.journal_loss.is_none(), "{r:?}");
        let (fs, _) = remount(dev);
        super::repair_tests::assert_files(&fs, &files);
        fs.unmount().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(vol.check().unwrap().clean(), "cut after {n} writes");
        vol.close().unwrap();
    });
    assert!(cut > 5, "the repair was cut at {cut} points only");
}

/// A file `/frag` of `pieces` one-block pieces, every other block written: one map entry
/// each, more than a table entry holds (its map goes to a segment at the checkpoint).
fn fragmented(fs: &Fs, pieces: u64) -> u64 {
    let frag = put(fs, ROOT, "frag", b"");
    for i in 0..pieces {
        fs.write(frag, i * 2 * BS, &[i as u8 + 1; BS as usize], false)
            .unwrap();
    }
    frag
}

/// Repairs a copy of `image` cut short by a crash after each number of writes in turn
/// (up to `max`), until a repair's every write goes through, handing each cut device to
/// `after` with the number; returns how many were cut.
fn each_cut_repair(
    image: &Arc<FaultDevice<MemDevice>>,
    max: u64,
    mut after: impl FnMut(u64, &Arc<FaultDevice<MemDevice>>),
) -> usize {
    let mut bytes = vec![0u8; (8192 * BS) as usize];
    image.read_at(&mut bytes, 0).unwrap();
    let mut cut = 0;
    for n in 0..max {
        let dev = device(n);
        dev.write_at(&bytes, 0).unwrap();
        dev.flush().unwrap();
        dev.fail_after(n);
        let whole = repair(dev.clone(), Policy::default()).is_ok();
        dev.crash(extalloc::disk::device::Crash::DropAll).unwrap();
        if whole {
            break; // every write of the repair went through
        }
        cut += 1;
        after(n, &dev);
    }
    cut
}
