//! FUSE requests by opcode while a job runs on a FUSE mount (extalloc's or fuse2fs's), from
//! the kernel's `fuse/fuse_request_send` event in a private tracefs instance.
//!
//! Data structures: [`FuseTrace`] (the instance, its event filtered on one connection),
//! [`Counts`] (requests per opcode name, and events the buffer lost).
//!
//! Invariant: the instance exists only while a [`FuseTrace`] does; dropping it disables the
//! event and removes the instance (and with it its buffer), whatever failed, so the global
//! trace buffer and other instances are never touched.
//!
//! How: the event is recorded into the instance's ring buffer (`BUFFER_KB` per CPU) and
//! read from `trace_pipe` only between phases, when nothing is timed. A histogram trigger
//! (`hist:keys=opcode`) would be cheaper still, but this kernel is built without
//! CONFIG_HIST_TRIGGERS (the event's `trigger` file lists no `hist`), and a reader draining
//! `trace_pipe` during the job would take CPU from the job on a small machine. Events lost
//! to a full buffer are counted from `per_cpu/cpu*/stats` and reported, never hidden.
//!
//! Needs root and tracefs with the kernel's fuse trace events (`events/fuse/`, not in older kernels); without them
//! [`FuseTrace::start`] fails with the reason, which the report prints instead of figures.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Ring buffer per CPU, KiB: about 3 million events of 40 bytes.
pub const BUFFER_KB: u64 = 131_072;

/// Requests per opcode name, and events lost to a full buffer.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Counts {
    /// Requests sent, by opcode name (`LOOKUP`, `CREATE`, ...).
    pub by_opcode: BTreeMap<String, u64>,
    /// Events the ring buffer overwrote (0 when the counts are complete).
    pub lost: u64,
}

impl Counts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.by_opcode.values().sum()
    }
}

/// The name of a FUSE opcode (linux/fuse.h's `enum fuse_opcode`, without `FUSE_`).
pub fn opcode_name(op: u32) -> String {
    let name = match op {
        1 => "LOOKUP",
        2 => "FORGET",
        3 => "GETATTR",
        4 => "SETATTR",
        5 => "READLINK",
        6 => "SYMLINK",
        8 => "MKNOD",
        9 => "MKDIR",
        10 => "UNLINK",
        11 => "RMDIR",
        12 => "RENAME",
        13 => "LINK",
        14 => "OPEN",
        15 => "READ",
        16 => "WRITE",
        17 => "STATFS",
        18 => "RELEASE",
        20 => "FSYNC",
        21 => "SETXATTR",
        22 => "GETXATTR",
        23 => "LISTXATTR",
        24 => "REMOVEXATTR",
        25 => "FLUSH",
        26 => "INIT",
        27 => "OPENDIR",
        28 => "READDIR",
        29 => "RELEASEDIR",
        30 => "FSYNCDIR",
        31 => "GETLK",
        32 => "SETLK",
        33 => "SETLKW",
        34 => "ACCESS",
        35 => "CREATE",
        36 => "INTERRUPT",
        37 => "BMAP",
        38 => "DESTROY",
        39 => "IOCTL",
        40 => "POLL",
        41 => "NOTIFY_REPLY",
        42 => "BATCH_FORGET",
        43 => "FALLOCATE",
        44 => "READDIRPLUS",
        45 => "RENAME2",
        46 => "LSEEK",
        47 => "COPY_FILE_RANGE",
        48 => "SETUPMAPPING",
        49 => "REMOVEMAPPING",
        50 => "SYNCFS",
        51 => "TMPFILE",
        52 => "STATX",
        4096 => "CUSE_INIT",
        other => return format!("OPCODE_{other}"),
    };
    name.to_string()
}

/// Adds the `fuse_request_send` lines of tracefs text to `counts` (other lines are skipped):
/// `... fuse_request_send: connection 39 req 20 opcode 27 (FUSE_OPENDIR) len 48`.
pub fn count_lines(text: &str, counts: &mut Counts) {
    for line in text.lines() {
        let Some((_, rest)) = line.split_once("fuse_request_send:") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let op = words
            .by_ref()
            .skip_while(|w| *w != "opcode")
            .nth(1)
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(op) = op {
            *counts.by_opcode.entry(opcode_name(op)).or_default() += 1;
        }
    }
}

/// The kernel's encoding of the device of `path`'s file system (major << 20 | minor), which
/// the event's `connection` field holds for a FUSE mount.
pub fn connection_of(path: &Path) -> Result<u64> {
    let dev = std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .dev();
    Ok((u64::from(rustix::fs::major(dev)) << 20) | u64::from(rustix::fs::minor(dev)))
}

/// The event, enabled in a private tracefs instance for one connection; disabled and
/// removed on drop.
pub struct FuseTrace {
    dir: PathBuf,
    lost_before: u64,
}

const EVENT: &str = "events/fuse/fuse_request_send";

