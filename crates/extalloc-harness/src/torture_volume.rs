//! `extalloc torture --volume`: random file operations on a volume over a fault-injecting
//! device, with crashes; after each crash the volume is reopened and every file checked.
//!
//! Each round, `--threads` threads work at once, each on files of its own (at most one
//! operation per file per round): create, write a seeded pattern, fallocate in every mode,
//! truncate, unlink. The round then syncs (six in ten), or power is lost (two in ten: every
//! unflushed write dropped, or a random part of them kept and one torn), or the sync runs
//! into failing writes after 0 to 40 writes and flushes and power is lost (one in ten), or
//! its flush fails as Linux's does (the writes it covered forgotten, the error reported
//! once) and power is lost (one in ten): the sync must fail, and so must a retry (the
//! store latches; a retried flush that "succeeds" would be believed over forgotten data).
//! Volume commits may also happen inside a round (a transaction that grows too large, a
//! full journal's checkpoint), so a crash may keep part of a round.
//!
//! After a crash the volume is reopened and checked:
//! - a file no operation touched since the last sync must read exactly as then
//!   (`data_mismatches` otherwise);
//! - a touched file may hold, byte by byte, its bytes before the round, after it, or zeros
//!   (a partial truncate or punch); any other byte is one the file never wrote
//!   (`stale_reads`);
//! - files the last sync made durable must exist unless the round unlinked them (`lost`
//!   counts missing files and mapped blocks the allocator holds free);
//! - the ownership check: `leaked` blocks, `double_allocated` (mapped twice).
//! - reads that fail: one reopen in four is first tried with every read failing, which
//!   must be refused; after each check a file is read with every read failing, which must
//!   fail or return the file's bytes (any other byte counts in `stale_reads`).
//!
//! The model then takes what the reopened volume holds, and the rounds go on. With
//! `EXTALLOC_TORTURE_DEBUG` set, every file is also compared after every sync, and each
//! operation and crash is printed to stderr (to find the round where a model and the
//! volume part).
//!
//! Odd seeds write through a buffered volume (`extalloc::writeback`: delayed allocation,
//! contexts writing back under a 1 MiB dirty limit from 256 KiB cached): a crash then also
//! drops whatever the cache held, and the same checks apply.

use anyhow::{bail, Result};
use extalloc::disk::device::{Crash, Device, FaultDevice, MemDevice};
use extalloc::volume::{Fallocate, FileExtent, Volume, VolumeCheck};
use extalloc::writeback::{Buffered, WritebackOptions};
use extalloc::{Geometry, Policy};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The verdict.
#[derive(Debug, Default, serde::Serialize)]
pub struct VolumeOutcome {
    /// Written through a buffered volume (odd seeds).
    pub buffered: bool,
    pub crashes: u64,
    pub recovered: u64,
    pub lost: u64,
    pub leaked: u64,
    pub double_allocated: u64,
    pub stale_reads: u64,
    pub data_mismatches: u64,
    /// Syncs that ran into a failed flush (and failed, as they must).
    pub failed_flushes: u64,
    /// Syncs whose flush failed but which returned `Ok` (must be 0).
    pub swallowed_flush_errors: u64,
    /// Retries after a failed sync that returned `Ok` (must be 0: the store latches).
    pub believed_retries: u64,
    /// Opens and reads tried with every read failing, and refused.
    pub read_faults: u64,
    pub files_checked: u64,
    pub syncs: u64,
    /// Syncs that were checkpoints (the table and changed maps written).
    pub checkpoints: u64,
    pub operations: u64,
    pub seconds: f64,
}

/// Files per thread at most.
const FILES_PER_THREAD: usize = 6;
/// Largest write or fallocate, bytes.
const MAX_OP_BYTES: u64 = 200_000;
/// Largest offset an operation starts at.
const MAX_OFFSET: u64 = 1 << 20;

/// Bytes of each file as the model believes them, by id.
type Files = BTreeMap<u64, Vec<u8>>;

