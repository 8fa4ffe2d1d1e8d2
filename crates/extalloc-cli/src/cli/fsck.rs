//! `extalloc fsck`: the read-only check (the store's checks, the volume's ownership check,
//! the file system's namespace check) and, with `--repair`, the repair of
//! `extalloc_fuse::repair` followed by the check again. Exit codes are e2fsck's.
//!
//! Data structures: the JSON shapes `fsck --json` prints. Invariant: without `--repair`
//! nothing is written (the device is opened read-only, under a view whose writes stay in
//! memory); with it, the device is opened exclusively. Locks: none of its own.

use anyhow::{Context, Result};
use extalloc::disk::device::FileDevice;
use std::path::Path;
use std::sync::Mutex;

/// What `fsck --json` prints: the store's report and, on a volume, the files' check.
#[derive(serde::Serialize)]
struct FsckJson<'a> {
    #[serde(flatten)]
    store: &'a extalloc::store::fsck::Report,
    files: Option<&'a extalloc::volume::VolumeCheck>,
    /// A file system's namespace (`extalloc mount`), when the volume holds one.
    namespace: Option<NamespaceJson<'a>>,
    /// With `--repair`: what the repair changed, one line each (the checks above ran
    /// after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    repaired: Option<&'a [String]>,
}

/// The namespace check as `fsck --json` prints it.
#[derive(serde::Serialize)]
struct NamespaceJson<'a> {
    dirs: u64,
    files: u64,
    symlinks: u64,
    others: u64,
    orphans: &'a [u64],
    damaged_inodes: &'a [u64],
    unnamed: &'a [u64],
    bad_entries: &'a [String],
    link_counts: &'a [String],
    logs: &'a [String],
    clean: bool,
}

impl<'a> NamespaceJson<'a> {
    fn of(n: &'a extalloc_fuse::fs::NamespaceReport) -> Self {
        NamespaceJson {
            dirs: n.dirs,
            files: n.files,
            symlinks: n.symlinks,
            others: n.others,
            orphans: &n.orphans,
            damaged_inodes: &n.damaged_inodes,
            unnamed: &n.unnamed,
            bad_entries: &n.bad_entries,
            link_counts: &n.link_counts,
            logs: &n.logs,
            clean: n.clean(),
        }
    }
}

/// e2fsck's exit codes that `fsck` uses: nothing wrong.
pub const FSCK_CLEAN: i32 = 0;
/// `--repair` fixed problems, and the check after it is clean.
pub const FSCK_FIXED: i32 = 1;
/// Problems found and left as they are.
pub const FSCK_UNCORRECTED: i32 = 4;
/// An operational error: no such file, the device in use, not an extalloc device, I/O.
pub const FSCK_OPERATIONAL: i32 = 8;

/// Problems `fsck` found on the device (exit [`FSCK_UNCORRECTED`]).
#[derive(Debug)]
struct Damage(String);

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damage {}

/// `extalloc fsck`: prints the report (or the error) and returns the exit code, e2fsck's:
/// [`FSCK_CLEAN`], [`FSCK_UNCORRECTED`] (problems found, or a device too damaged to read:
/// no superblock copy or a journal damaged in the middle), [`FSCK_OPERATIONAL`] (anything
/// else that stopped the check), so scripts can tell damage from a device they could not
/// check.
pub fn fsck(path: &Path, json: bool) -> i32 {
    match fsck_checked(path, json, None) {
        Ok(()) => {
            if !json {
                // One word to end on, as the error line ends a check that found problems.
                println!("{}: clean", path.display());
            }
            FSCK_CLEAN
        }
        Err(e) => {
            eprintln!("error: {}", super::output::error_text(&e));
            fsck_code(&e)
        }
    }
}

/// The exit code of a failed check: damage found or met, or an operational error.
fn fsck_code(e: &anyhow::Error) -> i32 {
    let damaged = e.chain().any(|c| {
        c.is::<Damage>()
            || matches!(
                c.downcast_ref::<extalloc::Error>(),
                Some(
                    extalloc::Error::Corrupt { .. }
                        | extalloc::Error::JournalDamaged { .. }
                        | extalloc::Error::JournalLossUnrepaired
                )
            )
    });
    if damaged {
        FSCK_UNCORRECTED
    } else {
        FSCK_OPERATIONAL
    }
}