impl FuseTrace {
    /// Starts counting the requests of the FUSE mount at `mountpoint`.
    pub fn start(mountpoint: &Path) -> Result<FuseTrace> {
        if !rustix::process::geteuid().is_root() {
            bail!("FUSE request counts need root (they are read from tracefs)");
        }
        let root = PathBuf::from("/sys/kernel/tracing");
        if !root.join("instances").is_dir() {
            bail!("FUSE request counts need tracefs at /sys/kernel/tracing (mount -t tracefs nodev /sys/kernel/tracing)");
        }
        if !root.join(EVENT).is_dir() {
            bail!("FUSE request counts need the kernel's fuse/fuse_request_send event (not in this kernel: no FUSE request counts)");
        }
        let conn = connection_of(mountpoint)?;
        let dir = root
            .join("instances")
            .join(format!("extalloc-fuse-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating {} (remove it if a previous run left it)",
                dir.display()
            )
        })?;
        let mut t = FuseTrace {
            dir,
            lost_before: 0,
        };
        t.write("buffer_size_kb", &BUFFER_KB.to_string())?;
        t.write(&format!("{EVENT}/filter"), &format!("connection == {conn}"))?;
        t.write(&format!("{EVENT}/enable"), "1")?;
        t.lost_before = t.lost();
        Ok(t)
    }

    fn write(&self, rel: &str, value: &str) -> Result<()> {
        let path = self.dir.join(rel);
        std::fs::write(&path, value)
            .with_context(|| format!("writing '{value}' to {}", path.display()))
    }

    /// Events overwritten so far, summed over the CPUs.
    fn lost(&self) -> u64 {
        let Ok(cpus) = std::fs::read_dir(self.dir.join("per_cpu")) else {
            return 0;
        };
        cpus.flatten()
            .filter_map(|c| std::fs::read_to_string(c.path().join("stats")).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.strip_prefix("overrun:"))
                    .filter_map(|v| v.trim().parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    /// The requests since the last call (or the start), draining the buffer.
    pub fn take(&mut self) -> Result<Counts> {
        let path = self.dir.join("trace_pipe");
        let mut pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let mut counts = Counts::default();
        let mut buf = vec![0u8; 1 << 20];
        let mut partial = String::new();
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    partial.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if let Some(end) = partial.rfind('\n') {
                        count_lines(&partial[..end], &mut counts);
                        partial.drain(..=end);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
            }
        }
        count_lines(&partial, &mut counts);
        let lost = self.lost();
        counts.lost = lost.saturating_sub(self.lost_before);
        self.lost_before = lost;
        Ok(counts)
    }
}

impl Drop for FuseTrace {
    fn drop(&mut self) {
        let _ = self.write(&format!("{EVENT}/enable"), "0");
        let _ = self.write(&format!("{EVENT}/filter"), "0");
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cleanup: removing {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on this machine (`touch a; mv a b; rm b` on a fuse2fs mount, tracefs
    /// `trace` file), header included.
    const SAMPLE: &str = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 11/11   #P:2
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
           touch-32753   [001] ...1. 11698.191799: fuse_request_send: connection 39 req 6 opcode 1 (FUSE_LOOKUP) len 42 
           touch-32753   [001] ...1. 11698.191901: fuse_request_send: connection 39 req 8 opcode 35 (FUSE_CREATE) len 58 
           touch-32753   [001] ...1. 11698.191963: fuse_request_send: connection 39 req 10 opcode 25 (FUSE_FLUSH) len 64 
           touch-32753   [001] ...1. 11698.191977: fuse_request_send: connection 39 req 12 opcode 4 (FUSE_SETATTR) len 128 
           touch-32753   [001] ...2. 11698.191993: fuse_request_send: connection 39 req 14 opcode 18 (FUSE_RELEASE) len 64 
              mv-32754   [001] ...1. 11698.193744: fuse_request_send: connection 39 req 16 opcode 1 (FUSE_LOOKUP) len 42 
              mv-32754   [001] ...1. 11698.193807: fuse_request_send: connection 39 req 18 opcode 1 (FUSE_LOOKUP) len 42 
              mv-32754   [001] ...1. 11698.193833: fuse_request_send: connection 39 req 20 opcode 1 (FUSE_LOOKUP) len 42 
              mv-32754   [001] ...1. 11698.193845: fuse_request_send: connection 39 req 22 opcode 12 (FUSE_RENAME) len 52 
              rm-32755   [000] ...1. 11698.200087: fuse_request_send: connection 39 req 24 opcode 3 (FUSE_GETATTR) len 56 
              rm-32755   [000] ...1. 11698.202866: fuse_request_send: connection 39 req 26 opcode 10 (FUSE_UNLINK) len 42 
";

    #[test]
    fn opcodes_are_named_as_in_linux_fuse_h() {
        assert_eq!(opcode_name(1), "LOOKUP");
        assert_eq!(opcode_name(35), "CREATE");
        assert_eq!(opcode_name(45), "RENAME2");
        assert_eq!(opcode_name(52), "STATX");
        assert_eq!(opcode_name(7), "OPCODE_7");
    }

    #[test]
    fn a_captured_trace_is_counted_by_opcode() {
        let mut c = Counts::default();
        count_lines(SAMPLE, &mut c);
        let want: BTreeMap<String, u64> = [
            ("CREATE", 1),
            ("FLUSH", 1),
            ("GETATTR", 1),
            ("LOOKUP", 4),
            ("RELEASE", 1),
            ("RENAME", 1),
            ("SETATTR", 1),
            ("UNLINK", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(c.by_opcode, want);
        assert_eq!(c.total(), 11);
        // Counting adds: a second chunk of the same text doubles every figure.
        count_lines(SAMPLE, &mut c);
        assert_eq!(c.by_opcode["LOOKUP"], 8);
    }
}
