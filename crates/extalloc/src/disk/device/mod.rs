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
mod contract;
mod fault;
mod fence;
mod file;
mod mem;
mod overlay;
mod synthetic;

pub use contract::{Device, SECTOR_BYTES};
pub use fault::{Crash, CrashReport, FaultDevice};
pub use fence::{FenceDevice, Lease};
pub use file::{all_holes, FileDevice, DEFAULT_HEARTBEAT};
pub use mem::MemDevice;
pub use overlay::OverlayDevice;
pub use synthetic::{SyntheticDevice, SyntheticSpec, TEMPLATES};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::Error;

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
        // Advice: taken or not, it changes nothing a read returns; past the end refused.
        d.will_need(0, 8192).unwrap();
        d.read_at(&mut back, 4090).unwrap();
        assert_eq!(&back, b"hello, device", "advice changed nothing");
        assert!(matches!(
            d.will_need(size - 2, 3),
            Err(Error::DeviceRange { .. })
        ));
        vectored(d);
    }

    /// A vectored write lands as the write of its buffers' concatenation would: more
    /// buffers than one `pwritev` takes, of uneven lengths, across page borders; one that
    /// would pass the end is refused and writes nothing.
    fn vectored(d: &dyn Device) {
        let bufs: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| vec![(i % 251) as u8 + 1; 1 + (i as usize * 7) % 13])
            .collect();
        let slices: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        let whole: Vec<u8> = bufs.concat();
        d.write_vectored_at(&slices, 8191).unwrap();
        let mut back = vec![0u8; whole.len()];
        d.read_at(&mut back, 8191).unwrap();
        assert_eq!(back, whole, "the buffers one after another");
        let size = d.size();
        assert!(matches!(
            d.write_vectored_at(&[&[7u8; 3][..], &[8u8; 3][..]], size - 4),
            Err(Error::DeviceRange { .. })
        ));
        let mut tail = [9u8; 4];
        d.read_at(&mut tail, size - 4).unwrap();
        assert_eq!(tail, [0; 4], "a refused vectored write changed nothing");
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
    fn fence_device_keeps_the_contract() {
        contract(&FenceDevice::new(std::sync::Arc::new(MemDevice::new(
            1 << 20,
        ))));
    }

    #[test]
    fn fault_device_keeps_the_contract() {
        contract(&FaultDevice::new(MemDevice::new(1 << 20), 1));
    }
}
