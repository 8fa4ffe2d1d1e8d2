//! Large directories compacted into runs (`dir/run.rs`, `names.rs`'s `compact`): written
//! where the device carries `INCOMPAT_DIR_RUNS`, read back by every mount, whole after
//! crashes in the middle of compacting, and costing only a damaged chunk's names, which
//! the repair puts in /lost+found. The namespace's invariant (checked after every change
//! in test builds) parses each changed directory's log, runs included, against memory.

use super::tests::{assert_clean, contents, crash, device, drop_as_crash, fresh, remount};
use super::tests::{find, mkdir, node, put, ME};
use super::*;
use crate::dir::{run::CHUNK, DirLog};
use rand::{Rng, SeedableRng};

/// Names kept in the directory: 1,000 of 8 bytes, 23 KiB as records (a run from 16 KiB).
const KEPT: usize = 1000;

/// A directory `d` holding [`KEPT`] files, each with its number as its data, synced.
fn kept(fs: &Fs) -> u64 {
    let d = mkdir(fs, ROOT, "d");
    for i in 0..KEPT {
        put(fs, d, &format!("keep{i:04}"), i.to_string().as_bytes());
    }
    fs.sync().unwrap();
    d
}

/// Creates and removes `rounds` names in `d`, which grows its log past compaction's
/// yardstick (four times the live entries) about once every 1,900 rounds; stops at the
/// first failure (an injected one).
fn churn(fs: &Fs, d: u64, rounds: u32) {
    for i in 0..rounds {
        let name = format!("churn{i:05}");
        if fs.make(d, name.as_bytes(), node(Kind::File), ME).is_err()
            || fs.unlink(d, name.as_bytes()).is_err()
        {
            break;
        }
    }
}

/// The first byte of `d`'s live log on the volume (a run's tag is 4, a reset's 3).
fn log_tag(fs: &Fs, d: u64) -> u8 {
    let start = fs.ns.read().dir(d).unwrap().log_start;
    assert!(start > 0, "the log was compacted");
    fs.volume().read(d, start, 1).unwrap()[0]
}

