//! `extalloc torture`: random transactions on a fault-injecting device against a reference
//! model, with crashes; after each crash the device is reopened and checked.
//!
//! Each round: `--threads` threads allocate and free at random at once (each frees what the
//! model says is committed and not yet freed by anyone this round, or what it allocated
//! itself in the open transaction), then the
//! round commits with a payload naming it, or checkpoints, or crashes. A crash either
//! happens between operations or inside a commit (after 0 to 40 writes and flushes every
//! write fails, then power is lost with a random part of the unflushed writes kept, one of
//! them possibly torn). After
//! reopening: every committed allocation must be allocated (else `lost`), every block the
//! model holds free must be free (else `leaked`), `check()` must hold and the replayed
//! payloads must be the newest committed ones in order. A crash inside a commit may land
//! inside the checkpoint a full journal makes the commit run (docs/format.md).
//!
//! Each round also runs per-caller transactions (`Store::begin`) on every thread: each
//! allocates, frees committed blocks, then commits (its payload joins the model's), aborts,
//! or is left open as by a caller that died (its blocks must be free after the next
//! crash). One round in ten tries to open the device a second time: it must be refused.
//!
//! With discard notices (seeds 2 and 3 modulo 4), every round ends by taking the discards:
//! they must be exactly the blocks committed frees made reusable and not yet acknowledged;
//! seven in ten are acknowledged at once, the rest later or never (a crash). Until
//! acknowledged, a block handed out again counts as a double allocation; after a crash it
//! must be free.

use anyhow::{bail, Result};
use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::store::Store;
use extalloc::{AllocRequest, Extent, Geometry, Policy};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Default, serde::Serialize)]
pub struct Outcome {
    pub crashes: u64,
    pub recovered: u64,
    pub lost: u64,
    pub leaked: u64,
    pub double_allocated: u64,
    pub corrupt_detected: u64,
    pub commits: u64,
    pub checkpoints: u64,
    /// Per-caller transactions committed, aborted, and left open (never committed).
    pub handle_commits: u64,
    pub handle_aborts: u64,
    pub handles_left_open: u64,
    /// Second opens of the open device, all refused (one that succeeds stops the run).
    pub double_opens_refused: u64,
    /// Discard notices taken and acknowledged (extents), with notices on.
    pub discards_taken: u64,
    pub discards_acknowledged: u64,
    pub seconds: f64,
}

/// Every block the store's bitmaps mark used (pending frees count as used), read group by
/// group: for the small devices of the torture and the corruption campaign.
pub(crate) fn used_blocks(store: &Store) -> extalloc::Result<BTreeSet<u64>> {
    let a = store.allocator();
    let g = a.geometry();
    let mut used = BTreeSet::new();
    for grp in 0..g.groups_count() {
        let bytes = a.group_bitmap_bytes(grp, g.group_blocks.div_ceil(8) as usize)?;
        for i in 0..g.group_len(grp) {
            if bytes[(i / 8) as usize] & (1 << (i % 8)) != 0 {
                used.insert(g.group_start(grp) + i);
            }
        }
    }
    Ok(used)
}

/// What the torture believes the device holds.
struct Model {
    /// Blocks used right after mkfs (metadata).
    baseline: BTreeSet<u64>,
    /// Blocks owned by committed transactions.
    committed: BTreeSet<u64>,
    /// Payloads of the committed transactions, in order.
    payloads: Vec<Vec<u8>>,
    /// The open transaction across rounds (a round may end without a commit):
    /// `(allocated?, extent)`.
    open: Vec<(bool, Extent)>,
    /// Committed blocks a handle left open (never committed, never aborted) frees: no one
    /// else may free them until a crash ends that handle.
    limbo: BTreeSet<u64>,
    /// With discard notices on: blocks committed frees released and no discard
    /// acknowledged yet (held used), and the extents of them handed over.
    notices: bool,
    held: BTreeSet<u64>,
    handed: Vec<Extent>,
}

