//! Tests of the superblock's incompatible features as the layer above sets them: the crash
//! promise (`INCOMPAT_CRASH_PENDING`), typed directory entries (`INCOMPAT_TYPED_ENTRIES`)
//! and directory runs (`INCOMPAT_DIR_RUNS`), each in memory at once and on the device from
//! the next checkpoint, and a reader that does not know a bit refusing the device.
//!
//! Data structures: none of their own (a store on a memory device). Locks: the store's.

use super::tests::geometry;
use super::Store;
use crate::alloc::Policy;
use crate::disk::device::MemDevice;
use crate::disk::format;
use std::sync::Arc;

/// A crash asks the caller to check its state, unless the caller promised that a crash
/// leaves it nothing to check (`INCOMPAT_CRASH_PENDING`, durable from the next superblock
/// write) and met no damage; damage asks for a check whatever the promise; a check clears
/// both marks. A reader that does not know a feature bit refuses the device.
#[test]
fn a_promise_covers_a_crash_but_not_damage() {
    let dev = Arc::new(MemDevice::new(8192 * 4096));
    let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
    let crash = |store: Store| {
        store.abandon();
        drop(store);
        Store::open(dev.clone(), Policy::default()).unwrap().0
    };
    let store = crash(store);
    assert!(
        store.unchecked() && store.crash_needs_check(),
        "no promise yet"
    );
    store.mark_checked();
    store.promise_crash_pending();
    // Not yet on the device: a crash now finds no promise.
    let store = crash(store);
    assert!(!store.crash_pending_promised() && store.crash_needs_check());
    store.promise_crash_pending();
    store.checkpoint().unwrap();
    let store = crash(store);
    assert!(
        store.crash_pending_promised(),
        "the promise is on the device"
    );
    assert!(store.unchecked() && !store.damaged() && !store.crash_needs_check());
    store.mark_damaged();
    store.checkpoint().unwrap();
    let store = crash(store);
    assert!(
        store.damaged() && store.crash_needs_check(),
        "damage needs a check"
    );
    store.mark_checked();
    assert!(!store.unchecked() && !store.damaged() && !store.crash_needs_check());
    store.checkpoint().unwrap();
    drop(store);
    // An unknown feature bit: refused, as an older build refuses this one.
    let mut sb = format::read_superblock(dev.as_ref()).unwrap();
    assert_eq!(sb.incompat, format::INCOMPAT_CRASH_PENDING);
    sb.incompat |= 1 << 7;
    assert!(format::Superblock::decode(&sb.encode()).is_err());
}

/// The typed-entries and directory-runs features each reach the device with the next
/// checkpoint, stay across opens, and a reader that knows only the features before
/// refuses a device carrying one.
#[test]
fn dir_features_reach_the_device_with_a_checkpoint() {
    type Feature = (fn(&Store), fn(&Store) -> bool, u32);
    let features: [Feature; 2] = [
        (
            Store::promise_typed_entries,
            Store::typed_entries_promised,
            format::INCOMPAT_TYPED_ENTRIES,
        ),
        (
            Store::promise_dir_runs,
            Store::dir_runs_promised,
            format::INCOMPAT_DIR_RUNS,
        ),
    ];
    for (promise, promised, bit) in features {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        assert!(!promised(&store), "a new store carries none");
        promise(&store);
        assert!(promised(&store));
        assert_eq!(
            format::read_superblock(dev.as_ref()).unwrap().incompat,
            0,
            "in memory only until a checkpoint"
        );
        store.checkpoint().unwrap();
        drop(store);
        let store = Store::open(dev.clone(), Policy::default()).unwrap().0;
        assert!(promised(&store), "kept across a close and an open");
        drop(store);
        // This one is set, and no other: a build that knew only the features before
        // refuses any other bit (its decode's rule, checked in the test above).
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        assert_eq!(sb.incompat, bit);
    }
}
