//! Locality preallocations: small files written together sit together.
//!
//! # Data structures
//!
//! - [`Locality`]: per shard (the calling thread's, or the slot a `DataRequest` names, e.g.
//!   a traced CPU), behind the shard's lock in the file layer's registry: the chunk small
//!   files carve from, front first, up to `locality_leftovers` ends of earlier chunks, and
//!   `unclaimed`, the blocks carved since the core last heard of it.
//!
//! # Invariant (checked by `Files::check`)
//!
//! Every extent a `Locality` holds is reserved: marked used in its group, handed to no
//! file, not pending. Carving moves blocks from the chunk to a file; retiring releases them.
//! The core learns of carves in batches ([`Allocator::claim_blocks`](crate::Allocator)):
//! when a chunk or leftover is used up, retired or discarded. Until then its reserved
//! figure is `unclaimed` too high: one uncontended counter write per chunk instead of one
//! per small file (the small-files path is a lock, a carve and a map insert; a locked
//! add was 3 % of it). `Files::reserved_blocks` subtracts every shard's `unclaimed`.
//!
//! Lock order: file lock -> locality shard lock -> group locks -> global lock.

use super::registry::Locality;
use super::{Commits, Files};
use crate::alloc::{AllocRequest, Lifetime};
use crate::error::{Error, Result};
use crate::geometry::Extent;

impl Files {
    /// Tells the core about the blocks `loc` carved since it last did.
    pub(super) fn claim_carved(&self, loc: &mut Locality) {
        if loc.unclaimed > 0 {
            self.alloc.claim_blocks(loc.unclaimed);
            loc.unclaimed = 0;
        }
    }

