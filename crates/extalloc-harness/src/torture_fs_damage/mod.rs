//! `extalloc torture --fs-damage N`: a damage campaign against file-system images whose
//! every path, inode, content and metadata place is known.
//!
//! Each image is built through the file system (`extalloc_fuse::fs::Fs`, no FUSE) on a
//! fault-injecting memory device by a seeded run (`image.rs`); its ground truth is read
//! back from the undamaged image and checked against the run's model (`truth.rs`): every
//! path with its kind and inode, each file's bytes and each link's target, and the device
//! places of the store's metadata (superblocks, descriptors, bitmaps, the journal's
//! records) and of each inode's own (its file table entry, its map in a map segment, its
//! data: a directory's log, and apart from it the blocks of its log's run, a link's
//! target; `Volume::places` and `Volume::extents`).
//!
//! Each damage (`damage.rs`) copies the image and changes one block of one metadata kind
//! in one form (a flipped byte, a zeroed 4 KiB block, the block as an earlier snapshot
//! held it). An inode is *hit* when the bytes changed overlap its own places (a
//! directory's children are not hit by damage to its log). One damage in four also comes
//! with a bad sector (`bad_sectors`; its own seeded choice, so the damages are those of
//! runs before it): a block of a regular file's data whose reads fail with `EIO`, as a bad
//! sector's do on Linux (`FaultDevice::fail_reads_in`), for the mount and the repair; that
//! file is hit. A repair that scans the device for a lost tree node reads it and must go
//! on. One damage to a tree node in three also zeroes a leaf of the file tree (`leaf_too`,
//! from an rng of its own: the block of a file's table entry; the files whose entries it
//! held are hit), as a failing region takes a root and a leaf written close together.
//! Then, each step under a panic guard and a time limit (`judge.rs`):
//!
//! 1. **fsck**, read-only as `extalloc fsck`: `detected` when it reports or refuses;
//! 2. **mount** as `extalloc mount`: it refuses (`mount_refused`), or every inode not hit
//!    is served under one of its paths or below `/lost+found` (`mount_lost_found`) or
//!    under another name in a directory whose log was hit (`mount_renamed`: a stale block
//!    brings back the names it held), of its kind, with its bytes (`mount_lost`
//!    otherwise). A mount after a clean close reads only the root (`docs/mount.md`), so an
//!    inode whose directory the damage cut is not reached until the repair's whole read
//!    (`mount_unreached`, not a failure), and so does a mount after a crash the store's
//!    promise covers (`Store::promise_crash_pending`: half the crashed images); a mount
//!    after a crash before the promise (the other half, as an older build leaves them)
//!    reads the whole namespace and rescues it, and an inode it does not reach is lost.
//!    Then the device is filled
//!    with new data and every surviving file's blocks re-read (`mount_handed_twice`: its
//!    data changed);
//! 3. **repair, then mount**: the repair pipeline (`extalloc_fuse::repair`, as `extalloc
//!    fsck --repair`) refuses (`repair_refused`) or repairs; then fsck must be clean
//!    (`fsck_dirty_after_repair`), and a mount must serve every inode not hit as in 2
//!    (`intact_lost` otherwise; `recovered_lost_found`, `recovered_renamed`); then the
//!    device is filled and the files re-read (`handed_twice`).
//!
//! Each mount's tree is walked as the kernel lists (`readdirplus` from the position the
//! last call ended at); a directory whose listing fails (`EIO`: damage met where it is
//! read) is noted and the walk goes on, its names unreached.
//!
//! `most_lost_found` (per kind, a maximum) is the most inodes not hit one damage sent to
//! /lost+found after the repair: what one damaged block costs at most.
//!
//! One image in four holds a wide directory of thousands of fifos (`images_deep_tree`): its
//! file tree has three levels, so damage to an internal node under the root takes the
//! repair's page path, which mends the node in place (`repair_tree_scans_paged`). A lost
//! root takes the page path too when the repair's open can make it again over the nodes
//! found under it (their entries exactly as many as it counted); otherwise the salvage.
//!
//! On the images made over a former volume (`images_over_former`: one in four, `former.rs`),
//! a name that serves one of its inodes counts as lost (`mount_lost`, `intact_lost`): a
//! scan of the device that took a former volume's leaves for this one's would show here.
//!
//! Must be zero: `panics`, `hangs`, `mount_lost`, `mount_handed_twice`, `intact_lost`,
//! `fsck_dirty_after_repair`, `handed_twice`. Counted per metadata kind.
//!
//! Data structures: an `Image` (bytes, stale snapshot, truth) per image, shared read-only
//! with its steps through an `Arc`; the [`FsDamageOutcome`] counts, one per image (images
//! are judged side by side: `corrupt::by_image`), merged in image order. No locks of its
//! own.
//! What the steps share (the metadata kinds, the caller, the mounts' writeback options)
//! is in `types.rs`, which this file and every step import.

