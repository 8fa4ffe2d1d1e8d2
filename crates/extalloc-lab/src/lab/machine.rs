//! Whether the machine was busy while the lab measured: a run on a machine whose other work
//! wants more than its cores measures the scheduler as much as the allocator.
//!
//! Data structures: [`Load`], one reading of `/proc/loadavg`; [`MachineLoad`], the check of
//! a whole matrix (readings at its start and end), kept in the JSON report.
//! Invariant: `busy` is true exactly when the 1-minute load average at the start, or the
//! tasks running besides this one at the end, exceed the machine's online cores. The end
//! does not use the 1-minute average, which still counts the run's own threads (16 of frag's
//! jobs alone would exceed 2 cores); it counts the running tasks (the fourth field,
//! `running/total`), less this one, averaged over a few readings.
//! Lock order: none (no shared state).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One reading of `/proc/loadavg`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// The 1-minute load average.
    pub load1: f64,
    /// Tasks running or runnable at the moment of reading (this one included).
    pub running: u32,
}

/// The load check of one matrix (fields may be added, never renamed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineLoad {
    /// Online CPUs of the machine (the scope of `/proc/loadavg`).
    pub cores: usize,
    /// The 1-minute load average before the first run.
    pub load_start: f64,
    /// The 1-minute load average after the last run (counts the runs' own threads).
    pub load_end: f64,
    /// Tasks running besides this one after the last run (mean of a few readings).
    pub others_running_end: f64,
    pub busy: bool,
}

impl MachineLoad {
    /// The warning to print and keep in the report, when the machine was busy.
    pub fn warning(&self) -> Option<String> {
        self.busy.then(|| {
            format!(
                "the machine was busy: load average {:.2} at the start, {:.1} other tasks \
                 running at the end, on {} cores; throughput and layout figures of threaded \
                 runs are not to be trusted (rerun on a quiet machine, or compare spreads)",
                self.load_start, self.others_running_end, self.cores
            )
        })
    }
}

/// Parses the text of `/proc/loadavg` (`0.40 0.92 1.32 2/86 26789`).
pub fn parse(text: &str) -> Option<Load> {
    let mut it = text.split_whitespace();
    let load1 = it.next()?.parse().ok()?;
    let running = it.nth(2)?.split_once('/')?.0.parse().ok()?;
    Some(Load { load1, running })
}

/// Reads `/proc/loadavg` (`None` where there is none).
pub fn read() -> Option<Load> {
    parse(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The machine's online CPUs.
pub fn cores() -> usize {
    // SAFETY: sysconf reads a constant of the running system.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The start of a check: the reading before the first run.
pub fn start() -> Option<Load> {
    read()
}

/// The check from the start's reading and readings taken now (5 over 80 ms).
pub fn finish(start: Option<Load>) -> Option<MachineLoad> {
    let start = start?;
    let mut readings = Vec::new();
    for i in 0..5 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        readings.push(read()?);
    }
    Some(judge(start, &readings, cores()))
}

/// The check of a start reading and end readings on `cores` cores.
pub fn judge(start: Load, end: &[Load], cores: usize) -> MachineLoad {
    let n = end.len().max(1) as f64;
    let others = end
        .iter()
        .map(|l| f64::from(l.running.saturating_sub(1)))
        .sum::<f64>()
        / n;
    let load_end = end.last().map_or(start.load1, |l| l.load1);
    MachineLoad {
        cores,
        load_start: start.load1,
        load_end,
        others_running_end: others,
        busy: start.load1 > cores as f64 || others > cores as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadavg_parses_and_busy_means_above_the_cores() {
        let quiet = parse("0.40 0.92 1.32 2/86 26789").unwrap();
        assert_eq!(
            quiet,
            Load {
                load1: 0.40,
                running: 2
            }
        );
        assert!(parse("0.40 0.92").is_none());
        let busy_start = parse("3.85 2.25 1.75 5/100 2049").unwrap();
        // The end's average counts our own threads: only the other running tasks count.
        let end_after_16_jobs = parse("9.10 3.00 2.00 2/120 3074").unwrap();
        let check = judge(quiet, &[end_after_16_jobs], 2);
        assert!(!check.busy, "{check:?}");
        assert_eq!(check.load_end, 9.10);
        assert!(check.warning().is_none());
        let check = judge(busy_start, &[end_after_16_jobs], 2);
        assert!(check.busy);
        assert!(check.warning().unwrap().contains("load average 3.85"));
        let crowded_end = parse("1.00 1.00 1.00 5/120 3074").unwrap();
        let check = judge(quiet, &[crowded_end, crowded_end], 2);
        assert!(check.busy, "4 other tasks on 2 cores");
        assert_eq!(check.others_running_end, 4.0);
    }

    #[test]
    fn this_machine_reads() {
        if std::path::Path::new("/proc/loadavg").exists() {
            let check = finish(start()).expect("a reading");
            assert!(check.cores >= 1);
            assert!(check.load_start >= 0.0);
        }
    }
}
