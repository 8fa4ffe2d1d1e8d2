//! Reading files: [`Volume::read`] into a new buffer, [`Volume::read_into`] into the
//! caller's. A read takes the file's mutex (its map loaded) and reads each mapped, written
//! run from the device; holes and unwritten runs are zeros. [`Volume::will_need`] hands
//! the device the runs of files about to be read, as advice ([`Advised`]).
//!
//! Data structures: none of its own (the file's map and unwritten set, `file.rs`).
//! Invariant: a read changes nothing, and neither does advice. Lock order: the file's
//! mutex only, one file at a time.

use super::file::VFile;
use super::io::check_range;
use super::state::Volume;
use crate::error::{Error, Result};

/// Runs of advice closer than this are advised as one range: reading a few blocks nobody
/// asked for costs less than another request to the media.
const ADVICE_GAP_BYTES: u64 = 32 << 10;

/// What [`Volume::will_need`] handed the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Advised {
    /// Files with at least one written block in the advised part.
    pub files: u64,
    /// Ranges passed to [`Device::will_need`](crate::disk::device::Device::will_need) (after merging neighbours).
    pub ranges: u64,
    /// Bytes in those ranges (the gaps merged in included).
    pub bytes: u64,
}

impl Volume {
    /// Reads up to `len` bytes at `offset` of file `id` (fewer at the end of the file):
    /// holes and unwritten blocks read as zeros.
    pub fn read(&self, id: u64, offset: u64, len: u64) -> Result<Vec<u8>> {
        check_range(offset, len)?;
        let file = self.file(id)?;
        let f = self.lock_loaded(&file)?;
        let mut out = vec![0u8; len.min(f.size.saturating_sub(offset)) as usize];
        let n = self.read_locked(&f, offset, &mut out)?;
        debug_assert_eq!(n, out.len(), "sized to what the file holds, under its lock");
        Ok(out)
    }

    /// Reads file `id` from `offset` into `buf`, as much as fits and the file holds; returns
    /// the bytes read (fewer than `buf.len()` only at the end of the file; 0 at or past
    /// it). Holes and unwritten blocks read as zeros. No allocation: for a caller that
    /// reuses its buffers. On failure `buf` may hold part of the range.
    ///
    /// ```
    /// # use extalloc::volume::Volume;
    /// # let dir = std::env::temp_dir().join(format!("extalloc-doc-ri-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let vol = Volume::mkfs_file(dir.join("v.img"), 32 << 20)?;
    /// let id = vol.create(b"")?;
    /// vol.write(id, 0, b"hello, world")?;
    /// let mut buf = [0u8; 5];
    /// assert_eq!(vol.read_into(id, 7, &mut buf)?, 5);
    /// assert_eq!(&buf, b"world");
    /// assert_eq!(vol.read_into(id, 12, &mut buf)?, 0);
    /// # vol.close()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), extalloc::Error>(())
    /// ```
    pub fn read_into(&self, id: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_range(offset, buf.len() as u64)?;
        let file = self.file(id)?;
        let f = self.lock_loaded(&file)?;
        let n = self.read_locked(&f, offset, buf)?;
        debug_assert!(n <= buf.len() && (n == 0 || offset + n as u64 <= f.size));
        Ok(n)
    }

    /// [`Volume::read_into`] with the file's mutex held and its map loaded.
    fn read_locked(&self, f: &VFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
        debug_assert!(f.loaded, "a read of a map not loaded");
        let end = (offset + buf.len() as u64).min(f.size);
        if offset >= end {
            return Ok(0);
        }
        let bs = self.block_size;
        let out = &mut buf[..(end - offset) as usize];
        out.fill(0);
        let mut l = offset / bs;
        while l * bs < end {
            let Some((p, run)) = f.alloc.lookup(l) else {
                l = f.alloc.next_mapped(l).unwrap_or(u64::MAX / bs);
                continue;
            };
            let (unwritten, same) = f.unwritten.run_at(l);
            let n = run.min(end.div_ceil(bs) - l).min(same);
            if !unwritten {
                let (from, to) = ((l * bs).max(offset), ((l + n) * bs).min(end));
                let dst = &mut out[(from - offset) as usize..(to - offset) as usize];
                self.dev.read_at(dst, p * bs + (from - l * bs))?;
            }
            l += n;
        }
        // Bytes appended and kept back until the commit (`tail.rs`) read as written.
        if let Some(t) = &f.tail {
            t.overlay(offset, out);
        }
        Ok(out.len())
    }
}

