//! Tests of `extalloc fsck --repair`'s pipeline (`crate::repair`): damaged bitmaps and
//! descriptors rebuilt, damaged inodes given a new one, names lost to a damaged log linked
//! into /lost+found; afterwards the check is clean, mount serves every file, and a device
//! filled to the last block overwrites none of them.

use super::tests::{device, fresh, mkdir, put, remount, ME};
use super::*;
use crate::repair::repair;
use extalloc::disk::device::{Device, FaultDevice, MemDevice};
use extalloc::disk::format::{read_superblock, DESC_BYTES};
use extalloc::Policy;
use std::sync::Arc;

pub(super) const BS: u64 = 4096;

/// Each file's path and content.
pub(super) type Files = Vec<(String, Vec<u8>)>;

/// A file system with files in several groups, a directory and a link, unmounted.
pub(super) fn image(seed: u64) -> (Arc<FaultDevice<MemDevice>>, Files) {
    let dev = device(seed);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    let mut files = Vec::new();
    for i in 0..10u64 {
        let data: Vec<u8> = (0..(i as usize + 1) * 150_000)
            .map(|b| (b as u64 * (i + 3)) as u8)
            .collect();
        let (dir, path) = if i % 2 == 0 {
            (ROOT, format!("f{i}"))
        } else {
            (d, format!("d/f{i}"))
        };
        put(&fs, dir, path.rsplit('/').next().unwrap(), &data);
        files.push((path, data));
    }
    fs.unmount().unwrap();
    (dev, files)
}

pub(super) fn flip(dev: &dyn Device, at: u64) {
    let mut b = [0u8];
    dev.read_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    dev.write_at(&b, at).unwrap();
}

/// Every file reads back whole under its path, or (when `moved` allows) under
/// /lost+found/#INODE.
pub(super) fn assert_files(fs: &Fs, files: &[(String, Vec<u8>)]) {
    for (path, data) in files {
        let ino = super::tests::find(fs, path).unwrap_or_else(|e| panic!("{path}: {e:?}"));
        assert_eq!(&fs.read(ino, 0, 1 << 24).unwrap(), data, "{path}");
    }
}

/// The store's, the ownership and the namespace checks are clean, then mount serves every
/// file, and
/// filling the device to the last block leaves every file as it was.
pub(super) fn assert_repaired(dev: &Arc<FaultDevice<MemDevice>>, files: &[(String, Vec<u8>)]) {
    let store = extalloc::store::fsck::check(dev.as_ref()).unwrap();
    assert!(store.clean(), "{store:?}");
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let c = vol.check().unwrap();
    assert!(c.clean(), "{c:?}");
    let n = check(&vol).unwrap();
    assert!(n.clean(), "{n:?}");
    drop(vol);
    let (fs, r) = remount(dev);
    assert!(r.repaired.clean() && r.corrupt_groups.is_empty(), "{r:?}");
    assert_files(&fs, files);
    let filler = fs
        .make(ROOT, b"filler", super::tests::node(Kind::File), ME)
        .unwrap()
        .ino;
    let chunk = vec![0x5au8; 1 << 20];
    let mut at = 0;
    while fs.write(filler, at, &chunk, false).is_ok() && fs.sync().is_ok() {
        at += chunk.len() as u64;
    }
    assert!(at > 0, "the filler wrote something");
    assert_files(&fs, files);
}

/// Bitmaps (a flipped byte, a zeroed block), a descriptor and the primary superblock
/// damaged: the check says so,
/// the repair rebuilds each from the files' maps, and the result is whole.
#[test]
fn repair_rebuilds_damaged_bitmaps_and_descriptors() {
    let (dev, files) = image(41);
    let sb = read_superblock(dev.as_ref()).unwrap();
    let bitmap = |g: u64| (sb.bitmap_start + g * u64::from(sb.bitmap_blocks)) * BS;
    flip(dev.as_ref(), bitmap(1) + 40);
    dev.write_at(&vec![0u8; BS as usize], bitmap(2)).unwrap();
    flip(dev.as_ref(), sb.desc_start * BS + 3 * DESC_BYTES as u64 + 1);
    flip(dev.as_ref(), 20); // the primary superblock
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.allocation.corrupt_cleared, vec![1, 2, 3], "{r:?}");
    assert_eq!(r.superblocks_rewritten, vec!["primary"]);
    assert!(r.changed() && !r.changes().is_empty());
    assert_repaired(&dev, &files);
    let again = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!again.changed(), "a second repair finds nothing: {again:?}");
}