mod damage;
mod former;
mod image;
mod judge;
mod truth;
mod types;

use crate::corrupt::{by_image, guarded, note, settle, Step};
use anyhow::{bail, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;
use types::MetaKind;

/// Damages per image.
const DAMAGES_PER_IMAGE: u64 = 8;

/// The counts of one metadata kind (and of all).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct KindCounts {
    pub damages: u64,
    /// Damages that changed no byte (a stale block equal to the current one).
    pub unchanged: u64,
    /// Inodes hit, summed over the damages.
    pub files_hit: u64,
    /// Damages that also made one block of a file's data unreadable (its reads fail as
    /// a bad sector's do: `EIO`), that file counted hit.
    pub bad_sectors: u64,
    /// Damages to a tree node that also zeroed a leaf of the file tree (the block of a
    /// file's table entry; the files whose entries it held counted hit).
    pub leaf_too: u64,
    /// Damages fsck reported (a problem, or a refusal).
    pub detected: u64,
    pub mount_refused: u64,
    /// Inodes not hit that a mount lost or served wrong (must be 0).
    pub mount_lost: u64,
    /// Inodes not hit that a mount after a clean close, which reads only the root, did
    /// not reach: damage cut the directory that named them. The repair must bring each
    /// back (`intact_lost`).
    pub mount_unreached: u64,
    /// Inodes not hit that a mount served only below /lost+found.
    pub mount_lost_found: u64,
    /// Inodes not hit that a mount served only under another name in a directory whose
    /// log was hit (a stale block brings its old names back).
    pub mount_renamed: u64,
    /// Surviving files whose data changed once the mounted device was filled (must be 0).
    pub mount_handed_twice: u64,
    /// Damages the repair pipeline refused or failed on.
    pub repair_refused: u64,
    /// Inodes not hit that the mount after the repair lost or served wrong (must be 0).
    pub intact_lost: u64,
    /// Inodes not hit that the mount after the repair served only below /lost+found.
    pub recovered_lost_found: u64,
    /// ... only under another name in a directory whose log was hit.
    pub recovered_renamed: u64,
    /// Repairs after which fsck still reported a problem (must be 0).
    pub fsck_dirty_after_repair: u64,
    /// Surviving files whose data changed once the repaired device was filled (must be 0).
    pub handed_twice: u64,
    /// Repairs that scanned the device for a lost node of the file tree (its root or an
    /// internal node): for the leaves under it, or for the root's children.
    pub repair_tree_scans: u64,
    /// Of those, the repairs that took the page path (the lost node mended in place, or
    /// the root made again over its children, a page of files at a time) instead of the
    /// salvage.
    pub repair_tree_scans_paged: u64,
    /// The most inodes not hit that one damage sent to /lost+found after the repair (a
    /// maximum, not a sum): what one damaged block costs at most.
    pub most_lost_found: u64,
}

