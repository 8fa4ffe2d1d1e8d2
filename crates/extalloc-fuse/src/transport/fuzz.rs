//! The decoder's entry for the fuzz target `fuse_request` (`crate::fuzz_request`).
//!
//! Data structures: none. Invariant: decoding never panics, whatever the bytes. Locks: none.

use super::request::{parse, Op};

/// `buf` decoded as one request (as read from `/dev/fuse`); true if well formed.
pub(crate) fn request(buf: &[u8]) -> bool {
    parse(buf).is_some_and(|(_, op)| !matches!(op, Op::Malformed))
}