impl Model {
    /// The open transaction's changes become committed.
    fn commit_open(&mut self) {
        for (allocated, e) in std::mem::take(&mut self.open) {
            if allocated {
                self.committed.extend(e.start..e.end());
            } else {
                self.freed(e.start..e.end());
            }
        }
        self.open.clear();
    }

    /// Committed blocks freed by a durable record: held for a discard with notices on.
    fn freed(&mut self, blocks: impl Iterator<Item = u64>) {
        for b in blocks {
            self.committed.remove(&b);
            if self.notices {
                self.held.insert(b);
            }
        }
    }

    /// Committed blocks no one has freed in the open transaction: what workers may free.
    fn free_pool(&self) -> Vec<u64> {
        let freed_open: BTreeSet<u64> = self
            .open
            .iter()
            .filter(|(a, _)| !a)
            .flat_map(|(_, e)| e.start..e.end())
            .collect();
        self.committed
            .iter()
            .copied()
            .filter(|b| !freed_open.contains(b) && !self.limbo.contains(b))
            .collect()
    }

    /// Allocations of `ops` that hand out a block the model holds, or one handed out
    /// already in the open transaction or this round.
    fn double_allocations(&self, ops: &[(bool, Extent)]) -> u64 {
        let mut seen: BTreeSet<u64> = self
            .open
            .iter()
            .filter(|(a, _)| *a)
            .flat_map(|(_, e)| e.start..e.end())
            .collect();
        ops.iter()
            .filter(|(allocated, e)| {
                *allocated
                    && (e.start..e.end()).any(|b| {
                        self.committed.contains(&b)
                            || self.baseline.contains(&b)
                            || self.held.contains(&b)
                            || !seen.insert(b)
                    })
            })
            .count() as u64
    }

    /// After a reopen that replayed `records`: blocks `(lost, leaked)` against the model
    /// (an uncommitted transaction of a crash inside a commit may have survived whole, and
    /// then counts as committed), and the replayed payloads must be the newest committed
    /// ones in order.
    fn check_reopened(
        &mut self,
        reopened: &Store,
        records: &[extalloc::disk::journal::Record],
        round_payload: &[u8],
    ) -> Result<(u64, u64)> {
        reopened.allocator().check()?;
        let used = used_blocks(reopened).expect("a memory or fault device reads");
        let survived_whole = records.last().is_some_and(|r| {
            self.payloads.last().map(Vec::as_slice) != Some(&r.payload[..])
                && r.payload == round_payload
        });
        if survived_whole {
            self.commit_open();
            self.payloads.push(round_payload.to_vec());
        }
        let mut expect = self.baseline.clone();
        expect.extend(self.committed.iter().copied());
        let lost = expect.difference(&used).count() as u64;
        let leaked = used.difference(&expect).count() as u64;
        if lost + leaked == 0 {
            let tail = &self.payloads[self.payloads.len().saturating_sub(records.len())..];
            if records.len() > self.payloads.len()
                || records.iter().map(|r| &r.payload).ne(tail.iter())
            {
                bail!("replayed payloads out of order");
            }
        }
        self.open.clear();
        self.limbo.clear();
        self.held.clear();
        self.handed.clear();
        Ok((lost, leaked))
    }
}