/// A file's and a directory's attribute blobs overwritten: the check reports them, mount
/// refuses, and the repair gives each a new inode of the right kind, under its old name.
#[test]
fn repair_gives_damaged_inodes_new_ones_and_keeps_their_data_and_names() {
    let (dev, files) = image(42);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let paths = paths(&vol).unwrap();
    let ino_of = |p: &str| *paths.iter().find(|(_, (q, _))| q == p).unwrap().0;
    let (file, dir) = (ino_of("/f0"), ino_of("/d"));
    for id in [file, dir] {
        vol.set_attr(id, b"not an inode").unwrap();
    }
    vol.sync().unwrap();
    let seen = check(&vol).unwrap();
    assert_eq!(seen.damaged_inodes, vec![file.min(dir), file.max(dir)]);
    // After a crash the mount reads every inode, and refuses.
    super::tests::drop_as_crash(vol);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let e = Fs::mount(vol, Default::default()).err().unwrap();
    assert!(e.contains("fsck --repair"), "{e}");
    let r = repair(dev.clone(), Policy::default()).unwrap();
    let mut remade = r.inodes_remade.clone();
    remade.sort_unstable_by_key(|(i, _)| *i);
    let mut want = vec![(file, Kind::File), (dir, Kind::Dir)];
    want.sort_unstable_by_key(|(i, _)| *i);
    assert_eq!(remade, want);
    assert_repaired(&dev, &files);
}

/// An inode a newer extalloc wrote (an encoding version this one does not know) is not
/// damage: check and mount refuse the volume saying so, and the repair changes nothing.
#[test]
fn an_inode_of_a_newer_encoding_is_refused_not_repaired() {
    let (dev, files) = image(43);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let paths = paths(&vol).unwrap();
    let file = *paths.iter().find(|(_, (q, _))| q == "/f0").unwrap().0;
    let mut blob = vol.attr(file).unwrap();
    let version = blob[4];
    blob[4] = 9;
    vol.set_attr(file, &blob).unwrap();
    vol.sync().unwrap();
    let e = check(&vol).err().unwrap();
    assert!(e.contains("newer extalloc"), "{e}");
    // After a crash the mount reads every inode, and refuses.
    super::tests::drop_as_crash(vol);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let e = Fs::mount(vol, Default::default()).err().unwrap();
    assert!(e.contains("newer extalloc"), "{e}");
    let e = repair(dev.clone(), Policy::default()).err().unwrap();
    assert!(e.contains("newer extalloc"), "{e}");
    // Put back as it was: every file there, nothing lost to the refused repair.
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    blob[4] = version;
    vol.set_attr(file, &blob).unwrap();
    vol.sync().unwrap();
    drop(vol);
    assert_repaired(&dev, &files);
}

/// A device of one group whose bitmap or descriptor is damaged: mount serves every file
/// (the group held out of allocation, so writes fail with no space), and the repair makes
/// it whole.
#[test]
fn a_single_group_with_a_damaged_bitmap_or_descriptor_mounts_and_is_repaired() {
    for descriptor in [false, true] {
        single_group_damaged(descriptor);
    }
}

