//! `extalloc commit-bench PATH`: group commit on a real file. A fresh file system is made at
//! PATH; then for each thread count, threads append a small record (one allocation and the
//! caller's payload) and commit it, over and over, for `--seconds`. Reports commits per
//! second and flushes per commit: with group commit, concurrent committers share flushes, so
//! on a device whose flush costs something (a disk) more threads commit more per second.
//! `--handles` runs the same through the store's per-caller transactions, `--shared` through
//! its shared transaction (`run_store`): each commit then also allocates a block and frees
//! one, as a caller's would; with `--payload-only` it records only the payload, which
//! isolates what the transaction adds to group commit from the allocator's work.

use anyhow::{Context, Result};
use extalloc::disk::device::{Device, FileDevice};
use extalloc::disk::journal::{Area, Journal, Op, Replayed};
use extalloc::{Extent, Geometry};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Row {
    pub threads: usize,
    pub commits: u64,
    pub seconds: f64,
    pub flushes: u64,
}

pub fn run(path: &Path, threads: &[usize], seconds: f64, payload: usize) -> Result<Vec<Row>> {
    let geometry = Geometry::new(4096, 32768, 65536)?;
    let dev = Arc::new(FileDevice::create(path, 65536 * 4096)?);
    let sb = extalloc::disk::format::mkfs(dev.as_ref(), &geometry, 16384, rand::random())
        .with_context(|| format!("mkfs on {}", path.display()))?;
    let area = Area {
        start: sb.journal_start * 4096,
        len: sb.journal_blocks * 4096,
    };
    let mut rows = Vec::new();
    for &n in threads {
        let start = Replayed::empty();
        let dev: Arc<dyn Device> = dev.clone();
        let journal = Journal::new(dev, area, 0, &start);
        let (commits, seconds) = committers(n, seconds, |t, stop, commits| {
            let body = vec![t as u8; payload];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let op = [Op::Allocate(Extent::new(1000 + i, 1))];
                let seq = match journal.append(&op, &body) {
                    Ok(seq) => seq,
                    Err(extalloc::Error::JournalFull { .. }) => {
                        // Nothing to write home here: free the whole log.
                        journal.set_tail(journal.head().0);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                journal.commit(seq)?;
                commits.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            Ok(())
        })?;
        rows.push(Row {
            threads: n,
            commits,
            seconds,
            flushes: journal.flushes(),
        });
    }
    std::fs::remove_file(path).ok();
    Ok(rows)
}

/// How [`run_store`] commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Each commit through its own [`Txn`](extalloc::store::Txn) (`Store::begin`).
    Handles,
    /// Through the store's one shared transaction (`Store::allocate`, `free`, `commit`):
    /// a commit takes every thread's operations so far.
    Shared,
}

/// [`run`] through a [`Store`](extalloc::store::Store): each thread allocates one block,
/// frees the block it allocated before (unless not `ops`: the record then holds only the
/// payload), and commits with the payload, in a transaction of its own or the shared one
/// (`mode`); full journals checkpoint.
pub fn run_store(
    path: &Path,
    threads: &[usize],
    seconds: f64,
    payload: usize,
    mode: StoreMode,
    ops: bool,
) -> Result<Vec<Row>> {
    let geometry = Geometry::new(4096, 32768, 65536)?;
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(path, 65536 * 4096)?);
    let store = extalloc::store::Store::create(dev, &geometry, 16384, extalloc::Policy::default())
        .with_context(|| format!("mkfs on {}", path.display()))?;
    let mut rows = Vec::new();
    for &n in threads {
        let flushes_before = store.journal_flushes();
        let (commits, seconds) = committers(n, seconds, |t, stop, commits| {
            let body = vec![t as u8; payload];
            let mut last: Option<Extent> = None;
            let req = extalloc::AllocRequest::new(t as u64, 1);
            while !stop.load(Ordering::Relaxed) {
                last = match mode {
                    StoreMode::Handles => {
                        let txn = store.begin();
                        let e = if ops { Some(txn.allocate(&req)?) } else { None };
                        if let Some(old) = last {
                            txn.free(old)?;
                        }
                        txn.commit(&body).map_err(|f| f.error)?;
                        e
                    }
                    StoreMode::Shared => {
                        let e = if ops {
                            Some(store.allocate(&req)?)
                        } else {
                            None
                        };
                        if let Some(old) = last {
                            store.free(old)?;
                        }
                        store.commit(&body)?;
                        e
                    }
                };
                commits.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })?;
        rows.push(Row {
            threads: n,
            commits,
            seconds,
            flushes: store.journal_flushes() - flushes_before,
        });
    }
    drop(store);
    std::fs::remove_file(path).ok();
    Ok(rows)
}

/// Runs `worker(thread, stop, commits)` on `n` threads for `seconds`, then stops them;
/// returns the commits they counted and the seconds elapsed.
fn committers<F>(n: usize, seconds: f64, worker: F) -> Result<(u64, f64)>
where
    F: Fn(usize, &AtomicBool, &AtomicU64) -> Result<()> + Sync,
{
    let (stop, commits) = (AtomicBool::new(false), AtomicU64::new(0));
    let began = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..n)
            .map(|t| {
                let (worker, stop, commits) = (&worker, &stop, &commits);
                s.spawn(move || worker(t, stop, commits))
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().expect("committer panicked")?;
        }
        Ok(())
    })?;
    Ok((
        commits.load(Ordering::Relaxed),
        began.elapsed().as_secs_f64(),
    ))
}

pub fn markdown(path: &Path, rows: &[Row]) -> String {
    let base = rows.first().map_or(1.0, |r| r.commits as f64 / r.seconds);
    let mut out = format!(
        "commits on {}\n\n| threads | commits/s | vs first | flushes per commit |\n|---:|---:|---:|---:|\n",
        path.display()
    );
    for r in rows {
        let rate = r.commits as f64 / r.seconds;
        out.push_str(&format!(
            "| {} | {:.0} | {:.2}x | {:.3} |\n",
            r.threads,
            rate,
            rate / base,
            r.flushes as f64 / r.commits.max(1) as f64
        ));
    }
    out
}
