//! The I/O-error latch under a device that fails as Linux does: a failed flush forgets the
//! writes it did not make durable and reports once, so a retried sync must never be
//! believed (`docs/volume.md`, "A failed write or flush").

use super::tests::{device, geometry};
use super::*;
use crate::disk::device::Crash;
use crate::ErrorKind;

/// The probe of the Reliability issue, through the public API: file A (0xAA) written,
/// synced, removed; file B (0x55) written over A's freed blocks; the sync fails (Linux
/// drops B's data); a retried sync must fail too, and after a power cut no file reads A's
/// bytes. Before the latch the retry returned `Ok` and B read 256 KiB of 0xAA, with
/// `Volume::check` clean.
#[test]
fn a_failed_flush_latches_and_no_file_reads_a_deleted_files_bytes() {
    let dev = device(11);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let a = vol.create(b"a").unwrap();
    vol.write(a, 0, &[0xAA; 256 * 1024]).unwrap();
    vol.sync().unwrap();
    // The rest of the device taken, so that B can only have A's blocks.
    let filler = vol.create(b"filler").unwrap();
    let mut at = 0;
    while vol
        .fallocate(filler, Fallocate::Allocate, at, 1 << 20)
        .is_ok()
    {
        at += 1 << 20;
    }
    let mut step = 256 * 1024;
    while step >= 4096 {
        if vol.fallocate(filler, Fallocate::Allocate, at, step).is_ok() {
            at += step;
        } else {
            step /= 2;
        }
    }
    vol.close_file(filler).unwrap();
    vol.sync().unwrap();
    let a_blocks: Vec<Extent> = vol.extents(a).unwrap().iter().map(|e| e.extent).collect();
    vol.unlink(a).unwrap();
    vol.sync().unwrap();
    let b = vol.create(b"b").unwrap();
    vol.write(b, 0, &[0x55; 256 * 1024]).unwrap();
    let b_blocks: Vec<Extent> = vol.extents(b).unwrap().iter().map(|e| e.extent).collect();
    assert!(
        b_blocks.iter().any(|e| a_blocks
            .iter()
            .any(|f| f.start < e.end() && e.start < f.end())),
        "B reuses A's blocks: {a_blocks:?} / {b_blocks:?} (the probe needs them)"
    );
    dev.fail_flushes(1);
    let first = vol.sync().expect_err("the flush failed");
    assert_eq!(first.kind(), ErrorKind::Io, "{first}");
    let retried = vol.sync().expect_err("a retried sync is never believed");
    assert!(matches!(retried, Error::IoLatched { .. }), "{retried}");
    assert_eq!(retried.kind(), ErrorKind::Aborted, "{retried}");
    assert!(
        vol.write(b, 0, b"x").is_err(),
        "mutations refuse once latched"
    );
    assert!(vol.store().io_failure().is_some());
    // Reads go on: what the page cache holds.
    assert_eq!(vol.read(b, 0, 4).unwrap(), [0x55; 4]);
    drop(vol);
    dev.crash(Crash::KeepAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for f in vol.list() {
        let bytes = vol.read(f.id, 0, f.size).unwrap();
        assert!(
            !bytes.contains(&0xAA),
            "file {} reads a deleted file's bytes",
            f.id
        );
    }
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
}

/// A failed data write latches too: the sync after it fails, and nothing is committed.
#[test]
fn a_failed_write_latches_the_volume() {
    let dev = device(12);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let a = vol.create(b"a").unwrap();
    vol.sync().unwrap();
    dev.fail_writes(true);
    assert!(vol.write(a, 0, &[1; 8192]).is_err());
    dev.fail_writes(false);
    let e = vol.sync().expect_err("latched");
    assert!(matches!(e, Error::IoLatched { .. }), "{e}");
    assert!(matches!(vol.checkpoint(), Err(Error::IoLatched { .. })));
    drop(vol);
    dev.crash(Crash::KeepAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.size(a).unwrap(), 0);
    assert!(vol.check().unwrap().clean());
}
