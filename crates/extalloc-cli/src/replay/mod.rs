//! `extalloc replay TRACE`: feeds the requests of a kernel ext4 allocation trace through
//! extalloc's policies, in trace order, on a device of the traced geometry, and compares the
//! resulting layout and free space with what the kernel decided (a run named `kernel`).
//!
//! - A request (`ext4_request_blocks`) is replayed when its decision
//!   (`ext4_allocate_blocks`, same pid) arrives. Data requests (`HINT_DATA`) go through the
//!   file layer at the same logical blocks of the same inode (`HINT_NOPREALLOC` is passed
//!   on: no normalisation, as ext4's fallocate asks); other requests (extent-tree blocks)
//!   are plain allocations, remembered by the kernel's block number so that their frees can
//!   be translated.
//! - `ext4_free_blocks` is translated through the kernel's own decisions: freed data blocks
//!   become a hole punched at the same logical blocks of the same file (`free_data`), freed
//!   metadata frees our blocks for the same kernel blocks; a free of blocks the trace never
//!   allocated is counted and reported.
//! - `ext4_discard_preallocations` releases the file's preallocations.
//! - Both sides are measured on an otherwise empty device of the traced size: the kernel's
//!   own metadata (inode tables, journal) is not in the trace, so neither side has it.

pub mod bench;
pub mod capture;
pub mod parse;

use crate::lab::backend::LabPolicy;
use crate::lab::report::{self, Latency, Report, Run};
use anyhow::{bail, Context, Result};
use extalloc::{
    AllocRequest, Allocator, DataRequest, Error, Extent, FileAlloc, FreeSpace, Geometry,
};
use parse::{Event, Line};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A parsed trace.
pub struct Trace {
    pub events: Vec<Event>,
    pub lines: u64,
    pub malformed: u64,
    pub malformed_examples: Vec<String>,
    /// Seconds between the first and the last replayed event.
    pub span_seconds: f64,
}

/// Reads a trace (plain text, or gzip when the name ends in `.gz`).
pub fn load(path: &Path) -> Result<Trace> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut trace = Trace {
        events: Vec::new(),
        lines: 0,
        malformed: 0,
        malformed_examples: Vec::new(),
        span_seconds: 0.0,
    };
    let (mut first, mut last) = (None::<f64>, 0.0f64);
    for line in BufReader::new(reader).split(b'\n') {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        let line = String::from_utf8_lossy(&line);
        trace.lines += 1;
        match parse::parse_line(&line) {
            Line::Event(e) => {
                if let Some(ts) = timestamp(&line) {
                    first.get_or_insert(ts);
                    last = ts;
                }
                trace.events.push(e);
            }
            Line::Ignored => {}
            Line::Malformed(l) => {
                trace.malformed += 1;
                if trace.malformed_examples.len() < 5 {
                    trace.malformed_examples.push(l);
                }
            }
        }
    }
    trace.span_seconds = first.map_or(0.0, |f| (last - f).max(0.0));
    Ok(trace)
}

/// The `<timestamp>:` token of a line, if any.
fn timestamp(line: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|t| t.strip_suffix(':').and_then(|v| v.parse::<f64>().ok()))
}

/// The most frequent device of the trace.
pub fn busiest_dev(trace: &Trace) -> Option<(u32, u32)> {
    let mut counts: HashMap<(u32, u32), u64> = HashMap::new();
    for e in &trace.events {
        *counts.entry(e.dev()).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(d, n)| (n, d))
        .map(|(d, _)| d)
}

