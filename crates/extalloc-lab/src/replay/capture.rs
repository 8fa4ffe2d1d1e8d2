//! `extalloc capture --dev LOOPDEV -- COMMAND...`: records ext4's allocation events for one
//! device while a command runs: a private tracefs instance, the [`EVENTS`] filtered on the
//! device, read from `trace_pipe` while the command runs and written gzip-compressed. The
//! instance is removed (and so tracing stopped) on success, error or panic.
//!
//! Beyond the allocation events themselves (request, decision, free, discard) it records
//! what a faithful replay needs (see `docs/replay.md`): jbd2's commits (freed blocks become
//! reusable there), fsyncs, inode creation and deletion (a reused inode number is a new
//! file; the parent directory is a placement key), and mballoc's search and preallocation
//! events (whether the kernel rounded a request up). The first line of the trace describes
//! the file system, read with `dumpe2fs` before the command starts: its geometry, and the
//! blocks already used then (its metadata, which no event names: `reserved.rs`):
//!
//! ```text
//! # extalloc capture: dev 7,1; block_size 4096; blocks 1048576; group_blocks 32768; reserved 0+1058,...; cpus 2; command: fio ...
//! ```

use anyhow::{bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The events recorded, as `subsystem/name` under tracefs' `events/`.
pub const EVENTS: [&str; 13] = [
    "ext4/ext4_request_blocks",
    "ext4/ext4_allocate_blocks",
    "ext4/ext4_free_blocks",
    "ext4/ext4_discard_preallocations",
    "ext4/ext4_mballoc_alloc",
    "ext4/ext4_mballoc_prealloc",
    "ext4/ext4_mb_new_inode_pa",
    "ext4/ext4_mb_new_group_pa",
    "ext4/ext4_allocate_inode",
    "ext4/ext4_free_inode",
    "ext4/ext4_sync_file_enter",
    "jbd2/jbd2_start_commit",
    "jbd2/jbd2_end_commit",
];

/// tracefs, mounting it at /sys/kernel/tracing when it is not there yet.
fn tracefs() -> Result<PathBuf> {
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(p).join("instances").is_dir() {
            return Ok(PathBuf::from(p));
        }
    }
    super::super::compare::kernel::run(std::process::Command::new("mount").args([
        "-t",
        "tracefs",
        "nodev",
        "/sys/kernel/tracing",
    ]))
    .context("tracefs is not mounted and could not be")?;
    Ok(PathBuf::from("/sys/kernel/tracing"))
}

/// A tracefs instance of our own; removed on drop.
struct Instance {
    dir: PathBuf,
}

impl Instance {
    fn write(&self, rel: &str, value: &str) -> Result<()> {
        let path = self.dir.join(rel);
        std::fs::write(&path, value)
            .with_context(|| format!("writing '{value}' to {}", path.display()))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        for e in EVENTS {
            let _ = std::fs::write(self.dir.join(format!("events/{e}/enable")), "0");
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cleanup: removing {}: {e}", self.dir.display());
        }
    }
}

/// The kernel's `dev_t` as the ext4 events print and filter it: major << 20 | minor.
pub fn kernel_dev(path: &Path) -> Result<(u32, u32, u64)> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if !meta.file_type().is_block_device() {
        bail!("{} is not a block device", path.display());
    }
    let rdev = meta.rdev();
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    Ok((major, minor, (u64::from(major) << 20) | u64::from(minor)))
}

