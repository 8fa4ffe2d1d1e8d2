//! A fuzzer of operation sequences for the [`Volume`], in the manner of TigerBeetle's
//! `free_set_fuzz`: weighted random events (create, write, fallocate in every mode, punch,
//! truncate, unlink, atomic put and replace, sync, checkpoint, power loss, reopen, close
//! and open, misuse) run
//! against a trivial model ([`Model`]: each file's bytes), under a random valid
//! [`Policy`], on a small fault-injecting device. After every event the interpreter
//! compares the list of files, every file's size and bytes read back, the ownership
//! check ([`Volume::check`], which runs the allocator's own check) and the allocator's
//! counters (`free + allocated + reserved + pending = blocks`); after a power loss the
//! volume must read what `docs/volume.md` promises (`crash.rs`); `close` is followed by the
//! store's `fsck` of the device. Errors must be the documented ones: `NoSpace` where a call
//! allocates (and the call leaves a prefix of its chunks done, or nothing: `steps.rs`),
//! `NoSuchFile`, `ZeroLength`, `PastLargestFile`, `AttrTooLarge` and `TransactionOpen` for
//! misuse (each the precise cause, `steps.rs` and `store.rs`).
//!
//! Runs are decoded from bytes ([`run`]), so a proptest (`tests/sequence.rs`), a cargo-fuzz
//! target (`fuzz/fuzz_targets/volume_ops.rs`) and a long run (`sequence_long` in the same
//! test file) share the interpreter. Not part of the library's interface (hidden).
//!
//! Data structures (`runner.rs`): [`Runner`] (the device, the volume, the model, counts),
//! [`Counted`] (the device under the volume, counting flushes: a flush during a call that
//! is not a sync means the volume committed by itself inside it), [`Summary`], [`Failure`].
//! This file runs the loop; the children never name it.
//!
//! Invariant: between events the model's `current` is exactly what the volume reads, and
//! `durable` what a power loss that drops every unflushed write leaves. Locks: none of
//! its own (one thread calls the volume).

mod crash;
mod input;
mod model;
mod put;
mod runner;
mod steps;
mod store;

pub use input::{policy_keys, random_policy, Event, Input, Setup};
pub use model::{pattern, Model};
pub use runner::{Counted, Failure, Runner, Summary};
pub use store::{run_store, StoreRunner};

use crate::alloc::Policy;
use crate::disk::device::{FaultDevice, MemDevice};
use crate::geometry::Geometry;
use crate::volume::Volume;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Runs the sequence `bytes` decode to: the setup and the policy, then events until the
/// bytes end, then `close` and an open whose files must be the model's.
pub fn run(bytes: &[u8]) -> std::result::Result<Summary, Failure> {
    let mut input = Input::new(bytes);
    let setup = Setup::decode(&mut input);
    let policy = random_policy(&mut input);
    let fail = |policy: &Policy, message: String| Failure {
        event: 0,
        what: "mkfs".into(),
        policy: policy.name.clone(),
        setup,
        message,
    };
    let mut r = Runner::new(setup, policy.clone()).map_err(|m| fail(&policy, m))?;
    let mut index = 0;
    let trace = std::env::var_os("SEQUENCE_TRACE").is_some();
    while let Some(event) = Event::decode(&mut input, |f| r.size_of(f)) {
        index += 1;
        if trace {
            let id = r.pick(event_file(&event));
            eprintln!(
                "{index}: {event:?} (file {id:?}, flushes {})",
                r.dev.flushes.load(Relaxed)
            );
        }
        r.step(&event).map_err(|message| Failure {
            event: index,
            what: format!("{event:?}"),
            policy: r.policy.name.clone(),
            setup,
            message,
        })?;
    }
    r.finish().map_err(|message| Failure {
        event: index + 1,
        what: "the final close and open".into(),
        policy: r.policy.name.clone(),
        setup,
        message,
    })?;
    Ok(r.summary)
}

/// The rank of the file `event` names (0 if none).
fn event_file(event: &Event) -> u8 {
    match event {
        Event::Write { file, .. }
        | Event::Fallocate { file, .. }
        | Event::Truncate { file, .. }
        | Event::Unlink { file }
        | Event::Misuse { file, .. }
        | Event::Put { file, .. } => *file,
        _ => 0,
    }
}

/// Clean files the fuzzer's volumes keep in memory: one, so every checkpoint drops the
/// others and the events after it read them back from the file tree.
pub(crate) const FILE_CACHE: usize = 1;

/// `len` random bytes from `seed`: a run of about `len / 8` events.
pub fn random_input(seed: u64, len: usize) -> Vec<u8> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

impl Runner {
    /// A new volume on a new device of `setup`'s shape.
    pub fn new(setup: Setup, policy: Policy) -> std::result::Result<Runner, String> {
        let geometry = Geometry::new(setup.block_size, setup.group_blocks, setup.blocks)
            .map_err(|e| format!("geometry: {e}"))?;
        let bytes = setup.blocks * u64::from(setup.block_size);
        let fault = Arc::new(FaultDevice::new(MemDevice::new(bytes), setup.seed));
        let dev = Arc::new(Counted::new(fault));
        let vol = Volume::mkfs(dev.clone(), &geometry, setup.journal_blocks, policy.clone())
            .map_err(|e| format!("mkfs: {e}"))?;
        vol.set_file_cache(FILE_CACHE);
        Ok(Runner {
            setup,
            dev,
            vol: Some(vol),
            policy,
            model: Model::default(),
            unlinked: None,
            leftovers: Default::default(),
            summary: Summary {
                runs: 1,
                ..Summary::default()
            },
        })
    }

