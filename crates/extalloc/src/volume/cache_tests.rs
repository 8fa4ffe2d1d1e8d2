//! Files dropped from memory and read back from the file tree (`cache.rs`): contents,
//! unlinks, the segments' cleaning and the open, against what was written.

use super::tests::{device, geometry, pattern, reopen, BS};
use crate::disk::device::{FaultDevice, MemDevice};

/// Closes `vol` (a checkpoint) and opens it again.
fn close_open(dev: &Arc<FaultDevice<MemDevice>>, vol: Volume) -> Volume {
    vol.close().unwrap();
    Volume::open(dev.clone(), Policy::default()).unwrap()
}
use super::*;

/// File `i`'s blocks: a short map (one extent, inline in its entry) for even `i`, a long
/// one (every other block: eight extents, in a map segment) for odd `i`.
fn blocks_of(i: u64) -> Vec<u64> {
    match i % 2 {
        0 => vec![0, 1],
        _ => (0..8).map(|b| b * 2).collect(),
    }
}

fn fill(vol: &Volume, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let id = vol.create(format!("file {i}").as_bytes()).unwrap();
            for b in blocks_of(i) {
                vol.write(id, b * BS, &pattern(i * 100 + b, BS as usize))
                    .unwrap();
            }
            id
        })
        .collect()
}

fn assert_file(vol: &Volume, id: u64, i: u64) {
    assert_eq!(
        vol.attr(id).unwrap(),
        format!("file {i}").as_bytes(),
        "{id}"
    );
    let last = *blocks_of(i).last().unwrap();
    assert_eq!(vol.size(id).unwrap(), (last + 1) * BS, "{id}");
    for b in blocks_of(i) {
        let got = vol.read(id, b * BS, BS).unwrap();
        assert_eq!(
            got,
            pattern(i * 100 + b, BS as usize),
            "file {id} block {b}"
        );
    }
}

/// With no room kept for clean files, a checkpoint leaves only what must stay in memory;
/// each file is then read back from its leaf, whole, and only once.
#[test]
fn evicted_files_read_back_whole() {
    let dev = device(31);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    let ids = fill(&vol, 60);
    vol.checkpoint().unwrap();
    let (kept, loaded, evicted) = vol.file_cache_figures();
    assert_eq!((kept, loaded), (0, 0), "every file written is clean");
    assert_eq!(evicted, 60);
    for (i, &id) in ids.iter().enumerate() {
        assert_file(&vol, id, i as u64);
    }
    assert_eq!(vol.file_cache_figures().1, 60, "each file loaded once");
    let listed: Vec<u64> = vol.try_list().unwrap().iter().map(|f| f.id).collect();
    assert_eq!(listed, ids);
    assert!(vol.check().unwrap().clean());
    // A whole-volume pass leaves the table as it found it.
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_cache_figures().0, 0);
    assert_eq!(vol.try_list_with_attrs().unwrap().len(), 60);
    assert!(vol.check().unwrap().clean());
    assert_eq!(vol.file_cache_figures().0, 0, "check and list keep nothing");
    let vol = close_open(&dev, vol);
    for (i, &id) in ids.iter().enumerate() {
        assert_file(&vol, id, i as u64);
    }
}

/// An evicted file unlinked is gone at once (not read back from the tree the checkpoint
/// has not yet changed), and stays gone through a checkpoint and a crash.
#[test]
fn an_unlinked_file_is_not_read_back() {
    let dev = device(32);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    let ids = fill(&vol, 10);
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_cache_figures().0, 0);
    vol.unlink(ids[3]).unwrap();
    assert!(matches!(vol.size(ids[3]), Err(Error::NoSuchFile { .. })));
    assert!(matches!(vol.unlink(ids[3]), Err(Error::NoSuchFile { .. })));
    assert!(matches!(
        vol.create_at(ids[3], b"again"),
        Ok(()) | Err(Error::FileExists { .. })
    ));
    vol.unlink(ids[3]).unwrap();
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    assert!(matches!(vol.size(ids[3]), Err(Error::NoSuchFile { .. })));
    vol.checkpoint().unwrap();
    assert!(matches!(vol.size(ids[3]), Err(Error::NoSuchFile { .. })));
    let listed: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
    let mut want = ids.clone();
    want.remove(3);
    assert_eq!(listed, want);
    assert!(vol.check().unwrap().clean());
}

