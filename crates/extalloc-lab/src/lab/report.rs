//! The lab's JSON report (schema `extalloc-bench/1`, described in `docs/lab.md`); its
//! Markdown tables are `markdown.rs`'s, its verdict is judged in `verdict.rs`.
//!
//! Data structures: [`Report`] (one workload's matrix: a [`Run`] per policy x threads, each
//! standing for its repetitions), the figures inside a run (a writeback run's
//! [`WritebackFields`] too) and the report's [`Verdict`]. Invariants: fields may be
//! added, never renamed (scripts and `extalloc report` read old reports, so every added
//! field has a serde default); a run's `ops_per_sec` is the median of its
//! `ops_per_sec_repeats`; the tables' ratio column compares with one reference policy,
//! [`reference`](fn@reference), named in its header. Lock order: none.

use super::machine::MachineLoad;
use extalloc::{Extent, FreeSpace};
use serde::{Deserialize, Serialize};

/// One workload's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub workload: String,
    pub params: serde_json::Value,
    pub device: Device,
    pub runs: Vec<Run>,
    /// The policy the ratio column compares with (see [`reference`](fn@reference)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Whether the machine was busy during the matrix (absent where unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineLoad>,
    /// What the reader must know before trusting the figures (a busy machine).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Extents per file of every repetition of each run, in run order (the run's own
    /// figure is the median-throughput repetition's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extents_per_file_repeats: Vec<CellRepeats>,
    /// The one-line verdict (`lab::verdict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// One figure of every repetition of a policy x threads run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CellRepeats {
    pub policy: String,
    pub threads: usize,
    pub values: Vec<f64>,
}

impl Report {
    /// A report of `runs` with no load check, warnings or verdict yet ([`Report::judged`]).
    pub fn new(
        workload: impl Into<String>,
        params: serde_json::Value,
        device: Device,
        runs: Vec<Run>,
    ) -> Report {
        Report {
            schema: "extalloc-bench/1".into(),
            workload: workload.into(),
            params,
            device,
            runs,
            reference: None,
            machine: None,
            warnings: Vec::new(),
            extents_per_file_repeats: Vec::new(),
            verdict: None,
        }
    }
}

/// The policy every ratio compares with: `extalloc` (the library's default, which every
/// workload of the quick suite runs) when it ran, else the first policy.
pub fn reference(report: &Report) -> String {
    if let Some(r) = &report.reference {
        return r.clone();
    }
    let ran = |p: &str| report.runs.iter().any(|r| r.policy == p);
    if ran(REFERENCE) {
        REFERENCE.into()
    } else {
        report
            .runs
            .first()
            .map(|r| r.policy.clone())
            .unwrap_or_default()
    }
}

/// The reference policy when it runs.
pub const REFERENCE: &str = "extalloc";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Device {
    pub blocks: u64,
    pub block_size: u32,
    pub group_blocks: u64,
    pub groups: u64,
}

