//! Request normalisation: the window a data request is rounded up to, as ext4's
//! `ext4_mb_normalize_request` does.
//!
//! # Data structures
//!
//! None of its own: it reads the file's map and PAs (under the file lock its caller holds)
//! and returns the window as an `AllocRequest`.
//!
//! # Invariant
//!
//! The window contains the request's first block, overlaps no mapped extent and no PA of
//! the file, and fits one group.

use super::file::{DataRequest, FileInner};
use super::{Around, Files};
use crate::alloc::AllocRequest;
use crate::geometry::Extent;

/// Normalisation buckets, in bytes: 16 KiB, 32 KiB, ... 8 MiB.
const BUCKET_BYTES_MIN: u64 = 16 << 10;
const BUCKET_BYTES_MAX: u64 = 8 << 20;
const _: () = assert!(BUCKET_BYTES_MIN.is_power_of_two() && BUCKET_BYTES_MAX.is_power_of_two());

impl Files {
    /// The normalised window for a request of `len` blocks at `req.logical` (not covered
    /// by a PA; `around` its neighbours and the room between its PAs): its logical start, the allocation request for it, and the request's
    /// length clamped to the window.
    ///
    /// The bucket follows the larger of the request's end and the file's size, as ext4's
    /// does (i_size): a write into a hole of a large file gets a large window, so random
    /// writers racing on their files still get their data in big pieces. With
    /// `normalise_holes=request`, a write into a hole gets a window of its own length.
    pub(super) fn window(
        &self,
        id: u64,
        f: &FileInner,
        req: &DataRequest,
        len: u64,
        &Around { left, right, room }: &Around,
    ) -> (u64, AllocRequest, u64) {
        let (geometry, policy) = (self.alloc.geometry(), self.alloc.policy());
        let (mut ws, mut we, grown) = self.bucket(f, req, len, left);
        if !req.no_prealloc && req.run > len {
            // A dirty run written back: its window is the run.
            we = we.max(req.logical.saturating_add(req.run));
        }
        if let Some((s, e)) = left {
            ws = ws.max(s + e.len);
        }
        if let Some((s, _)) = right {
            we = we.min(s);
        }
        // The file's PAs around it (looked up once, `Around::room`).
        (ws, we) = (ws.max(room.0), we.min(room.1));
        if we - ws > geometry.group_blocks {
            ws = ws.max(req.logical);
            we = we.min(ws + geometry.group_blocks);
        }
        let len = len.min(we - req.logical);
        debug_assert!(ws <= req.logical && req.logical < we);
        let goal = req
            .goal
            .map(|g| g.saturating_sub(req.logical - ws))
            .or_else(|| {
                // After the file's previous extent, at the same logical distance.
                let (s, e) = left?;
                let goal = e.end() + (ws - (s + e.len));
                (goal < geometry.blocks_count).then_some(goal)
            })
            .or_else(|| {
                // Nothing mapped before it: before the file's next extent, at the same
                // logical distance (as ext4's `ext4_ext_find_goal` does from either side).
                let (s, e) = right?;
                e.start.checked_sub(s - ws)
            });
        let mut window = AllocRequest::new(id, we - ws)
            .logical(ws)
            .min_len(req.logical - ws + 1)
            .need_len(req.logical - ws + len)
            .lifetime(req.lifetime);
        window.class_len = if policy.class_by_window { we - ws } else { len };
        let ordinary = BUCKET_BYTES_MAX / u64::from(geometry.block_size);
        if grown && we - ws > ordinary {
            // Speculative growth past ext4's window is taken where the file ends, as far
            // as it is free: the goal need only hold an ordinary window.
            window = window.goal_min_len(ordinary.max(window.min_len));
        }
        if let Some(g) = goal {
            window = window.goal(g);
        }
        (ws, window, len)
    }

