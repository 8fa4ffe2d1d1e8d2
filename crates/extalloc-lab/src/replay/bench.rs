//! `extalloc bench replay --trace PATH`: a trace replayed as a lab workload, one thread per
//! traced task (pid), each replaying its own events in trace order while the others run, on
//! a device of the traced geometry (the trace's header or README, as `extalloc replay`
//! settles it; `--device-size` and `--group-blocks` only when the trace says nothing).
//! Files are shared: a kworker and an fio task may write the same inode. A free logged by
//! one task of blocks another task allocated is counted as unseen (each thread translates
//! frees through its own tasks' decisions). A file's own events (decisions, frees, discards,
//! its inode's death) keep their trace order across tasks: an event waits until the file's
//! earlier ones, whichever task logged them, have run (`FileOrder`), so a kworker's final
//! writeback and discards do not overtake the writer before them; different files race
//! freely. Journal commits are the jbd2 thread's events,
//! so under the traced rule that thread commits; the fallback rule commits per task. A
//! commit waits until the frees logged before it have run (`FileOrder`): a jbd2 thread that
//! ran ahead of the writers committed nothing, and every later free stayed pending, so a
//! crowded device looked fuller than the kernel's ever was. Likewise a decision waits until
//! the commits logged before it have run: the writer that ran ahead of the jbd2 thread
//! allocated before frees the kernel had already made reusable, and cut into the largest
//! free regions instead. One op is one request.

