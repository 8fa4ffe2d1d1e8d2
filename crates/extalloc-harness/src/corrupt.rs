//! `extalloc torture --corrupt N`: a corruption campaign against images whose in-use blocks
//! are known.
//!
//! Each image is built on a fault-injecting memory device by a seeded run of transactions
//! (allocations, frees of committed extents, commits with payloads, some checkpoints); one
//! image in four is left mid-checkpoint (the checkpoint's writes start failing after a few,
//! then power is lost keeping a random part of what was not flushed). The ground truth is the
//! set of blocks in use: the device's metadata and every committed allocation not freed by a
//! committed free. The undamaged image is opened once: its used blocks must be exactly the
//! ground truth (else the campaign stops: the image, not the damage, is wrong).
//!
//! Each damage copies the image and hits one region (the superblock, the backup superblock,
//! the used part of the journal, the descriptor table, the bitmaps) with one kind of damage
//! (a flipped byte, a zeroed 4 KiB block, a block of random bytes), or truncates the device.
//! Then, each under a panic guard and a time limit:
//!
//! - `fsck` reads the damaged image;
//! - `open` opens it (read-write) and, if it succeeds, allocates until the device is full.
//!
//! Counted (all must be zero but `damages`): `panics`; `hangs` (a step past the time limit);
//! `fsck_missed`: fsck called the image clean while open produced something else than on the
//! undamaged image (a refusal, or a different set of used blocks); `handed_in_use`: an
//! allocation after a successful open handed out a block of the ground truth.
//!
//! Data structures: an `Image` (bytes, ground truth, the undamaged open's used set) per
//! image, judged by one of `WORKERS` threads into an outcome of its own (`by_image`, which
//! `torture_fs_damage` uses too); the outcomes are merged in image order. No shared state
//! between steps. Locks: the list of finished images' outcomes, a leaf held for one push.

use crate::torture::used_blocks;
use anyhow::{bail, Context, Result};
use extalloc::disk::device::{Crash, Device, FaultDevice, MemDevice};
use extalloc::disk::format;
use extalloc::store::Store;
use extalloc::{AllocRequest, Error, Extent, Geometry, Policy};
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The campaign's device: 32 MiB in 4 KiB blocks, 8 groups, a 64 KiB journal (small, so
/// the runs fill it and checkpoint).
const BLOCK: u64 = 4096;
const BLOCKS: u64 = 8192;
const GROUP_BLOCKS: u64 = 1024;
const JOURNAL_BLOCKS: u64 = 16;
/// Damages per image.
const DAMAGES_PER_IMAGE: u64 = 8;
/// Images judged at once (`by_image`): their steps mostly sleep (see there), so more than
/// the cores.
const WORKERS: u64 = 4;
/// Longest any one step (fsck, or open + fill) may take.
const STEP_LIMIT: Duration = Duration::from_secs(20);

/// The verdict (`--json`).
#[derive(Debug, Default, serde::Serialize)]
pub struct CorruptOutcome {
    pub damages: u64,
    pub panics: u64,
    pub hangs: u64,
    pub fsck_missed: u64,
    pub handed_in_use: u64,
    /// Damages fsck reported (a problem, or an error reading the image).
    pub fsck_detected: u64,
    /// Damages open refused.
    pub open_refused: u64,
    /// Damages after which open succeeded with the undamaged image's used blocks.
    pub open_unchanged: u64,
    /// Damages per region (`superblock`, `backup`, `journal`, `descriptors`, `bitmaps`,
    /// `truncate`).
    pub damages_by_region: std::collections::BTreeMap<String, u64>,
    pub images: u64,
    pub images_mid_checkpoint: u64,
    pub seed: u64,
    pub seconds: f64,
    /// The first failures (at most 20), to reproduce: seed, image, damage, what happened.
    pub failures: Vec<String>,
}

