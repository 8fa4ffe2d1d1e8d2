//! [`Error`]: the one error enum of the library, a variant per cause with the values
//! involved. Its kind ([`Error::kind`], `kind.rs`) maps it to a remedy and an errno;
//! `source.rs` holds the operating system errors it carries.

use super::corrupted::Corrupted;
use super::message::no_space_head;
use super::source::IoSource;
use thiserror::Error;

/// Everything that can go wrong when calling into extalloc.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
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
    #[error("extent {start}+{len} holds the device's metadata (blocks 0..{metadata_end} and the backup superblock at {backup_block}): it is never freed")]
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
    #[error("no space: {}; {pending_blocks} wait for a commit, {reserved_blocks} are reserved (preallocations, or cached data not yet placed)", no_space_head(*requested, *min_len, *free_blocks))]
    NoSpace {
        /// Blocks the request asked for (its `len`).
        requested: u64,
        /// Fewest blocks the request accepted.
        min_len: u64,
        /// Free blocks on the device, not counting those waiting for a commit.
        free_blocks: u64,
        /// Blocks freed and waiting for a commit to become reusable.
        pending_blocks: u64,
        /// Blocks reserved and not handed out: by preallocations (the allocator's
        /// refusals), or for cached data not yet placed (the volume's space checks).
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

    /// A request for one extent longer than a group: an extent lies in one group.
    #[error(
        "{len} blocks asked in one extent; an extent lies in one group of {group_blocks} \
         blocks: split the request"
    )]
    ExtentTooLong {
        /// Blocks asked.
        len: u64,
        /// Blocks of a group: the longest extent.
        group_blocks: u64,
    },

    /// A request whose `min_len` is 0 or above its `len`.
    #[error("min_len {min_len} must be from 1 to len {len}: lower it, or ask for more")]
    InvalidMinLen {
        /// The `min_len` given.
        min_len: u64,
        /// The request's `len`.
        len: u64,
    },

    /// A request whose `goal_min_len` is neither 0 nor from `min_len` to `len`.
    #[error("goal_min_len {goal_min_len} must be 0 (none) or from min_len {min_len} to len {len}")]
    InvalidGoalMinLen {
        /// The `goal_min_len` given.
        goal_min_len: u64,
        /// The request's `min_len`.
        min_len: u64,
        /// The request's `len`.
        len: u64,
    },

    /// A setting outside the values it takes (a writeback option, a synthetic device's
    /// spec).
    #[error("invalid {setting} {value}: {expected}")]
    InvalidSetting {
        /// The setting: "writeback affinity", "writeback dirty limit", ...
        setting: &'static str,
        /// The value given, with its unit.
        value: String,
        /// What the setting takes.
        expected: String,
    },

    /// Group summaries given for another number of groups than the device has.
    #[error("{given} group summaries for {groups} groups: give one per group")]
    SummaryCount {
        /// Summaries given.
        given: u64,
        /// Groups on the device.
        groups: u64,
    },

    /// A group number past the device's groups.
    #[error("group {group} does not exist: the device has {groups} groups (0..{groups})")]
    NoSuchGroup {
        /// The group asked for.
        group: u64,
        /// Groups on the device.
        groups: u64,
    },

    /// A list of extents that must be sorted (and, for free runs, disjoint) was not.
    #[error("{what} {start}+{len} starts before block {bound}: {rule}")]
    Unsorted {
        /// What the list holds: "free run", "used extent".
        what: &'static str,
        /// First block of the extent out of order.
        start: u64,
        /// Its length in blocks.
        len: u64,
        /// The block it should start at or after.
        bound: u64,
        /// The order the list must follow.
        rule: &'static str,
    },

    /// An acknowledged discard that is not one the store handed over (or was acknowledged
    /// already).
    #[error(
        "blocks {start}+{len} are not a discard take_discards handed over, or were \
         acknowledged already: acknowledge exactly the extents it returned, once each"
    )]
    NotADiscard {
        /// First block of the extent acknowledged.
        start: u64,
        /// Its length in blocks.
        len: u64,
    },

    /// A volume file's attribute blob larger than a volume keeps.
    #[error(
        "an attribute blob of {bytes} bytes: at most {max}; keep larger data in the file \
         itself"
    )]
    AttrTooLarge {
        /// Bytes given.
        bytes: u64,
        /// The largest blob (`volume::MAX_ATTR_BYTES`).
        max: u64,
    },

    /// A store root larger than the superblock keeps.
    #[error(
        "a root of {bytes} bytes: at most {max}; write larger tables to blocks and keep \
         their address (and a checksum) in the root"
    )]
    RootTooLarge {
        /// Bytes given.
        bytes: u64,
        /// The largest root (`disk::format::ROOT_MAX`).
        max: u64,
    },

    /// A device whose journal is too small for a volume's records.
    #[error(
        "a journal whose records hold at most {max_record} bytes is too small for a volume \
         (at least {needed} bytes): use a larger device (its journal grows) or journal size"
    )]
    JournalTooSmall {
        /// The largest record this journal holds.
        max_record: u64,
        /// The least a volume needs.
        needed: u64,
    },

    /// A size too small to hold a volume ([`Volume::mkfs_file`](crate::volume::Volume::mkfs_file)):
    /// nothing was made.
    #[error("{path}: {size} bytes cannot hold a volume: give at least {least} bytes")]
    VolumeTooSmall {
        /// The file or device.
        path: String,
        /// The size given, or the device's own.
        size: u64,
        /// The least size that holds a volume ([`Volume::least_size`](crate::volume::Volume::least_size)).
        least: u64,
    },

    /// A file id that cannot be made again: 0, or never handed out.
    #[error(
        "file id {id} cannot be made again: it was never handed out (ids handed out so far \
         run from 1 to below {next_id}); make again only an id whose file is gone"
    )]
    FileIdNeverHandedOut {
        /// The id asked for.
        id: u64,
        /// The next id the volume hands out.
        next_id: u64,
    },

    /// A byte or block range of a file reaching past the largest file.
    #[error(
        "{unit} {start}+{len} reach past the largest file ({max} {unit}): keep offsets and \
         lengths below it"
    )]
    PastLargestFile {
        /// The range's unit: "bytes" or "logical blocks".
        unit: &'static str,
        /// First byte or block of the range.
        start: u64,
        /// Its length.
        len: u64,
        /// The largest file in that unit.
        max: u64,
    },

    /// A file size past the largest file.
    #[error("a file size of {size} {unit} is past the largest file ({max} {unit})")]
    SizePastLargestFile {
        /// The size's unit: "bytes" or "blocks".
        unit: &'static str,
        /// The size asked for.
        size: u64,
        /// The largest file in that unit.
        max: u64,
    },

    /// A call that needs the open transaction empty found changes in it.
    #[error("{op} with an open transaction holding changes: commit first")]
    TransactionOpen {
        /// The call refused: "checkpoint".
        op: &'static str,
    },

    /// A call that runs only at rest (right after opening) found work under way.
    #[error(
        "the allocation is rebuilt only at rest, and there are {count} {what}: rebuild \
         right after opening, before any other call"
    )]
    NotAtRest {
        /// How many of `what` there are.
        count: u64,
        /// What is under way: "frees pending", "blocks reserved by preallocations", ...
        what: &'static str,
    },

    /// A free of an extent that another open transaction allocated and has not committed.
    #[error(
        "extent {start}+{len} belongs to transaction {txn}, which has not committed: only \
         that transaction may free it before then"
    )]
    OwnedByTransaction {
        /// First block of the extent freed.
        start: u64,
        /// Its length in blocks.
        len: u64,
        /// The transaction that allocated it.
        txn: u64,
    },

    /// A volume made on a store someone used already.
    #[error(
        "the store on this device is in use already (it has a root or committed records): \
         make a new one with mkfs for a volume"
    )]
    StoreInUse,

    /// A checkpoint of a volume's store called on the store, not through the volume.
    #[error(
        "a volume's store checkpoints only through the volume (its file table must go with \
         the journal tail): call Volume::checkpoint"
    )]
    CheckpointOutsideVolume,

    /// The volume's pending mark given as a caller's attribute blob (`volume/publish.rs`).
    #[error("this attribute blob is the volume's pending mark (reserved): choose another")]
    AttrReserved,
    /// An empty key given to a keyed call ([`crate::volume::Volume::put_keyed`]): every
    /// blob put without a key has the empty attribute, so no key is empty.
    #[error("the key is empty: a keyed put or get needs a key of at least one byte")]
    EmptyKey,
    /// A publish of file `id` that is not pending, or a call a pending file refuses: `why`.
    #[error("file {id} {why}")]
    #[allow(missing_docs)] // the variant's line names both fields
    Pending { id: u64, why: &'static str },
    /// A change or commit of a volume after [`crate::volume::Volume::shutdown`].
    #[error("the volume was shut down: open its device again to change it")]
    Closed,

    /// A volume file made again under an id whose file exists.
    #[error("file {id} exists: make a file again only under an id whose file is gone")]
    FileExists {
        /// The id asked for.
        id: u64,
    },

    /// A volume made over what a path holds ([`crate::volume::Volume::mkfs_file`]).
    #[error(
        "{path} holds {holds}: a volume is made only on a new or empty file or an unused \
         device; remove it first, or use Volume::mkfs_file_replacing to discard it"
    )]
    Occupied {
        /// The file or device.
        path: String,
        /// What it holds.
        holds: String,
    },

    /// An atomic group of more chunk calls than one journal record can hold.
    #[error(
        "an atomic group of {chunks} chunk calls needs up to {bytes} journal bytes; this \
         journal's records allow groups of {max}: make fewer calls in one group, or the \
         device with a larger --journal-size"
    )]
    AtomicGroupTooLarge {
        /// Chunk calls the group announced.
        chunks: u64,
        /// Journal bytes they may need.
        bytes: u64,
        /// The most a group may need.
        max: u64,
    },

    /// A volume written by another version of extalloc's volume format.
    #[error(
        "the volume on this device is of format version {found}; this build reads versions \
         2 to {supported} (an older one is brought forward by its next checkpoint): copy \
         the files out with a build that reads it, then make the device again with \
         `extalloc mkfs --force`"
    )]
    UnsupportedVolumeVersion {
        /// The version the volume's root records.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },

    /// A store that holds no volume (its root is empty or not a volume's).
    #[error(
        "the device holds a store but no volume (its root, {root_bytes} bytes, is not a \
         volume's): make one with `extalloc mkfs`"
    )]
    NoVolume {
        /// Bytes of the store's root.
        root_bytes: u64,
    },

    /// A thread the library starts could not be started.
    #[error("cannot start {thread}: {source}; free threads or memory, or ask for fewer threads")]
    Spawn {
        /// The thread: "writeback context 3".
        thread: String,
        /// The operating system's error.
        #[source]
        source: IoSource,
    },

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
        /// The structure that failed ([`Corrupted`]: the superblock, a group's descriptor,
        /// a journal record, a node of the file tree, ...), printed as "superblock",
        /// "descriptor of group 3", "group 3", ...
        what: Corrupted,
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

    /// An earlier open accepted a journal damaged in the middle and wiped the records it
    /// lost, and the repair that should follow did not finish (cut short by a crash or an
    /// error): opening as if nothing happened would hide the loss.
    #[error(
        "an earlier repair accepted the loss of journal records after damage and did not \
         finish: run `extalloc fsck --repair` to finish it"
    )]
    JournalLossUnrepaired,

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
        "device {device} is in use (open elsewhere; one writer or any number of readers at \
         a time): cannot open it to {wanted}; close the other user first"
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

    /// A write or flush of the device failed earlier (or another opener took it over), so
    /// the store latched: Linux forgets the pages of a failed flush, and a later flush that
    /// succeeds proves nothing. Nothing more is written; reopening recovers every commit.
    #[error(
        "{device}: an earlier write or flush failed ({cause}), so nothing more is written or \
         committed: close the device and open it again (recovery keeps every commit before)"
    )]
    IoLatched {
        /// The device.
        device: String,
        /// The first failure, as it was reported.
        cause: String,
    },
}