use super::engine::{replay_events, Rules, SharedFiles};
use super::generations::number_generations;
use super::parse::{Event, Traced};
use super::{as_traced, geometry, load, traced_dev, Trace};
use crate::lab::backend::LabPolicy;
use crate::lab::report::Run;
use crate::lab::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    let (opts, traced) = with_traced_geometry(path, trace, opts)?;
    let policy = match policy {
        LabPolicy::Extalloc(p) => {
            LabPolicy::Extalloc(as_traced(p, &traced.geometry, traced.cpus, &rules))
        }
        other => other.clone(),
    };
    let policy = &policy;
    let order = FileOrder::new(&trace.events, dev);
    let abort = AtomicBool::new(false);
    let reserved = super::header_reserved(path, trace.header.as_ref())?;
    let held = AtomicBool::new(reserved.is_empty());
    let files = SharedFiles::default();
    let running = AtomicUsize::new(tasks.len());
    run_file_threads(
        "replay",
        policy,
        tasks.len(),
        &opts,
        Until::Done,
        |alloc, t, _, _| {
            hold_before_replay(alloc, t, &traced.geometry, &reserved, &held, &abort)?;
            let result = replay_events(
                alloc,
                Ordered {
                    indices: tasks[t].iter(),
                    events: &trace.events,
                    order: &order,
                    abort: &abort,
                    pending: None,
                    pending_commit: false,
                },
                &files,
                rules,
            );
            if result.is_err() {
                abort.store(true, Ordering::SeqCst);
            }
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

/// The first task's thread holds the file system's metadata (`reserved`) used and sets
/// `held`; every thread waits for that before it replays an event. A failure sets `abort`.
fn hold_before_replay(
    alloc: &extalloc::Files,
    t: usize,
    geometry: &extalloc::Geometry,
    reserved: &[(u64, u64)],
    held: &AtomicBool,
    abort: &AtomicBool,
) -> Result<()> {
    if t == 0 && !reserved.is_empty() {
        if let Err(e) = super::reserved::hold(alloc, geometry, reserved) {
            abort.store(true, Ordering::SeqCst);
            return Err(e);
        }
        held.store(true, Ordering::SeqCst);
    }
    wait_until(abort, || held.load(Ordering::SeqCst));
    anyhow::ensure!(
        held.load(Ordering::SeqCst),
        "another task's thread failed before the replay"
    );
    Ok(())
}

/// `opts` on the trace's own geometry (its header or README; the lab's device, checked,
/// when the trace says nothing), and that geometry.
fn with_traced_geometry(
    path: &std::path::Path,
    trace: &Trace,
    opts: &LabOptions,
) -> Result<(LabOptions, geometry::TracedGeometry)> {
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
    Ok((opts, traced))
}

/// Trace order per file across tasks: an event that changes a file (a decision, a free, a
/// discard, the inode's death) waits until the file's earlier such events, whichever task
/// logged them, have been replayed. Tasks still race on different files (and on the
/// allocator), but a writeback or close that the kernel logged after a writer's last write
/// is not replayed before it. A journal commit waits until as many frees have been
/// replayed as the trace logged before it (the blocks a commit makes reusable are those
/// freed before it), and a decision until as many commits have been replayed as the trace
/// logged before it (the kernel's allocation saw the space those commits returned). No
/// deadlock: each task replays its events in trace order, and an event only waits for
/// events earlier in the trace.
struct FileOrder {
    /// Per event: (the file's slot, the event's rank among the file's ordered events).
    rank: Vec<Option<(usize, usize)>>,
    /// Per file slot: how many of its ordered events have been replayed.
    done: Vec<AtomicUsize>,
    /// Per event: for a commit, the number of frees logged before it.
    frees_before: Vec<Option<usize>>,
    /// Frees replayed so far, whichever task logged them.
    frees_done: AtomicUsize,
    /// Per event: for a decision, the number of commits logged before it.
    commits_before: Vec<Option<usize>>,
    /// Commits replayed so far.
    commits_done: AtomicUsize,
}

impl FileOrder {
    fn new(events: &[Traced], dev: (u32, u32)) -> Self {
        let mut slots: HashMap<u64, (usize, usize)> = HashMap::new();
        let rank = events
            .iter()
            .map(|t| {
                if t.dev != dev {
                    return None;
                }
                let ino = match t.event {
                    Event::Allocate { ino, .. }
                    | Event::Free { ino, .. }
                    | Event::Discard { ino }
                    | Event::InodeFree { ino } => ino,
                    _ => return None,
                };
                let n = slots.len();
                let (slot, next) = slots.entry(ino).or_insert((n, 0));
                let r = *next;
                *next += 1;
                Some((*slot, r))
            })
            .collect();
        let done = (0..slots.len()).map(|_| AtomicUsize::new(0)).collect();
        let (mut frees, mut commits) = (0, 0);
        let (frees_before, commits_before) = events
            .iter()
            .map(|t| match t.event {
                _ if t.dev != dev => (None, None),
                Event::Free { .. } => {
                    frees += 1;
                    (None, None)
                }
                Event::Commit => {
                    commits += 1;
                    (Some(frees), None)
                }
                Event::Allocate { .. } => (None, Some(commits)),
                _ => (None, None),
            })
            .unzip();
        FileOrder {
            rank,
            done,
            frees_before,
            frees_done: AtomicUsize::new(0),
            commits_before,
            commits_done: AtomicUsize::new(0),
        }
    }
}

/// Spins, then yields, until `ready` or `abort`.
fn wait_until(abort: &AtomicBool, ready: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !ready() && !abort.load(Ordering::Relaxed) {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// One task's events, each released in its file's trace order (see [`FileOrder`]).
struct Ordered<'a, I> {
    indices: I,
    events: &'a [Traced],
    order: &'a FileOrder,
    abort: &'a AtomicBool,
    /// The file slot of the event handed out last, and whether it was a free: done once
    /// the next one is asked for.
    pending: Option<(usize, bool)>,
    /// Whether the event handed out last was a commit: counted once the next one is asked
    /// for.
    pending_commit: bool,
}

impl<I> Ordered<'_, I> {
    fn finish_pending(&mut self) {
        if std::mem::take(&mut self.pending_commit) {
            self.order.commits_done.fetch_add(1, Ordering::Release);
        }
        if let Some((slot, free)) = self.pending.take() {
            if free {
                self.order.frees_done.fetch_add(1, Ordering::Release);
            }
            self.order.done[slot].fetch_add(1, Ordering::Release);
        }
    }
}

impl<'a, I: Iterator<Item = &'a usize>> Iterator for Ordered<'a, I> {
    type Item = &'a Traced;

    fn next(&mut self) -> Option<&'a Traced> {
        self.finish_pending();
        let &i = self.indices.next()?;
        let order = self.order;
        if let Some((slot, rank)) = order.rank[i] {
            wait_until(self.abort, || {
                order.done[slot].load(Ordering::Acquire) == rank
            });
            let free = matches!(self.events[i].event, Event::Free { .. });
            self.pending = Some((slot, free));
        }
        if let Some(frees) = order.frees_before[i] {
            wait_until(self.abort, || {
                order.frees_done.load(Ordering::Acquire) >= frees
            });
            self.pending_commit = true;
        }
        if let Some(commits) = order.commits_before[i] {
            wait_until(self.abort, || {
                order.commits_done.load(Ordering::Acquire) >= commits
            });
        }
        Some(&self.events[i])
    }
}

