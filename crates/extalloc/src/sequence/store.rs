//! The sequence fuzzer of the [`Store`]: weighted random events (allocate, free part of an
//! extent, commit, a caller's own transaction committed or aborted, checkpoint, power
//! loss, reopen, misuse) against a model of every block's state, under a random valid
//! policy. After every event each block's `is_free` is compared with the model, and so
//! are the free and pending counts of `statfs` and the allocator's own check.
//!
//! Data structures: [`StoreRunner`]: the device, the store, `state` (one byte per block:
//! `FREE`, `DURABLE` (allocated by a committed transaction), `NEW` (allocated in the open
//! shared transaction), `PENDING_D` / `PENDING_N` (a durable or new block freed in the
//! open transaction: held used until it commits), `META` (never free)), `held` (the
//! extents handed out and not freed, each wholly durable or wholly new) and `pending`
//! (the extents freed in the open transaction). Invariant: a commit makes new blocks
//! durable and pending ones free; a power loss makes new blocks free and pending durable
//! ones durable again (the journal holds only committed records); no block is handed out
//! while the model holds it. Locks: none (one thread).

use super::input::{random_policy, Input, Setup};
use super::runner::{Failure, Summary};
use crate::alloc::{AllocRequest, Policy};
use crate::disk::device::{Crash, FaultDevice, MemDevice};
use crate::error::Error;
use crate::geometry::{Extent, Geometry};
use crate::store::Store;
use std::sync::Arc;

const FREE: u8 = 0;
const DURABLE: u8 = 1;
const NEW: u8 = 2;
const PENDING_D: u8 = 3;
const PENDING_N: u8 = 4;
const META: u8 = 5;

type Step = std::result::Result<(), String>;

/// The store, its device and the model (see the module documentation).
pub struct StoreRunner {
    dev: Arc<FaultDevice<MemDevice>>,
    store: Option<Store>,
    policy: Policy,
    state: Vec<u8>,
    held: Vec<Extent>,
    pending: Vec<Extent>,
    /// What this run did.
    pub summary: Summary,
}

/// Runs the store sequence `bytes` decode to (the setup, a policy, events until the bytes
/// end).
pub fn run_store(bytes: &[u8]) -> std::result::Result<Summary, Failure> {
    let mut input = Input::new(bytes);
    let setup = Setup::decode(&mut input);
    let policy = random_policy(&mut input);
    let fail = |event, what: String, policy: &Policy, message| Failure {
        event,
        what,
        policy: policy.name.clone(),
        setup,
        message,
    };
    let mut r = StoreRunner::new(setup, policy.clone())
        .map_err(|m| fail(0, "create".into(), &policy, m))?;
    let mut index = 0;
    while !input.exhausted() {
        index += 1;
        let kind = input.u8() % 36;
        let (a, b) = (input.u16(), input.u16());
        r.summary.events += 1;
        r.step(kind, a, b).and_then(|()| r.verify()).map_err(|m| {
            fail(
                index,
                format!("store event {kind} ({a}, {b})"),
                &r.policy,
                m,
            )
        })?;
    }
    Ok(r.summary)
}

impl StoreRunner {
    /// A new store on a new device of `setup`'s shape.
    pub fn new(setup: Setup, policy: Policy) -> std::result::Result<StoreRunner, String> {
        let geometry = Geometry::new(setup.block_size, setup.group_blocks, setup.blocks)
            .map_err(|e| format!("geometry: {e}"))?;
        let bytes = setup.blocks * u64::from(setup.block_size);
        let dev = Arc::new(FaultDevice::new(MemDevice::new(bytes), setup.seed));
        let store = Store::create(dev.clone(), &geometry, setup.journal_blocks, policy.clone())
            .map_err(|e| format!("create: {e}"))?;
        let view = store.allocator();
        let state = (0..setup.blocks)
            .map(|b| match view.is_free(b) {
                Ok(true) => FREE,
                _ => META,
            })
            .collect();
        Ok(StoreRunner {
            dev,
            store: Some(store),
            policy,
            state,
            held: Vec::new(),
            pending: Vec::new(),
            summary: Summary {
                runs: 1,
                ..Summary::default()
            },
        })
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("open between events")
    }

    fn set(&mut self, e: Extent, from: &[u8], to: u8) -> Step {
        for b in e.start..e.end() {
            let s = &mut self.state[b as usize];
            if !from.contains(s) {
                return Err(format!(
                    "block {b} of {e:?} is in state {s}, not one of {from:?}"
                ));
            }
            *s = to;
        }
        Ok(())
    }

