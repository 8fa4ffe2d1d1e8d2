//! fuse2fs as a `compare-fs` target: e2fsprogs' ext4 through FUSE, on an image file in
//! /dev/shm made by mkfs.ext4 with the options the kernel's ext4 gets (`kernel::Fs::Ext4`).
//!
//! Data structures: [`Fuse2fsMount`]: the image and the fuse2fs process, run in the
//! foreground (`-f`) as our child (`daemon::Daemon`) so that its exit can be waited for.
//!
//! Invariant: a [`Fuse2fsMount`] is mounted while its child runs; unmounting waits for the
//! child to exit (the kernel returns from `umount` of a FUSE mount before the daemon has
//! written back and closed the image) before anything reads or removes the image. `Drop`
//! unmounts, waits (killing a daemon that does not exit in a minute) and removes the image
//! and mount point, whatever failed.
//!
//! Options: fuse2fs's own defaults (`kernel_cache,subtype=ext4,use_ino,attr_timeout=0,
//! big_writes` as scripts/mount/mount.fuse.fuse2fs lists them), nothing added: as root no
//! `allow_other` or `fakeroot` is needed, and the benchmark measures fuse2fs as it ships.

use super::daemon::Daemon;
use super::kernel;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// An ext4 image in /dev/shm mounted by a fuse2fs child process.
pub struct Fuse2fsMount {
    /// The image file.
    pub image: PathBuf,
    daemon: Option<Daemon>,
}

impl Fuse2fsMount {
    /// A fresh ext4 of `bytes` made with mkfs.ext4 and mounted with fuse2fs.
    pub fn create(bytes: u64, block_size: u32) -> Result<Self> {
        let tag = format!("extalloc-compare-{}-fuse2fs", std::process::id());
        let mut m = Fuse2fsMount {
            image: kernel::image_dir().join(format!("{tag}.img")),
            daemon: None,
        };
        let file = std::fs::File::create(&m.image)
            .with_context(|| format!("creating {}", m.image.display()))?;
        file.set_len(bytes)
            .with_context(|| format!("sizing {}", m.image.display()))?;
        drop(file);
        let image = m.image.to_string_lossy().into_owned();
        kernel::run(&mut kernel::Fs::Ext4.mkfs(&image, block_size))?;
        let mountpoint = std::env::temp_dir().join(&tag);
        let mut cmd = Command::new("fuse2fs");
        cmd.arg(&m.image).arg(&mountpoint).arg("-f");
        m.daemon = Some(Daemon::start(
            "fuse2fs",
            cmd,
            mountpoint,
            std::env::temp_dir().join(format!("{tag}.log")),
            "Debian package fuse2fs: scripts/ci/ci-deps.sh",
        )?);
        Ok(m)
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self
            .daemon
            .as_ref()
            .expect("mounted at creation")
            .mountpoint
    }

    /// fuse2fs's process id (None once unmounted).
    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().and_then(Daemon::pid)
    }

    /// Unmounts and waits for fuse2fs to exit (killing it after a minute).
    pub fn unmount(&mut self) -> Result<()> {
        match self.daemon.as_mut() {
            Some(d) => d.unmount(),
            None => Ok(()),
        }
    }
}

impl Drop for Fuse2fsMount {
    fn drop(&mut self) {
        // The daemon first: unmounted and exited before the image goes.
        drop(self.daemon.take());
        if let Err(e) = std::fs::remove_file(&self.image) {
            eprintln!("cleanup: removing {}: {e}", self.image.display());
        }
    }
}
