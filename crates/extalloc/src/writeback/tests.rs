//! Buffered writes: reads see the cache, writeback places whole runs, closed files keep
//! nothing preallocated, the pool stays within its bound, and a model through crashes with
//! dirty data. A full device is `space_tests.rs`'s.

use super::*;
use crate::alloc::Policy;
use crate::disk::device::{Crash, Device, FaultDevice, MemDevice};
use crate::geometry::Geometry;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Instant;

pub(super) const BS: u64 = 4096;

pub(super) fn device(blocks: u64, seed: u64) -> Arc<FaultDevice<MemDevice>> {
    Arc::new(FaultDevice::new(MemDevice::new(blocks * BS), seed))
}

pub(super) fn buffered(
    dev: &Arc<FaultDevice<MemDevice>>,
    group_blocks: u64,
    opts: WritebackOptions,
) -> Buffered {
    let blocks = dev.size() / BS;
    let g = Geometry::new(4096, group_blocks, blocks).unwrap();
    let vol = Volume::mkfs(dev.clone(), &g, 256, Policy::default()).unwrap();
    Buffered::new(vol, opts).unwrap()
}

pub(super) fn reopen(
    dev: &Arc<FaultDevice<MemDevice>>,
    b: Buffered,
    opts: WritebackOptions,
) -> Buffered {
    drop(b);
    dev.crash(Crash::DropAll).unwrap();
    Buffered::new(Volume::open(dev.clone(), Policy::default()).unwrap(), opts).unwrap()
}

/// `0 .. n` in an order shuffled by `seed` (Fisher-Yates over an LCG).
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    let mut x = seed;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    order
}

/// A 4 KiB buffer of `v`, for writes whose bytes say which write they came from.
pub(super) fn fill(v: u8, len: usize) -> Vec<u8> {
    vec![v; len]
}

#[test]
fn reads_see_cached_data_and_sync_places_it_in_few_extents() {
    let dev = device(16384, 1);
    let b = buffered(&dev, 4096, WritebackOptions::default());
    let f = b.create(b"").unwrap();
    // Random 4 KiB writes over 8 MiB, in a shuffled order.
    let blocks: u64 = 2048;
    let order = shuffled(blocks, 7);
    for &l in &order {
        b.write(f, l * BS, &fill((l % 251) as u8 + 1, BS as usize))
            .unwrap();
    }
    assert!(
        b.extents(f).unwrap().is_empty(),
        "nothing placed before writeback"
    );
    assert_eq!(b.size(f).unwrap(), blocks * BS);
    assert_eq!(b.read(f, 5 * BS + 10, 3).unwrap(), vec![6, 6, 6]);
    assert_eq!(b.stats().reserved_blocks, blocks);
    b.sync().unwrap();
    let st = b.stats();
    assert_eq!((st.dirty_bytes, st.reserved_blocks), (0, 0));
    assert!(b.extents(f).unwrap().len() <= 2, "{:?}", b.extents(f));
    assert!(st.total().allocations <= 2, "{st:?}");
    let b = reopen(&dev, b, WritebackOptions::default());
    for l in [0, 1, 777, blocks - 1] {
        assert_eq!(
            b.read(f, l * BS, BS).unwrap(),
            fill((l % 251) as u8 + 1, BS as usize)
        );
    }
    assert!(b.check().unwrap().clean());
    b.volume().store().allocator().check().unwrap();
}

/// Runs are written back from their cached blocks as they lie (a vectored write, no
/// buffer gathered first): a long run, then a short one, each written back as exactly its
/// own bytes and placed in one extent, under a large dirty limit and a small one. Counted
/// as one run each.
#[test]
fn runs_written_back_from_their_cached_blocks_write_exactly_their_own_bytes() {
    for limit in [256u64 << 20, 8 << 20] {
        let dev = device(16384, 6);
        let opts = WritebackOptions {
            dirty_limit_bytes: limit,
            ..WritebackOptions::default()
        };
        let b = buffered(&dev, 8192, opts);
        let (long, short) = (b.create(b"").unwrap(), b.create(b"").unwrap());
        let len = 6 * 1024 * BS as usize + 3 * BS as usize;
        let data: Vec<u8> = (0..len).map(|i| (i / BS as usize % 251) as u8).collect();
        b.write(long, 0, &data[..len.min(limit as usize / 2)])
            .unwrap();
        b.fsync(long).unwrap();
        b.write(short, 0, &fill(7, 3 * BS as usize)).unwrap();
        b.fsync(short).unwrap();
        let written = len.min(limit as usize / 2);
        assert_eq!(
            b.read(long, 0, len as u64).unwrap(),
            data[..written].to_vec()
        );
        assert_eq!(b.read(short, 0, 4 * BS).unwrap(), fill(7, 3 * BS as usize));
        assert_eq!(b.size(short).unwrap(), 3 * BS, "limit {limit}");
        for f in [long, short] {
            assert_eq!(b.extents(f).unwrap().len(), 1, "limit {limit}");
        }
        let st = b.stats();
        assert_eq!(st.total().runs, 2, "{st:?}");
        assert_eq!(
            st.total().bytes,
            (written + 3 * BS as usize) as u64,
            "{st:?}"
        );
    }
}