    /// One event: `kind` picks it (weights out of 36), `a` and `b` are its numbers.
    fn step(&mut self, kind: u8, a: u16, b: u16) -> Step {
        match kind {
            0..=11 => self.allocate(a, b),
            12..=19 => self.free(a, b),
            20..=23 => self.commit(),
            24..=28 => self.txn(a, b),
            29 => self.checkpoint(),
            30..=32 => self.power_loss(a),
            33 => self.power_loss(0x100),
            _ => self.misuse(a),
        }
    }

    fn allocate(&mut self, a: u16, b: u16) -> Step {
        // Up to a group (a longer request is refused: an extent lies in one group).
        let group = self.store().geometry().group_blocks;
        let len = if a.is_multiple_of(8) {
            1 + u64::from(b) % group
        } else {
            1 + u64::from(b) % 48
        };
        match self
            .store()
            .allocate(&AllocRequest::new(u64::from(a % 16), len))
        {
            Ok(e) => {
                self.set(e, &[FREE], NEW)
                    .map_err(|m| format!("an allocation handed out a held block: {m}"))?;
                self.held.push(e);
            }
            Err(Error::NoSpace { .. }) | Err(Error::TransactionTooLarge { .. }) => {
                self.summary.no_space += 1;
            }
            Err(e) => return Err(format!("allocate: {e}")),
        }
        Ok(())
    }

    /// Frees part of a held extent in the shared transaction.
    fn free(&mut self, a: u16, b: u16) -> Step {
        if self.held.is_empty() {
            self.summary.skipped += 1;
            return Ok(());
        }
        let i = usize::from(a) % self.held.len();
        let e = self.held[i];
        let off = u64::from(b) % e.len;
        let len = 1 + u64::from(a >> 4) % (e.len - off);
        let part = Extent::new(e.start + off, len);
        match self.store().free(part) {
            Ok(()) => {}
            Err(Error::TransactionTooLarge { .. }) => return Ok(()),
            Err(err) => return Err(format!("free of {part:?}: {err}")),
        }
        let durable = self.state[part.start as usize] == DURABLE;
        let to = if durable { PENDING_D } else { PENDING_N };
        self.set(part, &[DURABLE, NEW], to)?;
        self.held.swap_remove(i);
        for piece in [
            Extent::new(e.start, off),
            Extent::new(part.end(), e.end() - part.end()),
        ] {
            if piece.len > 0 {
                self.held.push(piece);
            }
        }
        self.pending.push(part);
        Ok(())
    }

    fn commit(&mut self) -> Step {
        self.store()
            .commit(b"sequence")
            .map_err(|e| format!("commit: {e}"))?;
        self.summary.commits += 1;
        for s in &mut self.state {
            *s = match *s {
                NEW => DURABLE,
                PENDING_D | PENDING_N => FREE,
                other => other,
            };
        }
        self.pending.clear();
        Ok(())
    }

    /// A caller's own transaction: a few allocations and a free of a wholly durable held
    /// extent, then a commit (its allocations durable, its frees free at once) or an
    /// abort (its allocations free again, its frees cancelled).
    fn txn(&mut self, a: u16, b: u16) -> Step {
        let store = self.store.as_ref().expect("open");
        let t = store.begin();
        let mut allocs = Vec::new();
        for k in 0..1 + a % 3 {
            match t.allocate(&AllocRequest::new(
                100 + u64::from(k),
                1 + u64::from(b % 24),
            )) {
                Ok(e) => allocs.push(e),
                Err(Error::NoSpace { .. }) => self.summary.no_space += 1,
                Err(e) => return Err(format!("a handle's allocate: {e}")),
            }
        }
        let durable = |e: &Extent, st: &[u8]| (e.start..e.end()).all(|x| st[x as usize] == DURABLE);
        let victim = b
            .is_multiple_of(2)
            .then(|| self.held.iter().position(|e| durable(e, &self.state)))
            .flatten();
        if let Some(i) = victim {
            t.free(self.held[i])
                .map_err(|e| format!("a handle's free: {e}"))?;
        }
        for &e in &allocs {
            for x in e.start..e.end() {
                if self.state[x as usize] != FREE || store.allocator().is_free(x) != Ok(false) {
                    return Err(format!("a handle's allocation {e:?} took a held block {x}"));
                }
            }
        }
        let committed = if !a.is_multiple_of(4) {
            t.commit(b"handle")
                .map_err(|failed| format!("a handle's commit: {failed}"))?;
            true
        } else {
            t.abort().map_err(|e| format!("a handle's abort: {e}"))?;
            false
        };
        self.finish_txn(committed, allocs, victim)
    }

