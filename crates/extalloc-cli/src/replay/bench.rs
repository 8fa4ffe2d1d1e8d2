//! `extalloc bench replay --trace PATH`: a trace replayed as a lab workload, one thread per
//! traced task (pid), each replaying its own events in trace order while the others run, on
//! a device of the traced geometry (from the README next to the trace, else `--device-size`
//! and `--group-blocks`). Files are shared: a kworker and an fio task may write the same
//! inode. A free logged by one task of blocks another task allocated is counted as unseen
//! (each thread translates frees through its own tasks' decisions). One op is one request.

use super::{busiest_dev, geometry_from_readme, load, replay_events, Oddities, SharedFiles, Trace};
use crate::lab::backend::LabPolicy;
use crate::lab::report::Run;
use crate::lab::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Traces already parsed in this process (a matrix replays one trace many times).
fn cached(path: &PathBuf) -> Result<Arc<Trace>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<Trace>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().expect("not poisoned").get(path) {
        return Ok(t.clone());
    }
    let t = Arc::new(load(path)?);
    cache
        .lock()
        .expect("not poisoned")
        .insert(path.clone(), t.clone());
    Ok(t)
}

pub fn run_once(policy: &LabPolicy, _threads: usize, opts: &LabOptions) -> Result<Run> {
    let path = opts
        .trace
        .as_ref()
        .context("bench replay needs --trace PATH (a trace such as ../shared/traces/*.gz)")?;
    let trace = cached(path)?;
    let dev = busiest_dev(&trace).context("the trace has no allocation events")?;
    let mut tasks: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, e) in trace.events.iter().enumerate() {
        if e.dev() == dev {
            tasks.entry(e.pid()).or_default().push(i);
        }
    }
    let tasks: Vec<Vec<usize>> = tasks.into_values().collect();
    let mut opts = opts.clone();
    if let Some((blocks, group_blocks)) = geometry_from_readme(path) {
        opts.device_bytes = blocks * u64::from(opts.block_size);
        opts.group_blocks = group_blocks;
    }
    let files = SharedFiles::default();
    let running = AtomicUsize::new(tasks.len());
    run_file_threads(
        "replay",
        policy,
        tasks.len(),
        &opts,
        Until::Done,
        |alloc, t, _, _| {
            let mut odd = Oddities::default();
            let result = replay_events(
                alloc,
                tasks[t].iter().map(|&i| &trace.events[i]),
                &files,
                &mut odd,
            );
            // The last task to finish reports every file, once all have stopped writing.
            let last = running.fetch_sub(1, Ordering::SeqCst) == 1;
            result?;
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