/// The file calls the torture makes, on a volume (direct writes) or a buffered one.
trait FileCalls: Sync {
    fn create(&self, attr: &[u8]) -> extalloc::Result<u64>;
    fn write(&self, id: u64, offset: u64, data: &[u8]) -> extalloc::Result<()>;
    fn read(&self, id: u64, offset: u64, len: u64) -> extalloc::Result<Vec<u8>>;
    fn size(&self, id: u64) -> extalloc::Result<u64>;
    fn fallocate(&self, id: u64, mode: Fallocate, offset: u64, len: u64) -> extalloc::Result<()>;
    fn truncate(&self, id: u64, size: u64) -> extalloc::Result<()>;
    fn unlink(&self, id: u64) -> extalloc::Result<()>;
    fn sync(&self) -> extalloc::Result<()>;
    fn checkpoint(&self) -> extalloc::Result<()>;
    fn check(&self) -> extalloc::Result<VolumeCheck>;
    fn ids(&self) -> Vec<u64>;
    fn extents(&self, id: u64) -> extalloc::Result<Vec<FileExtent>>;
}

/// Both types have the calls under the same names.
macro_rules! file_calls {
    ($t:ty) => {
        impl FileCalls for $t {
            fn create(&self, attr: &[u8]) -> extalloc::Result<u64> {
                <$t>::create(self, attr)
            }
            fn write(&self, id: u64, offset: u64, data: &[u8]) -> extalloc::Result<()> {
                <$t>::write(self, id, offset, data)
            }
            fn read(&self, id: u64, offset: u64, len: u64) -> extalloc::Result<Vec<u8>> {
                <$t>::read(self, id, offset, len)
            }
            fn size(&self, id: u64) -> extalloc::Result<u64> {
                <$t>::size(self, id)
            }
            fn fallocate(
                &self,
                id: u64,
                mode: Fallocate,
                offset: u64,
                len: u64,
            ) -> extalloc::Result<()> {
                <$t>::fallocate(self, id, mode, offset, len)
            }
            fn truncate(&self, id: u64, size: u64) -> extalloc::Result<()> {
                <$t>::truncate(self, id, size)
            }
            fn unlink(&self, id: u64) -> extalloc::Result<()> {
                <$t>::unlink(self, id)
            }
            fn sync(&self) -> extalloc::Result<()> {
                <$t>::sync(self)
            }
            fn checkpoint(&self) -> extalloc::Result<()> {
                <$t>::checkpoint(self)
            }
            fn check(&self) -> extalloc::Result<VolumeCheck> {
                <$t>::check(self)
            }
            fn ids(&self) -> Vec<u64> {
                <$t>::list(self).iter().map(|f| f.id).collect()
            }
            fn extents(&self, id: u64) -> extalloc::Result<Vec<FileExtent>> {
                <$t>::extents(self, id)
            }
        }
    };
}
file_calls!(Volume);
file_calls!(Buffered);

/// The volume under test, written directly or through the cache.
enum Vol {
    Direct(Box<Volume>),
    Buffered(Buffered),
}

impl Vol {
    fn calls(&self) -> &dyn FileCalls {
        match self {
            Vol::Direct(v) => v.as_ref(),
            Vol::Buffered(b) => b,
        }
    }

    /// `vol`, buffered or not.
    fn wrap(vol: Volume, buffered: bool) -> Result<Vol> {
        if !buffered {
            return Ok(Vol::Direct(Box::new(vol)));
        }
        let opts = WritebackOptions {
            contexts: 2,
            dirty_limit_bytes: 2 << 20,
            background_bytes: 256 << 10,
            ..WritebackOptions::default()
        };
        Ok(Vol::Buffered(Buffered::new(vol, opts)?))
    }
}

/// One thread's round: operations on its own files (each at most once). Returns the ids
/// it touched and its files afterwards.
fn thread_round(vol: &dyn FileCalls, mine: &mut Files, seed: u64) -> Result<Vec<u64>> {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let mut touched = Vec::new();
    for _ in 0..r.gen_range(1..5) {
        let free: Vec<u64> = mine
            .keys()
            .copied()
            .filter(|id| !touched.contains(id))
            .collect();
        if free.is_empty() || (mine.len() < FILES_PER_THREAD && r.gen_bool(0.2)) {
            let id = vol.create(b"torture")?;
            mine.insert(id, Vec::new());
            touched.push(id);
            continue;
        }
        let id = free[r.gen_range(0..free.len())];
        touched.push(id);
        let bytes = mine.get_mut(&id).expect("mine");
        let offset = r.gen_range(0..MAX_OFFSET);
        let len = r.gen_range(1..MAX_OP_BYTES);
        if std::env::var_os("EXTALLOC_TORTURE_DEBUG").is_some() {
            eprintln!("file {id}: op at {offset}+{len} (size {})", bytes.len());
        }
        match r.gen_range(0..10) {
            0..5 => {
                let tag: u8 = r.gen_range(1..=255);
                let data: Vec<u8> = (0..len)
                    .map(|i| tag.wrapping_add((i % 251) as u8).max(1))
                    .collect();
                vol.write(id, offset, &data)?;
                let end = (offset + len) as usize;
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[offset as usize..end].copy_from_slice(&data);
            }
            5..8 => fallocate(vol, id, bytes, &mut r, offset, len)?,
            8 => {
                let size = r.gen_range(0..MAX_OFFSET);
                vol.truncate(id, size)?;
                bytes.resize(size as usize, 0);
            }
            _ => {
                vol.unlink(id)?;
                mine.remove(&id);
            }
        }
    }
    Ok(touched)
}

