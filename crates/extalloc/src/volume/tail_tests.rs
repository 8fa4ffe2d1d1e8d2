//! Appends kept back until the commit (`tail.rs`): reads see them at once, the device only
//! at the commit, a crash before it loses them with the size that covered them, every
//! other change of the file writes them first, and a failed write of them fails the
//! commit.

use super::tests::{device, geometry, pattern, reopen, BS};
use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};

/// A file whose first block is mapped and written (`len` bytes of it), committed.
fn with_block(dev: &Arc<FaultDevice<MemDevice>>, len: usize) -> (Volume, u64) {
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let id = vol.create(b"log").unwrap();
    vol.write(id, 0, &pattern(1, len)).unwrap();
    vol.sync().unwrap();
    (vol, id)
}

/// Appends `n` bytes of pattern `seed` at the end of file `id` and of its model.
fn append(vol: &Volume, id: u64, model: &mut Vec<u8>, seed: u64, n: usize) {
    let rec = pattern(seed, n);
    vol.write(id, model.len() as u64, &rec).unwrap();
    model.extend_from_slice(&rec);
}

/// Small appends inside the last block reach no device until the commit, read back at
/// once, and are written by it: the model and the file agree before and after a crash
/// that follows the sync.
#[test]
fn appends_wait_for_the_commit_and_read_at_once() {
    let dev = device(51);
    let (vol, id) = with_block(&dev, 100);
    let mut model = pattern(1, 100);
    let before = dev.bytes_written();
    for i in 0..40u64 {
        append(&vol, id, &mut model, 100 + i, 37);
        assert_eq!(
            vol.read(id, 0, 8192).unwrap(),
            model,
            "append {i} reads back"
        );
    }
    assert_eq!(
        dev.bytes_written(),
        before,
        "nothing written before the commit"
    );
    // A read of the middle of the tail alone.
    assert_eq!(vol.read(id, 150, 100).unwrap(), model[150..250]);
    vol.sync().unwrap();
    assert!(dev.bytes_written() > before, "the commit wrote them");
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.read(id, 0, 8192).unwrap(), model);
    vol.close().unwrap();
}

/// A crash before the commit loses the appends with the size: the file is as committed.
#[test]
fn a_crash_before_the_commit_loses_them_with_the_size() {
    let dev = device(52);
    let (vol, id) = with_block(&dev, 300);
    vol.write(id, 300, &[9u8; 50]).unwrap();
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.size(id).unwrap(), 300);
    assert_eq!(vol.read(id, 0, 8192).unwrap(), pattern(1, 300));
    vol.close().unwrap();
}

/// An overwrite of kept bytes, a write past the block, a truncate, a punch and an unlink
/// each find the tail written first: the file reads as a model of the same calls, before
/// and after the commit and a crash.
#[test]
fn every_other_change_writes_the_tail_first() {
    let dev = device(53);
    let (vol, id) = with_block(&dev, 10);
    let mut model = pattern(1, 10);
    append(&vol, id, &mut model, 2, 30);
    // An overwrite over the kept bytes.
    vol.write(id, 20, &[7u8; 5]).unwrap();
    model[20..25].fill(7);
    append(&vol, id, &mut model, 3, 30);
    // Into the next block: a write that maps a new block.
    let far = pattern(4, (BS as usize) * 2);
    vol.write(id, model.len() as u64, &far).unwrap();
    model.extend_from_slice(&far);
    append(&vol, id, &mut model, 5, 12);
    assert_eq!(vol.read(id, 0, 4 * BS).unwrap(), model);
    // Truncate into the kept bytes, then append again.
    let cut = model.len() as u64 - 5;
    vol.truncate(id, cut).unwrap();
    model.truncate(cut as usize);
    append(&vol, id, &mut model, 6, 3);
    assert_eq!(vol.read(id, 0, 4 * BS).unwrap(), model);
    // A punch of the first block.
    vol.fallocate(id, Fallocate::PunchHole, 0, BS).unwrap();
    model[..BS as usize].fill(0);
    append(&vol, id, &mut model, 7, 9);
    assert_eq!(vol.read(id, 0, 4 * BS).unwrap(), model);
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.read(id, 0, 4 * BS).unwrap(), model);
    // An unlink with a tail kept: the commit after it has nothing of it to write.
    append(&vol, id, &mut model, 8, 20);
    vol.unlink(id).unwrap();
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    assert!(vol.size(id).is_err());
    assert!(vol.check().unwrap().clean());
    vol.close().unwrap();
}

/// The tails of many files, each appended in turn, are all written by one commit.
#[test]
fn one_commit_writes_every_files_tail() {
    let dev = device(54);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let mut files: Vec<(u64, Vec<u8>)> = (0..20u64)
        .map(|i| {
            let id = vol.create(b"").unwrap();
            vol.write(id, 0, &pattern(i, 64)).unwrap();
            (id, pattern(i, 64))
        })
        .collect();
    vol.sync().unwrap();
    for round in 0..5u64 {
        for (id, model) in &mut files {
            let rec = pattern(round * 100 + *id, 17);
            vol.write(*id, model.len() as u64, &rec).unwrap();
            model.extend_from_slice(&rec);
        }
    }
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    for (id, model) in &files {
        assert_eq!(&vol.read(*id, 0, BS).unwrap(), model, "file {id}");
    }
    vol.close().unwrap();
}

/// A device that fails the tail's write fails the commit, which records nothing, and the
/// volume latches: later commits fail too, even once the device works again (never
/// believed). The tail stays, so reads still see what the caller was told; after a crash
/// the file has the size committed before.
#[test]
fn a_failed_tail_write_fails_the_commit_and_latches() {
    let dev = device(55);
    let (vol, id) = with_block(&dev, 100);
    vol.write(id, 100, &[3u8; 40]).unwrap();
    dev.fail_writes(true);
    assert!(vol.sync().is_err(), "the tail's write failed");
    dev.fail_writes(false);
    let mut model = pattern(1, 100);
    model.extend_from_slice(&[3u8; 40]);
    assert_eq!(vol.read(id, 0, BS).unwrap(), model, "still read as written");
    assert!(
        matches!(vol.sync(), Err(Error::IoLatched { .. })),
        "a later commit is not believed"
    );
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(
        vol.read(id, 0, BS).unwrap(),
        pattern(1, 100),
        "the committed size"
    );
    vol.close().unwrap();
}

/// A new attribute blob and a close touch no block: the tail stays kept back through them
/// (a directory's times change with each of its records), and the commit writes it.
#[test]
fn a_blob_and_a_close_leave_the_tail() {
    let dev = device(56);
    let (vol, id) = with_block(&dev, 64);
    let mut model = pattern(1, 64);
    let before = dev.bytes_written();
    for i in 0..10u64 {
        append(&vol, id, &mut model, 200 + i, 21);
        vol.set_attr(id, format!("mtime {i}").as_bytes()).unwrap();
        vol.close_file(id).unwrap();
    }
    assert_eq!(
        dev.bytes_written(),
        before,
        "nothing written before the commit"
    );
    assert_eq!(vol.read(id, 0, BS).unwrap(), model);
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.read(id, 0, BS).unwrap(), model);
    assert_eq!(vol.attr(id).unwrap(), b"mtime 9");
    vol.close().unwrap();
}
