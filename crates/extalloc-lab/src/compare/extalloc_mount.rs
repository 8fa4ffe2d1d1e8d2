//! extalloc's mount as a `compare-fs` target (`extalloc`, `extalloc-uring`,
//! `extalloc-nopoll`) and for the aging jobs: an image made by `extalloc mkfs` in the image
//! directory, mounted by `extalloc mount` (a daemon that detaches; its process id is read
//! from the command's answer), unmounted by `extalloc umount`'s wait.
//!
//! Data structures: [`ExtallocMount`] (the image, the mount point, the daemon's process id,
//! how it is mounted: `Flavor`).
//!
//! Invariant: the image is mounted while `pid` is set; dropping the mount unmounts it
//! (detaching a dead daemon's mount) and removes the mount point and the image. With
//! io_uring the fuse module's `enable_uring` is set for the mount only (`floor::UringSwitch`).

use super::floor::UringSwitch;
use super::kernel;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// An extalloc image in the image directory (`kernel::image_dir`), mounted by `extalloc mount` in a child process;
/// unmounted and removed on drop. The aging jobs (`age.rs`) unmount and mount it again.
pub struct ExtallocMount {
    pub(super) image: PathBuf,
    pub(super) mountpoint: PathBuf,
    /// The daemon's process id while mounted.
    pub(super) pid: Option<u32>,
    /// How it is mounted.
    flavor: Flavor,
    /// `--policy` of every mount (None: the default).
    policy: Option<String>,
}

/// How an [`ExtallocMount`] is mounted: as `extalloc mount` does by default, with
/// `--io-uring`, or with `--poll-us 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    Plain,
    Uring,
    NoPoll,
}

impl ExtallocMount {
    /// A fresh image of `bytes`, made by `extalloc mkfs`, mounted as `flavor` says
    /// (`policy`: with `--policy`).
    pub(super) fn create(
        bytes: u64,
        block_size: u32,
        flavor: Flavor,
        policy: Option<&str>,
    ) -> Result<Self> {
        let tag = format!("extalloc-compare-{}-extalloc", std::process::id());
        let mut m = ExtallocMount {
            image: kernel::image_dir().join(format!("{tag}.img")),
            mountpoint: std::env::temp_dir().join(tag),
            pid: None,
            flavor,
            policy: policy.map(str::to_owned),
        };
        let exe = std::env::current_exe().context("cannot find the extalloc executable")?;
        std::fs::create_dir_all(&m.mountpoint)?;
        kernel::run(
            Command::new(&exe)
                .arg("mkfs")
                .arg(&m.image)
                .args(["--size", &bytes.to_string()])
                .args(["--block-size", &block_size.to_string()]),
        )?;
        m.mount()?;
        Ok(m)
    }

    /// Mounts the image again (after [`ExtallocMount::unmount`]).
    pub(super) fn mount(&mut self) -> Result<()> {
        anyhow::ensure!(self.pid.is_none(), "{} is mounted", self.image.display());
        let exe = std::env::current_exe().context("cannot find the extalloc executable")?;
        let mut cmd = Command::new(&exe);
        cmd.arg("mount").arg(&self.image).arg(&self.mountpoint);
        if let Some(p) = &self.policy {
            cmd.args(["--policy", p]);
        }
        if self.flavor == Flavor::NoPoll {
            cmd.args(["--poll-us", "0"]);
        }
        // The transport named either way: a mount left to choose takes the rings wherever
        // the fuse module offers them, and a target must not change with that setting.
        let switch = match self.flavor == Flavor::Uring {
            true => {
                cmd.arg("--io-uring");
                Some(UringSwitch::on()?)
            }
            false => {
                cmd.arg("--no-io-uring");
                None
            }
        };
        let out = kernel::run(&mut cmd);
        drop(switch);
        let out = out?;
        self.pid = out
            .rsplit_once("(process ")
            .and_then(|(_, p)| p.trim().trim_end_matches(')').parse().ok());
        anyhow::ensure!(self.pid.is_some(), "no process id in mount's answer: {out}");
        Ok(())
    }

    /// Unmounts and waits for the daemon to write everything back and release the device
    /// (`extalloc umount`; a plain `umount` returns before that).
    pub(super) fn unmount(&mut self) -> Result<()> {
        if self.pid.take().is_some() {
            let ten_minutes = std::time::Duration::from_secs(600);
            extalloc_fuse::umount::unmount(&self.mountpoint, ten_minutes, &|m| {
                eprintln!("extalloc umount: {m}")
            })
            .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }
}

impl Drop for ExtallocMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("cleanup: {e:#}");
            // A dead daemon's mount, which `extalloc umount` refuses: detached, so that the
            // next round does not mount over it (a mount already gone: nothing to say).
            let _ = kernel::run(Command::new("umount").arg("-l").arg(&self.mountpoint));
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
        let _ = std::fs::remove_file(&self.image);
    }
}
