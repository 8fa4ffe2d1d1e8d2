//! The contract every device keeps: the [`Device`] trait, the sector a torn write keeps
//! whole, and the range check each access makes (see the parent module for the kinds).

use crate::error::{Error, Result};

/// Sector size for torn writes: a crash can persist a prefix of whole sectors.
pub const SECTOR_BYTES: u64 = 512;

/// A byte-addressed device.
pub trait Device: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Writes `buf` at `offset` (durable after the next `flush`).
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Writes `bufs` one after another from `offset`, as `write_at` of their concatenation
    /// would (durable after the next `flush`), without the caller gathering them into one
    /// buffer. The default writes them one at a time; a device that takes a list in one
    /// call (a file: `pwritev`) overrides it. A range past the end is `DeviceRange`, and
    /// nothing is written then.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(offset, total, self.size())?;
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        debug_assert_eq!(at, offset + total as u64);
        Ok(())
    }
    /// Makes every completed write durable.
    fn flush(&self) -> Result<()>;
    /// Words naming the device in errors (its path, for a device that has one).
    fn name(&self) -> String {
        "a device in memory".into()
    }
    /// How often a store that has the device open read-write updates its owner record
    /// (`store/claim.rs`), for devices another machine or process may see; `None` (the
    /// default) for devices only this process sees, on which no heartbeat runs.
    fn heartbeat(&self) -> Option<std::time::Duration> {
        None
    }
    /// Discards `offset .. offset + len` (TRIM: the media may forget those bytes; they read
    /// back as zeros or as before, unspecified): advice for thin devices, SSDs and sparse
    /// image files, never needed for correctness. `Ok(true)` if done, `Ok(false)` if this
    /// device does not discard (the default: nothing happens). A range past the end is
    /// `DeviceRange`.
    fn discard(&self, offset: u64, len: u64) -> Result<bool> {
        check_range(offset, len as usize, self.size())?;
        Ok(false)
    }
    /// Advice that `offset .. offset + len` will be read soon: a device with a cache in
    /// front of its media (an image file's page cache) starts reading the range into it
    /// and returns without waiting, so that the reads that follow find it there. Never
    /// needed for correctness and changes nothing a read returns. `Ok(true)` if the reads
    /// were started, `Ok(false)` where there is no such cache (the default: nothing
    /// happens). A range past the end is `DeviceRange`.
    fn will_need(&self, offset: u64, len: u64) -> Result<bool> {
        check_range(offset, len as usize, self.size())?;
        Ok(false)
    }
    /// Asks the system to forget its cached copy of the device (after a `flush`), so later
    /// reads go to the media: a cold start for benchmarks. Does nothing where there is no
    /// such cache.
    fn drop_cache(&self) -> Result<()> {
        Ok(())
    }
}

/// Checks `offset .. offset + len` against a device of `size` bytes.
pub(crate) fn check_range(offset: u64, len: usize, size: u64) -> Result<()> {
    let len = len as u64;
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::DeviceRange { offset, len, size }),
    }
}
