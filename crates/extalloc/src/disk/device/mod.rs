//! Devices: where persistent state lives (the bottom of `disk/`, see `docs/architecture.md`).
//!
//! A [`Device`] is a range of bytes with positional reads and writes and a `flush` that makes
//! every write before it durable. Its kinds:
//! - [`MemDevice`]: sparse memory (the lab's default; nothing survives the process);
//! - [`FileDevice`]: a file or block device through positional I/O, `flush` = `fdatasync`;
//! - [`FaultDevice`]: wraps another device and keeps writes volatile until `flush`; on
//!   command it "crashes" (drops any subset of the unflushed writes, tears one to a prefix of
//!   its sectors) or starts failing writes, so crash-recovery code can be tested;
//! - [`FenceDevice`]: wraps another device and, once fenced, refuses every write and flush
//!   (a file system's shutdown: the media keeps what reached it before);
//! - [`OverlayDevice`]: a read-only view whose writes stay in memory (inspection);
//! - [`SyntheticDevice`]: a filled device of any size generated from a seed on demand,
//!   writes kept in memory (scale measurements).
//!
//! Every access is checked against the device's size: `DeviceRange`, and nothing changes.
//! What a device says must be true: once `flush` returns `Ok`, every write that completed
//! before it is durable.
//!
//! Locks: the trait takes none; each kind keeps its own, a leaf held for one call (the
//! fault-injecting device's state lock -> the wrapped device's).

mod backing;
mod fault;
mod fence;
mod file;
mod mem;
mod overlay;
mod synthetic;

pub use fault::{Crash, CrashReport, FaultDevice};
pub use fence::FenceDevice;
pub use file::{FileDevice, DEFAULT_HEARTBEAT};
pub use mem::MemDevice;
pub use overlay::OverlayDevice;
pub use synthetic::{SyntheticDevice, SyntheticSpec, TEMPLATES};

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The contract every device keeps.
    pub(crate) fn contract(d: &dyn Device) {
        let size = d.size();
        assert!(size >= 8192);
        let mut buf = [0xffu8; 16];
        d.read_at(&mut buf, 100).unwrap();
        assert_eq!(buf, [0u8; 16], "unwritten bytes read as zero");
        d.write_at(b"hello, device", 4090).unwrap();
        let mut back = [0u8; 13];
        d.read_at(&mut back, 4090).unwrap();
        assert_eq!(
            &back, b"hello, device",
            "a write is read back across a page border"
        );
        d.flush().unwrap();
        assert!(matches!(
            d.write_at(&[1, 2, 3], size - 2),
            Err(Error::DeviceRange { .. })
        ));
        assert!(matches!(
            d.read_at(&mut [0u8; 4], u64::MAX - 1),
            Err(Error::DeviceRange { .. })
        ));
        let mut tail = [9u8; 2];
        d.read_at(&mut tail, size - 2).unwrap();
        assert_eq!(tail, [0, 0], "a refused write changed nothing");
    }

    #[test]
    fn memory_device_keeps_the_contract() {
        contract(&MemDevice::new(1 << 40));
    }

    #[test]
    fn file_device_keeps_the_contract() {
        let path = std::env::temp_dir().join(format!("extalloc-dev-{}", std::process::id()));
        let d = FileDevice::create(&path, 1 << 30).unwrap();
        contract(&d);
        drop(d);
        let again = FileDevice::open(&path).unwrap();
        assert_eq!(again.size(), 1 << 30);
        let mut back = [0u8; 13];
        again.read_at(&mut back, 4090).unwrap();
        assert_eq!(
            &back, b"hello, device",
            "flushed data is there after reopening"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn fault_device_keeps_the_contract() {
        contract(&FaultDevice::new(MemDevice::new(1 << 20), 1));
    }
}