fn fallocate(
    vol: &dyn FileCalls,
    id: u64,
    bytes: &mut Vec<u8>,
    r: &mut rand::rngs::StdRng,
    offset: u64,
    len: u64,
) -> Result<()> {
    let mode = match r.gen_range(0..4) {
        0 => Fallocate::Allocate,
        1 => Fallocate::KeepSize,
        2 => Fallocate::PunchHole,
        _ => Fallocate::ZeroRange {
            keep_size: r.gen_bool(0.5),
        },
    };
    vol.fallocate(id, mode, offset, len)?;
    let end = (offset + len) as usize;
    if matches!(
        mode,
        Fallocate::Allocate | Fallocate::ZeroRange { keep_size: false }
    ) && bytes.len() < end
    {
        bytes.resize(end, 0);
    }
    if matches!(mode, Fallocate::PunchHole | Fallocate::ZeroRange { .. }) {
        let stop = end.min(bytes.len());
        if (offset as usize) < stop {
            bytes[offset as usize..stop].fill(0);
        }
    }
    Ok(())
}

/// What the threads' files were at the last sync (`durable`), what they are now, and
/// which the round touched.
struct Round {
    durable: Files,
    now: Vec<Files>,
    touched: Vec<u64>,
    /// Which thread each file id belongs to (from its creation on).
    owners: BTreeMap<u64, usize>,
}

/// Checks the reopened volume against the round; returns the files as they read now, per
/// thread (a file's owner is the thread whose model held it).
fn check(vol: &dyn FileCalls, round: &Round, out: &mut VolumeOutcome) -> Result<Vec<Files>> {
    let c = vol.check()?;
    out.lost += c.mapped_free;
    out.leaked += c.leaked;
    out.double_allocated += c.mapped_twice;
    let present: Vec<u64> = vol.ids();
    let mut after: Vec<Files> = vec![Files::new(); round.now.len()];
    for (t, now) in round.now.iter().enumerate() {
        let ids: std::collections::BTreeSet<u64> = now
            .keys()
            .chain(
                round
                    .durable
                    .keys()
                    .filter(|id| round.owners.get(id) == Some(&t)),
            )
            .copied()
            .collect();
        for id in ids {
            let touched = round.touched.contains(&id);
            let (old, new) = (round.durable.get(&id), now.get(&id));
            if !present.contains(&id) {
                if old.is_some() && !touched {
                    out.lost += 1;
                }
                continue;
            }
            out.files_checked += 1;
            let size = vol.size(id)?;
            let back = vol.read(id, 0, size)?;
            if touched {
                let n = stale(&back, old, new);
                if n > 0 {
                    eprintln!(
                        "file {id}: {n} stale bytes; sizes before {:?} after {:?} read {}",
                        old.map(Vec::len),
                        new.map(Vec::len),
                        back.len()
                    );
                }
                out.stale_reads += n;
            } else if Some(&back) != old {
                let at = old.map(|o| o.iter().zip(&back).position(|(a, b)| a != b));
                eprintln!(
                    "file {id}: untouched but differs (sizes {:?} vs {}, first at {at:?}) {:?}",
                    old.map(Vec::len),
                    back.len(),
                    vol.extents(id)
                );
                out.data_mismatches += 1;
            }
            after[t].insert(id, back);
        }
    }
    Ok(after)
}