    /// The window before clamping: the request's bucket (`normalise`), as large as the
    /// file's size says, up to 8 MiB, a group for delayed allocation's size hints and, with
    /// `append_window_kib`, for sequential appends; and whether it is an append's, allowed
    /// to grow past 8 MiB.
    fn bucket(
        &self,
        f: &FileInner,
        req: &DataRequest,
        len: u64,
        left: Option<(u64, Extent)>,
    ) -> (u64, u64, bool) {
        let (geometry, policy) = (self.alloc.geometry(), self.alloc.policy());
        let end = req.logical + req.len;
        let basis = if policy.normalise_by_size {
            end.max(f.size_blocks)
        } else if req.logical >= f.size_blocks {
            end
        } else {
            len
        };
        let bs = u64::from(geometry.block_size);
        if req.no_prealloc || req.complete {
            (req.logical, req.logical + len, false)
        } else if req.size_hint > 0 {
            // Delayed allocation knows the file's size ahead of its map: a window sized
            // by it, up to a group (speculative preallocation growing with the file).
            let max = geometry.group_blocks.saturating_mul(bs);
            let (ws, we) = normalise(req.logical, len, basis.max(req.size_hint), bs, max);
            (ws, we, false)
        } else if req.logical == f.size_blocks
            && left.is_some_and(|(s, e)| s + e.len == req.logical)
        {
            // A sequential append (right after the file's last block, which is mapped):
            // its window may grow with the file past ext4's 8 MiB. A write past a hole
            // at the end says nothing about how the file grows.
            let max = match policy.append_window_kib {
                0 => geometry.group_blocks.saturating_mul(bs),
                kib => kib.saturating_mul(1024),
            };
            let (ws, we) = normalise(req.logical, len, basis, bs, max);
            (ws, we, req.run <= len)
        } else {
            let (ws, we) = normalise(req.logical, len, basis, bs, BUCKET_BYTES_MAX);
            (ws, we, false)
        }
    }
}

