//! The aging jobs' file systems and figures: `age_git.rs` (FAST'17's git checkouts) and
//! `age_profile.rs` (a Geriatrix-like fill and churn) run on an [`AgeFs`]: a kernel file
//! system on a loop device or an `extalloc mount` of an image, both in /dev/shm, which
//! they unmount and mount again mid-job (cold reads, extalloc's layout, free space).
//!
//! Data structures: [`AgeFs`] (the mounted target), [`FileLayout`] (one file's extents by
//! its path under the root), [`FreeReport`] (the free space after unmounting; its
//! [`GroupFrag`] and [`FragStats`] are `age_freespace.rs`'s).
//!
//! Invariant: between calls an [`AgeFs`] is mounted at [`AgeFs::root`]; every method that
//! unmounts mounts again before returning, or fails (and the drop tears everything down:
//! `kernel::Device` and `ExtallocMount` unmount, detach and remove on drop). No locks.

use super::kernel::{self, Device, Fs};
use super::mounted::{merged, regular_files, ExtallocMount, Flavor, Target};
use super::{age_freespace as freespace_age, freespace, jobs::drop_caches};
use crate::lab::report::{self, FreeSpaceJson};
use anyhow::{bail, Context, Result};
use extalloc::{Extent, FreeSpace};
pub use freespace_age::{frag_stats, nearest_rank, FragStats, GroupFrag};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A target the aging jobs run on, mounted.
pub enum AgeFs {
    /// A kernel file system on a loop device.
    Kernel {
        /// Which.
        fs: Fs,
        /// Its device and mount.
        dev: Device,
        /// Block size it was made with.
        block_size: u32,
    },
    /// `extalloc mount` of an image.
    Extalloc(ExtallocMount),
}

/// One regular file's extents (physically contiguous neighbours merged), by its path
/// relative to the root (`aged/src/main.rs`).
#[derive(Debug, Clone)]
pub struct FileLayout {
    /// Path under the root, `/`-separated, no leading `/`.
    pub path: String,
    /// Its extents in blocks.
    pub extents: Vec<Extent>,
}

/// The free space of an unmounted target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FreeReport {
    /// fsperf's frag % (None where no per-group figures could be read).
    pub frag: Option<FragStats>,
    /// Totals and the free-extent size histogram (None for btrfs).
    pub free_space: Option<FreeSpaceJson>,
    /// Where the figures come from, or why some are missing.
    pub source: String,
}

/// Extents per file of `files`: (mean, p50, p99); zeros when there are none.
pub fn extents_per_file(files: &[&FileLayout]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = files.iter().map(|f| f.extents.len() as f64).collect();
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (mean, nearest_rank(&v, 0.5), nearest_rank(&v, 0.99))
}

/// Blocks within which a file that starts after the previous file's end counts as next to
/// it (256: 1 MiB of 4 KiB blocks).
pub const NEAR_BLOCKS: u64 = 256;

/// Of consecutive files in path order (a proxy for the order `grep -r` reads them in):
/// the percentage whose first block is not within [`NEAR_BLOCKS`] after the previous
/// file's last block (how often a reader of the tree jumps), and the percentage whose
/// first block is not within [`NEAR_BLOCKS`] of it either way (how often it jumps far).
/// Empty files are skipped; zeros with fewer than two files.
pub fn jumps_pct(files: &[&FileLayout]) -> (f64, f64) {
    let mut sorted: Vec<&FileLayout> = files
        .iter()
        .copied()
        .filter(|f| !f.extents.is_empty())
        .collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    if sorted.len() < 2 {
        return (0.0, 0.0);
    }
    let (mut jumps, mut far) = (0, 0);
    for w in sorted.windows(2) {
        let end = w[0].extents.last().expect("not empty").end();
        let start = w[1].extents[0].start;
        jumps += usize::from(!(end..end + NEAR_BLOCKS).contains(&start));
        far += usize::from(start.abs_diff(end) >= NEAR_BLOCKS);
    }
    let pct = |n: usize| 100.0 * n as f64 / (sorted.len() - 1) as f64;
    (pct(jumps), pct(far))
}

/// The groups of a [`FreeSpace`] (ext4 from dumpe2fs, extalloc from its store).
fn groups_of(fs: &FreeSpace) -> Vec<GroupFrag> {
    fs.groups
        .iter()
        .map(|g| GroupFrag {
            free_blocks: u64::from(g.free_blocks),
            largest_free_run: u64::from(g.largest_free_run),
        })
        .collect()
}

/// An extalloc image opened read-only (the writes of the open go to memory).
fn open_volume(image: &Path) -> Result<extalloc::volume::Volume> {
    extalloc::volume::Volume::open_read_only(image)
        .with_context(|| format!("opening the volume in {} read-only", image.display()))
}

