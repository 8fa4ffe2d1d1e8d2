//! A write into the cache ([`Buffered::write`], [`Buffered::write_for`]): the bytes
//! copied into the file's pages, a block reserved for every hole they cover
//! (`Volume::reserve_delalloc`, checked for whose write it is: `volume/share.rs`), the
//! cache's hard limit waited for and background writeback kicked.
//!
//! Data structures: the file's cached pages (`cache.rs`). Invariant: a page made over a
//! hole holds a reserved block, counted in the file's and the volume's reservations; a
//! failing piece caches nothing (the pages are made before the reservation, inserted
//! after it). Locks: the file's entry, then the volume's `delalloc` (a leaf).

use super::cache::Page;
use super::contexts::{self, pieces};
use super::Buffered;
use crate::error::{Error, Result};
use crate::volume::Privilege;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

impl Buffered {
    /// Copies `data` into the cache at byte `offset` of file `id`, reserving a block for
    /// every hole it covers: [`Error::NoSpace`] when the device cannot hold it (nothing of
    /// the failing piece cached; earlier pieces of a large write stay). Waits while the
    /// cache is at its hard limit. The superuser's share of the device may be taken
    /// ([`Buffered::write_for`] says whose write it is).
    pub fn write(&self, id: u64, offset: u64, data: &[u8]) -> Result<()> {
        self.write_for(id, offset, data, Privilege::Superuser)
    }

    /// [`Buffered::write`] for `who`: an unprivileged caller's write is refused with
    /// [`Error::NoSpace`] where it would take the superuser's share of the device
    /// (`volume/share.rs`), so what it can still write is `statfs`'s available figure.
    pub fn write_for(&self, id: u64, offset: u64, data: &[u8], who: Privilege) -> Result<()> {
        let end = crate::volume::check_range(offset, data.len() as u64)?;
        let entry = self.shared.entry(id)?;
        for (from, to) in pieces(offset, end - offset, self.shared.block_size) {
            self.shared.throttle()?;
            let bytes = &data[(from - offset) as usize..(to - offset) as usize];
            self.after_writeback(|| {
                self.shared
                    .vol
                    .retry_after_sync(|| self.write_piece(id, &entry, from, bytes, who))
            })?;
            self.shared.kick_if_over_background()?;
        }
        Ok(())
    }

    /// Caches one piece (at most `WRITE_PIECE_BLOCKS` blocks).
    fn write_piece(
        &self,
        id: u64,
        entry: &contexts::Entry,
        pos: u64,
        bytes: &[u8],
        who: Privilege,
    ) -> Result<()> {
        let s = &self.shared;
        let bs = s.block_size;
        let mut d = entry.lock();
        if d.unlinked {
            return Err(Error::NoSuchFile { id });
        }
        let (first, last) = (pos / bs, (pos + bytes.len() as u64 - 1) / bs);
        let holes = s.vol.holes_in(id, first, last + 1)?;
        let in_hole = |b: u64| holes.iter().any(|&(h, n)| (h..h + n).contains(&b));
        let missing: Vec<u64> = (first..=last)
            .filter(|b| !d.pages.contains_key(b))
            .collect();
        let reserve = missing.iter().filter(|&&b| in_hole(b)).count() as u64;
        // The new pages first (a partial block is read from the volume), then the
        // reservation: a failure before the insert changes nothing.
        let mut new = Vec::with_capacity(missing.len());
        let covered = |b: u64| pos <= b * bs && (b + 1) * bs <= pos + bytes.len() as u64;
        for &b in &missing {
            // A block the write covers is made from its bytes (no zeroing, no second copy).
            let data = if covered(b) {
                Box::from(&bytes[(b * bs - pos) as usize..((b + 1) * bs - pos) as usize])
            } else {
                let mut data = vec![0u8; bs as usize];
                if !in_hole(b) && b * bs < d.size {
                    let old = s.vol.read(id, b * bs, bs)?;
                    data[..old.len()].copy_from_slice(&old);
                }
                data.into_boxed_slice()
            };
            let page = Page {
                data,
                reserved: in_hole(b),
            };
            new.push((b, page));
        }
        if reserve > 0 {
            // The file's first reservation counts it in the room kept for the tree.
            let first = d.reserved == 0;
            s.vol.reserve_delalloc(reserve, u64::from(first), who)?;
            d.reserved += reserve;
        }
        d.pages.extend(new);
        let mut at = pos;
        while at < pos + bytes.len() as u64 {
            let b = at / bs;
            let n = ((b + 1) * bs).min(pos + bytes.len() as u64) - at;
            if covered(b) && missing.binary_search(&b).is_ok() {
                // Made from these bytes above.
                debug_assert_eq!(n, bs);
                at += n;
                continue;
            }
            let page = d.pages.get_mut(&b).expect("cached just now");
            let src = &bytes[(at - pos) as usize..(at - pos + n) as usize];
            page.data[(at - b * bs) as usize..(at - b * bs + n) as usize].copy_from_slice(src);
            at += n;
        }
        d.size = d.size.max(pos + bytes.len() as u64);
        d.closed = false;
        if d.dirty_since.is_none() {
            d.dirty_since = Some((s.seq.fetch_add(1, Relaxed), Instant::now()));
        }
        s.add_dirty(missing.len() as u64);
        Ok(())
    }
}