fn single_group_damaged(descriptor: bool) {
    let dev = device(43);
    let geometry = extalloc::Geometry::new(4096, 8192, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let (fs, _) = Fs::mount(vol, Default::default()).unwrap();
    let data = vec![0x33u8; 200_000];
    put(&fs, ROOT, "only", &data);
    fs.unmount().unwrap();
    let files = vec![("only".to_string(), data)];
    let sb = read_superblock(dev.as_ref()).unwrap();
    assert_eq!(sb.groups(), 1);
    let at = if descriptor {
        sb.desc_start
    } else {
        sb.bitmap_start
    };
    flip(dev.as_ref(), at * BS + 8);
    let (fs, r) = remount(&dev);
    assert_eq!(r.corrupt_groups, vec![0]);
    assert_files(&fs, &files);
    drop(fs);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert_eq!(r.allocation.corrupt_cleared, vec![0]);
    assert_repaired(&dev, &files);
}

/// One flipped byte in each file's file table entry in turn (its id, attributes, size or
/// map):
/// mount refuses, naming the repair; the repair keeps every other file whole under its
/// name, and the hit file is whole under its name or in /lost+found, or reported lost.
#[test]
fn a_damaged_table_entry_costs_at_most_its_file() {
    let (dev, files) = image(44);
    let mut pristine = vec![0u8; 8192 * BS as usize];
    dev.read_at(&mut pristine, 0).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let paths = paths(&vol).unwrap();
    let places = vol.places().unwrap();
    drop(vol);
    let (mut kept_count, mut lost_count) = (0, 0);
    for (k, (path, data)) in files.iter().enumerate() {
        let ino = *paths
            .iter()
            .find(|(_, (p, _))| p == &format!("/{path}"))
            .unwrap()
            .0;
        let place = places.iter().find(|p| p.id == ino).unwrap();
        dev.write_at(&pristine, 0).unwrap();
        dev.flush().unwrap();
        let at = place.table.start + (place.table.end - place.table.start) * (k as u64 % 7 + 1) / 9;
        flip(dev.as_ref(), at);
        let e = Volume::open(dev.clone(), Policy::default()).err().unwrap();
        assert!(e.to_string().contains("fsck --repair"), "{e}");
        let r = repair(dev.clone(), Policy::default()).unwrap();
        assert!(r.changed(), "{r:?}");
        let others: Files = files.iter().filter(|(p, _)| p != path).cloned().collect();
        let (fs, m) = remount(&dev);
        assert!(m.repaired.clean(), "{m:?}");
        assert_files(&fs, &others);
        // The one damaged entry's file, kept (under a new id if the damage hit its id).
        let kept = r.salvage.recovered.first().map(|(n, _)| *n);
        if let Some(now) = kept {
            let at_path = super::tests::find(&fs, path).ok() == Some(now);
            let in_lf = super::tests::find(&fs, &format!("lost+found/#{now}")).ok() == Some(now);
            assert!(at_path || in_lf, "{path}: kept as {now} but not named");
            let got = fs.read(now, 0, 1 << 24).unwrap();
            assert!(got.starts_with(data), "{path}: kept with other data");
            kept_count += 1;
        } else {
            assert_eq!(
                r.salvage.lost.len(),
                1,
                "{path}: neither kept nor lost: {r:?}"
            );
            lost_count += 1;
        }
        drop(fs);
        assert_repaired(&dev, &others);
    }
    eprintln!("{kept_count} hit files kept, {lost_count} lost");
    assert!(
        kept_count > 0,
        "a byte in the attributes or size keeps the file"
    );
}

/// 200 files `f000`.. in the root directory, of `len` bytes each, no two blocks alike.
fn two_hundred_files(fs: &Fs, len: u64) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for i in 0..200u64 {
        let byte = |b: u64| (b * (i + 7) + b / BS * 13 + 1) as u8;
        let data: Vec<u8> = (0..len).map(byte).collect();
        let name = format!("f{i:03}");
        put(fs, ROOT, &name, &data);
        files.push((name, data));
    }
    files
}

