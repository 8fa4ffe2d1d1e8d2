//! What every step of the damage campaign shares: the metadata kinds a damage lands in
//! ([`MetaKind`]), the caller every file system call is made as ([`ME`]), the volume
//! made from a seed ([`seeded_mkfs`]), the writeback options of every mount ([`opts`])
//! and where a directory's log holds its run ([`runs_in`]). `mod.rs` and its children import them from here.
//!
//! Data structures: [`MetaKind`], a plain enum. Invariant: [`MetaKind::name`] gives each
//! kind its own name (the key of its counts). Lock order: none (plain values).

use anyhow::Result;
use extalloc::disk::device::Device;
use extalloc::disk::format;
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use extalloc::{Geometry, Policy};
use extalloc_fuse::dir::run::{self, CHUNK};
use extalloc_fuse::fs::Caller;
use std::ops::Range;
use std::sync::Arc;

/// Who makes every call.
pub(super) const ME: Caller = Caller { uid: 0, gid: 0 };

/// The metadata kinds a damage lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum MetaKind {
    PrimarySuperblock,
    BackupSuperblock,
    Descriptors,
    Bitmaps,
    FileTable,
    /// The file tree's internal nodes, its root among them (the leaves are `FileTable`'s).
    TreeNodes,
    MapSegments,
    JournalRecords,
    DirLogs,
    /// A directory log's blocks that hold its run (header, entry, index, filter chunks).
    DirRuns,
    SymlinkTargets,
}

impl MetaKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            MetaKind::PrimarySuperblock => "primary_superblock",
            MetaKind::BackupSuperblock => "backup_superblock",
            MetaKind::Descriptors => "descriptors",
            MetaKind::Bitmaps => "bitmaps",
            MetaKind::FileTable => "file_table",
            MetaKind::TreeNodes => "tree_nodes",
            MetaKind::MapSegments => "map_segments",
            MetaKind::JournalRecords => "journal_records",
            MetaKind::DirLogs => "dir_logs",
            MetaKind::DirRuns => "dir_runs",
            MetaKind::SymlinkTargets => "symlink_targets",
        }
    }
}

/// A volume made on `dev` whose uuid (and so its tree's stamp, `docs/format.md`, "Stamp")
/// follows from `seed`, so that an image's bytes do too.
pub(super) fn seeded_mkfs(
    dev: Arc<dyn Device>,
    (geometry, journal_blocks): (&Geometry, u64),
    seed: u64,
) -> Result<Volume> {
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&seed.to_le_bytes());
    uuid[8..].copy_from_slice(&(!seed).to_le_bytes());
    format::mkfs(dev.as_ref(), geometry, journal_blocks, uuid)?;
    Ok(Volume::format(dev, Policy::default())?)
}

/// The writeback of every mount here: one context, no background writeback (the build
/// is reproducible from its seed).
pub(super) fn opts() -> WritebackOptions {
    WritebackOptions {
        contexts: 1,
        dirty_limit_bytes: 64 << 20,
        ..WritebackOptions::default()
    }
}

/// The runs directory `ino`'s log holds, as byte ranges of its file (`docs/format.md`,
/// "Directory runs"): each block boundary where a run's header and its index and filter
/// chunks check. A compaction punches the log before its run, so the file holds the
/// live runs only (one, or none).
pub(super) fn runs_in(vol: &Volume, ino: u64) -> Result<Vec<Range<u64>>> {
    let size = vol.size(ino)?;
    let log = vol.read(ino, 0, size)?;
    let mut read = |at: u64, len: u64| -> Result<Vec<u8>, String> {
        let end = (at + len).min(log.len() as u64);
        let mut out = log[at.min(end) as usize..end as usize].to_vec();
        out.resize(len as usize, 0);
        Ok(out)
    };
    let mut runs = Vec::new();
    let mut at = 0;
    while at < size {
        match run::Index::open(&mut read, at) {
            Ok(Some(index)) => {
                let end = at + index.shape.bytes();
                runs.push(at..end);
                at = end.next_multiple_of(CHUNK as u64);
            }
            Ok(None) | Err(_) => at += CHUNK as u64,
        }
    }
    Ok(runs)
}
