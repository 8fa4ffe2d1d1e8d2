//! `extalloc replay TRACE`: feeds the requests of a kernel ext4 allocation trace through
//! extalloc's policies, in trace order, on a device of the traced geometry, and compares the
//! resulting layout and free space with what the kernel decided (a run named `kernel`).
//!
//! - [`parse`] reads tracefs lines; [`geometry`] settles the traced geometry and refuses a
//!   trace whose blocks lie outside it; [`generations`] renames inodes to file keys before
//!   any replay; [`engine`] replays events with the fidelity rules of `docs/replay.md` (a
//!   reused inode is a new file, locality chunks per traced CPU, commits where the kernel
//!   committed, unrounded requests replayed as complete, stream goals for the traced CPU
//!   count); [`bench`](mod@bench) runs the same engine one thread per task.
//! - Both sides are measured on a device of the traced size that holds the kernel's own
//!   metadata (inode tables, journal) where the capture header lists it ([`reserved`]),
//!   and on an otherwise empty one where it does not (older traces).

pub mod bench;
pub mod capture;
#[cfg(test)]
mod edge_traces;
pub mod engine;
pub mod generations;
pub mod geometry;
pub mod parse;
pub mod reserved;
pub mod rules;

use crate::lab::backend::LabPolicy;
use crate::lab::report::{self, Latency, Report, Run};
use anyhow::{bail, Context, Result};
use engine::{replay_events, KernelModel, Oddities, Rules, SharedFiles};
use extalloc::{Allocator, Extent, FileAlloc, Files, Geometry, Policy};
use parse::{Header, Line, Traced};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A parsed trace.
pub struct Trace {
    pub events: Vec<Traced>,
    /// The `# extalloc capture:` header, if the trace has one.
    pub header: Option<Header>,
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
    load_from(reader).with_context(|| format!("reading {}", path.display()))
}

