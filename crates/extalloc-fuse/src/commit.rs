//! The background commit: a thread that calls [`Fs::sync`] every few seconds (pending
//! times, then the dirty cache written back, then one journal commit), so that a daemon
//! killed without warning loses at most about one interval of what reached it. The kernel
//! never asks a FUSE mount to sync (`sync` and `syncfs` send no request; `docs/mount.md`),
//! so without this thread nothing but `fsync` and unmount would commit. Between commits
//! (and on a read-only mount, which commits nothing) it checks the caches every
//! [`TRIM_CHECK`] and trims those that overshoot ([`Fs::trim_overshoot`]): a sync trims
//! them too, but a walk reads back thousands of inodes a second.
//!
//! Data structures: [`Committer`] owns the thread and a stop flag under a mutex with a
//! condition variable, so [`Committer::stop`] wakes the thread at once instead of waiting
//! out the interval.
//!
//! Invariant: once [`Committer::stop`] (or drop) returns, the thread has ended and dropped
//! its `Arc<Fs>`, so the file system can be closed. A failed commit is reported once, and
//! once more when a later one succeeds; it never ends the mount. A failed write or flush
//! of the device latches the store (`Store::io_failure`): that is reported once and ends
//! the commits, since no later one can succeed; the trims go on (the mount still reads).
//! A shutdown of the file system ends the thread quietly.
//!
//! Lock order: the stop mutex is never held while syncing or trimming; [`Fs::sync`] takes
//! `ns` only to collect the inodes with pending times, then the volume's locks (see
//! `fs/mod.rs`); a trim takes the volume's gate, then `ns`, each alone.

use crate::fs::Fs;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the thread checks the caches between commits.
pub const TRIM_CHECK: Duration = Duration::from_secs(1);

/// Checks between two whole trims when no commit comes (as often as the default commit).
pub const CHECKS_PER_TRIM: u32 = 5;

