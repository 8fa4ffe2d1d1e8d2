//! Atomic groups: commits wait for them, their calls never commit, a crash keeps all of a
//! group's changes or none, and a group left half made stops the volume's commits.

use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};
use std::sync::atomic::AtomicBool;
use std::sync::Barrier;
use std::time::Duration;

fn geometry() -> Geometry {
    Geometry::new(4096, 1024, 8192).unwrap()
}

fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

#[test]
fn a_commit_waits_for_the_group_under_way() {
    let dev = device(1);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let (x, y) = (vol.create(b"x0").unwrap(), vol.create(b"y0").unwrap());
    vol.sync().unwrap();
    let started = Barrier::new(2);
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let g = vol.atomic(2).unwrap();
            vol.set_attr(x, b"x1").unwrap();
            started.wait();
            std::thread::sleep(Duration::from_millis(50));
            vol.set_attr(y, b"y1").unwrap();
            finished.store(true, Relaxed);
            g.finish();
        });
        started.wait();
        vol.sync().unwrap();
        assert!(
            finished.load(Relaxed),
            "the commit ran while the group was under way"
        );
    });
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(
        (vol.attr(x).unwrap(), vol.attr(y).unwrap()),
        (b"x1".to_vec(), b"y1".to_vec())
    );
}

/// Two attributes changed together in groups while another thread commits as fast as it
/// can: after a crash that drops or tears what was not flushed, they always agree.
#[test]
fn a_crash_keeps_all_of_a_group_or_none() {
    for seed in 0..12u64 {
        let dev = device(seed);
        let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
        let (a, b) = (vol.create(b"0").unwrap(), vol.create(b"0").unwrap());
        vol.sync().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Relaxed) {
                    vol.sync().unwrap();
                    std::thread::yield_now();
                }
            });
            for n in 1..=200u32 {
                let g = vol.atomic(3).unwrap();
                vol.set_attr(a, n.to_string().as_bytes()).unwrap();
                // A write between the two: a chunk call that would commit outside a group.
                vol.write(b, 0, &[n as u8; 100]).unwrap();
                vol.set_attr(b, n.to_string().as_bytes()).unwrap();
                g.finish();
            }
            stop.store(true, Relaxed);
        });
        drop(vol);
        let how = match seed % 3 {
            0 => Crash::DropAll,
            1 => Crash::Random {
                keep: 0.5,
                tear: true,
            },
            _ => Crash::Random {
                keep: 0.9,
                tear: true,
            },
        };
        dev.crash(how).unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let (ta, tb) = (vol.attr(a).unwrap(), vol.attr(b).unwrap());
        assert_eq!(
            ta, tb,
            "seed {seed}: a group's changes were split by a crash"
        );
        let n: u32 = String::from_utf8(ta).unwrap().parse().unwrap();
        // An overwrite in place is not journaled (data=ordered): its bytes may be newer
        // than the last commit, never older.
        if n > 0 {
            let data = vol.read(b, 0, 100).unwrap();
            assert!(
                data.iter().all(|&d| d == data[0] && u32::from(d) >= n),
                "seed {seed}"
            );
        }
        assert!(vol.check().unwrap().clean(), "seed {seed}");
    }
}

#[test]
fn calls_inside_a_group_never_commit() {
    let dev = device(3);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let most = vol.store().max_transaction_bytes() / 4 / CHUNK_BUDGET;
    let files: Vec<u64> = (0..most).map(|_| vol.create(b"old").unwrap()).collect();
    vol.sync().unwrap();
    let g = vol.atomic(most).unwrap();
    for &f in &files {
        vol.set_attr(f, b"new").unwrap();
    }
    g.finish();
    // No sync: a crash now must keep every old attribute (nothing committed in the group).
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    for &f in &files {
        assert_eq!(vol.attr(f).unwrap(), b"old");
    }
}

#[test]
#[should_panic(expected = "more chunk calls than it reserved")]
fn a_group_making_more_calls_than_it_reserved_is_a_bug() {
    let vol = Volume::mkfs(device(4), &geometry(), 64, Policy::default()).unwrap();
    let f = vol.create(b"").unwrap();
    let _g = vol.atomic(1).unwrap();
    vol.set_attr(f, b"1").unwrap();
    vol.set_attr(f, b"2").unwrap();
}

#[test]
#[should_panic(expected = "would split it")]
fn a_commit_inside_a_group_is_a_bug() {
    let vol = Volume::mkfs(device(5), &geometry(), 64, Policy::default()).unwrap();
    let _g = vol.atomic(1).unwrap();
    let _ = vol.sync();
}

#[test]
fn a_group_left_unfinished_stops_every_later_commit() {
    let dev = device(6);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let f = vol.create(b"kept").unwrap();
    vol.sync().unwrap();
    {
        let _g = vol.atomic(2).unwrap();
        vol.set_attr(f, b"half").unwrap();
        // A failure here: the group is dropped without finish().
    }
    let e = vol.sync().unwrap_err();
    assert!(matches!(e, Error::Aborted { .. }), "{e}");
    assert!(vol.atomic(1).is_err());
    assert!(matches!(vol.checkpoint(), Err(Error::Aborted { .. })));
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.attr(f).unwrap(), b"kept");
}

#[test]
fn a_group_larger_than_the_journal_allows_is_refused() {
    let vol = Volume::mkfs(device(7), &geometry(), 64, Policy::default()).unwrap();
    let too_many = vol.store().max_transaction_bytes() / CHUNK_BUDGET;
    assert!(matches!(
        vol.atomic(too_many),
        Err(Error::AtomicGroupTooLarge { .. })
    ));
    vol.sync().unwrap();
}
