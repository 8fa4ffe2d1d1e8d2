//! What a caller asks for, how it is validated, and one allocation in progress.
//!
//! # Data structures
//!
//! - [`AllocRequest`]: plain data the caller builds: the file, the logical offset, the length
//!   wanted and the least accepted, an optional goal block, a lifetime hint and the length
//!   that decides the size class.
//! - [`AllocContext`]: the request and what the core decided about it before scanning
//!   (stream or not, its stream-goal slot, its size-class tag) with the thread's stats shard.
//!   It lives on the stack for the length of one allocation.
//!
//! # Invariant
//!
//! A request that reaches the passes is valid: `1 <= min_len <= len <= group_blocks`, and its
//! goal, if any, is a block of the device. [`AllocRequest::validate`] checks this first; a
//! bad request changes nothing.
//!
//! # Lock order
//!
//! None: nothing here takes a lock.

use super::class::{self, Lifetime, SizeClass};
use super::stats::Shard;
use crate::error::{Error, Result};
use crate::geometry::Geometry;

/// What a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRequest {
    /// The file (or object) the blocks are for; hashed to pick a stream goal.
    pub file: u64,
    /// Logical block offset of the request in the file (decides stream allocation).
    pub logical: u64,
    /// Blocks wanted.
    pub len: u64,
    /// Fewest blocks the caller accepts (passes 3 and 5 may return fewer than `len`).
    pub min_len: u64,
    /// Preferred first block, usually the block after the file's previous extent.
    pub goal: Option<u64>,
    /// Expected lifetime: the second key of size classes.
    pub lifetime: Lifetime,
    /// Length (blocks) that decides the size class; 0 = `len`. A normalised request passes
    /// the caller's original length here, so preallocation does not change its class.
    pub class_len: u64,
    /// Fewest blocks taken at the exact goal; 0 = all of `len`. A speculative window (an
    /// append's, grown with its file) asks for a shorter contiguous run here rather than
    /// leaving the file's end for a place where all of it fits.
    pub goal_min_len: u64,
    /// Blocks the caller needs from the request's first block (ext4's original request,
    /// `ac_o_ex`, beside the normalised `ac_g_ex`); 0 = `min_len`. A normalised window asks
    /// for `len`, accepts `min_len`, and needs this much: pass 3 never trims the request
    /// below it, and with indexed slow passes a best fit of this length is searched before
    /// a shorter run is taken. Read through [`AllocRequest::need`] (clamped to
    /// `min_len ..= len`).
    pub need_len: u64,
}

impl AllocRequest {
    /// A request for `len` blocks for `file`, accepting any length down to one block.
    pub fn new(file: u64, len: u64) -> Self {
        AllocRequest {
            file,
            logical: 0,
            len,
            min_len: 1,
            goal: None,
            lifetime: Lifetime::Unknown,
            class_len: 0,
            goal_min_len: 0,
            need_len: 0,
        }
    }

    /// Sets the lifetime hint.
    pub fn lifetime(mut self, lifetime: Lifetime) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// Sets the preferred first block.
    pub fn goal(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self
    }

    /// Sets the logical block offset in the file.
    pub fn logical(mut self, logical: u64) -> Self {
        self.logical = logical;
        self
    }

    /// Sets the fewest blocks accepted (1 to `len`).
    pub fn min_len(mut self, min_len: u64) -> Self {
        self.min_len = min_len;
        self
    }

    /// Sets the fewest blocks taken at the exact goal (at least `min_len`, at most `len`;
    /// 0 = all of `len`).
    pub fn goal_min_len(mut self, blocks: u64) -> Self {
        self.goal_min_len = blocks;
        self
    }

    /// Sets the blocks the caller needs (from `min_len` to `len`; 0 = `min_len`).
    pub fn need_len(mut self, blocks: u64) -> Self {
        self.need_len = blocks;
        self
    }

    /// The blocks the caller needs: `need_len` within `min_len ..= len`, or `min_len`.
    pub fn need(&self) -> u64 {
        match self.need_len {
            0 => self.min_len,
            n => n.clamp(self.min_len, self.len),
        }
    }

    /// Insist on all of `len`.
    pub fn exact(mut self) -> Self {
        self.min_len = self.len;
        self
    }

    /// Checks the request against the device: a length from 1 to a group, `min_len` from 1
    /// to `len`, a goal on the device.
    pub(super) fn validate(&self, geometry: &Geometry) -> Result<()> {
        if self.len == 0 {
            return Err(Error::ZeroLength);
        }
        if self.len > geometry.group_blocks {
            return Err(Error::ExtentTooLong {
                len: self.len,
                group_blocks: geometry.group_blocks,
            });
        }
        if self.min_len == 0 || self.min_len > self.len {
            return Err(Error::InvalidMinLen {
                min_len: self.min_len,
                len: self.len,
            });
        }
        if self.goal_min_len != 0 && !(self.min_len..=self.len).contains(&self.goal_min_len) {
            return Err(Error::InvalidGoalMinLen {
                goal_min_len: self.goal_min_len,
                min_len: self.min_len,
                len: self.len,
            });
        }
        if let Some(goal) = self.goal {
            if goal >= geometry.blocks_count {
                return Err(Error::OutOfRange {
                    start: goal,
                    len: 1,
                    device_blocks: geometry.blocks_count,
                });
            }
        }
        Ok(())
    }

    /// The request's size-class tag and the index of its size class, for blocks of
    /// `block_size` bytes: decided by `class_len` (or `len`) and the lifetime hint.
    #[inline]
    pub(super) fn size_class(&self, block_size: u32) -> (u8, u64) {
        let class_len = if self.class_len == 0 {
            self.len
        } else {
            self.class_len
        };
        let bytes = class_len.saturating_mul(u64::from(block_size));
        let size = SizeClass::of_bytes(bytes);
        (class::tag(size, self.lifetime), size as u64)
    }
}

/// One allocation in progress: the request and what was decided about it so far.
pub(super) struct AllocContext<'a> {
    pub request: &'a AllocRequest,
    /// A large file's request: it starts at, and moves, the stream goal.
    pub stream: bool,
    /// The file's stream goal.
    pub slot: usize,
    /// Size-class tag of the request (0 when size classes are off).
    pub class_tag: u8,
    pub shard: &'a Shard,
}