/// Zeroes the file tree's root (the internal node of the newest checkpoint, the highest
/// level of it) and returns its block.
fn zero_the_tree_root(dev: &Arc<FaultDevice<MemDevice>>) -> u64 {
    let mut root = None;
    let mut node = vec![0u8; BS as usize];
    for b in 0..dev.size() / BS {
        dev.read_at(&mut node, b * BS).unwrap();
        let generation = u64::from_le_bytes(node[16..24].try_into().unwrap());
        if &node[..4] == b"XVBN"
            && node[4] > 0
            && root.is_none_or(|(g, l, _)| (generation, node[4]) > (g, l))
        {
            root = Some((generation, node[4], b));
        }
    }
    let (_, _, block) = root.expect("a tree of two levels at least");
    dev.write_at(&vec![0u8; BS as usize], block * BS).unwrap();
    block
}

/// The volume's file tree loses its root (an internal node, zeroed: no magic left to say
/// what it was): mount refuses; the repair makes the root again over the leaves under it
/// (on the page path: nothing salvaged), says so, and every file comes back whole under
/// its name (before the salvage's scan, the repair refused such a volume: no file left
/// holding an inode).
#[test]
fn a_zeroed_file_tree_root_costs_no_file() {
    let dev = device(46);
    let fs = fresh(&dev);
    let files = two_hundred_files(&fs, 5000);
    fs.unmount().unwrap();
    let block = zero_the_tree_root(&dev);
    let e = Volume::open(dev.clone(), Policy::default()).err().unwrap();
    assert!(e.to_string().contains("fsck --repair"), "{e}");
    let r = repair(dev.clone(), Policy::default()).unwrap();
    // Made again over the leaves under it, on the page path: no file salvaged.
    let found = r.salvage.root_found.clone().expect("the root made again");
    assert_eq!(found.lost.0, block, "{found:?}");
    assert!(!r.salvaged && r.salvage.tree_scan.is_none(), "{r:?}");
    assert!(
        r.salvage.recovered.is_empty() && r.salvage.lost.is_empty(),
        "{r:?}"
    );
    let text = crate::repair::salvage_lines(&r.salvage).join("\n");
    assert!(
        text.contains(&format!("root at block {block} lost")),
        "{text}"
    );
    assert_repaired(&dev, &files);
}

/// The root lost and a bad sector in a file's data (its reads fail as Linux's do): the
/// repair's scans skip the block (the look's and the repair's: the second reads only the
/// nodes the first found), the root is made again on the page path, the report names the
/// block skipped, and every file keeps its name and data but that one block, which still
/// fails to read.
#[test]
fn a_bad_sector_in_data_does_not_stop_the_repair_of_a_lost_root() {
    let dev = device(47);
    let fs = fresh(&dev);
    let mut files = two_hundred_files(&fs, 9000);
    fs.unmount().unwrap();
    zero_the_tree_root(&dev);
    // File 90's second block: its bytes at 4096.. name it.
    let wanted = &files[90].1[BS as usize..2 * BS as usize];
    let mut block = vec![0u8; BS as usize];
    let bad = (0..dev.size() / BS)
        .find(|b| {
            dev.read_at(&mut block, b * BS).unwrap();
            block == wanted
        })
        .expect("the file's block");
    dev.fail_reads_in(bad * BS..(bad + 1) * BS);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    let found = r.salvage.root_found.clone().expect("the root made again");
    assert_eq!(found.blocks_unreadable, 1, "{found:?}");
    assert!(!r.salvaged && r.salvage.lost.is_empty(), "{r:?}");
    let text = crate::repair::salvage_lines(&r.salvage).join("\n");
    assert!(text.contains("1 of those blocks did not read"), "{text}");
    let (fs, _) = remount(&dev);
    let ino = super::tests::find(&fs, "f090").unwrap();
    assert_eq!(
        fs.read(ino, 0, BS as u32).unwrap(),
        files[90].1[..BS as usize]
    );
    assert_eq!(fs.read(ino, BS, BS as u32).err(), Some(Errno(libc::EIO)));
    drop(fs);
    files.remove(90);
    assert_repaired(&dev, &files);
}

