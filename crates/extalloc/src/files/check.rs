//! The file layer's checks, at quiescence: every registered file's map and PAs, every
//! locality chunk, and that together they hold exactly the blocks the core counts as
//! reserved. Reads only; takes each file's lock (read), then each locality shard's lock.

use super::file::FileAlloc;
use super::Files;
use crate::error::{Error, Result};
use crate::geometry::Extent;

impl Files {
    /// Checks the core ([`Allocator::check`](crate::Allocator::check)), every registered file and locality chunk,
    /// and that the preallocations hold exactly the blocks the core counts as reserved.
    /// Call at quiescence.
    pub fn check(&self) -> Result<()> {
        self.alloc.check()?;
        self.check_preallocations()?;
        let held = self.prealloc_reserved_blocks();
        let counted = self.reserved_blocks();
        if held != counted {
            return Err(Error::Invariant(format!(
                "preallocations hold {held} blocks, the core counts {counted} reserved"
            )));
        }
        Ok(())
    }

    /// Checks one file's invariants (see the module comment). Call at quiescence.
    pub fn check_file(&self, file: &FileAlloc) -> Result<()> {
        let fail = |m: String| Err(Error::Invariant(format!("file {}: {m}", file.id)));
        let f = file.inner.read();
        let mut prev_end = 0;
        for (&l, e) in &f.map {
            if l < prev_end || e.len == 0 {
                return fail(format!("mapped extent at {l} overlaps its predecessor"));
            }
            prev_end = l + e.len;
        }
        let mut pas = f.pas.snapshot();
        pas.sort_by_key(|pa| pa.lstart);
        for pair in pas.windows(2) {
            if pair[0].lend() > pair[1].lstart {
                return fail(format!(
                    "PAs at {} and {} overlap",
                    pair[0].lstart, pair[1].lstart
                ));
            }
        }
        for pa in &pas {
            let used = (0..pa.len).filter(|&i| pa.is_used(i)).count() as u64;
            if used != pa.used_count || used == pa.len {
                return fail(format!(
                    "PA at {}: used count {} / {} blocks",
                    pa.lstart, pa.used_count, pa.len
                ));
            }
            for i in 0..pa.len {
                let l = pa.lstart + i;
                let mapped = f
                    .map
                    .range(..=l)
                    .next_back()
                    .filter(|(&s, e)| l < s + e.len)
                    .map(|(&s, e)| e.start + (l - s));
                match (pa.is_used(i), mapped) {
                    (true, Some(p)) if p == pa.pstart + i => {}
                    (false, None) => {}
                    (used, m) => {
                        return fail(format!(
                            "PA at {}: block {l} used={used} but mapped at {m:?}",
                            pa.lstart
                        ))
                    }
                }
            }
            for (off, n) in pa.unused_runs() {
                if !self.alloc.is_reserved(Extent::new(pa.pstart + off, n)) {
                    return fail(format!(
                        "PA at {}: unused blocks are not reserved",
                        pa.lstart
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks every registered file and every locality chunk. Call at quiescence.
    fn check_preallocations(&self) -> Result<()> {
        for file in self.registry.live_files() {
            self.check_file(&file)?;
        }
        for (i, shard) in self.registry.locality.iter().enumerate() {
            let loc = shard.lock();
            if loc.leftovers.len() > self.alloc.policy().locality_leftovers as usize {
                return Err(Error::Invariant(format!(
                    "shard {i} keeps {} locality leftovers, more than {}",
                    loc.leftovers.len(),
                    self.alloc.policy().locality_leftovers
                )));
            }
            for c in loc.extents() {
                if c.len == 0 || !self.alloc.is_reserved(c) {
                    return Err(Error::Invariant(format!(
                        "locality extent {}+{} of shard {i} is not reserved",
                        c.start, c.len
                    )));
                }
            }
        }
        Ok(())
    }
}
