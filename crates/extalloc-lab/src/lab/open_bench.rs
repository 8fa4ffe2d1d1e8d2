//! `extalloc open-bench`: what mounting costs.
//!
//! 1. A device of `--size` (default 16 TiB) as a sparse file: mkfs, then `Store::open`
//!    timed, with the bytes it read (a counting device wrapper) and the bitmaps it loaded.
//!    Lazy loading reads the superblock and the descriptor table only.
//! 2. Recovery time against journal size: on a smaller device, `N` committed records (each
//!    one allocation of a few blocks and a 64-byte payload) left unreplayed by a crash
//!    (no checkpoint), then `open` timed; the replay's share is reported.
//! 3. With `--volume-files N`: a volume holding N files of `--extents-per-file` extents,
//!    closed, then `Volume::open` timed (`volume_open`).

use anyhow::{Context, Result};
use extalloc::disk::device::{Device, FileDevice};
use extalloc::store::Store;
use extalloc::{AllocRequest, Geometry, Policy};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// A device that counts the bytes read through it.
struct Counting {
    inner: FileDevice,
    read: AtomicU64,
    written: AtomicU64,
}

impl Counting {
    /// A sparse file of `bytes` at `path`, counted.
    fn create(path: &Path, bytes: u64) -> Result<Arc<Counting>> {
        Ok(Arc::new(Counting {
            inner: FileDevice::create(path, bytes)
                .with_context(|| format!("creating {}", path.display()))?,
            read: AtomicU64::new(0),
            written: AtomicU64::new(0),
        }))
    }
}