/// One round's operations from `threads` threads at once: allocations, frees of blocks of
/// `pool` (committed, not yet freed), and frees of what the thread allocated itself in
/// this transaction. Returns `(allocated?, extent)` of each.
fn round_ops(
    store: &Store,
    pool: Vec<u64>,
    threads: usize,
    seed: u64,
    round: u64,
) -> Vec<(bool, Extent)> {
    let pool = Mutex::new(pool);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let pool = &pool;
                let mut r = rand::rngs::StdRng::seed_from_u64(seed ^ (round << 8) ^ t as u64);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..r.gen_range(1..12) {
                        let fresh: Vec<usize> = (0..mine.len())
                            .filter(|&i| {
                                let (allocated, e): (bool, Extent) = mine[i];
                                allocated && !mine.contains(&(false, e))
                            })
                            .collect();
                        if r.gen_bool(0.6) {
                            let len = r.gen_range(1..16);
                            if let Ok(e) = store.allocate(&AllocRequest::new(t as u64, len)) {
                                mine.push((true, e));
                            }
                        } else if !fresh.is_empty() && r.gen_bool(0.3) {
                            // Free what this transaction allocated: its record then holds
                            // both, which replay and checkpoints must order right.
                            let (_, e) = mine[fresh[r.gen_range(0..fresh.len())]];
                            store
                                .free(e)
                                .expect("a block allocated in this transaction frees");
                            mine.push((false, e));
                        } else {
                            let b = {
                                let mut p = pool.lock();
                                if p.is_empty() {
                                    continue;
                                }
                                let i = r.gen_range(0..p.len());
                                p.swap_remove(i)
                            };
                            store
                                .free(Extent::new(b, 1))
                                .expect("a committed block frees");
                            mine.push((false, Extent::new(b, 1)));
                        }
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker panicked"))
            .collect()
    })
}

/// What one per-caller transaction did: its record's sequence number and payload if it
/// committed, its allocations and its frees.
struct HandleRun {
    committed: Option<(u64, Vec<u8>)>,
    aborted: bool,
    allocs: Vec<Extent>,
    frees: Vec<u64>,
}

