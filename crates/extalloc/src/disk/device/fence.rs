//! A device that can be shut down ([`FenceDevice`]): after [`FenceDevice::fence`] every
//! write, flush and discard fails and the device underneath never changes again, while reads go on.
//! What a file system's shutdown (`FS_IOC_SHUTDOWN`, XFS's `GOINGDOWN`) needs: the media
//! keeps exactly what reached it before, as after a power loss, and nothing the running
//! system does later (a commit, a write-back, the clean-close mark) can land.
//!
//! Data structures: the wrapped device and the fence flag under a reader-writer lock.
//!
//! Invariant: once `fence` returns, no write or flush reaches the wrapped device: every
//! write and flush holds the lock for reading across its call to the wrapped device and
//! checks the flag under it; `fence` sets the flag holding it for writing, so it waits for
//! the calls in flight.
//!
//! Locks: `fenced` -> the wrapped device's own lock; nothing else.

use super::contract::{check_range, Device};
use crate::error::{Error, IoSource, Result};
use parking_lot::RwLock;
use std::sync::Arc;

/// A device whose writes can be stopped for good (see the module documentation).
pub struct FenceDevice {
    inner: Arc<dyn Device>,
    fenced: RwLock<bool>,
}

impl FenceDevice {
    /// Wraps `inner`, which is written until [`FenceDevice::fence`].
    pub fn new(inner: Arc<dyn Device>) -> Self {
        FenceDevice {
            inner,
            fenced: RwLock::new(false),
        }
    }

    /// Stops every later write and flush (they fail with [`Error::Io`]); waits for the
    /// ones in flight. Calling it again does nothing.
    pub fn fence(&self) {
        *self.fenced.write() = true;
        debug_assert!(self.is_fenced(), "the flag is set once the lock is let go");
    }

    /// Whether [`FenceDevice::fence`] has been called.
    pub fn is_fenced(&self) -> bool {
        *self.fenced.read()
    }

    fn refused(&self, op: &'static str, offset: u64) -> Error {
        Error::Io {
            device: self.inner.name(),
            op,
            offset,
            source: IoSource::new(std::io::Error::other(
                "the file system was shut down: nothing more is written to this device \
                 until it is opened again",
            )),
        }
    }
}

impl Device for FenceDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        let fenced = self.fenced.read();
        if *fenced {
            return Err(self.refused("write", offset));
        }
        self.inner.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(offset, total, self.size())?;
        let fenced = self.fenced.read();
        if *fenced {
            return Err(self.refused("write", offset));
        }
        self.inner.write_vectored_at(bufs, offset)
    }

    fn flush(&self) -> Result<()> {
        let fenced = self.fenced.read();
        if *fenced {
            return Err(self.refused("flush", 0));
        }
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<bool> {
        let fenced = self.fenced.read();
        if *fenced {
            return Err(self.refused("discard", offset));
        }
        self.inner.discard(offset, len)
    }

    fn name(&self) -> String {
        self.inner.name()
    }

    fn heartbeat(&self) -> Option<std::time::Duration> {
        self.inner.heartbeat()
    }

    /// Advice only: passed on, also once fenced (it reads, as `read_at` does).
    fn will_need(&self, offset: u64, len: u64) -> Result<bool> {
        self.inner.will_need(offset, len)
    }

    fn drop_cache(&self) -> Result<()> {
        self.inner.drop_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::device::MemDevice;

    #[test]
    fn fenced_device_keeps_the_contract_until_fenced() {
        crate::disk::device::tests::contract(&FenceDevice::new(Arc::new(MemDevice::new(1 << 20))));
    }

    #[test]
    fn a_fenced_device_refuses_writes_and_keeps_what_was_written() {
        let mem = Arc::new(MemDevice::new(1 << 20));
        let d = FenceDevice::new(mem.clone());
        d.write_at(b"before", 0).unwrap();
        d.flush().unwrap();
        d.fence();
        assert!(d.is_fenced());
        let e = d.write_at(b"after!", 0).unwrap_err();
        assert!(matches!(e, Error::Io { op: "write", .. }), "{e}");
        assert!(e.to_string().contains("shut down"), "{e}");
        assert!(matches!(d.flush(), Err(Error::Io { op: "flush", .. })));
        let mut back = [0u8; 6];
        mem.read_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"before", "the device underneath did not change");
        d.read_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"before", "reads go on after the fence");
        d.fence();
        assert!(d.is_fenced(), "a second fence changes nothing");
        assert!(matches!(
            d.write_at(b"x", 1 << 20),
            Err(Error::DeviceRange { .. })
        ));
    }
}
