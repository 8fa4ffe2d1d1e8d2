//! Reading requests from `/dev/fuse`: one request per `read(2)` into a thread's buffer
//! ([`read_request`]), served in turn ([`serve_loop`]), each thread on its own clone of the
//! connection's descriptor ([`clone_dev`]).
//!
//! Data structures: a buffer per thread, the largest write plus the headers. Invariant: a
//! request is answered on the descriptor it was read from; the loop ends when the
//! connection is gone (`ENODEV`, `ECONNABORTED`). Lock order: none.

use super::handler::{dispatch, Handler, MAX_WRITE};
use super::{abi, request, Reply};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use zerocopy::FromBytes;

/// Bytes of a request buffer.
pub(super) fn buf_len() -> usize {
    MAX_WRITE as usize + abi::BUFFER_HEADROOM
}

/// A clone of the connection's descriptor: its own queue of requests being answered.
pub(super) fn clone_dev(dev: &File) -> io::Result<File> {
    let clone = File::options().read(true).write(true).open("/dev/fuse")?;
    let mut fd = dev.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the session's descriptor) through the pointer.
    let r = unsafe { libc::ioctl(clone.as_raw_fd(), abi::DEV_IOC_CLONE, &mut fd) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(clone)
}

/// One request into `buf`; `Ok(None)` when the connection is gone.
pub(super) fn read_request<'b>(dev: &File, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::read(dev.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        // /dev/fuse never reads empty; a socket standing in for it (the tests) ends so.
        if n == 0 {
            return Ok(None);
        }
        if n > 0 {
            return Ok(Some(&buf[..n as usize]));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Interrupted, or a request aborted before it was read: read again.
            Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
            // Unmounted, or aborted (a request dequeued as the connection was aborted).
            Some(libc::ENODEV | libc::ECONNABORTED) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Serves requests read from `dev` until the connection is gone.
pub(super) fn serve_loop<H: Handler>(dev: &File, handler: &H, buf: &mut [u8]) -> io::Result<()> {
    while let Some(msg) = read_request(dev, buf)? {
        let Some((req, op)) = request::parse(msg) else {
            log::error!(
                "a FUSE request of {} bytes unlike its header: EIO",
                msg.len()
            );
            if let Ok((h, _)) = abi::InHeader::read_from_prefix(msg) {
                Reply::new(dev, h.unique).error(libc::EIO);
            }
            continue;
        };
        dispatch(handler, &req, op, Reply::new(dev, req.unique));
    }
    Ok(())
}