/// Geometry from the README next to the trace ("block count 1,048,576, 32,768 blocks per
/// group", "block size 4096"), if it says.
pub fn geometry_from_readme(trace: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(trace.parent()?.join("README.md")).ok()?;
    let number_after = |key: &str| -> Option<u64> {
        let at = text.find(key)? + key.len();
        let digits: String = text[at..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let number_before = |key: &str| -> Option<u64> {
        let at = text.find(key)?;
        let digits: String = text[..at]
            .trim_end()
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        digits.parse().ok()
    };
    Some((
        number_after("block count")?,
        number_before("blocks per group")?,
    ))
}

/// What a replay met that it could not replay as the kernel did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Oddities {
    pub requests: u64,
    pub frees_of_unseen_blocks: u64,
    pub requests_over_mapped_blocks: u64,
    pub decisions_without_request: u64,
}

/// The kernel's decisions: live allocations by start.
#[derive(Default)]
pub struct KernelModel {
    /// start -> (len, ino, lblk, data)
    live: BTreeMap<u64, (u64, u64, u64, bool)>,
}

impl KernelModel {
    fn allocate(&mut self, start: u64, len: u64, ino: u64, lblk: u64, data: bool) {
        self.live.insert(start, (len, ino, lblk, data));
    }

    /// Removes `block .. block + count` from the live set (splitting allocations).
    /// Returns what was live there: `(ino, lblk, len, data)` pieces.
    fn free(&mut self, block: u64, count: u64) -> Vec<(u64, u64, u64, bool)> {
        let end = block + count;
        let mut removed = Vec::new();
        let hits: Vec<u64> = self
            .live
            .range(..end)
            .rev()
            .take_while(|(&s, &(l, ..))| s + l > block || s >= block)
            .filter(|(&s, &(l, ..))| s + l > block)
            .map(|(&s, _)| s)
            .collect();
        for s in hits {
            let (l, ino, lblk, data) = self.live.remove(&s).expect("listed");
            let (a, b) = (s.max(block), (s + l).min(end));
            removed.push((ino, lblk + (a - s), b - a, data));
            if s < a {
                self.live.insert(s, (a - s, ino, lblk, data));
            }
            if b < s + l {
                self.live.insert(b, (s + l - b, ino, lblk + (b - s), data));
            }
        }
        removed
    }

    fn files(&self) -> Vec<Vec<Extent>> {
        let mut by_ino: BTreeMap<u64, BTreeMap<u64, Extent>> = BTreeMap::new();
        for (&s, &(l, ino, lblk, data)) in &self.live {
            if data {
                by_ino
                    .entry(ino)
                    .or_default()
                    .insert(lblk, Extent::new(s, l));
            }
        }
        by_ino
            .into_values()
            .map(|m| m.into_values().collect())
            .collect()
    }

    fn free_space(&self, geometry: &Geometry) -> FreeSpace {
        FreeSpace::from_used(geometry, self.live.iter().map(|(&s, &(l, ..))| (s, l)))
    }
}

/// Files by inode, and the inodes in the order first met.
type FileTable = (HashMap<u64, Arc<FileAlloc>>, Vec<u64>);

/// Files met in a replay, shared by the threads replaying it.
#[derive(Default)]
pub struct SharedFiles {
    files: parking_lot::Mutex<FileTable>,
}

impl SharedFiles {
    fn get(&self, alloc: &Allocator, ino: u64) -> Arc<FileAlloc> {
        let mut g = self.files.lock();
        if let Some(f) = g.0.get(&ino) {
            return f.clone();
        }
        let f = alloc.create_file(ino);
        g.0.insert(ino, f.clone());
        g.1.push(ino);
        f
    }

    fn known(&self, ino: u64) -> Option<Arc<FileAlloc>> {
        self.files.lock().0.get(&ino).cloned()
    }

    /// Every file, in the order first met.
    pub fn all(&self) -> Vec<Arc<FileAlloc>> {
        let g = self.files.lock();
        g.1.iter().map(|i| g.0[i].clone()).collect()
    }
}

/// What one policy's replay leaves: the allocator, the files, the seconds it took and the
/// kernel's decisions.
type Replay = (Allocator, Vec<Arc<FileAlloc>>, f64, KernelModel);

/// Replays the trace's events of `dev` through `policy`.
fn replay_one(
    events: &[Event],
    dev: (u32, u32),
    geometry: Geometry,
    policy: &extalloc::Policy,
    odd: &mut Oddities,
) -> Result<Replay> {
    let alloc = Allocator::new(geometry, policy.clone())?;
    let shared = SharedFiles::default();
    let started = Instant::now();
    let kernel = replay_events(
        &alloc,
        events.iter().filter(|e| e.dev() == dev),
        &shared,
        odd,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    Ok((alloc, shared.all(), seconds, kernel))
}

/// Replays `events` in order on `alloc`. Returns the kernel's decisions still live at the
/// end (the model it translates frees through).
pub fn replay_events<'e>(
    alloc: &Allocator,
    events: impl Iterator<Item = &'e Event>,
    files: &SharedFiles,
    odd: &mut Oddities,
) -> Result<KernelModel> {
    // Our blocks for each kernel metadata allocation: kernel start -> (len, our extents).
    let mut meta: BTreeMap<u64, (u64, Vec<Extent>)> = BTreeMap::new();
    let mut pending: HashMap<u32, Event> = HashMap::new();
    // The kernel's live decisions, to translate its frees (by physical block) into files'
    // logical blocks.
    let mut kernel_live = KernelModel::default();
    let mut since_commit = 0u64;
    for e in events {
        match e {
            Event::Request { pid, .. } => {
                pending.insert(*pid, e.clone());
            }
            Event::Allocate {
                pid,
                ino,
                flags,
                len,
                block,
                lblk: decided_lblk,
                ..
            } => {
                let request = pending.remove(pid);
                if request.is_none() {
                    odd.decisions_without_request += 1;
                }
                // The request's flags; the kernel's decision says which blocks (a request
                // the kernel met only in part is asked again for the rest).
                let flags = match request {
                    Some(Event::Request {
                        flags, ino: rino, ..
                    }) if rino == *ino => flags,
                    _ => *flags,
                };
                let (want, lblk) = (*len, *decided_lblk);
                odd.requests += 1;
                kernel_live.allocate(*block, *len, *ino, *decided_lblk, flags.data);
                if flags.data {
                    let file = &files.get(alloc, *ino);
                    let mut l = lblk;
                    let end = lblk + want;
                    while l < end {
                        let mut req = DataRequest::new(l, end - l);
                        if flags.no_prealloc {
                            req = req.no_prealloc();
                        }
                        match alloc.allocate_data(file, &req) {
                            Ok(got) => l += got.len,
                            Err(Error::LogicalOverlap { .. }) => {
                                odd.requests_over_mapped_blocks += 1;
                                break;
                            }
                            Err(e) => return Err(e).context(format!("inode {ino} block {l}")),
                        }
                    }
                } else {
                    let mut ours = Vec::new();
                    let mut got = 0;
                    while got < *len {
                        let e = alloc
                            .allocate(&AllocRequest::new(*ino, *len - got))
                            .with_context(|| format!("metadata of inode {ino}"))?;
                        got += e.len;
                        ours.push(e);
                    }
                    meta.insert(*block, (*len, ours));
                }
                since_commit += 1;
                if since_commit >= 4096 {
                    alloc.commit();
                    since_commit = 0;
                }
            }
            Event::Free {
                block,
                count,
                metadata,
                ..
            } => {
                // Which logical blocks of which file the kernel freed, from its decisions.
                let pieces = kernel_live.free(*block, *count);
                if pieces.is_empty() {
                    odd.frees_of_unseen_blocks += 1;
                    continue;
                }
                if *metadata {
                    free_ours(alloc, &mut meta, *block, *count)?;
                    continue;
                }
                for (ino, lblk, len, data) in pieces {
                    match files.known(ino) {
                        Some(f) if data => {
                            alloc.free_data(&f, lblk, len)?;
                        }
                        _ => odd.frees_of_unseen_blocks += 1,
                    }
                }
            }
            Event::Discard { ino, .. } => {
                if let Some(f) = files.known(*ino) {
                    alloc.release_prealloc(&f)?;
                }
            }
        }
    }
    Ok(kernel_live)
}

/// Frees our blocks standing for kernel blocks `block .. block + count` (metadata). Returns
/// false when none of them was known.
fn free_ours(
    alloc: &Allocator,
    meta: &mut BTreeMap<u64, (u64, Vec<Extent>)>,
    block: u64,
    count: u64,
) -> Result<bool> {
    let end = block + count;
    let hits: Vec<u64> = meta
        .range(..end)
        .filter(|(&s, &(l, _))| s + l > block)
        .map(|(&s, _)| s)
        .collect();
    if hits.is_empty() {
        return Ok(false);
    }
    for s in hits {
        let (l, ours) = meta.remove(&s).expect("listed");
        let (a, b) = (s.max(block), (s + l).min(end));
        // Our extents cover kernel offsets 0..l in order; free offsets a-s .. b-s.
        let (lo, hi) = (a - s, b - s);
        let mut off = 0;
        let mut keep_before = Vec::new();
        let mut keep_after = Vec::new();
        for e in ours {
            let (es, ee) = (off, off + e.len);
            off = ee;
            let (fs, fe) = (es.max(lo), ee.min(hi));
            if fs >= fe {
                if ee <= lo {
                    keep_before.push(e);
                } else {
                    keep_after.push(e);
                }
                continue;
            }
            alloc.free(Extent::new(e.start + (fs - es), fe - fs))?;
            if es < fs {
                keep_before.push(Extent::new(e.start, fs - es));
            }
            if fe < ee {
                keep_after.push(Extent::new(e.start + (fe - es), ee - fe));
            }
        }
        if a > s {
            meta.insert(s, (a - s, keep_before));
        }
        if b < s + l {
            meta.insert(b, (s + l - b, keep_after));
        }
    }
    Ok(true)
}

pub struct ReplayOptions<'a> {
    pub trace: &'a Path,
    pub dev: Option<(u32, u32)>,
    pub blocks: Option<u64>,
    pub group_blocks: Option<u64>,
    pub block_size: u32,
    pub policies: Vec<String>,
    /// Replay only the first this many events (tests).
    pub limit: Option<usize>,
}

