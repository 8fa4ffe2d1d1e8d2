//! What every step of the damage campaign shares: the metadata kinds a damage lands in
//! ([`MetaKind`]), the caller every file system call is made as ([`ME`]) and the
//! writeback options of every mount ([`opts`]). `mod.rs` and its children import them
//! from here.
//!
//! Data structures: [`MetaKind`], a plain enum. Invariant: [`MetaKind::name`] gives each
//! kind its own name (the key of its counts). Lock order: none (plain values).

use extalloc::writeback::WritebackOptions;
use extalloc_fuse::fs::Caller;

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
    MapSegments,
    JournalRecords,
    DirLogs,
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
            MetaKind::MapSegments => "map_segments",
            MetaKind::JournalRecords => "journal_records",
            MetaKind::DirLogs => "dir_logs",
            MetaKind::SymlinkTargets => "symlink_targets",
        }
    }
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
