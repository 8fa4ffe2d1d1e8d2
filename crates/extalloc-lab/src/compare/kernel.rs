//! A kernel file system on a loop device backed by a sparse file in `/dev/shm`, and the
//! lab's workloads run on it with real system calls. Everything set up is torn down by
//! `Drop`, so an error or Ctrl-C (which stops the workers, then unwinds) leaves no mount,
//! loop device or image behind.

use super::fiemap;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where the file systems' images go (`compare-fs --image-dir`); /dev/shm unless set.
static IMAGE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Puts every image this process makes from now on in `dir` (a directory on a real disk,
/// so that a cold read measures the layout rather than the CPU); /dev/shm by default. Once
/// per process: a second call is refused.
pub fn set_image_dir(dir: PathBuf) -> Result<()> {
    anyhow::ensure!(
        dir.is_dir(),
        "--image-dir {}: not a directory",
        dir.display()
    );
    IMAGE_DIR
        .set(dir)
        .map_err(|d| anyhow::anyhow!("the image directory is already {}", d.display()))
}

/// The directory images go to: [`set_image_dir`]'s, else /dev/shm.
pub fn image_dir() -> PathBuf {
    IMAGE_DIR
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

/// Set by the Ctrl-C handler; workers stop and the run unwinds.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler of Ctrl-C, `SIGTERM` and `SIGHUP` once (ctrlc's `termination`
/// feature): the command stops at its next check and unmounts what it mounted, where a
/// kill would leave its mounts and their daemons behind.
pub fn catch_interrupt() -> Result<()> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = ctrlc::set_handler(|| {
            eprintln!("interrupted: stopping and cleaning up");
            INTERRUPTED.store(true, Ordering::SeqCst);
        })
        .context("installing the Ctrl-C handler");
    });
    result
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fs {
    Ext4,
    Xfs,
    Btrfs,
}

impl Fs {
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "ext4" => Ok(Fs::Ext4),
            "xfs" => Ok(Fs::Xfs),
            "btrfs" => Ok(Fs::Btrfs),
            other => bail!("--fs '{other}': expected ext4, xfs or btrfs"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fs::Ext4 => "ext4",
            Fs::Xfs => "xfs",
            Fs::Btrfs => "btrfs",
        }
    }

    /// The mkfs command for `dev` (a device or an image file).
    pub(super) fn mkfs(self, dev: &str, block_size: u32) -> Command {
        let bs = block_size.to_string();
        let mut c;
        match self {
            Fs::Ext4 => {
                c = Command::new("mkfs.ext4");
                // Initialise inode tables and journal now, so no background thread writes
                // during the run.
                c.args([
                    "-q",
                    "-F",
                    "-b",
                    &bs,
                    "-E",
                    "lazy_itable_init=0,lazy_journal_init=0",
                ]);
            }
            Fs::Xfs => {
                c = Command::new("mkfs.xfs");
                c.args(["-q", "-f", "-b", &format!("size={bs}")]);
            }
            Fs::Btrfs => {
                c = Command::new("mkfs.btrfs");
                c.args(["-q", "-f", "-s", &bs]);
            }
        }
        c.arg(dev);
        c
    }

    /// The mkfs tool, if installed.
    pub fn tool(self) -> &'static str {
        match self {
            Fs::Ext4 => "mkfs.ext4",
            Fs::Xfs => "mkfs.xfs",
            Fs::Btrfs => "mkfs.btrfs",
        }
    }
}

/// Is `tool` on PATH (or in /sbin, /usr/sbin)?
pub fn have(tool: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/sbin", "/usr/sbin"])
        .any(|d| Path::new(d).join(tool).is_file());
    found
}

/// Runs a command; its stderr goes in the error.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An image file, its loop device and its mount point; torn down in reverse on drop.
pub struct Device {
    image: PathBuf,
    pub loop_dev: Option<String>,
    pub mount_point: Option<PathBuf>,
}