impl KindCounts {
    /// The counts as (name, value), in the order above (the sums, then the maximum).
    fn fields(&self) -> [(&'static str, u64); 21] {
        [
            ("damages", self.damages),
            ("unchanged", self.unchanged),
            ("files_hit", self.files_hit),
            ("bad_sectors", self.bad_sectors),
            ("leaf_too", self.leaf_too),
            ("detected", self.detected),
            ("mount_refused", self.mount_refused),
            ("mount_lost", self.mount_lost),
            ("mount_unreached", self.mount_unreached),
            ("mount_lost_found", self.mount_lost_found),
            ("mount_renamed", self.mount_renamed),
            ("mount_handed_twice", self.mount_handed_twice),
            ("repair_refused", self.repair_refused),
            ("intact_lost", self.intact_lost),
            ("recovered_lost_found", self.recovered_lost_found),
            ("recovered_renamed", self.recovered_renamed),
            ("fsck_dirty_after_repair", self.fsck_dirty_after_repair),
            ("handed_twice", self.handed_twice),
            ("repair_tree_scans", self.repair_tree_scans),
            ("repair_tree_scans_paged", self.repair_tree_scans_paged),
            ("most_lost_found", self.most_lost_found),
        ]
    }

    fn add(&mut self, o: &KindCounts) {
        let mut all = [
            &mut self.damages,
            &mut self.unchanged,
            &mut self.files_hit,
            &mut self.bad_sectors,
            &mut self.leaf_too,
            &mut self.detected,
            &mut self.mount_refused,
            &mut self.mount_lost,
            &mut self.mount_unreached,
            &mut self.mount_lost_found,
            &mut self.mount_renamed,
            &mut self.mount_handed_twice,
            &mut self.repair_refused,
            &mut self.intact_lost,
            &mut self.recovered_lost_found,
            &mut self.recovered_renamed,
            &mut self.fsck_dirty_after_repair,
            &mut self.handed_twice,
            &mut self.repair_tree_scans,
            &mut self.repair_tree_scans_paged,
        ];
        // The sums (every field but the last, the maximum).
        for (mine, (_, theirs)) in all.iter_mut().zip(o.fields()) {
            **mine += theirs;
        }
        self.most_lost_found = self.most_lost_found.max(o.most_lost_found);
    }

    /// The counts that must be zero, summed.
    fn must_be_zero(&self) -> u64 {
        self.mount_lost
            + self.mount_handed_twice
            + self.intact_lost
            + self.fsck_dirty_after_repair
            + self.handed_twice
    }
}

/// The verdict (`--json`).
#[derive(Debug, Default, serde::Serialize)]
pub struct FsDamageOutcome {
    pub damages: u64,
    pub panics: u64,
    pub hangs: u64,
    pub images: u64,
    pub images_mid_checkpoint: u64,
    /// Images whose last changes live in the journal only.
    pub images_journal_tail: u64,
    /// Images unmounted cleanly (the others end in a crash).
    pub images_clean_close: u64,
    /// Images made over a former volume (its leaves in the free blocks).
    pub images_over_former: u64,
    /// Images with a wide directory: a file tree of three levels (`image.rs`).
    pub images_deep_tree: u64,
    /// Inodes of the images whose map lives in a map segment.
    pub long_maps: u64,
    pub kinds: BTreeMap<String, KindCounts>,
    pub total: KindCounts,
    pub seed: u64,
    pub seconds: f64,
    /// The first failures (at most 20), to reproduce: seed, image, damage, what happened.
    pub failures: Vec<String>,
    /// Why the repair refused (numbers as `N`, cut at 100 characters): how often, and the
    /// first damage that made it.
    pub refusals: BTreeMap<String, Refusal>,
}

/// One reason the repair refused.
#[derive(Debug, Default, serde::Serialize)]
pub struct Refusal {
    pub count: u64,
    pub first: String,
}

impl FsDamageOutcome {
    /// Nothing that must be zero is not.
    pub fn passed(&self) -> bool {
        self.panics + self.hangs + self.total.must_be_zero() == 0
    }

    fn fail(&mut self, what: String) {
        note(&mut self.failures, what);
    }

