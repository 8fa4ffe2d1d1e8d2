//! A read-only view of a device that keeps writes in memory ([`OverlayDevice`]): a store
//! or volume opened on it replays its journal and runs as usual, and the device underneath
//! never changes. For inspection (listing files, copying one out, checking a volume) of a
//! device no one may write, or that another process holds.
//!
//! Data structures: the base device and the pages written so far (`page -> bytes`, 4 KiB).
//! Invariant: a read returns the newest write of each byte, else the base's byte. Locks:
//! `pages` is a leaf, held for one call (the base's own lock under it).

use super::contract::{check_range, Device};
use crate::error::Result;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

const PAGE: u64 = 4096;

/// A device whose writes stay in memory, over one that is only read.
pub struct OverlayDevice {
    base: Arc<dyn Device>,
    pages: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

impl OverlayDevice {
    /// A view of `base` (read, never written).
    pub fn new(base: Arc<dyn Device>) -> Self {
        OverlayDevice {
            base,
            pages: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Device for OverlayDevice {
    fn size(&self) -> u64 {
        self.base.size()
    }

    fn name(&self) -> String {
        format!("{} (a read-only view)", self.base.name())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        self.base.read_at(buf, offset)?;
        let pages = self.pages.lock();
        let end = offset + buf.len() as u64;
        for (&p, bytes) in pages.range(offset / PAGE..end.div_ceil(PAGE)) {
            let (from, to) = ((p * PAGE).max(offset), ((p + 1) * PAGE).min(end));
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&bytes[(from - p * PAGE) as usize..(to - p * PAGE) as usize]);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        let end = offset + buf.len() as u64;
        let mut pages = self.pages.lock();
        for p in offset / PAGE..end.div_ceil(PAGE) {
            let page = match pages.entry(p) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let len = PAGE.min(self.size() - p * PAGE) as usize;
                    let mut page = vec![0u8; len].into_boxed_slice();
                    self.base.read_at(&mut page, p * PAGE)?;
                    e.insert(page)
                }
            };
            let (from, to) = ((p * PAGE).max(offset), ((p + 1) * PAGE).min(end));
            page[(from - p * PAGE) as usize..(to - p * PAGE) as usize]
                .copy_from_slice(&buf[(from - offset) as usize..(to - offset) as usize]);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::device::MemDevice;

    #[test]
    fn the_base_never_changes_and_reads_see_the_writes() {
        let base = Arc::new(MemDevice::new(64 * 1024));
        base.write_at(b"base bytes", 4090).unwrap();
        super::super::tests::contract(&OverlayDevice::new(Arc::new(MemDevice::new(64 * 1024))));
        let view = OverlayDevice::new(base.clone());
        view.write_at(b"VIEW", 4092).unwrap();
        let mut b = [0u8; 10];
        view.read_at(&mut b, 4090).unwrap();
        assert_eq!(&b, b"baVIEWytes");
        base.read_at(&mut b, 4090).unwrap();
        assert_eq!(&b, b"base bytes");
    }
}
