//! A device that can be shut down ([`FenceDevice`]): after [`FenceDevice::fence`] every
//! write, flush and discard fails and the device underneath never changes again, while reads go on.
//! What a file system's shutdown (`FS_IOC_SHUTDOWN`, XFS's `GOINGDOWN`) needs: the media
//! keeps exactly what reached it before, as after a power loss, and nothing the running
//! system does later (a commit, a write-back, the clean-close mark) can land.
//!
//! **Latching** ([`FenceDevice::latching`]): the store wraps every device it opens in one
//! that fences itself at the first write or flush the device underneath fails, keeping the
//! failure as its cause (jbd2 aborts its journal the same way). Linux forgets the dirty
//! pages of a failed flush and reports the error once, so a later flush that succeeds
//! proves nothing; after the latch every write and flush fails with
//! [`Error::IoLatched`], naming the first failure, until the device is opened again.
//!
//! A latching fence also enforces the owner's **lease** ([`Lease`], the owner record's
//! heartbeat): a write or flush after the lease ran out renews it first, and latches the
//! fence if the device was taken over meanwhile.
//!
//! Data structures: the wrapped device, the fence flag under a reader-writer lock, and for
//! a latching fence the first failure (`cause`) with a flag readers check without a lock,
//! and the lease.
//!
//! Invariant: once `fence` returns, no write or flush reaches the wrapped device: every
//! write and flush holds the lock for reading across its call to the wrapped device and
//! checks the flag under it; `fence` sets the flag holding it for writing, so it waits for
//! the calls in flight. A latching fence sets `cause` before it fences, and only once.
//!
//! Locks: `fenced` -> the wrapped device's own lock; `cause` is a leaf, taken with no
//! other lock of this device held.

use super::contract::{check_range, Device};
use crate::error::{Error, IoSource, Result};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A lease on the device that a latching fence enforces: the owner record's heartbeat
/// (`store/claim.rs`). Once it has run out (the owner's process or machine was paused
/// past it), the next write renews it first; a renewal that finds the device taken over
/// latches the fence, so a resumed owner writes nothing over the new one (ext4's
/// multi-mount protection stops the file system the same way).
pub trait Lease: Send + Sync {
    /// Whether the lease has run out: a cheap check made before every write and flush.
    fn expired(&self) -> bool;
    /// Renews the lease: the record read back from the media, then the next beat written.
    /// An error says why the device is no longer this owner's.
    fn renew(&self) -> Result<()>;
}

/// A device whose writes can be stopped for good (see the module documentation).
pub struct FenceDevice {
    inner: Arc<dyn Device>,
    fenced: RwLock<bool>,
    /// Fence at the first failed write or flush (see [`FenceDevice::latching`]).
    latching: bool,
    /// The first failure of a latching fence, as it was reported.
    cause: Mutex<Option<String>>,
    /// Set (after `cause`) once latched: the check on every call, without a lock.
    latched: AtomicBool,
    /// The owner's lease, checked before every write and flush ([`Lease`]).
    lease: std::sync::OnceLock<Arc<dyn Lease>>,
}

impl FenceDevice {
    /// Wraps `inner`, which is written until [`FenceDevice::fence`].
    pub fn new(inner: Arc<dyn Device>) -> Self {
        FenceDevice {
            inner,
            fenced: RwLock::new(false),
            latching: false,
            cause: Mutex::new(None),
            latched: AtomicBool::new(false),
            lease: std::sync::OnceLock::new(),
        }
    }

    /// Wraps `inner` and fences it by itself at the first write, vectored write or flush
    /// that `inner` fails with an I/O error (a range error is the caller's, and changes
    /// nothing). That call returns its own error; every later write and flush fails with
    /// [`Error::IoLatched`], and so does a discard; reads go on.
    pub fn latching(inner: Arc<dyn Device>) -> Self {
        FenceDevice {
            latching: true,
            ..FenceDevice::new(inner)
        }
    }

    /// The device underneath, for writes that must not go through the fence's lease (the
    /// lease's own renewals).
    pub fn inner(&self) -> Arc<dyn Device> {
        self.inner.clone()
    }