/// Reads one file of `files` (as the volume holds them) with every read of the device
/// failing: the read must fail, or return the file's own bytes (an answer from memory).
fn read_with_faults(
    dev: &FaultDevice<MemDevice>,
    vol: &dyn FileCalls,
    files: &[Files],
    rng: &mut rand::rngs::StdRng,
    out: &mut VolumeOutcome,
) -> Result<()> {
    let all: Vec<(&u64, &Vec<u8>)> = files.iter().flatten().filter(|f| !f.1.is_empty()).collect();
    if all.is_empty() {
        return Ok(());
    }
    let (&id, bytes) = all[rng.gen_range(0..all.len())];
    dev.fail_reads(true);
    let back = vol.read(id, 0, bytes.len() as u64);
    dev.fail_reads(false);
    match back {
        Err(_) => out.read_faults += 1,
        Ok(back) => {
            let wrong = back.iter().zip(bytes).filter(|(a, b)| a != b).count();
            out.stale_reads += (wrong + back.len().abs_diff(bytes.len())) as u64;
        }
    }
    Ok(())
}

/// Bytes of `back` that are neither zero nor the file's byte before or after the round.
fn stale(back: &[u8], old: Option<&Vec<u8>>, new: Option<&Vec<u8>>) -> u64 {
    let at = |v: Option<&Vec<u8>>, i: usize| v.and_then(|v| v.get(i)).copied();
    back.iter()
        .enumerate()
        .filter(|&(i, &b)| b != 0 && at(old, i) != Some(b) && at(new, i) != Some(b))
        .count() as u64
}

/// Every thread's round at once; returns the files they touched.
fn threads_round(
    vol: &dyn FileCalls,
    files: &mut [Files],
    seed: u64,
    round: u64,
) -> Result<Vec<u64>> {
    let results: Vec<Result<Vec<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter_mut()
            .enumerate()
            .map(|(t, mine)| {
                let seed = seed ^ (round << 16) ^ t as u64;
                s.spawn(move || thread_round(vol, mine, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("torture thread panicked"))
            .collect()
    });
    let mut touched = Vec::new();
    for r in results {
        touched.extend(r?);
    }
    Ok(touched)
}

/// With `EXTALLOC_TORTURE_DEBUG`: every file read back against the model after a sync.
fn compare_after_sync(vol: &dyn FileCalls, durable: &Files, round: u64) -> Result<()> {
    if std::env::var_os("EXTALLOC_TORTURE_DEBUG").is_none() {
        return Ok(());
    }
    for (&id, bytes) in durable {
        let back = vol.read(id, 0, 1 << 40)?;
        if back != *bytes {
            let at = bytes.iter().zip(&back).position(|(a, b)| a != b);
            bail!(
                "round {round}: file {id} reads {} bytes, model {} (first difference at {at:?})",
                back.len(),
                bytes.len()
            );
        }
    }
    Ok(())
}

/// What goes wrong before the power is lost.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// The sync runs into failing writes.
    Writes,
    /// The sync's flush fails as on Linux.
    Flush,
}

/// A sync or (half of the time) a checkpoint: half of the faults then land in a
/// checkpoint's map segments, their commit or the table.
fn sync_or_checkpoint(vol: &Vol, rng: &mut rand::rngs::StdRng) -> extalloc::Result<()> {
    if rng.gen_bool(0.5) {
        vol.calls().checkpoint()
    } else {
        vol.calls().sync()
    }
}

