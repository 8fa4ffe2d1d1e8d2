//! Sequences of volume calls and power losses against a model (`extalloc::sequence`): the
//! input decodes to a small device, a random valid policy and weighted events (create,
//! write, fallocate in every mode, truncate, unlink, sync, checkpoint, crash with every
//! unflushed write dropped or some kept and one torn, reopen, close and open, misuse);
//! after every event every file's size and bytes, the list of files, the ownership check
//! and the allocator's counters must match the model. The proptest twin is
//! `crates/extalloc/tests/sequence.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(failure) = extalloc::sequence::run(data) {
        panic!("{failure}");
    }
});