impl<I> Drop for Ordered<'_, I> {
    fn drop(&mut self) {
        self.finish_pending();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Task `pid`'s `event` on device 7,1.
    fn ev(pid: u32, event: Event) -> Traced {
        Traced {
            ns: 0,
            cpu: 0,
            pid,
            dev: (7, 1),
            event,
        }
    }

    /// A free of one block of inode `ino`.
    fn free(ino: u64) -> Event {
        Event::Free {
            ino,
            block: 0,
            count: 1,
            metadata: false,
        }
    }

    /// Replays two tasks' events on two threads, the second task's thread starting first
    /// and the first's 20 ms later: the events' indices in the order they were replayed.
    fn replay_late_first(
        events: &[Traced],
        order: &FileOrder,
        tasks: [Vec<usize>; 2],
    ) -> Vec<usize> {
        let abort = AtomicBool::new(false);
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in [1, 0] {
                let (tasks, abort, seen) = (&tasks, &abort, &seen);
                s.spawn(move || {
                    if t == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    let ordered = Ordered {
                        indices: tasks[t].iter(),
                        events,
                        order,
                        abort,
                        pending: None,
                        pending_commit: false,
                    };
                    for e in ordered {
                        let i = events.iter().position(|x| std::ptr::eq(x, e)).unwrap();
                        seen.lock().unwrap().push(i);
                    }
                });
            }
        });
        seen.into_inner().unwrap()
    }

    /// One file's events reach the replay in trace order whichever task's thread runs
    /// first; another file's event does not wait for them.
    #[test]
    fn a_files_events_keep_their_trace_order_across_tasks() {
        let events = vec![
            ev(1, Event::Discard { ino: 5 }),
            ev(2, Event::Discard { ino: 5 }),
            ev(2, Event::Discard { ino: 6 }),
            ev(1, Event::InodeFree { ino: 5 }),
            ev(2, free(5)),
        ];
        let order = FileOrder::new(&events, (7, 1));
        // Task 2's thread is well under way: its first event still waits.
        let seen = replay_late_first(&events, &order, [vec![0, 3], vec![1, 2, 4]]);
        let file5: Vec<usize> = seen.iter().copied().filter(|&i| i != 2).collect();
        assert_eq!(file5, vec![0, 1, 3, 4], "{seen:?}");
        assert!(seen.contains(&2));
    }

    /// A journal commit is replayed after the frees the trace logged before it, however
    /// far ahead the jbd2 task's thread runs; a free logged after it does not hold it back.
    #[test]
    fn a_commit_waits_for_the_frees_logged_before_it() {
        let events = vec![
            ev(1, free(5)),
            ev(1, free(6)),
            ev(2, Event::Commit),
            ev(1, free(7)),
        ];
        let order = FileOrder::new(&events, (7, 1));
        assert_eq!(order.frees_before, [None, None, Some(2), None]);
        // The jbd2 task's thread is well under way: its commit still waits.
        let seen = replay_late_first(&events, &order, [vec![0, 1, 3], vec![2]]);
        let at = |i| seen.iter().position(|&x| x == i).unwrap();
        assert!(at(0) < at(2) && at(1) < at(2), "{seen:?}");
        assert_eq!(order.frees_done.load(Ordering::SeqCst), 3);
    }

    /// A decision is replayed after the commits the trace logged before it, however far
    /// ahead the writer's thread runs: the kernel's allocation saw the space they returned.
    #[test]
    fn a_decision_waits_for_the_commits_logged_before_it() {
        let decision = Event::Allocate {
            ino: 9,
            flags: Default::default(),
            len: 1,
            block: 0,
            lblk: 0,
        };
        let events = vec![ev(2, Event::Commit), ev(1, decision), ev(2, Event::Commit)];
        let order = FileOrder::new(&events, (7, 1));
        assert_eq!(order.commits_before, [None, Some(1), None]);
        // The writer's thread is well under way: its decision still waits for the commit.
        let seen = replay_late_first(&events, &order, [vec![0, 2], vec![1]]);
        let at = |i| seen.iter().position(|&x| x == i).unwrap();
        assert!(at(0) < at(1), "{seen:?}");
        assert_eq!(order.commits_done.load(Ordering::SeqCst), 2);
    }
}
