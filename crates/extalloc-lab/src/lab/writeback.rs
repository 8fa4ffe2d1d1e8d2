//! The `writeback` workload: the fio job of seed 003 on a buffered volume. `files` files,
//! each created under its own placement key (its "directory"), each written by its own
//! thread with 4 KiB buffered writes, in a random order (`random`) or in order (`seq`);
//! each thread then fsyncs and closes its file (fio's `end_fsync`), and the volume syncs.
//! MiB/s counts the data over the time until it is durable. One run per policy x writeback
//! contexts x affinity, on a volume over the memory device or a file device (`--device`).

use super::report::{self, Report, Run};
pub use super::report::{CacheFields, Pattern, WritebackFields};
use super::{LabOptions, Progress};
use anyhow::{Context, Result};
use extalloc::disk::device::{Device, FileDevice, MemDevice};
use extalloc::volume::Volume;
use extalloc::writeback::{Affinity, Buffered, WritebackOptions, WritebackStats};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Instant;

/// Bytes of one write (fio's `bs=4k`).
pub const WRITE_BYTES: u64 = 4096;

/// The workload's own options.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WritebackParams {
    pub files: usize,
    pub pattern: Pattern,
    /// Contexts asked for, one run each.
    pub contexts: Vec<usize>,
    /// Affinities, one run each.
    pub affinities: Vec<String>,
    /// The cache's hard limit; `None`: room for all the data (no pressure).
    pub dirty_limit_bytes: Option<u64>,
}

/// Every policy x contexts x affinity, `repeat` times interleaved, medians kept.
pub fn run_matrix(
    opts: &LabOptions,
    wb: &WritebackParams,
    progress: &mut dyn Progress,
) -> Result<Report> {
    let affinities: Vec<Affinity> = wb
        .affinities
        .iter()
        .map(|a| a.parse().map_err(anyhow::Error::from))
        .collect::<Result<_>>()?;
    let data = (wb.files as u64).saturating_mul(opts.file_bytes);
    anyhow::ensure!(
        opts.file_bytes >= WRITE_BYTES && data <= opts.device_bytes / 10 * 9,
        "writeback: {} files of {} bytes do not fit the {}-byte device with a tenth to \
         spare (--files, --file-size, --device-size; each file at least 4 KiB)",
        wb.files,
        opts.file_bytes,
        opts.device_bytes
    );
    let mut cells = Vec::new();
    for policy in &opts.policies {
        for &c in &wb.contexts {
            for &a in &affinities {
                cells.push((policy.clone(), c, a));
            }
        }
    }
    let load = super::machine::start();
    let total = cells.len() * opts.repeat;
    let mut all: Vec<Vec<Run>> = vec![Vec::new(); cells.len()];
    let mut done = 0;
    for rep in 0..opts.repeat {
        for (i, (policy, c, a)) in cells.iter().enumerate() {
            done += 1;
            progress.start(&format!(
                "[{done}/{total}] writeback {policy} contexts={c} affinity={a:?} (repeat {}/{})",
                rep + 1,
                opts.repeat
            ));
            let run = run_once(policy, *c, *a, opts, wb)?;
            progress.done(run.ops_per_sec);
            all[i].push(run);
        }
    }
    let report = Report {
        extents_per_file_repeats: report::extents_repeats(&all),
        ..Report::new(
            "writeback",
            serde_json::json!({ "lab": opts, "writeback": wb }),
            report::Device::of(&opts.geometry()?),
            all.into_iter().map(report::median_run).collect(),
        )
    };
    Ok(super::judge(report, load))
}

/// The quick suite's run: `threads` files of `--file-size`, random writes, the default
/// contexts with group affinity, no dirty limit.
pub fn run_quick(
    policy: &super::backend::LabPolicy,
    threads: usize,
    opts: &LabOptions,
) -> Result<Run> {
    let wb = WritebackParams {
        files: threads,
        pattern: Pattern::Random,
        contexts: vec![0],
        affinities: vec!["group".into()],
        dirty_limit_bytes: None,
    };
    run_once(&policy.name(), 0, Affinity::Group, opts, &wb)
}

