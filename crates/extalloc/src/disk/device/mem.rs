//! Sparse memory: 64 KiB pages allocated on first write.
//!
//! Data structure: a map from page number to page. Invariant: a byte never written reads
//! as zero, and a page exists only once a write touched it. `flush` does nothing: nothing
//! survives the process anyway.
//!
//! Locks: one `RwLock` over the map (reads share it, writes take it alone); a leaf.

use super::contract::{check_range, Device};
use crate::error::Result;
use parking_lot::RwLock;
use std::collections::HashMap;

const PAGE: u64 = 64 << 10;

/// A device in memory, sparse: a 16 TiB device costs only what was written.
pub struct MemDevice {
    size: u64,
    pages: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl MemDevice {
    /// A device of `size` bytes, all zero.
    pub fn new(size: u64) -> Self {
        MemDevice {
            size,
            pages: RwLock::new(HashMap::new()),
        }
    }

    /// Bytes held in memory.
    pub fn resident_bytes(&self) -> u64 {
        self.pages.read().len() as u64 * PAGE
    }
}

/// `(page, offset in page, length)` pieces of `offset .. offset + len`.
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let end = offset + len as u64;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let page = at / PAGE;
        let in_page = (at % PAGE) as usize;
        let n = ((PAGE - at % PAGE).min(end - at)) as usize;
        let done = (at - offset) as usize;
        at += n as u64;
        Some((page, in_page, n, done))
    })
}

impl Device for MemDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let pages = self.pages.read();
        for (page, in_page, n, done) in pieces(offset, buf.len()) {
            let dst = &mut buf[done..done + n];
            match pages.get(&page) {
                Some(p) => dst.copy_from_slice(&p[in_page..in_page + n]),
                None => dst.fill(0),
            }
        }
        Ok(())
    }

    /// Forgets the range: whole pages are dropped (they read as zeros), the parts of pages
    /// at its ends are zeroed.
    fn discard(&self, offset: u64, len: u64) -> Result<bool> {
        check_range(offset, len as usize, self.size)?;
        let mut pages = self.pages.write();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let page = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let n = (PAGE - at % PAGE).min(end - at) as usize;
            if n as u64 == PAGE {
                pages.remove(&page);
            } else if let Some(p) = pages.get_mut(&page) {
                p[in_page..in_page + n].fill(0);
            }
            at += n as u64;
        }
        Ok(true)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let mut pages = self.pages.write();
        for (page, in_page, n, done) in pieces(offset, buf.len()) {
            let p = pages
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            p[in_page..in_page + n].copy_from_slice(&buf[done..done + n]);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
