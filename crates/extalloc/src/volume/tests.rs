//! Volume tests: contents against a model through crashes, unwritten extents, stale data,
//! bad input.

use super::*;
use crate::disk::device::{Crash, FaultDevice, MemDevice};
use proptest::prelude::*;
use std::collections::BTreeMap;

pub(super) const BS: u64 = 4096;

pub(super) fn geometry() -> Geometry {
    Geometry::new(4096, 1024, 8192).unwrap()
}

pub(super) fn device(seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed))
}

/// After a crash cut after `n` writes: `vol`'s ownership check is clean, and again once
/// its close has checkpointed and it is opened again.
pub(super) fn clean_through_close(dev: &Arc<FaultDevice<MemDevice>>, vol: Volume, n: u64) {
    let check = vol.check().unwrap();
    assert!(check.clean(), "cut after {n} writes: {check:?}");
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean(), "after the next checkpoint");
}

pub(super) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8 + 1)
        .collect()
}

pub(super) fn reopen(dev: &Arc<FaultDevice<MemDevice>>, vol: Volume, crash: bool) -> Volume {
    drop(vol);
    if crash {
        dev.crash(Crash::DropAll).unwrap();
    }
    Volume::open(dev.clone(), Policy::default()).unwrap()
}

#[test]
fn files_survive_a_reopen_with_their_data_and_few_extents() {
    let dev = device(1);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let a = vol.create(b"mode=644").unwrap();
    let b = vol.create(b"").unwrap();
    let big = pattern(1, 3 * 1024 * 1024 + 123);
    for (i, piece) in big.chunks(64 * 1024).enumerate() {
        vol.write(a, (i * 64 * 1024) as u64, piece).unwrap();
        vol.write(b, (i * 100) as u64, &piece[..100]).unwrap();
    }
    vol.sync().unwrap();
    assert!(vol.extents(a).unwrap().len() <= 2, "{:?}", vol.extents(a));
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.read(a, 0, big.len() as u64 + 10).unwrap(), big);
    assert_eq!(vol.attr(a).unwrap(), b"mode=644");
    assert_eq!(vol.size(b).unwrap(), 4800 + 100);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    vol.store().allocator().check().unwrap();
}