/// The window `ws .. we` for a request of `len` blocks at `logical`: `basis` blocks rounded
/// up to the next bucket (16 KiB ... `max_bytes`, 8 MiB but for delayed allocation's
/// size hints), aligned to the bucket, at least the request.
fn normalise(logical: u64, len: u64, basis: u64, block_size: u64, max_bytes: u64) -> (u64, u64) {
    let max_bytes = max_bytes.max(BUCKET_BYTES_MIN);
    let basis_bytes = basis.saturating_mul(block_size);
    let bucket_bytes = basis_bytes
        .checked_next_power_of_two()
        .unwrap_or(max_bytes)
        .clamp(BUCKET_BYTES_MIN, max_bytes);
    let bucket = (bucket_bytes / block_size).max(1);
    if len >= bucket {
        return (logical, logical + len);
    }
    let ws = logical / bucket * bucket;
    (ws, (ws + bucket).max(logical + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{Allocator, Lifetime};

    #[test]
    fn windows_round_up_and_align() {
        // 1 KiB into a hole of a big file: a 16 KiB window (4 blocks), aligned.
        assert_eq!(normalise(1001, 1, 1, 4096, BUCKET_BYTES_MAX), (1000, 1004));
        // Appending block 20 of a file (80 KiB so far + 4 KiB): 128 KiB window from 0.
        assert_eq!(normalise(20, 1, 21, 4096, BUCKET_BYTES_MAX), (0, 32));
        // Huge files: 8 MiB windows.
        assert_eq!(
            normalise(5000, 2, 5002, 4096, BUCKET_BYTES_MAX),
            (4096, 6144)
        );
        // A request as large as its bucket is not extended.
        assert_eq!(normalise(7, 2048, 4096, 4096, BUCKET_BYTES_MAX), (7, 2055));
    }

    /// A file appended to block by block: the PA left after the write at `logical` (the
    /// first block past everything written), under `spec`, on 16 MiB groups.
    fn unused_after_append(spec: &str, logical: u64, hole: bool) -> (u64, Vec<(u64, Extent)>) {
        use crate::alloc::Policy;
        use crate::geometry::Geometry;
        let geometry = Geometry::new(4096, 4096, 1 << 16).unwrap();
        let alloc = Files::new(Allocator::new(geometry, Policy::parse(spec).unwrap()).unwrap());
        let file = alloc.create_file(7);
        // Map 0 .. logical in 1 MiB writes without preallocation (each after the last), so
        // the next write needs a window of its own.
        let mut l = 0;
        while l < logical {
            let n = 256.min(logical - l);
            alloc
                .allocate_data(&file, &DataRequest::new(l, n).no_prealloc())
                .unwrap();
            l += n;
        }
        let at = if hole { logical + 100 } else { logical };
        alloc
            .allocate_data(&file, &DataRequest::new(at, 1))
            .unwrap();
        alloc.check().unwrap();
        (file.prealloc_unused_blocks(), file.extents())
    }

    /// XFS-like speculative growth: a sequential append to a 20 MiB file gets a window up
    /// to the next power of two (32 MiB: 12 MiB, 3072 blocks), taken right after the file's
    /// last block; with ext4's cap (`append_window_kib=8192`), or after a hole at the end,
    /// an 8 MiB bucket; and it never spans more than a group.
    #[test]
    fn an_append_window_grows_with_the_file() {
        let (unused, map) = unused_after_append("extalloc", 5120, false);
        assert_eq!(unused, 3072 - 1, "the window runs to 32 MiB");
        assert_eq!(map.len(), 1, "taken contiguously at the goal: {map:?}");
        let (unused, _) = unused_after_append("extalloc:append_window_kib=8192", 5120, false);
        assert_eq!(unused, 6144 - 5120 - 1, "an 8 MiB bucket, aligned");
        let (unused, _) = unused_after_append("extalloc", 5120, true);
        // The bucket 4096 .. 6144 starts after the file's last block, hole and all.
        assert_eq!(unused, 6144 - 5120 - 1, "past a hole: the 8 MiB bucket");
        // 40 MiB into a file on 16 MiB groups: at most a group.
        let (unused, map) = unused_after_append("extalloc", 10240, false);
        assert!(unused < 4096, "{unused} blocks left in the window");
        assert!(map.len() <= 4, "{map:?}");
    }

    /// A write with nothing mapped before it takes its goal from the extent after it, at
    /// the same logical distance (as ext4's `ext4_ext_find_goal`): the window ends where
    /// that extent starts, so filling the hole later makes one extent.
    #[test]
    fn a_window_with_only_a_right_neighbour_ends_at_it() {
        use crate::alloc::Policy;
        use crate::geometry::Geometry;
        let geometry = Geometry::new(4096, 4096, 1 << 16).unwrap();
        let alloc = Files::new(Allocator::new(geometry, Policy::default()).unwrap());
        let file = alloc.create_file(7);
        let right = alloc
            .allocate_data(&file, &DataRequest::new(200, 64).goal(10_000).no_prealloc())
            .unwrap();
        assert_eq!(right.start, 10_000);
        let e = alloc
            .allocate_data(&file, &DataRequest::new(150, 1))
            .unwrap();
        assert_eq!(
            e.start,
            10_000 - 50,
            "block 150 lies 50 blocks before block 200"
        );
        // The rest of the hole comes from the window's PA: the file is one extent.
        for l in (0..150).chain(151..200) {
            alloc.allocate_data(&file, &DataRequest::new(l, 1)).unwrap();
        }
        assert_eq!(file.extents(), vec![(0, Extent::new(10_000 - 200, 264))]);
        alloc.check().unwrap();
    }

    /// A 1-block write into a large file is normalised to an 8 MiB window: with
    /// `class_by=window` (the extalloc preset) the window lands in a group of the large
    /// class, with `class_by=request` in one of the small class.
    #[test]
    fn a_window_takes_the_class_of_what_it_allocates() {
        use crate::alloc::{Policy, SizeClass};
        use crate::geometry::Geometry;
        for (spec, class) in [
            ("extalloc", SizeClass::Large),
            ("extalloc:class_by=request", SizeClass::Small),
        ] {
            let alloc = Allocator::new(
                Geometry::new(4096, 4096, 1 << 16).unwrap(),
                Policy::parse(spec).unwrap(),
            )
            .unwrap();
            let alloc = Files::new(alloc);
            let file = alloc.create_file(7);
            // Size the file at 64 MiB first (a write far into it), then write block 5000.
            alloc
                .allocate_data(&file, &DataRequest::new(16383, 1))
                .unwrap();
            let e = alloc
                .allocate_data(&file, &DataRequest::new(5000, 1))
                .unwrap();
            assert_eq!(file.prealloc_count(), 2, "{spec}: two 8 MiB windows");
            let g = alloc.allocator().geometry().group_of(e.start);
            assert_eq!(
                alloc.allocator().group_class_tag(g),
                crate::alloc::class_tag(class, Lifetime::Unknown),
                "{spec}: the window's group"
            );
            alloc.check().unwrap();
        }
    }
}
