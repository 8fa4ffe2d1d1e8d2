//! Free-space metrics: what a report says about the device's free space.
//!
//! Free extents are maximal runs of free blocks across the whole device (a run that crosses a
//! group boundary counts once, as e2freefrag counts it). Per-group fragmentation follows
//! btrfs's `frag_pct`: `100 * (1 - largest free run / free blocks)`.
//!
//! # Data structures
//!
//! [`FreeSpace`] (totals, a histogram of free extents by order, one [`GroupFree`] per group),
//! built from the allocator's bitmaps, from a list of free runs, or from used extents.
//!
//! # Invariant
//!
//! `free_blocks` is the sum of the free extents, which are maximal and disjoint; pending
//! frees count as used.
//!
//! # Lock order
//!
//! `free_space` takes one group lock at a time in ascending order, `group_bitmap_bytes` one;
//! `load_extent` holds the locks of the groups an extent spans, taken in ascending order, and
//! publishes under them (group locks -> list-index locks).

use super::allocator::Allocator;
use crate::error::{Corrupted, Error, Result};
use crate::geometry::{Extent, Geometry};

/// Free extents whose length has this floor(log2).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FreeBucket {
    /// `floor(log2(len))` of the extents in the bucket.
    pub order: u32,
    /// Free extents in the bucket.
    pub count: u64,
    /// Blocks in those extents.
    pub blocks: u64,
}

/// One group's free-space figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GroupFree {
    /// Size-class tag (0 = untagged; see `class.rs`).
    pub class_tag: u8,
    /// Free blocks in the group.
    pub free_blocks: u32,
    /// Longest run of free blocks inside the group.
    pub largest_free_run: u32,
    /// Maximal runs of free blocks inside the group.
    pub fragments: u32,
}

impl GroupFree {
    /// btrfs's frag_pct of one group; 0 for a group with no free space.
    pub fn frag_pct(&self) -> f64 {
        if self.free_blocks == 0 {
            0.0
        } else {
            100.0 * (1.0 - f64::from(self.largest_free_run) / f64::from(self.free_blocks))
        }
    }
}

/// What a report says about the device's free space: totals, free extents by order, and
/// each group's figures.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FreeSpace {
    /// Free blocks on the device.
    pub free_blocks: u64,
    /// Maximal free runs on the device (a run across a group boundary counts once).
    pub free_extents: u64,
    /// Length of the longest free extent in blocks (0 when nothing is free).
    pub largest_free_extent_blocks: u64,
    /// Buckets from order 0 to the largest non-empty one.
    pub histogram: Vec<FreeBucket>,
    /// One entry per group, in group order.
    pub groups: Vec<GroupFree>,
}

impl FreeSpace {
    /// Groups whose free space is not one run.
    pub fn fragmented_groups(&self) -> u64 {
        self.groups.iter().filter(|g| g.frag_pct() > 0.0).count() as u64
    }

    /// Mean frag_pct over groups that have free space.
    pub fn frag_pct_mean(&self) -> f64 {
        let with_free: Vec<f64> = self
            .groups
            .iter()
            .filter(|g| g.free_blocks > 0)
            .map(|g| g.frag_pct())
            .collect();
        if with_free.is_empty() {
            0.0
        } else {
            with_free.iter().sum::<f64>() / with_free.len() as f64
        }
    }

    /// Mean free extent length in blocks; 0 when nothing is free.
    pub fn avg_free_extent_blocks(&self) -> f64 {
        if self.free_extents == 0 {
            0.0
        } else {
            self.free_blocks as f64 / self.free_extents as f64
        }
    }
}