/// The file tree's root and a leaf under one of its children lost together (both
/// zeroed), in a tree of three levels: the repair makes the root again with a hole where
/// the leaf was, on the page path (nothing salvaged: no file's entry held in memory), and
/// says so; the mend rebuilds the leaf's range, the names of the files it held that the
/// previous checkpoint does not give back go with their inodes, and every other file
/// comes back whole under its name.
#[test]
fn a_lost_root_and_leaf_cost_only_the_leafs_files() {
    let dev = device(48);
    let fs = fresh(&dev);
    let mut files: Files = (0..6000u64)
        .map(|i| {
            let name = format!("n{i:05}");
            put(&fs, ROOT, &name, name.as_bytes());
            (name.clone(), name.into_bytes())
        })
        .collect();
    let inos: Vec<u64> = (files.iter())
        .map(|(name, _)| super::tests::find(&fs, name).unwrap())
        .collect();
    fs.unmount().unwrap();
    // The leaf holding the entry of the middle file's inode.
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let places = vol.places().unwrap();
    drop(vol);
    let leaf_of = |ino: u64| (places.iter().find(|p| p.id == ino)).map(|p| p.table.start / BS);
    let leaf = leaf_of(inos[3000]).expect("an entry in the tree");
    let root = zero_the_tree_root(&dev);
    dev.write_at(&vec![0u8; BS as usize], leaf * BS).unwrap();
    let r = repair(dev.clone(), Policy::default()).unwrap();
    let found = r.salvage.root_found.clone().expect("the root made again");
    assert_eq!((found.lost.0, found.holes), (root, 1), "{found:?}");
    assert!(!r.salvaged && r.salvage.tree_scan.is_none(), "{r:?}");
    let text = crate::repair::salvage_lines(&r.salvage).join("\n");
    assert!(text.contains("under 1 node(s) they name"), "{text}");
    let (fs, _) = remount(&dev);
    let held: Vec<usize> = (0..files.len())
        .filter(|&i| leaf_of(inos[i]) == Some(leaf))
        .collect();
    assert!(held.contains(&3000) && held.len() < 100, "{held:?}");
    // The leaf's files the previous checkpoint's tree held come back from it (whether it
    // did depends on when the background commits ran); the others are lost.
    let restored = |i: &&usize| r.salvage.restored.contains(&inos[**i]);
    for &i in held.iter().rev().filter(|i| !restored(i)) {
        let (name, _) = files.remove(i);
        assert!(
            super::tests::find(&fs, &name).is_err(),
            "{name}: its inode was lost"
        );
    }
    drop(fs);
    assert_repaired(&dev, &files);
}

/// The root directory's volume file gone (as when its table entry is lost): mount refuses,
/// and the repair makes an empty root again and links everything it named into
/// /lost+found, with the data.
#[test]
fn a_lost_root_is_made_again_and_its_children_go_to_lost_and_found() {
    let (dev, files) = image(45);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let by_path: Vec<(u64, String)> = paths(&vol)
        .unwrap()
        .into_iter()
        .map(|(i, (p, _))| (i, p))
        .collect();
    vol.unlink(ROOT).unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(check(&vol).is_err(), "the root is gone");
    drop(vol);
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert!(r.root_made, "{r:?}");
    let (fs, _) = remount(&dev);
    for (path, data) in &files {
        // A top-level file is /lost+found/#INODE; one in d is under d's entry there.
        let ino = by_path
            .iter()
            .find(|(_, p)| p == &format!("/{path}"))
            .unwrap()
            .0;
        let top = path.split('/').next().unwrap();
        let top_ino = by_path
            .iter()
            .find(|(_, p)| p == &format!("/{top}"))
            .unwrap()
            .0;
        let rest = path.strip_prefix(top).unwrap();
        let moved = format!("lost+found/#{top_ino}{rest}");
        assert_eq!(super::tests::find(&fs, &moved).unwrap(), ino, "{moved}");
        assert_eq!(&fs.read(ino, 0, 1 << 24).unwrap(), data, "{moved}");
    }
}