/// The check itself: `Err` with [`Damage`] when it found problems.
fn fsck_checked(path: &Path, json: bool, repaired: Option<&[String]>) -> Result<()> {
    let dev = super::mount::open_read_only(path)?;
    let r = extalloc::store::fsck::check(&dev).with_context(|| format!("{}", path.display()))?;
    drop(dev);
    // The files only on a store that opens: its own problems come first.
    let (files, names) = match r.clean().then(|| super::volume::check(path)).transpose()? {
        Some(Some((f, vol))) => {
            let names = if f.clean() {
                super::mount::check_namespace(&vol).map_err(|e| Damage(e.to_string()))?
            } else {
                None
            };
            (Some(f), names)
        }
        _ => (None, None),
    };
    if json {
        let out = FsckJson {
            store: &r,
            files: files.as_ref(),
            namespace: names.as_ref().map(NamespaceJson::of),
            repaired,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_fsck(path, &r, files.as_ref());
        if let Some(n) = &names {
            super::mount::print_namespace(n);
        }
    }
    if !r.clean() {
        return Err(Damage(format!("{} problems found", r.problems.len())).into());
    }
    if let Some(f) = files.as_ref().filter(|f| !f.clean()) {
        return Err(Damage(format!(
            "the files' check failed: {} mapped blocks free, {} mapped twice, {} leaked, {} \
             groups held corrupt",
            f.mapped_free, f.mapped_twice, f.leaked, f.corrupt_groups
        ))
        .into());
    }
    if let Some(n) = names.as_ref().filter(|n| !n.clean()) {
        let summary = n.summary();
        return Err(Damage(format!("the file system's check failed: {summary}")).into());
    }
    Ok(())
}

/// `fsck`'s text report of the store and the files.
fn print_fsck(
    path: &Path,
    r: &extalloc::store::fsck::Report,
    files: Option<&extalloc::volume::VolumeCheck>,
) {
    println!(
        "{}: {} blocks, {}, {} free; superblocks: primary {}, backup {}; \
         journal: {} to replay{}",
        path.display(),
        r.blocks,
        super::output::counted(r.groups, "group"),
        r.free_blocks,
        if r.primary_superblock_ok {
            "ok"
        } else {
            "DAMAGED"
        },
        if r.backup_superblock_ok {
            "ok"
        } else {
            "DAMAGED"
        },
        super::output::counted(r.journal_records, "record"),
        if r.checkpoint_interrupted {
            " (a checkpoint was interrupted: open repairs it)"
        } else {
            ""
        }
    );
    if r.in_use {
        println!(
            "marked in use by {} (open elsewhere, or its owner crashed: a read-write open \
             takes a stale mark over and recovers)",
            r.owner
                .as_deref()
                .unwrap_or("an owner with no readable record")
        );
    }
    for p in &r.problems {
        println!("problem: {p}");
    }
    if let Some(f) = files {
        println!(
            "files: {} files, {} extents, {} blocks mapped ({} unwritten); {} mapped \
             blocks free, {} mapped twice, {} leaked, {} groups held corrupt",
            f.files,
            f.extents,
            f.blocks_mapped,
            f.blocks_unwritten,
            f.mapped_free,
            f.mapped_twice,
            f.leaked,
            f.corrupt_groups
        );
    }
}

/// `extalloc fsck --repair`: repairs the file system on `path` (`extalloc_fuse::repair`:
/// bitmaps and descriptors from the owners, damaged inodes, names into /lost+found, link
/// counts), prints every change, then checks the device again. Exit codes: [`FSCK_CLEAN`]
/// (nothing to change), [`FSCK_FIXED`] (changed, and the check after is clean),
/// [`FSCK_UNCORRECTED`] (damage the repair could not fix: the check after says what),
/// [`FSCK_OPERATIONAL`] (not opened: in use, not a file system, I/O).
pub fn fsck_repair(path: &Path, json: bool) -> i32 {
    let changes = match repair(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", super::output::error_text(&e));
            return fsck_code(&e);
        }
    };
    if !json {
        for c in &changes {
            println!("repaired: {c}");
        }
    }
    match fsck_checked(path, json, Some(&changes)) {
        Ok(()) if changes.is_empty() => FSCK_CLEAN,
        Ok(()) => FSCK_FIXED,
        Err(e) => {
            eprintln!("error: left unrepaired: {}", super::output::error_text(&e));
            fsck_code(&e)
        }
    }
}

/// The repair itself: the changes it made, in words.
fn repair(path: &Path) -> Result<Vec<String>> {
    let dev = FileDevice::open(path).with_context(|| format!("{}", path.display()))?;
    let sb = extalloc::disk::format::read_superblock(&dev)
        .with_context(|| format!("{}", path.display()))?;
    anyhow::ensure!(
        !sb.root.is_empty(),
        "{}: the device holds a store but no volume; `fsck --repair` repairs a volume's \
         file system (`extalloc fsck` checks a bare store)",
        path.display()
    );
    let dev: std::sync::Arc<dyn extalloc::disk::device::Device> = std::sync::Arc::new(dev);
    let shown = Mutex::new(Shown::default());
    let progress = |p: extalloc::volume::ScanProgress| {
        let lines = progress_lines(&mut shown.lock().expect("not poisoned"), p);
        for line in lines {
            eprintln!("{}: {line}", path.display());
        }
    };
    let report =
        extalloc_fuse::repair::repair_reporting(dev, extalloc::Policy::default(), &progress)
            .map_err(|e| Damage(format!("{}: {e}", path.display())))?;
    Ok(report.changes())
}