    fn finish_txn(&mut self, committed: bool, allocs: Vec<Extent>, victim: Option<usize>) -> Step {
        if committed {
            self.summary.commits += 1;
            for e in allocs {
                self.set(e, &[FREE], DURABLE)?;
                self.held.push(e);
            }
            if let Some(i) = victim {
                let e = self.held.swap_remove(i);
                self.set(e, &[DURABLE], FREE)?;
            }
        }
        Ok(())
    }

    /// A checkpoint: refused while the shared transaction holds changes.
    fn checkpoint(&mut self) -> Step {
        let open = self
            .state
            .iter()
            .any(|&s| matches!(s, NEW | PENDING_D | PENDING_N));
        match (self.store().checkpoint(), open) {
            (Ok(()), false) => Ok(()),
            (Err(Error::TransactionOpen { .. }), true) => {
                self.summary.misuses += 1;
                Ok(())
            }
            (r, open) => Err(format!("checkpoint with changes open {open}: {r:?}")),
        }
    }

    /// Power loss (`how` 0x100: a reopen without one): writes fail, the store is dropped,
    /// the device crashes, the store opens again; only committed records count.
    fn power_loss(&mut self, how: u16) -> Step {
        self.dev.fail_writes(true);
        drop(self.store.take());
        let crash = match how {
            0x100 => Crash::KeepAll,
            h if h % 2 == 0 => Crash::DropAll,
            h => Crash::Random {
                keep: f64::from(h % 8) / 8.0,
                tear: h & 8 != 0,
            },
        };
        self.dev.crash(crash).map_err(|e| format!("crash: {e}"))?;
        self.summary.crashes += 1;
        let (store, _) = Store::open(self.dev.clone(), self.policy.clone())
            .map_err(|e| format!("open after a loss: {e}"))?;
        self.store = Some(store);
        for s in &mut self.state {
            *s = match *s {
                NEW | PENDING_N => FREE,
                PENDING_D => DURABLE,
                other => other,
            };
        }
        let state = &self.state;
        self.held.retain(|e| state[e.start as usize] == DURABLE);
        for e in std::mem::take(&mut self.pending) {
            if state[e.start as usize] == DURABLE {
                self.held.push(e);
            }
        }
        Ok(())
    }

    /// Calls the store must refuse, changing nothing.
    fn misuse(&mut self, a: u16) -> Step {
        let free = self.state.iter().position(|&s| s == FREE);
        let (what, result): (&str, _) = match (a % 3, free) {
            (0, Some(b)) => (
                "a free of a free block",
                self.store().free(Extent::new(b as u64, 1)),
            ),
            (1, _) => (
                "an allocation of no blocks",
                self.store().allocate(&AllocRequest::new(1, 0)).map(|_| ()),
            ),
            _ => ("a free of metadata", self.store().free(Extent::new(0, 1))),
        };
        match result {
            Err(Error::NotAllocated { .. })
            | Err(Error::DoubleFree { .. })
            | Err(Error::ZeroLength)
            | Err(Error::MetadataBlocks { .. }) => {
                self.summary.misuses += 1;
                Ok(())
            }
            other => Err(format!("{what} returned {other:?}")),
        }
    }

    /// Every block's `is_free`, the free and pending counts, the allocator's check.
    pub fn verify(&self) -> Step {
        let store = self.store();
        let view = store.allocator();
        for (b, &s) in self.state.iter().enumerate() {
            let free = view
                .is_free(b as u64)
                .map_err(|e| format!("is_free({b}): {e}"))?;
            if free != (s == FREE) {
                return Err(format!("block {b}: is_free {free}, the model's state {s}"));
            }
        }
        let count = |want: &[u8]| self.state.iter().filter(|s| want.contains(s)).count() as u64;
        let st = store.statfs();
        if st.free_blocks != count(&[FREE]) || st.pending_blocks != count(&[PENDING_D, PENDING_N]) {
            return Err(format!(
                "statfs free {} pending {}, the model's {} and {}",
                st.free_blocks,
                st.pending_blocks,
                count(&[FREE]),
                count(&[PENDING_D, PENDING_N])
            ));
        }
        view.check().map_err(|e| format!("allocator check: {e}"))
    }
}
