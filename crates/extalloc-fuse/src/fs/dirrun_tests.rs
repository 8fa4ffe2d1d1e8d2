//! Large directories compacted into runs (`dir/run.rs`, `names.rs`'s `compact`): written
//! where the device carries `INCOMPAT_DIR_RUNS`, read back by every mount, whole after
//! crashes in the middle of compacting, and costing only a damaged chunk's names, which
//! the repair puts in /lost+found. The namespace's invariant (checked after every change
//! in test builds) parses each changed directory's log, runs included, against memory.

use super::tests::{assert_clean, contents, crash, device, drop_as_crash, fresh, remount};
use super::tests::{find, mkdir, node, put, ME};
use super::*;
use crate::dir::{run::CHUNK, DirLog};
use extalloc::disk::device::{FaultDevice, MemDevice};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Names kept in the directory: 1,000 of 8 bytes, 23 KiB as records (a run from 16 KiB).
pub(super) const KEPT: usize = 1000;

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
    let moved = damaged_run(303, CHUNK as u64 + 200); // inside entry chunk 0
    assert!(moved > 0 && moved < 200, "{moved} names lost to one chunk");
}

/// A run whose header is damaged costs no name: its chunks check on their own.
#[test]
fn a_damaged_run_header_costs_no_name() {
    assert_eq!(damaged_run(304, 3), 0, "the header's entry count flipped");
}

/// Builds a directory of [`KEPT`] files compacted into a run, flips the byte `at` bytes
/// into the run, drops the volume as a crash and mounts again: every file is at its name
/// or in /lost+found with its data; returns how many are in /lost+found.
fn damaged_run(seed: u64, at: u64) -> usize {
    let dev = device(seed);
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
    let byte = vol.read(d, start + at, 1).unwrap()[0];
    vol.write(d, start + at, &[byte ^ 0x20]).unwrap();
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
    fs.unmount().unwrap();
    assert_clean(&dev);
    moved
}

/// Whether `d`'s entries are shelved, and whether it holds a run view.
pub(super) fn shelved_viewed(fs: &Fs, d: u64) -> (bool, bool) {
    let ns = fs.ns.read();
    let dir = ns.nodes[&d].dir.as_ref().unwrap();
    (dir.shelved(), dir.view.is_some())
}

/// After a mount a lookup in a large directory reads its run's index, its filter and one
/// chunk (the directory stays shelved), the changes after the run included; a change
/// goes through the view too; the count the view gave is what a whole read finds.
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
    put(&fs, d, "later", b"x");
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "a change through the view"
    );
    // Read whole, the view goes, and the count it gave is right.
    fs.unshelve(&mut fs.ns_write(), d).unwrap();
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
    // Looked up often, it is read whole once the view read `READS_PER_CHUNK` times as many
    // chunks as the run has.
    let mut through_view = 0;
    for i in 0..KEPT {
        assert!(fs.lookup(d, format!("keep{i:04}").as_bytes()).is_ok());
        if shelved_viewed(&fs, d).0 {
            through_view += 1;
        }
    }
    // The run's 1,000 entries take fewer than 8 chunks, and a lookup in one of the two
    // chunks the view keeps reads (and counts) none: about 3 in 10 of them here.
    let cap = super::runview::READS_PER_CHUNK * 8 * 2;
    assert!(
        (1..cap).contains(&through_view),
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

/// A large directory with a subdirectory `sub`, compacted into a run, read back after a
/// mount through its run's view: the mounted file system and the directory.
pub(super) fn viewed(dev: &Arc<FaultDevice<MemDevice>>) -> (Fs, u64) {
    let fs = fresh(dev);
    let d = kept(&fs);
    mkdir(&fs, d, "sub");
    churn(&fs, d, 4000);
    assert_eq!(log_tag(&fs, d), 4, "a run");
    fs.unmount().unwrap();
    let (fs, _) = remount(dev);
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "read back through its run"
    );
    (fs, d)
}

/// The key of the run `d`'s log starts with (the header record's body's first 16 bytes).
pub(super) fn run_key(fs: &Fs, d: u64) -> Vec<u8> {
    let start = fs.ns.read().dir(d).unwrap().log_start;
    fs.volume().read(d, start + 11, 16).unwrap()
}

