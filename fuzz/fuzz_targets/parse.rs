//! Every parser of on-disk bytes on arbitrary input: superblock (and its root), group
//! descriptor, journal record. None may panic; a record that decodes must encode back to the same bytes.
#![no_main]

use extalloc::disk::format::{GroupDesc, Superblock};
use extalloc::disk::journal;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Superblock::decode(data);
    let _ = Superblock::decode_with_root(data);
    let group = data.first().copied().unwrap_or(0) as u64;
    let _ = GroupDesc::decode(data, group);
    if let Some(r) = journal::decode(data) {
        let again = journal::encode(r.seq, r.durable_through, &r.ops, &r.payload);
        assert_eq!(journal::decode(&again), Some(r));
    }
});