/// Reads a trace from any reader (the fuzz target and tests feed bytes).
pub fn load_from(reader: impl Read) -> Result<Trace> {
    let mut trace = Trace {
        events: Vec::new(),
        header: None,
        lines: 0,
        malformed: 0,
        malformed_examples: Vec::new(),
        span_seconds: 0.0,
    };
    let (mut first, mut last) = (None::<u64>, 0u64);
    for line in BufReader::new(reader).split(b'\n') {
        let line = line?;
        let line = String::from_utf8_lossy(&line);
        trace.lines += 1;
        if trace.header.is_none() {
            trace.header = parse::parse_header(&line);
        }
        match parse::parse_line(&line) {
            Line::Event(t) => {
                if t.ns > 0 {
                    first.get_or_insert(t.ns);
                    last = last.max(t.ns);
                }
                trace.events.push(t);
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
    trace.span_seconds = first.map_or(0.0, |f| last.saturating_sub(f) as f64 / 1e9);
    Ok(trace)
}

/// The device the trace names in its header, else the most frequent one.
pub fn traced_dev(trace: &Trace) -> Option<(u32, u32)> {
    if let Some(dev) = trace.header.as_ref().and_then(|h| h.dev) {
        return Some(dev);
    }
    let mut counts: std::collections::HashMap<(u32, u32), u64> = Default::default();
    for t in &trace.events {
        *counts.entry(t.dev).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(d, n)| (n, d))
        .map(|(d, _)| d)
}

/// The policy as the traced machine would have run it: `stream_goals=0` (auto) becomes
/// what the allocator would pick on a machine of the traced CPU count.
pub fn as_traced(policy: &Policy, geometry: &Geometry, cpus: u32, rules: &Rules) -> Policy {
    let mut p = policy.clone();
    if p.stream_goals == 0 && rules.traced_stream_goals {
        let quarter = (geometry.groups_count() / 4).max(1);
        p.stream_goals = u32::try_from(u64::from(cpus.max(1)).min(quarter)).unwrap_or(1);
    }
    p
}

/// What one policy's replay leaves: the allocator, the files, the seconds it took and the
/// kernel's decisions.
type Replay = (Files, Vec<Arc<FileAlloc>>, f64, KernelModel, Oddities);

/// Replays `events` through `policy` on a fresh allocator that holds `reserved` used.
fn replay_one(
    events: &[Traced],
    geometry: Geometry,
    policy: &Policy,
    rules: Rules,
    reserved: &[(u64, u64)],
) -> Result<Replay> {
    let alloc = Files::new(Allocator::new(geometry, policy.clone())?);
    reserved::hold(&alloc, &geometry, reserved)?;
    let shared = SharedFiles::default();
    let started = Instant::now();
    let (kernel, odd) = replay_events(&alloc, events.iter(), &shared, rules)?;
    let seconds = started.elapsed().as_secs_f64();
    Ok((alloc, shared.all(), seconds, kernel, odd))
}

pub struct ReplayOptions<'a> {
    pub trace: &'a Path,
    pub dev: Option<(u32, u32)>,
    pub blocks: Option<u64>,
    pub group_blocks: Option<u64>,
    pub block_size: Option<u32>,
    pub policies: Vec<String>,
    /// Replay only the first this many events (tests).
    pub limit: Option<usize>,
    /// Fidelity rules switched off (names of `rules::RULES`), to measure what each does.
    pub without: Vec<String>,
    /// Write every file's extents on each side here (JSON: policy -> file id -> list of
    /// `[logical, start, len]`).
    pub dump_files: Option<std::path::PathBuf>,
}

/// Replays the trace through every policy and returns the report (plus what was odd).
pub fn run(opts: &ReplayOptions<'_>) -> Result<(Report, Oddities, Trace)> {
    let prepared = prepare(opts)?;
    if let Some(path) = &opts.dump_files {
        // Fail before the replay, not after it.
        std::fs::write(path, b"{}").with_context(|| format!("writing {}", path.display()))?;
    }
    let mut dump = serde_json::Map::new();
    let mut runs = Vec::new();
    let mut kernel: Option<KernelModel> = None;
    let mut odd = Oddities::default();
    for (i, spec) in opts.policies.iter().enumerate() {
        let replayed = replay_policy(spec, &prepared, opts)?;
        if i == 0 {
            // The kernel's decisions are the same in every replay: keep the first.
            odd = replayed.odd;
            odd.files_reused = prepared.reused;
            kernel = Some(replayed.kernel);
        }
        if let Some(ours) = replayed.files {
            dump.insert(replayed.run.policy.clone(), ours.into());
        }
        runs.push(replayed.run);
    }
    // The kernel's decisions, at the pace the trace recorded them.
    let kernel = kernel.context("no policy to replay through")?;
    if let Some(path) = &opts.dump_files {
        dump.insert("kernel".into(), kernel.files_json());
        std::fs::write(path, serde_json::to_vec(&dump)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    runs.push(kernel_run(&kernel, &odd, &prepared)?);
    let report = report_of(opts, &prepared, &odd, runs);
    Ok((report, odd, prepared.trace))
}

/// A trace ready to replay: its events on the chosen device (up to `--limit`), their
/// inodes renamed to file keys, and the geometry and rules it allows.
struct Prepared {
    trace: Trace,
    dev: (u32, u32),
    traced: geometry::TracedGeometry,
    rules: Rules,
    /// Lives of inode numbers that ended in the trace.
    reused: u64,
    /// The file system's metadata from the capture header, held used on both sides.
    reserved: Vec<(u64, u64)>,
}

/// Loads the trace, keeps the device's events, settles the geometry and the rules, numbers
/// the inode generations, and says on stderr what it settled.
fn prepare(opts: &ReplayOptions<'_>) -> Result<Prepared> {
    let mut trace = load(opts.trace)?;
    let dev = match opts.dev.or_else(|| traced_dev(&trace)) {
        Some(d) => d,
        None => bail!("{}: no allocation events", opts.trace.display()),
    };
    trace.events.retain(|t| t.dev == dev);
    if let Some(n) = opts.limit {
        trace.events.truncate(n);
    }
    let traced = geometry::resolve(
        opts.trace,
        trace.header.as_ref(),
        &trace.events,
        opts.blocks,
        opts.group_blocks,
        opts.block_size,
    )?;
    let geometry = traced.geometry;
    let reserved = header_reserved(opts.trace, trace.header.as_ref())?;
    let rules = Rules::for_events(trace.events.iter()).without(&opts.without)?;
    let reused = generations::number_generations(&mut trace.events, &rules)
        .with_context(|| format!("{}: numbering inode generations", opts.trace.display()))?;
    eprintln!(
        "geometry: {} blocks of {} bytes, {} per group ({}); {} traced CPUs; commits: {:?}",
        geometry.blocks_count,
        geometry.block_size,
        geometry.group_blocks,
        traced.source,
        traced.cpus,
        rules.commit
    );
    if !reserved.is_empty() {
        let blocks: u64 = reserved.iter().map(|&(_, l)| l).sum();
        eprintln!(
            "metadata: {blocks} blocks in {} ranges held used on both sides (capture header)",
            reserved.len()
        );
    }
    Ok(Prepared {
        trace,
        dev,
        traced,
        rules,
        reused,
        reserved,
    })
}

/// The metadata ranges the capture header lists (none when it lists none); a field that
/// does not parse refuses the trace.
pub fn header_reserved(path: &Path, header: Option<&Header>) -> Result<Vec<(u64, u64)>> {
    let Some(h) = header else {
        return Ok(Vec::new());
    };
    if let Some(bad) = &h.reserved_malformed {
        bail!(
            "{}: the header's reserved field does not read as START+LEN,...: {bad:.80}",
            path.display()
        );
    }
    Ok(h.reserved.clone())
}

/// One policy's replay: its run, the kernel's decisions, what was odd and (with
/// `--dump-files`) its files' extents.
struct PolicyReplay {
    run: Run,
    kernel: KernelModel,
    odd: Oddities,
    files: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Replays the trace through `spec` (as the traced machine would have run it), checks the
/// allocator afterwards and measures the run.
fn replay_policy(
    spec: &str,
    prepared: &Prepared,
    opts: &ReplayOptions<'_>,
) -> Result<PolicyReplay> {
    let geometry = prepared.traced.geometry;
    let LabPolicy::Extalloc(policy) = LabPolicy::parse(spec)? else {
        bail!("replay runs extalloc policies; {spec} has no files");
    };
    let policy = as_traced(&policy, &geometry, prepared.traced.cpus, &prepared.rules);
    eprint!("replaying through {spec}... ");
    let (alloc, files, seconds, kernel, odd) = replay_one(
        &prepared.trace.events,
        geometry,
        &policy,
        prepared.rules,
        &prepared.reserved,
    )
    .with_context(|| format!("{spec}: replaying {}", opts.trace.display()))?;
    let layout_files: Vec<Vec<Extent>> = files
        .iter()
        .map(|f| f.extents().into_iter().map(|(_, e)| e).collect())
        .collect();
    let dumped = opts.dump_files.as_ref().map(|_| files_json(&files));
    alloc.discard_preallocations();
    alloc.allocator().commit();
    alloc
        .check()
        .with_context(|| format!("{spec}: check after the replay"))?;
    let ops = odd.requests;
    eprintln!("{:.0} requests/s", ops as f64 / seconds.max(1e-9));
    let run = Run {
        policy: policy.name.clone(),
        threads: 1,
        seconds,
        ops,
        ops_per_sec: ops as f64 / seconds.max(1e-9),
        ops_per_sec_repeats: vec![ops as f64 / seconds.max(1e-9)],
        latency_ns: report::latency_of(&alloc.allocator().stats_handle().latency_histogram()),
        layout: report::layout(&layout_files, geometry.block_size),
        free_space: Some(report::free_space_json(
            &alloc.allocator().free_space(),
            geometry.block_size,
            geometry.group_blocks,
        )),
        counters: Some(report::counters(&alloc.allocator().stats(), 0)),
        progress: None,
        writeback: None,
    };
    Ok(PolicyReplay {
        run,
        kernel,
        odd,
        files: dumped,
    })
}

/// Our files' `[logical, start, len]` extents, by file id and the order first met (files
/// with none are left out), for `--dump-files`.
fn files_json(files: &[Arc<FileAlloc>]) -> serde_json::Map<String, serde_json::Value> {
    files
        .iter()
        .filter(|f| !f.extents().is_empty())
        .enumerate()
        .map(|(i, f)| {
            let list: Vec<[u64; 3]> = f
                .extents()
                .into_iter()
                .map(|(l, e)| [l, e.start, e.len])
                .collect();
            (format!("{}#{i}", f.id()), serde_json::json!(list))
        })
        .collect()
}

/// The kernel's run: its decisions still live at the end, at the pace the trace recorded
/// them (no latency or counters).
fn kernel_run(kernel: &KernelModel, odd: &Oddities, prepared: &Prepared) -> Result<Run> {
    let (geometry, seconds) = (prepared.traced.geometry, prepared.trace.span_seconds);
    Ok(Run {
        policy: "kernel".into(),
        threads: 1,
        seconds,
        ops: odd.requests,
        ops_per_sec: odd.requests as f64 / seconds.max(1e-9),
        ops_per_sec_repeats: Vec::new(),
        latency_ns: Latency {
            p50: 0,
            p95: 0,
            p99: 0,
            max: 0,
        },
        layout: report::layout(&kernel.files(), geometry.block_size),
        free_space: Some(report::free_space_json(
            &kernel.free_space(&geometry, &prepared.reserved)?,
            geometry.block_size,
            geometry.group_blocks,
        )),
        counters: None,
        progress: None,
        writeback: None,
    })
}

/// The report of the replay's `runs`, with what the replay settled and met as parameters.
fn report_of(
    opts: &ReplayOptions<'_>,
    prepared: &Prepared,
    odd: &Oddities,
    runs: Vec<Run>,
) -> Report {
    let (trace, dev) = (&prepared.trace, prepared.dev);
    Report::new(
        format!(
            "replay {}",
            opts.trace
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ),
        serde_json::json!({
            "trace": opts.trace,
            "dev": format!("{},{}", dev.0, dev.1),
            "policies": opts.policies,
            "events": trace.events.len(),
            "lines": trace.lines,
            "malformed": trace.malformed,
            "oddities": odd,
            "rules": prepared.rules,
            "geometry_source": prepared.traced.source,
            "traced_cpus": prepared.traced.cpus,
        }),
        report::Device::of(&prepared.traced.geometry),
        runs,
    )
}
