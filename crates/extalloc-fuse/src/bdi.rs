//! The kernel's writeback limits for the mount: its backing device info
//! (`/sys/class/bdi/MAJ:MIN`, named after the FUSE connection's device number).
//!
//! The kernel gives a FUSE mount a strict limit of 1 % of the dirty page threshold
//! (`strict_limit` 1, `max_ratio` 1), since a FUSE daemon may be slow or hostile. With so
//! little room, random writes through the writeback cache reach the daemon one 4 KiB page a
//! request (the parallel writeback series' 12-directory job: 348,135 WRITEs for 393,216
//! writes); with a kernel file system's limits (`max_ratio` 100, no strict limit) the
//! kernel gathers the pages first and sends runs of them (2,463 WRITEs, 1.5x the MiB/s:
//! `docs/mount.md`, "Round trips"). This daemon runs as root and writes everything it is
//! given into its own cache, so the mount asks for a kernel file system's limits
//! (`--kernel-dirty-ratio`, default 100; 1 keeps FUSE's strict 1 %).
//!
//! What the kernel may hold dirty for the mount ([`dirty_bound`]) caps the margin under
//! which opens for writing bypass the cache (`fs/headroom.rs`).
//!
//! Data structures: none (the sysfs and procfs files). Invariant: only this mount's own bdi is written.
//! Lock order: none.

use std::path::PathBuf;

/// Sets the writeback limits of the bdi of device `(major, minor)`: `max_ratio` percent of
/// the dirty threshold, with the strict limit off unless `max_ratio` is 1 (FUSE's own
/// setting, kept as it is). An error says which file could not be written (not root, or a
/// kernel without the knob); the mount goes on with the kernel's limits then.
pub fn set_dirty_ratio(dev: (u32, u32), max_ratio: u32) -> Result<(), String> {
    assert!((1..=100).contains(&max_ratio), "a ratio is a percentage");
    if max_ratio == 1 {
        return Ok(());
    }
    Bdi::of(dev).set_ratio(max_ratio)
}

/// A mount's bdi directory in sysfs.
#[derive(Debug, Clone)]
pub struct Bdi {
    dir: PathBuf,
}

impl Bdi {
    /// The bdi of device `(major, minor)`.
    pub fn of(dev: (u32, u32)) -> Bdi {
        Bdi::at(PathBuf::from(format!("/sys/class/bdi/{}:{}", dev.0, dev.1)))
    }

    /// The bdi whose files are in `dir` (tests: a directory of plain files).
    pub fn at(dir: PathBuf) -> Bdi {
        Bdi { dir }
    }

    fn write(&self, name: &str, value: u64) -> Result<(), String> {
        let p = self.dir.join(name);
        std::fs::write(&p, value.to_string()).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// `max_ratio` percent of the dirty threshold, the strict limit on only at 1 (FUSE's
    /// own setting).
    pub fn set_ratio(&self, max_ratio: u32) -> Result<(), String> {
        assert!((1..=100).contains(&max_ratio), "a ratio is a percentage");
        // The ratio first: with the strict limit off, a 1 % ratio would still bound the bdi.
        self.write("max_ratio", u64::from(max_ratio))?;
        self.write("strict_limit", u64::from(max_ratio == 1))
    }

    /// At most `bytes` dirty for the mount, strictly (the kernel throttles its writers
    /// there and writes back, whatever the rest of the machine holds); the kernel keeps
    /// it as a share of the threshold (`max_ratio_fine`), so the bytes drift with it.
    pub fn set_cap(&self, bytes: u64) -> Result<(), String> {
        assert!(bytes > 0, "a cap of nothing would stop every writer");
        self.write("max_bytes", bytes)?;
        self.write("strict_limit", 1)
    }
}

/// An upper bound of the bytes the kernel may hold dirty for a mount whose bdi has
/// `max_ratio` percent of the dirty threshold (`vm.dirty_bytes`, or `vm.dirty_ratio`
/// percent of all memory: the threshold is a share of the dirtyable memory, never more
/// than all of it); `applied`: [`set_dirty_ratio`] succeeded, else FUSE's own strict 1 %
/// holds. None when the procfs files cannot be read.
pub fn dirty_bound(max_ratio: u32, applied: bool) -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let bytes: u64 = read("/proc/sys/vm/dirty_bytes")?.trim().parse().ok()?;
    let threshold = if bytes > 0 {
        bytes
    } else {
        let ratio: u64 = read("/proc/sys/vm/dirty_ratio")?.trim().parse().ok()?;
        let meminfo = read("/proc/meminfo")?;
        let kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        kib * 1024 / 100 * ratio
    };
    let share = if applied { u64::from(max_ratio) } else { 1 };
    Some(threshold / 100 * share)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_dirty_bound_is_a_share_of_the_threshold() {
        // This machine's procfs: the bound exists, the strict 1 % is a hundredth of the
        // whole, and neither exceeds all memory.
        let whole = super::dirty_bound(100, true).expect("procfs readable");
        let strict = super::dirty_bound(100, false).unwrap();
        assert_eq!(super::dirty_bound(1, true), Some(strict));
        assert!(
            strict > 0 && strict <= whole / 100 + 1,
            "{strict} of {whole}"
        );
        let mem = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert!(mem.contains("MemTotal:"));
    }
}
