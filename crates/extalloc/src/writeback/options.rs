//! The writeback options ([`WritebackOptions`], [`Affinity`]) and the figures a [`Buffered`]
//! reports ([`WritebackStats`], [`ContextStats`], the free space `df` shows:
//! [`free_and_available`]): plain values, no state.
//!
//! [`Buffered`]: super::Buffered

use crate::error::{Error, Result};
use crate::store::Statfs;
use std::time::Duration;

/// A write is cached and throttled in pieces of at most this many blocks (1 MiB of 4 KiB).
pub(super) const WRITE_PIECE_BLOCKS: u64 = 256;

/// Which context a file's dirty data goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Affinity {
    /// The context owning the group the file's next allocation is predicted to land in.
    Group,
    /// A context by file id (the seed's per-inode affinity).
    File,
    /// One queue served by every context: any context may allocate anywhere.
    None,
}

impl std::str::FromStr for Affinity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Affinity> {
        match s {
            "group" => Ok(Affinity::Group),
            "file" => Ok(Affinity::File),
            "none" => Ok(Affinity::None),
            _ => Err(Error::InvalidSetting {
                setting: "writeback affinity",
                value: format!("'{s}'"),
                expected: "give one of group, file, none".into(),
            }),
        }
    }
}

/// The knobs of a [`Buffered`](super::Buffered) volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritebackOptions {
    /// Contexts wanted; 0 for the bound `min(groups, cpus x contexts_per_cpu)`. More than
    /// the bound is cut to it.
    pub contexts: usize,
    /// `k` of the bound: contexts per CPU at most (default 2).
    pub contexts_per_cpu: usize,
    /// Where a file's dirty data goes (default [`Affinity::Group`]).
    pub affinity: Affinity,
    /// The hard limit in bytes: a writer that finds this much cached waits (default 256 MiB).
    pub dirty_limit_bytes: u64,
    /// Writeback starts above this many cached bytes; 0 for half the hard limit.
    pub background_bytes: u64,
    /// Cached data older than this is written back (default 30 s, as `dirty_expire`).
    pub expire: Duration,
}

impl Default for WritebackOptions {
    fn default() -> Self {
        WritebackOptions {
            contexts: 0,
            contexts_per_cpu: 2,
            affinity: Affinity::Group,
            dirty_limit_bytes: 256 << 20,
            background_bytes: 0,
            expire: Duration::from_secs(30),
        }
    }
}

impl WritebackOptions {
    /// The contexts these options give on a device of `groups` groups and a machine of
    /// `cpus` CPUs: `contexts` (or the bound when 0), cut to `min(groups, cpus x k)`.
    pub fn contexts_for(&self, groups: u64, cpus: usize) -> usize {
        let bound = (cpus.max(1) as u64)
            .saturating_mul(self.contexts_per_cpu.max(1) as u64)
            .min(groups.max(1)) as usize;
        match self.contexts {
            0 => bound,
            n => n.min(bound),
        }
    }

    pub(super) fn validate(&self, block_size: u64) -> Result<()> {
        let piece = WRITE_PIECE_BLOCKS * block_size;
        if self.dirty_limit_bytes < 2 * piece {
            return Err(Error::InvalidSetting {
                setting: "writeback dirty limit",
                value: format!("{} bytes", self.dirty_limit_bytes),
                expected: format!("give at least {} bytes (two write pieces)", 2 * piece),
            });
        }
        if self.background_bytes > self.dirty_limit_bytes {
            return Err(Error::InvalidSetting {
                setting: "writeback background threshold",
                value: format!("{} bytes", self.background_bytes),
                expected: format!(
                    "give at most the dirty limit, {} bytes",
                    self.dirty_limit_bytes
                ),
            });
        }
        if self.contexts_per_cpu == 0 {
            return Err(Error::InvalidSetting {
                setting: "writeback contexts per CPU",
                value: "0".into(),
                expected: "give at least 1".into(),
            });
        }
        if self.expire.is_zero() {
            return Err(Error::InvalidSetting {
                setting: "writeback expire age",
                value: "0 s".into(),
                expected: "give a non-zero age".into(),
            });
        }
        Ok(())
    }
}

/// One context's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ContextStats {
    /// Writeback trips (each one dirty run, allocated whole).
    pub runs: u64,
    /// Bytes written back.
    pub bytes: u64,
    /// Extents its trips mapped.
    pub allocations: u64,
    /// Lock waits (group, global, cache locks) counted on its thread while writing back.
    pub lock_waits: u64,
}

/// The figures of a [`Buffered`](super::Buffered) volume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct WritebackStats {
    /// Contexts (worker threads) running.
    pub contexts: usize,
    /// Bytes cached now.
    pub dirty_bytes: u64,
    /// Most bytes cached at once.
    pub dirty_peak_bytes: u64,
    /// The hard limit.
    pub dirty_limit_bytes: u64,
    /// Blocks reserved on the volume for cached data.
    pub reserved_blocks: u64,
    /// Per context.
    pub per_context: Vec<ContextStats>,
    /// Trips run by callers (`fsync`, `truncate`, `fallocate`), not by a context.
    pub caller: ContextStats,
    /// Times a file's data went to another context than the one before.
    pub context_switches: u64,
    /// Writes that waited at the hard limit, and how long in all.
    pub throttled_writes: u64,
    /// Nanoseconds writers waited at the hard limit.
    pub throttled_ns: u64,
    /// Checkpoints a call ran before trying again because a space check failed while
    /// files held cached data's reservations (the room they hold comes back once written:
    /// the device is near full).
    pub space_checkpoints: u64,
}

impl WritebackStats {
    /// Every trip, context or caller.
    pub fn total(&self) -> ContextStats {
        let mut t = self.caller.clone();
        for c in &self.per_context {
            t.runs += c.runs;
            t.bytes += c.bytes;
            t.allocations += c.allocations;
            t.lock_waits += c.lock_waits;
        }
        t
    }

    /// Allocations (extents mapped) per MiB written back.
    pub fn allocations_per_mib(&self) -> f64 {
        let t = self.total();
        t.allocations as f64 / (t.bytes as f64 / f64::from(1 << 20)).max(f64::MIN_POSITIVE)
    }
}

/// The free and available blocks of a volume's raw `statfs` `s` with `cached` blocks
/// reserved for cached data and `kept` for metadata, counting the blocks freed since the
/// last commit: the reservations, the superuser's share and the room kept come off the
/// sum, not off each part (taken off the committed part alone, which saturates at zero, a
/// full volume's `rm` showed the whole file available until the commit).
pub(super) fn free_and_available(s: &Statfs, cached: u64, kept: u64) -> (u64, u64) {
    let free = (s.free_blocks + s.pending_blocks).saturating_sub(cached);
    let available = (s.free_blocks + s.prealloc_reserved_blocks + s.pending_blocks)
        .saturating_sub(s.root_reserved_blocks + cached + kept);
    debug_assert!(
        available <= free + s.prealloc_reserved_blocks,
        "available is free"
    );
    (free, available)
}
