//! `compare-fs age-profile`: a Geriatrix-like aging (ATC'18). Files whose sizes are
//! log-uniform between two bounds fill the file system to a target share of its capacity
//! (statvfs's size of the fresh file system), each file fsynced once written (so it is
//! allocated while its neighbours live); then churn deletes and creates files, keeping
//! that level, until the bytes created since the fill reach `rewrites` x the capacity. A
//! share of the files is short-lived: the files deleted are short-lived ones nine times in
//! ten (while there are any), else any live file. Everything is drawn from one seeded
//! generator, so a seed gives the same sequence of creates and deletes on every target of
//! the same capacity.
//!
//! After the churn: the free space, read unmounted (`AgeFs::free_space`: fsperf's frag %
//! over groups and the free-extent histogram), extents per file, and a cold read of a
//! sample of the aged files against fresh copies of the same sizes written then, on the
//! same file system.
//!
//! Data structures: [`ProfileOptions`], [`Profile`] (the bookkeeping: live files, bytes,
//! the generator; it yields [`Op`]s), [`ProfileRun`] (one target's figures).
//!
//! Invariant: the profile's live set is exactly the files under `p/` of the root, and
//! their block-rounded bytes (`live_bytes`) never exceed the target. No locks.

use super::age::{extents_per_file, AgeFs, FileLayout, FreeReport};
use super::kernel::INTERRUPTED;
use anyhow::{bail, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How the profile ages a file system.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProfileOptions {
    /// Fill target, a share of the capacity (0.8 for 80 %).
    pub fill: f64,
    /// Bytes created during churn, in multiples of the capacity.
    pub rewrites: f64,
    /// The generator's seed.
    pub seed: u64,
    /// Smallest file.
    pub min_bytes: u64,
    /// Largest file.
    pub max_bytes: u64,
    /// Share of files that are short-lived.
    pub short_share: f64,
}

/// One step of the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Create file `id` of `bytes`.
    Create {
        /// Its number.
        id: u64,
        /// Its size.
        bytes: u64,
    },
    /// Delete file `id`.
    Delete {
        /// Its number.
        id: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Live {
    id: u64,
    bytes: u64,
    short: bool,
}

/// The fill and churn bookkeeping.
pub struct Profile {
    opts: ProfileOptions,
    rng: StdRng,
    block: u64,
    capacity: u64,
    live: Vec<Live>,
    pending: Option<Live>,
    next_id: u64,
    /// Block-rounded bytes of the live files.
    pub live_bytes: u64,
    /// True while filling (before the first file that does not fit).
    pub filling: bool,
    /// Files created, deleted.
    pub created: u64,
    /// Files deleted.
    pub deleted: u64,
    /// Bytes created since the fill ended.
    pub churn_bytes: u64,
}

/// A size log-uniform between `min` and `max` (inclusive).
pub fn log_uniform(rng: &mut StdRng, min: u64, max: u64) -> u64 {
    let (lo, hi) = ((min.max(1) as f64).ln(), (max.max(min) as f64).ln());
    let x = if hi > lo { rng.gen_range(lo..hi) } else { lo };
    (x.exp().round() as u64).clamp(min, max)
}

impl Profile {
    /// A profile for a file system of `capacity` bytes in blocks of `block`.
    pub fn new(opts: &ProfileOptions, capacity: u64, block: u64) -> Profile {
        Profile {
            rng: StdRng::seed_from_u64(opts.seed),
            opts: opts.clone(),
            block: block.max(1),
            capacity,
            live: Vec::new(),
            pending: None,
            next_id: 0,
            live_bytes: 0,
            filling: true,
            created: 0,
            deleted: 0,
            churn_bytes: 0,
        }
    }

    /// The fill target in bytes.
    pub fn target(&self) -> u64 {
        (self.capacity as f64 * self.opts.fill) as u64
    }

    fn rounded(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block) * self.block
    }

    /// The live files: (id, bytes), oldest first among those never moved.
    pub fn live(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().map(|l| (l.id, l.bytes))
    }

    /// The next step; `None` when the churn has created `rewrites` x the capacity.
    pub fn next_op(&mut self) -> Option<Op> {
        let target = self.target();
        loop {
            if self.pending.is_none() {
                if !self.filling
                    && self.churn_bytes as f64 >= self.opts.rewrites * self.capacity as f64
                {
                    return None;
                }
                let bytes = log_uniform(&mut self.rng, self.opts.min_bytes, self.opts.max_bytes);
                let short = self.rng.gen_bool(self.opts.short_share.clamp(0.0, 1.0));
                self.pending = Some(Live {
                    id: self.next_id,
                    bytes,
                    short,
                });
                self.next_id += 1;
            }
            let p = self.pending.expect("set above");
            let need = self.rounded(p.bytes);
            if self.live_bytes + need <= target {
                self.pending = None;
                self.live.push(p);
                self.live_bytes += need;
                self.created += 1;
                if !self.filling {
                    self.churn_bytes += p.bytes;
                }
                return Some(Op::Create {
                    id: p.id,
                    bytes: p.bytes,
                });
            }
            self.filling = false;
            if self.live.is_empty() {
                // Larger than the target on its own: drawn again.
                self.pending = None;
                continue;
            }
            let victim = self.victim();
            let gone = self.live.swap_remove(victim);
            self.live_bytes -= self.rounded(gone.bytes);
            self.deleted += 1;
            return Some(Op::Delete { id: gone.id });
        }
    }

    /// A short-lived live file nine times in ten while there are any, else any.
    fn victim(&mut self) -> usize {
        let shorts: Vec<usize> = (0..self.live.len())
            .filter(|&i| self.live[i].short)
            .collect();
        if !shorts.is_empty() && self.rng.gen_bool(0.9) {
            shorts[self.rng.gen_range(0..shorts.len())]
        } else {
            self.rng.gen_range(0..self.live.len())
        }
    }
}

/// Where the profile keeps file `id` under `root`: 64 directories.
pub fn file_path(root: &Path, id: u64) -> PathBuf {
    root.join(format!("p/d{:02}/f{id}", id % 64))
}

/// Writes `bytes` of `pattern` (repeated) to a new file, then fsyncs it.
fn write_file(path: &Path, bytes: u64, pattern: &[u8]) -> Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(pattern.len() as u64) as usize;
        f.write_all(&pattern[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    // Allocated now, while its neighbours are live: without it the kernel's delayed
    // allocation never allocates most short-lived files (deleted before writeback), and
    // the churn would not age the file system at all.
    f.sync_all()
        .with_context(|| format!("fsync of {}", path.display()))
}

/// Runs the profile's steps in `root` until it is done; the files are written with
/// `pattern` (seeded random bytes). Returns the seconds the fill and the churn took.
pub fn drive(root: &Path, profile: &mut Profile, pattern: &[u8]) -> Result<(f64, f64)> {
    for d in 0..64 {
        let dir = root.join(format!("p/d{d:02}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    }
    let started = Instant::now();
    let mut fill_seconds = None;
    while let Some(op) = profile.next_op() {
        if INTERRUPTED.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        if !profile.filling && fill_seconds.is_none() {
            fill_seconds = Some(started.elapsed().as_secs_f64());
        }
        match op {
            Op::Create { id, bytes } => write_file(&file_path(root, id), bytes, pattern)?,
            Op::Delete { id } => {
                let p = file_path(root, id);
                std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
            }
        }
    }
    let total = started.elapsed().as_secs_f64();
    let fill = fill_seconds.unwrap_or(total);
    Ok((fill, total - fill))
}

/// Seeded random bytes, 1 MiB.
pub fn pattern(seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut v = vec![0u8; 1 << 20];
    rng.fill(&mut v[..]);
    v
}

/// One target's figures.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ProfileRun {
    /// The file system.
    pub fs: String,
    /// Seconds the whole job took.
    pub seconds: f64,
    /// statvfs's size of the fresh file system, bytes.
    pub capacity_bytes: u64,
    /// The fill target, bytes.
    pub target_bytes: u64,
    /// Seconds of the fill, of the churn.
    pub fill_seconds: f64,
    /// Seconds of the churn.
    pub churn_seconds: f64,
    /// Files created and deleted in all.
    pub created: u64,
    /// Files deleted.
    pub deleted: u64,
    /// Bytes created during the churn / the capacity.
    pub rewrites_done: f64,
    /// Live files at the end.
    pub live_files: usize,
    /// Extents per file of the aged files: mean, p50, p99.
    pub aged_extents: (f64, f64, f64),
    /// The same of the fresh copies.
    pub fresh_extents: (f64, f64, f64),
    /// Free space after the churn, unmounted.
    pub free: Option<FreeReport>,
    /// Files and bytes in the read sample.
    pub sample_files: usize,
    /// Bytes in the read sample.
    pub sample_bytes: u64,
    /// Cold read of the sample of aged files, MiB/s.
    pub aged_read_mib_s: f64,
    /// Cold read of their fresh copies, MiB/s.
    pub fresh_read_mib_s: f64,
    /// Why it stopped early.
    pub error: Option<String>,
}

/// Reads `paths` to their ends; MiB/s.
fn read_mib_s(paths: &[PathBuf]) -> Result<f64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let t = Instant::now();
    for p in paths {
        let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
        loop {
            let n = f
                .read(&mut buf)
                .with_context(|| format!("reading {}", p.display()))?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(total as f64 / f64::from(1 << 20) / t.elapsed().as_secs_f64().max(1e-9))
}

/// The aged files read back, at most `budget` bytes of them, in a seeded order.
fn sample(profile: &Profile, seed: u64, budget: u64) -> Vec<(u64, u64)> {
    let mut live: Vec<(u64, u64)> = profile.live().collect();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x005a_3b1e);
    rand::seq::SliceRandom::shuffle(&mut live[..], &mut rng);
    let mut sum = 0;
    live.into_iter()
        .take_while(|(_, b)| {
            sum += b;
            sum <= budget
        })
        .collect()
}

/// Runs the profile on `fs`, filling `run` as it goes (a failure keeps what was measured).
pub fn run_on(
    fs: &mut AgeFs,
    opts: &ProfileOptions,
    block: u64,
    run: &mut ProfileRun,
) -> Result<()> {
    let root = fs.root();
    let st =
        rustix::fs::statvfs(&root).with_context(|| format!("statvfs of {}", root.display()))?;
    run.capacity_bytes = st.f_blocks * st.f_frsize;
    let mut profile = Profile::new(opts, run.capacity_bytes, block);
    run.target_bytes = profile.target();
    let pattern = pattern(opts.seed);
    let (fill, churn) = drive(&root, &mut profile, &pattern)?;
    (run.fill_seconds, run.churn_seconds) = (fill, churn);
    (run.created, run.deleted) = (profile.created, profile.deleted);
    run.rewrites_done = profile.churn_bytes as f64 / run.capacity_bytes.max(1) as f64;
    run.live_files = profile.live.len();
    eprintln!(
        "  filled to {:.0} MiB in {fill:.1} s; churn {:.2} rewrites in {churn:.1} s",
        profile.live_bytes as f64 / f64::from(1 << 20),
        run.rewrites_done
    );
    run.free = Some(fs.free_space()?);
    // Half of what the file system says is still free (btrfs's metadata takes more than
    // the profile's bookkeeping knows of).
    let st =
        rustix::fs::statvfs(&root).with_context(|| format!("statvfs of {}", root.display()))?;
    let free = st.f_bavail * st.f_frsize;
    let picked = sample(&profile, opts.seed, (free / 2).min(256 << 20));
    let fresh_dir = fs.root().join("fresh");
    std::fs::create_dir_all(&fresh_dir)
        .with_context(|| format!("making {}", fresh_dir.display()))?;
    for (id, bytes) in &picked {
        write_file(&fresh_dir.join(format!("f{id}")), *bytes, &pattern)?;
    }
    run.sample_files = picked.len();
    run.sample_bytes = picked.iter().map(|(_, b)| b).sum();
    let layout = fs.layout()?;
    let of = |prefix: &str| -> Vec<&FileLayout> {
        layout
            .iter()
            .filter(|f| f.path.starts_with(prefix))
            .collect()
    };
    run.aged_extents = extents_per_file(&of("p/"));
    run.fresh_extents = extents_per_file(&of("fresh/"));
    let root = fs.root();
    let aged: Vec<PathBuf> = picked.iter().map(|(id, _)| file_path(&root, *id)).collect();
    let fresh: Vec<PathBuf> = picked
        .iter()
        .map(|(id, _)| fresh_dir.join(format!("f{id}")))
        .collect();
    fs.cold()?;
    run.aged_read_mib_s = read_mib_s(&aged)?;
    fs.cold()?;
    run.fresh_read_mib_s = read_mib_s(&fresh)?;
    Ok(())
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

/// The runs as Markdown: frag %, extents per file, read throughput.
pub fn table(runs: &[ProfileRun]) -> String {
    let mut s = String::from(
        "| fs | live files | created | deleted | rewrites | frag % mean | p50 | p95 | p99 | max | groups | \
         free extents | extents/file p50 | p99 | mean | fresh mean | aged read MiB/s | fresh read MiB/s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let frag = r.free.as_ref().and_then(|f| f.frag);
        let f1 = |v: f64| format!("{v:.1}");
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} |\n",
            r.fs,
            r.live_files,
            r.created,
            r.deleted,
            r.rewrites_done,
            opt(frag.map(|f| f.mean), f1),
            opt(frag.map(|f| f.p50), f1),
            opt(frag.map(|f| f.p95), f1),
            opt(frag.map(|f| f.p99), f1),
            opt(frag.map(|f| f.max), f1),
            opt(frag.map(|f| f.groups), |g| g.to_string()),
            opt(r.free.as_ref().and_then(|f| f.free_space.as_ref()), |f| f.free_extents.to_string()),
            r.aged_extents.1,
            r.aged_extents.2,
            r.aged_extents.0,
            r.fresh_extents.0,
            r.aged_read_mib_s,
            r.fresh_read_mib_s,
        ));
        if let Some(e) = &r.error {
            s.push_str(&format!("| {} | failed: {e} |\n", r.fs));
        }
    }
    s
}

/// Free extents by size, per target: one column per power of two (KiB).
pub fn histogram_table(runs: &[ProfileRun]) -> String {
    let mut sizes: Vec<u64> = Vec::new();
    for r in runs {
        for b in r
            .free
            .iter()
            .filter_map(|f| f.free_space.as_ref())
            .flat_map(|f| &f.histogram)
        {
            if !sizes.contains(&(b.min_kib as u64)) {
                sizes.push(b.min_kib as u64);
            }
        }
    }
    sizes.sort_unstable();
    let mut s = format!(
        "| fs | {} |\n|---|{}\n",
        sizes
            .iter()
            .map(|k| format!("≥{k} KiB"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(sizes.len())
    );
    for r in runs {
        let Some(f) = r.free.as_ref().and_then(|f| f.free_space.as_ref()) else {
            s.push_str(&format!(
                "| {} | (no histogram: {}) |\n",
                r.fs,
                r.free
                    .as_ref()
                    .map_or("not measured", |f| f.source.as_str())
            ));
            continue;
        };
        let cells: Vec<String> = sizes
            .iter()
            .map(|k| {
                f.histogram
                    .iter()
                    .find(|b| b.min_kib as u64 == *k)
                    .map_or("0".into(), |b| b.count.to_string())
            })
            .collect();
        s.push_str(&format!("| {} | {} |\n", r.fs, cells.join(" | ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(seed: u64) -> ProfileOptions {
        ProfileOptions {
            fill: 0.8,
            rewrites: 2.0,
            seed,
            min_bytes: 4096,
            max_bytes: 256 << 10,
            short_share: 0.7,
        }
    }

    #[test]
    fn sizes_are_log_uniform_within_bounds() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut v: Vec<u64> = (0..20_000)
            .map(|_| log_uniform(&mut rng, 4096, 4 << 20))
            .collect();
        assert!(v.iter().all(|&b| (4096..=4 << 20).contains(&b)));
        v.sort_unstable();
        // The median of a log-uniform size is the geometric mean of its bounds: 128 KiB.
        let median = v[v.len() / 2] as f64;
        assert!(
            (median / f64::from(128 << 10) - 1.0).abs() < 0.1,
            "median {median}"
        );
        // A quarter below 4 KiB x 1024^(1/4) = 23 KiB.
        let q1 = v[v.len() / 4] as f64;
        assert!(
            (q1 / (4096.0 * 1024f64.powf(0.25)) - 1.0).abs() < 0.1,
            "q1 {q1}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_steps() {
        let steps = |seed| {
            let mut p = Profile::new(&opts(seed), 16 << 20, 4096);
            std::iter::from_fn(|| p.next_op()).collect::<Vec<_>>()
        };
        let a = steps(1);
        assert_eq!(a, steps(1));
        assert_ne!(a, steps(2));
    }

    /// Fill and churn on a directory of a temporary directory: the live set is the files
    /// there, the level never passes the target, and the churn writes `rewrites` x.
    #[test]
    fn fill_and_churn_on_a_fake_directory() {
        let root =
            std::env::temp_dir().join(format!("extalloc-age-profile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let capacity = 16u64 << 20;
        let mut p = Profile::new(&opts(3), capacity, 4096);
        let target = p.target();
        assert_eq!(target, (capacity as f64 * 0.8) as u64);
        let (mut fill_bytes, mut peak) = (0, 0);
        // Step by step, checking the level, then the rest through `drive`.
        while p.filling {
            let Some(op) = p.next_op() else { break };
            if let Op::Create { .. } = op {
                fill_bytes = p.live_bytes;
            }
            peak = peak.max(p.live_bytes);
        }
        assert!(
            fill_bytes <= target && fill_bytes > target - (256 << 10),
            "{fill_bytes}"
        );
        assert!(peak <= target);
        let pat = pattern(3);
        let mut q = Profile::new(&opts(3), capacity, 4096);
        drive(&root, &mut q, &pat).unwrap();
        assert!(q.churn_bytes >= 2 * capacity);
        assert!(q.live_bytes <= target);
        assert_eq!(q.created - q.deleted, q.live.len() as u64);
        let mut on_disk: Vec<(u64, u64)> = Vec::new();
        for d in std::fs::read_dir(root.join("p")).unwrap() {
            for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
                let f = f.unwrap();
                let id: u64 = f.file_name().to_string_lossy()[1..].parse().unwrap();
                on_disk.push((id, f.metadata().unwrap().len()));
            }
        }
        on_disk.sort_unstable();
        let mut live: Vec<(u64, u64)> = q.live().collect();
        live.sort_unstable();
        assert_eq!(on_disk, live);
        let s = sample(&q, 3, 1 << 20);
        assert!(s.iter().map(|(_, b)| b).sum::<u64>() <= 1 << 20);
        assert!(!s.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
