//! A [`Store`] whose commits carry the caller's own metadata: each commit's payload is a
//! small log entry of the caller's (here: which key got which extent), durable with the
//! allocations of the same transaction, and handed back in order at the next open, so the
//! caller rebuilds its index from the journal without a table of its own.
//!
//! `cargo run --release -p extalloc --example store_payloads` (CI runs it).

use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::store::Store;
use extalloc::{AllocRequest, Extent, Geometry, Policy, Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The caller's payload: `key=start+len`.
fn entry(key: &str, e: Extent) -> Vec<u8> {
    format!("{key}={}+{}", e.start, e.len).into_bytes()
}

fn parse(payload: &[u8]) -> Option<(String, Extent)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (key, ext) = text.split_once('=')?;
    let (start, len) = ext.split_once('+')?;
    Some((
        key.into(),
        Extent::new(start.parse().ok()?, len.parse().ok()?),
    ))
}

fn main() -> Result<()> {
    let dev = Arc::new(FaultDevice::new(MemDevice::new(64 << 20), 3));
    let geometry = Geometry::new(4096, 4096, (64 << 20) / 4096)?;
    let store = Store::create(dev.clone(), &geometry, 1024, Policy::default())?;
    let mut index = BTreeMap::new();
    for i in 0..100u64 {
        let key = format!("object-{i}");
        let e = store.allocate(&AllocRequest::new(i, 1 + i % 8))?;
        store.commit(&entry(&key, e))?; // the extent and its key, durable together
        index.insert(key, e);
    }
    // One more allocation, never committed: a crash forgets it and its blocks.
    let lost = store.allocate(&AllocRequest::new(999, 64))?;
    dev.fail_writes(true);
    drop(store);
    dev.crash(Crash::DropAll)?;
    dev.fail_writes(false);

    let (store, records) = Store::open(dev.clone(), Policy::default())?;
    let rebuilt: BTreeMap<String, Extent> =
        records.iter().filter_map(|r| parse(&r.payload)).collect();
    assert_eq!(rebuilt, index, "the index rebuilt from the payloads");
    for e in rebuilt.values() {
        assert!(
            !store.allocator().is_free(e.start)?,
            "a committed extent stays allocated"
        );
    }
    assert!(
        store.allocator().is_free(lost.start)?,
        "the uncommitted one is free again"
    );
    println!(
        "{} records replayed, {} keys rebuilt from their payloads; the uncommitted \
         allocation of {} blocks is free again",
        records.len(),
        rebuilt.len(),
        lost.len
    );
    Ok(())
}