    fn vol(&self) -> &Volume {
        self.vol
            .as_ref()
            .expect("the volume is open between events")
    }

    /// The id of the file of rank `rank` (modulo the count), if any file exists.
    fn pick(&self, rank: u8) -> Option<u64> {
        let n = self.model.current.len();
        (n > 0).then(|| {
            *self
                .model
                .current
                .keys()
                .nth(usize::from(rank) % n)
                .expect("in range")
        })
    }

    /// The size of the file of rank `rank` (0 if none).
    fn size_of(&self, rank: u8) -> u64 {
        self.pick(rank)
            .map_or(0, |id| self.model.current[&id].len() as u64)
    }

    /// Runs `event` on the volume and the model, then compares them.
    pub fn step(&mut self, event: &Event) -> std::result::Result<(), String> {
        self.summary.events += 1;
        let flushes = self.dev.flushes.load(Relaxed);
        let touched = self.apply(event)?;
        match touched {
            steps::Touched::Committed => {
                self.summary.commits += 1;
                self.model.commit_all();
            }
            steps::Touched::File(id, before) => {
                if self.dev.flushes.load(Relaxed) != flushes {
                    self.summary.commits_inside += 1;
                    self.model.commit_inside(id, before);
                } else {
                    self.model.touched(id);
                }
            }
            steps::Touched::Nothing => {
                // A refused call may have made room first (a commit of what came before).
                if self.dev.flushes.load(Relaxed) != flushes {
                    self.summary.commits_inside += 1;
                    self.model.commit_all();
                }
            }
            steps::Touched::Reopened | steps::Touched::Accounted => {}
        }
        self.verify()?;
        if self.model.since_versions() > model::MAX_SINCE_VERSIONS {
            // Bounds the versions kept: a sync the interpreter adds.
            self.vol().sync().map_err(|e| format!("sync: {e}"))?;
            self.model.commit_all();
            self.verify()?;
        }
        Ok(())
    }

    /// Closes the volume, checks the device with `fsck`, opens it again and compares.
    pub fn finish(&mut self) -> std::result::Result<(), String> {
        let policy = self.policy.clone();
        self.close_open(policy)?;
        self.verify()
    }

    /// Compares the volume with the model: the files, each one's size and bytes, the
    /// ownership check and the allocator's counters.
    pub fn verify(&self) -> std::result::Result<(), String> {
        let vol = self.vol();
        let list = vol.list();
        let ids: Vec<u64> = list.iter().map(|f| f.id).collect();
        let want: Vec<u64> = self.model.current.keys().copied().collect();
        if ids != want {
            return Err(format!(
                "the volume lists files {ids:?}, the model {want:?}"
            ));
        }
        for f in &list {
            let bytes = &self.model.current[&f.id];
            if f.size != bytes.len() as u64 {
                return Err(format!(
                    "file {} is {} bytes, the model's {}",
                    f.id,
                    f.size,
                    bytes.len()
                ));
            }
            let back = vol
                .read(f.id, 0, f.size)
                .map_err(|e| format!("read of file {}: {e}", f.id))?;
            if let Some(i) = model::first_difference(&back, bytes) {
                return Err(format!(
                    "file {}: byte {i} of {} reads {:#04x}, the model holds {:#04x}",
                    f.id,
                    bytes.len(),
                    back[i],
                    bytes[i]
                ));
            }
        }
        let pending = vol.pending();
        if pending.iter().any(|id| !self.leftovers.contains(id)) {
            return Err(format!(
                "files {pending:?} are left pending after the event (leftovers of failed \
                 puts: {:?})",
                self.leftovers
            ));
        }
        let check = vol.check().map_err(|e| format!("check: {e}"))?;
        // Pending leftovers are files the check counts and no listing shows.
        let hidden: u64 = pending
            .iter()
            .map(|&id| {
                vol.extents(id)
                    .map_or(0, |e| e.iter().map(|x| x.extent.len).sum())
            })
            .sum();
        let mapped: u64 = list.iter().map(|f| f.blocks).sum::<u64>() + hidden;
        let files = (list.len() + pending.len()) as u64;
        if !check.clean() || check.files != files || check.blocks_mapped != mapped {
            return Err(format!(
                "the ownership check is not clean or disagrees with the list \
                 ({} files, {mapped} blocks mapped): {check:?}",
                list.len()
            ));
        }
        self.counters()
    }

    /// The allocator's counters: `free + allocated + reserved + pending = blocks` (the
    /// accounting invariant, `docs/architecture.md`; reserved: preallocations and the
    /// volume's node reserve), statfs agreeing with the allocator.
    fn counters(&self) -> std::result::Result<(), String> {
        let store = self.vol().store();
        let view = store.allocator();
        let s = store.statfs();
        let (free, allocated, reserved, pending) = (
            view.free_blocks(),
            view.allocated_blocks(),
            view.reserved_blocks() + store.metadata_reserved_blocks(),
            view.pending_free_blocks(),
        );
        if free != s.free_blocks
            || free + allocated + reserved + pending != s.blocks
            || s.pending_blocks + s.discard_held_blocks != pending
        {
            return Err(format!(
                "counters: free {free} + allocated {allocated} + reserved {reserved} + \
                 pending {pending} != {} blocks, or statfs disagrees: {s:?}",
                s.blocks
            ));
        }
        Ok(())
    }
}