    /// The first failed write or flush of a latching fence, if it latched.
    pub fn latched(&self) -> Option<String> {
        if !self.latched.load(Ordering::Acquire) {
            return None;
        }
        let cause = self.cause.lock().clone();
        debug_assert!(cause.is_some(), "latched without a cause");
        cause
    }

    /// Latches a latching fence with `cause` (the first cause is kept): every later write
    /// and flush fails with [`Error::IoLatched`].
    pub fn latch_with(&self, cause: String) {
        assert!(self.latching, "only a latching fence latches");
        let mut c = self.cause.lock();
        if c.is_none() {
            *c = Some(cause);
        }
        drop(c);
        self.latched.store(true, Ordering::Release);
        self.fence();
        debug_assert!(self.latched().is_some() && self.is_fenced());
    }

    /// Enforces `lease` on every later write and flush (set once; a second is ignored).
    pub fn set_lease(&self, lease: Arc<dyn Lease>) {
        let _ = self.lease.set(lease);
    }

    /// Before a write or flush: a lease that ran out is renewed, and a renewal that fails
    /// latches the fence.
    fn check_lease(&self) -> Result<()> {
        match self.lease.get() {
            Some(l) if l.expired() && !self.latched.load(Ordering::Acquire) => {
                if let Err(e) = l.renew() {
                    self.latch_with(e.to_string());
                    return Err(self.refused("write", 0));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A write or flush (`op` at `offset`) through the fence: the lease renewed if it ran
    /// out, refused once fenced (the flag read under the lock held across the call), and
    /// an I/O error of the wrapped device latching a latching fence.
    fn through(
        &self,
        op: &'static str,
        offset: u64,
        call: impl FnOnce(&dyn Device) -> Result<()>,
    ) -> Result<()> {
        self.check_lease()?;
        let result = {
            let fenced = self.fenced.read();
            if *fenced {
                return Err(self.refused(op, offset));
            }
            call(self.inner.as_ref())
        };
        self.watch(result)
    }

    /// After a call to the wrapped device: a latching fence latches on an I/O error.
    fn watch<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e @ Error::Io { .. }) = &result {
            if self.latching {
                self.latch_with(e.to_string());
            }
        }
        result
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
        if let Some(cause) = self.latched() {
            return Error::IoLatched {
                device: self.inner.name(),
                cause,
            };
        }
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
        self.through("write", offset, |d| d.write_at(buf, offset))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(offset, total, self.size())?;
        self.through("write", offset, |d| d.write_vectored_at(bufs, offset))
    }

    fn flush(&self) -> Result<()> {
        self.through("flush", 0, |d| d.flush())
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

    #[test]
    fn a_latching_fence_latches_at_the_first_failed_flush() {
        use crate::disk::device::FaultDevice;
        let fault = Arc::new(FaultDevice::new(MemDevice::new(1 << 20), 1));
        let d = FenceDevice::latching(fault.clone());
        d.write_at(b"one", 0).unwrap();
        d.flush().unwrap();
        assert!(d.latched().is_none());
        assert!(
            matches!(d.write_at(b"x", 1 << 20), Err(Error::DeviceRange { .. })),
            "a range error is the caller's"
        );
        assert!(d.latched().is_none(), "and does not latch");
        d.write_at(b"two", 0).unwrap();
        fault.fail_flushes(1);
        let first = d.flush().unwrap_err();
        assert!(matches!(first, Error::Io { op: "flush", .. }), "{first}");
        let cause = d.latched().expect("latched");
        assert!(cause.contains("injected flush failure"), "{cause}");
        // The device would take the flush now (Linux reports once): the latch does not.
        let again = d.flush().unwrap_err();
        assert!(matches!(again, Error::IoLatched { .. }), "{again}");
        assert!(matches!(d.write_at(b"3", 0), Err(Error::IoLatched { .. })));
        assert!(
            again.to_string().contains("injected flush failure"),
            "{again}"
        );
        let mut back = [0u8; 3];
        d.read_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"two", "reads go on: what the cache holds");
    }
}
