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
//! Data structures: none (the sysfs files). Invariant: only this mount's own bdi is written.
//! Lock order: none.

use std::path::PathBuf;

/// Sets the writeback limits of the bdi of device `(major, minor)`: `max_ratio` percent of
/// the dirty threshold, with the strict limit off unless `max_ratio` is 1 (FUSE's own
/// setting, kept as it is). An error says which file could not be written (not root, or a
/// kernel without the knob); the mount goes on with the kernel's limits then.
pub fn set_dirty_ratio(dev: (u32, u32), max_ratio: u32) -> Result<(), String> {
    assert!((1..=100).contains(&max_ratio), "a ratio is a percentage");
    let dir = PathBuf::from(format!("/sys/class/bdi/{}:{}", dev.0, dev.1));
    let write = |name: &str, value: u32| {
        let p = dir.join(name);
        std::fs::write(&p, value.to_string()).map_err(|e| format!("{}: {e}", p.display()))
    };
    if max_ratio == 1 {
        return Ok(());
    }
    // The ratio first: with the strict limit off, a 1 % ratio would still bound the bdi.
    write("max_ratio", max_ratio)?;
    write("strict_limit", 0)
}