impl AgeFs {
    /// A fresh file system of `bytes` on `target`, mounted (fuse2fs is not one of them);
    /// extalloc's with allocation policy `policy` (None: the default).
    pub fn create(
        target: Target,
        bytes: u64,
        block_size: u32,
        policy: Option<&str>,
    ) -> Result<AgeFs> {
        Ok(match target {
            Target::Kernel(fs) => AgeFs::Kernel {
                fs,
                dev: Device::create(fs, bytes, block_size)?,
                block_size,
            },
            Target::Extalloc | Target::ExtallocUring | Target::ExtallocNoPoll => {
                let flavor = Flavor::of(target).expect("an extalloc target");
                AgeFs::Extalloc(ExtallocMount::create(bytes, block_size, flavor, policy)?)
            }
            Target::Fuse2fs | Target::Floor { .. } => bail!("the aging jobs run on ext4, xfs, btrfs and extalloc, not fuse2fs or the floor (drop them from --fs)"),
        })
    }

    /// The mount's root.
    pub fn root(&self) -> PathBuf {
        match self {
            AgeFs::Kernel { dev, .. } => dev.path(""),
            AgeFs::Extalloc(m) => m.mountpoint.clone(),
        }
    }

    fn unmount(&mut self) -> Result<()> {
        rustix::fs::sync();
        match self {
            AgeFs::Kernel { dev, .. } => {
                // `unmount` removes the directory; `mount` makes it again.
                dev.unmount()
            }
            AgeFs::Extalloc(m) => m.unmount(),
        }
    }

    fn mount(&mut self, mp: &Path) -> Result<()> {
        match self {
            AgeFs::Kernel { fs, dev, .. } => {
                let loop_dev = dev.loop_dev.clone().context("no loop device")?;
                std::fs::create_dir_all(mp)
                    .with_context(|| format!("making the mount point {}", mp.display()))?;
                kernel::run(
                    Command::new("mount")
                        .args(["-t", fs.name(), &loop_dev])
                        .arg(mp),
                )
                .with_context(|| format!("mounting {loop_dev} on {} again", mp.display()))?;
                dev.mount_point = Some(mp.to_path_buf());
                Ok(())
            }
            AgeFs::Extalloc(m) => m.mount(),
        }
    }

    /// Unmounts (everything written back), runs `offline`, mounts again.
    fn offline<T>(&mut self, offline: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        let mp = self.root();
        self.unmount()?;
        let out = offline(self);
        self.mount(&mp)?;
        out
    }

    /// Caches cold for the next read: `sync`, unmount, mount, drop the page cache (so the
    /// kernel's and a FUSE daemon's caches are both empty).
    pub fn cold(&mut self) -> Result<()> {
        self.offline(|_| Ok(()))?;
        drop_caches()
    }

    /// Every regular file's extents (kernel: FIEMAP, mounted; extalloc: the volume's map,
    /// after unmounting, since FIEMAP does not reach through FUSE).
    pub fn layout(&mut self) -> Result<Vec<FileLayout>> {
        match self {
            AgeFs::Kernel {
                dev, block_size, ..
            } => {
                let root = dev.path("");
                rustix::fs::sync();
                let mut out = Vec::new();
                for path in regular_files(&root)? {
                    let rel = path.strip_prefix(&root).unwrap_or(&path);
                    out.push(FileLayout {
                        path: rel.to_string_lossy().into_owned(),
                        extents: kernel::file_extents(&path, *block_size)?,
                    });
                }
                Ok(out)
            }
            AgeFs::Extalloc(_) => self.offline(|s| {
                let AgeFs::Extalloc(m) = s else {
                    unreachable!("matched above")
                };
                let vol = open_volume(&m.image)?;
                let paths = extalloc_fuse::fs::paths(&vol).map_err(anyhow::Error::msg)?;
                let mut out = Vec::new();
                for (&id, (path, kind)) in &paths {
                    if *kind == extalloc_fuse::inode::Kind::File {
                        out.push(FileLayout {
                            path: path.trim_start_matches('/').to_string(),
                            extents: merged(&vol.extents(id)?),
                        });
                    }
                }
                Ok(out)
            }),
        }
    }

    /// The free space, read unmounted with the file system's own tools (extalloc: its
    /// store), then mounted again.
    pub fn free_space(&mut self) -> Result<FreeReport> {
        self.offline(|s| match s {
            AgeFs::Kernel {
                fs,
                dev,
                block_size,
            } => {
                let loop_dev = dev.loop_dev.clone().context("no loop device")?;
                kernel_free(*fs, &loop_dev, *block_size)
            }
            AgeFs::Extalloc(m) => {
                let vol = open_volume(&m.image)?;
                let g = vol.store().geometry();
                let fs = vol.store().allocator().free_space();
                Ok(FreeReport {
                    frag: frag_stats(&groups_of(&fs)),
                    free_space: Some(report::free_space_json(&fs, g.block_size, g.group_blocks)),
                    source: "the store's free-space bitmaps, per group".into(),
                })
            }
        })
    }
}