/// The open keeps in memory only the files it replays changes onto: a closed volume
/// opens with none, a crashed one with those changed after its last checkpoint.
#[test]
fn the_open_keeps_only_what_it_replays() {
    let dev = device(33);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let ids = fill(&vol, 40);
    let vol = close_open(&dev, vol);
    assert_eq!(vol.file_cache_figures().0, 0, "a closed volume keeps none");
    // Past its end: a change of its map and size (an overwrite in place logs none).
    vol.write(ids[5], 40 * BS, &pattern(9_999, BS as usize))
        .unwrap();
    vol.set_attr(ids[6], b"changed").unwrap();
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.file_cache_figures().0, 2, "the two changed files");
    assert_eq!(
        vol.read(ids[5], 40 * BS, BS).unwrap(),
        pattern(9_999, BS as usize)
    );
    assert_eq!(vol.size(ids[5]).unwrap(), 41 * BS);
    assert_eq!(vol.attr(ids[6]).unwrap(), b"changed");
    for (i, &id) in ids.iter().enumerate().filter(|(i, _)| ![5, 6].contains(i)) {
        assert_file(&vol, id, i as u64);
    }
    assert!(vol.check().unwrap().clean());
}

/// Segments whose maps mostly died are cleaned: the live maps of files no longer in
/// memory are read back and moved, and every file still reads whole.
#[test]
fn cleaning_moves_maps_of_evicted_files() {
    let dev = device(34);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    let ids = fill(&vol, 80);
    vol.checkpoint().unwrap();
    // Kill most long maps of that one checkpoint's segments, evicting between.
    let gone: Vec<usize> = (0..80).filter(|i| i % 2 == 1 && i % 10 != 1).collect();
    for &i in &gone {
        vol.unlink(ids[i]).unwrap();
    }
    let loaded = vol.file_cache_figures().1;
    vol.checkpoint().unwrap();
    assert!(
        vol.file_cache_figures().1 > loaded,
        "the cleaning read back files it moved"
    );
    vol.checkpoint().unwrap();
    assert!(vol.check().unwrap().clean());
    for (i, &id) in ids.iter().enumerate().filter(|(i, _)| !gone.contains(i)) {
        assert_file(&vol, id, i as u64);
    }
    let vol = close_open(&dev, vol);
    for (i, &id) in ids.iter().enumerate().filter(|(i, _)| !gone.contains(i)) {
        assert_file(&vol, id, i as u64);
    }
    assert!(vol.check().unwrap().clean());
}

/// A visit of every file hands each file once, in id order, with its blob as it is now:
/// files read back from the tree, files loaded since, changed, made after the
/// checkpoint; never an unlinked one, and it keeps none of the files it read.
#[test]
fn a_visit_merges_memory_and_tree_in_id_order() {
    let dev = device(35);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    let ids = fill(&vol, 6);
    vol.checkpoint().unwrap();
    assert_file(&vol, ids[2], 2); // read back: in memory again
    vol.set_attr(ids[3], b"changed").unwrap();
    vol.unlink(ids[1]).unwrap();
    let new = vol.create(b"new").unwrap();
    let in_memory = vol.file_cache_figures().0;
    let mut seen = Vec::new();
    vol.try_visit_with_attrs(|info, attr| seen.push((info.id, attr.to_vec())))
        .unwrap();
    let mut want: Vec<(u64, Vec<u8>)> = (0..6u64)
        .filter(|&i| i != 1)
        .map(|i| (ids[i as usize], format!("file {i}").into_bytes()))
        .collect();
    want[2].1 = b"changed".to_vec();
    want.push((new, b"new".to_vec()));
    assert_eq!(seen, want);
    assert_eq!(
        vol.file_cache_figures().0,
        in_memory,
        "the visit keeps none of the files it read"
    );
    assert_eq!(
        vol.try_list_with_attrs().unwrap(),
        want.iter()
            .map(|(id, a)| (
                vol.try_list()
                    .unwrap()
                    .into_iter()
                    .find(|f| f.id == *id)
                    .unwrap(),
                a.clone()
            ))
            .collect::<Vec<_>>(),
        "the listing is the visit collected"
    );
}