/// A volume made by mkfs and never mounted holds no file system yet: the repair finds
/// nothing to do (and does not call it damage).
#[test]
fn a_fresh_volume_has_nothing_to_repair() {
    let dev = device(46);
    let geometry = extalloc::Geometry::new(4096, 1024, 8192).unwrap();
    Volume::mkfs(dev.clone(), &geometry, 64, Policy::default())
        .unwrap()
        .close()
        .unwrap();
    let r = repair(dev.clone(), Policy::default()).unwrap();
    assert!(!r.changed(), "{r:?}");
}

/// A volume of 1 KiB blocks filled with one-block files, every other one removed, then a
/// crash: no free run of a tree node's four blocks is left, yet a read-write mount commits
/// its recovery from the node reserve (`volume/pool.rs`; before it, this mount refused
/// with half the device free) and serves every file. With the device refusing writes the
/// read-write mount cannot commit; a read-only mount still serves every file, its recovery
/// kept in memory (`Fs::mount_read_only`).
#[test]
fn a_volume_fragmented_to_single_blocks_mounts_and_read_only_needs_no_write() {
    let dev = Arc::new(FaultDevice::new(MemDevice::new(4096 * 1024), 5));
    let geometry = extalloc::Geometry::new(1024, 4096, 4096).unwrap();
    let vol =
        extalloc::volume::Volume::mkfs(dev.clone(), &geometry, 256, Policy::default()).unwrap();
    let (fs, _) = Fs::mount(vol, extalloc::writeback::WritebackOptions::default()).unwrap();
    let mut n = 0u32;
    let file = || super::tests::node(crate::inode::Kind::File);
    while let Ok(a) = fs.make(ROOT, format!("f{n}").as_bytes(), file(), ME) {
        // Each file committed on its own: its metadata's runs taken one after another.
        if fs.write(a.ino, 0, &[n as u8; 1000], false).is_err() || fs.sync().is_err() {
            break;
        }
        n += 1;
    }
    let _ = fs.sync();
    let mut kept = Vec::new();
    for i in 0..n {
        if i % 2 == 0 {
            if fs.unlink(ROOT, format!("f{i}").as_bytes()).is_err() {
                kept.extend(i..n);
                break;
            }
        } else {
            kept.push(i);
        }
    }
    assert!(n > 1000, "{n} files made");
    drop(fs); // a crash: what the last commit holds, and the journal after it
    dev.crash(extalloc::disk::device::Crash::DropAll).unwrap();
    let open = || extalloc::volume::Volume::open(dev.clone(), Policy::default()).unwrap();
    // An orphan as a build before the store's promise leaves one (an inode of link count
    // 0, published), and its crash: the read-write mount then counts the namespace and
    // must write the orphan's removal.
    let vol = open();
    let mut inode = crate::inode::Inode::new(Kind::File, 0o644, 0, 0, 0);
    inode.nlink = 0;
    vol.create(&inode.encode()).unwrap();
    vol.sync().unwrap();
    vol.store().abandon();
    drop(vol);
    super::tests::before_the_promise(&dev);
    let opts = extalloc::writeback::WritebackOptions::default;
    let reads_back = |fs: &Fs| {
        for &i in kept.iter().step_by(7).take(80) {
            let ino = fs.lookup(ROOT, format!("f{i}").as_bytes()).unwrap().ino;
            assert_eq!(fs.read(ino, 0, 2000).unwrap(), vec![i as u8; 1000], "f{i}");
        }
    };
    // Its device refusing every write once open: the read-write mount cannot commit.
    let vol = open();
    dev.fail_writes(true);
    let err = Fs::mount(vol, opts()).err();
    assert!(
        err.is_some(),
        "the premise: a read-write mount cannot commit with writes refused ({n} files)"
    );
    dev.fail_writes(false);
    let (fs, _) = Fs::mount_read_only(open(), opts()).expect("a read-only mount never writes");
    reads_back(&fs);
    drop(fs);
    let (fs, _) = Fs::mount(open(), opts()).expect("a fragmented volume mounts read-write");
    reads_back(&fs);
    fs.sync().unwrap();
}
