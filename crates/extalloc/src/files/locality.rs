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

use super::{Commits, Files};
use crate::alloc::{AllocRequest, Lifetime};
use crate::error::Result;
use crate::geometry::Extent;

/// One shard's locality preallocation.
#[derive(Default)]
pub(crate) struct Locality {
    /// The chunk small files carve from, front first.
    pub(crate) current: Option<Extent>,
    /// Ends of earlier chunks too short for the request that retired them, kept (at most
    /// `locality_leftovers`) for smaller files, as ext4 keeps its group preallocations.
    pub(crate) leftovers: Vec<Extent>,
    /// Blocks carved to files that the core still counts as reserved.
    pub(crate) unclaimed: u64,
}

impl Locality {
    pub(crate) fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        self.current.iter().chain(self.leftovers.iter()).copied()
    }
}

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
    /// places a window after the file's own extent instead.
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
            loc.current = Some(self.reserve(&req, commits)?);
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
        Ok(())
    }
}