impl Device {
    /// A fresh file system of `bytes` on a loop device, mounted.
    pub fn create(fs: Fs, bytes: u64, block_size: u32) -> Result<Self> {
        let tag = format!("extalloc-compare-{}-{}", std::process::id(), fs.name());
        let mut dev = Device {
            image: image_dir().join(format!("{tag}.img")),
            loop_dev: None,
            mount_point: None,
        };
        let file = std::fs::File::create(&dev.image)
            .with_context(|| format!("creating {}", dev.image.display()))?;
        file.set_len(bytes).context("sizing the image")?;
        drop(file);
        let out = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&dev.image))?;
        dev.loop_dev = Some(out.trim().to_string());
        let loop_dev = dev.loop_dev.clone().expect("just set");
        run(&mut fs.mkfs(&loop_dev, block_size))?;
        let mount_point = std::env::temp_dir().join(tag);
        std::fs::create_dir_all(&mount_point)?;
        let mounted = run(Command::new("mount")
            .args(["-t", fs.name(), &loop_dev])
            .arg(&mount_point));
        if let Err(e) = mounted {
            let _ = std::fs::remove_dir(&mount_point);
            return Err(e);
        }
        dev.mount_point = Some(mount_point);
        Ok(dev)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mount_point.as_ref().expect("mounted").join(name)
    }

    /// Unmounts (the free-space tools read the unmounted device).
    pub fn unmount(&mut self) -> Result<()> {
        if let Some(m) = self.mount_point.take() {
            run(Command::new("umount").arg(&m))?;
            let _ = std::fs::remove_dir(&m);
        }
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(m) = self.mount_point.take() {
            if let Err(e) = run(Command::new("umount").arg(&m)) {
                eprintln!("cleanup: {e:#}");
            }
            let _ = std::fs::remove_dir(&m);
        }
        if let Some(l) = self.loop_dev.take() {
            if let Err(e) = run(Command::new("losetup").args(["-d", &l])) {
                eprintln!("cleanup: {e:#}");
            }
        }
        if let Err(e) = std::fs::remove_file(&self.image) {
            eprintln!("cleanup: removing {}: {e}", self.image.display());
        }
    }
}

/// A file's extents in blocks (FIEMAP, contiguous neighbours merged).
pub fn file_extents(path: &Path, block_size: u32) -> Result<Vec<extalloc::Extent>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mapped = fiemap::extents(&f).with_context(|| format!("FIEMAP of {}", path.display()))?;
    Ok(fiemap::to_block_extents(&mapped, u64::from(block_size)))
}

/// For tests: a 64 MiB ext4 loop mount, or `None` (with the reason printed) when this
/// machine cannot make one (not root, no tools, no loop devices).
#[cfg(test)]
pub fn test_device(tools: &[&str]) -> Option<Device> {
    let missing: Vec<&str> = ["mkfs.ext4", "losetup"]
        .iter()
        .chain(tools)
        .copied()
        .filter(|t| !have(t))
        .collect();
    if !rustix::process::geteuid().is_root() || !missing.is_empty() {
        eprintln!("skipped: needs root and {missing:?} (scripts/setup.sh installs the tools)");
        return None;
    }
    match Device::create(Fs::Ext4, 64 << 20, 4096) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: no loop device here ({e:#})");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIEMAP on a real file in an ext4 loop mount backed by /dev/shm, as `compare` uses it.
    #[test]
    fn fiemap_on_an_ext4_loop_mount() {
        let Some(dev) = test_device(&[]) else {
            return;
        };
        let path = dev.path("f");
        let file = std::fs::File::create(&path).unwrap();
        for i in 0..8u64 {
            rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), i * 8192, 8192)
                .unwrap();
        }
        drop(file);
        let extents = file_extents(&path, 4096).unwrap();
        let blocks: u64 = extents.iter().map(|e| e.len).sum();
        assert_eq!(blocks, 16, "{extents:?}");
        assert!(!extents.is_empty());
        let image = dev.image.clone();
        drop(dev);
        assert!(!image.exists(), "the image is removed on drop");
    }
}
