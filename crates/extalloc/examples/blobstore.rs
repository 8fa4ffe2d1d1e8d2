//! A blob store on a [`Volume`]: each blob a file whose attribute blob holds its key, put
//! with [`Volume::put`] (one call: a pending file no listing shows, its space allocated at
//! once so the blob is one extent, its bytes, its unused preallocation given back, then
//! published under its key: a crash leaves the whole blob or nothing, with no marker of
//! the caller's own), made durable by `sync`; the index rebuilt in one pass
//! ([`Volume::list_with_attrs`]); then a crash that loses every unflushed write, a reopen,
//! and every synced blob read back and verified, the unsynced ones gone whole.
//!
//! `cargo run --release -p extalloc --example blobstore` (CI runs it).

use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::volume::Volume;
use extalloc::{Geometry, Policy, Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A blob's bytes, from its key.
fn content(key: &str, len: usize) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(0u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (0..len).map(|i| seed.wrapping_add((i / 7) as u8)).collect()
}

/// Every blob by key, read back.
fn index(vol: &Volume) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut blobs = BTreeMap::new();
    for (f, attr) in vol.list_with_attrs() {
        let key = String::from_utf8_lossy(&attr).into_owned();
        blobs.insert(key, vol.read(f.id, 0, f.size)?);
    }
    Ok(blobs)
}

fn main() -> Result<()> {
    // A device that keeps writes volatile until a flush and can lose them: a power cut.
    let dev = Arc::new(FaultDevice::new(MemDevice::new(256 << 20), 7));
    let geometry = Geometry::new(4096, 8192, (256 << 20) / 4096)?;
    let journal = extalloc::disk::format::default_journal_blocks(256 << 20, 4096);
    let vol = Volume::mkfs(dev.clone(), &geometry, journal, Policy::default())?;

    let mut synced = BTreeMap::new();
    for i in 0..200 {
        let key = format!("photos/{i:04}.jpg");
        let data = content(&key, 1000 + i * 997);
        vol.put(key.as_bytes(), &data)?;
        synced.insert(key, data);
    }
    vol.sync()?; // the 200 blobs are durable from here
    for i in 0..50 {
        let key = format!("tmp/{i}");
        vol.put(key.as_bytes(), &content(&key, 50_000))?;
    }
    let (s, files) = (vol.statfs(), vol.list());
    let extents: u64 = files.iter().map(|f| f.extents).sum();
    println!(
        "put 250 blobs ({extents} extents for {} files), synced 200; free {} of {} blocks",
        files.len(),
        s.free_blocks,
        s.blocks
    );
    assert_eq!(
        extents,
        files.len() as u64,
        "one extent a blob on a fresh volume"
    );
    assert!(
        files.iter().all(|f| f.prealloc_blocks == 0),
        "no space held after a put"
    );

    // Power cut: the daemon is gone (nothing more reaches the device) and every write
    // since the last flush is lost.
    dev.fail_writes(true);
    drop(vol);
    dev.crash(Crash::DropAll)?;
    dev.fail_writes(false);

    let vol = Volume::open(dev.clone(), Policy::default())?;
    let back = index(&vol)?;
    assert_eq!(back, synced, "exactly the synced blobs, byte for byte");
    assert!(vol.check()?.clean(), "no block lost, leaked or owned twice");
    println!(
        "after the crash: {} blobs back, all verified; the 50 unsynced ones gone whole",
        back.len()
    );
    vol.close()
}