/// A closed file written in full is allocated at exactly its size and keeps no
/// preallocation; partial blocks keep the bytes around them.
#[test]
fn a_closed_file_is_placed_exactly_and_partial_writes_merge() {
    let dev = device(16384, 2);
    let b = buffered(&dev, 4096, WritebackOptions::default());
    let f = b.create(b"").unwrap();
    b.write(f, 0, &fill(1, 10 * BS as usize + 100)).unwrap();
    b.fsync(f).unwrap();
    // Overwrite the middle of a placed block, then grow past a partial tail.
    b.write(f, 3 * BS + 5, &fill(2, 10)).unwrap();
    b.write(f, 12 * BS + 1, &fill(3, 7)).unwrap();
    let got = b.read(f, 0, 13 * BS).unwrap();
    assert_eq!(got.len() as u64, 12 * BS + 8);
    assert_eq!(
        &got[3 * BS as usize..3 * BS as usize + 16],
        &[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]
    );
    assert!(got[10 * BS as usize + 100..12 * BS as usize + 1]
        .iter()
        .all(|&x| x == 0));
    let g = b.create(b"").unwrap();
    b.write(g, 0, &fill(4, 5 * BS as usize + 1)).unwrap();
    b.close_file(g).unwrap();
    b.close_file(f).unwrap();
    b.sync().unwrap();
    let placed: u64 = b.extents(g).unwrap().iter().map(|e| e.extent.len).sum();
    assert_eq!(placed, 6, "{:?}", b.extents(g));
    for info in b.list() {
        assert_eq!(info.prealloc_blocks, 0, "{info:?}");
    }
    let b = reopen(&dev, b, WritebackOptions::default());
    assert_eq!(b.read(f, 0, 13 * BS).unwrap(), got);
    assert!(b.check().unwrap().clean());
}

/// The pool is bounded by min(groups, cpus x k), never a context per group, on a device
/// of 100,000 groups.
#[test]
fn the_pool_stays_within_its_bound_on_100k_groups() {
    let o = WritebackOptions::default();
    assert_eq!(o.contexts_for(100_000, 2), 4);
    assert_eq!(o.contexts_for(3, 64), 3);
    let many = WritebackOptions {
        contexts: 1000,
        ..o
    };
    assert_eq!(many.contexts_for(100_000, 8), 16);
    let dev = device(100_000 * 64, 4);
    let b = buffered(&dev, 64, many);
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(b.volume().store().geometry().groups_count(), 100_000);
    assert_eq!(b.stats().contexts, (2 * cpus).min(100_000));
    let f = b.create_placed(b"", 99_999).unwrap();
    b.write(f, 0, &fill(9, 1 << 20)).unwrap();
    b.sync().unwrap();
    assert_eq!(b.read(f, 0, 1).unwrap(), vec![9]);
}

/// Under a small dirty limit writers are throttled, never failed, and the cache stays
/// within its limit (plus a piece per writer). Background writeback starts only at the
/// limit itself, so the writer meets it (with it starting at half the limit, a writeback
/// as fast as the writer kept the cache below it, and nothing was throttled).
#[test]
fn a_writer_above_the_limit_waits_and_the_cache_stays_bounded() {
    let dev = device(16384, 5);
    let opts = WritebackOptions {
        dirty_limit_bytes: 2 << 20,
        background_bytes: 2 << 20,
        ..WritebackOptions::default()
    };
    let b = buffered(&dev, 4096, opts);
    let f = b.create(b"").unwrap();
    for k in 0..(16 << 20) / (64 << 10) {
        b.write(f, k * (64 << 10), &fill(k as u8 | 1, 64 << 10))
            .unwrap();
    }
    let st = b.stats();
    assert!(st.dirty_peak_bytes <= (2 << 20) + (1 << 20), "{st:?}");
    assert!(st.throttled_writes > 0 && st.total().runs > 0, "{st:?}");
    b.sync().unwrap();
    assert!(
        b.extents(f).unwrap().len() <= 8,
        "{:?}",
        b.extents(f).unwrap().len()
    );
}