/// Runs `command` while recording; writes the gzip trace to `out`. Returns the number of
/// trace lines written.
pub fn capture(dev: &Path, command: &[String], out: &Path) -> Result<u64> {
    if !rustix::process::geteuid().is_root() {
        bail!("extalloc capture needs root (it writes to tracefs)");
    }
    let (command_name, args) = command
        .split_first()
        .context("no command to run: extalloc capture --dev DEV -- COMMAND...")?;
    let (major, minor, kdev) = kernel_dev(dev)?;
    let root = tracefs()?;
    let dir = root
        .join("instances")
        .join(format!("extalloc-{}", std::process::id()));
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let instance = Instance { dir };
    instance.write("tracing_on", "0")?;
    instance.write("buffer_size_kb", "65536")?;
    for e in EVENTS {
        instance.write(&format!("events/{e}/filter"), &format!("dev == {kdev}"))?;
        instance.write(&format!("events/{e}/enable"), "1")?;
    }
    let described = describe(dev);
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    writeln!(
        gz,
        "# extalloc capture: dev {major},{minor}; {described}cpus {cpus}; command: {}",
        command.join(" ")
    )?;
    let pipe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(instance.dir.join("trace_pipe"))
        .context("opening trace_pipe")?;
    let done = AtomicBool::new(false);
    instance.write("tracing_on", "1")?;
    let (status, lines) = std::thread::scope(|s| -> Result<_> {
        let reader = s.spawn(|| drain(pipe, &mut gz, &done));
        let status = std::process::Command::new(command_name)
            .args(args)
            .status()
            .with_context(|| format!("running {command_name}"));
        // Let the last events reach the buffer, stop, then drain what is left.
        std::thread::sleep(Duration::from_millis(200));
        let _ = instance.write("tracing_on", "0");
        done.store(true, Ordering::SeqCst);
        let lines = reader.join().expect("reader panicked")?;
        Ok((status?, lines))
    })?;
    gz.finish().context("finishing the gzip stream")?;
    let overruns = overruns(&instance.dir);
    drop(instance);
    if overruns > 0 {
        eprintln!(
            "warning: the trace buffer overran ({overruns} events lost); the trace is incomplete"
        );
    }
    if !status.success() {
        bail!("{command_name} exited with {status} (the trace of its run was written)");
    }
    Ok(lines)
}

/// The file system's geometry and used blocks as header fields (`block_size 4096; blocks
/// N; group_blocks N; reserved S+L,...; `), from `dumpe2fs`; empty (with a warning) when it
/// cannot be read, so a replay then needs `--blocks` and runs on an empty device.
fn describe(dev: &Path) -> String {
    let out = std::process::Command::new("dumpe2fs")
        .arg(dev)
        .stderr(std::process::Stdio::null())
        .output();
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            eprintln!(
                "warning: dumpe2fs {} exited with {}: the trace will not say its geometry",
                dev.display(),
                o.status
            );
            return String::new();
        }
        Err(e) => {
            eprintln!("warning: running dumpe2fs ({e}): the trace will not say its geometry");
            return String::new();
        }
    };
    describe_dumpe2fs(&text)
}

/// Header fields from `dumpe2fs` text; empty unless every field was found. The used
/// ranges are the complement of the groups' free ones (not given for `-h` text, which
/// lists no groups).
pub fn describe_dumpe2fs(text: &str) -> String {
    let groups_listed = text.lines().any(|l| l.starts_with("Group "));
    match crate::compare::freespace::parse_dumpe2fs(text) {
        Ok((g, _)) if !groups_listed => format!(
            "block_size {}; blocks {}; group_blocks {}; ",
            g.block_size, g.blocks_count, g.group_blocks
        ),
        Ok((g, free)) => format!(
            "block_size {}; blocks {}; group_blocks {}; reserved {}; ",
            g.block_size,
            g.blocks_count,
            g.group_blocks,
            super::reserved::format(&super::reserved::used_ranges(g.blocks_count, &free))
        ),
        Err(e) => {
            eprintln!("warning: {e:#}: the trace will not say its geometry");
            String::new()
        }
    }
}

