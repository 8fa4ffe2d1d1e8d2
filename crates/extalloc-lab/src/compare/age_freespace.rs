//! Per-group free space of XFS and btrfs for the aging jobs' frag % (ext4's comes from
//! `freespace.rs`'s dumpe2fs ranges, extalloc's from its store): XFS from each AGF's
//! `freeblks` and `longest` (`xfs_db -r -c "agf N" -c "print freeblks longest"`), btrfs
//! from its free-space tree (`btrfs inspect-internal dump-tree -t 10`), its data block
//! groups only (their flags from the extent tree, `dump-tree -t 2`).
//!
//! Data structures: [`GroupFrag`] (one group's free blocks and longest free run), which the
//! parsers return one per group, and [`FragStats`] (fsperf's frag % over groups).
//!
//! Invariant: a parser returns an error rather than a partial list when its input does not
//! read as expected (a count that does not match, a field missing), naming the tool.
//! No locks.

use crate::lab::report::{FreeSpaceJson, HistogramBucket};
use anyhow::{bail, Context, Result};

/// One allocation group's (ext4 group, XFS AG, extalloc group, btrfs block group) free
/// space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupFrag {
    /// Free blocks in the group.
    pub free_blocks: u64,
    /// Its longest free run.
    pub largest_free_run: u64,
}

/// fsperf's frag % over the groups that have free space: per group
/// `100 x (1 - largest free run / free blocks)`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FragStats {
    /// Groups with free space (the ones counted).
    pub groups: usize,
    /// Mean.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The `q`-quantile (0..=1) of sorted `v` by nearest rank; 0 when empty.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// fsperf's frag % over `groups`; groups without free space are left out (their frag %
/// is undefined). None when no group has free space.
pub fn frag_stats(groups: &[GroupFrag]) -> Option<FragStats> {
    let mut v: Vec<f64> = groups
        .iter()
        .filter(|g| g.free_blocks > 0)
        .map(|g| 100.0 * (1.0 - g.largest_free_run as f64 / g.free_blocks as f64))
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(FragStats {
        groups: v.len(),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: nearest_rank(&v, 0.50),
        p95: nearest_rank(&v, 0.95),
        p99: nearest_rank(&v, 0.99),
        max: *v.last().expect("not empty"),
    })
}

/// `name = value` from xfs_db's `print`.
pub fn xfs_field(text: &str, name: &str) -> Result<u64> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .with_context(|| format!("xfs_db: no '{name} = N' in: {}", text.trim()))
}

/// Every AG's `freeblks` and `longest`, in the order xfs_db printed them.
pub fn parse_xfs_agfs(text: &str) -> Result<Vec<GroupFrag>> {
    let values = |name: &str| -> Vec<u64> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| k.trim() == name)
            .filter_map(|(_, v)| v.trim().parse().ok())
            .collect()
    };
    let (free, longest) = (values("freeblks"), values("longest"));
    if free.is_empty() || free.len() != longest.len() {
        bail!(
            "xfs_db: {} freeblks and {} longest values in: {}",
            free.len(),
            longest.len(),
            text.trim()
        );
    }
    Ok(free
        .into_iter()
        .zip(longest)
        .map(|(free_blocks, largest_free_run)| GroupFrag {
            free_blocks,
            largest_free_run,
        })
        .collect())
}

/// The `(objectid TYPE offset)` of an item line: `item 3 key (1048576 FREE_SPACE_INFO
/// 4194304) itemoff ...`.
fn item_key(line: &str) -> Option<(u64, &str, u64)> {
    let inner = line.split_once("key (")?.1.split_once(')')?.0;
    let mut words = inner.split_whitespace();
    let a = words.next()?.parse().ok()?;
    let t = words.next()?;
    let b = words.next()?.parse().ok()?;
    Some((a, t, b))
}

/// Every data block group's free runs, in bytes, from an extent tree dump (`dump-tree
/// -t 2`, unmounted): the group is a `BLOCK_GROUP_ITEM` whose next line says `flags
/// DATA...`; its used space is the `EXTENT_ITEM`s inside it; the gaps are free. (The
/// free-space tree would say the same, but keeps a crowded group as bitmaps its dump does
/// not show.)
pub fn parse_btrfs_data_free(text: &str) -> Vec<Vec<u64>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut groups: Vec<(u64, u64)> = Vec::new();
    let mut used: Vec<(u64, u64)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match item_key(line) {
            Some((start, "BLOCK_GROUP_ITEM", len))
                if lines.get(i + 1).is_some_and(|n| n.contains("flags DATA")) =>
            {
                groups.push((start, len))
            }
            Some((start, "EXTENT_ITEM", len)) => used.push((start, len)),
            _ => {}
        }
    }
    used.sort_unstable();
    groups
        .iter()
        .map(|&(start, len)| {
            let end = start + len;
            let mut runs = Vec::new();
            let mut at = start;
            let first = used.partition_point(|&(s, _)| s < start);
            for &(s, l) in used[first..].iter().take_while(|(s, _)| *s < end) {
                if s > at {
                    runs.push(s - at);
                }
                at = at.max(s + l);
            }
            if end > at {
                runs.push(end - at);
            }
            runs
        })
        .collect()
}

