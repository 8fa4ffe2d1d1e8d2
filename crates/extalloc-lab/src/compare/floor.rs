//! The FUSE floor as a `compare-fs` target (`--fs floor,floor-uring`): the project's
//! in-memory FUSE file system (`scripts/bench/floor-memfs.c`, libfuse 3.19's low-level API, no
//! storage), which costs what FUSE itself costs per operation and little more. Against it
//! extalloc's mount shows what its own work adds, on the same transport: `floor` over
//! `/dev/fuse` beside `extalloc`, `floor-uring` over io_uring beside `extalloc-uring`.
//!
//! The program is built by `scripts/bench/build-floor.sh` (libfuse from ../shared/libfuse, built
//! outside the tree and cached), once per command; `EXTALLOC_FLOOR=PATH` names a binary
//! built already. When it cannot be built, or the kernel has no FUSE over io_uring, the
//! target is skipped with the reason ([`unavailable`]), never run with made-up figures.
//!
//! Mount: `floor-memfs MNT -f -s -o default_permissions,allow_other,fsname=floor,subtype=floor`,
//! extalloc's own mount options; the floor asks for the writeback cache and parallel
//! directory operations and answers with 1 h entry, attribute and negative timeouts. `-s`:
//! libfuse's single-threaded loop on `/dev/fuse` (over io_uring its ring threads, one per
//! CPU, serve the requests either way): its multi-threaded loop cost 3-4x the CPU per create
//! and unlink here (176 against 46 µs per create, one round of 10,000, machine loaded), so
//! it would be no floor. With
//! io_uring the fuse module's `enable_uring` is set to Y for the mount and put back once it
//! is up (the daemon registers its rings before it answers INIT), as extalloc's mount does;
//! libfuse's own report of the negotiation (`FUSE_INIT_STATUS=1`) must say `io_uring=on`,
//! or the run fails with libfuse's reason.
//!
//! Data structures: [`FloorMount`]: the daemon (`daemon::Daemon`) and whether it runs over
//! io_uring. Invariant: `enable_uring` is put back before [`FloorMount::create`] returns,
//! whatever failed.

use super::daemon::Daemon;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The fuse module's switch for FUSE over io_uring (Linux 6.14+), read at each mount's init.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// The options of every floor mount: extalloc's (`default_permissions`, `allow_other`).
pub const MOUNT_OPTIONS: &str = "default_permissions,allow_other,fsname=floor,subtype=floor";

/// The floor binary: built once per process (Err: why it could not be).
pub fn binary() -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// `scripts/bench/build-floor.sh` from the current directory or above the executable.
fn script() -> Result<PathBuf> {
    let rel = Path::new("scripts/bench/build-floor.sh");
    let mut bases = vec![std::env::current_dir()?];
    if let Ok(exe) = std::env::current_exe() {
        bases.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    bases
        .iter()
        .map(|b| b.join(rel))
        .find(|p| p.is_file())
        .context(
            "scripts/bench/build-floor.sh not found (run compare-fs from extalloc's repository, \
             or set EXTALLOC_FLOOR to a floor-memfs binary)",
        )
}

fn build() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("EXTALLOC_FLOOR") {
        let p = PathBuf::from(p);
        anyhow::ensure!(p.is_file(), "EXTALLOC_FLOOR={} is not a file", p.display());
        return Ok(p);
    }
    let script = script()?;
    eprintln!("compare-fs: building the floor ({})", script.display());
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}; it needs meson, ninja-build, liburing-dev, pkg-config and gcc, \
             which it installs with apt-get as root, and the libfuse 3.19 source in \
             ../shared/libfuse or LIBFUSE_SRC)",
            script.display(),
            out.status
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(text.lines().last().unwrap_or_default().trim());
    anyhow::ensure!(
        path.is_file(),
        "{} printed no binary: '{}'",
        script.display(),
        text.trim()
    );
    Ok(path)
}

/// Why the floor cannot run here (`uring`: over io_uring), if it cannot.
pub fn unavailable(uring: bool) -> Option<String> {
    if uring && !Path::new(ENABLE_URING).exists() {
        return Some(format!(
            "this kernel has no FUSE over io_uring ({ENABLE_URING} is missing: Linux 6.14+)"
        ));
    }
    binary()
        .err()
        .map(|e| format!("the floor could not be built: {e:#}"))
}

/// `enable_uring` set to Y, put back on drop (the floor's and extalloc's io_uring mounts).
pub(super) struct UringSwitch {
    was: String,
}

impl UringSwitch {
    /// Sets `enable_uring` to Y, keeping what it was.
    pub(super) fn on() -> Result<UringSwitch> {
        let was = std::fs::read_to_string(ENABLE_URING)
            .with_context(|| format!("{ENABLE_URING} (FUSE over io_uring: Linux 6.14+)"))?;
        std::fs::write(ENABLE_URING, "1")
            .with_context(|| format!("cannot turn on {ENABLE_URING} (root?)"))?;
        Ok(UringSwitch {
            was: was.trim().to_string(),
        })
    }
}

impl Drop for UringSwitch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(ENABLE_URING, &self.was) {
            eprintln!(
                "cleanup: cannot put {ENABLE_URING} back to {}: {e}",
                self.was
            );
        }
    }
}

/// The floor mounted by a child process.
pub struct FloorMount {
    daemon: Daemon,
}

impl FloorMount {
    /// The floor mounted on a fresh mount point, over io_uring when `uring`.
    pub fn create(uring: bool) -> Result<FloorMount> {
        let bin = binary()?;
        let tag = format!("extalloc-compare-{}-floor", std::process::id());
        let mountpoint = std::env::temp_dir().join(&tag);
        let mut cmd = Command::new(&bin);
        cmd.arg(&mountpoint)
            .args(["-f", "-s", "-o", MOUNT_OPTIONS])
            .env("FUSE_INIT_STATUS", "1")
            .env("FUSE_URING_ENABLE", if uring { "1" } else { "0" });
        let switch = if uring {
            Some(UringSwitch::on()?)
        } else {
            None
        };
        let daemon = Daemon::start(
            "the floor",
            cmd,
            mountpoint,
            std::env::temp_dir().join(format!("{tag}.log")),
            "scripts/bench/build-floor.sh builds it",
        )?;
        drop(switch);
        if uring {
            let log = daemon.log_text();
            if !log.contains("FUSE_INIT: io_uring=on") {
                let why = log
                    .lines()
                    .find_map(|l| l.strip_prefix("FUSE_INIT: io_uring="))
                    .unwrap_or("no report from libfuse");
                bail!("the floor did not get FUSE over io_uring: {why}");
            }
        }
        Ok(FloorMount { daemon })
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.daemon.mountpoint
    }

    /// The daemon's process id.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// Unmounts and waits for the daemon to exit.
    pub fn unmount(&mut self) -> Result<()> {
        self.daemon.unmount()
    }
}