/// What the repair's scan progress has said so far: the tenths of `total` blocks, and the
/// blocks read at the last report.
#[derive(Debug, Default)]
struct Shown {
    tenths: u64,
    total: u64,
    read: u64,
}

/// The lines to print for the scan's `p` (each time it passes another tenth of what it
/// reads; when its total grows, because the used blocks left entries missing and the
/// others are read too, a line that says so, and the tenths count again from there; when
/// a scan starts again, as the page path's repair does after its look, a line that says
/// so, and the tenths from 0). The scan runs only when the tree lost a node, and reads
/// the used part of the device: ten lines are worth it even when it is short.
fn progress_lines(shown: &mut Shown, p: extalloc::volume::ScanProgress) -> Vec<String> {
    let mut out = Vec::new();
    // Within a scan each report has read more than the last.
    if shown.read > 0 && p.blocks_read <= shown.read {
        out.push(
            "scanning again, to repair (the scan before wrote nothing; of the blocks it read, \
             only the nodes it found and the blocks that did not read are read again)"
                .into(),
        );
        *shown = Shown::default();
    }
    shown.read = p.blocks_read;
    if shown.total != 0 && p.blocks_to_read > shown.total {
        out.push(format!(
            "the used blocks left entries missing: scanning the others too ({} more blocks)",
            p.blocks_to_read - shown.total
        ));
    }
    if p.blocks_to_read != shown.total {
        // A scan's first report counts from 0; a grown total from where the scan stands.
        shown.tenths = match shown.total {
            0 => 0,
            _ => p.blocks_read * 10 / p.blocks_to_read.max(1),
        };
        shown.total = p.blocks_to_read;
    }
    let tenths = (p.blocks_read * 10 / p.blocks_to_read.max(1)).min(10);
    if tenths > shown.tenths {
        shown.tenths = tenths;
        out.push(format!(
            "scanning the device for the file tree's nodes: {} % ({} of {} blocks)",
            tenths * 10,
            p.blocks_read,
            p.blocks_to_read
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use extalloc::volume::ScanProgress;

    /// A scan of three groups' worth of used blocks, then of the rest too: a line per
    /// tenth of the first total, one saying the total grew, then the tenths of the new
    /// total from where the scan stands, never going back; a second scan (the page path's
    /// repair after its look) says it starts again and counts from 0.
    #[test]
    fn the_scans_progress_lines_never_go_back() {
        let mut shown = Shown::default();
        let mut lines = Vec::new();
        let (used, all) = (3 * 32768u64, 8 * 32768u64);
        for read in (256..=all).step_by(256) {
            let to_read = if read <= used { used } else { all };
            let p = ScanProgress {
                blocks_read: read,
                blocks_to_read: to_read,
            };
            lines.extend(progress_lines(&mut shown, p));
        }
        let percents: Vec<u64> = lines
            .iter()
            .filter_map(|l| l.split(": ").nth(1)?.split(' ').next()?.parse().ok())
            .collect();
        let grew = lines
            .iter()
            .position(|l| l.contains("scanning the others too"))
            .unwrap();
        assert_eq!(grew, 10, "{lines:#?}");
        assert!(
            lines[grew].contains("(163840 more blocks)"),
            "{}",
            lines[grew]
        );
        assert_eq!(&percents[..10], &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
        assert_eq!(
            &percents[10..],
            &[40, 50, 60, 70, 80, 90, 100],
            "{lines:#?}"
        );
        assert!(lines
            .last()
            .unwrap()
            .ends_with("100 % (262144 of 262144 blocks)"));
        // The repair's own scan after the look's.
        let mut again = Vec::new();
        for read in (256..=used).step_by(256) {
            let p = ScanProgress {
                blocks_read: read,
                blocks_to_read: used,
            };
            again.extend(progress_lines(&mut shown, p));
        }
        assert!(
            again[0].starts_with("scanning again, to repair"),
            "{again:#?}"
        );
        assert_eq!(again.len(), 11, "{again:#?}");
        assert!(again[10].ends_with("100 % (98304 of 98304 blocks)"));
        // Scans of one report each (a small device): each says how far it went.
        let mut shown = Shown::default();
        let one = ScanProgress {
            blocks_read: 200,
            blocks_to_read: 200,
        };
        let first = progress_lines(&mut shown, one);
        let second = progress_lines(&mut shown, one);
        assert_eq!(first.len(), 1, "{first:#?}");
        assert_eq!(second.len(), 2, "{second:#?}");
    }
}