/// The count of entries a shelved directory holds.
fn shelved_count(fs: &Fs, d: u64) -> Option<usize> {
    fs.ns.read().dir(d).unwrap().entries.shelved()
}

/// Creates, links, unlinks and rmdirs in a large directory read back through its run go
/// through the view: the directory stays shelved, its count and link count follow every
/// change, a name made and removed, or removed and made again, answers as it is now, and
/// the next mount reads what the changes left.
#[test]
fn changes_in_a_large_directory_go_through_its_run_view() {
    let dev = device(306);
    let (fs, d) = viewed(&dev);
    put(&fs, d, "born", b"b");
    fs.unlink(d, b"born").unwrap(); // made and removed after the run
    fs.unlink(d, b"keep0010").unwrap(); // the run's
    put(&fs, d, "keep0010", b"again");
    assert_eq!(
        fs.make(d, b"keep0011", node(Kind::File), ME).err(),
        Some(Errno(libc::EEXIST))
    );
    assert_eq!(fs.unlink(d, b"nothing").err(), Some(Errno(libc::ENOENT)));
    assert_eq!(fs.rmdir(d, b"keep0012").err(), Some(Errno(libc::ENOTDIR)));
    assert_eq!(fs.getattr(d).unwrap().inode.nlink, 3, "sub's link");
    fs.rmdir(d, b"sub").unwrap();
    assert_eq!(fs.getattr(d).unwrap().inode.nlink, 2);
    let f = fs.lookup(d, b"keep0020").unwrap().ino;
    fs.link(f, d, b"second", ME).unwrap();
    assert_eq!(
        fs.link(f, d, b"keep0021", ME).err(),
        Some(Errno(libc::EEXIST))
    );
    assert_eq!(shelved_viewed(&fs, d), (true, true), "never read whole");
    assert_eq!(
        shelved_count(&fs, d),
        Some(KEPT + 1),
        "less sub, plus second"
    );
    for (name, want) in [("born", None), ("keep0010", Some(&b"again"[..]))] {
        let got = fs.lookup(d, name.as_bytes()).ok();
        assert_eq!(got.map(|a| fs.read(a.ino, 0, 64).unwrap()).as_deref(), want);
    }
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    assert_eq!(contents(&fs, "d/keep0010"), Ok(b"again".to_vec()));
    assert_eq!(contents(&fs, "d/second"), Ok(b"20".to_vec()));
    assert_eq!(contents(&fs, "d/keep0011"), Ok(b"11".to_vec()));
    for gone in ["d/born", "d/sub"] {
        assert_eq!(find(&fs, gone), Err(Errno(libc::ENOENT)), "{gone}");
    }
    let d = find(&fs, "d").unwrap();
    assert_eq!(fs.getattr(f).unwrap().inode.nlink, 2);
    fs.unshelve(&mut fs.ns_write(), d).unwrap(); // read whole
    assert_eq!(fs.ns.read().dir(d).unwrap().entries.len(), KEPT + 1);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Renames in and out of a large directory read back through its run go through the
/// view: within it, over a name of its run, across directories, an exchange, a
/// whiteout, a directory moved; `RENAME_NOREPLACE` and a missing source fail as they
/// should; the directory stays shelved, and the next mount reads what they left.
#[test]
fn renames_in_a_large_directory_go_through_its_run_view() {
    use super::names::{RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
    let dev = device(307);
    let (fs, d) = viewed(&dev);
    let mv = |from: (u64, &str), to: (u64, &str), flags: u32| {
        fs.rename(from.0, from.1.as_bytes(), to.0, to.1.as_bytes(), flags, ME)
    };
    mv((d, "keep0001"), (d, "moved"), 0).unwrap();
    mv((d, "keep0002"), (d, "keep0003"), 0).unwrap(); // over a name of the run
    assert_eq!(
        mv((d, "keep0004"), (d, "keep0005"), RENAME_NOREPLACE),
        Err(Errno(libc::EEXIST))
    );
    assert_eq!(
        mv((d, "keep0001"), (d, "again"), 0),
        Err(Errno(libc::ENOENT))
    );
    mv((d, "keep0006"), (d, "keep0007"), RENAME_EXCHANGE).unwrap();
    mv((d, "keep0008"), (ROOT, "out"), 0).unwrap();
    put(&fs, ROOT, "x", b"in");
    mv((ROOT, "x"), (d, "in"), 0).unwrap();
    mv((d, "keep0009"), (d, "white"), RENAME_WHITEOUT).unwrap();
    mv((d, "sub"), (d, "sub2"), 0).unwrap();
    assert_eq!(shelved_viewed(&fs, d), (true, true), "never read whole");
    // Less keep0002 (replaced its target) and keep0008 (moved out), plus in and the
    // whiteout.
    assert_eq!(shelved_count(&fs, d), Some(KEPT + 1 - 2 + 2));
    assert_eq!(fs.getattr(d).unwrap().inode.nlink, 3, "sub2's link");
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    for (path, want) in [
        ("d/moved", Ok(&b"1"[..])),
        ("d/keep0003", Ok(b"2")),
        ("d/keep0005", Ok(b"5")),
        ("d/keep0006", Ok(b"7")),
        ("d/keep0007", Ok(b"6")),
        ("out", Ok(b"8")),
        ("d/in", Ok(b"in")),
        ("d/white", Ok(b"9")),
        ("d/keep0001", Err(Errno(libc::ENOENT))),
        ("d/keep0002", Err(Errno(libc::ENOENT))),
        ("d/keep0008", Err(Errno(libc::ENOENT))),
        ("x", Err(Errno(libc::ENOENT))),
    ] {
        assert_eq!(contents(&fs, path), want.map(|w| w.to_vec()), "{path}");
    }
    let white = find(&fs, "d/keep0009").unwrap();
    assert_eq!(
        fs.getattr(white).unwrap().inode.kind,
        Kind::CharDevice,
        "the whiteout"
    );
    assert!(find(&fs, "d/sub2").is_ok() && find(&fs, "d/sub").is_err());
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// A directory changed through its view is compacted into a new run once the changes
/// name a quarter as many names as the run holds (creates alone), or its log passes four
/// times its entries (a churn), and stays shelved with a view of the new run.
#[test]
fn a_viewed_directory_compacts_into_a_new_run_and_stays_out_of_memory() {
    let dev = device(307);
    let (fs, d) = viewed(&dev);
    // A log compacted from 16 KiB (64 by default): the run alone is about 36.
    fs.set_compaction(16 << 10, crate::dir::run::RUN_MIN_BYTES);
    let start = fs.ns.read().dir(d).unwrap().log_start;
    let key = run_key(&fs, d);
    for i in 0..400 {
        put(&fs, d, &format!("grow{i:04}"), b"g");
    }
    let moved = fs.ns.read().dir(d).unwrap().log_start;
    assert!(moved > start, "compacted: {start} -> {moved}");
    assert_eq!(log_tag(&fs, d), 4, "into a run");
    // Merged with the same key (a compaction that reads the log whole draws a new one).
    assert_eq!(
        run_key(&fs, d),
        key,
        "the run merged with the view's changes"
    );
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "shelved again, with a view"
    );
    let changed = fs
        .ns
        .read()
        .dir(d)
        .unwrap()
        .view
        .as_ref()
        .unwrap()
        .changed();
    assert!(changed < 300, "{changed} names in the new view's changes");
    churn(&fs, d, 4000);
    assert!(
        fs.ns.read().dir(d).unwrap().log_start > moved,
        "the churn compacted"
    );
    assert_eq!(shelved_viewed(&fs, d), (true, true));
    assert_eq!(shelved_count(&fs, d), Some(KEPT + 1 + 400));
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    for i in (0..400).step_by(13) {
        assert_eq!(contents(&fs, &format!("d/grow{i:04}")), Ok(b"g".to_vec()));
    }
    for i in (0..KEPT).step_by(29) {
        let want = i.to_string().into_bytes();
        assert_eq!(contents(&fs, &format!("d/keep{i:04}")), Ok(want));
    }
    assert_eq!(find(&fs, "d/churn00001"), Err(Errno(libc::ENOENT)));
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// A directory that only grows gets runs too (a run once its entries take a run's worth
/// and its log 64 KiB, then a new one each time it holds twice the last one's entries):
/// after a mount a lookup in it reads its run, not its log.
#[test]
fn a_directory_that_only_grows_gets_a_run() {
    let dev = device(308);
    let fs = fresh(&dev);
    let d = mkdir(&fs, ROOT, "d");
    for i in 0..6000 {
        let name = format!("grown{i:05}");
        fs.make(d, name.as_bytes(), node(Kind::File), ME).unwrap();
    }
    assert_eq!(log_tag(&fs, d), 4, "a run");
    let (live, run_live) = {
        let ns = fs.ns.read();
        let dir = ns.dir(d).unwrap();
        (dir.live, dir.run_live)
    };
    assert!(
        run_live > 0 && live <= 2 * run_live,
        "{live} live, {run_live} in the run"
    );
    fs.unmount().unwrap();
    let (fs, _) = remount(&dev);
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    for i in (0..6000).step_by(401) {
        assert!(fs.lookup(d, format!("grown{i:05}").as_bytes()).is_ok());
    }
    assert_eq!(
        shelved_viewed(&fs, d),
        (true, true),
        "looked up through its run"
    );
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Crashes at any write while a directory changes through its view (appends, then
/// compactions into new runs and their punches) lose none of its synced changes (names
/// the run held removed, names made after it) and leave nothing for the repair.
#[test]
fn crashes_while_changing_through_a_view_lose_no_synced_change() {
    for seed in 1..SEEDS {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = device(320 + seed);
        let (fs, d) = viewed(&dev);
        // Three of the run's names: three chunks read at most, of about six (past as many
        // as the run has, the directory is read whole: `RunView::chunks_read`).
        for i in 0..3 {
            fs.unlink(d, format!("keep{i:04}").as_bytes()).unwrap();
        }
        for i in 0..100 {
            put(&fs, d, &format!("grow{i:04}"), b"g");
        }
        // A rename to a new name, and one over a name of the run.
        fs.rename(d, b"keep0003", d, b"moved3", 0, ME).unwrap();
        fs.rename(d, b"keep0004", d, b"keep0005", 0, ME).unwrap();
        fs.sync().unwrap();
        assert_eq!(shelved_viewed(&fs, d), (true, true), "seed {seed}");
        dev.fail_after(rng.gen_range(0..2500));
        // Renames, then creates alone (a compaction into a new run once the view's
        // changes pass a quarter of the run), then removes of the run's names.
        let renamed = (800..850).all(|i| {
            let (from, to) = (format!("keep{i:04}"), format!("ren{i:04}"));
            fs.rename(d, from.as_bytes(), d, to.as_bytes(), 0, ME)
                .is_ok()
        });
        let grow = (100..400).map(|i| (format!("grow{i:04}"), true));
        let remove = (850..KEPT).map(|i| (format!("keep{i:04}"), false));
        for (name, make) in grow.chain(remove).filter(|_| renamed) {
            let changed = match make {
                true => fs.make(d, name.as_bytes(), node(Kind::File), ME).map(drop),
                false => fs.unlink(d, name.as_bytes()),
            };
            if changed.is_err() {
                break;
            }
        }
        churn(&fs, d, 4000);
        crash(fs, &dev);
        let (fs, _) = remount(&dev);
        for i in 0..KEPT {
            let path = format!("d/keep{i:04}");
            let want = |i: usize| Ok(i.to_string().into_bytes());
            match i {
                0..5 => assert_eq!(find(&fs, &path), Err(Errno(libc::ENOENT)), "{path}"),
                5 => assert_eq!(contents(&fs, &path), want(4), "seed {seed}: {path}"),
                6..800 => assert_eq!(contents(&fs, &path), want(i), "seed {seed}: {path}"),
                800..850 => {
                    // Renamed after the sync, or not: one name or the other, never both.
                    let new = format!("d/ren{i:04}");
                    let (old, new) = (contents(&fs, &path), contents(&fs, &new));
                    assert!(old.is_ok() != new.is_ok(), "seed {seed}: {path}");
                    assert_eq!(old.or(new), want(i), "seed {seed}: {path}");
                }
                _ => {} // unlinked after the sync, or not
            }
        }
        assert_eq!(contents(&fs, "d/moved3"), Ok(b"3".to_vec()), "seed {seed}");
        for i in 0..100 {
            let path = format!("d/grow{i:04}");
            assert_eq!(
                contents(&fs, &path),
                Ok(b"g".to_vec()),
                "seed {seed}: {path}"
            );
        }
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// Seeds of the crash test above (each a crash at a random write).
const SEEDS: u64 = 8;
