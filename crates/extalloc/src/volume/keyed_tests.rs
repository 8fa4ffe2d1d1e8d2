//! Blobs by key (`keyed.rs`): a keyed put replaces the key's blob, a crash at any write of
//! a replacing put leaves the key naming exactly one blob (old or new, whole), keys stay
//! unique across reopens and concurrent puts, and bad keys are refused.

use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};

fn geometry() -> Geometry {
    Geometry::new(4096, 1024, 8192).unwrap()
}

fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

/// Power lost: writes fail, the volume dropped, unflushed writes lost, opened again.
fn power_loss(dev: &Arc<FaultDevice<MemDevice>>, vol: Volume) -> Volume {
    dev.fail_writes(true);
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    Volume::open(dev.clone(), Policy::default()).unwrap()
}

/// The ids of the published files whose blob is `key`.
fn under(vol: &Volume, key: &[u8]) -> Vec<u64> {
    vol.list_with_attrs()
        .into_iter()
        .filter(|(_, a)| a == key)
        .map(|(f, _)| f.id)
        .collect()
}

#[test]
fn a_keyed_put_replaces_the_keys_blob_and_keys_stay_unique_across_reopens() {
    let dev = device(1);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    assert_eq!(vol.get_keyed(b"a").unwrap(), None);
    assert_eq!(vol.find_key(b"a").unwrap(), None);
    let a1 = vol.put_keyed(b"a", &data(1, 100_000)).unwrap();
    let b1 = vol.put_keyed(b"b", b"").unwrap();
    let plain = vol.put(b"", b"no key").unwrap();
    let a2 = vol.put_keyed(b"a", &data(2, 5_000)).unwrap();
    assert!(a2 > a1 && matches!(vol.size(a1), Err(Error::NoSuchFile { .. })));
    assert_eq!(vol.get_keyed(b"a").unwrap(), Some(data(2, 5_000)));
    assert_eq!(vol.get_keyed(b"b").unwrap(), Some(Vec::new()));
    vol.sync().unwrap();
    let vol = power_loss(&dev, vol);
    assert_eq!((under(&vol, b"a"), under(&vol, b"b")), (vec![a2], vec![b1]));
    let a3 = vol.put_keyed(b"a", &data(3, 9_000)).unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(under(&vol, b"a"), [a3], "one blob under the key");
    assert_eq!(vol.find_key(b"a").unwrap(), Some(a3));
    assert_eq!(vol.get_keyed(b"a").unwrap(), Some(data(3, 9_000)));
    assert_eq!(
        vol.read(plain, 0, 6).unwrap(),
        b"no key",
        "unkeyed blobs untouched"
    );
    // A second file under the key made by a plain put: the key names the newest, and a
    // keyed put replaces that one.
    let dup = vol.put(b"a", b"dup").unwrap();
    assert_eq!(vol.get_keyed(b"a").unwrap().as_deref(), Some(&b"dup"[..]));
    let a4 = vol.put_keyed(b"a", b"four").unwrap();
    assert_eq!(under(&vol, b"a"), [a3, a4]);
    assert!(matches!(vol.size(dup), Err(Error::NoSuchFile { .. })));
    assert!(vol.pending().is_empty() && vol.check().unwrap().clean());
}

#[test]
fn bad_keys_are_refused_and_change_nothing() {
    let vol = Volume::mkfs(device(2), &geometry(), 256, Policy::default()).unwrap();
    let long = vec![b'k'; MAX_ATTR_BYTES + 1];
    assert!(matches!(vol.put_keyed(b"", b"x"), Err(Error::EmptyKey)));
    assert!(matches!(
        vol.put_keyed(&long, b"x"),
        Err(Error::AttrTooLarge { .. })
    ));
    assert!(matches!(
        vol.put_keyed(publish::PENDING, b"x"),
        Err(Error::AttrReserved)
    ));
    assert!(matches!(vol.get_keyed(b""), Err(Error::EmptyKey)));
    assert!(matches!(
        vol.find_key(&long),
        Err(Error::AttrTooLarge { .. })
    ));
    assert_eq!(Error::EmptyKey.kind(), crate::ErrorKind::InvalidArgument);
    let max = vec![b'k'; MAX_ATTR_BYTES];
    let id = vol.put_keyed(&max, b"x").unwrap();
    assert_eq!(vol.find_key(&max).unwrap(), Some(id));
    assert!(vol.list().len() == 1 && vol.pending().is_empty());
}

