//! Reading files: [`Volume::read`] into a new buffer, [`Volume::read_into`] into the
//! caller's. A read takes the file's mutex (its map loaded) and reads each mapped, written
//! run from the device; holes and unwritten runs are zeros.
//!
//! Data structures: none of its own (the file's map and unwritten set, `file.rs`).
//! Invariant: a read changes nothing. Lock order: the file's mutex only.

use super::file::VFile;
use super::io::check_range;
use super::state::Volume;
use crate::error::Result;

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
        Ok(out.len())
    }
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