/// Copies trace_pipe to `out` until `done` is set and the pipe is empty.
fn drain(mut pipe: std::fs::File, out: &mut impl Write, done: &AtomicBool) -> Result<u64> {
    let mut buf = vec![0u8; 1 << 16];
    let mut lines = 0u64;
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => {
                if done.load(Ordering::SeqCst) {
                    return Ok(lines);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(n) => {
                lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                out.write_all(&buf[..n])?;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if done.load(Ordering::SeqCst) {
                    return Ok(lines);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading trace_pipe"),
        }
    }
}

/// Events lost to a full buffer, summed over CPUs.
fn overruns(dir: &Path) -> u64 {
    let Ok(cpus) = std::fs::read_dir(dir.join("per_cpu")) else {
        return 0;
    };
    cpus.flatten()
        .filter_map(|c| std::fs::read_to_string(c.path().join("stats")).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| {
                    l.strip_prefix("overrun:")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .collect::<Vec<_>>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::kernel::test_device;

    #[test]
    fn geometry_from_dumpe2fs() {
        let text = "Filesystem volume name:   <none>\nBlock count:              262144\n\
                    First block:              0\nBlock size:               4096\n\
                    Blocks per group:         32768\n";
        assert_eq!(
            describe_dumpe2fs(text),
            "block_size 4096; blocks 262144; group_blocks 32768; "
        );
        assert_eq!(describe_dumpe2fs("Block count: 5\n"), "");
        // The full listing: the used blocks are what no group lists free.
        let full = format!(
            "{text}\nGroup 0: (Blocks 0-32767)\n  Free blocks: 1058-32767\n\
             Group 1: (Blocks 32768-65535)\n  Free blocks: 32768-32769, 40000-65535\n"
        );
        let full = full.replace("262144", "65536");
        assert_eq!(
            describe_dumpe2fs(&full),
            "block_size 4096; blocks 65536; group_blocks 32768; reserved 0+1058,32770+7230; "
        );
    }

    /// A real capture on an ext4 loop mount: the trace parses, its header carries the
    /// geometry, it holds the fallocate's request, the file's creation and a journal
    /// commit, and no tracefs instance is left behind.
    #[test]
    fn captures_a_fallocate_on_a_loop_mount() {
        let Some(dev) = test_device(&["fallocate", "dumpe2fs"]) else {
            return;
        };
        let loop_dev = PathBuf::from(dev.loop_dev.clone().expect("attached"));
        let out = std::env::temp_dir().join(format!("extalloc-capture-{}.gz", std::process::id()));
        let target = dev.path("f");
        let result = capture(
            &loop_dev,
            &[
                "sh".into(),
                "-c".into(),
                format!("fallocate -l 4M {} && sync", target.display()),
            ],
            &out,
        );
        if let Err(e) = &result {
            if format!("{e:#}").contains("tracefs") {
                eprintln!("skipped: no tracefs here ({e:#})");
                return;
            }
        }
        result.unwrap();
        let trace = super::super::load(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        use super::super::parse::Event;
        let header = trace.header.clone().expect("the capture header");
        assert_eq!(header.blocks, Some(16384), "64 MiB of 4 KiB blocks");
        assert_eq!(header.block_size, Some(4096));
        assert!(header.group_blocks.is_some() && header.cpus.is_some());
        assert_eq!(
            header.reserved.first().map(|r| r.0),
            Some(0),
            "the superblock's group is used from block 0: {:?}",
            header.reserved
        );
        let has = |f: &dyn Fn(&Event) -> bool| trace.events.iter().any(|t| f(&t.event));
        assert!(
            has(&|e| matches!(e, Event::Request { flags, .. } if flags.no_prealloc)),
            "the fallocate's request is in the trace"
        );
        assert!(has(&|e| matches!(e, Event::InodeCreate { .. })));
        assert!(has(&|e| matches!(e, Event::Commit)), "sync commits");
        assert_eq!(trace.malformed, 0);
        let root = tracefs().unwrap();
        let leftover = std::fs::read_dir(root.join("instances"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy() == format!("extalloc-{}", std::process::id()));
        assert!(!leftover, "the tracefs instance is removed");
    }
}
