//! One serving thread's loop: read a request in turn with the session's other threads,
//! serve it, reply; and which requests keep the turn while served. The session (`mod.rs`)
//! and the io_uring queues (`uring.rs`) both run it; it names neither.
//!
//! Data structures: none of its own (the `Gate` and `Poller` it is given). Invariant: a
//! thread reads only while it holds the turn, and passes it on before serving a request
//! that may wait. Locks: none of its own.

use super::abi;
use super::gate::Gate;
use super::handler::{dispatch, Handler};
use super::poll::Poller;
use super::reply::Reply;
use super::request::{self, Op};
use std::fs::File;
use std::io;
use zerocopy::FromBytes;

/// Whether the thread that read `op` keeps its turn to read while it serves it: a lookup,
/// an attribute or a namespace request, served from memory (and the device's metadata)
/// without waiting for anything outside the daemon, which the thread answers and then
/// reads the next request itself, with no other thread woken. Anything that moves file
/// data or waits for durability (a read, a write, an fsync, a fallocate, a truncate, an
/// ioctl, which may shut the mount down) passes the turn on before it is served, so the
/// session goes on reading while it waits (`gate.rs`).
pub(super) fn keeps_turn(op: &Op<'_>) -> bool {
    match op {
        Op::Lookup(_)
        | Op::Forget(_)
        | Op::BatchForget(_)
        | Op::Getattr(_)
        | Op::Statx(_)
        | Op::Readlink
        | Op::Symlink { .. }
        | Op::Mknod { .. }
        | Op::Mkdir { .. }
        | Op::Unlink(_)
        | Op::Rmdir(_)
        | Op::Rename { .. }
        | Op::Link { .. }
        | Op::Open { .. }
        | Op::Statfs
        | Op::Release
        | Op::Getxattr { .. }
        | Op::Listxattr { .. }
        | Op::Opendir
        | Op::Readdir { .. }
        | Op::Releasedir { .. }
        | Op::Create { .. }
        | Op::Interrupt => true,
        Op::Setattr(s) => s.size.is_none(),
        _ => false,
    }
}

/// Serves requests read from `dev` until the connection is gone, reading in turn with the
/// session's other threads at `gate` (`gate.rs`: a thread keeps the turn across the
/// requests it serves without waiting, `keeps_turn`, and passes it on, waking a waiting
/// thread, before serving one that may wait) and polling before each sleep as `poller`
/// allows (`poll.rs`). The first thread to find the connection gone closes the gate,
/// which ends the others.
pub(super) fn serve_loop<H: Handler>(
    dev: &File,
    handler: &H,
    buf: &mut [u8],
    poller: &mut Poller,
    gate: &Gate,
) -> io::Result<()> {
    let mut turn = None;
    loop {
        if turn.is_none() {
            let Some(t) = gate.enter() else { break };
            turn = Some(t);
        }
        let msg = match poller.read(dev, buf) {
            Ok(Some(msg)) => msg,
            Ok(None) => {
                gate.close();
                break;
            }
            Err(e) => return Err(e),
        };
        let parsed = request::parse(msg);
        if !parsed.as_ref().is_some_and(|(_, op)| keeps_turn(op)) {
            // Passed on before serving: this request may wait (`keeps_turn`).
            turn = None;
        }
        let Some((req, op)) = parsed else {
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
    log::debug!("a FUSE thread ends; its polls: {:?}", poller.counts());
    Ok(())
}
