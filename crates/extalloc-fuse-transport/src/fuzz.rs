//! The decoder's entry for the fuzz target `fuse_request` (`extalloc_fuse::fuzz_request`); not part of the crate's API.
//!
//! Data structures: none. Invariant: decoding never panics, whatever the bytes. Locks: none.

use super::request::{parse, Op};

/// `buf` decoded as one request (as read from `/dev/fuse`); true if well formed.
pub fn request(buf: &[u8]) -> bool {
    parse(buf).is_some_and(|(_, op)| !matches!(op, Op::Malformed))
}