impl Device for Counting {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> extalloc::Result<()> {
        self.read.fetch_add(buf.len() as u64, Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> extalloc::Result<()> {
        self.written.fetch_add(buf.len() as u64, Relaxed);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> extalloc::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct OpenRow {
    pub device_bytes: u64,
    pub groups: u64,
    pub mkfs_seconds: f64,
    pub open_seconds: f64,
    pub bytes_read: u64,
    pub bitmaps_loaded: u64,
    /// Memory per unloaded group (group record, load state, index bits).
    pub bytes_per_unloaded_group: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RecoveryRow {
    pub records: u64,
    pub journal_bytes_used: u64,
    pub open_seconds: f64,
    pub replay_seconds: f64,
    pub bitmaps_loaded: u64,
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// Part 1: mkfs and open a sparse device of `bytes`.
pub fn open_big(path: &Path, bytes: u64, group_blocks: u64) -> Result<OpenRow> {
    remove(path)?;
    let geometry = Geometry::from_bytes(4096, group_blocks, bytes)?;
    let dev = Counting::create(path, bytes)?;
    let started = Instant::now();
    extalloc::disk::format::mkfs(dev.as_ref(), &geometry, 16384, [0; 16])?;
    let mkfs_seconds = started.elapsed().as_secs_f64();
    dev.read.store(0, Relaxed);
    let started = Instant::now();
    let (store, _) = Store::open(dev.clone(), Policy::default())?;
    let open_seconds = started.elapsed().as_secs_f64();
    let row = OpenRow {
        device_bytes: bytes,
        groups: geometry.groups_count(),
        mkfs_seconds,
        open_seconds,
        bytes_read: dev.read.load(Relaxed),
        bitmaps_loaded: store.allocator().stats().loaded_bitmaps,
        bytes_per_unloaded_group: store.allocator().memory_per_unloaded_group(),
    };
    drop(store);
    remove(path)?;
    Ok(row)
}

/// Part 2: `records` committed records replayed by `open`.
pub fn recovery(path: &Path, records: u64) -> Result<RecoveryRow> {
    remove(path)?;
    let bytes = 64u64 << 30;
    let geometry = Geometry::from_bytes(4096, extalloc::GROUP_BLOCKS_DEFAULT, bytes)?;
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(path, bytes)?);
    // A journal large enough that no record is checkpointed away: ~120 bytes a record.
    let journal_blocks = (records * 160 / 4096 + 64).max(256);
    let store = Store::create(dev.clone(), &geometry, journal_blocks, Policy::default())?;
    let payload = [0x5au8; 64];
    for i in 0..records {
        store.allocate(&AllocRequest::new(i, 4))?;
        store.commit(&payload)?;
    }
    // A crash: no checkpoint, every record waits for the replay.
    drop(store);
    let started = Instant::now();
    let (store, replayed) = Store::open(dev, Policy::default())?;
    let open_seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        replayed.len() as u64 == records,
        "replayed {} of {records} records",
        replayed.len()
    );
    let timing = store.open_timing();
    let row = RecoveryRow {
        records,
        journal_bytes_used: store.journal_bytes_used(),
        open_seconds,
        replay_seconds: timing.replay_seconds,
        bitmaps_loaded: timing.bitmaps_loaded,
    };
    drop(store);
    remove(path)?;
    Ok(row)
}

pub fn markdown(open: &OpenRow, recovery: &[RecoveryRow]) -> String {
    let mut out = String::new();
    out.push_str("| device | groups | mkfs s | open s | bytes read by open | bitmaps loaded | bytes per unloaded group |\n|---|---:|---:|---:|---:|---:|---:|\n");
    out.push_str(&format!(
        "| {:.1} TiB | {} | {:.2} | {:.4} | {} | {} | {:.1} |\n",
        open.device_bytes as f64 / (1u64 << 40) as f64,
        open.groups,
        open.mkfs_seconds,
        open.open_seconds,
        open.bytes_read,
        open.bitmaps_loaded,
        open.bytes_per_unloaded_group
    ));
    out.push_str("\n| records to replay | journal bytes | open s | of which replay s | bitmaps loaded |\n|---:|---:|---:|---:|---:|\n");
    for r in recovery {
        out.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {} |\n",
            r.records, r.journal_bytes_used, r.open_seconds, r.replay_seconds, r.bitmaps_loaded
        ));
    }
    out
}

/// Opening a volume that holds many files and extents.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VolumeOpenRow {
    pub files: u64,
    pub extents: u64,
    pub build_seconds: f64,
    pub open_seconds: f64,
    pub bytes_read: u64,
    pub bitmaps_loaded: u64,
    /// Extent maps the open read (none after a clean close: maps are read at first use).
    pub maps_read: u64,
    /// Then every map read and checked: `Volume::check`.
    pub check_seconds: f64,
    pub check_bytes_read: u64,
    /// Then one file's attribute changed and the volume checkpointed: what that
    /// checkpoint wrote (the file table's share, the journal's, the store's) and took.
    pub change_checkpoint_bytes: u64,
    pub change_checkpoint_seconds: f64,
    /// This process's resident memory (MiB) before the open (the build's leftovers) and
    /// right after it, and the files the volume then kept in memory (the rest stay in its
    /// file tree until a call names them).
    pub rss_before_open_mib: f64,
    pub rss_after_open_mib: f64,
    pub files_in_memory_after_open: u64,
}

/// A volume on a sparse 64 GiB file at `path` with `files` files of `extents` one-block
/// extents each (fallocated with a hole between them), closed, then `Volume::open` timed
/// (the root, the file table and any records after it; no map is read until used), then
/// `Volume::check` (every map read and handed to the file layer, every block's owner),
/// then one file's attribute changed and a checkpoint timed, its bytes written counted.
pub fn volume_open(path: &Path, files: u64, extents: u64) -> Result<VolumeOpenRow> {
    use extalloc::volume::{Fallocate, Volume};
    let bytes = 64u64 << 30;
    let geometry = Geometry::new(4096, extalloc::GROUP_BLOCKS_DEFAULT, bytes / 4096)?;
    let dev = Counting::create(path, bytes)?;
    let started = Instant::now();
    extalloc::disk::format::mkfs(dev.as_ref(), &geometry, 16384, [0; 16])?;
    let vol = Volume::format(dev.clone(), Policy::default())?;
    for f in 0..files {
        let id = vol.create(b"")?;
        for k in 0..extents {
            vol.fallocate(id, Fallocate::KeepSize, k * 2 * 4096, 4096)?;
        }
        if (f + 1) % (files / 10).max(1) == 0 {
            eprintln!("volume open: {} of {files} files made", f + 1);
        }
    }
    vol.close()?;
    let build_seconds = started.elapsed().as_secs_f64();
    dev.flush()?;
    dev.inner.drop_cache()?;
    dev.read.store(0, Relaxed);
    let rss_before_open_mib = rss_mib();
    let started = Instant::now();
    let vol = Volume::open(dev.clone(), Policy::default())?;
    let open_seconds = started.elapsed().as_secs_f64();
    let rss_after_open_mib = rss_mib();
    let files_in_memory_after_open = vol.file_cache_figures().0 as u64;
    let listed = vol.try_list()?;
    anyhow::ensure!(
        listed.len() as u64 == files,
        "{} files after the open",
        listed.len()
    );
    let (bytes_read, bitmaps_loaded) = (
        dev.read.load(Relaxed),
        vol.store().open_timing().bitmaps_loaded,
    );
    let maps_read = vol.maps_read();
    let started = Instant::now();
    let check = vol.check()?;
    anyhow::ensure!(check.clean(), "the volume's check found {check:?}");
    let check_seconds = started.elapsed().as_secs_f64();
    let check_bytes_read = dev.read.load(Relaxed) - bytes_read;
    // A checkpoint after one change: the first one after the open (a table written whole
    // is what it was before the file tree).
    let one = listed[listed.len() / 2].id;
    vol.set_attr(one, b"changed")?;
    let written = dev.written.load(Relaxed);
    let started = Instant::now();
    vol.checkpoint()?;
    let change_checkpoint_seconds = started.elapsed().as_secs_f64();
    let row = VolumeOpenRow {
        files,
        extents: listed.iter().map(|f| f.extents).sum(),
        build_seconds,
        open_seconds,
        bytes_read,
        bitmaps_loaded,
        maps_read,
        check_seconds,
        check_bytes_read,
        change_checkpoint_bytes: dev.written.load(Relaxed) - written,
        change_checkpoint_seconds,
        rss_before_open_mib,
        rss_after_open_mib,
        files_in_memory_after_open,
    };
    drop(vol);
    std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    Ok(row)
}

/// Opening a synthetic device (`open-bench --synthetic`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SyntheticOpenRow {
    pub device_bytes: u64,
    pub groups: u64,
    /// Making the device (layout, templates, superblocks): no I/O.
    pub make_seconds: f64,
    pub open_seconds: f64,
    pub bitmaps_loaded: u64,
    pub bytes_per_unloaded_group: f64,
    /// Resident memory of this process after the open, in MiB.
    pub rss_after_open_mib: f64,
}