/// Old data is written back by age alone.
#[test]
fn data_older_than_expire_is_written_back() {
    let dev = device(8192, 6);
    let opts = WritebackOptions {
        expire: Duration::from_millis(20),
        ..WritebackOptions::default()
    };
    let b = buffered(&dev, 1024, opts);
    let f = b.create(b"").unwrap();
    b.write(f, 0, b"aged").unwrap();
    let t = Instant::now();
    while b.stats().dirty_bytes > 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never written back");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(b.extents(f).unwrap().len(), 1);
}

/// A writeback that fails (the device refuses writes) keeps the data cached, readable and
/// reserved, and is reported by the sync. The store has latched: a later sync fails too,
/// even once the device works (nothing is believed after a failed write), and after a
/// reopen the file is as its last successful sync left it.
#[test]
fn a_failed_writeback_keeps_the_data_and_reports_it() {
    let dev = device(8192, 10);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let f = b.create(b"").unwrap();
    b.sync().unwrap();
    b.write(f, 0, &fill(5, 3 * BS as usize)).unwrap();
    dev.fail_writes(true);
    let err = b.sync().unwrap_err();
    assert!(
        matches!(err, Error::Writeback { id, .. } if id == f),
        "{err}"
    );
    assert_eq!(b.read(f, 0, 3 * BS).unwrap(), fill(5, 3 * BS as usize));
    assert_eq!(b.stats().reserved_blocks, 3);
    assert_eq!(b.stats().dirty_bytes, 3 * BS);
    dev.fail_writes(false);
    let again = b.sync().unwrap_err();
    assert_eq!(again.kind(), crate::ErrorKind::Aborted, "{again}");
    assert_eq!(b.read(f, 0, 3 * BS).unwrap(), fill(5, 3 * BS as usize));
    let b = reopen(&dev, b, WritebackOptions::default());
    assert_eq!(b.read(f, 0, 3 * BS).unwrap(), Vec::<u8>::new());
    assert!(b.check().unwrap().clean());
}

/// Under a dirty limit far below the data, placed files written in random order still end
/// up in one physically contiguous piece each: the early writebacks of a file's scattered
/// blocks are placed by the size its writers already gave it (windows sized by it, from
/// its placement, never a small file's locality chunk), and the later ones fill them.
#[test]
fn random_writes_under_pressure_stay_contiguous() {
    let dev = device(65536, 11);
    // The first writebacks start from 8 MiB cached: a few blocks near each file's start
    // among them, which alone would look like a small file's.
    let opts = WritebackOptions {
        dirty_limit_bytes: 16 << 20,
        ..WritebackOptions::default()
    };
    let b = buffered(&dev, 4096, opts);
    let blocks = 6144u64; // 24 MiB: a group and a half
    let files: Vec<u64> = (0..3).map(|k| b.create_placed(b"", k).unwrap()).collect();
    let order = shuffled(blocks, 5);
    for &l in &order {
        for &f in &files {
            b.write(f, l * BS, &fill(f as u8, BS as usize)).unwrap();
        }
    }
    b.sync().unwrap();
    // 72 MiB written, never more than the limit and a piece cached: written back all along.
    assert!(b.stats().dirty_peak_bytes <= 17 << 20, "{:?}", b.stats());
    for &f in &files {
        let e = b.extents(f).unwrap();
        let contiguous = e.windows(2).all(|w| w[0].extent.end() == w[1].extent.start);
        assert!(contiguous, "file {f}: {} extents {e:?}", e.len());
    }
}

#[test]
fn bad_input_is_refused() {
    let dev = device(8192, 7);
    let vol = Volume::mkfs(
        dev.clone(),
        &Geometry::new(4096, 1024, 8192).unwrap(),
        256,
        Policy::default(),
    )
    .unwrap();
    let tiny = WritebackOptions {
        dirty_limit_bytes: 4096,
        ..WritebackOptions::default()
    };
    assert!(matches!(
        Buffered::new(vol, tiny),
        Err(Error::InvalidSetting {
            setting: "writeback dirty limit",
            ..
        })
    ));
    let b = Buffered::new(
        Volume::open(dev.clone(), Policy::default()).unwrap(),
        WritebackOptions::default(),
    )
    .unwrap();
    assert!(matches!(
        b.write(42, 0, b"x"),
        Err(Error::NoSuchFile { id: 42 })
    ));
    let f = b.create(b"").unwrap();
    assert!(b.write(f, u64::MAX - 1, b"xx").is_err());
    assert!("diagonal".parse::<Affinity>().is_err());
    b.unlink(f).unwrap();
    assert!(matches!(b.write(f, 0, b"x"), Err(Error::NoSuchFile { .. })));
    assert!(matches!(b.read(f, 0, 1), Err(Error::NoSuchFile { .. })));
    assert_eq!(b.stats().reserved_blocks, 0);
}