impl CorruptOutcome {
    /// True if nothing that must be zero is not.
    pub fn passed(&self) -> bool {
        self.panics == 0 && self.hangs == 0 && self.fsck_missed == 0 && self.handed_in_use == 0
    }

    fn fail(&mut self, what: String) {
        note(&mut self.failures, what);
    }

    /// Adds the outcome of one more image (`one_image`) to the campaign's.
    fn merge(&mut self, one: CorruptOutcome) {
        // Every field named: one added to the outcome is merged, or said not to be.
        let CorruptOutcome {
            damages,
            panics,
            hangs,
            fsck_missed,
            handed_in_use,
            fsck_detected,
            open_refused,
            open_unchanged,
            damages_by_region,
            images,
            images_mid_checkpoint,
            seed: _,
            seconds: _,
            failures,
        } = one;
        self.damages += damages;
        self.panics += panics;
        self.hangs += hangs;
        self.fsck_missed += fsck_missed;
        self.handed_in_use += handed_in_use;
        self.fsck_detected += fsck_detected;
        self.open_refused += open_refused;
        self.open_unchanged += open_unchanged;
        for (region, n) in damages_by_region {
            *self.damages_by_region.entry(region).or_default() += n;
        }
        self.images += images;
        self.images_mid_checkpoint += images_mid_checkpoint;
        for f in failures {
            note(&mut self.failures, f);
        }
    }

    /// The value of a step that finished; a panic or a hang is counted (and `None`).
    fn settle<T>(&mut self, step: Step<T>, tag: &str, what: &str) -> Option<T> {
        let counts = (&mut self.panics, &mut self.hangs);
        settle(step, counts, &mut self.failures, &format!("{tag}: {what}"))
    }
}

/// Keeps `what` among the first 20 failures.
pub(crate) fn note(failures: &mut Vec<String>, what: String) {
    if failures.len() < 20 {
        failures.push(what);
    }
}

/// The value of a step that finished; a panic or a hang is counted in `(panics, hangs)`
/// and noted (and `None`).
pub(crate) fn settle<T>(
    step: Step<T>,
    (panics, hangs): (&mut u64, &mut u64),
    failures: &mut Vec<String>,
    what: &str,
) -> Option<T> {
    match step {
        Step::Done(v) => Some(v),
        Step::Panicked(p) => {
            *panics += 1;
            note(failures, format!("{what} panicked: {p}"));
            None
        }
        Step::Hung => {
            *hangs += 1;
            note(failures, format!("{what} hung"));
            None
        }
    }
}

/// An image and what it holds.
struct Image {
    bytes: Vec<u8>,
    truth: BTreeSet<u64>,
    /// Used blocks after opening the undamaged image.
    used: BTreeSet<u64>,
    sb: format::Superblock,
}

/// Where a damage lands.
#[derive(Debug, Clone, Copy)]
enum Region {
    Superblock,
    Backup,
    Journal,
    Descriptors,
    Bitmaps,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    FlipByte,
    ZeroBlock,
    RandomBlock,
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Hit(Region, Kind, u64),
    Truncate(u64),
}