/// Power loss (after a sync that runs into `fault`), then the reopen (one in four first
/// tried with every read failing). Returns the reopened volume.
fn crash(
    dev: &Arc<FaultDevice<MemDevice>>,
    vol: Vol,
    (rng, out): (&mut rand::rngs::StdRng, &mut VolumeOutcome),
    fault: Fault,
) -> Result<Vol> {
    let n = out.crashes;
    match fault {
        Fault::None => {}
        Fault::Writes => {
            dev.fail_after(rng.gen_range(0..40));
            let _ = sync_or_checkpoint(&vol, rng);
        }
        Fault::Flush => {
            dev.fail_flushes(1);
            let first = sync_or_checkpoint(&vol, rng);
            let failed = dev.flush_failures_left() == 0;
            dev.fail_flushes(0);
            match (failed, first) {
                (true, Ok(())) => out.swallowed_flush_errors += 1,
                (true, Err(_)) => {
                    out.failed_flushes += 1;
                    if vol.calls().sync().is_ok() {
                        out.believed_retries += 1;
                    }
                }
                (false, _) => {} // nothing to flush
            }
        }
    }
    let buffered = matches!(vol, Vol::Buffered(_));
    // Power is lost: nothing more reaches the device, not even what a clean close would
    // flush (the store's superblock at drop); the crash then keeps what it keeps.
    dev.fail_writes(true);
    drop(vol);
    let crash = if rng.gen_bool(0.5) {
        Crash::DropAll
    } else {
        Crash::Random {
            keep: rng.gen_range(0.0..1.0),
            tear: rng.gen_bool(0.5),
        }
    };
    if std::env::var_os("EXTALLOC_TORTURE_DEBUG").is_some() {
        eprintln!("crash {n}: {fault:?}, {crash:?}");
    }
    dev.crash(crash)?;
    if rng.gen_bool(0.25) {
        dev.fail_reads(true);
        let opened = Volume::open(dev.clone() as Arc<dyn Device>, Policy::default());
        dev.fail_reads(false);
        match opened {
            Ok(_) => bail!("crash {n}: the volume opened with every read failing"),
            Err(_) => out.read_faults += 1,
        }
    }
    match Volume::open(dev.clone() as Arc<dyn Device>, Policy::default()) {
        Ok(v) => Vol::wrap(small_cache(v), buffered),
        Err(e) => bail!("crash {n}: the volume did not reopen: {e}"),
    }
}

/// `vol` keeping one clean file in memory: every checkpoint drops the others, so the
/// writers and the checks after each crash read them back from the file tree.
fn small_cache(vol: Volume) -> Volume {
    vol.set_file_cache(1);
    vol
}

/// Runs rounds until `crashes` crashes have been checked.
pub fn run(crashes: u64, seed: u64, threads: usize) -> Result<VolumeOutcome> {
    let started = Instant::now();
    let geometry = Geometry::new(4096, 2048, 16384)?;
    let dev = Arc::new(FaultDevice::new(MemDevice::new(16384 * 4096), seed));
    let buffered = seed % 2 == 1;
    let mut vol = Vol::wrap(
        small_cache(Volume::mkfs(dev.clone(), &geometry, 32, Policy::default())?),
        buffered,
    )?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = VolumeOutcome {
        buffered,
        ..VolumeOutcome::default()
    };
    let mut files: Vec<Files> = vec![Files::new(); threads];
    let mut durable: Files = Files::new();
    let mut owners: BTreeMap<u64, usize> = BTreeMap::new();
    let mut round_no = 0u64;
    while out.crashes < crashes {
        round_no += 1;
        let touched = threads_round(vol.calls(), &mut files, seed, round_no)?;
        // A file belongs to the thread that holds it now; an unlinked one to its last
        // holder (ids of files lost to a crash are given out again, maybe to another).
        for (t, mine) in files.iter().enumerate() {
            for &id in mine.keys() {
                owners.insert(id, t);
            }
        }
        out.operations += touched.len() as u64;
        let action = rng.gen_range(0..10);
        if action < 6 {
            if action == 5 {
                vol.calls().checkpoint()?;
                out.checkpoints += 1;
            } else {
                vol.calls().sync()?;
            }
            out.syncs += 1;
            durable = files.iter().flat_map(|f| f.clone()).collect();
            compare_after_sync(vol.calls(), &durable, round_no)?;
            continue;
        }
        out.crashes += 1;
        let fault = match action {
            8 => Fault::Writes,
            9 => Fault::Flush,
            _ => Fault::None,
        };
        vol = crash(&dev, vol, (&mut rng, &mut out), fault)?;
        let round = Round {
            durable: durable.clone(),
            now: files.clone(),
            touched,
            owners: owners.clone(),
        };
        files = check(vol.calls(), &round, &mut out)?;
        read_with_faults(&dev, vol.calls(), &files, &mut rng, &mut out)?;
        out.recovered += 1;
        // What the volume holds now is durable: sync it so the next round starts there.
        vol.calls().sync()?;
        durable = files.iter().flat_map(|f| f.clone()).collect();
        let broken = out.swallowed_flush_errors + out.believed_retries;
        if out.lost
            + out.leaked
            + out.double_allocated
            + out.stale_reads
            + out.data_mismatches
            + broken
            > 0
        {
            eprintln!("crash {} (round {round_no}): {out:?}", out.crashes);
            break;
        }
    }
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}
