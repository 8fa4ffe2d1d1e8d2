//! The traced file system's own metadata: blocks that were used before the workload began
//! (superblocks, group descriptors, bitmaps, inode tables, the journal, the root
//! directory), which no event of the trace names. `extalloc capture` reads them from
//! `dumpe2fs` before the command starts and writes them into the header
//! (`reserved START+LEN,...`); a replay holds them used on both sides before the first
//! event, so the kernel's free space does not count its journal as free and ours does not
//! put data where the kernel never could. A trace without the field (older captures, raw
//! tracefs traces) replays on an otherwise empty device, as before.
//!
//! Data structures: reserved ranges as sorted, disjoint `(start, len)` pairs.
//!
//! Invariant: [`used_ranges`] returns the complement of `dumpe2fs`'s free runs over the
//! device, sorted and disjoint; [`hold`] leaves exactly those blocks used in the allocator
//! or fails, naming the range it could not hold. No locks of its own (the allocator's).

use anyhow::{ensure, Context, Result};
use extalloc::{AllocRequest, Extent, Files, Geometry};

/// The ranges of `0..blocks` not in `free` (sorted, disjoint `(start, len)` runs).
pub fn used_ranges(blocks: u64, free: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut used = Vec::new();
    let mut at = 0;
    for &(start, len) in free {
        if start > at {
            used.push((at, start - at));
        }
        at = at.max(start + len);
    }
    if at < blocks {
        used.push((at, blocks - at));
    }
    debug_assert!(used.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0));
    used
}

/// The header field's value: `START+LEN` pairs joined by commas.
pub fn format(ranges: &[(u64, u64)]) -> String {
    let items: Vec<String> = ranges.iter().map(|(s, l)| format!("{s}+{l}")).collect();
    items.join(",")
}

/// Parses [`format`](fn@format)'s output; `None` when any item is not `START+LEN` with LEN > 0.
pub fn parse(value: &str) -> Option<Vec<(u64, u64)>> {
    value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (s, l) = item.split_once('+')?;
            let (s, l) = (s.parse().ok()?, l.parse().ok()?);
            (l > 0).then_some((s, l))
        })
        .collect()
}

/// Marks `ranges` used in `alloc`, a fresh allocator, split at group borders: each piece
/// is taken at its exact place. Fails (naming the piece) when one is not free there or
/// lies past the device; what was held before stays held.
pub fn hold(alloc: &Files, geometry: &Geometry, ranges: &[(u64, u64)]) -> Result<()> {
    let core = alloc.allocator();
    for &(start, len) in ranges {
        let end = start
            .checked_add(len)
            .context("a reserved range overflows")?;
        ensure!(
            end <= geometry.blocks_count,
            "reserved range {start}+{len} lies past the device's {} blocks",
            geometry.blocks_count
        );
        let mut at = start;
        while at < end {
            let g = geometry.group_of(at);
            let group_end = geometry.group_start(g) + geometry.group_len(g);
            let piece = Extent::new(at, end.min(group_end) - at);
            let req = AllocRequest::new(u64::MAX, piece.len).goal(at).exact();
            let got = core
                .allocate(&req)
                .with_context(|| format!("holding the traced metadata {piece:?}"))?;
            ensure!(
                got == piece,
                "holding the traced metadata {piece:?}: the allocator gave {got:?}"
            );
            at = piece.start + piece.len;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use extalloc::{Allocator, Policy};

    #[test]
    fn used_ranges_are_the_complement_of_the_free_runs() {
        assert_eq!(used_ranges(100, &[]), [(0, 100)]);
        assert_eq!(used_ranges(100, &[(0, 100)]), []);
        assert_eq!(
            used_ranges(100, &[(10, 5), (20, 30), (90, 10)]),
            [(0, 10), (15, 5), (50, 40)]
        );
        let r = [(0, 10), (15, 5), (50, 40)];
        assert_eq!(parse(&format(&r)).unwrap(), r);
        assert_eq!(parse("").unwrap(), []);
        assert!(parse("5+0").is_none() && parse("5-6").is_none() && parse("x+1").is_none());
    }

    /// Ranges across a group border are held piece by piece, exactly where they lie; a
    /// range past the device or over used blocks is refused by name.
    #[test]
    fn held_ranges_are_used_exactly_where_they_lie() {
        let geometry = Geometry::new(4096, 1024, 4096).unwrap();
        let files = Files::new(Allocator::new(geometry, Policy::default()).unwrap());
        hold(&files, &geometry, &[(0, 40), (1000, 100), (4000, 96)]).unwrap();
        let core = files.allocator();
        assert_eq!(core.free_blocks(), 4096 - 236);
        let fs = core.free_space();
        assert_eq!(fs.free_extents, 2, "40..1000 and 1100..4000: {fs:?}");
        let err = hold(&files, &geometry, &[(4090, 10)]).unwrap_err();
        assert!(format!("{err:#}").contains("past the device"), "{err:#}");
        let err = hold(&files, &geometry, &[(20, 4)]).unwrap_err();
        assert!(
            format!("{err:#}").contains("holding the traced metadata"),
            "{err:#}"
        );
        files.check().unwrap();
    }
}