/// The stop flag and its wake-up.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// A running background commit (see the module documentation).
pub struct Committer {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// Starts a thread that syncs `fs` every `every` (`None`: never, for a read-only mount)
    /// and trims its caches between, reporting through `log` (a failed commit once until
    /// one succeeds again). `every` must not be zero.
    pub fn start(
        fs: Arc<Fs>,
        every: Option<Duration>,
        log: impl Fn(&str) + Send + 'static,
    ) -> std::io::Result<Committer> {
        assert!(
            every.is_none_or(|e| !e.is_zero()),
            "a commit interval of zero means no commits: None"
        );
        let stop = Arc::new(Stop::default());
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("extalloc-commit".into())
                .spawn(move || run(&fs, every, &stop, &log))?
        };
        Ok(Committer {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread (a commit under way finishes first) and waits for it to end.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        *self.stop.stopped.lock() = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The thread: sleep until the next commit or cache check (or until stopped); at a
/// commit's time sync and report a change of state, else trim what overshoots, and every
/// [`CHECKS_PER_TRIM`] checks without a commit (a read-only mount, a long interval, a
/// latched store) the sync's own trims, directories' entries included. A latched store
/// commits no more, but its mount still reads: the trims go on.
fn run(fs: &Fs, every: Option<Duration>, stop: &Stop, log: &dyn Fn(&str)) {
    let mut failing = false;
    let mut every = every;
    let mut next_commit = every.map(|e| Instant::now() + e);
    // What the last trim between commits left (`Fs::trim_overshoot`), forgotten at each
    // commit and every few checks, so a trim that could do nothing is tried again later.
    let mut kept = (0, 0);
    let mut checks = 0u32;
    loop {
        {
            let check = Instant::now() + TRIM_CHECK;
            let deadline = next_commit.map_or(check, |c| c.min(check));
            let mut stopped = stop.stopped.lock();
            while !*stopped && Instant::now() < deadline {
                stop.wake.wait_until(&mut stopped, deadline);
            }
            if *stopped {
                return;
            }
        }
        if fs.is_down() {
            // Shut down (`fs/shutdown.rs`): nothing is written until the next mount.
            return;
        }
        match (every, next_commit) {
            (Some(interval), Some(at)) if Instant::now() >= at => {
                if commit(fs, interval, &mut failing, log) {
                    next_commit = Some(Instant::now() + interval);
                } else {
                    (every, next_commit) = (None, None);
                }
                (kept, checks) = ((0, 0), 0);
            }
            _ => {
                checks += 1;
                if checks.is_multiple_of(CHECKS_PER_TRIM) {
                    kept = (0, 0);
                    if every.is_none() {
                        fs.trim_caches();
                        continue;
                    }
                }
                fs.trim_overshoot(&mut kept);
            }
        }
    }
}

/// One background commit and its report; `false` when commits must end (the store
/// latched a failed write or flush).
fn commit(fs: &Fs, every: Duration, failing: &mut bool, log: &dyn Fn(&str)) -> bool {
    match fs.sync() {
        Ok(()) if *failing => {
            *failing = false;
            log("background commit: works again; everything written so far is durable");
        }
        Ok(()) => {}
        Err(e) if fs.volume().volume().store().io_failure().is_some() => {
            // Latched: no commit will ever be believed again (`Store::io_failure`).
            log(&format!(
                "background commit failed: {e}; the device failed a write or flush, so \
                 this mount writes nothing more (writers get EIO, readers read what is \
                 there); unmount and mount again to recover every commit made before"
            ));
            return false;
        }
        Err(e) if !*failing => {
            *failing = true;
            log(&format!(
                "background commit failed: {e}; what was written since the last \
                 commit is not durable; retrying every {every:?} (said once until a \
                 commit succeeds; fsync and unmount report their own errors)"
            ));
        }
        Err(_) => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::names::NewNode;
    use crate::fs::{Caller, ROOT};
    use crate::inode::Kind;
    use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
    use extalloc::volume::Volume;
    use extalloc::writeback::WritebackOptions;
    use extalloc::{Geometry, Policy};

    type Dev = Arc<FaultDevice<MemDevice>>;

    fn fresh() -> (Dev, Arc<Fs>) {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 7));
        let geometry = Geometry::new(4096, 1024, 8192).unwrap();
        let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
        let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
        (dev, Arc::new(fs))
    }

    /// Makes `n` files of 5,000 bytes each in the root, nothing synced.
    fn files(fs: &Fs, n: u8) {
        let me = Caller { uid: 0, gid: 0 };
        for i in 0..n {
            let new = NewNode {
                kind: Kind::File,
                mode: 0o644,
                umask: 0,
                rdev: 0,
                target: None,
            };
            let ino = fs
                .make(ROOT, format!("f{i}").as_bytes(), new, me)
                .unwrap()
                .ino;
            fs.write(ino, 0, &[i; 5000], false).unwrap();
        }
    }

    /// Loses every write the device was not told to flush, then mounts again and counts
    /// the files that read back whole.
    fn crash_and_count(dev: &Dev, fs: Arc<Fs>, n: u8) -> usize {
        dev.fail_writes(true);
        drop(
            Arc::try_unwrap(fs)
                .ok()
                .expect("the committer let go of the file system"),
        );
        dev.crash(Crash::DropAll).unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
        (0..n)
            .filter(|&i| {
                fs.lookup(ROOT, format!("f{i}").as_bytes())
                    .and_then(|a| fs.read(a.ino, 0, 10_000))
                    .is_ok_and(|d| d == vec![i; 5000])
            })
            .count()
    }

    #[test]
    fn a_crash_after_an_interval_keeps_what_was_written_before_it() {
        let (dev, fs) = fresh();
        let c = Committer::start(fs.clone(), Some(Duration::from_millis(20)), |m| {
            panic!("{m}")
        })
        .unwrap();
        files(&fs, 30);
        std::thread::sleep(Duration::from_millis(300));
        c.stop();
        assert_eq!(crash_and_count(&dev, fs, 30), 30);
    }

    #[test]
    fn without_a_committer_the_same_crash_loses_the_files() {
        // The control: the test above would see a missing commit.
        let (dev, fs) = fresh();
        files(&fs, 30);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(crash_and_count(&dev, fs, 30), 0);
    }

    /// Without commits (a read-only mount's thread) the caches are still trimmed: nodes
    /// read back past the slack go within a check or two, and stop ends the thread.
    #[test]
    fn without_commits_the_thread_still_trims_and_stops() {
        let (_dev, fs) = fresh();
        let me = Caller { uid: 0, gid: 0 };
        let n = crate::fs::TRIM_SLACK_MIN + 200;
        for i in 0..n {
            let new = NewNode::file(0o644, 0);
            fs.make(ROOT, format!("f{i}").as_bytes(), new, me).unwrap();
        }
        fs.sync().unwrap();
        for i in 0..n {
            fs.lookup(ROOT, format!("f{i}").as_bytes()).unwrap();
        }
        assert!(fs.ns.read().nodes.len() > n, "read back");
        let c = Committer::start(fs.clone(), None, |m| panic!("{m}")).unwrap();
        let started = Instant::now();
        while fs.ns.read().nodes.len() > 1 && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            fs.ns.read().nodes.len(),
            1,
            "trimmed to the root (the tests' cache is 0)"
        );
        c.stop();
    }

    #[test]
    fn a_failing_commit_is_reported_once_and_stop_still_ends_the_thread() {
        let (dev, fs) = fresh();
        let said = Arc::new(Mutex::new(Vec::<String>::new()));
        let c = {
            let said = said.clone();
            Committer::start(fs.clone(), Some(Duration::from_millis(10)), move |m| {
                said.lock().push(m.to_string())
            })
            .unwrap()
        };
        files(&fs, 3);
        dev.fail_writes(true);
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        c.stop();
        assert!(started.elapsed() < Duration::from_secs(1), "stop waited");
        let said = said.lock();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("background commit failed"), "{said:?}");
    }
}
