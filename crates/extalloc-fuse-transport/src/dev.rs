//! Reading requests from `/dev/fuse`: one request per `read(2)` into a thread's buffer
//! ([`read_once`], [`read_request`]; a bounded poll first: `poll.rs`; served in turn by
//! `serve_loop` in `mod.rs`, one thread at a time reading: `gate.rs`), each thread on its
//! own clone of the connection's descriptor ([`clone_dev`]), non-blocking while it serves
//! (a thread with nothing to read sleeps in `poll(2)`).
//!
//! Data structures: a buffer per thread, the largest write plus the headers. Invariant: a
//! request is answered on the descriptor it was read from; a read says the connection is
//! gone (`ENODEV`, `ECONNABORTED`) and the serving loop then ends. Lock order: none.

use super::abi;
use super::handler::MAX_WRITE;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::ioctl::{ioctl, Setter};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// Bytes of a request buffer.
pub(super) fn buf_len() -> usize {
    MAX_WRITE as usize + abi::BUFFER_HEADROOM
}

/// A clone of the connection's descriptor: its own queue of requests being answered.
pub(super) fn clone_dev(dev: &File) -> io::Result<File> {
    let clone = File::options().read(true).write(true).open("/dev/fuse")?;
    let session = dev.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32, the session's descriptor, through the
    // pointer the setter passes; it writes nothing back.
    unsafe { ioctl(&clone, Setter::<{ abi::DEV_IOC_CLONE }, u32>::new(session)) }?;
    Ok(clone)
}

/// What one `read(2)` of the descriptor gave.
pub(super) enum Read {
    /// A request of this many bytes.
    Got(usize),
    /// Nothing yet: interrupted, a request aborted before it was read, or none queued on
    /// a non-blocking descriptor.
    Again,
    /// The connection is gone: unmounted, or aborted.
    Gone,
    /// Any other error.
    Failed(io::Error),
}

/// One `read(2)` of `fd` into `buf`.
pub(super) fn read_once(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Read {
    match rustix::io::read(fd, buf) {
        Ok(n) if n > 0 => Read::Got(n),
        // /dev/fuse never reads empty; a socket standing in for it (the tests) ends so.
        Ok(_) => Read::Gone,
        Err(Errno::INTR | Errno::AGAIN | Errno::NOENT) => Read::Again,
        // ECONNABORTED: a request dequeued as the connection was aborted.
        Err(Errno::NODEV | Errno::CONNABORTED) => Read::Gone,
        Err(e) => Read::Failed(e.into()),
    }
}

/// One request into `buf`, sleeping until one comes; `Ok(None)` when the connection is
/// gone. On a non-blocking descriptor (a serving thread's, `poll.rs`) it sleeps in
/// `poll(2)` until a request is queued, then reads it.
pub(super) fn read_request<'b>(dev: &File, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
    let fd = dev.as_fd();
    loop {
        match read_once(fd, buf) {
            Read::Got(n) => return Ok(Some(&buf[..n])),
            Read::Again => wait_readable(fd)?,
            Read::Gone => return Ok(None),
            Read::Failed(e) => return Err(e),
        }
    }
}

/// Sleeps until `fd` has something to read or is gone (the read then says which).
fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    match poll(&mut [PollFd::new(&fd, PollFlags::IN)], None) {
        Ok(_) | Err(Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