impl Volume {
    /// Advice that files `ids` are about to be read from their start (a reader walking a
    /// directory): the written blocks of each one's first `per_file` bytes go to the
    /// device's [`Device::will_need`](crate::disk::device::Device::will_need) in block order, runs closer than 32 KiB merged,
    /// so that a device with a cache (an image file's page cache) reads them in a few
    /// large requests before the reads arrive, wherever aging has put them. Holes,
    /// unwritten blocks and data still in a writeback cache are not advised. Ids no
    /// longer in the volume are passed over (a listing may be older than an unlink), and
    /// so is a file whose mutex another thread holds: advice never waits for one. A map
    /// the open left unread is read (the read that follows would need it).
    ///
    /// Changes nothing a read returns. On failure (the device refused advice: its error)
    /// the ranges advised before it stand, which is harmless.
    pub fn will_need(&self, ids: &[u64], per_file: u64) -> Result<Advised> {
        let bs = self.block_size;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut files = 0;
        for &id in ids {
            let file = match self.file(id) {
                Ok(f) => f,
                Err(Error::NoSuchFile { .. }) => continue,
                Err(e) => return Err(e),
            };
            // Advice never waits: a file busy under its mutex (a writeback placing it) is
            // passed over.
            let Some(mut f) = file.try_lock() else {
                continue;
            };
            self.load(&mut f)?;
            let before = runs.len();
            written_runs(&f, f.size.min(per_file).div_ceil(bs), &mut runs);
            files += u64::from(runs.len() > before);
        }
        runs.sort_unstable();
        let merged = merge_runs(&runs, ADVICE_GAP_BYTES / bs);
        let mut advised = Advised {
            files,
            ..Advised::default()
        };
        for &(p, n) in &merged {
            self.dev.will_need(p * bs, n * bs)?;
            advised.ranges += 1;
            advised.bytes += n * bs;
        }
        debug_assert!(advised.bytes >= runs.iter().map(|r| r.1).sum::<u64>() * bs);
        Ok(advised)
    }
}

/// Appends the written runs of `f`'s first `blocks` logical blocks to `out`, as (first
/// physical block, blocks).
fn written_runs(f: &VFile, blocks: u64, out: &mut Vec<(u64, u64)>) {
    debug_assert!(f.loaded, "advice from a map not loaded");
    let mut l = 0;
    while l < blocks {
        let Some((p, run)) = f.alloc.lookup(l) else {
            l = f.alloc.next_mapped(l).unwrap_or(u64::MAX);
            continue;
        };
        let (unwritten, same) = f.unwritten.run_at(l);
        let n = run.min(blocks - l).min(same);
        debug_assert!(n > 0, "a mapped run of no blocks at {l}");
        if !unwritten {
            out.push((p, n));
        }
        l += n;
    }
}

/// Sorted runs merged where the gap between one's end and the next's start is at most
/// `gap` blocks (overlaps merge too); the result is sorted, disjoint and covers every run.
fn merge_runs(runs: &[(u64, u64)], gap: u64) -> Vec<(u64, u64)> {
    debug_assert!(
        runs.windows(2).all(|w| w[0] <= w[1]),
        "runs to merge are sorted"
    );
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for &(p, n) in runs {
        match out.last_mut() {
            Some((q, m)) if p <= *q + *m + gap => *m = (*m).max(p + n - *q),
            _ => out.push((p, n)),
        }
    }
    debug_assert!(out.windows(2).all(|w| w[0].0 + w[0].1 + gap < w[1].0));
    out
}

#[cfg(test)]
mod tests {
    use crate::disk::device::MemDevice;
    use crate::volume::Volume;
    use crate::{Geometry, Policy};
    use std::sync::Arc;

    fn volume() -> Volume {
        let dev = Arc::new(MemDevice::new(4096 * 4096));
        let g = Geometry::new(4096, 1024, 4096).unwrap();
        Volume::mkfs(dev, &g, 64, Policy::default()).unwrap()
    }

    #[test]
    fn read_into_fills_the_callers_buffer_with_holes_as_zeros_and_stops_at_the_end() {
        let vol = volume();
        let id = vol.create(b"").unwrap();
        vol.write(id, 10_000, b"tail").unwrap();
        let mut buf = vec![0xAAu8; 16_384];
        let n = vol.read_into(id, 0, &mut buf).unwrap();
        assert_eq!(n, 10_004, "up to the end of the file");
        assert!(
            buf[..10_000].iter().all(|&b| b == 0),
            "the hole reads as zeros"
        );
        assert_eq!(&buf[10_000..10_004], b"tail");
        assert!(
            buf[10_004..].iter().all(|&b| b == 0xAA),
            "past the end untouched"
        );
        assert_eq!(vol.read_into(id, 20_000, &mut buf).unwrap(), 0);
        assert_eq!(vol.read(id, 9_998, 100).unwrap(), b"\0\0tail");
        assert!(vol.read_into(99, 0, &mut buf).is_err(), "no such file");
        assert!(
            vol.read_into(id, u64::MAX - 2, &mut buf).is_err(),
            "past the largest file"
        );
    }

    #[test]
    fn list_with_attrs_gives_every_files_blob_in_one_pass() {
        let vol = volume();
        let a = vol.create(b"key-a").unwrap();
        let b = vol.create(b"key-b").unwrap();
        vol.write(b, 0, &[1u8; 5000]).unwrap();
        vol.set_attr(a, b"key-a2").unwrap();
        let listed = vol.list_with_attrs();
        let got: Vec<(u64, u64, &[u8])> = listed
            .iter()
            .map(|(i, attr)| (i.id, i.size, attr.as_slice()))
            .collect();
        assert_eq!(got, [(a, 0, &b"key-a2"[..]), (b, 5000, &b"key-b"[..])]);
        let plain: Vec<_> = vol.list().into_iter().map(|i| (i.id, i.size)).collect();
        assert_eq!(plain, [(a, 0), (b, 5000)]);
    }
}