/// Fallocated blocks read as zeros, before and after a crash, until written; a write into
/// them converts only what it covers, and blocks another file wrote and freed never show.
#[test]
fn unwritten_extents_and_freed_blocks_never_show_old_data() {
    let dev = device(2);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let old = vol.create(b"").unwrap();
    vol.write(old, 0, &pattern(9, 1 << 20)).unwrap();
    vol.sync().unwrap();
    vol.unlink(old).unwrap();
    vol.sync().unwrap();
    let f = vol.create(b"").unwrap();
    vol.fallocate(f, Fallocate::Allocate, 0, 1 << 20).unwrap();
    assert_eq!(vol.size(f).unwrap(), 1 << 20);
    assert!(vol.read(f, 0, 1 << 20).unwrap().iter().all(|&b| b == 0));
    vol.write(f, 5000, b"hello").unwrap();
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    let back = vol.read(f, 0, 1 << 20).unwrap();
    assert_eq!(&back[5000..5005], b"hello");
    let nonzero = back.iter().filter(|&&b| b != 0).count();
    assert_eq!(nonzero, 5, "only the bytes written, no stale data");
    let e = vol.extents(f).unwrap();
    assert!(e.iter().any(|x| x.unwritten) && e.iter().any(|x| !x.unwritten));
    // A write after the last sync into unwritten blocks is lost with the crash: zeros.
    vol.write(f, 3 * BS, &pattern(3, 100)).unwrap();
    let vol = reopen(&dev, vol, true);
    assert!(vol.read(f, 3 * BS, 100).unwrap().iter().all(|&b| b == 0));
    assert!(vol.check().unwrap().clean());
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let dev = device(3);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let f = vol.create(b"").unwrap();
    vol.write(f, 0, b"data").unwrap();
    assert!(matches!(
        vol.write(99, 0, b"x"),
        Err(Error::NoSuchFile { id: 99 })
    ));
    assert!(matches!(vol.read(99, 0, 1), Err(Error::NoSuchFile { .. })));
    assert!(vol.write(f, u64::MAX - 1, b"xx").is_err());
    assert!(vol.write(f, io::MAX_FILE_BYTES, b"x").is_err());
    assert!(vol.fallocate(f, Fallocate::Allocate, 0, 0).is_err());
    assert!(vol.create(&vec![0; io::MAX_ATTR_BYTES + 1]).is_err());
    vol.unlink(f).unwrap();
    assert!(matches!(
        vol.write(f, 0, b"x"),
        Err(Error::NoSuchFile { .. })
    ));
    assert!(matches!(vol.unlink(f), Err(Error::NoSuchFile { .. })));
    // A full device: no space, and everything written before is intact.
    let g = vol.create(b"").unwrap();
    let chunk = pattern(5, 1 << 20);
    let mut written = 0u64;
    let err = loop {
        match vol.write(g, written, &chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(written < 64 << 20, "the device never fills");
    };
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    let size = vol.size(g).unwrap();
    assert!(size >= written);
    let back = vol.read(g, 0, written).unwrap();
    for piece in back.chunks(chunk.len()) {
        assert_eq!(piece, &chunk[..piece.len()]);
    }
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
}

/// A model of the files: id -> bytes.
#[derive(Debug, Clone)]
enum Op {
    Create,
    Write {
        file: usize,
        offset: u64,
        len: usize,
        seed: u64,
    },
    Fallocate {
        file: usize,
        mode: u8,
        offset: u64,
        len: u64,
    },
    Truncate {
        file: usize,
        size: u64,
    },
    Unlink {
        file: usize,
    },
    Sync,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    let off = 0u64..600_000;
    prop_oneof![
        1 => Just(Op::Create),
        5 => (0usize..4, off.clone(), 1usize..40_000, any::<u64>())
            .prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        2 => (0usize..4, 0u8..4, off.clone(), 1u64..100_000)
            .prop_map(|(file, mode, offset, len)| Op::Fallocate { file, mode, offset, len }),
        1 => (0usize..4, off).prop_map(|(file, size)| Op::Truncate { file, size }),
        1 => (0usize..4).prop_map(|file| Op::Unlink { file }),
        2 => Just(Op::Sync),
        1 => Just(Op::Crash),
    ]
}

/// Applies `op` to the model and the volume alike.
fn step(vol: &Volume, model: &mut BTreeMap<u64, Vec<u8>>, op: &Op) {
    let pick = |i: usize| model.keys().nth(i % model.len().max(1)).copied();
    match *op {
        Op::Create => {
            model.insert(vol.create(b"").unwrap(), Vec::new());
        }
        Op::Write {
            file,
            offset,
            len,
            seed,
        } => {
            let Some(id) = pick(file) else { return };
            let data = pattern(seed, len);
            vol.write(id, offset, &data).unwrap();
            let m = model.get_mut(&id).unwrap();
            let end = offset as usize + len;
            if m.len() < end {
                m.resize(end, 0);
            }
            m[offset as usize..end].copy_from_slice(&data);
        }
        Op::Fallocate {
            file,
            mode,
            offset,
            len,
        } => {
            let Some(id) = pick(file) else { return };
            let mode = match mode {
                0 => Fallocate::Allocate,
                1 => Fallocate::KeepSize,
                2 => Fallocate::PunchHole,
                _ => Fallocate::ZeroRange {
                    keep_size: offset % 2 == 0,
                },
            };
            vol.fallocate(id, mode, offset, len).unwrap();
            let m = model.get_mut(&id).unwrap();
            let end = (offset + len) as usize;
            let grow = matches!(
                mode,
                Fallocate::Allocate | Fallocate::ZeroRange { keep_size: false }
            );
            if grow && m.len() < end {
                m.resize(end, 0);
            }
            if matches!(mode, Fallocate::PunchHole | Fallocate::ZeroRange { .. }) {
                let stop = end.min(m.len());
                if (offset as usize) < stop {
                    m[offset as usize..stop].fill(0);
                }
            }
        }
        Op::Truncate { file, size } => {
            let Some(id) = pick(file) else { return };
            vol.truncate(id, size).unwrap();
            model.get_mut(&id).unwrap().resize(size as usize, 0);
        }
        Op::Unlink { file } => {
            let Some(id) = pick(file) else { return };
            vol.unlink(id).unwrap();
            model.remove(&id);
        }
        Op::Sync | Op::Crash => vol.sync().unwrap(),
    }
}

fn compare(vol: &Volume, model: &BTreeMap<u64, Vec<u8>>) {
    let ids: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
    assert_eq!(ids, model.keys().copied().collect::<Vec<_>>());
    for (&id, bytes) in model {
        assert_eq!(vol.size(id).unwrap(), bytes.len() as u64, "file {id} size");
        let back = vol.read(id, 0, bytes.len() as u64).unwrap();
        assert!(back == *bytes, "file {id}: contents differ");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random file operations against a model of the bytes; a crash loses what came after
    /// the last sync and nothing before; the ownership check stays clean throughout.
    #[test]
    fn a_volume_matches_a_model_through_crashes(ops in proptest::collection::vec(op(), 1..40)) {
        let dev = device(7);
        let mut vol = Volume::mkfs(dev.clone(), &geometry(), 32, Policy::default()).unwrap();
        let mut model = BTreeMap::new();
        let mut synced = BTreeMap::new();
        for op in &ops {
            step(&vol, &mut model, op);
            if matches!(op, Op::Sync | Op::Crash) {
                synced = model.clone();
            }
            if matches!(op, Op::Crash) {
                vol = reopen(&dev, vol, true);
                compare(&vol, &synced);
            }
            let check = vol.check().unwrap();
            prop_assert!(check.clean(), "{:?} after {:?}", check, op);
        }
        compare(&vol, &model);
        vol.close().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        compare(&vol, &model);
    }
}

/// A volume with a file of 100 bytes, durable, whose block holds stale bytes past them (as
/// a crash that kept a write and lost its size change leaves it).
fn stale_past_the_end(seed: u64) -> (Arc<FaultDevice<MemDevice>>, Volume, u64) {
    let dev = device(seed);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let f = vol.create(b"").unwrap();
    vol.write(f, 0, &pattern(1, 100)).unwrap();
    vol.sync().unwrap();
    let block = vol.extents(f).unwrap()[0].extent.start;
    dev.write_at(&[0xAA; 3996], block * BS + 100).unwrap();
    (dev, vol, f)
}

/// Bytes past the end of a file (a crash kept a write whose size change it lost) never
/// come back when the file grows: by fallocate, by truncate, or by a write past a gap.
#[test]
fn growing_a_file_never_shows_bytes_past_its_old_end() {
    for grow in 0..3 {
        let (_dev, vol, f) = stale_past_the_end(10 + grow);
        match grow {
            0 => vol.fallocate(f, Fallocate::Allocate, 0, 2 * BS).unwrap(),
            1 => vol.truncate(f, 2 * BS).unwrap(),
            _ => vol.write(f, BS + 10, b"x").unwrap(),
        }
        let back = vol.read(f, 0, 2 * BS).unwrap();
        assert_eq!(&back[..100], &pattern(1, 100)[..], "grow {grow}");
        assert!(
            back[100..BS as usize].iter().all(|&b| b == 0),
            "grow {grow}: stale bytes"
        );
    }
}

/// A write that grows a file from inside its last block zeroes the bytes past the old end
/// in its own buffer: one device write (not the zeros first, then the block), and still no
/// stale byte past the old end, whether the write starts before the old end or past it.
#[test]
fn a_write_growing_the_last_block_is_one_device_write_with_no_stale_bytes() {
    for (seed, at) in [(20, 60u64), (21, 300)] {
        let (dev, vol, f) = stale_past_the_end(seed);
        dev.flush().unwrap();
        assert_eq!(dev.pending_writes(), 0);
        vol.write(f, at, &pattern(2, 100)).unwrap();
        assert_eq!(dev.pending_writes(), 1, "at {at}: one device write");
        let back = vol.read(f, 0, BS).unwrap();
        assert_eq!(back.len() as u64, at + 100);
        let mut want = pattern(1, 100);
        want.resize(at as usize, 0);
        want.truncate(at as usize);
        want.extend(pattern(2, 100));
        assert_eq!(back, want, "at {at}: the old bytes, zeros, the new bytes");
    }
}

/// A write inside a block already written, from at or before the file's end (a
/// directory log's append, kept back until the overwrite after it sends it: `tail.rs`),
/// sends its own bytes alone to the device and reads nothing;
/// what lies past the new end stays stale on the device and is still never shown when
/// the file grows.
#[test]
fn a_write_inside_a_written_block_writes_its_bytes_alone() {
    for grow in 0..3 {
        let (dev, vol, f) = stale_past_the_end(40 + grow);
        dev.flush().unwrap();
        let block = vol.extents(f).unwrap()[0].extent.start;
        vol.write(f, 100, b"appended").unwrap();
        vol.write(f, 10, b"over").unwrap();
        assert_eq!(dev.pending_writes(), 2, "grow {grow}: two device writes");
        let mut on_dev = vec![0u8; BS as usize];
        dev.read_at(&mut on_dev, block * BS).unwrap();
        assert_eq!(&on_dev[100..108], b"appended");
        assert!(
            on_dev[108..].iter().all(|&b| b == 0xAA),
            "nothing else written"
        );
        let mut want = pattern(1, 100);
        want[10..14].copy_from_slice(b"over");
        want.extend_from_slice(b"appended");
        assert_eq!(vol.read(f, 0, BS).unwrap(), want, "grow {grow}");
        match grow {
            0 => vol.fallocate(f, Fallocate::Allocate, 0, 2 * BS).unwrap(),
            1 => vol.truncate(f, 2 * BS).unwrap(),
            _ => vol.write(f, 200, b"x").unwrap(),
        }
        let back = vol.read(f, 0, BS).unwrap();
        assert_eq!(&back[..108], &want[..], "grow {grow}");
        let zeros_to = if grow == 2 { 200 } else { BS as usize };
        assert!(
            back[108..zeros_to].iter().all(|&b| b == 0),
            "grow {grow}: stale bytes shown"
        );
    }
}

/// Many small operations between syncs: the volume commits and checkpoints by itself
/// often enough that the store never needs a checkpoint of its own (which a volume
/// refuses), whatever the journal size; everything survives a reopen.
#[test]
fn long_runs_without_sync_never_overflow_the_journal() {
    for journal in [24u64, 256] {
        let dev = device(30 + journal);
        let vol = Volume::mkfs(dev.clone(), &geometry(), journal, Policy::default()).unwrap();
        let ids: Vec<u64> = (0..20).map(|_| vol.create(b"").unwrap()).collect();
        for k in 0..150u64 {
            for &id in &ids {
                vol.fallocate(id, Fallocate::KeepSize, k * 2 * BS, BS)
                    .unwrap();
            }
        }
        vol.close().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        for &id in &ids {
            assert_eq!(vol.extents(id).unwrap().len(), 150, "journal {journal}");
        }
        assert!(vol.check().unwrap().clean());
    }
}

/// Damage with known ground truth: a flipped byte in the file table is refused at open
/// (never a wrong map); damaged file data opens and checks clean (data is the caller's);
/// a zeroed last journal block is repaired from the mirror, every synced file intact.
#[test]
fn damage_is_refused_or_repaired_never_misread() {
    // `close` checkpoints (the table in force names every map); a sync leaves the last
    // changes in the journal, for the journal's case.
    let build = |close: bool| {
        let dev = device(40);
        let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
        let a = vol.create(b"a").unwrap();
        vol.write(a, 0, &pattern(4, 50_000)).unwrap();
        vol.sync().unwrap();
        {
            let _closed = vol.gate.write();
            vol.checkpoint_locked().unwrap();
        }
        let b = vol.create(b"b").unwrap();
        vol.write(b, 0, &pattern(5, 9_000)).unwrap();
        let data = vol.extents(a).unwrap()[0].extent;
        if close {
            vol.close().unwrap();
        } else {
            vol.sync().unwrap();
            drop(vol);
        }
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let root = super::load::volume_root(vol.store()).unwrap();
        let leaf = root.tree.unwrap().root;
        (dev, a, b, Extent::new(leaf.block, 1), data)
    };
    // The table: refused, naming it.
    let (dev, _, _, table, _) = build(true);
    dev.write_at(&[0x5a], table.start * BS + 20).unwrap();
    let err = Volume::open(dev.clone(), Policy::default())
        .err()
        .expect("refused");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    // File data: opens, checks clean, the damaged byte reads back as damaged.
    let (dev, a, _, _, data) = build(true);
    dev.write_at(&[0x00], data.start * BS + 7).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.check().unwrap().clean());
    assert_eq!(vol.read(a, 7, 1).unwrap(), vec![0]);
    drop(vol);
    // The journal's last block: repaired from the mirror.
    let (dev, a, b, _, _) = build(false);
    let sb = crate::disk::format::read_superblock(dev.as_ref()).unwrap();
    let head_block = {
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let used = vol.statfs().journal_used_bytes;
        drop(vol);
        (sb.journal_start * BS + sb.journal_tail + used - 1) / BS
    };
    dev.write_at(&[0u8; 4096], head_block * BS).unwrap();
    let vol = Volume::open(dev, Policy::default()).unwrap();
    assert_eq!(vol.read(a, 0, 50_000).unwrap(), pattern(4, 50_000));
    assert_eq!(vol.read(b, 0, 9_000).unwrap(), pattern(5, 9_000));
    assert!(vol.check().unwrap().clean());
}

/// An overwrite in place maps nothing new and logs nothing, yet a sync after it makes it
/// durable: the sync flushes the data even with no record to write.
#[test]
fn a_sync_after_an_overwrite_in_place_makes_it_durable() {
    let dev = device(22);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let f = vol.create(b"").unwrap();
    vol.write(f, 0, &pattern(1, 3 * BS as usize)).unwrap();
    vol.sync().unwrap();
    vol.write(f, BS + 10, &pattern(2, 100)).unwrap();
    vol.sync().unwrap();
    // Power lost: nothing more reaches the device (not even the flush of a clean close).
    dev.fail_writes(true);
    let vol = reopen(&dev, vol, true);
    assert_eq!(vol.read(f, BS + 10, 100).unwrap(), pattern(2, 100));
}

/// A volume made over a used one, whose first page something else has overwritten since
/// (fstests generic/570 runs mkswap on the device): the former volume's journal records
/// must not read as the new journal's, so the new volume opens (before, mkfs zeroed only
/// the journal's first block and the open refused a "journal damaged in the middle").
#[test]
fn mkfs_over_a_used_device_leaves_no_stale_journal_record() {
    let dev = device(77);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    for i in 0..20u64 {
        let id = vol.create(b"old").unwrap();
        vol.write(id, 0, &pattern(i, 5000)).unwrap();
        vol.sync().unwrap();
    }
    drop(vol);
    dev.write_at(&[0x5a; 4096], 0).unwrap(); // a swap header over block 0
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    assert!(vol.list().is_empty(), "a fresh volume");
    let id = vol.create(b"new").unwrap();
    vol.write(id, 0, b"data").unwrap();
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert_eq!(vol.list().len(), 1);
    vol.close().unwrap();
}

/// A truncate the volume commits inside (a file of many extents, a small journal), cut by
/// a power loss, then the file grown again: the blocks it had not freed yet must not show
/// their old bytes (found by the sequence fuzzer, `extalloc::sequence`).
#[test]
fn a_truncate_cut_by_a_crash_never_shows_old_bytes_when_the_file_grows() {
    let dev = device(41);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 24, Policy::default()).unwrap();
    let id = vol.create(b"").unwrap();
    for k in 0..200u64 {
        vol.write(id, k * 2 * BS, &[0x43; BS as usize]).unwrap();
    }
    vol.sync().unwrap();
    let flushes = vol.store().journal_flushes();
    vol.truncate(id, 0).unwrap();
    assert!(
        vol.store().journal_flushes() > flushes,
        "the truncate commits inside"
    );
    // The power goes before the volume is dropped (a drop flushes, as a clean close).
    dev.fail_writes(true);
    drop(vol);
    dev.crash(Crash::DropAll).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let size = vol.size(id).unwrap();
    let old = vol.read(id, 0, size).unwrap();
    assert!(old.iter().all(|&b| b == 0 || b == 0x43));
    vol.truncate(id, 400 * BS).unwrap();
    let now = vol.read(id, 0, 400 * BS).unwrap();
    let stale = now[size as usize..].iter().filter(|&&b| b != 0).count();
    assert_eq!(stale, 0, "bytes past the old end ({size}) show old data");
    assert!(vol.check().unwrap().clean());
}

/// Volumes made through the library carry a uuid of their own, as the CLI's do
/// (`Volume::mkfs_file`): two volumes are never taken for one another by it.
#[test]
fn volumes_made_through_the_library_have_uuids_of_their_own() {
    let geometry = Geometry::new(4096, 1024, 2048).unwrap();
    let uuid = || {
        let dev = Arc::new(MemDevice::new(2048 * 4096));
        Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
        crate::disk::format::read_superblock(dev.as_ref())
            .unwrap()
            .uuid
    };
    let (a, b) = (uuid(), uuid());
    assert!(a != [0; 16] && b != [0; 16] && a != b, "{a:?} {b:?}");
}
