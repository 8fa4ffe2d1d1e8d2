//! CPU time per operation for `compare-fs`: what a phase cost the caller (this process and
//! the tools it ran) and, on a FUSE target, the daemon serving the mount. Wall time on a
//! machine others load measures the scheduler as much as the file system; CPU time does not.
//!
//! Sources: the first field of `/proc/PID/task/TID/schedstat` is the nanoseconds that thread
//! has run (the scheduler's `sum_exec_runtime`, user and kernel); a process's CPU is the sum
//! over its live threads (a sleeping thread's figure is exact; a running one's lags by up to
//! a scheduler tick, which daemons waiting for requests are not). The daemon is
//! `/proc/DAEMON/task/*`. The caller is this process, from the same runtime read up to date
//! (`CLOCK_PROCESS_CPUTIME_ID`: this process runs the metadata loop while it samples), plus
//! its waited-for children (`getrusage(RUSAGE_CHILDREN)`: the same runtime, in
//! microseconds, once a child has exited; `tar`, `rm`, `fs_mark` and fio are waited for
//! before their phase ends).
//!
//! Data structures: [`Sample`] (the counters at one instant), [`Cpu`] (one phase's share,
//! serialised into the JSON report), [`CpuMeter`] (the running window).
//!
//! Invariant: a phase's [`Cpu`] covers exactly the time between the meter's previous
//! [`CpuMeter::restart`] (or its creation) and [`CpuMeter::lap`]. A thread that exits inside
//! the window takes its time with it (so the daemons keep their threads: extalloc's are
//! fixed, the floor keeps its idle ones); work the kernel does in its own threads
//! (writeback, journal threads) is in neither figure.

use anyhow::{Context, Result};
use std::path::Path;

/// The nanoseconds on CPU in a `schedstat` line (`RUNTIME_NS WAIT_NS TIMESLICES`).
pub fn parse_schedstat(text: &str) -> Result<u64> {
    let first = text
        .split_whitespace()
        .next()
        .with_context(|| format!("empty schedstat line '{}'", text.trim()))?;
    first
        .parse()
        .with_context(|| format!("schedstat: '{first}' is not a count of nanoseconds"))
}

/// The nanoseconds the live threads of process `pid` ("self" for this one) have run.
pub fn process_ns(pid: &str) -> Result<u64> {
    let tasks = Path::new("/proc").join(pid).join("task");
    let mut sum = 0;
    let dir = std::fs::read_dir(&tasks).with_context(|| {
        format!(
            "listing {} (no such process, or a kernel without /proc)",
            tasks.display()
        )
    })?;
    for task in dir.flatten() {
        // A thread that ended since the listing has nothing left to read.
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        sum += parse_schedstat(&text).with_context(|| {
            format!(
                "{}/schedstat (a kernel without CONFIG_SCHED_INFO?)",
                task.path().display()
            )
        })?;
    }
    Ok(sum)
}

/// The nanoseconds this process has run, all its threads (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn self_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a `struct timespec` into the pointer, which points at one
    // we own; the clock id is valid on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The nanoseconds this process's exited and waited-for children ran (user and system).
pub fn children_ns() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `struct rusage` into the pointer it is given, which points
    // at one we own; RUSAGE_CHILDREN is a valid `who`.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr());
        usage.assume_init()
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(usage.ru_utime) + us(usage.ru_stime)) * 1000
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// This process plus its waited-for children, ns.
    pub caller_ns: u64,
    /// The daemon's threads, ns (None: no daemon).
    pub daemon_ns: Option<u64>,
}

/// One phase's CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Cpu {
    /// The caller's: this process's threads and the tools it ran, ns.
    pub caller_ns: u64,
    /// The FUSE daemon's (None on kernel file systems), ns.
    pub daemon_ns: Option<u64>,
}

impl Cpu {
    /// Caller plus daemon, ns.
    pub fn total_ns(&self) -> u64 {
        self.caller_ns + self.daemon_ns.unwrap_or(0)
    }

    /// Caller plus daemon per operation, µs (None for no operation).
    pub fn total_us_per_op(&self, ops: u64) -> Option<f64> {
        (ops > 0).then(|| self.total_ns() as f64 / 1000.0 / ops as f64)
    }

    /// The daemon's per operation, µs.
    pub fn daemon_us_per_op(&self, ops: u64) -> Option<f64> {
        self.daemon_ns
            .filter(|_| ops > 0)
            .map(|d| d as f64 / 1000.0 / ops as f64)
    }
}

/// The CPU window of the phase under way.
pub struct CpuMeter {
    daemon: Option<String>,
    start: Sample,
}

impl CpuMeter {
    /// A meter for this process and, if given, the daemon `pid`; its window starts now.
    pub fn start(daemon: Option<u32>) -> Result<CpuMeter> {
        let mut m = CpuMeter {
            daemon: daemon.map(|p| p.to_string()),
            start: Sample::default(),
        };
        m.restart()?;
        Ok(m)
    }

    fn sample(&self) -> Result<Sample> {
        Ok(Sample {
            caller_ns: self_ns() + children_ns(),
            daemon_ns: match &self.daemon {
                Some(pid) => Some(process_ns(pid).context("the FUSE daemon's CPU time")?),
                None => None,
            },
        })
    }

    /// Starts a new window (after untimed work).
    pub fn restart(&mut self) -> Result<()> {
        self.start = self.sample()?;
        Ok(())
    }

    /// The CPU time since the window started (the window goes on).
    pub fn lap(&self) -> Result<Cpu> {
        let now = self.sample()?;
        Ok(Cpu {
            caller_ns: now.caller_ns.saturating_sub(self.start.caller_ns),
            daemon_ns: match (now.daemon_ns, self.start.daemon_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_give_their_first_field() {
        // /proc/self/schedstat as Linux 6.x prints it: run ns, wait ns, timeslices.
        assert_eq!(
            parse_schedstat("1544123982 98776 1410\n").unwrap(),
            1_544_123_982
        );
        assert_eq!(parse_schedstat("7").unwrap(), 7);
        assert!(parse_schedstat("").is_err());
        assert!(parse_schedstat("x 1 2").is_err());
    }

    #[test]
    fn per_operation_figures_add_the_daemon_and_skip_empty_phases() {
        let c = Cpu {
            caller_ns: 3_000,
            daemon_ns: Some(1_000),
        };
        assert_eq!(c.total_us_per_op(2), Some(2.0));
        assert_eq!(c.daemon_us_per_op(2), Some(0.5));
        assert_eq!(c.total_us_per_op(0), None);
        let kernel = Cpu {
            caller_ns: 3_000,
            daemon_ns: None,
        };
        assert_eq!(kernel.total_us_per_op(3), Some(1.0));
        assert_eq!(kernel.daemon_us_per_op(3), None);
    }

    #[test]
    fn this_process_is_measured() {
        assert!(process_ns("self").unwrap() > 0);
        let m = CpuMeter::start(None).unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let c = m.lap().unwrap();
        assert!(c.caller_ns > 0, "{c:?}");
        assert_eq!(c.daemon_ns, None);
    }
}