/// One run: a fresh volume, the writers, fsync and close, sync; then the figures.
pub fn run_once(
    spec: &str,
    contexts: usize,
    affinity: Affinity,
    opts: &LabOptions,
    wb: &WritebackParams,
) -> Result<Run> {
    let policy = extalloc::Policy::parse(spec)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("writeback runs extalloc policies: {spec}"))?;
    let geometry = opts.geometry()?;
    let dev: Arc<dyn Device> = match &opts.device {
        Some(path) => Arc::new(FileDevice::create(path, opts.device_bytes)?),
        None => Arc::new(MemDevice::new(opts.device_bytes)),
    };
    let journal = super::backend::journal_blocks(&geometry);
    let vol = Volume::mkfs(dev, &geometry, journal, policy)?;
    let data = wb.files as u64 * opts.file_bytes;
    // Without a limit, room for all the data and no background writeback before the
    // sync: the unpressured run. With one, background writeback from half of it.
    let (limit, background) = match wb.dirty_limit_bytes {
        Some(l) => (l, 0),
        None => (data + (64 << 20), data + (64 << 20)),
    };
    let b = Buffered::new(
        vol,
        WritebackOptions {
            contexts,
            affinity,
            dirty_limit_bytes: limit,
            background_bytes: background,
            ..WritebackOptions::default()
        },
    )?;
    let ids: Vec<u64> = (0..wb.files)
        .map(|i| b.create_placed(b"", opts.seed.wrapping_mul(1000) + i as u64))
        .collect::<extalloc::Result<_>>()?;
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let writers: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let b = &b;
                s.spawn(move || write_file(b, id, opts, wb.pattern, opts.seed + i as u64))
            })
            .collect();
        for w in writers {
            w.join().expect("writer panicked")?;
        }
        Ok(())
    })?;
    b.sync()?;
    let seconds = started.elapsed().as_secs_f64();
    let run = figures(&b, spec, seconds, data, opts, wb, affinity)?;
    let check = b.check()?;
    anyhow::ensure!(check.clean(), "the volume's check after the run: {check:?}");
    b.close()?;
    if let Some(path) = &opts.device {
        std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(run)
}

/// One writer: its file's blocks in the pattern's order, then fsync and close.
fn write_file(b: &Buffered, id: u64, opts: &LabOptions, pattern: Pattern, seed: u64) -> Result<()> {
    let blocks = opts.file_bytes / WRITE_BYTES;
    let mut order: Vec<u64> = (0..blocks).collect();
    if pattern == Pattern::Random {
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    }
    let mut buf = vec![0u8; WRITE_BYTES as usize];
    for l in order {
        buf[..8].copy_from_slice(&l.to_le_bytes());
        buf[8..16].copy_from_slice(&id.to_le_bytes());
        b.write(id, l * WRITE_BYTES, &buf)?;
    }
    b.fsync(id)?;
    b.close_file(id)?;
    Ok(())
}

/// The run's figures from the volume and the writeback counters.
fn figures(
    b: &Buffered,
    spec: &str,
    seconds: f64,
    data: u64,
    opts: &LabOptions,
    wb: &WritebackParams,
    affinity: Affinity,
) -> Result<Run> {
    let geometry = opts.geometry()?;
    let files: Vec<Vec<extalloc::Extent>> = b
        .try_list()?
        .iter()
        .map(|f| Ok(b.extents(f.id)?.iter().map(|e| e.extent).collect()))
        .collect::<extalloc::Result<_>>()?;
    let st: WritebackStats = b.stats();
    let total = st.total();
    let mib = data as f64 / f64::from(1 << 20);
    let ops = data / WRITE_BYTES;
    let alloc = b.volume().store().allocator();
    let cache = CacheFields {
        dirty_limit_bytes: st.dirty_limit_bytes,
        dirty_peak_bytes: st.dirty_peak_bytes,
        writeback_runs: total.runs,
        bytes_per_run: total.bytes as f64 / total.runs.max(1) as f64,
        allocations_per_mib: st.allocations_per_mib(),
        lock_waits: total.lock_waits,
        lock_waits_per_mib: total.lock_waits as f64 / mib,
        context_lock_waits: st.per_context.iter().map(|c| c.lock_waits).collect(),
        context_switches: st.context_switches,
        throttled_writes: st.throttled_writes,
        prealloc_left_blocks: b.try_list()?.iter().map(|f| f.prealloc_blocks).sum(),
    };
    let fields = WritebackFields {
        wb_contexts: st.contexts,
        wb_affinity: format!("{affinity:?}").to_lowercase(),
        mib_per_sec: mib / seconds,
        pattern: wb.pattern,
        cache: Some(cache),
    };
    Ok(Run {
        policy: spec.to_string(),
        threads: wb.files,
        seconds,
        ops,
        ops_per_sec: ops as f64 / seconds,
        ops_per_sec_repeats: vec![ops as f64 / seconds],
        latency_ns: report::latency_of(&alloc.latency_histogram()),
        layout: report::layout(&files, geometry.block_size),
        free_space: Some(report::free_space_json(
            &alloc.free_space(),
            geometry.block_size,
            geometry.group_blocks,
        )),
        counters: Some(report::counters(
            &alloc.stats(),
            b.volume().store().journal_flushes(),
        )),
        progress: None,
        writeback: Some(fields),
    })
}