/// Every thread runs one to three per-caller transactions: allocations, frees of blocks of
/// `pool` (committed, freed by no one), then commit (7 in 10), abort (2 in 10) or nothing
/// (the handle is forgotten, as by a caller that died).
fn handle_round(
    store: &Store,
    pool: Vec<u64>,
    threads: usize,
    seed: u64,
    round: u64,
) -> Vec<HandleRun> {
    let pool = Mutex::new(pool);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let pool = &pool;
                let mut r = rand::rngs::StdRng::seed_from_u64(!seed ^ (round << 8) ^ t as u64);
                s.spawn(move || {
                    (0..r.gen_range(1..4))
                        .map(|k| {
                            one_handle(
                                store,
                                pool,
                                &mut r,
                                t,
                                format!("round {round} handle {t}.{k}"),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("handle worker panicked"))
            .collect()
    })
}

fn one_handle(
    store: &Store,
    pool: &Mutex<Vec<u64>>,
    r: &mut rand::rngs::StdRng,
    t: usize,
    payload: String,
) -> HandleRun {
    let h = store.begin();
    let mut run = HandleRun {
        committed: None,
        aborted: false,
        allocs: Vec::new(),
        frees: Vec::new(),
    };
    for _ in 0..r.gen_range(1..6) {
        if r.gen_bool(0.6) {
            if let Ok(e) = h.allocate(&AllocRequest::new(100 + t as u64, r.gen_range(1..8))) {
                run.allocs.push(e);
            }
        } else if let Some(b) = {
            let mut p = pool.lock();
            (!p.is_empty()).then(|| {
                let i = r.gen_range(0..p.len());
                p.swap_remove(i)
            })
        } {
            h.free(Extent::new(b, 1)).expect("a committed block frees");
            run.frees.push(b);
        }
    }
    match r.gen_range(0..10) {
        0..7 => {
            let seq = h.commit(payload.as_bytes()).expect("a handle commits");
            run.committed = Some((seq.seq, payload.into_bytes()));
        }
        7..9 => {
            h.abort().expect("a handle aborts");
            run.aborted = true;
        }
        _ => std::mem::forget(h),
    }
    run
}

/// One torture run's state: the device, the store open on it (none from a crash until the
/// reopen), what the model believes, the random source of the run's choices and the tally.
struct Torture {
    dev: Arc<FaultDevice<MemDevice>>,
    store: Option<Store>,
    model: Model,
    rng: rand::rngs::StdRng,
    seed: u64,
    out: Outcome,
}

impl Torture {
    /// A fresh store on a fault-injecting memory device, and a model of its metadata.
    fn new(seed: u64) -> Result<Self> {
        let geometry = Geometry::new(4096, 1024, 16384)?;
        let dev = Arc::new(FaultDevice::new(MemDevice::new(16384 * 4096), seed));
        let store = Store::create(dev.clone(), &geometry, 16, Policy::default())?;
        let model = Model {
            baseline: used_blocks(&store).expect("a memory device reads"),
            committed: BTreeSet::new(),
            payloads: Vec::new(),
            open: Vec::new(),
            limbo: BTreeSet::new(),
            notices: seed % 4 >= 2,
            held: BTreeSet::new(),
            handed: Vec::new(),
        };
        store.set_discard_notices(model.notices);
        Ok(Torture {
            dev,
            store: Some(store),
            model,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            seed,
            out: Outcome::default(),
        })
    }

    /// Ends a round: commits with `payload` (possibly failing inside the commit on
    /// purpose), checkpoints, or neither. Returns whether power is to be lost now.
    fn end_round(&mut self, payload: &[u8]) -> Result<bool> {
        let st = self.store.as_ref().expect("open");
        let action = self.rng.gen_range(0..10);
        let mut crash_now = action == 9;
        // A checkpoint needs a closed transaction: commit first.
        if action < 7 || action == 9 || (action < 9 && !self.model.open.is_empty()) {
            let in_commit = action == 9 && self.rng.gen_bool(0.5);
            if in_commit {
                // Fail somewhere inside the commit (or the checkpoint a full journal makes it
                // run): after 0 to 40 writes and flushes.
                self.dev.fail_after(self.rng.gen_range(0..40));
            }
            match st.commit(payload) {
                Ok(_) => {
                    self.out.commits += 1;
                    self.model.commit_open();
                    self.model.payloads.push(payload.to_vec());
                }
                Err(_) if in_commit => crash_now = true,
                Err(e) => bail!("commit failed without an injected fault: {e}"),
            }
        }
        // Even seeds checkpoint explicitly ten times less often: there the checkpoints
        // full journals force inside commits do most of the work, and a reopen often
        // replays records written after one.
        let checkpoint = (7..9).contains(&action) && (self.seed % 2 == 1 || self.rng.gen_bool(0.1));
        if checkpoint && self.model.open.is_empty() {
            st.checkpoint()?;
            self.out.checkpoints += 1;
            if self.rng.gen_bool(0.5) {
                // Drop every clean bitmap: later rounds reload them from their home copies.
                st.drop_idle_bitmaps(0);
                st.drop_idle_bitmaps(0);
            }
        }
        Ok(crash_now)
    }

    /// Round `round`'s per-caller transactions, into the model; and one round in ten, a
    /// second open of the device, which must be refused.
    fn handles(&mut self, round: u64) -> Result<()> {
        let st = self.store.as_ref().expect("open");
        let mut runs = handle_round(st, self.model.free_pool(), 2, self.seed, round);
        // Committed ones in the order of their records. An aborted handle's blocks were
        // free again at once (a later handle may hold them): only committed ones are
        // checked against the model, each when its record applies.
        runs.sort_by_key(|h| h.committed.as_ref().map_or(u64::MAX, |(seq, _)| *seq));
        for h in runs {
            match h.committed {
                Some((_, payload)) => {
                    let allocated: Vec<(bool, Extent)> =
                        h.allocs.iter().map(|&e| (true, e)).collect();
                    self.out.double_allocated += self.model.double_allocations(&allocated);
                    self.out.handle_commits += 1;
                    for e in h.allocs {
                        self.model.committed.extend(e.start..e.end());
                    }
                    self.model.freed(h.frees.into_iter());
                    self.model.payloads.push(payload);
                }
                None if h.aborted => self.out.handle_aborts += 1,
                None => {
                    self.out.handles_left_open += 1;
                    self.model.limbo.extend(h.frees);
                }
            }
        }
        if self.rng.gen_bool(0.1) {
            match Store::open(self.dev.clone(), Policy::default()) {
                Err(extalloc::Error::DeviceBusy { .. }) => self.out.double_opens_refused += 1,
                Err(e) => bail!("round {round}: a second open failed, but not as busy: {e}"),
                Ok(_) => bail!("round {round}: a second open of an open device succeeded"),
            }
        }
        Ok(())
    }

    /// Takes the discard notices: with those handed over before and not acknowledged, they
    /// must be exactly the held blocks. Acknowledges seven in ten of everything handed.
    fn discards(&mut self, round: u64) -> Result<()> {
        let st = self.store.as_ref().expect("open");
        let taken = st.take_discards();
        self.out.discards_taken += taken.len() as u64;
        self.model.handed.extend(taken);
        let handed: BTreeSet<u64> = self
            .model
            .handed
            .iter()
            .flat_map(|e| e.start..e.end())
            .collect();
        let count: u64 = self.model.handed.iter().map(|e| e.len).sum();
        if handed != self.model.held || count != handed.len() as u64 {
            bail!(
                "round {round}: the discard notices ({count} blocks handed over) are not the \
                 {} blocks committed frees released",
                self.model.held.len()
            );
        }
        let mut kept = Vec::new();
        for e in std::mem::take(&mut self.model.handed) {
            if self.rng.gen_bool(0.7) {
                st.discarded(e)?;
                self.out.discards_acknowledged += 1;
                (e.start..e.end()).for_each(|b| {
                    self.model.held.remove(&b);
                });
            } else {
                kept.push(e);
            }
        }
        self.model.handed = kept;
        Ok(())
    }

    /// Power loss in round `round` (whose commit carried `payload`), then the reopen and its
    /// check against the model. Returns false when they disagree: the run stops there.
    fn crash_and_reopen(&mut self, round: u64, payload: &[u8]) -> Result<bool> {
        let out = &mut self.out;
        out.crashes += 1;
        // Power is lost: nothing more reaches the device, not even the superblock a clean
        // close writes and flushes at drop; the crash then keeps what it keeps.
        self.dev.fail_writes(true);
        drop(self.store.take());
        self.dev.crash(Crash::Random {
            keep: self.rng.gen_range(0.0..1.0),
            tear: self.rng.gen_bool(0.5),
        })?;
        let (reopened, records) = match Store::open(self.dev.clone(), Policy::default()) {
            Ok(x) => x,
            Err(e) => {
                out.corrupt_detected += 1;
                bail!("crash {}: the device did not reopen: {e}", out.crashes);
            }
        };
        let (lost, leaked) = self
            .model
            .check_reopened(&reopened, &records, payload)
            .map_err(|e| anyhow::anyhow!("crash {}: {e}", out.crashes))?;
        out.lost += lost;
        out.leaked += leaked;
        if lost + leaked > 0 {
            // The model and the device disagree from here on: stop and say where.
            eprintln!(
                "crash {} (round {round}): {lost} blocks lost, {leaked} leaked; replayed {} records",
                out.crashes,
                records.len()
            );
            return Ok(false);
        }
        out.recovered += 1;
        reopened.set_discard_notices(self.model.notices);
        self.store = Some(reopened);
        Ok(true)
    }
}

pub fn run(crashes: u64, seed: u64, threads: usize) -> Result<Outcome> {
    let started = Instant::now();
    let mut t = Torture::new(seed)?;
    let mut round = 0u64;
    while t.out.crashes < crashes {
        round += 1;
        let st = t.store.as_ref().expect("open");
        let ops = round_ops(st, t.model.free_pool(), threads, seed, round);
        t.out.double_allocated += t.model.double_allocations(&ops);
        t.model.open.extend(ops);
        t.handles(round)?;
        let payload = format!("round {round}").into_bytes();
        if !t.end_round(&payload)? {
            t.discards(round)?;
        } else if !t.crash_and_reopen(round, &payload)? {
            break;
        }
    }
    t.out.seconds = started.elapsed().as_secs_f64();
    Ok(t.out)
}
