//! Free space of a kernel file system, read with its own tools after unmounting:
//! ext4 through `dumpe2fs` (every group's free block ranges: exact runs, so the same figures
//! as ours, per group included) checked against `e2freefrag`'s count; XFS through
//! `xfs_db -r -c "freesp -s"` (a histogram and totals; no largest extent, no per-group runs).

use crate::lab::report::{FreeSpaceJson, HistogramBucket};
use anyhow::{bail, Context, Result};
use extalloc::{FreeSpace, Geometry};

/// ext4's free runs and geometry from `dumpe2fs` output.
pub fn parse_dumpe2fs(text: &str) -> Result<(Geometry, Vec<(u64, u64)>)> {
    let field = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("dumpe2fs: no '{name}'"))
    };
    let blocks = field("Block count:")?;
    let block_size = field("Block size:")?;
    let per_group = field("Blocks per group:")?;
    let geometry =
        Geometry::new(block_size as u32, per_group, blocks).context("dumpe2fs: geometry")?;
    let mut runs = Vec::new();
    for line in text.lines() {
        // Group lines say "  Free blocks: 4247-32767, 40000"; the superblock's total says
        // "Free blocks:              248933" without leading blanks.
        let Some(list) = line.strip_prefix("  Free blocks: ") else {
            continue;
        };
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (a, b) = match item.split_once('-') {
                Some((a, b)) => (a.parse::<u64>(), b.parse::<u64>()),
                None => (item.parse::<u64>(), item.parse::<u64>()),
            };
            let (a, b) = (
                a.with_context(|| format!("dumpe2fs: bad range '{item}'"))?,
                b.with_context(|| format!("dumpe2fs: bad range '{item}'"))?,
            );
            if b < a || b >= blocks {
                bail!("dumpe2fs: range '{item}' out of order or past the device");
            }
            runs.push((a, b - a + 1));
        }
    }
    runs.sort_unstable();
    Ok((geometry, runs))
}

/// `Num. free extent: N` from `e2freefrag`.
pub fn parse_e2freefrag_count(text: &str) -> Result<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Num. free extent:"))
        .and_then(|v| v.trim().parse().ok())
        .context("e2freefrag: no 'Num. free extent'")
}

/// The report's free-space figures for ext4.
pub fn ext4_json(geometry: &Geometry, runs: Vec<(u64, u64)>) -> Result<FreeSpaceJson> {
    let fs = FreeSpace::from_free_runs(geometry, runs).context("dumpe2fs free ranges")?;
    Ok(crate::lab::report::free_space_json(
        &fs,
        geometry.block_size,
        geometry.group_blocks,
    ))
}

/// The report's free-space figures from `xfs_db -r -c "freesp -s"` output.
pub fn parse_xfs_freesp(text: &str, block_size: u32) -> Result<FreeSpaceJson> {
    let kib = |blocks: f64| blocks * f64::from(block_size) / 1024.0;
    let total = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("xfs_db freesp: no '{name}'"))
    };
    let free_extents = total("total free extents")?;
    let free_blocks = total("total free blocks")?;
    let mut histogram = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() != 5 {
            continue;
        }
        if let (Ok(from), Ok(count)) = (cols[0].parse::<u64>(), cols[2].parse::<u64>()) {
            histogram.push(HistogramBucket {
                min_kib: kib(from as f64),
                count,
            });
        }
    }
    Ok(FreeSpaceJson {
        free_blocks,
        free_extents,
        avg_free_extent_kib: if free_extents == 0 {
            0.0
        } else {
            kib(free_blocks as f64 / free_extents as f64)
        },
        largest_free_extent_kib: None,
        fragmented_groups: None,
        frag_pct_mean: None,
        group_free_pct: Vec::new(),
        histogram,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMPE2FS: &str = "\
Block count:              262144
Block size:               4096
Blocks per group:         32768
Free blocks:              248933
Group 0: (Blocks 0-32767) csum 0x00c5
  Free blocks: 4247-32767
Group 1: (Blocks 32768-65535) csum 0x1234
  Free blocks: 32897-33023, 33280-65535
Group 2: (Blocks 65536-98303)
  Free blocks: 65536-98303
Group 3: (Blocks 98304-131071)
  Free blocks: 
Group 4: (Blocks 131072-163839)
  Free blocks: 131072, 131074-163839
";

    #[test]
    fn dumpe2fs_runs_and_figures() {
        let (g, runs) = parse_dumpe2fs(DUMPE2FS).unwrap();
        assert_eq!(
            (g.blocks_count, g.group_blocks, g.block_size),
            (262144, 32768, 4096)
        );
        assert_eq!(runs.len(), 6);
        let fs = FreeSpace::from_free_runs(&g, runs).unwrap();
        // 33280-65535 and 65536-98303 touch across the group border: one extent.
        assert_eq!(fs.free_extents, 5);
        assert_eq!(fs.fragmented_groups(), 2);
        assert!(parse_dumpe2fs("Block count: 1\n").is_err());
    }

    #[test]
    fn e2freefrag_and_xfs_freesp() {
        let e2 = "Device: /dev/loop0\nBlocksize: 4096 bytes\nNum. free extent: 7\n";
        assert_eq!(parse_e2freefrag_count(e2).unwrap(), 7);
        let xfs = "   from      to extents  blocks    pct\n      1       1      16      16   0.01\n  32768   65536       4  245706  99.99\ntotal free extents 20\ntotal free blocks 245722\naverage free extent size 12286.1\n";
        let j = parse_xfs_freesp(xfs, 4096).unwrap();
        assert_eq!((j.free_extents, j.free_blocks), (20, 245722));
        assert_eq!(j.histogram.len(), 2);
        assert_eq!(j.histogram[1].count, 4);
        assert!(j.fragmented_groups.is_none());
        assert!(parse_xfs_freesp("nothing", 4096).is_err());
    }
}