/// Runs `damages` damages (rounded up to whole images of `DAMAGES_PER_IMAGE`) from
/// `seed`, reporting progress on stderr every image.
pub fn run(damages: u64, seed: u64) -> Result<CorruptOutcome> {
    if damages == 0 {
        bail!("--corrupt 0: give the number of damages to make (e.g. --corrupt 1000)");
    }
    let started = Instant::now();
    let mut out = CorruptOutcome {
        seed,
        ..CorruptOutcome::default()
    };
    let images = damages.div_ceil(DAMAGES_PER_IMAGE);
    let outcomes = by_image(images, |i| {
        let one = one_image(
            seed,
            i,
            DAMAGES_PER_IMAGE.min(damages - i * DAMAGES_PER_IMAGE),
        )?;
        eprintln!(
            "image {}/{images}: {} damages, {} detected by fsck, {} refused by open",
            i + 1,
            one.damages,
            one.fsck_detected,
            one.open_refused
        );
        Ok(one)
    })?;
    for one in outcomes {
        out.merge(one);
    }
    debug_assert_eq!(out.damages, damages, "every damage made once");
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

/// `judge(i)` of images `0..images`, in image order; the first error in image order.
///
/// Images are independent, so `WORKERS` threads take them in turn: most of a campaign's
/// time is spent asleep, in opens that watch a damaged owner record for its heartbeat (two
/// intervals and a second, `store/claim.rs`), which one thread would wait out one after
/// another. Each image's outcome is its own, merged by the caller in image order: a seed
/// gives the same verdict, failures listed in the same order, whatever the interleaving.
pub(crate) fn by_image<O: Send>(
    images: u64,
    judge: impl Fn(u64) -> Result<O> + Sync,
) -> Result<Vec<O>> {
    let next = AtomicU64::new(0);
    let finished = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(images) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= images {
                    break;
                }
                let one = judge(i);
                finished
                    .lock()
                    .expect("held for a push only")
                    .push((i, one));
            });
        }
    });
    let mut finished = finished.into_inner().expect("held for a push only");
    finished.sort_by_key(|(i, _)| *i);
    debug_assert!(
        finished.iter().map(|(i, _)| *i).eq(0..images),
        "every image once"
    );
    finished.into_iter().map(|(_, one)| one).collect()
}

/// Image `i` of the campaign of `seed` and its `damages` damages: a campaign's outcome of
/// one image.
fn one_image(seed: u64, i: u64, damages: u64) -> Result<CorruptOutcome> {
    let mut out = CorruptOutcome {
        seed,
        ..CorruptOutcome::default()
    };
    let image_seed = seed.wrapping_mul(1_000_003).wrapping_add(i);
    let mid_checkpoint = i % 4 == 3;
    let image = build_image(image_seed, mid_checkpoint)
        .with_context(|| format!("building image {i} (seed {image_seed})"))?;
    out.images = 1;
    out.images_mid_checkpoint = u64::from(mid_checkpoint);
    let mut rng = rand::rngs::StdRng::seed_from_u64(image_seed ^ 0x5eed);
    for d in 0..damages {
        let damage = pick_damage(&mut rng, &image.sb, image.bytes.len() as u64);
        let tag = format!("seed {seed} image {i} damage {d}: {damage:?}");
        judge(&image, damage, rng.gen(), &tag, &mut out);
    }
    Ok(out)
}