    /// Adds the outcome of one more image (`one_image`) to the campaign's.
    fn merge(&mut self, one: FsDamageOutcome) {
        // Every field named: one added to the outcome is merged, or said not to be.
        let FsDamageOutcome {
            damages,
            panics,
            hangs,
            images,
            images_mid_checkpoint,
            images_journal_tail,
            images_clean_close,
            images_over_former,
            images_deep_tree,
            long_maps,
            kinds,
            total,
            seed: _,
            seconds: _,
            failures,
            refusals,
        } = one;
        self.damages += damages;
        self.panics += panics;
        self.hangs += hangs;
        self.images += images;
        self.images_mid_checkpoint += images_mid_checkpoint;
        self.images_journal_tail += images_journal_tail;
        self.images_clean_close += images_clean_close;
        self.images_over_former += images_over_former;
        self.images_deep_tree += images_deep_tree;
        self.long_maps += long_maps;
        for (kind, c) in kinds {
            self.kinds.entry(kind).or_default().add(&c);
        }
        self.total.add(&total);
        for f in failures {
            self.fail(f);
        }
        for (why, r) in refusals {
            let mine = self.refusals.entry(why).or_default();
            mine.count += r.count;
            if mine.first.is_empty() {
                mine.first = r.first;
            }
        }
    }

    /// A mount's counts (lost, /lost+found, renamed, handed twice), its failures noted;
    /// with `unreached_lost`, an inode the mount did not reach counts as lost.
    fn served(
        &mut self,
        s: &judge::Served,
        tag: &str,
        what: &str,
        unreached_lost: bool,
    ) -> (u64, u64, u64, u64) {
        // A listing that failed is why its names were not reached: said with them.
        let listings = s.failed_listings.iter().map(|l| format!("listing {l}"));
        let unreached = (listings.chain(s.unreached.iter().cloned())).filter(|_| unreached_lost);
        for why in s.lost.iter().cloned().chain(unreached) {
            self.fail(format!("{tag}: {what}: {why}"));
        }
        for why in &s.handed_twice {
            self.fail(format!("{tag}: {what}: {why}"));
        }
        let lost = s.lost.len() + if unreached_lost { s.unreached.len() } else { 0 };
        (
            lost as u64,
            s.lost_found,
            s.renamed,
            s.handed_twice.len() as u64,
        )
    }

    /// The value of a step that finished; a panic or a hang is counted (and `None`).
    fn settle<T>(&mut self, step: Step<T>, tag: &str, what: &str) -> Option<T> {
        let counts = (&mut self.panics, &mut self.hangs);
        settle(step, counts, &mut self.failures, &format!("{tag}: {what}"))
    }

    /// One line per metadata kind.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for (k, c) in self.kinds.iter().chain([(&"all".to_string(), &self.total)]) {
            let counts: Vec<String> = c.fields().iter().map(|(n, v)| format!("{n} {v}")).collect();
            s += &format!("{k}: {}\n", counts.join(", "));
        }
        s
    }
}

/// An image, its stale snapshot and its truth.
struct Image {
    bytes: Vec<u8>,
    stale: Vec<u8>,
    truth: Arc<truth::Truth>,
}