/// What a byte of a file may read after a crash: the value made durable last, or any
/// written since (a later write may have been written back), or zero where nothing
/// durable was.
#[derive(Debug, Clone, Default)]
struct ModelFile {
    /// Per byte: the durable value (0 for none) and the values written since.
    bytes: Vec<(u8, Vec<u8>)>,
    durable_size: u64,
    size: u64,
}

impl ModelFile {
    fn write(&mut self, off: u64, len: u64, v: u8) {
        let end = (off + len) as usize;
        if self.bytes.len() < end {
            self.bytes.resize(end, (0, Vec::new()));
        }
        for b in &mut self.bytes[off as usize..end] {
            b.1.push(v);
        }
        self.size = self.size.max(off + len);
    }

    fn durable(&mut self, now: &[u8]) {
        for (i, b) in self.bytes.iter_mut().enumerate() {
            *b = (now.get(i).copied().unwrap_or(0), Vec::new());
        }
        self.durable_size = self.size;
    }

    fn check(&self, id: u64, got: &[u8]) {
        let n = got.len() as u64;
        assert!(
            self.durable_size <= n && n <= self.size,
            "file {id}: size {n} outside {}..={}",
            self.durable_size,
            self.size
        );
        for (i, &g) in got.iter().enumerate() {
            let (d, later) = &self.bytes[i];
            assert!(
                g == *d || later.contains(&g) || (g == 0 && i as u64 >= self.durable_size),
                "file {id} byte {i}: {g}, durable {d}, written since {later:?}"
            );
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        file: usize,
        block: u64,
        blocks: u64,
        off: u64,
    },
    Fsync(usize),
    Sync,
    Close(usize),
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..3usize, 0..48u64, 1..20u64, 0..BS).prop_map(|(file, block, blocks, off)| Op::Write { file, block, blocks, off }),
        2 => (0..3usize).prop_map(Op::Fsync),
        1 => Just(Op::Sync),
        1 => (0..3usize).prop_map(Op::Close),
        1 => Just(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Buffered writes with background writeback (from 128 KiB cached) and crashes: nothing
    /// fsync'd or synced is lost, nothing stale shows, the volume stays consistent.
    #[test]
    fn crashes_with_dirty_data_lose_nothing_durable(ops in proptest::collection::vec(op(), 1..40), affinity in 0..3usize) {
        let opts = WritebackOptions {
            dirty_limit_bytes: 2 << 20,
            background_bytes: 128 << 10,
            expire: Duration::from_millis(if affinity == 1 { 5 } else { 30_000 }),
            affinity: [Affinity::Group, Affinity::File, Affinity::None][affinity],
            ..WritebackOptions::default()
        };
        let dev = device(8192, 8);
        let mut b = buffered(&dev, 1024, opts);
        // A deleted file's data on the device first: it must never show.
        let junk = b.create(b"").unwrap();
        b.write(junk, 0, &fill(0xEE, (2 << 20) as usize)).unwrap();
        b.sync().unwrap();
        b.unlink(junk).unwrap();
        b.sync().unwrap();
        let ids: Vec<u64> = (0..3).map(|_| b.create(b"").unwrap()).collect();
        b.sync().unwrap();
        let mut model: BTreeMap<usize, ModelFile> = (0..3).map(|i| (i, ModelFile::default())).collect();
        let mut v = 0u8;
        for op in ops {
            match op {
                Op::Write { file, block, blocks, off } => {
                    v = v % 200 + 1;
                    let (at, len) = (block * BS + off, blocks * BS - off / 2);
                    b.write(ids[file], at, &fill(v, len as usize)).unwrap();
                    model.get_mut(&file).unwrap().write(at, len, v);
                }
                Op::Fsync(file) => {
                    b.fsync(ids[file]).unwrap();
                    let now = b.read(ids[file], 0, u64::MAX >> 8).unwrap();
                    model.get_mut(&file).unwrap().durable(&now);
                }
                Op::Sync => {
                    b.sync().unwrap();
                    for (i, m) in model.iter_mut() {
                        m.durable(&b.read(ids[*i], 0, u64::MAX >> 8).unwrap());
                    }
                }
                Op::Close(file) => b.close_file(ids[file]).unwrap(),
                Op::Crash => {
                    b = reopen(&dev, b, opts);
                    for (i, m) in model.iter_mut() {
                        let got = b.read(ids[*i], 0, u64::MAX >> 8).unwrap();
                        m.check(ids[*i], &got);
                        m.size = got.len() as u64;
                        m.durable(&got);
                    }
                    prop_assert!(b.check().unwrap().clean());
                }
            }
        }
        b.sync().unwrap();
        prop_assert_eq!(b.stats().reserved_blocks, 0);
        b.volume().store().allocator().check().unwrap();
    }
}

/// Placed files larger than a group, of one key (one directory), one written back in part
/// before the other is written: the first's windows (sized by its whole size) hold the
/// groups it grows into, the second finds free groups of its own; both end up in one
/// physically contiguous piece.
#[test]
fn large_placed_files_each_get_a_run_of_free_groups() {
    let dev = device(65536, 9);
    let b = buffered(&dev, 1024, WritebackOptions::default());
    let blocks = 2560u64; // two and a half groups each
    let (a, c) = (
        b.create_placed(b"", 7).unwrap(),
        b.create_placed(b"", 7).unwrap(),
    );
    // The end of `a` first (its size is known), its first half written back.
    b.write(a, (blocks - 1) * BS, &fill(1, BS as usize))
        .unwrap();
    for l in 0..blocks / 2 {
        b.write(a, l * BS, &fill(1, BS as usize)).unwrap();
    }
    b.fsync(a).unwrap();
    for l in 0..blocks {
        b.write(c, l * BS, &fill(2, BS as usize)).unwrap();
    }
    b.fsync(c).unwrap();
    for l in blocks / 2..blocks - 1 {
        b.write(a, l * BS, &fill(1, BS as usize)).unwrap();
    }
    b.sync().unwrap();
    for f in [a, c] {
        let e = b.extents(f).unwrap();
        let contiguous = e.windows(2).all(|w| w[0].extent.end() == w[1].extent.start);
        assert!(contiguous, "file {f}: {e:?}");
        assert_eq!(e.iter().map(|x| x.extent.len).sum::<u64>(), blocks);
    }
}

/// Files written one after another are placed in the order they were written, whatever
/// their ids: written back oldest first (as the kernel takes dirtied inodes), a tree
/// extracted or checked out is read back in one sweep. Here 48 files of one locality
/// written in the reverse of their creation order land in that reverse order.
#[test]
fn files_are_placed_in_the_order_they_were_written() {
    for contexts in [1, 4] {
        let dev = device(16384, 9);
        let opts = WritebackOptions {
            contexts,
            ..WritebackOptions::default()
        };
        let b = buffered(&dev, 4096, opts);
        let ids: Vec<u64> = (0..48).map(|_| b.create_placed(b"", 7).unwrap()).collect();
        for (i, &f) in ids.iter().rev().enumerate() {
            b.write(f, 0, &fill(i as u8 + 1, 2 * BS as usize)).unwrap();
        }
        b.sync().unwrap();
        let starts: Vec<u64> = ids
            .iter()
            .rev()
            .map(|&f| b.extents(f).unwrap()[0].extent.start)
            .collect();
        assert!(
            starts.windows(2).all(|w| w[0] < w[1]),
            "{contexts} contexts: placed out of write order: {starts:?}"
        );
    }
}

/// A sync waits for the data dirtied before it looked at the sequence, not for a file a
/// writer dirtied just after: that one gets the number the sync read (`upto`) and is not
/// "dirty up to" it. Counting it in once failed `after_writeback`'s "cached data outlived a
/// sync" when a writer dirtied a file between a sync's last look and the assertion's.
#[test]
fn a_file_dirtied_after_the_look_is_not_dirty_up_to_it() {
    let dev = device(4096, 3);
    let b = buffered(&dev, 4096, WritebackOptions::default());
    let (old, new) = (b.create(b"old").unwrap(), b.create(b"new").unwrap());
    b.write(old, 0, &fill(1, 4096)).unwrap();
    let upto = b.shared.seq.load(Relaxed);
    assert!(b.shared.dirty_upto(upto), "dirtied before the look");
    b.sync().unwrap();
    assert!(!b.shared.dirty_upto(upto));
    b.write(new, 0, &fill(2, 4096)).unwrap();
    assert!(
        !b.shared.dirty_upto(upto),
        "dirtied after the look, with the number it read"
    );
    assert!(b.shared.dirty_upto(b.shared.seq.load(Relaxed)));
    b.sync().unwrap();
}