/// `is_empty` answers from memory and the tree's first entries: a new volume is empty,
/// one whose files are all in the tree only is not, and one whose every file was
/// unlinked since the checkpoint is empty again.
#[test]
fn is_empty_sees_files_in_the_tree_and_unlinks_since() {
    let dev = device(36);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    assert!(vol.is_empty().unwrap());
    let ids = fill(&vol, 3);
    assert!(!vol.is_empty().unwrap());
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_cache_figures().0, 0, "every file in the tree only");
    assert!(!vol.is_empty().unwrap());
    for id in ids {
        vol.unlink(id).unwrap();
    }
    assert!(vol.is_empty().unwrap());
    let vol = close_open(&dev, vol);
    assert!(vol.is_empty().unwrap());
}

/// Files that reads loaded beyond the cache are dropped between checkpoints by
/// `trim_file_cache`, clean ones only: a file changed since the checkpoint stays, and
/// every file reads back whole afterwards.
#[test]
fn trimming_drops_loaded_files_but_not_changed_ones() {
    let dev = device(37);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    let ids = fill(&vol, 8);
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_cache_figures().0, 0);
    for (i, &id) in ids.iter().enumerate() {
        assert_file(&vol, id, i as u64); // loaded back, each
    }
    vol.set_attr(ids[5], b"changed").unwrap();
    assert_eq!(vol.file_cache_figures().0, 8);
    assert_eq!(vol.trim_file_cache(), 7, "every clean file goes");
    assert_eq!(vol.file_cache_figures().0, 1, "the changed one stays");
    for (i, &id) in ids.iter().enumerate().filter(|&(i, _)| i != 5) {
        assert_file(&vol, id, i as u64);
    }
    assert_eq!(vol.attr(ids[5]).unwrap(), b"changed");
    let vol = close_open(&dev, vol);
    assert_eq!(vol.attr(ids[5]).unwrap(), b"changed");
    assert!(vol.check().unwrap().clean());
}

/// A close for a process that exits next leaves its tables' memory unfreed, and closes as
/// `close` does: checkpointed, marked closed cleanly, the device's claim let go (the same
/// process opens it again at once, with nothing to replay).
#[test]
fn a_close_for_exit_closes_cleanly() {
    let dev = device(37);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let ids = fill(&vol, 6);
    vol.sync().unwrap();
    let late = vol.create(b"after the sync").unwrap();
    vol.close_for_exit().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.store().unclean_close(), None, "closed cleanly");
    for (i, &id) in ids.iter().enumerate() {
        assert_file(&vol, id, i as u64);
    }
    assert_eq!(vol.attr(late).unwrap(), b"after the sync", "checkpointed");
    vol.check().unwrap();
}

/// The file count without a pass: the tree's count, plus files made since the checkpoint,
/// less files unlinked since, before and after checkpoints and a reopen that replays.
#[test]
fn the_file_count_follows_makes_and_unlinks_across_checkpoints() {
    let dev = device(37);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    vol.set_file_cache(0);
    assert_eq!(vol.file_count().unwrap(), 0);
    let ids = fill(&vol, 12);
    assert_eq!(
        vol.file_count().unwrap(),
        12,
        "no tree yet: every file in memory"
    );
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_count().unwrap(), 12, "the tree's count");
    vol.unlink(ids[0]).unwrap();
    vol.unlink(ids[5]).unwrap();
    let made = vol.create(b"new").unwrap();
    let gone = vol.create(b"made and unlinked").unwrap();
    vol.unlink(gone).unwrap();
    vol.write(ids[3], 0, b"changed").unwrap();
    assert_eq!(vol.file_count().unwrap(), 11, "12 - 2 + 1");
    // Committed, not checkpointed: the reopen replays the changes onto the tree's count.
    vol.sync().unwrap();
    let vol = reopen_uncheckpointed(&dev, vol);
    assert_eq!(vol.file_count().unwrap(), 11, "after the replay");
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_count().unwrap(), 11, "after the checkpoint");
    assert_eq!(vol.try_list().unwrap().len(), 11, "what a listing counts");
    assert!(vol.attr(made).is_ok());
    vol.close().unwrap();
}

