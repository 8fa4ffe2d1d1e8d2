//! `extalloc open-bench`'s run once its arguments are read: what opening a large sparse
//! device costs and recovery against the number of journal records, a volume's open, or
//! (`--synthetic`) opening synthetic filled devices; Markdown tables on stdout.

use crate::lab::{self, open_bench};
use anyhow::{Context, Result};
use std::path::Path;

/// Opening a sparse device of `size` at `path`, then recovery at each of `records`
/// (comma-separated); with `volume_files`, a volume of that many files of
/// `extents_per_file` extents opened too.
pub fn open_bench(
    path: &Path,
    size: &str,
    group_blocks: u64,
    records: &str,
    volume_files: u64,
    extents_per_file: u64,
) -> Result<()> {
    let bytes = extalloc::parse_size(size)?;
    let open = open_bench::open_big(path, bytes, group_blocks)?;
    let mut rows = Vec::new();
    for n in records.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let n: u64 = n
            .parse()
            .with_context(|| format!("--records: {n:?} is not a count"))?;
        eprintln!("recovery: {n} records...");
        rows.push(open_bench::recovery(path, n)?);
    }
    print!("{}", open_bench::markdown(&open, &rows));
    if volume_files > 0 {
        let v = open_bench::volume_open(path, volume_files, extents_per_file)?;
        println!(
            "\n| volume files | extents | build s | open s | bytes read | bitmaps loaded | maps read | \
             check s (every map) | check bytes read | checkpoint after one change: KiB written | s | \
             files in memory after the open | RSS MiB before the open | after |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n\
             | {} | {} | {:.1} | {:.3} | {} | {} | {} | {:.3} | {} | {:.0} | {:.3} | {} | {:.0} | {:.0} |",
            v.files,
            v.extents,
            v.build_seconds,
            v.open_seconds,
            v.bytes_read,
            v.bitmaps_loaded,
            v.maps_read,
            v.check_seconds,
            v.check_bytes_read,
            v.change_checkpoint_bytes as f64 / 1024.0,
            v.change_checkpoint_seconds,
            v.files_in_memory_after_open,
            v.rss_before_open_mib,
            v.rss_after_open_mib
        );
    }
    Ok(())
}

/// `extalloc open-bench --synthetic --size A,B,...`: one synthetic device of each size,
/// smallest first, each made and opened in this process (RSS grows with the largest).
pub fn open_bench_synthetic(sizes: &str, group_blocks: u64, fill: f64) -> Result<()> {
    anyhow::ensure!(
        (0.0..=0.95).contains(&fill),
        "--fill must be from 0 to 0.95"
    );
    let syn = lab::Synthetic {
        fill,
        free_extent_kib: (4, 4096),
    };
    let mut rows = Vec::new();
    for size in sizes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bytes = extalloc::parse_size(size).with_context(|| format!("--size {size}"))?;
        eprintln!("open-bench: synthetic {size}, {fill} full...");
        rows.push(open_bench::open_synthetic(bytes, group_blocks, syn, 1)?);
    }
    print!("{}", open_bench::synthetic_markdown(&rows));
    Ok(())
}
