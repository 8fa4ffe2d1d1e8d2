//! The FUSE request decoder on arbitrary bytes: the one part of the mount's transport that
//! reads bytes it did not write (the kernel's requests). Never panics, never reads past
//! the buffer; a malformed request decodes to `Malformed`, answered `EIO`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = extalloc_fuse::fuzz_request(data);
});
