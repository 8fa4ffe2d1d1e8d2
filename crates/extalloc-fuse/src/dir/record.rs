//! A directory log record's frame (`dir/mod.rs` describes the records): the tags, the
//! longest name, and [`frame`], which both the log's records and a run's header
//! (`run.rs`) are written with.
//!
//! Data structures: none (plain bytes). Invariant: a frame is `tag | word u64 | body
//! length u16 | body | crc32c` over everything before the crc, little endian. Lock order:
//! none.

use crate::inode::Kind;

/// Longest name (bytes), as `NAME_MAX`.
pub const NAME_MAX: usize = 255;
pub(super) const ADD: u8 = 1;
pub(super) const REMOVE: u8 = 2;
pub(super) const RESET: u8 = 3;
pub(super) const RUN: u8 = 4;
/// Bytes of a record besides its name.
pub const RECORD_OVERHEAD: usize = 1 + 8 + 2 + 4;

/// What an add record says of its name: the inode, and the entry's kind when written.
pub type Added = (u64, Option<Kind>);

/// One record: `tag`, `word` (an inode, or a reset's or run's count), `body`'s length and
/// bytes (a name, or a run's body), and the crc32c of them all.
pub(super) fn frame(tag: u8, word: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_OVERHEAD + body.len());
    out.push(tag);
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}