/// The groups' figures from their free runs.
pub fn groups_of_runs(runs: &[Vec<u64>]) -> Vec<GroupFrag> {
    runs.iter()
        .map(|r| GroupFrag {
            free_blocks: r.iter().sum(),
            largest_free_run: r.iter().copied().max().unwrap_or(0),
        })
        .collect()
}

/// The report's free-space figures from free runs in bytes (blocks of `block_size`): no
/// per-group picture, a power-of-two histogram in blocks.
pub fn free_space_json_of_runs(runs: &[Vec<u64>], block_size: u32) -> FreeSpaceJson {
    let bs = u64::from(block_size);
    let all: Vec<u64> = runs
        .iter()
        .flatten()
        .map(|b| b / bs)
        .filter(|&b| b > 0)
        .collect();
    let free_blocks: u64 = all.iter().sum();
    let kib = |blocks: u64| (blocks * bs) as f64 / 1024.0;
    let mut counts = vec![0u64; 64];
    for &b in &all {
        counts[63 - b.leading_zeros() as usize] += 1;
    }
    let top = counts.iter().rposition(|&c| c > 0).map_or(0, |t| t + 1);
    let groups = groups_of_runs(runs);
    FreeSpaceJson {
        free_blocks,
        free_extents: all.len() as u64,
        avg_free_extent_kib: if all.is_empty() {
            0.0
        } else {
            kib(free_blocks) / all.len() as f64
        },
        largest_free_extent_kib: Some(kib(all.iter().copied().max().unwrap_or(0))),
        fragmented_groups: Some(
            groups
                .iter()
                .filter(|g| g.largest_free_run < g.free_blocks)
                .count() as u64,
        ),
        frag_pct_mean: frag_stats(&groups).map(|f| f.mean),
        group_free_pct: Vec::new(),
        histogram: (0..top)
            .map(|o| HistogramBucket {
                min_kib: kib(1 << o),
                count: counts[o],
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(free_blocks: u64, largest_free_run: u64) -> GroupFrag {
        GroupFrag {
            free_blocks,
            largest_free_run,
        }
    }

    #[test]
    fn frag_percent_over_groups() {
        // 0 %, 50 %, 75 %, 90 %, and a full group (left out).
        let groups = [g(100, 100), g(100, 50), g(100, 25), g(100, 10), g(0, 0)];
        let s = frag_stats(&groups).unwrap();
        assert_eq!(s.groups, 4);
        assert!((s.mean - 53.75).abs() < 1e-9, "{s:?}");
        assert_eq!(s.p50, 50.0);
        assert_eq!(s.p95, 90.0);
        assert_eq!(s.p99, 90.0);
        assert_eq!(s.max, 90.0);
        assert!(frag_stats(&[g(0, 0)]).is_none());
    }

    #[test]
    fn xfs_agf_fields() {
        let sb = "agcount = 4\n";
        assert_eq!(xfs_field(sb, "agcount").unwrap(), 4);
        assert!(xfs_field(sb, "agblocks").is_err());
        let agfs = "freeblks = 1000\nlongest = 250\nfreeblks = 0\nlongest = 0\n";
        let g = parse_xfs_agfs(agfs).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].free_blocks, g[0].largest_free_run), (1000, 250));
        assert!(parse_xfs_agfs("freeblks = 3\n").is_err());
    }

    #[test]
    fn btrfs_data_groups_free_runs() {
        let dump = "\
\titem 0 key (1048576 BLOCK_GROUP_ITEM 1048576) itemoff 16259 itemsize 24
\t\tblock group used 12288 chunk_objectid 256 flags DATA|single
\titem 1 key (1048576 EXTENT_ITEM 4096) itemoff 16206 itemsize 53
\t\trefs 1 gen 7 flags DATA
\titem 2 key (1060864 EXTENT_ITEM 8192) itemoff 16153 itemsize 53
\t\trefs 1 gen 7 flags DATA
\titem 3 key (4194304 BLOCK_GROUP_ITEM 8388608) itemoff 16235 itemsize 24
\t\tblock group used 16384 chunk_objectid 256 flags METADATA|DUP
\titem 4 key (4194304 METADATA_ITEM 0) itemoff 16200 itemsize 33
";
        let runs = parse_btrfs_data_free(dump);
        // One data group of 1 MiB: used 0-4K and 12K-20K, so free 4K-12K and 20K-1M.
        assert_eq!(runs, [vec![8192, 1048576 - 20480]]);
        let g = groups_of_runs(&runs);
        assert_eq!(
            (g[0].free_blocks, g[0].largest_free_run),
            (1048576 - 12288, 1048576 - 20480)
        );
        let j = free_space_json_of_runs(&runs, 4096);
        assert_eq!((j.free_blocks, j.free_extents), (253, 2));
        assert_eq!(j.histogram[1].count, 1, "2 blocks");
        assert_eq!(j.histogram[7].count, 1, "251 blocks");
    }
}
