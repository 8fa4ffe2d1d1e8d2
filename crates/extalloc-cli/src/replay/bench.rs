//! `extalloc bench replay --trace PATH`: a trace replayed as a lab workload, one thread per
//! traced task (pid), each replaying its own events in trace order while the others run, on
//! a device of the traced geometry (the trace's header or README, as `extalloc replay`
//! settles it; `--device-size` and `--group-blocks` only when the trace says nothing).
//! Files are shared: a kworker and an fio task may write the same inode. A free logged by
//! one task of blocks another task allocated is counted as unseen (each thread translates
//! frees through its own tasks' decisions). Journal commits are the jbd2 thread's events,
//! so under the traced rule that thread commits; the fallback rule commits per task. One op
//! is one request.

use super::engine::{replay_events, Rules, SharedFiles};
use super::generations::number_generations;
use super::{as_traced, geometry, load, traced_dev, Trace};
use crate::lab::backend::LabPolicy;
use crate::lab::report::Run;
use crate::lab::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A trace with its inode generations numbered, and the rules it allows (every one on).
type Prepared = Arc<(Trace, Rules)>;

/// Traces already parsed in this process (a matrix replays one trace many times).
fn cached(path: &PathBuf) -> Result<Prepared> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Prepared>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().expect("not poisoned").get(path) {
        return Ok(t.clone());
    }
    let mut t = load(path)?;
    let rules = Rules::for_events(t.events.iter());
    number_generations(&mut t.events, &rules)
        .with_context(|| format!("{}: numbering inode generations", path.display()))?;
    let t = Arc::new((t, rules));
    cache
        .lock()
        .expect("not poisoned")
        .insert(path.clone(), t.clone());
    Ok(t)
}

pub fn run_once(policy: &LabPolicy, _threads: usize, opts: &LabOptions) -> Result<Run> {
    let path = opts.trace.as_ref().context(
        "bench replay needs --trace PATH (a trace such as traces/git-checkout.trace.txt.gz)",
    )?;
    let prepared = cached(path)?;
    let (trace, rules) = (&prepared.0, prepared.1);
    let dev = traced_dev(trace).context("the trace has no allocation events")?;
    let mut tasks: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in trace.events.iter().enumerate() {
        if t.dev == dev {
            tasks.entry(t.pid).or_default().push(i);
        }
    }
    let tasks: Vec<Vec<usize>> = tasks.into_values().collect();
    let mut opts = opts.clone();
    let blocks = opts.device_bytes / u64::from(opts.block_size);
    let traced =
        match geometry::resolve(path, trace.header.as_ref(), &trace.events, None, None, None) {
            Ok(t) => t,
            // The trace says nothing of its geometry: the lab's device, checked.
            Err(_) => geometry::resolve(
                path,
                None,
                &trace.events,
                Some(blocks),
                Some(opts.group_blocks),
                Some(opts.block_size),
            )?,
        };
    opts.device_bytes = traced.geometry.blocks_count * u64::from(traced.geometry.block_size);
    opts.group_blocks = traced.geometry.group_blocks;
    opts.block_size = traced.geometry.block_size;
    let policy = match policy {
        LabPolicy::Extalloc(p) => {
            LabPolicy::Extalloc(as_traced(p, &traced.geometry, traced.cpus, &rules))
        }
        other => other.clone(),
    };
    let policy = &policy;
    let files = SharedFiles::default();
    let running = AtomicUsize::new(tasks.len());
    run_file_threads(
        "replay",
        policy,
        tasks.len(),
        &opts,
        Until::Done,
        |alloc, t, _, _| {
            let result = replay_events(
                alloc,
                tasks[t].iter().map(|&i| &trace.events[i]),
                &files,
                rules,
            );
            // The last task to finish reports every file, once all have stopped writing.
            let last = running.fetch_sub(1, Ordering::SeqCst) == 1;
            let (_, odd) = result?;
            let layout = if last {
                files
                    .all()
                    .iter()
                    .map(|f| f.extents().into_iter().map(|(_, e)| e).collect())
                    .collect()
            } else {
                Vec::new()
            };
            Ok(ThreadOutput {
                ops: odd.requests,
                files: layout,
                marks: Vec::new(),
            })
        },
    )
}
