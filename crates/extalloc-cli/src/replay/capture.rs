//! `extalloc capture --dev LOOPDEV -- COMMAND...`: records ext4's allocation events for one
//! device while a command runs, as the traces in `../shared/traces/` were taken: a private
//! tracefs instance, the events `ext4_request_blocks`, `ext4_allocate_blocks` and
//! `ext4_free_blocks` (plus `ext4_discard_preallocations`, which replay uses to release a
//! file's preallocations) filtered on the device, read from `trace_pipe` while the command
//! runs and written gzip-compressed. The instance is removed (and so tracing stopped) on
//! success, error or panic.

use anyhow::{bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub const EVENTS: [&str; 4] = [
    "ext4_request_blocks",
    "ext4_allocate_blocks",
    "ext4_free_blocks",
    "ext4_discard_preallocations",
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
            let _ = std::fs::write(self.dir.join(format!("events/ext4/{e}/enable")), "0");
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
        instance.write(
            &format!("events/ext4/{e}/filter"),
            &format!("dev == {kdev}"),
        )?;
        instance.write(&format!("events/ext4/{e}/enable"), "1")?;
    }
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    writeln!(
        gz,
        "# extalloc capture: dev {major},{minor}; command: {}",
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

    /// A real capture on an ext4 loop mount: the trace parses, holds the fallocate's
    /// request, and no tracefs instance is left behind.
    #[test]
    fn captures_a_fallocate_on_a_loop_mount() {
        let Some(dev) = test_device(&["fallocate"]) else {
            return;
        };
        let loop_dev = PathBuf::from(dev.loop_dev.clone().expect("attached"));
        let out = std::env::temp_dir().join(format!("extalloc-capture-{}.gz", std::process::id()));
        let target = dev.path("f");
        let result = capture(
            &loop_dev,
            &[
                "fallocate".into(),
                "-l".into(),
                "4M".into(),
                target.display().to_string(),
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
        assert!(
            trace.events.iter().any(|e| matches!(
                e,
                super::super::parse::Event::Request { flags, .. } if flags.no_prealloc
            )),
            "the fallocate's request is in the trace"
        );
        assert_eq!(trace.malformed, 0);
        let root = tracefs().unwrap();
        let leftover = std::fs::read_dir(root.join("instances"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy() == format!("extalloc-{}", std::process::id()));
        assert!(!leftover, "the tracefs instance is removed");
    }
}