/// A volume through a small journal holding `bytes` under "key" and a bystander, synced,
/// its device set to fail from write `cut` on; and the keyed blob's id.
fn cut_volume(seed: u64, bytes: &[u8], cut: u64) -> (Arc<FaultDevice<MemDevice>>, Volume, u64) {
    let dev = device(seed);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 24, Policy::default()).unwrap();
    let id = vol.put_keyed(b"key", bytes).unwrap();
    vol.put_keyed(b"other", b"bystander").unwrap();
    vol.sync().unwrap();
    dev.fail_after(cut);
    (dev, vol, id)
}

/// After a cut: the bystander whole, nothing pending, every block accounted for.
fn assert_left_whole(vol: &Volume, cut: u64) {
    assert_eq!(vol.get_keyed(b"other").unwrap().unwrap(), b"bystander");
    let check = vol.check().unwrap();
    assert!(
        vol.pending().is_empty() && check.clean(),
        "cut {cut}: {check:?}"
    );
}

/// A replacing keyed put of a blob through a small journal, cut at every device write:
/// after the power loss the key names exactly one blob, the old one or (once the put and
/// its sync returned) the new one, whole; nothing pending, every block accounted for.
#[test]
fn a_replacing_put_cut_at_any_write_leaves_exactly_one_blob_under_the_key() {
    let (old_bytes, new_bytes) = (data(4, 700_000), data(5, 3 << 20));
    let mut seen = [0u32; 2];
    for cut in 0..3000u64 {
        let (dev, vol, old) = cut_volume(100 + cut, &old_bytes, cut);
        let done = vol
            .put_keyed(b"key", &new_bytes)
            .and_then(|_| vol.sync())
            .is_ok();
        let vol = power_loss(&dev, vol);
        let ids = under(&vol, b"key");
        assert_eq!(ids.len(), 1, "cut {cut}: {ids:?} under the key");
        let got = vol.get_keyed(b"key").unwrap().unwrap();
        if ids[0] == old {
            assert!(!done, "cut {cut}: a synced replacement undone");
            assert!(got == old_bytes, "cut {cut}: the old blob damaged");
            seen[0] += 1;
        } else {
            assert!(got == new_bytes, "cut {cut}: a partial new blob");
            seen[1] += 1;
        }
        assert_left_whole(&vol, cut);
        if done {
            assert!(seen[0] > 20, "old after {} cuts", seen[0]);
            return;
        }
    }
    panic!("no cut let the replacement through: {seen:?}");
}

/// A keyed delete of a large blob (many chunks to free) cut at every device write, each
/// cut also failing every commit after it: after the power loss the key names the whole
/// blob or nothing, never a blob cut short; nothing pending, every block accounted for.
#[test]
fn a_keyed_delete_cut_at_any_write_leaves_the_whole_blob_or_none() {
    let bytes = data(6, 3 << 20);
    let mut seen = [0u32; 2];
    for cut in 0..3000u64 {
        let (dev, vol, id) = cut_volume(400 + cut, &bytes, cut);
        let deleted = vol.delete_keyed(b"key");
        let done = deleted.is_ok() && vol.sync().is_ok();
        if let Ok(Some(d)) = deleted {
            assert_eq!(d, id, "cut {cut}: the blob the key named");
        }
        let vol = power_loss(&dev, vol);
        match vol.get_keyed(b"key").unwrap() {
            Some(got) => {
                assert!(!done, "cut {cut}: a synced delete undone");
                assert!(got == bytes, "cut {cut}: the blob cut short");
                seen[0] += 1;
            }
            None => seen[1] += 1,
        }
        assert_left_whole(&vol, cut);
        if done {
            assert!(seen[0] > 0, "no cut kept the blob: {seen:?}");
            return;
        }
    }
    panic!("no cut let the delete through: {seen:?}");
}