/// Runs `damages` damages from `seed`, with progress on stderr every tenth.
pub fn run(damages: u64, seed: u64) -> Result<FsDamageOutcome> {
    if damages == 0 {
        bail!("--fs-damage 0: give the number of damages to make (e.g. --fs-damage 1000)");
    }
    let started = Instant::now();
    let mut out = FsDamageOutcome {
        seed,
        ..FsDamageOutcome::default()
    };
    let images = damages.div_ceil(DAMAGES_PER_IMAGE);
    // Images judged side by side (`by_image`), each into an outcome of its own, merged in
    // image order: the same verdict as one after another.
    let finished = std::sync::atomic::AtomicU64::new(0);
    let outcomes = by_image(images, |i| {
        let n = DAMAGES_PER_IMAGE.min(damages - i * DAMAGES_PER_IMAGE);
        let one = one_image(seed, i, n)?;
        let done = finished.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
        if (done * 10 / damages) > ((done - n) * 10 / damages) {
            eprintln!(
                "torture --fs-damage: {done}/{damages} damages ({} %), {:.0} s",
                done * 100 / damages,
                started.elapsed().as_secs_f64()
            );
        }
        Ok(one)
    })?;
    for one in outcomes {
        out.merge(one);
    }
    debug_assert_eq!(out.damages, damages, "every damage made once");
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

/// Image `i` of the campaign of `seed` and its `damages` damages: a campaign's outcome of
/// one image.
fn one_image(seed: u64, i: u64, damages: u64) -> Result<FsDamageOutcome> {
    let mut out = FsDamageOutcome {
        seed,
        ..FsDamageOutcome::default()
    };
    let image_seed = seed.wrapping_mul(1_000_003).wrapping_add(i);
    let image = make_image(image_seed, i % 4 == 3, &mut out)
        .with_context(|| format!("building image {i} (seed {image_seed})"))?;
    let mut rng = StdRng::seed_from_u64(image_seed ^ 0x5eed);
    // Bad sectors and leaves from rngs of their own: the damages are those of the runs
    // before them.
    let mut sectors = StdRng::seed_from_u64(image_seed ^ 0xbad5);
    let mut leaves = StdRng::seed_from_u64(image_seed ^ 0x1eaf);
    for d in 0..damages {
        let damage = damage::pick(&mut rng, &image.truth);
        let bad = sectors
            .gen_ratio(1, 4)
            .then(|| damage::bad_sector(&mut sectors, &image.truth))
            .flatten();
        let leaf = (damage.kind == MetaKind::TreeNodes && leaves.gen_ratio(1, 3))
            .then(|| damage::leaf(&mut leaves, &image.truth))
            .flatten();
        let tag = format!(
            "seed {seed} image {i} damage {d}: {damage:?}, leaf {leaf:?}, bad sector {bad:?}"
        );
        judge(&image, (damage, leaf, bad), rng.gen(), &tag, &mut out);
    }
    Ok(out)
}

/// Builds image `seed` and takes its truth.
fn make_image(seed: u64, mid_checkpoint: bool, out: &mut FsDamageOutcome) -> Result<Image> {
    let mut rng = StdRng::seed_from_u64(seed);
    let built = image::build(seed, mid_checkpoint, &mut rng)?;
    let truth = truth::take(&built)?;
    out.images += 1;
    out.images_mid_checkpoint += u64::from(built.mid_checkpoint);
    out.images_journal_tail += u64::from(built.journal_tail);
    out.images_clean_close += u64::from(built.clean_close);
    out.images_over_former += u64::from(built.over_former);
    out.images_deep_tree += u64::from(built.deep_tree);
    out.long_maps += truth.long_maps;
    Ok(Image {
        bytes: built.bytes,
        stale: built.stale,
        truth: Arc::new(truth),
    })
}

/// A damage, the leaf zeroed with it if one is ([`damage::leaf`]), and the bad sector that
/// comes with it, if one does: the file it lies in, and its device bytes (a block).
type Judged = (
    damage::Damage,
    Option<damage::Damage>,
    Option<(u64, Range<u64>)>,
);

/// Damages a copy of `image` (and zeroes a leaf, and makes a block of a file's data
/// unreadable, if the damage comes with them), runs the steps on it, and counts what they
/// did.
fn judge(image: &Image, damage: Judged, flip: u8, tag: &str, out: &mut FsDamageOutcome) {
    let (damage, leaf, bad) = damage;
    out.damages += 1;
    let mut c = KindCounts {
        damages: 1,
        bad_sectors: u64::from(bad.is_some()),
        leaf_too: u64::from(leaf.is_some()),
        ..KindCounts::default()
    };
    let mut bytes = image.bytes.clone();
    let span = damage::make(&mut bytes, &image.stale, damage, flip);
    let mut hit: BTreeSet<u64> = image.truth.hit(&span).into_iter().collect();
    if let Some(leaf) = leaf {
        let zeroed = damage::make(&mut bytes, &image.stale, leaf, flip);
        hit.extend(image.truth.hit(&zeroed));
    }
    if damage.kind == MetaKind::JournalRecords && !span.is_empty() {
        hit.extend(&image.truth.journal_touched);
    }
    let bad = bad.map(|(ino, bytes)| {
        hit.insert(ino);
        bytes
    });
    c.unchanged = u64::from(span.is_empty());
    c.files_hit = hit.len() as u64;
    let for_fsck = bytes.clone();
    let fsck = guarded(move || truth::fsck_problem(&for_fsck).is_some());
    if let Some(d) = out.settle(fsck, tag, "fsck") {
        c.detected = u64::from(d);
    }
    let (truth, hit) = (image.truth.clone(), Arc::new(hit));
    let (t, h, b, bb) = (truth.clone(), hit.clone(), bytes.clone(), bad.clone());
    let mounted = guarded(move || judge::mount_and_check(judge::device_of(&b, bb), &t, &h));
    if let Some(served) = out.settle(mounted, tag, "mount") {
        c.mount_refused = u64::from(served.refused.is_some());
        let (lost, found, renamed, twice) = out.served(&served, tag, "mount", false);
        c.mount_lost = lost;
        c.mount_unreached = served.unreached.len() as u64;
        c.mount_lost_found = found;
        c.mount_renamed = renamed;
        c.mount_handed_twice = twice;
    }
    let repaired = guarded(move || judge::repair_and_check((bytes, bad), &truth, &hit));
    if let Some(r) = out.settle(repaired, tag, "repair") {
        count_repair(
            &r,
            image.truth.inodes.len() as u64 - c.files_hit,
            &mut c,
            tag,
            out,
        );
    }
    out.kinds
        .entry(damage.kind.name().to_string())
        .or_default()
        .add(&c);
    out.total.add(&c);
}

/// Counts what the repair and the mount after it did. A mount that refuses a repaired
/// device loses every inode not hit (`not_hit`).
fn count_repair(
    r: &judge::Repaired,
    not_hit: u64,
    c: &mut KindCounts,
    tag: &str,
    out: &mut FsDamageOutcome,
) {
    c.repair_tree_scans = u64::from(r.tree_scan);
    c.repair_tree_scans_paged = u64::from(r.tree_scan && !r.salvaged);
    if let Some(why) = &r.refused {
        c.repair_refused = 1;
        let r = out.refusals.entry(reason(why)).or_default();
        r.count += 1;
        if r.first.is_empty() {
            r.first = format!("{tag}: {why}");
        }
        return;
    }
    if let Some(problem) = &r.dirty {
        c.fsck_dirty_after_repair = 1;
        out.fail(format!("{tag}: fsck after the repair: {problem}"));
    }
    if let Some(why) = &r.served.refused {
        c.intact_lost = not_hit;
        out.fail(format!("{tag}: mount after the repair refused: {why}"));
        return;
    }
    let (lost, found, renamed, twice) = out.served(&r.served, tag, "mount after repair", true);
    c.intact_lost = lost;
    c.recovered_lost_found = found;
    c.most_lost_found = found;
    c.recovered_renamed = renamed;
    c.handed_twice = twice;
}

/// A refusal's message as its reason: every number `N`, cut at 100 characters.
fn reason(why: &str) -> String {
    let mut out = String::new();
    for ch in why.chars() {
        match ch {
            '0'..='9' if out.ends_with('N') => {}
            '0'..='9' => out.push('N'),
            _ => out.push(ch),
        }
    }
    out.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corrupt::image_device;
    use extalloc::volume::Volume;
    use extalloc::Policy;

    /// The campaign's machinery: every damage counted once, by kind; the same seed gives
    /// the same counts; damage is seen.
    #[test]
    fn a_campaign_is_reproducible_and_counts_every_damage() {
        let out = run(16, 5).unwrap();
        assert_eq!(out.damages, 16);
        assert_eq!(out.images, 2);
        assert_eq!(out.kinds.values().map(|c| c.damages).sum::<u64>(), 16);
        assert!(out.total.detected > 0, "{out:#?}");
        let again = run(16, 5).unwrap();
        assert_eq!(
            serde_json::to_value(&again.kinds).unwrap(),
            serde_json::to_value(&out.kinds).unwrap()
        );
    }

    /// Each of `nodes` zeroed in turn on a copy of `image`, with what `with` gives (a leaf
    /// zeroed too, a bad sector), and judged: the campaign passed; its counts.
    fn zeroed_each(
        image: &Image,
        nodes: &[extalloc::volume::TreeNodePlace],
        mut with: impl FnMut(&truth::Truth) -> (Option<damage::Damage>, Option<(u64, Range<u64>)>),
    ) -> KindCounts {
        let mut out = FsDamageOutcome::default();
        for node in nodes {
            let damage = damage::Damage {
                kind: MetaKind::TreeNodes,
                form: damage::Form::ZeroBlock,
                at: node.bytes.start,
            };
            let (leaf, bad) = with(&image.truth);
            let tag = format!("{node:?}, leaf {leaf:?}, bad sector {bad:?}");
            judge(image, (damage, leaf, bad), 1, &tag, &mut out);
        }
        assert!(out.passed(), "{out:#?}");
        out.total
    }

    /// A deep-tree image's file tree has internal nodes under its root. Each zeroed in
    /// turn (on an image with nothing in the journal, whose changes name files the open
    /// must read), and the root itself, is mended by the repair's page path (the root made
    /// again over its children), maps in map segments under it or not, with no inode lost
    /// or sent to /lost+found; so is each with a bad sector, and each with a leaf zeroed
    /// too.
    #[test]
    fn a_deep_tree_images_internal_nodes_are_each_mended_on_the_page_path() {
        let deep = |s: &u64| s.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 2;
        let mut images = (1..).filter(deep).map(|seed| {
            let mut out = FsDamageOutcome::default();
            let image = make_image(seed, false, &mut out).unwrap();
            (image, out)
        });
        let (image, made) = images
            .find(|(_, out)| out.images_journal_tail == 0)
            .unwrap();
        assert_eq!(made.images_deep_tree, 1);
        let vol = Volume::open(image_device(&image.bytes), Policy::default()).unwrap();
        let nodes = vol.tree_nodes();
        drop(vol);
        assert!(nodes.iter().any(|n| n.root && n.level == 2), "{nodes:?}");
        let c = zeroed_each(&image, &nodes, |_| (None, None));
        assert_eq!(c.damages, nodes.len() as u64);
        assert_eq!((c.files_hit, c.repair_refused), (0, 0), "{c:?}");
        assert_eq!(
            (c.detected, c.repair_tree_scans),
            (c.damages, c.damages),
            "{c:?}"
        );
        assert_eq!(c.repair_tree_scans_paged, c.damages, "{c:?}");
        assert_eq!(c.recovered_lost_found + c.recovered_renamed, 0, "{c:?}");
        // Again with a bad sector in a file's data each time: the scans skip it, and the
        // repairs stay on the page path; only that file is hit.
        let mut rng = StdRng::seed_from_u64(11);
        let c = zeroed_each(&image, &nodes, |truth| {
            (None, damage::bad_sector(&mut rng, truth))
        });
        assert_eq!(
            (c.bad_sectors, c.files_hit),
            (c.damages, c.damages),
            "{c:?}"
        );
        assert_eq!(c.repair_refused, 0, "{c:?}");
        assert_eq!(c.repair_tree_scans_paged, c.damages, "{c:?}");
        // Again with a leaf zeroed besides each node (the root made again with a hole
        // there, or a hole and a leaf mended under it): still the page path, only the
        // leaf's files hit.
        let c = zeroed_each(&image, &nodes, |truth| {
            (damage::leaf(&mut rng, truth), None)
        });
        assert_eq!(c.leaf_too, c.damages, "{c:?}");
        assert!(c.files_hit >= c.damages, "{c:?}");
        assert_eq!(c.repair_refused, 0, "{c:?}");
        assert_eq!(c.repair_tree_scans_paged, c.damages, "{c:?}");
    }
}