impl FreeSpace {
    /// Builds the figures from a device's free runs (`(start, len)`, sorted, disjoint), as
    /// another allocator or a file system reports them: runs that touch are one extent, and
    /// each group's figures count the part of every run inside it. For the lab's outside
    /// allocators and the kernel comparison.
    ///
    /// Errors: a run of zero blocks ([`Error::ZeroLength`]), one that reaches past the
    /// device ([`Error::OutOfRange`]), or one that starts before the end of the previous run
    /// ([`Error::Unsorted`]: not sorted or not disjoint).
    pub fn from_free_runs(
        geometry: &Geometry,
        runs: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<Self> {
        let mut groups: Vec<GroupFree> = (0..geometry.groups_count())
            .map(|_| GroupFree {
                class_tag: 0,
                free_blocks: 0,
                largest_free_run: 0,
                fragments: 0,
            })
            .collect();
        let mut merged: Vec<u64> = Vec::new();
        let mut open: Option<(u64, u64)> = None;
        for (start, len) in runs {
            geometry.validate(Extent::new(start, len))?;
            if let Some((s, l)) = open {
                if start < s + l {
                    return Err(Error::Unsorted {
                        what: "free run",
                        start,
                        len,
                        bound: s + l,
                        rule: "free runs must be sorted by start and disjoint",
                    });
                }
            }
            let (mut at, end) = (start, start + len);
            while at < end {
                let g = geometry.group_of(at);
                let piece = (geometry.group_start(g) + geometry.group_blocks).min(end) - at;
                let gf = &mut groups[g as usize];
                gf.free_blocks += piece as u32;
                gf.largest_free_run = gf.largest_free_run.max(piece as u32);
                gf.fragments += 1;
                at += piece;
            }
            match open {
                Some((s, l)) if s + l == start => open = Some((s, l + len)),
                _ => {
                    if let Some((_, l)) = open {
                        merged.push(l);
                    }
                    open = Some((start, len));
                }
            }
        }
        if let Some((_, l)) = open {
            merged.push(l);
        }
        Ok(Self::from_parts(merged, groups))
    }

    /// Builds the figures from what is used (`(start, len)` sorted by start; used extents
    /// may overlap): the free runs are the gaps between them.
    ///
    /// Errors: a used extent of zero blocks or past the device, or one that starts before
    /// the previous one ([`Error::Unsorted`]).
    pub fn from_used(
        geometry: &Geometry,
        used: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<Self> {
        let mut runs = Vec::new();
        let mut at = 0;
        let mut last_start = 0;
        for (s, l) in used {
            geometry.validate(Extent::new(s, l))?;
            if s < last_start {
                return Err(Error::Unsorted {
                    what: "used extent",
                    start: s,
                    len: l,
                    bound: last_start,
                    rule: "used extents must be sorted by start",
                });
            }
            last_start = s;
            if s > at {
                runs.push((at, s - at));
            }
            at = at.max(s + l);
        }
        if at < geometry.blocks_count {
            runs.push((at, geometry.blocks_count - at));
        }
        Self::from_free_runs(geometry, runs)
    }

    fn from_parts(runs: Vec<u64>, groups: Vec<GroupFree>) -> Self {
        let mut histogram: Vec<FreeBucket> = Vec::new();
        for &len in &runs {
            let order = 63 - len.leading_zeros();
            while histogram.len() <= order as usize {
                histogram.push(FreeBucket {
                    order: histogram.len() as u32,
                    count: 0,
                    blocks: 0,
                });
            }
            histogram[order as usize].count += 1;
            histogram[order as usize].blocks += len;
        }
        FreeSpace {
            free_blocks: runs.iter().sum(),
            free_extents: runs.len() as u64,
            largest_free_extent_blocks: runs.iter().copied().max().unwrap_or(0),
            histogram,
            groups,
        }
    }
}

impl Allocator {
    /// Measures the free space, group by group under each group's lock. Pending frees count
    /// as used. Consistent when no other thread changes the allocator meanwhile.
    pub fn free_space(&self) -> FreeSpace {
        let shard = self.stats.shard();
        let mut runs: Vec<u64> = Vec::new();
        let mut groups = Vec::with_capacity(self.groups.len() as usize);
        let mut open: Option<(u64, u64)> = None; // (start, len) of the run being built
        for (g, group) in self.groups.iter() {
            // Measuring loads every group (an unreadable one counts as having no free space).
            let Ok(state) = self.lock_group(g, shard) else {
                groups.push(GroupFree {
                    class_tag: group.class_tag(),
                    free_blocks: 0,
                    largest_free_run: 0,
                    fragments: 0,
                });
                continue;
            };
            let base = self.geometry.group_start(g);
            let mut largest = 0;
            for (off, len) in state.bitmap.free_runs(0) {
                largest = largest.max(len);
                let start = base + u64::from(off);
                match open {
                    Some((s, l)) if s + l == start => open = Some((s, l + u64::from(len))),
                    _ => {
                        if let Some((_, l)) = open {
                            runs.push(l);
                        }
                        open = Some((start, u64::from(len)));
                    }
                }
            }
            groups.push(GroupFree {
                class_tag: group.class_tag(),
                free_blocks: state.bitmap.free_blocks(),
                largest_free_run: largest,
                fragments: state.bitmap.fragments(),
            });
        }
        if let Some((_, l)) = open {
            runs.push(l);
        }
        FreeSpace::from_parts(runs, groups)
    }
}

impl Allocator {
    /// Group `g`'s block bitmap as stored on disk (docs/format.md): bit `i` set = block
    /// `i` of the group is used (blocks waiting for a commit count as used; so does the
    /// missing tail of a short last group). `bytes` is the on-disk bitmap's size.
    /// Loads the group if needed; fails only if it cannot be read.
    pub fn group_bitmap_bytes(&self, g: u64, bytes: usize) -> Result<Vec<u8>> {
        let shard = self.stats.shard();
        let state = self.lock_group(g, shard)?;
        let mut out = vec![0xffu8; bytes];
        for (off, len) in state.bitmap.free_runs(0) {
            let (mut i, end) = (off, off + len);
            while i < end {
                if i % 8 == 0 && i + 8 <= end {
                    out[(i / 8) as usize] = 0;
                    i += 8;
                } else {
                    out[(i / 8) as usize] &= !(1 << (i % 8));
                    i += 1;
                }
            }
        }
        Ok(out)
    }

    /// Marks `extent` used (or free) at once, as loading from disk or replaying a journal
    /// record does: no deferral, no policy. Fails with `Corrupt` (and changes nothing) if a
    /// block is already in that state.
    pub fn load_extent(&self, extent: Extent, used: bool) -> Result<()> {
        self.geometry.validate(extent)?;
        let shard = self.stats.shard();
        let pieces: Vec<(u64, u32, u32)> = self.geometry.split(extent).collect();
        let mut guards: Vec<_> = pieces
            .iter()
            .map(|&(g, _, _)| self.lock_group(g, shard))
            .collect::<Result<_>>()?;
        for (&(g, off, len), state) in pieces.iter().zip(&guards) {
            let ok = if used {
                state.bitmap.range_is_free(off, len)
            } else {
                state.bitmap.range_is_used(off, len) && !state.pending_overlaps(off, len)
            };
            if !ok {
                return Err(Error::Corrupt {
                    what: Corrupted::Group { group: g },
                    detail: format!(
                        "blocks {}+{len} are already {}",
                        self.geometry.group_start(g) + u64::from(off),
                        if used { "used" } else { "free" }
                    ),
                });
            }
        }
        for (&(g, off, len), state) in pieces.iter().zip(guards.iter_mut()) {
            if used {
                state.bitmap.mark_used(off, len);
            } else {
                state.bitmap.mark_free(off, len);
            }
            self.publish(g, state, shard);
        }
        if used {
            shard.add(&shard.held.adjusted, extent.len);
        } else {
            shard.sub(&shard.held.adjusted, extent.len);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_runs_out_of_range_or_unsorted_are_errors() {
        let g = Geometry::new(4096, 64, 200).unwrap();
        let fs = FreeSpace::from_free_runs(&g, [(0, 10), (10, 5), (60, 80)]).unwrap();
        assert_eq!((fs.free_blocks, fs.free_extents), (95, 2));
        assert_eq!(fs.groups[1].free_blocks, 64);
        assert!(matches!(
            FreeSpace::from_free_runs(&g, [(190, 20)]),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            FreeSpace::from_free_runs(&g, [(u64::MAX, 2)]),
            Err(Error::OutOfRange { .. })
        ));
        assert_eq!(
            FreeSpace::from_free_runs(&g, [(5, 0)]),
            Err(Error::ZeroLength)
        );
        assert!(matches!(
            FreeSpace::from_free_runs(&g, [(50, 10), (55, 1)]),
            Err(Error::Unsorted {
                start: 55,
                bound: 60,
                ..
            })
        ));
    }

    #[test]
    fn used_extents_may_overlap_but_must_be_sorted_and_inside() {
        let g = Geometry::new(4096, 64, 200).unwrap();
        let fs = FreeSpace::from_used(&g, [(0, 10), (5, 10), (100, 100)]).unwrap();
        assert_eq!((fs.free_blocks, fs.free_extents), (85, 1));
        assert!(matches!(
            FreeSpace::from_used(&g, [(150, 60)]),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            FreeSpace::from_used(&g, [(50, 1), (10, 1)]),
            Err(Error::Unsorted {
                start: 10,
                bound: 50,
                ..
            })
        ));
    }
}