#[test]
fn a_large_directory_compacts_into_a_run_every_mount_reads() {
    let dev = device(301);
    let fs = fresh(&dev);
    let d = kept(&fs);
    churn(&fs, d, 4000);
    assert_eq!(log_tag(&fs, d), 4, "a run");
    let start = fs.ns.read().dir(d).unwrap().log_start;
    let size = fs.volume().size(d).unwrap();
    let log = DirLog::parse(&fs.volume().read(d, start, size - start).unwrap());
    assert_eq!((log.problem, log.entries.len()), (None, KEPT));
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    for i in (0..KEPT).step_by(37) {
        let want = i.to_string().into_bytes();
        assert_eq!(contents(&fs, &format!("d/keep{i:04}")), Ok(want));
    }
    assert_eq!(fs.getattr(d).unwrap().inode.nlink, 2);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Without the feature on the device (a mount whose checkpoint found no room for it) a
/// compaction writes a reset and an add per entry, which every build reads.
#[test]
fn without_the_feature_a_compaction_writes_no_run() {
    let dev = device(302);
    let mut fs = fresh(&dev);
    fs.dir_runs = false;
    let d = kept(&fs);
    churn(&fs, d, 4000);
    assert_eq!(log_tag(&fs, d), 3, "a reset");
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Crashes at any write while a large directory churns (so inside compactions, each a
/// run's write and the old log's punch) lose none of its synced names.
#[test]
fn crashes_while_compacting_into_runs_lose_no_synced_name() {
    for seed in 1..8u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = device(310 + seed);
        let fs = fresh(&dev);
        let d = kept(&fs);
        dev.fail_after(rng.gen_range(0..2500));
        churn(&fs, d, 4000);
        crash(fs, &dev);
        let (fs, _) = remount(&dev);
        for i in 0..KEPT {
            let want = i.to_string().into_bytes();
            assert_eq!(
                contents(&fs, &format!("d/keep{i:04}")),
                Ok(want),
                "seed {seed}: keep{i:04}"
            );
        }
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// A damaged chunk of a run costs only its own names: the mount's whole read (the store
/// marked damaged) keeps the other chunks' entries, rewrites the log whole, and puts the
/// files the damaged chunk named in /lost+found, data and all.
#[test]
fn a_damaged_run_chunk_costs_only_its_names() {
    let dev = device(303);
    let fs = fresh(&dev);
    let d = kept(&fs);
    churn(&fs, d, 4000);
    let start = fs.ns.read().dir(d).unwrap().log_start;
    assert_eq!(log_tag(&fs, d), 4, "a run");
    let inos: Vec<u64> = (0..KEPT)
        .map(|i| find(&fs, &format!("d/keep{i:04}")).unwrap())
        .collect();
    fs.unmount().unwrap();
    let vol = Volume::open(dev.clone(), extalloc::Policy::default()).unwrap();
    let at = start + CHUNK as u64 + 200; // inside entry chunk 0
    let byte = vol.read(d, at, 1).unwrap()[0];
    vol.write(d, at, &[byte ^ 0x20]).unwrap();
    drop_as_crash(vol);
    let (fs, _) = remount(&dev);
    let mut moved = 0;
    for (i, ino) in inos.iter().enumerate() {
        let want = Ok(i.to_string().into_bytes());
        let path = format!("d/keep{i:04}");
        if find(&fs, &path).is_err() {
            moved += 1;
            assert_eq!(contents(&fs, &format!("lost+found/#{ino}")), want, "{path}");
        } else {
            assert_eq!(contents(&fs, &path), want);
        }
    }
    assert!(moved > 0 && moved < 200, "{moved} names lost to one chunk");
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Whether `d`'s entries are shelved, and whether it holds a run view.
fn shelved_viewed(fs: &Fs, d: u64) -> (bool, bool) {
    let ns = fs.ns.read();
    let dir = ns.nodes[&d].dir.as_ref().unwrap();
    (dir.shelved(), dir.view.is_some())
}

/// After a mount a lookup in a large directory reads its run's index, its filter and one
/// chunk (the directory stays shelved), the changes after the run included; a change
/// then reads the entries whole, and the count the view gave is right.
#[test]
fn a_lookup_in_a_large_directory_reads_its_run_not_its_log() {
    let dev = device(304);
    let fs = fresh(&dev);
    let d = kept(&fs);
    churn(&fs, d, 4000);
    assert_eq!(log_tag(&fs, d), 4, "a run");
    // Changes after the run: one new name, one removed, one removed and made again.
    put(&fs, d, "after", b"new");
    fs.unlink(d, b"keep0001").unwrap();
    fs.unlink(d, b"keep0002").unwrap();
    put(&fs, d, "keep0002", b"again");
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    for (name, want) in [
        ("keep0000", Some(&b"0"[..])),
        ("after", Some(b"new")),
        ("keep0002", Some(b"again")),
    ] {
        let got = fs
            .lookup(d, name.as_bytes())
            .map(|a| fs.read(a.ino, 0, 64).unwrap());
        assert_eq!(got.as_deref().ok(), want, "{name}");
    }
    for missing in ["keep0001", "nothing", "keep9999"] {
        assert_eq!(
            fs.lookup(d, missing.as_bytes()).err(),
            Some(Errno(libc::ENOENT))
        );
    }
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "read through the view only"
    );
    assert_eq!(fs.rmdir(ROOT, b"d").err(), Some(Errno(libc::ENOTEMPTY)));
    // A change reads the entries whole; the view goes.
    put(&fs, d, "later", b"x");
    assert_eq!(shelved_viewed(&fs, d), (false, false));
    let n = fs.ns.read().dir(d).unwrap().entries.len();
    assert_eq!(n, KEPT + 2 - 1, "the kept, after and later, less keep0001");
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// A view no call used since the last sync is let go (the next lookup makes it again);
/// a damaged chunk makes the lookup read the log whole, which finds the damage (`EIO`).
#[test]
fn a_run_view_is_let_go_and_damage_under_it_is_found() {
    let dev = device(305);
    let fs = fresh(&dev);
    let d = kept(&fs);
    churn(&fs, d, 4000);
    let start = fs.ns.read().dir(d).unwrap().log_start;
    fs.sync().unwrap();
    assert!(fs.lookup(d, b"keep0003").is_ok());
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "a shelved directory's view made"
    );
    fs.sync().unwrap(); // used since the last trim: kept
    assert_eq!(shelved_viewed(&fs, d), (true, true));
    fs.sync().unwrap();
    assert_eq!(shelved_viewed(&fs, d), (true, false), "unused: let go");
    // Looked up often, it is read whole once the view read as many chunks as the run has.
    let mut through_view = 0;
    for i in 0..KEPT {
        assert!(fs.lookup(d, format!("keep{i:04}").as_bytes()).is_ok());
        if shelved_viewed(&fs, d).0 {
            through_view += 1;
        }
    }
    assert!(
        (1..100).contains(&through_view),
        "{through_view} lookups through the view"
    );
    assert_eq!(shelved_viewed(&fs, d), (false, false), "read whole");
    fs.sync().unwrap(); // shelved again (the tests' directory cache is 0)
    assert_eq!(shelved_viewed(&fs, d), (true, false));
    // Every entry chunk hit: a lookup that passes the filter finds a chunk that fails.
    let chunks = {
        let v = fs.volume().read(d, start, CHUNK as u64).unwrap();
        u32::from_le_bytes(v[11 + 16..11 + 20].try_into().unwrap())
    };
    for c in 0..u64::from(chunks) {
        let at = start + (1 + c) * CHUNK as u64 + 100;
        let vol = fs.vol.volume(); // the volume itself: no cached write between
        let b = vol.read(d, at, 1).unwrap()[0];
        vol.write(d, at, &[b ^ 0x08]).unwrap();
    }
    assert_eq!(fs.lookup(d, b"keep0004").err(), Some(Errno(libc::EIO)));
    assert!(
        fs.vol.volume().store().damaged(),
        "the damage found marks the store"
    );
}
