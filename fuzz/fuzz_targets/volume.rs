//! Open, check and read of a damaged volume. One small volume is built once: files written,
//! fallocated and fragmented, a checkpoint (so a file table and a map segment are on the
//! device), then files truncated, unlinked and written, synced into the journal after it.
//! The input overwrites bytes of it (each patch 4 bytes of offset and 1 byte of value) in
//! its first quarter (store metadata, the journal with the volume's payloads, file data) or
//! its last group (the table areas and map segments). Neither fsck nor the volume's open
//! may panic; a volume that opens either passes its ownership check (which reads every
//! map), reads every file, and writes and syncs one more, or its check refuses a damaged
//! map as corrupt. A volume the open refuses is opened for repair (`open_salvaging`): never
//! a panic, and once its checkpoint and close succeed a plain open works and maps no block
//! twice or while free. Every input also takes `fsck --repair`'s page path on a copy
//! (`repair_a_page_at_a_time`): once it closes, a plain open checks clean.
#![no_main]

use extalloc::disk::device::{Device, MemDevice};
use extalloc::store::fsck;
use extalloc::volume::{Fallocate, Volume};
use extalloc::{Geometry, Policy};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

const BLOCK: u64 = 1024;
const BLOCKS: u64 = 8192;

fn build() -> Vec<u8> {
    let geometry = Geometry::new(BLOCK as u32, 1024, BLOCKS).expect("geometry");
    let dev = Arc::new(MemDevice::new(BLOCKS * BLOCK));
    let vol = Volume::mkfs(dev.clone(), &geometry, 96, Policy::default()).expect("mkfs");
    let mut ids = Vec::new();
    for i in 0..12u64 {
        let id = vol.create(&i.to_le_bytes()).expect("create");
        vol.write(id, i * 700, &vec![i as u8 + 1; 3000 + 500 * i as usize])
            .expect("write");
        if i % 3 == 0 {
            vol.fallocate(id, Fallocate::KeepSize, 20_000, 9000).expect("fallocate");
        }
        ids.push(id);
        if i == 6 {
            vol.sync().expect("sync");
        }
    }
    // Maps of more than four extents go to a map segment at the checkpoint.
    for k in 0..8u64 {
        for &id in &ids[6..] {
            vol.write(id, 40_000 + k * 2 * BLOCK, &[k as u8 + 9; 100]).expect("write");
        }
    }
    vol.checkpoint().expect("checkpoint");
    vol.truncate(ids[1], 100).expect("truncate");
    vol.unlink(ids[2]).expect("unlink");
    vol.write(ids[7], 60_000, &[3; 2000]).expect("write");
    vol.sync().expect("sync");
    // Dropped without close: the last changes stay in the journal.
    drop(vol);
    let mut bytes = vec![0u8; (BLOCKS * BLOCK) as usize];
    dev.read_at(&mut bytes, 0).expect("read");
    bytes
}

fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(build)
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = image().to_vec();
    // Patches land in the first quarter (metadata, journal, early data) or the last group
    // (table areas, map segments).
    let span = bytes.len() / 4;
    let group = 1024 * BLOCK as usize;
    for p in data.chunks_exact(5) {
        let at = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % (span + group);
        let at = if at < span { at } else { bytes.len() - group + (at - span) };
        bytes[at] = p[4];
    }
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BLOCKS * BLOCK));
    dev.write_at(&bytes, 0).expect("write");
    let _ = fsck::check(dev.as_ref());
    let copy: Arc<dyn Device> = Arc::new(MemDevice::new(BLOCKS * BLOCK));
    copy.write_at(&bytes, 0).expect("write");
    repair_a_page_at_a_time(copy);
    let Ok(vol) = Volume::open(dev.clone(), Policy::default()) else {
        salvage(dev);
        return;
    };
    let check = match vol.check() {
        Ok(check) => check,
        // A damaged map is found when first read (the check reads them all).
        Err(extalloc::Error::Corrupt { .. }) => return,
        Err(e) => panic!("the check of an opened volume fails with {e}"),
    };
    // A group held corrupt holds all its blocks used (fsck reports it); nothing else may
    // be wrong, and no block is ever mapped twice or mapped while free.
    assert!(
        check.clean() || (check.corrupt_groups > 0 && check.mapped_twice == 0 && check.mapped_free == 0),
        "an opened volume is consistent: {check:?}"
    );
    for f in vol.list() {
        let _ = vol.read(f.id, 0, f.size).expect("every file reads");
    }
    let id = vol.create(b"after").expect("create");
    if vol.write(id, 0, &[7; 5000]).is_ok() {
        let _ = vol.sync();
    }
});

/// The volume-level steps of `fsck --repair`'s page path (`extalloc-fuse`'s
/// `repair::whole_volume`, then the bitmaps' rebuild): opened for repair, the file tree's
/// leaves that do not read mended, the maps that do not read cleared, and taken only when
/// its ownership check finds no block mapped twice or while free and no more leaked than
/// the cleared maps and the mended leaves' lost entries named (any number when an entry
/// was lost with its bytes); the bitmaps rebuilt, the
/// pending files removed, closed. Never a panic, and once the close succeeds a plain open
/// works and its check is clean.
fn repair_a_page_at_a_time(dev: Arc<dyn Device>) {
    let Ok(vol) = Volume::open_for_repair(dev.clone(), Policy::default()) else {
        return;
    };
    let Ok(mended) = vol.mend_unreadable_leaves() else {
        return;
    };
    let Ok(cleared) = vol.clear_unreadable_maps() else {
        return;
    };
    let named: u64 = cleared.iter().map(|&(_, blocks, _)| blocks).sum();
    let Ok(check) = vol.check() else {
        return;
    };
    let leaked_allowed = mended
        .leaked_bound()
        .is_none_or(|lost| check.leaked <= named + lost);
    if check.mapped_twice > 0 || check.mapped_free > 0 || !leaked_allowed {
        return; // the salvage's (above)
    }
    if vol.rebuild_allocation().is_err() || vol.remove_pending().is_err() {
        return;
    }
    if vol.close().is_err() {
        return;
    }
    let vol = Volume::open(dev, Policy::default()).expect("a repaired volume opens");
    let check = vol.check().expect("a repaired volume's maps read");
    assert!(check.clean(), "a repaired volume checks clean: {check:?}");
}

/// Opens a volume `Volume::open` refused for repair, checkpoints it, and opens it again.
fn salvage(dev: Arc<dyn Device>) {
    let Ok((vol, _report)) = Volume::open_salvaging(dev.clone(), Policy::default()) else {
        return;
    };
    if vol.close().is_err() {
        return;
    }
    let vol = Volume::open(dev, Policy::default()).expect("a salvaged volume opens");
    if let Ok(check) = vol.check() {
        assert!(
            check.mapped_twice == 0 && check.mapped_free == 0,
            "a salvaged volume maps no block twice or while free: {check:?}"
        );
    }
}
