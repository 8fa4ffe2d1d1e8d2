//! The one error type of the library.
//!
//! Every public operation returns `Result<T, Error>`. What a call that fails leaves depends
//! on its layer:
//!
//! - The allocator core (`alloc/`, `groups/`) and the file layer (`files/`) change nothing
//!   when they refuse a call, nor when they find no space but what a remedy did first
//!   (frees committed, preallocations discarded: `docs/architecture.md`, "No space").
//! - The journal (`disk/journal/`) refuses a record larger than it holds, or one that
//!   does not fit until a checkpoint, without writing anything.
//! - The store (`store/`) refuses a bad request, a free of metadata or a transaction too
//!   large for the journal without changing anything (with forced commits on, a call may
//!   have committed the open transaction first). A commit that fails at the flush leaves
//!   its record in the journal (it may survive a crash or not), its frees pending.
//! - The volume (`volume/`) and its buffered writes (`writeback/`) work a chunk (or a
//!   piece) at a time: the chunk that fails gives back what it mapped, but the chunks
//!   before it stay done, so a failed `write`, `fallocate`, `truncate` or `unlink` can leave
//!   part of its work (a file written in part, a range allocated in part). Each of their
//!   public calls says in its doc what it leaves when it fails.
//!
//! Each variant is one cause with the values involved; its kind ([`Error::kind`]) is the one
//! table from a cause to a remedy and an errno ([`Error::errno`]) that the mount, the C API
//! and the Python package map errors through (`docs/architecture.md`, "Errors").
//!
//! Files: `cause.rs` the [`Error`] enum, `kind.rs` its kinds and errnos, `source.rs` the
//! operating system errors it carries, `corrupted.rs` what [`Error::Corrupt`] found damaged
//! ([`Corrupted`]), `message.rs` the parts of messages that depend on their values;
//! this file only declares and re-exports them.

mod cause;
mod corrupted;
mod kind;
mod message;
mod source;
pub use cause::Error;
pub use corrupted::Corrupted;
pub use kind::ErrorKind;
pub use source::IoSource;

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