/// This process's resident memory in MiB (`VmRSS` of /proc/self/status; 0 where unknown).
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Makes and opens a synthetic device of `bytes` filled as `syn` says.
pub fn open_synthetic(
    bytes: u64,
    group_blocks: u64,
    syn: super::synthetic::Synthetic,
    seed: u64,
) -> Result<SyntheticOpenRow> {
    let geometry = Geometry::from_bytes(4096, group_blocks, bytes)?;
    let started = Instant::now();
    let dev = syn.device(geometry, 16384, seed)?;
    let make_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (store, _) = Store::open(dev, Policy::default())?;
    let open_seconds = started.elapsed().as_secs_f64();
    Ok(SyntheticOpenRow {
        device_bytes: bytes,
        groups: geometry.groups_count(),
        make_seconds,
        open_seconds,
        bitmaps_loaded: store.allocator().stats().loaded_bitmaps,
        bytes_per_unloaded_group: store.allocator().memory_per_unloaded_group(),
        rss_after_open_mib: rss_mib(),
    })
}

/// The synthetic open rows as a Markdown table.
pub fn synthetic_markdown(rows: &[SyntheticOpenRow]) -> String {
    let mut out = String::from(
        "| device | groups | make s | open s | bitmaps loaded | bytes per unloaded group | RSS after open MiB |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {:.0} GiB | {} | {:.3} | {:.3} | {} | {:.1} | {:.0} |\n",
            r.device_bytes as f64 / f64::from(1u32 << 30),
            r.groups,
            r.make_seconds,
            r.open_seconds,
            r.bitmaps_loaded,
            r.bytes_per_unloaded_group,
            r.rss_after_open_mib
        ));
    }
    out
}
