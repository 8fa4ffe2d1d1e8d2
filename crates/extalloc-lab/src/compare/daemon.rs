//! A FUSE daemon run as this process's child in the foreground, as `compare-fs` runs
//! fuse2fs (`fuse2fs.rs`) and the floor (`floor.rs`): started, waited for until its mount
//! is up, unmounted and waited for until it exits.
//!
//! Data structures: [`Daemon`]: what it is (for messages), its mount point, its log file
//! (stdout and stderr) and the child.
//!
//! Invariant: while the child runs, the mount point is (or is about to be) its FUSE mount;
//! [`Daemon::unmount`] returns only once the child has exited (the kernel returns from
//! `umount` of a FUSE mount before the daemon is done), killing it after a minute. Dropping
//! a [`Daemon`] unmounts it and removes the mount point and the log, whatever failed.

use super::kernel;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// FUSE's `statfs` magic (`FUSE_SUPER_MAGIC`).
const FUSE_MAGIC: i64 = 0x6573_5546;

/// A FUSE daemon, our child, serving one mount.
pub struct Daemon {
    /// What it is, in messages (`fuse2fs`, `the floor`).
    what: String,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// Runs `cmd` (the daemon in the foreground, mounting `mountpoint`, which is made here)
    /// with its output in `log`, and waits (up to 30 s) until the mount is up. `install`
    /// says how to get the program when it cannot be run.
    pub fn start(
        what: &str,
        mut cmd: Command,
        mountpoint: PathBuf,
        log: PathBuf,
        install: &str,
    ) -> Result<Daemon> {
        std::fs::create_dir_all(&mountpoint)
            .with_context(|| format!("making {}", mountpoint.display()))?;
        let mut d = Daemon {
            what: what.to_string(),
            mountpoint,
            log,
            child: None,
        };
        let file = std::fs::File::create(&d.log)
            .with_context(|| format!("creating {}", d.log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("running {what} ({install})"))?;
        d.child = Some(child);
        d.wait_mounted()?;
        Ok(d)
    }

    /// The daemon's process id (None once it has exited).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits (up to 30 s) until the mount point is a FUSE mount, or the daemon has failed.
    fn wait_mounted(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(st) = rustix::fs::statfs(&self.mountpoint) {
                // f_type is i64 here, u32 or i32 on other targets.
                #[allow(clippy::unnecessary_cast)]
                if st.f_type as i64 == FUSE_MAGIC {
                    return Ok(());
                }
            }
            let child = self.child.as_mut().expect("spawned");
            if let Some(status) = child.try_wait()? {
                self.child = None;
                bail!(
                    "{} exited ({status}) before mounting {}: {}",
                    self.what,
                    self.mountpoint.display(),
                    self.log_text()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not mount {} in 30 s: {}",
                    self.what,
                    self.mountpoint.display(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the daemon has written so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Unmounts and waits for the daemon to exit (killing it after a minute).
    pub fn unmount(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let mut unmounted = kernel::run(Command::new("umount").arg(&self.mountpoint));
        if unmounted.is_err() {
            // Busy (a process still in it): detach it, so the daemon's exit ends it.
            if kernel::run(Command::new("umount").arg("-l").arg(&self.mountpoint)).is_ok() {
                unmounted = Ok(String::new());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                unmounted?;
                if !status.success() {
                    bail!("{} exited with {status}: {}", self.what, self.log_text());
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                unmounted?;
                bail!(
                    "{} of {} did not exit in a minute after the unmount; killed it",
                    self.what,
                    self.mountpoint.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("cleanup: {e:#}");
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
        let _ = std::fs::remove_file(&self.log);
    }
}
