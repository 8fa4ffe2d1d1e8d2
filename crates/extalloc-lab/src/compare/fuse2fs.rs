//! fuse2fs as a `compare-fs` target: e2fsprogs' ext4 through FUSE, on an image file in
//! /dev/shm made by mkfs.ext4 with the options the kernel's ext4 gets (`kernel::Fs::Ext4`).
//!
//! Data structures: [`Fuse2fsMount`]: the image, the mount point and the fuse2fs process,
//! run in the foreground (`-f`) as our child so that its exit can be waited for.
//!
//! Invariant: a [`Fuse2fsMount`] is mounted while its child runs; unmounting waits for the
//! child to exit (the kernel returns from `umount` of a FUSE mount before the daemon has
//! written back and closed the image) before anything reads or removes the image. `Drop`
//! unmounts, waits (killing a daemon that does not exit in a minute) and removes the image
//! and mount point, whatever failed.
//!
//! Options: fuse2fs's own defaults (`kernel_cache,subtype=ext4,use_ino,attr_timeout=0,
//! big_writes` as scripts/mount.fuse.fuse2fs lists them), nothing added: as root no
//! `allow_other` or `fakeroot` is needed, and the benchmark measures fuse2fs as it ships.

use super::kernel;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An ext4 image in /dev/shm mounted by a fuse2fs child process.
pub struct Fuse2fsMount {
    /// The image file.
    pub image: PathBuf,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// FUSE's `statfs` magic (`FUSE_SUPER_MAGIC`).
const FUSE_MAGIC: i64 = 0x6573_5546;

impl Fuse2fsMount {
    /// A fresh ext4 of `bytes` made with mkfs.ext4 and mounted with fuse2fs.
    pub fn create(bytes: u64, block_size: u32) -> Result<Self> {
        let tag = format!("extalloc-compare-{}-fuse2fs", std::process::id());
        let mut m = Fuse2fsMount {
            image: kernel::image_dir().join(format!("{tag}.img")),
            mountpoint: std::env::temp_dir().join(&tag),
            log: std::env::temp_dir().join(format!("{tag}.log")),
            child: None,
        };
        let file = std::fs::File::create(&m.image)
            .with_context(|| format!("creating {}", m.image.display()))?;
        file.set_len(bytes)
            .with_context(|| format!("sizing {}", m.image.display()))?;
        drop(file);
        let image = m.image.to_string_lossy().into_owned();
        kernel::run(&mut kernel::Fs::Ext4.mkfs(&image, block_size))?;
        std::fs::create_dir_all(&m.mountpoint)
            .with_context(|| format!("making {}", m.mountpoint.display()))?;
        let log = std::fs::File::create(&m.log)
            .with_context(|| format!("creating {}", m.log.display()))?;
        let child = Command::new("fuse2fs")
            .arg(&m.image)
            .arg(&m.mountpoint)
            .arg("-f")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("running fuse2fs (Debian package fuse2fs: scripts/ci-deps.sh)")?;
        m.child = Some(child);
        m.wait_mounted()?;
        Ok(m)
    }

    /// Waits (up to 30 s) until the mount point is a FUSE mount, or fuse2fs has failed.
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
                    "fuse2fs {} {} exited ({status}) before mounting: {}",
                    self.image.display(),
                    self.mountpoint.display(),
                    self.log_text()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "fuse2fs did not mount {} in 30 s: {}",
                    self.mountpoint.display(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Unmounts and waits for fuse2fs to exit (killing it after a minute).
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
                    bail!("fuse2fs exited with {status}: {}", self.log_text());
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                unmounted?;
                bail!(
                    "fuse2fs of {} did not exit in a minute after the unmount; killed it",
                    self.image.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Fuse2fsMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("cleanup: {e:#}");
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
        let _ = std::fs::remove_file(&self.log);
        if let Err(e) = std::fs::remove_file(&self.image) {
            eprintln!("cleanup: removing {}: {e}", self.image.display());
        }
    }
}