/// Drops `vol` as a crash would after its last commit (no checkpoint, no clean close),
/// and opens the device again: the open replays the journal.
fn reopen_uncheckpointed(dev: &Arc<FaultDevice<MemDevice>>, vol: Volume) -> Volume {
    dev.fail_writes(true);
    drop(vol);
    dev.fail_writes(false);
    Volume::open(dev.clone(), Policy::default()).unwrap()
}

/// An open reads the tree's internal nodes and only the leaves whose marks say they hold
/// a map outside the tree (or a pending file): a damaged unmarked leaf does not stop the
/// open, and is found by the call that reads it (`Error::Corrupt`), with or without a long
/// map (in a segment) elsewhere; a damaged marked leaf makes the open read every leaf and
/// refuse the damage, as before.
#[test]
fn an_open_reads_only_the_leaves_marked_as_holding_a_map_outside_the_tree() {
    for (long, victim_is_long) in [(false, false), (true, false), (true, true)] {
        let dev = device(38);
        let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
        // Enough files for several leaves; their maps are inline.
        let ids: Vec<u64> = (0..120)
            .map(|i| {
                let id = vol.create(format!("file {i}").as_bytes()).unwrap();
                vol.write(id, 0, &pattern(i, BS as usize)).unwrap();
                id
            })
            .collect();
        // The second file's map, eight extents, goes to a segment; its leaf is marked.
        let longs = if long { fill(&vol, 2) } else { Vec::new() };
        let vol = close_open(&dev, vol);
        let place = |id: u64| {
            (vol.places().unwrap().iter())
                .find(|p| p.id == id)
                .map(|p| p.table.start)
                .unwrap()
        };
        let victim = if victim_is_long { longs[1] } else { ids[60] };
        let at = place(victim);
        if long && !victim_is_long {
            let node = |at: u64| at / 4096;
            assert_ne!(
                node(at),
                node(place(longs[1])),
                "the victim shares no leaf with the long map"
            );
        }
        assert_eq!(
            vol.file_cache_figures().0,
            0,
            "no file in memory after the open"
        );
        vol.close().unwrap();
        let mut b = [0u8; 8];
        dev.read_at(&mut b, at).unwrap();
        b[0] ^= 0xff;
        dev.write_at(&b, at).unwrap();
        match (victim_is_long, Volume::open(dev.clone(), Policy::default())) {
            (false, Ok(vol)) => {
                assert_eq!(vol.attr(ids[0]).unwrap(), b"file 0", "another leaf reads");
                let e = vol.attr(victim).unwrap_err();
                assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
                if long {
                    assert_file(&vol, longs[1], 1);
                }
            }
            (true, Err(e)) => assert!(matches!(e, Error::Corrupt { .. }), "{e:?}"),
            (_, r) => panic!("long {long}: the open gave {:?}", r.map(drop)),
        }
    }
}

/// A sync checkpoints once more files changed than an eighth of the file cache (at least
/// `MIN_CHECKPOINT_FILES`), with the journal far from half full: the changed files, which
/// must stay in memory until a checkpoint, stay within that bound after every sync. With a
/// cache large enough, the same creates leave every file changed (no checkpoint), which is
/// what makes the first half mean something.
#[test]
fn a_sync_checkpoints_once_many_files_changed() {
    for (cache, bound) in [(0, MIN_CHECKPOINT_FILES), (1 << 20, 1 << 17)] {
        // A device whose room for the tree covers every create here (`room.rs`: on the
        // usual 8,192 blocks the room's bound, two nodes a new entry, checkpoints first).
        let dev = Arc::new(FaultDevice::new(MemDevice::new(65536 * 4096), 33));
        let g = Geometry::new(4096, 8192, 65536).unwrap();
        let vol = Volume::mkfs(dev.clone(), &g, 64, Policy::default()).unwrap();
        vol.set_file_cache(cache);
        assert_eq!(vol.checkpoint_files(), bound);
        let n = MIN_CHECKPOINT_FILES + 904;
        for i in 0..n {
            vol.create(format!("file {i}").as_bytes()).unwrap();
            if i % 1000 == 999 || i == n - 1 {
                vol.sync().unwrap();
                let changed = vol.dirty.lock().len();
                assert!(changed <= bound, "{changed} files changed after a sync");
            }
        }
        let s = vol.store.statfs();
        assert!(
            s.journal_used_bytes <= s.journal_bytes / 2,
            "the journal alone would not have checkpointed"
        );
        let changed = vol.dirty.lock().len();
        match cache {
            0 => assert!(changed < 1000, "{changed}: checkpointed past the bound"),
            _ => assert_eq!(changed, n, "no checkpoint below the bound"),
        }
        vol.close().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert_eq!(vol.file_count().unwrap(), n as u64);
    }
}

