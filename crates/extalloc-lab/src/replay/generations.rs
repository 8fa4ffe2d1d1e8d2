//! Inode generations (rule `reuse` of `docs/replay.md`: a reused inode number is a new
//! file): [`number_generations`] renames every event's inode number to a file key, once, in
//! trace order, before any replay, serial or threaded.
//!
//! # Data structures
//!
//! - Per inode number, its current generation (how many of its lives have ended).
//! - The inode numbers whose current life has held data, and a [`KernelModel`] of the
//!   kernel's decisions: without inode events a life ends at a discard once the kernel holds
//!   no data block of the inode, and a discard before any data (an open) ends nothing.
//!
//! # Invariant
//!
//! ```text
//! an event's file key = its inode number | (lives of that number ended before it) << INO_BITS
//! ```
//!
//! No locks: one pass on one thread.

use super::engine::{KernelModel, Rules};
use super::parse::{Event, Traced};
use anyhow::{bail, Result};
use std::collections::HashMap;

/// Bits of a file key that hold the inode number; the generation sits above them.
pub const INO_BITS: u32 = 40;

/// Renames every event's inode to a file key `ino | generation << INO_BITS`, where the
/// generation counts the earlier lives of that inode number in the trace (rule `reuse`).
/// With inode events a life ends at `ext4_free_inode`; without them, at a discard of
/// preallocations once the kernel holds no data block of the inode (a deletion, or a
/// truncation to zero). Done once, in trace order, before any replay: the threads of a
/// threaded replay see inode births, deaths and writes of one file in no fixed order.
/// Returns how many lives ended.
pub fn number_generations(events: &mut [Traced], rules: &Rules) -> Result<u64> {
    let mut generation: HashMap<u64, u64> = HashMap::new();
    // Inodes whose current life has held data: a discard before any (the open of a new
    // file) ends nothing.
    let mut had_data: std::collections::HashSet<u64> = Default::default();
    let mut kernel = KernelModel::default();
    let mut ended = 0u64;
    for t in events.iter_mut() {
        let Some(ino) = t.event.ino_mut() else {
            continue;
        };
        if *ino >= 1 << INO_BITS {
            bail!("inode number {} is past 2^{INO_BITS}", *ino);
        }
        let raw = *ino;
        let g = generation.get(&raw).copied().unwrap_or(0);
        *ino = raw | g << INO_BITS;
        let life_ends = match t.event {
            Event::Allocate {
                block,
                len,
                lblk,
                flags,
                ..
            } => {
                kernel.allocate(block, len, raw, lblk, flags.data);
                if flags.data {
                    had_data.insert(raw);
                }
                false
            }
            Event::Free { block, count, .. } => {
                kernel.free(block, count);
                false
            }
            Event::InodeFree { .. } => rules.traced_inode_frees,
            Event::Discard { .. } => {
                !rules.traced_inode_frees
                    && had_data.contains(&raw)
                    && kernel.data_blocks_of(raw) == 0
            }
            _ => false,
        };
        if life_ends && rules.new_file_on_reuse {
            had_data.remove(&raw);
            generation.insert(raw, g + 1);
            ended += 1;
        }
    }
    Ok(ended)
}
