//! The fuzzer's state and results: [`Runner`] (the device, the volume, the model, counts),
//! [`Counted`] (the device under the volume, counting flushes), [`Summary`] and [`Failure`].
//! The events that change a `Runner` live in `steps.rs`, `put.rs` and `crash.rs`, the loop
//! in the parent module; this file names none of them.

use super::input::Setup;
use super::model::Model;
use crate::alloc::Policy;
use crate::disk::device::{Device, FaultDevice, MemDevice};
use crate::error::Result;
use crate::volume::Volume;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The device under the volume: a fault-injecting memory device whose flushes are counted.
pub struct Counted {
    /// The device that crashes.
    pub fault: Arc<FaultDevice<MemDevice>>,
    pub(super) flushes: AtomicU64,
}

impl Counted {
    /// `fault`, its flushes counted from 0.
    pub fn new(fault: Arc<FaultDevice<MemDevice>>) -> Counted {
        Counted {
            fault,
            flushes: AtomicU64::new(0),
        }
    }

    /// Flushes so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Relaxed)
    }
}

impl Device for Counted {
    fn size(&self) -> u64 {
        self.fault.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.fault.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.fault.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.flushes.fetch_add(1, Relaxed);
        self.fault.flush()
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Runs (volumes made).
    pub runs: u64,
    /// Events run.
    pub events: u64,
    /// Events that named a file when none existed (nothing to do).
    pub skipped: u64,
    /// Calls that failed with `NoSpace` (and left what their documentation says).
    pub no_space: u64,
    /// Syncs, checkpoints and closes that failed with `NoSpace` (a full device leaves no
    /// room for the volume's table or map segments).
    pub no_space_commits: u64,
    /// Truncates, punches and unlinks that failed with `NoSpace` (the commit they made
    /// room with ran into a checkpoint without space).
    pub no_space_freeing: u64,
    /// Commits the volume made by itself inside a call.
    pub commits_inside: u64,
    /// Syncs, checkpoints and closes.
    pub commits: u64,
    /// Power losses.
    pub crashes: u64,
    /// Of those, ones that kept some unflushed writes.
    pub crashes_keeping: u64,
    /// Reopens without a power loss (dropped, or closed).
    pub reopens: u64,
    /// Misuses refused as documented.
    pub misuses: u64,
    /// Syncs whose flush failed as Linux's does, each followed by a power loss.
    pub failed_flushes: u64,
}

impl Summary {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Summary) {
        self.runs += other.runs;
        self.events += other.events;
        self.skipped += other.skipped;
        self.no_space += other.no_space;
        self.no_space_commits += other.no_space_commits;
        self.no_space_freeing += other.no_space_freeing;
        self.commits_inside += other.commits_inside;
        self.commits += other.commits;
        self.crashes += other.crashes;
        self.crashes_keeping += other.crashes_keeping;
        self.reopens += other.reopens;
        self.misuses += other.misuses;
        self.failed_flushes += other.failed_flushes;
    }
}

/// Where and why a run failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Index of the event (0 = setting up).
    pub event: u64,
    /// The event, as `Debug` shows it.
    pub what: String,
    /// The policy in force.
    pub policy: String,
    /// The device.
    pub setup: Setup,
    /// What did not hold.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "event {} ({}) under policy {} on {:?}: {}",
            self.event, self.what, self.policy, self.setup, self.message
        )
    }
}

/// The interpreter: a volume, its device and the model (see the module documentation).
pub struct Runner {
    pub(super) setup: Setup,
    pub(super) dev: Arc<Counted>,
    pub(super) vol: Option<Volume>,
    pub(super) policy: Policy,
    pub(super) model: Model,
    /// The last file unlinked (misuse names it).
    pub(super) unlinked: Option<u64>,
    /// Files a put or replacement left pending (a failed call whose own unlink failed, or
    /// an old file only whose freeing failed): hidden, removed at the next open.
    pub(super) leftovers: std::collections::BTreeSet<u64>,
    /// What this run did.
    pub summary: Summary,
}
