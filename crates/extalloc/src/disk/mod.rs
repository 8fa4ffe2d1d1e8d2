//! Disk: the persistence layer's bottom half, where bytes meet the media (see
//! `docs/architecture.md` and `docs/format.md`).
//!
//! - [`device`]: the [`device::Device`] trait (positional reads and writes, a `flush` that
//!   makes every earlier write durable) and its kinds: sparse memory, a file or block
//!   device, and a fault-injecting wrapper that crashes on command.
//! - [`format`](mod@format): the on-disk format: the superblock and its backup, the group descriptor
//!   table and the group bitmaps, every structure crc32c-checked; `mkfs`, and the readers
//!   and writers of each structure.
//! - [`journal`]: the circular log of transaction records in the journal area: `append`,
//!   `commit` with shared flushes (group commit), and `replay`, which stops at a torn record
//!   and tells damage in the middle from a torn tail.
//!
//! Invariant: nothing here decides what a block is for. Decoding any bytes never panics (it
//! returns an error), every access is checked against the device's size, and a failed call
//! changes nothing it reports as done. What this layer says must be true: a structure that
//! decodes passed its checksum, and a record `commit` returned for is durable.
//!
//! Locks: each type keeps its own and calls out only to the device under them (the
//! journal's `writer` lock -> the device's internal lock; the journal never holds `writer`
//! and `flush` together). No lock is held across a call back into a caller.
//!
//! Arrows point down: this layer imports `geometry`, `error` and, for the figures a group
//! descriptor carries, `groups`; never `store`, `files` or `alloc`. The store above it owns
//! every transaction, checkpoint and recovery decision.

pub mod device;
pub mod format;
pub mod journal;
