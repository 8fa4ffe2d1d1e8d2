//! Tests of [`Volume::rebuild_allocation`]: bitmaps and descriptors rebuilt from the files'
//! maps after damage, written home by the next checkpoint.

use super::*;
use crate::disk::device::MemDevice;
use crate::disk::format::{read_superblock, DESC_BYTES};

const BS: u64 = 4096;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(seed * 2 + 1).wrapping_add(seed) as u8)
        .collect()
}

/// A volume of 8 groups with 12 files spread over them, closed.
fn image() -> (Arc<MemDevice>, Vec<(u64, Vec<u8>)>) {
    let dev = Arc::new(MemDevice::new(8192 * BS));
    let g = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &g, 64, Policy::default()).unwrap();
    let files = write_files(&vol);
    vol.close().unwrap();
    (dev, files)
}

/// 12 files of 300,000 bytes each, placed by keys that spread them over the groups.
fn write_files(vol: &Volume) -> Vec<(u64, Vec<u8>)> {
    let mut files = Vec::new();
    for i in 0..12u64 {
        let f = vol.create_placed(b"", i * 977).unwrap();
        let data = pattern(i, 300_000);
        vol.write(f, 0, &data).unwrap();
        files.push((f, data));
    }
    files
}

fn flip(dev: &MemDevice, at: u64) {
    let mut b = [0u8];
    dev.read_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    dev.write_at(&b, at).unwrap();
}

fn assert_files(vol: &Volume, files: &[(u64, Vec<u8>)], when: &str) {
    for (f, data) in files {
        let got = vol.read(*f, 0, data.len() as u64);
        assert!(
            got.as_ref().ok() == Some(data),
            "{when}: file {f}: {:?}",
            got.err()
        );
    }
}

/// Damage to bitmaps (a flipped byte, a zeroed block) and to a descriptor: the open holds
/// the groups corrupt; a rebuild clears them, the checkpoint writes them home, and the next
/// open finds every group sound, the ownership check clean, and a device filled to the last
/// block leaves every file's data as it was (no block of a file was handed out).
#[test]
fn a_rebuild_repairs_damaged_bitmaps_and_descriptors() {
    let (dev, files) = image();
    let sb = read_superblock(dev.as_ref()).unwrap();
    let bitmap = |g: u64| (sb.bitmap_start + g * u64::from(sb.bitmap_blocks)) * BS;
    flip(&dev, bitmap(2) + 100);
    dev.write_at(&vec![0u8; BS as usize], bitmap(5)).unwrap();
    flip(&dev, sb.desc_start * BS + 6 * DESC_BYTES as u64 + 3);
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for g in 0..8 {
        vol.store().ensure_loaded(g).unwrap();
    }
    assert_eq!(vol.store().corrupt_groups(), vec![2, 5, 6]);
    assert!(!vol.check().unwrap().clean());
    let rebuilt = vol.rebuild_allocation().unwrap();
    assert_eq!(rebuilt.corrupt_cleared, vec![2, 5, 6]);
    assert!(rebuilt.groups.iter().all(|g| [2, 5, 6].contains(g)));
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol.close().unwrap();

    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let check = vol.check().unwrap();
    assert!(check.clean(), "after the repair: {check:?}");
    assert!(vol.store().corrupt_groups().is_empty());
    assert_files(&vol, &files, "after the repair");
    let filler = vol.create(b"").unwrap();
    let mut at = 0;
    while vol.write(filler, at, &vec![7u8; 1 << 20]).is_ok() {
        at += 1 << 20;
    }
    assert_files(&vol, &files, "after filling the device");
    assert!(vol.check().unwrap().clean());
}

/// A rebuild on a sound volume changes nothing; one after writes (frees pending,
/// preallocations held) is refused and changes nothing.
#[test]
fn a_rebuild_of_a_sound_volume_changes_nothing_and_a_busy_one_is_refused() {
    let (dev, files) = image();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.rebuild_allocation().unwrap(), Default::default());
    vol.write(files[0].0, 0, &pattern(99, 100_000)).unwrap();
    vol.truncate(files[1].0, 0).unwrap();
    let e = vol.rebuild_allocation().unwrap_err();
    assert!(e.to_string().contains("at rest"), "{e}");
    assert!(vol.check().unwrap().clean());
}

/// A flipped bit in a group's bitmap: the group is held out of allocation, and every file,
/// those with data in that group too, still reads back whole.
#[test]
fn a_damaged_bitmap_leaves_every_file_readable() {
    let (dev, files) = image();
    let sb = read_superblock(dev.as_ref()).unwrap();
    let in_use: std::collections::BTreeSet<u64> = {
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let groups = files
            .iter()
            .flat_map(|(f, _)| vol.extents(*f).unwrap())
            .map(|e| e.extent.start / 1024)
            .collect();
        vol.close().unwrap();
        groups
    };
    for &g in &in_use {
        let at = (sb.bitmap_start + g * u64::from(sb.bitmap_blocks)) * BS + 100;
        flip(&dev, at);
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert_files(&vol, &files, &format!("group {g} damaged"));
        assert!(
            vol.store().corrupt_groups().contains(&g),
            "group {g} held out"
        );
        drop(vol);
        flip(&dev, at);
    }
}

/// The descriptor block as mkfs wrote it (every group uninitialised) put back over the
/// current one, a stale block whose checksums all pass: the files' maps name blocks those
/// groups hold free, so each such group is held corrupt when a map is adopted, every file
/// reads back whole, and a rebuild makes the volume clean again.
#[test]
fn a_stale_descriptor_block_leaves_every_file_readable() {
    let dev = Arc::new(MemDevice::new(8192 * BS));
    let g = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &g, 64, Policy::default()).unwrap();
    let sb = read_superblock(dev.as_ref()).unwrap();
    let mut fresh = vec![0u8; BS as usize];
    dev.read_at(&mut fresh, sb.desc_start * BS).unwrap();
    let files = write_files(&vol);
    vol.close().unwrap();
    dev.write_at(&fresh, sb.desc_start * BS).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_files(&vol, &files, "with the stale descriptors");
    assert!(!vol.store().corrupt_groups().is_empty());
    let rebuilt = vol.rebuild_allocation().unwrap();
    assert!(!rebuilt.corrupt_cleared.is_empty());
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean());
    assert_files(&vol, &files, "after the rebuild");
}