    /// Carves `len` blocks from locality chunk `slot` (the calling thread's shard, or the
    /// request's `locality`), replacing the chunk when it is too short. With `continues`
    /// (the end of the file's extent the request follows), carves only where the carve
    /// would start there: `None` otherwise (another file carved in between), and the caller
    /// places a window after the file's own extent instead. `None` too when no free run
    /// holds a new chunk of at least `len` blocks: the caller's window path then serves
    /// what it can.
    pub(super) fn carve_locality(
        &self,
        file: u64,
        len: u64,
        lifetime: Lifetime,
        (slot, continues): (usize, Option<u64>),
        commits: Commits,
    ) -> Result<Option<Extent>> {
        let shard = &self.registry.locality[slot];
        let mut loc = shard.lock();
        if continues.is_some_and(|at| !loc.current.is_some_and(|c| c.start == at && c.len >= len)) {
            return Ok(None);
        }
        if loc.current.is_none_or(|c| c.len < len) {
            // The smallest leftover that holds the request, as ext4 picks among its group
            // preallocations.
            let fit = (0..loc.leftovers.len())
                .filter(|&i| loc.leftovers[i].len >= len)
                .min_by_key(|&i| (loc.leftovers[i].len, loc.leftovers[i].start));
            if let Some(i) = fit {
                let piece = &mut loc.leftovers[i];
                let extent = Extent::new(piece.start, len);
                piece.start += len;
                piece.len -= len;
                loc.unclaimed += len;
                if loc.leftovers[i].len == 0 {
                    loc.leftovers.swap_remove(i);
                    self.claim_carved(&mut loc);
                }
                debug_assert!(self.alloc.is_reserved(extent), "carved blocks are reserved");
                return Ok(Some(extent));
            }
            let goal = loc.current.map(|c| c.end());
            self.claim_carved(&mut loc);
            if let Some(rest) = loc.current.take() {
                self.retire_locality(&mut loc, rest)?;
            }
            let want = self
                .alloc
                .policy()
                .locality_prealloc_blocks
                .max(len)
                .min(self.alloc.geometry().group_blocks);
            let mut req = AllocRequest::new(file, want)
                .min_len(len)
                .lifetime(lifetime);
            req.class_len = len;
            if let Some(g) = goal.filter(|&g| g < self.alloc.geometry().blocks_count) {
                req = req.goal(g);
            }
            loc.current = match self.reserve(&req, commits) {
                Ok(chunk) => Some(chunk),
                // No free run holds the request (a full, fragmented device): the file's own
                // path serves it, a window and then whatever run is free, as ext4 falls
                // back from a group preallocation to its regular allocator, which may
                // return fewer blocks than asked.
                Err(Error::NoSpace { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        let c = loc.current.as_mut().expect("chunk was just filled");
        let extent = Extent::new(c.start, len);
        c.start += len;
        c.len -= len;
        let used_up = c.len == 0;
        loc.unclaimed += len;
        if used_up {
            loc.current = None;
            self.claim_carved(&mut loc);
        }
        debug_assert!(self.alloc.is_reserved(extent), "carved blocks are reserved");
        Ok(Some(extent))
    }

    /// A chunk too short for a request: kept as a leftover for smaller files, or released
    /// (the smallest leftover goes when more than `locality_leftovers` would be kept).
    fn retire_locality(&self, loc: &mut Locality, rest: Extent) -> Result<()> {
        debug_assert!(
            self.alloc.is_reserved(rest),
            "a retired chunk's rest is reserved"
        );
        debug_assert!(
            loc.leftovers
                .iter()
                .all(|e| e.end() <= rest.start || rest.end() <= e.start),
            "a chunk's rest is retired once"
        );
        if self.alloc.policy().locality_leftovers == 0 {
            return self.alloc.release_reserved(rest);
        }
        loc.leftovers.push(rest);
        if loc.leftovers.len() > self.alloc.policy().locality_leftovers as usize {
            let (i, _) = loc
                .leftovers
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| (e.len, e.start))
                .expect("not empty");
            let smallest = loc.leftovers.swap_remove(i);
            self.alloc.release_reserved(smallest)?;
        }
        debug_assert!(loc.leftovers.len() <= self.alloc.policy().locality_leftovers as usize);
        Ok(())
    }

    /// Discards the chunk and leftovers of every locality shard not busy right now (for
    /// [`Files::discard_preallocations`]); returns the blocks released.
    pub(super) fn discard_localities(&self) -> u64 {
        let mut released = 0;
        for shard in self.registry.locality.iter() {
            if let Some(mut loc) = shard.try_lock() {
                self.claim_carved(&mut loc);
                let all: Vec<Extent> = loc.extents().collect();
                *loc = Locality::default();
                for rest in all {
                    self.alloc
                        .release_reserved(rest)
                        .expect("locality blocks are reserved");
                    released += rest.len;
                }
            }
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use crate::alloc::{AllocRequest, Allocator, Policy};
    use crate::files::{DataRequest, Files};
    use crate::geometry::{Extent, Geometry};

    /// A small file on a full, fragmented device (free space only in runs of 2 blocks):
    /// no locality chunk holds its 4 blocks, so its own path serves what it can, 2 blocks,
    /// as ext4's regular allocator does when a group preallocation cannot be made (a trace
    /// replay of such a device was refused before).
    #[test]
    fn a_small_file_without_a_run_for_a_chunk_gets_what_is_free() {
        let geometry = Geometry::new(4096, 64, 64).unwrap();
        let files =
            Files::new(Allocator::new(geometry, Policy::parse("extalloc").unwrap()).unwrap());
        let core = files.allocator();
        let all = core
            .allocate(&AllocRequest::new(1, 64).min_len(64))
            .unwrap();
        assert_eq!(all, Extent::new(0, 64));
        for start in (0..64).step_by(8) {
            core.free(Extent::new(start, 2)).unwrap();
        }
        core.commit();
        let file = files.create_file(7);
        let got = files
            .allocate_data_committing(&file, &DataRequest::new(0, 4))
            .expect("two blocks, not a refusal");
        assert_eq!(got.len, 2, "{got:?}");
        let rest = files
            .allocate_data_committing(&file, &DataRequest::new(2, 2))
            .unwrap();
        assert_eq!(rest.len, 2, "{rest:?}");
        files.check().unwrap();
    }
}
