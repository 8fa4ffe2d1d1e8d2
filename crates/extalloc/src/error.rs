//! The one error type of the library.
//!
//! Every public operation returns `Result<T, Error>`. What a call that fails leaves depends
//! on its layer:
//!
//! - The allocator core (`alloc/`, `groups/`) and the file layer (`files/`) validate the
//!   whole request before they touch any state: a refused call changes nothing. A call that
//!   finds no space changes nothing but what a remedy did before it gave up (pending frees
//!   committed by a caller that owns the commits, preallocations discarded:
//!   `docs/architecture.md`, "No space").
//! - The store (`store/`) refuses a bad request, a free of metadata or a transaction too
//!   large for the journal without changing anything. With forced commits on, a call may
//!   have committed the open transaction before it fails. A commit that fails at the flush,
//!   after its record was appended, leaves that record in the journal (it may survive a
//!   crash or not) and the transaction's frees pending.
//! - The volume (`volume/`) and its buffered writes (`writeback/`) work a chunk (or a
//!   piece) at a time: the chunk that fails gives back what it mapped, but the chunks
//!   before it stay done, so a failed `write`, `fallocate`, `truncate` or `unlink` can leave
//!   part of its work (a file written in part, a range allocated in part). Each of their
//!   public calls says in its doc what it leaves when it fails.

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
        /// First block of the extent (the goal block, for a goal).
        start: u64,
        /// Length of the extent in blocks (1 for a goal).
        len: u64,
        /// Blocks on the device: valid block numbers are `0 .. device_blocks`.
        device_blocks: u64,
    },

    /// A free of blocks that are already waiting to be freed by the next commit.
    #[error("double free: blocks of extent {start}+{len} are already freed and wait for the next commit")]
    DoubleFree {
        /// First block of the refused piece: the part of the freed extent inside one group.
        start: u64,
        /// Length of that piece in blocks.
        len: u64,
    },

    /// A free of the device's own metadata (superblock, journal, descriptors, bitmaps, the
    /// backup superblock), which no caller owns.
    #[error(
        "extent {start}+{len} holds the device's metadata (blocks 0..{metadata_end} and the \
         backup superblock at {backup_block}): it is never freed"
    )]
    MetadataBlocks {
        /// First block of the extent the caller tried to free.
        start: u64,
        /// Length of that extent in blocks.
        len: u64,
        /// End of the metadata at the front of the device: blocks `0 .. metadata_end`.
        metadata_end: u64,
        /// The backup superblock's block (the device's last).
        backup_block: u64,
    },

    /// A free of blocks that are not allocated (never were, or were freed and committed).
    #[error("free of unallocated blocks: extent {start}+{len} contains blocks that are free")]
    NotAllocated {
        /// First block of the refused piece: the part of the freed extent inside one group.
        start: u64,
        /// Length of that piece in blocks.
        len: u64,
    },

    /// No free extent of at least `min_len` blocks exists. `pending_blocks` wait for a
    /// commit and `reserved_blocks` are held by preallocations: the layer owning each
    /// remedy (the commits' owner, the file layer) may apply it and retry.
    #[error("no space: {requested} blocks requested (at least {min_len}), {free_blocks} free, none in a run of {min_len}; {pending_blocks} wait for a commit, {reserved_blocks} are reserved by preallocations")]
    NoSpace {
        /// Blocks the request asked for (its `len`).
        requested: u64,
        /// Fewest blocks the request accepted.
        min_len: u64,
        /// Free blocks on the device, not counting those waiting for a commit.
        free_blocks: u64,
        /// Blocks freed and waiting for a commit to become reusable.
        pending_blocks: u64,
        /// Blocks reserved by preallocations and not handed out.
        reserved_blocks: u64,
    },

    /// A hint outside the values it can take.
    #[error("hint {value} is out of range; valid values: {valid}")]
    InvalidHint {
        /// The value given.
        value: u64,
        /// The values the hint takes, with their meanings.
        valid: &'static str,
    },

    /// A data request for logical blocks the file already has.
    #[error(
        "logical blocks {logical}+{len} of file {file} are already allocated: allocate only holes"
    )]
    LogicalOverlap {
        /// The file's id.
        file: u64,
        /// First logical block of the request.
        logical: u64,
        /// Blocks the request asked for.
        len: u64,
    },

    /// A request whose fields contradict each other.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// A volume call named a file the volume does not hold (never created, or unlinked).
    #[error(
        "no file {id} on the volume (never created, or unlinked): `extalloc ls` lists the files"
    )]
    NoSuchFile {
        /// The id asked for.
        id: u64,
    },

    /// Writing back a file's cached data failed (buffered writes, `crate::writeback`): the
    /// data stays cached and dirty, and the next writeback tries again.
    #[error("writeback of file {id} failed (its data stays cached): {source}")]
    Writeback {
        /// The file whose data could not be written back.
        id: u64,
        /// What the volume reported.
        source: Box<Error>,
    },

    /// A geometry the allocator cannot serve.
    #[error("invalid geometry: {0}")]
    InvalidGeometry(String),

    /// A policy spec named a key that does not exist.
    #[error("unknown policy key '{key}'; valid keys: {valid}")]
    UnknownPolicyKey {
        /// The key as given.
        key: String,
        /// Every valid key, comma-separated.
        valid: String,
    },

    /// A policy spec started with a name that is not a preset.
    #[error("unknown policy preset '{name}'; valid presets: {valid}")]
    UnknownPreset {
        /// The name as given.
        name: String,
        /// Every preset name (`PRESETS`), comma-separated.
        valid: String,
    },

    /// A policy key was given a value it cannot take.
    #[error("invalid value '{value}' for policy key '{key}': expected {expected}")]
    InvalidPolicyValue {
        /// The key (the whole part, for a part without `=`).
        key: String,
        /// The value as given (empty for a part without `=`).
        value: String,
        /// What the key takes (`key=value`, for a part without `=`).
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
    Corrupt {
        /// The structure that failed: "superblock", "descriptor of group 3", "group 3", ...
        what: String,
        /// What is wrong with it.
        detail: String,
    },

    /// Made by another version of extalloc (format versions are not upgraded before 1.0).
    #[error(
        "on-disk format version {found}: this extalloc reads version {supported} only \
         (make the device again with this version's mkfs)"
    )]
    UnsupportedVersion {
        /// The version the superblock records.
        found: u32,
        /// The only version this build reads and writes.
        supported: u32,
    },

    /// The device is smaller than its superblock says (or, for `mkfs`, than the geometry).
    #[error("device has {size} bytes but its superblock describes {needed}")]
    DeviceTooSmall {
        /// Bytes described: `blocks_count * block_size`.
        needed: u64,
        /// Bytes the device has.
        size: u64,
    },

    /// The journal is damaged in the middle: committed records after the damage would be
    /// lost by a replay that stops at it.
    #[error(
        "journal damaged at byte {offset} of the device: record {lost_seq} is unreadable but \
         {stranded} later committed records follow it; opening would lose them and hand out \
         blocks they own. Run `extalloc fsck`; Store::open_accepting_journal_loss opens \
         anyway, holding the groups they touch out of use"
    )]
    JournalDamaged {
        /// Sequence number of the record that cannot be read.
        lost_seq: u64,
        /// Byte offset on the device where replay stopped (where that record should be).
        offset: u64,
        /// Intact committed records after the damage, which a replay would lose.
        stranded: u64,
    },

    /// The journal has no room for a record until a checkpoint moves its tail.
    /// `Store::commit` checkpoints and appends again by itself; a direct journal writer
    /// checkpoints and retries.
    #[error("journal full: {needed} bytes needed; checkpoint to move the tail")]
    JournalFull {
        /// Bytes of the record that did not fit.
        needed: u64,
    },

    /// A device access outside the device.
    #[error("device access {offset}+{len} bytes is past the device's {size} bytes")]
    DeviceRange {
        /// Byte offset of the access.
        offset: u64,
        /// Bytes accessed.
        len: u64,
        /// The device's size in bytes.
        size: u64,
    },

    /// The device is open elsewhere (this process or another): a writer excludes every
    /// other open, a reader excludes writers.
    #[error(
        "device {device} is in use (open elsewhere, in this process or another; one writer \
         or any number of readers at a time): cannot open it to {wanted}; close the other \
         user first"
    )]
    DeviceBusy {
        /// The device's path.
        device: String,
        /// What the refused open was for: "write" or "read".
        wanted: &'static str,
    },

    /// The device's owner record (`docs/format.md`) names a live owner: a store has it open
    /// read-write, in this process, another one, another namespace or on another machine.
    #[error(
        "device {device} is in use by {owner} ({why}): close it there first (an owner that \
         is gone is taken over at the next open: at once on its own machine, after its \
         heartbeat has stood still for two intervals and a second elsewhere)"
    )]
    DeviceInUse {
        /// The device's name (its path, for a device that has one).
        device: String,
        /// Who holds it, from its owner record: host, boot id, pid, heartbeat.
        owner: String,
        /// How the owner was found live.
        why: String,
    },

    /// The device failed an operation: which device (its path), what, where, and the
    /// operating system's error as the source.
    #[error("device {device}: {op} at byte {offset} failed: {source}")]
    Io {
        /// The device's path (a description, for a device without one).
        device: String,
        /// The operation that failed: "open", "read", "write", "flush", ...
        op: &'static str,
        /// Byte offset of the operation on the device (0 for one without an offset; the
        /// new size for `set_len`).
        offset: u64,
        /// The operating system's error.
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
    TransactionTooLarge {
        /// Bytes the record would take.
        bytes: u64,
        /// The largest record the journal holds.
        max: u64,
    },

    /// A multi-step change of the volume ([`crate::volume::Volume::atomic`]) stopped half
    /// made: the volume commits nothing more, so the half change never becomes durable.
    #[error(
        "the volume stopped committing: a change that must be durable whole was left half \
         made ({reason}); nothing since the last commit will be written: close the volume \
         and open it again (recovery keeps every committed change)"
    )]
    Aborted {
        /// What failed in the middle of the change.
        reason: String,
    },
}

/// The `std::io::Error` behind an [`Error::Io`], shared so that errors stay `Clone`;
/// compared by kind and text.
#[derive(Debug, Clone)]
pub struct IoSource(pub std::sync::Arc<std::io::Error>);

impl IoSource {
    /// Wraps `e` for an [`Error::Io`].
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