/// The room kept for metadata follows the files changed since the durable tree, not the
/// tree's size (`room.rs`): on a device filled one block a file by `fallocate`, what
/// data may not take is the fixed part and the changed files' need, less than the tree
/// takes; its checkpoints (made as the room shrank) found their blocks, and so do the
/// unlinks, the close and the open after.
#[test]
fn a_full_device_keeps_room_for_the_changed_files_not_the_tree() {
    let dev = device(41);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let mut ids = Vec::new();
    let refused = loop {
        let id = vol.create(b"a file of one block").unwrap();
        match vol.fallocate(id, Fallocate::Allocate, 0, BS) {
            Ok(()) => ids.push(id),
            Err(e) => {
                vol.unlink(id).unwrap();
                break e;
            }
        }
        vol.close_file(id).unwrap();
    };
    assert_eq!(refused.kind(), crate::ErrorKind::NoSpace, "{refused}");
    let tree = vol.table_blocks.load(std::sync::atomic::Ordering::Relaxed);
    let margin = vol.reserve_margin();
    let changed = vol.dirty.lock().len() as u64;
    // Every call is done: none is counted in flight.
    assert_eq!(vol.in_flight.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(
        margin <= vol.fixed_margin() + vol.tree_need(changed),
        "margin {margin}"
    );
    // An atomic group's calls are counted in the room while it lasts, and only then.
    {
        let group = vol.atomic(8).unwrap();
        assert_eq!(vol.in_flight.load(std::sync::atomic::Ordering::SeqCst), 8);
        let changed = vol.dirty.lock().len() as u64;
        assert!(
            vol.reserve_margin()
                >= vol.fixed_margin() + vol.tree_need(changed + 8)
                    - vol.store.metadata_reserved_blocks(),
            "the group's calls in the margin"
        );
        group.finish();
    }
    assert_eq!(vol.in_flight.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(
        margin < vol.fixed_margin() + tree,
        "margin {margin}, tree {tree} blocks"
    );
    for &id in ids.iter().step_by(2) {
        vol.unlink(id).unwrap();
    }
    vol.close().unwrap();
    let vol = Volume::open(dev, Policy::default()).unwrap();
    assert_eq!(vol.file_count().unwrap(), (ids.len() / 2) as u64);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
}

/// `size_and_blocks` gives what `size` and the sum of `extents` give, for files whose
/// map is in memory and for evicted ones (their entry's count; the file is read back, its
/// map not needed), short maps and long ones alike.
#[test]
fn size_and_blocks_agree_with_size_and_extents() {
    let dev = device(33);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let ids = fill(&vol, 12);
    let whole = |vol: &Volume, id: u64| {
        let blocks: u64 = vol.extents(id).unwrap().iter().map(|e| e.extent.len).sum();
        (vol.size(id).unwrap(), blocks)
    };
    for &id in &ids {
        assert_eq!(
            vol.size_and_blocks(id).unwrap(),
            whole(&vol, id),
            "file {id} in memory"
        );
    }
    vol.set_file_cache(0);
    vol.checkpoint().unwrap();
    assert_eq!(vol.file_cache_figures().0, 0, "every file evicted");
    let figures: Vec<(u64, u64)> = ids
        .iter()
        .map(|&id| vol.size_and_blocks(id).unwrap())
        .collect();
    for (&id, &got) in ids.iter().zip(&figures) {
        assert_eq!(got, whole(&vol, id), "file {id} read back");
    }
    let unknown = ids.iter().max().unwrap() + 100;
    assert!(matches!(
        vol.size_and_blocks(unknown),
        Err(Error::NoSuchFile { .. })
    ));
    vol.close().unwrap();
}
