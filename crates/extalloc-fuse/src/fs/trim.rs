//! `FITRIM` (`fstrim MOUNTPOINT`): the free space of the volume discarded on its device,
//! with ext4's rules for the request (`struct fstrim_range`: start, length and minimum
//! run in bytes; the bytes discarded come back in its length): root only (`EPERM`), a
//! start past the device, a length under one block or a minimum over a group `EINVAL`, a
//! device that cannot discard `EOPNOTSUPP`. The store holds each batch of free runs used
//! while the device discards it (`Store::trim`), so the allocation of a concurrent write
//! never meets a discard.
//!
//! Data structures: none of its own. Invariant: nothing that holds data is discarded (the
//! store's). Lock order: no namespace lock; the store's locks (`fs/mod.rs`).

use super::core::{Caller, Errno, Fs, FsResult};
use extalloc::Extent;

/// `FITRIM` (`_IOWR('X', 121, struct fstrim_range)`).
pub const FITRIM: u32 = 0xc018_5879;

/// Bytes of `struct fstrim_range`: start, len, minlen.
const RANGE_BYTES: usize = 24;

impl Fs {
    /// `FITRIM` with its `struct fstrim_range` as `input`: the same structure back with
    /// its length set to the bytes discarded. Errors as the module says; `EINVAL` for
    /// input cut short. Nothing changes on failure but the batches discarded before it.
    pub fn trim(&self, input: &[u8], who: Caller) -> FsResult<Vec<u8>> {
        if who.uid != 0 {
            return Err(Errno(libc::EPERM));
        }
        self.live()?;
        let word = |i: usize| {
            input
                .get(i * 8..i * 8 + 8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .ok_or(Errno(libc::EINVAL))
        };
        let (start, len, minlen) = (word(0)?, word(1)?, word(2)?);
        let store = self.vol.volume().store();
        let geometry = *store.allocator().geometry();
        let bs = u64::from(geometry.block_size);
        let device = geometry.blocks_count * bs;
        if start >= device || len < bs || minlen > geometry.group_blocks * bs {
            return Err(Errno(libc::EINVAL));
        }
        let first = start / bs;
        let end = start.saturating_add(len).min(device) / bs;
        let blocks = Extent::new(first, end.saturating_sub(first).max(1));
        let trimmed = match store.trim(blocks, (minlen / bs).max(1))? {
            Some(n) => n * bs,
            None => return Err(Errno(libc::EOPNOTSUPP)),
        };
        let mut out = input[..RANGE_BYTES].to_vec();
        out[8..16].copy_from_slice(&trimmed.to_le_bytes());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{device, find, fresh, put, ME};
    use super::super::ROOT;
    use super::*;
    use extalloc::disk::device::MemDevice;
    use extalloc::volume::Volume;
    use extalloc::writeback::WritebackOptions;
    use extalloc::{Geometry, Policy};
    use std::sync::Arc;

    fn range(start: u64, len: u64, minlen: u64) -> Vec<u8> {
        [start, len, minlen]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    #[test]
    fn fitrim_discards_free_space_and_keeps_every_file() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let geometry = Geometry::new(4096, 1024, 8192).unwrap();
        let vol = Volume::mkfs(dev, &geometry, 64, Policy::default()).unwrap();
        let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        put(&fs, ROOT, "kept", &data);
        fs.sync().unwrap();
        let out = fs.trim(&range(0, u64::MAX, 0), ME).unwrap();
        let trimmed = u64::from_le_bytes(out[8..16].try_into().unwrap());
        let free = fs.statfs().unwrap().free * 4096;
        assert!(trimmed > 0 && trimmed <= free, "{trimmed} of {free}");
        assert_eq!(
            &out[..8],
            &0u64.to_le_bytes(),
            "the start comes back as it went"
        );
        let ino = find(&fs, "kept").unwrap();
        assert_eq!(fs.read(ino, 0, 300_000).unwrap(), data);
        fs.unmount().unwrap();
    }

    #[test]
    fn fitrim_refuses_what_ext4_refuses() {
        let dev = device(2);
        let fs = fresh(&dev);
        let user = Caller {
            uid: 1000,
            gid: 1000,
        };
        let e = |r: FsResult<Vec<u8>>| r.map(|_| ()).unwrap_err().0;
        assert_eq!(e(fs.trim(&range(0, 1 << 30, 0), user)), libc::EPERM);
        assert_eq!(e(fs.trim(&range(0, 1 << 30, 0)[..20], ME)), libc::EINVAL);
        assert_eq!(e(fs.trim(&range(1 << 40, 4096, 0), ME)), libc::EINVAL);
        assert_eq!(e(fs.trim(&range(0, 0, 0), ME)), libc::EINVAL);
        assert_eq!(e(fs.trim(&range(0, 100, 0), ME)), libc::EINVAL);
        assert_eq!(e(fs.trim(&range(0, 1 << 30, 1 << 40), ME)), libc::EINVAL);
        // The fault-injecting device does not discard.
        assert_eq!(e(fs.trim(&range(0, 1 << 30, 0), ME)), libc::EOPNOTSUPP);
    }
}