#[cfg(test)]
mod put_tests {
    use crate::disk::device::MemDevice;
    use crate::volume::Volume;
    use crate::{Error, Geometry, Policy};
    use std::sync::Arc;

    #[test]
    fn put_writes_a_blob_whole_or_leaves_nothing() {
        let dev = Arc::new(MemDevice::new(4096 * 4096));
        let g = Geometry::new(4096, 1024, 4096).unwrap();
        let vol = Volume::mkfs(dev, &g, 64, Policy::default()).unwrap();
        let a = vol.put(b"key", &[5u8; 10_000]).unwrap();
        assert_eq!(vol.read(a, 0, 20_000).unwrap(), vec![5u8; 10_000]);
        assert_eq!(vol.attr(a).unwrap(), b"key");
        let before: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
        let too_big = vec![1u8; 32 << 20];
        assert!(matches!(
            vol.put(b"big", &too_big),
            Err(Error::NoSpace { .. })
        ));
        let after: Vec<u64> = vol.list().iter().map(|f| f.id).collect();
        assert_eq!(after, before, "the failed put left no file");
        assert!(vol.check().unwrap().clean());
    }
}

#[cfg(test)]
mod advice_tests {
    use super::merge_runs;
    use crate::disk::device::{FaultDevice, MemDevice};
    use crate::geometry::Geometry;
    use crate::volume::{Fallocate, Volume};
    use crate::Policy;
    use std::sync::Arc;

    #[test]
    fn advice_covers_each_files_written_start_and_nothing_it_need_not() {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 1));
        let geometry = Geometry::new(4096, 1024, 8192).unwrap();
        let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
        let bs = 4096;
        let a = vol.create(b"").unwrap();
        vol.write(a, 0, &vec![1; 5 * bs as usize]).unwrap();
        let b = vol.create(b"").unwrap();
        vol.write(b, 0, &[2; 100]).unwrap();
        let c = vol.create(b"").unwrap();
        vol.fallocate(c, Fallocate::Allocate, 0, 4 * bs).unwrap();
        let gone = vol.create(b"").unwrap();
        vol.write(gone, 0, &[3; 10]).unwrap();
        vol.unlink(gone).unwrap();
        let holey = vol.create(b"").unwrap();
        vol.write(holey, 3 * bs, &[4; 10]).unwrap();

        let advised = vol.will_need(&[a, b, c, gone, holey], 2 * bs).unwrap();
        assert_eq!(
            advised.files, 2,
            "a and b: c is unwritten, gone is gone, holey a hole"
        );
        // The blocks that had to be advised: a's first two, b's one.
        let mut need = Vec::new();
        for (id, blocks) in [(a, 2), (b, 1)] {
            let e = vol.extents(id).unwrap();
            assert_eq!(e[0].logical, 0);
            need.push((e[0].extent.start * bs, blocks * bs));
        }
        need.sort_unstable();
        let seen = dev.advised();
        assert_eq!(advised.ranges, seen.len() as u64);
        assert_eq!(advised.bytes, seen.iter().map(|r| r.1).sum::<u64>());
        for &(p, n) in &need {
            assert!(
                seen.iter().any(|&(q, m)| q <= p && p + n <= q + m),
                "{p} advised"
            );
        }
        for &(q, m) in &seen {
            assert!(
                need.iter().any(|&(p, _)| p == q),
                "a range starts where one is needed"
            );
            assert!(
                need.iter().any(|&(p, n)| p + n == q + m),
                "and ends where one ends"
            );
        }
        assert!(
            seen.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0),
            "in block order"
        );
        assert_eq!(
            vol.will_need(&[a, b], 0).unwrap(),
            super::Advised::default()
        );
        let busy = vol.file(a).unwrap();
        let held = busy.lock();
        let advised = vol.will_need(&[a, b], 2 * bs).unwrap();
        assert_eq!(advised.files, 1, "a, whose mutex is held, is passed over");
        drop(held);
        assert_eq!(
            vol.read(a, 0, 3).unwrap(),
            vec![1; 3],
            "advice changes no data"
        );
        vol.close().unwrap();
    }

    #[test]
    fn runs_merge_across_small_gaps_and_overlaps_and_keep_far_ones_apart() {
        assert_eq!(merge_runs(&[], 8), vec![]);
        assert_eq!(merge_runs(&[(10, 2)], 8), vec![(10, 2)]);
        // touching, within the gap, overlapping, contained, then far
        let runs = [(10, 2), (12, 1), (20, 4), (22, 10), (25, 1), (100, 3)];
        assert_eq!(merge_runs(&runs, 8), vec![(10, 22), (100, 3)]);
        assert_eq!(merge_runs(&runs, 0), vec![(10, 3), (20, 12), (100, 3)]);
    }
}
