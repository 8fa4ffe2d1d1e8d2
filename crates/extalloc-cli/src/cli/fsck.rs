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
use std::sync::atomic::{AtomicU64, Ordering};

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
                Some(extalloc::Error::Corrupt { .. } | extalloc::Error::JournalDamaged { .. })
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
    let shown = AtomicU64::new(0);
    let progress = |p: extalloc::volume::ScanProgress| {
        scan_progress(path, p, &shown);
    };
    let report =
        extalloc_fuse::repair::repair_reporting(dev, extalloc::Policy::default(), &progress)
            .map_err(|e| Damage(format!("{}: {e}", path.display())))?;
    Ok(report.changes())
}

/// A line on stderr each time the repair's scan of the device for the file tree's leaves
/// passes another tenth of what it reads (`shown`: the tenths said so far). The scan runs
/// only when the tree lost a node, and reads the used part of the device: ten lines are
/// worth it even when it is short.
fn scan_progress(path: &Path, p: extalloc::volume::ScanProgress, shown: &AtomicU64) {
    let tenths = (p.blocks_read * 10 / p.blocks_to_read.max(1)).min(10);
    if tenths > shown.swap(tenths, Ordering::Relaxed) {
        eprintln!(
            "{}: scanning the device for the file tree's leaves: {} % ({} of {} blocks)",
            path.display(),
            tenths * 10,
            p.blocks_read,
            p.blocks_to_read
        );
    }
}
