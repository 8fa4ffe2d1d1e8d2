//! The least device that holds a volume: [`Volume::least_size`], for the message that
//! refuses a device too small ([`Error::VolumeTooSmall`](crate::Error::VolumeTooSmall))
//! and for `extalloc mkfs`.
//!
//! Data structures: none. Invariant: the size returned holds a volume made with those
//! options and one block less does not (found by making volumes on memory devices, so it
//! follows whatever a volume's first commit needs). Locks: none.

use super::state::Volume;
use crate::alloc::Policy;
use crate::disk::device::{Device, MemDevice};
use crate::disk::format::{default_journal_blocks, mkfs};
use crate::geometry::Geometry;
use std::sync::Arc;

/// Largest device [`Volume::least_size`] tries.
const LARGEST_TRIED: u64 = 1 << 30;

impl Volume {
    /// The least device size in bytes (whole blocks) on which a volume with blocks of
    /// `block_size`, groups of `group_blocks` and a journal of `journal_bytes` (`None`: the
    /// default, scaled to the device) can be made, or `None` when no device of up to 1 GiB
    /// holds one (such options are refused whatever the size, or need more). A volume
    /// needs a journal whose records hold its largest change; the default journal is an
    /// eighth of a small device. Costs a few dozen volumes made in memory (milliseconds).
    pub fn least_size(
        block_size: u32,
        group_blocks: u64,
        journal_bytes: Option<u64>,
    ) -> Option<u64> {
        let bs = u64::from(block_size);
        let works = |blocks: u64| {
            let bytes = blocks * bs;
            let Ok(geometry) = Geometry::new(block_size, group_blocks, blocks) else {
                return false;
            };
            let journal = journal_bytes.map_or_else(
                || default_journal_blocks(bytes, block_size),
                |j| j.div_ceil(bs),
            );
            let dev: Arc<dyn Device> = Arc::new(MemDevice::new(bytes));
            mkfs(dev.as_ref(), &geometry, journal, [0; 16])
                .and_then(|_| Volume::format(dev, Policy::default()))
                .and_then(Volume::close)
                .is_ok()
        };
        // The least working number of blocks lies in (fails, works]: doubled, then halved.
        let (mut fails, mut works_at) = (1u64, 16u64);
        while !works(works_at) {
            fails = works_at;
            works_at *= 2;
            if works_at * bs > LARGEST_TRIED {
                return None;
            }
        }
        while works_at - fails > 1 {
            let mid = fails + (works_at - fails) / 2;
            if works(mid) {
                works_at = mid;
            } else {
                fails = mid;
            }
        }
        debug_assert!(
            works(works_at) && !works(works_at - 1),
            "{works_at} blocks is the least"
        );
        Some(works_at * bs)
    }
}