/// Keyed puts of one key from several threads, with keyed gets beside them: every get
/// reads one whole blob, and at the end the key names exactly one file.
#[test]
fn concurrent_keyed_puts_leave_one_blob_under_the_key() {
    let vol = Volume::mkfs(device(3), &geometry(), 256, Policy::default()).unwrap();
    let blob = |t: u8, i: u8| vec![t.wrapping_mul(31) ^ i; 20_000 + usize::from(i) * 97];
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let vol = &vol;
            s.spawn(move || {
                for i in 0..25u8 {
                    vol.put_keyed(b"shared", &blob(t, i)).unwrap();
                    let got = vol.get_keyed(b"shared").unwrap().unwrap();
                    assert!(got.iter().all(|&b| b == got[0]), "a torn read");
                }
            });
        }
    });
    assert_eq!(under(&vol, b"shared").len(), 1);
    vol.sync().unwrap();
    assert!(vol.list().len() == 1 && vol.check().unwrap().clean());
}

/// The key index (`keyindex.rs`) answers as a visit of every file would, whatever changed
/// blobs: keyed puts, direct puts and blob changes under a key, unlinks, a checkpoint that
/// leaves files only in the tree, and a reopen (built again by the first lookup).
#[test]
fn the_key_index_answers_as_a_visit_of_every_file() {
    let dev = device(31);
    let mut vol = Volume::mkfs(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
    let key = |i: u64| format!("key-{}", i % 97).into_bytes();
    let check = |vol: &Volume| {
        for i in 0..97 {
            let k = key(i);
            let visit = under(vol, &k).last().copied();
            assert_eq!(vol.find_key(&k).unwrap(), visit, "key {i}");
        }
    };
    // Files before the first lookup: the build's visit finds them.
    for i in 0..150u64 {
        vol.put_keyed(&key(i), &data(i as u8, 100)).unwrap();
    }
    assert_eq!(vol.key_index_len(), Some(vol.list().len()));
    check(&vol);
    // Changes after it: the log keeps the index.
    for i in 150..400u64 {
        match i % 5 {
            // A direct put under a key: a second file, the newer one named.
            0 => {
                vol.put(&key(i), &data(i as u8, 10)).unwrap();
            }
            // A blob changed away from its key.
            1 => {
                if let Some(id) = vol.find_key(&key(i)).unwrap() {
                    vol.set_attr(id, b"renamed").unwrap();
                }
            }
            // A direct unlink.
            2 => {
                if let Some(id) = vol.find_key(&key(i)).unwrap() {
                    vol.unlink(id).unwrap();
                }
            }
            _ => {
                vol.put_keyed(&key(i), &data(i as u8, 50)).unwrap();
            }
        }
        if i % 50 == 0 {
            vol.checkpoint().unwrap();
        }
    }
    check(&vol);
    assert_eq!(vol.key_index_len(), Some(vol.list().len()));
    vol.sync().unwrap();
    vol = power_loss(&dev, vol);
    assert_eq!(
        vol.key_index_len(),
        None,
        "a reopened volume builds it when asked"
    );
    check(&vol);
    let named = (0..97)
        .filter(|&i| vol.find_key(&key(i)).unwrap().is_some())
        .count();
    assert!(named > 50, "{named} keys name a blob");
    for i in 0..97 {
        if let Some(id) = vol.find_key(&key(i)).unwrap() {
            let whole = vol.read(id, 0, 1 << 20).unwrap();
            assert_eq!(vol.get_keyed(&key(i)).unwrap(), Some(whole));
        }
    }
}

/// Lookups racing to build the key index, with keyed puts logging changes meanwhile: one
/// build runs, the others wait for it, and every answer is a visit's.
#[test]
fn lookups_racing_to_build_the_index_agree_with_a_visit() {
    let dev = device(37);
    let vol = Arc::new(Volume::mkfs(dev, &geometry(), 256, Policy::default()).unwrap());
    let key = |i: u64| format!("k{}", i % 61).into_bytes();
    for i in 0..300u64 {
        vol.put(&key(i), &data(i as u8, 20)).unwrap();
    }
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let vol = vol.clone();
            std::thread::spawn(move || {
                for i in 0..61 {
                    let k = key(i + t);
                    // A file of the key exists throughout (puts only add newer ones).
                    assert!(vol.find_key(&k).unwrap().is_some(), "thread {t}: key {i}");
                }
            })
        })
        .collect();
    for i in 300..400u64 {
        vol.put_keyed(&key(i), &data(i as u8, 20)).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    for i in 0..61 {
        assert_eq!(
            vol.find_key(&key(i)).unwrap(),
            under(&vol, &key(i)).last().copied()
        );
    }
}
