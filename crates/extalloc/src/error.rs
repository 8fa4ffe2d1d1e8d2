//! The one error type of the library.
//!
//! Every public operation returns `Result<T, Error>`. A call that fails changes nothing: the
//! allocator validates the whole request before it touches any state.

use thiserror::Error;

/// Everything that can go wrong when calling into extalloc.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// A request or extent of zero blocks.
    #[error("zero-length extent or request: lengths are counted in blocks and must be at least 1")]
    ZeroLength,

    /// An extent or goal that does not lie inside the device.
    #[error("extent {start}+{len} is out of range: the device has {device_blocks} blocks (0..{device_blocks})")]
    OutOfRange {
        start: u64,
        len: u64,
        device_blocks: u64,
    },

    /// A free of blocks that are already waiting to be freed by the next commit.
    #[error("double free: blocks of extent {start}+{len} are already freed and wait for the next commit")]
    DoubleFree { start: u64, len: u64 },

    /// A free of the device's own metadata (superblock, journal, descriptors, bitmaps, the
    /// backup superblock), which no caller owns.
    #[error(
        "extent {start}+{len} holds the device's metadata (blocks 0..{metadata_end} and the \
         backup superblock at {backup_block}): it is never freed"
    )]
    MetadataBlocks {
        start: u64,
        len: u64,
        metadata_end: u64,
        backup_block: u64,
    },

    /// A free of blocks that are not allocated (never were, or were freed and committed).
    #[error("free of unallocated blocks: extent {start}+{len} contains blocks that are free")]
    NotAllocated { start: u64, len: u64 },

    /// No free extent of at least `min_len` blocks exists. `pending_blocks` wait for a
    /// commit and `reserved_blocks` are held by preallocations: the layer owning each
    /// remedy (the commits' owner, the file layer) may apply it and retry.
    #[error("no space: {requested} blocks requested (at least {min_len}), {free_blocks} free, none in a run of {min_len}; {pending_blocks} wait for a commit, {reserved_blocks} are reserved by preallocations")]
    NoSpace {
        requested: u64,
        min_len: u64,
        free_blocks: u64,
        pending_blocks: u64,
        reserved_blocks: u64,
    },

    /// A hint outside the values it can take.
    #[error("hint {value} is out of range; valid values: {valid}")]
    InvalidHint { value: u64, valid: &'static str },

    /// A data request for logical blocks the file already has.
    #[error(
        "logical blocks {logical}+{len} of file {file} are already allocated: allocate only holes"
    )]
    LogicalOverlap { file: u64, logical: u64, len: u64 },

    /// A request whose fields contradict each other.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// A geometry the allocator cannot serve.
    #[error("invalid geometry: {0}")]
    InvalidGeometry(String),

    /// A policy spec named a key that does not exist.
    #[error("unknown policy key '{key}'; valid keys: {valid}")]
    UnknownPolicyKey { key: String, valid: String },

    /// A policy spec started with a name that is not a preset.
    #[error("unknown policy preset '{name}'; valid presets: {valid}")]
    UnknownPreset { name: String, valid: String },

    /// A policy key was given a value it cannot take.
    #[error("invalid value '{value}' for policy key '{key}': expected {expected}")]
    InvalidPolicyValue {
        key: String,
        value: String,
        expected: String,
    },

    /// `check()` found cached state that disagrees with what it was computed from.
    #[error("invariant violated: {0}")]
    Invariant(String),

    /// The device does not hold an extalloc file system (no magic in either superblock).
    #[error("not an extalloc device: {0}")]
    NotExtalloc(String),

    /// On-disk metadata that fails its checksum or says something impossible.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: String, detail: String },

    /// Made by another version of extalloc (format versions are not upgraded before 1.0).
    #[error(
        "on-disk format version {found}: this extalloc reads version {supported} only \
         (make the device again with this version's mkfs)"
    )]
    UnsupportedVersion { found: u32, supported: u32 },

    /// The device is smaller than its superblock says.
    #[error("device has {size} bytes but its superblock describes {needed}")]
    DeviceTooSmall { needed: u64, size: u64 },

    /// The journal is damaged in the middle: committed records after the damage would be
    /// lost by a replay that stops at it.
    #[error(
        "journal damaged at byte {offset} of the device: record {lost_seq} is unreadable but \
         {stranded} later committed records follow it; opening would lose them and hand out \
         blocks they own. Run `extalloc fsck`; Store::open_accepting_journal_loss opens \
         anyway, holding the groups they touch out of use"
    )]
    JournalDamaged {
        lost_seq: u64,
        offset: u64,
        stranded: u64,
    },

    /// The journal has no room for a record until a checkpoint moves its tail.
    #[error("journal full: {needed} bytes needed; checkpoint to move the tail")]
    JournalFull { needed: u64 },

    /// A device access outside the device.
    #[error("device access {offset}+{len} bytes is past the device's {size} bytes")]
    DeviceRange { offset: u64, len: u64, size: u64 },

    /// The device is open elsewhere (this process or another): a writer excludes every
    /// other open, a reader excludes writers.
    #[error(
        "device {device} is in use (open elsewhere, in this process or another; one writer \
         or any number of readers at a time): cannot open it to {wanted}; close the other \
         user first"
    )]
    DeviceBusy {
        device: String,
        wanted: &'static str,
    },

    /// The device failed an operation: which device (its path), what, where, and the
    /// operating system's error as the source.
    #[error("device {device}: {op} at byte {offset} failed: {source}")]
    Io {
        device: String,
        op: &'static str,
        offset: u64,
        #[source]
        source: IoSource,
    },

    /// The open transaction's record would exceed the largest record the journal holds
    /// (`Store::max_transaction_bytes`): the operation is refused and changes nothing.
    #[error(
        "transaction too large: its journal record would take {bytes} bytes, the journal \
         holds records of at most {max}; commit the open transaction first (or a smaller \
         payload), or make the device with a larger journal"
    )]
    TransactionTooLarge { bytes: u64, max: u64 },
}

/// The `std::io::Error` behind an [`Error::Io`], shared so that errors stay `Clone`;
/// compared by kind and text.
#[derive(Debug, Clone)]
pub struct IoSource(pub std::sync::Arc<std::io::Error>);

impl IoSource {
    pub fn new(e: std::io::Error) -> Self {
        IoSource(std::sync::Arc::new(e))
    }

    /// The kind of the operating system's error.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.0.kind()
    }
}

impl std::fmt::Display for IoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

impl PartialEq for IoSource {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoSource {}

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