impl Device {
    pub fn of(g: &extalloc::Geometry) -> Self {
        Device {
            blocks: g.blocks_count,
            block_size: g.block_size,
            group_blocks: g.group_blocks,
            groups: g.groups_count(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub policy: String,
    pub threads: usize,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    /// ops/s of every repetition, in run order; `ops_per_sec` is their median.
    pub ops_per_sec_repeats: Vec<f64>,
    pub latency_ns: Latency,
    pub layout: Layout,
    /// Absent when the free space could not be measured (kernel btrfs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_space: Option<FreeSpaceJson>,
    /// Absent for the kernel's file systems.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    /// Throughput of each tenth of the run (workloads with a fixed amount of work).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Vec<ProgressPoint>>,
    /// The writeback workload's figures, beside the usual ones (`wb_contexts`,
    /// `wb_affinity`, `mib_per_sec`, ...).
    #[serde(flatten)]
    pub writeback: Option<WritebackFields>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressPoint {
    pub done: f64,
    pub ops_per_sec: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Layout {
    pub files: u64,
    pub extents_per_file: f64,
    pub avg_extent_kib: f64,
    pub layout_score: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistogramBucket {
    pub min_kib: f64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FreeSpaceJson {
    pub free_blocks: u64,
    pub free_extents: u64,
    pub avg_free_extent_kib: f64,
    /// Null where the tool does not tell (XFS's `freesp`).
    pub largest_free_extent_kib: Option<f64>,
    /// Null where per-group free runs are unknown (XFS).
    pub fragmented_groups: Option<u64>,
    pub frag_pct_mean: Option<f64>,
    /// Per group, the percentage of its blocks that are free (empty where unknown): the
    /// device picture of `extalloc report`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_free_pct: Vec<u8>,
    pub histogram: Vec<HistogramBucket>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Counters {
    /// Groups whose lock-free figures a pass looked at.
    #[serde(default)]
    pub groups_considered: u64,
    pub groups_scanned: u64,
    pub trylock_skips: u64,
    pub lock_waits: u64,
    pub allocs: u64,
    pub frees: u64,
    pub stream_goal_hits: u64,
    pub forced_commits: u64,
    pub commits: u64,
    /// Bitmaps read from the device (a `--device` run), how many the read-ahead thread had
    /// read first, and how many were in memory at the end.
    #[serde(default)]
    pub bitmaps_loaded: u64,
    #[serde(default)]
    pub prefetch_hits: u64,
    #[serde(default)]
    pub loaded_bitmaps: u64,
    /// Allocations served by each pass, by pass name.
    pub pass_hits: std::collections::BTreeMap<String, u64>,
}

/// The layout of a set of files, each a list of extents in logical order.
pub fn layout(files: &[Vec<Extent>], block_size: u32) -> Layout {
    let mut extents = 0u64;
    let mut blocks = 0u64;
    let mut followers = 0u64;
    let mut follow_slots = 0u64;
    let mut nonempty = 0u64;
    for file in files {
        if file.is_empty() {
            continue;
        }
        nonempty += 1;
        // Physically contiguous runs, merged the way FIEMAP-based tools count them.
        let mut runs = 0u64;
        let mut prev_end: Option<u64> = None;
        let mut file_blocks = 0;
        for e in file {
            if prev_end != Some(e.start) {
                runs += 1;
            }
            prev_end = Some(e.end());
            file_blocks += e.len;
        }
        extents += runs;
        blocks += file_blocks;
        followers += file_blocks - runs;
        follow_slots += file_blocks - 1;
    }
    Layout {
        files: files.len() as u64,
        extents_per_file: if nonempty == 0 {
            0.0
        } else {
            extents as f64 / nonempty as f64
        },
        avg_extent_kib: if extents == 0 {
            0.0
        } else {
            blocks as f64 * f64::from(block_size) / 1024.0 / extents as f64
        },
        layout_score: if follow_slots == 0 {
            1.0
        } else {
            followers as f64 / follow_slots as f64
        },
    }
}

pub fn free_space_json(fs: &FreeSpace, block_size: u32, group_blocks: u64) -> FreeSpaceJson {
    let kib = |blocks: f64| blocks * f64::from(block_size) / 1024.0;
    FreeSpaceJson {
        free_blocks: fs.free_blocks,
        free_extents: fs.free_extents,
        avg_free_extent_kib: kib(fs.avg_free_extent_blocks()),
        largest_free_extent_kib: Some(kib(fs.largest_free_extent_blocks as f64)),
        fragmented_groups: Some(fs.fragmented_groups()),
        frag_pct_mean: Some(fs.frag_pct_mean()),
        group_free_pct: fs
            .groups
            .iter()
            .map(|g| (100 * u64::from(g.free_blocks) / group_blocks.max(1)) as u8)
            .collect(),
        histogram: fs
            .histogram
            .iter()
            .map(|b| HistogramBucket {
                min_kib: kib((1u64 << b.order) as f64),
                count: b.count,
            })
            .collect(),
    }
}

pub fn counters(s: &extalloc::StatsSnapshot, commits: u64) -> Counters {
    Counters {
        groups_considered: s.groups_considered,
        groups_scanned: s.groups_scanned,
        trylock_skips: s.trylock_skips,
        lock_waits: s.lock_waits,
        allocs: s.allocs,
        frees: s.frees,
        stream_goal_hits: s.stream_goal_hits,
        forced_commits: s.forced_commits,
        commits,
        bitmaps_loaded: s.bitmaps_loaded,
        prefetch_hits: s.prefetch_hits,
        loaded_bitmaps: s.loaded_bitmaps,
        pass_hits: extalloc::Pass::ALL
            .iter()
            .map(|p| (p.name().to_string(), s.pass_hits[*p as usize]))
            .collect(),
    }
}

pub fn latency_of(h: &hdrhistogram::Histogram<u64>) -> Latency {
    Latency {
        p50: h.value_at_quantile(0.50),
        p95: h.value_at_quantile(0.95),
        p99: h.value_at_quantile(0.99),
        max: h.max(),
    }
}

/// One run standing for its repetitions: ops/s and each latency percentile are medians over
/// them; the other figures come from the repetition with the median ops/s; every rate is
/// kept in `ops_per_sec_repeats`.
pub fn median_run(mut reps: Vec<Run>) -> Run {
    let rates: Vec<f64> = reps.iter().map(|r| r.ops_per_sec).collect();
    let median_of = |f: fn(&Run) -> u64| {
        let v: Vec<f64> = reps.iter().map(|r| f(r) as f64).collect();
        median(&v).round() as u64
    };
    let latency = Latency {
        p50: median_of(|r| r.latency_ns.p50),
        p95: median_of(|r| r.latency_ns.p95),
        p99: median_of(|r| r.latency_ns.p99),
        max: median_of(|r| r.latency_ns.max),
    };
    reps.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    let mut chosen = reps.swap_remove(reps.len() / 2);
    chosen.ops_per_sec = median(&rates);
    chosen.ops_per_sec_repeats = rates;
    chosen.latency_ns = latency;
    chosen
}

/// Every repetition's extents per file, per cell of a matrix (cells with runs only).
pub fn extents_repeats(cells: &[Vec<Run>]) -> Vec<CellRepeats> {
    cells
        .iter()
        .filter_map(|reps| {
            let first = reps.first()?;
            Some(CellRepeats {
                policy: first.policy.clone(),
                threads: first.threads,
                values: reps.iter().map(|r| r.layout.extents_per_file).collect(),
            })
        })
        .collect()
}

/// Median of a non-empty list.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The verdict of one workload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    /// The thread count of the compared runs.
    pub threads: usize,
    /// The policy with the highest median ops/s.
    pub fastest: String,
    /// The runner-up (`None`: a single policy ran).
    pub next: Option<String>,
    /// fastest's median ops/s over next's.
    pub ratio: Option<f64>,
    /// The two min-max spreads overlap (`None`: a side ran once).
    pub within_noise: Option<bool>,
    /// The line as printed.
    pub text: String,
}

/// The order each file's blocks are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// fio's `randwrite`: every 4 KiB block once, in a random order.
    Random,
    /// fio's `write`: in order.
    Seq,
}

impl std::str::FromStr for Pattern {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Pattern> {
        match s {
            "random" => Ok(Pattern::Random),
            "seq" => Ok(Pattern::Seq),
            _ => anyhow::bail!("--pattern '{s}': random or seq"),
        }
    }
}

/// The figures a writeback run adds to the usual ones (flattened into the run's JSON).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WritebackFields {
    /// Contexts that ran (the ones asked for, cut to the pool's bound); 0 for the kernel.
    pub wb_contexts: usize,
    /// `group`, `file` or `none`; `kernel` for a kernel file system's run.
    pub wb_affinity: String,
    /// Data written over the time until it was durable.
    pub mib_per_sec: f64,
    pub pattern: Pattern,
    /// The cache's figures: extalloc's runs only.
    #[serde(flatten)]
    pub cache: Option<CacheFields>,
}

/// What extalloc's writeback did (the kernel's runs have no such counters).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CacheFields {
    pub dirty_limit_bytes: u64,
    pub dirty_peak_bytes: u64,
    pub writeback_runs: u64,
    pub bytes_per_run: f64,
    pub allocations_per_mib: f64,
    /// Lock waits (group, global, cache) on the contexts' and fsync callers' threads.
    pub lock_waits: u64,
    pub lock_waits_per_mib: f64,
    pub context_lock_waits: Vec<u64>,
    pub context_switches: u64,
    pub throttled_writes: u64,
    /// Blocks still held by the files' preallocations after close (should be 0).
    pub prealloc_left_blocks: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_merges_contiguous_extents() {
        let files = vec![
            vec![Extent::new(10, 2), Extent::new(12, 2), Extent::new(20, 4)],
            vec![],
            vec![Extent::new(100, 1)],
        ];
        let l = layout(&files, 4096);
        assert_eq!(l.files, 3);
        assert_eq!(l.extents_per_file, 1.5); // (2 + 1) / 2 non-empty files
                                             // 9 blocks in 3 runs = 12 KiB average.
        assert_eq!(l.avg_extent_kib, 12.0);
        // Blocks after the first: 7 in file 0 (6 follow), 0 in file 2.
        assert!((l.layout_score - 6.0 / 7.0).abs() < 1e-9);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