/// A kernel file system's free space, unmounted.
fn kernel_free(fs: Fs, loop_dev: &str, block_size: u32) -> Result<FreeReport> {
    match fs {
        Fs::Ext4 => {
            let dump = kernel::run(Command::new("dumpe2fs").arg(loop_dev))?;
            let (geometry, runs) = freespace::parse_dumpe2fs(&dump)?;
            let free =
                FreeSpace::from_free_runs(&geometry, runs).context("dumpe2fs free ranges")?;
            Ok(FreeReport {
                frag: frag_stats(&groups_of(&free)),
                free_space: Some(report::free_space_json(
                    &free,
                    geometry.block_size,
                    geometry.group_blocks,
                )),
                source: "dumpe2fs's free ranges, per block group".into(),
            })
        }
        Fs::Xfs => {
            let free =
                kernel::run(Command::new("xfs_db").args(["-r", "-c", "freesp -s", loop_dev]))?;
            let agcount = kernel::run(Command::new("xfs_db").args([
                "-r",
                "-c",
                "sb 0",
                "-c",
                "print agcount",
                loop_dev,
            ]))?;
            let n = freespace_age::xfs_field(&agcount, "agcount")?;
            let mut cmd = Command::new("xfs_db");
            cmd.arg("-r");
            for ag in 0..n {
                cmd.args(["-c", &format!("agf {ag}"), "-c", "print freeblks longest"]);
            }
            let agfs = kernel::run(cmd.arg(loop_dev))?;
            Ok(FreeReport {
                frag: frag_stats(&freespace_age::parse_xfs_agfs(&agfs)?),
                free_space: Some(freespace::parse_xfs_freesp(&free, block_size)?),
                source: "xfs_db: each AGF's freeblks and longest; freesp -s".into(),
            })
        }
        Fs::Btrfs => {
            let dump = kernel::run(Command::new("btrfs").args([
                "inspect-internal",
                "dump-tree",
                "-t",
                "2",
                loop_dev,
            ]))?;
            let runs = freespace_age::parse_btrfs_data_free(&dump);
            if runs.is_empty() {
                return Ok(btrfs_none("no data block group in its extent tree"));
            }
            Ok(FreeReport {
                frag: frag_stats(&freespace_age::groups_of_runs(&runs)),
                free_space: Some(freespace_age::free_space_json_of_runs(&runs, block_size)),
                source: "btrfs's extent tree: the gaps between extents in each data block \
                         group (allocated chunks only: unallocated device space is in no \
                         block group)"
                    .into(),
            })
        }
    }
}

fn btrfs_none(why: &str) -> FreeReport {
    FreeReport {
        frag: None,
        free_space: None,
        source: format!("btrfs: no per-group free space ({why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), 50.0);
        assert_eq!(nearest_rank(&v, 0.95), 95.0);
        assert_eq!(nearest_rank(&v, 0.99), 99.0);
        assert_eq!(nearest_rank(&v, 1.0), 100.0);
        assert_eq!(nearest_rank(&v, 0.0), 1.0);
        assert_eq!(nearest_rank(&[], 0.5), 0.0);
    }

    #[test]
    fn jumps_between_files_in_path_order() {
        let f = |p: &str, start: u64| FileLayout {
            path: p.into(),
            extents: vec![Extent::new(start, 2)],
        };
        // a(10-11) -> b(12): near; b -> c(5000): a far jump; c -> d(3): a far jump back;
        // d(3-4) -> e(1): a near jump back.
        let files = [f("d", 3), f("b", 12), f("a", 10), f("c", 5000), f("e", 1)];
        let refs: Vec<&FileLayout> = files.iter().collect();
        assert_eq!(jumps_pct(&refs), (75.0, 50.0));
        assert_eq!(jumps_pct(&refs[..1]), (0.0, 0.0));
    }

    #[test]
    fn extents_per_file_figures() {
        let f = |n: u64| FileLayout {
            path: format!("f{n}"),
            extents: (0..n).map(|i| Extent::new(i * 10, 1)).collect(),
        };
        let files = [f(1), f(1), f(2), f(8)];
        let refs: Vec<&FileLayout> = files.iter().collect();
        assert_eq!(extents_per_file(&refs), (3.0, 1.0, 8.0));
        assert_eq!(extents_per_file(&[]), (0.0, 0.0, 0.0));
    }
}