/// Builds an image by a seeded run of transactions; with `mid_checkpoint`, the last
/// checkpoint is interrupted by a power loss.
fn build_image(seed: u64, mid_checkpoint: bool) -> Result<Image> {
    let geometry = Geometry::new(BLOCK as u32, GROUP_BLOCKS, BLOCKS)?;
    let dev = Arc::new(FaultDevice::new(MemDevice::new(BLOCKS * BLOCK), seed));
    let store = Store::create(dev.clone(), &geometry, JOURNAL_BLOCKS, Policy::default())?;
    let sb = format::read_superblock(dev.as_ref())?;
    let mut truth: BTreeSet<u64> = (0..sb.metadata_end()).chain([sb.backup_block()]).collect();
    let mut held: Vec<Extent> = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for round in 0..rng.gen_range(20..60u32) {
        let mut freed = Vec::new();
        let mut got = Vec::new();
        for _ in 0..rng.gen_range(1..12) {
            if !held.is_empty() && rng.gen_bool(0.4) {
                let e = held.swap_remove(rng.gen_range(0..held.len()));
                store.free(e)?;
                freed.push(e);
            } else {
                match store.allocate(&AllocRequest::new(rng.gen(), rng.gen_range(1..48))) {
                    Ok(e) => got.push(e),
                    Err(Error::NoSpace { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        store.commit(&round.to_le_bytes())?;
        for e in &freed {
            (e.start..e.end()).for_each(|b| {
                truth.remove(&b);
            });
        }
        for e in &got {
            truth.extend(e.start..e.end());
        }
        held.extend(got);
        if rng.gen_bool(0.15) {
            store.checkpoint()?;
        }
    }
    if mid_checkpoint {
        dev.fail_after(rng.gen_range(1..12));
        // Expected to fail: the device stops taking writes part way.
        let _ = store.checkpoint();
    }
    drop(store);
    dev.crash(Crash::Random {
        keep: 0.5,
        tear: rng.gen_bool(0.5),
    })?;
    let mut bytes = vec![0u8; (BLOCKS * BLOCK) as usize];
    dev.read_at(&mut bytes, 0)?;
    let (store, _) = Store::open(image_device(&bytes), Policy::default())
        .context("opening the undamaged image")?;
    let used = used_blocks(&store)?;
    store.allocator().check()?;
    if used != truth {
        let lost = truth.difference(&used).count();
        let leaked = used.difference(&truth).count();
        bail!("the undamaged image does not hold its ground truth: {lost} blocks lost, {leaked} leaked");
    }
    let sb = format::read_superblock(image_device(&bytes).as_ref())?;
    Ok(Image {
        bytes,
        truth,
        used,
        sb,
    })
}

pub(crate) fn image_device(bytes: &[u8]) -> Arc<dyn Device> {
    let dev = MemDevice::new(bytes.len() as u64);
    dev.write_at(bytes, 0)
        .expect("a memory device takes its size");
    Arc::new(dev)
}

fn pick_damage(rng: &mut impl Rng, sb: &format::Superblock, len: u64) -> Damage {
    if rng.gen_ratio(1, 12) {
        return Damage::Truncate(rng.gen_range(1..len / BLOCK) * BLOCK);
    }
    let region = match rng.gen_range(0..10) {
        0 => Region::Superblock,
        1 => Region::Backup,
        2..=4 => Region::Journal,
        5..=6 => Region::Descriptors,
        _ => Region::Bitmaps,
    };
    let (first, count) = match region {
        Region::Superblock => (0, 1),
        Region::Backup => (sb.backup_block(), 1),
        Region::Journal => (sb.journal_start, sb.journal_blocks),
        Region::Descriptors => (sb.desc_start, sb.bitmap_start - sb.desc_start),
        Region::Bitmaps => (sb.bitmap_start, sb.metadata_end() - sb.bitmap_start),
    };
    let kind = match rng.gen_range(0..3) {
        0 => Kind::FlipByte,
        1 => Kind::ZeroBlock,
        _ => Kind::RandomBlock,
    };
    Damage::Hit(region, kind, first + rng.gen_range(0..count.max(1)))
}

fn damaged(image: &Image, damage: Damage, noise: u64) -> Vec<u8> {
    let mut bytes = image.bytes.clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(noise);
    match damage {
        Damage::Truncate(at) => bytes.truncate(at as usize),
        Damage::Hit(_, kind, block) => {
            let at = (block * BLOCK) as usize;
            let b = &mut bytes[at..at + BLOCK as usize];
            match kind {
                Kind::FlipByte => b[rng.gen_range(0..BLOCK as usize)] ^= rng.gen_range(1..=255u8),
                Kind::ZeroBlock => b.fill(0),
                Kind::RandomBlock => rng.fill(b),
            }
        }
    }
    bytes
}

/// What one step found.
pub(crate) enum Step<T> {
    Done(T),
    Panicked(String),
    Hung,
}

/// Runs `f` on its own thread under a panic guard and [`STEP_LIMIT`]. A hung thread is left
/// behind (it holds only its own copy of the image).
pub(crate) fn guarded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Step<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(STEP_LIMIT) {
        Ok(Ok(v)) => Step::Done(v),
        Ok(Err(p)) => Step::Panicked(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into()),
        ),
        Err(_) => Step::Hung,
    }
}

/// What open did with a damaged image.
enum Opened {
    Refused(String),
    /// Used blocks after open, and blocks of the ground truth handed out after it.
    Opened(BTreeSet<u64>, Vec<u64>),
}

fn open_and_fill(bytes: Vec<u8>, truth: BTreeSet<u64>) -> Opened {
    let store = match Store::open(image_device(&bytes), Policy::default()) {
        Ok((s, _)) => s,
        Err(e) => return Opened::Refused(e.to_string()),
    };
    let used = match used_blocks(&store) {
        Ok(u) => u,
        Err(e) => return Opened::Refused(format!("reading bitmaps after open: {e}")),
    };
    let mut in_use = Vec::new();
    let mut i = 0u64;
    while let Ok(e) = store.allocate(&AllocRequest::new(i, 64)) {
        in_use.extend((e.start..e.end()).filter(|b| truth.contains(b)));
        i += 1;
    }
    Opened::Opened(used, in_use)
}

/// Damages a copy of `image`, runs fsck and open on it, and counts what they did.
fn judge(image: &Image, damage: Damage, noise: u64, tag: &str, out: &mut CorruptOutcome) {
    out.damages += 1;
    let region = match damage {
        Damage::Hit(region, _, _) => format!("{region:?}").to_lowercase(),
        Damage::Truncate(_) => "truncate".into(),
    };
    *out.damages_by_region.entry(region).or_default() += 1;
    let bytes = damaged(image, damage, noise);
    let for_fsck = bytes.clone();
    let fsck = guarded(move || {
        let dev = image_device(&for_fsck);
        extalloc::store::fsck::check(dev.as_ref()).map(|r| r.clean())
    });
    let Some(fsck) = out.settle(fsck, tag, "fsck") else {
        return;
    };
    // An error reading the image is a report too.
    let fsck_clean = fsck.unwrap_or(false);
    out.fsck_detected += u64::from(!fsck_clean);
    let truth = image.truth.clone();
    let Some(opened) = out.settle(guarded(move || open_and_fill(bytes, truth)), tag, "open") else {
        return;
    };
    let changed = match &opened {
        Opened::Refused(why) => {
            out.open_refused += 1;
            Some(format!("open refused: {why}"))
        }
        Opened::Opened(used, in_use) => {
            if !in_use.is_empty() {
                out.handed_in_use += 1;
                out.fail(format!(
                    "{tag}: {} in-use blocks handed out after open (first {})",
                    in_use.len(),
                    in_use[0]
                ));
            }
            if *used == image.used {
                out.open_unchanged += 1;
                None
            } else {
                Some(format!(
                    "open produced {} used blocks instead of {}",
                    used.len(),
                    image.used.len()
                ))
            }
        }
    };
    if let (true, Some(what)) = (fsck_clean, changed) {
        out.fsck_missed += 1;
        out.fail(format!("{tag}: fsck called it clean, but {what}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The campaign's machinery: every damage is counted once, by region; the same seed
    /// gives the same verdict; metadata damage is seen. (Whether a campaign passes is its
    /// verdict, reported by `extalloc torture --corrupt`, not an assumption of this test.)
    #[test]
    fn a_campaign_is_reproducible_and_counts_every_damage() {
        let out = run(16, 7).unwrap();
        assert_eq!(out.damages, 16);
        assert_eq!(out.images, 2);
        assert_eq!(out.damages_by_region.values().sum::<u64>(), 16);
        assert!(out.fsck_detected > 0, "{out:#?}");
        assert!(out.open_unchanged + out.open_refused <= out.damages);
        let again = run(16, 7).unwrap();
        assert_eq!(
            (
                again.fsck_detected,
                again.open_refused,
                again.open_unchanged
            ),
            (out.fsck_detected, out.open_refused, out.open_unchanged)
        );
        assert_eq!(
            (again.fsck_missed, again.handed_in_use, again.panics),
            (out.fsck_missed, out.handed_in_use, out.panics)
        );
    }
}