/// Replays the trace through every policy and returns the report (plus what was odd).
pub fn run(opts: &ReplayOptions<'_>) -> Result<(Report, Oddities, Trace)> {
    let mut trace = load(opts.trace)?;
    if let Some(n) = opts.limit {
        trace.events.truncate(n);
    }
    let dev = match opts.dev.or_else(|| busiest_dev(&trace)) {
        Some(d) => d,
        None => bail!("{}: no allocation events", opts.trace.display()),
    };
    let readme = geometry_from_readme(opts.trace);
    let blocks = opts.blocks.or(readme.map(|r| r.0)).context(
        "the device size is unknown: give --blocks (no README next to the trace says it)",
    )?;
    let group_blocks = opts.group_blocks.or(readme.map(|r| r.1)).unwrap_or(32768);
    let geometry = Geometry::new(opts.block_size, group_blocks, blocks).context("geometry")?;
    let mut runs = Vec::new();
    let mut kernel: Option<KernelModel> = None;
    let mut odd = Oddities::default();
    for (i, spec) in opts.policies.iter().enumerate() {
        let LabPolicy::Extalloc(policy) = LabPolicy::parse(spec)? else {
            bail!("replay runs extalloc policies; {spec} has no files");
        };
        eprint!("replaying through {spec}... ");
        let mut this_odd = Oddities::default();
        let (alloc, files, seconds, decided) =
            replay_one(&trace.events, dev, geometry, &policy, &mut this_odd)
                .with_context(|| format!("{spec}: replaying {}", opts.trace.display()))?;
        if i == 0 {
            // The kernel's decisions are the same in every replay: keep the first.
            odd = this_odd.clone();
            kernel = Some(decided);
        }
        let layout_files: Vec<Vec<Extent>> = files
            .iter()
            .map(|f| f.extents().into_iter().map(|(_, e)| e).collect())
            .collect();
        alloc.discard_preallocations();
        alloc.commit();
        alloc
            .check()
            .with_context(|| format!("{spec}: check after the replay"))?;
        let ops = this_odd.requests;
        eprintln!("{:.0} requests/s", ops as f64 / seconds.max(1e-9));
        runs.push(Run {
            policy: policy.name.clone(),
            threads: 1,
            seconds,
            ops,
            ops_per_sec: ops as f64 / seconds.max(1e-9),
            ops_per_sec_repeats: vec![ops as f64 / seconds.max(1e-9)],
            latency_ns: report::latency_of(&alloc.stats_handle().latency_histogram()),
            layout: report::layout(&layout_files, geometry.block_size),
            free_space: Some(report::free_space_json(
                &alloc.free_space(),
                geometry.block_size,
                geometry.group_blocks,
            )),
            counters: Some(report::counters(&alloc, 0)),
            progress: None,
        });
    }
    // The kernel's decisions, at the pace the trace recorded them.
    let kernel = kernel.context("no policy to replay through")?;
    runs.push(Run {
        policy: "kernel".into(),
        threads: 1,
        seconds: trace.span_seconds,
        ops: odd.requests,
        ops_per_sec: odd.requests as f64 / trace.span_seconds.max(1e-9),
        ops_per_sec_repeats: Vec::new(),
        latency_ns: Latency {
            p50: 0,
            p95: 0,
            p99: 0,
            max: 0,
        },
        layout: report::layout(&kernel.files(), geometry.block_size),
        free_space: Some(report::free_space_json(
            &kernel.free_space(&geometry),
            geometry.block_size,
            geometry.group_blocks,
        )),
        counters: None,
        progress: None,
    });
    let report = Report {
        schema: "extalloc-bench/1".into(),
        workload: format!(
            "replay {}",
            opts.trace
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ),
        params: serde_json::json!({
            "trace": opts.trace,
            "dev": format!("{},{}", dev.0, dev.1),
            "policies": opts.policies,
            "events": trace.events.len(),
            "lines": trace.lines,
            "malformed": trace.malformed,
            "oddities": odd,
        }),
        device: report::Device::of(&geometry),
        runs,
    };
    Ok((report, odd, trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_model_splits_frees() {
        let mut k = KernelModel::default();
        k.allocate(100, 10, 1, 0, true);
        k.allocate(200, 5, 2, 0, false);
        assert_eq!(k.free(103, 4), vec![(1, 3, 4, true)]);
        assert!(k.free(500, 1).is_empty());
        let files = k.files();
        assert_eq!(files, vec![vec![Extent::new(100, 3), Extent::new(107, 3)]]);
        let g = Geometry::new(4096, 256, 1024).unwrap();
        assert_eq!(k.free_space(&g).free_blocks, 1024 - 6 - 5);
    }

    #[test]
    fn frees_translate_through_partial_allocations() {
        let g = Geometry::new(4096, 256, 1024).unwrap();
        let alloc = Allocator::new(g, extalloc::Policy::default()).unwrap();
        let a = alloc.allocate(&AllocRequest::new(1, 3)).unwrap();
        let b = alloc.allocate(&AllocRequest::new(1, 2)).unwrap();
        let mut meta = BTreeMap::new();
        // Kernel blocks 1000..1005 stand for our a (3) then b (2).
        meta.insert(1000, (5, vec![a, b]));
        assert!(free_ours(&alloc, &mut meta, 1002, 2).unwrap());
        alloc.commit();
        // a's last block and b's first are free again; the rest stays.
        assert_eq!(alloc.free_blocks(), 1024 - 3);
        assert!(!free_ours(&alloc, &mut meta, 5000, 1).unwrap());
        assert!(free_ours(&alloc, &mut meta, 1000, 5).unwrap());
        alloc.commit();
        assert_eq!(alloc.free_blocks(), 1024);
        alloc.check().unwrap();
    }
}
