//! What serves the requests the transport decodes ([`Handler`]), what it asks of the
//! kernel at init ([`Init`]), and how a decoded request reaches it ([`dispatch`], the same
//! for `/dev/fuse` and io_uring entries).
//!
//! Data structures: [`Init`] (the kernel's offer and the handler's asks). Invariant: only
//! flags the kernel offers are asked for; a request that takes no reply gets none on
//! `/dev/fuse` and an empty commit on an io_uring entry. Lock order: none.

use super::{Op, Reply, Request};

/// What serves the requests.
pub trait Handler: Send + Sync + 'static {
    /// Asks for what it wants of what the kernel offers (once, before any request).
    fn init(&self, init: &mut Init);
    /// The kernel drops `nlookup` references to `ino` (no reply).
    fn forget(&self, ino: u64, nlookup: u64);
    /// [`Handler::forget`] of each node of a `FUSE_BATCH_FORGET` (one call, so that the
    /// handler may take its locks once for the batch).
    /// `nodes` are `(node id, references)`.
    fn forget_batch(&self, nodes: &[(u64, u64)]) {
        for &(ino, n) in nodes {
            self.forget(ino, n);
        }
    }
    /// Serves one request; answers it through `reply`.
    fn serve(&self, req: &Request, op: Op<'_>, reply: Reply<'_>);
}

/// The kernel's offer at `FUSE_INIT` and what the handler asks of it.
#[derive(Debug)]
pub struct Init {
    pub(super) offered: u64,
    pub(super) wanted: u64,
    pub(super) max_write: u32,
}

impl Init {
    /// Asks for `flags`; `Err` with those the kernel does not offer (none is then taken).
    pub fn want(&mut self, flags: u64) -> Result<(), u64> {
        let missing = flags & !self.offered;
        if missing != 0 {
            return Err(missing);
        }
        self.wanted |= flags;
        Ok(())
    }

    /// The largest write the kernel sends in one request.
    pub fn set_max_write(&mut self, bytes: u32) {
        assert!((4096..=MAX_WRITE).contains(&bytes), "max_write {bytes}");
        self.max_write = bytes;
    }
}

/// The largest `max_write` a handler may ask for (the buffers' size).
pub(super) const MAX_WRITE: u32 = 1 << 20;

/// Serves one decoded request, from `/dev/fuse` or an io_uring entry.
pub(super) fn dispatch<H: Handler>(handler: &H, req: &Request, op: Op<'_>, reply: Reply<'_>) {
    match op {
        Op::Forget(n) => no_reply(reply, || handler.forget(req.nodeid, n)),
        Op::BatchForget(nodes) => no_reply(reply, || {
            let nodes: Vec<(u64, u64)> = nodes.iter().map(|f| (f.nodeid, f.nlookup)).collect();
            handler.forget_batch(&nodes);
        }),
        // Requests are short: an interrupted one is answered when done.
        Op::Interrupt | Op::NotifyReply => no_reply(reply, || {}),
        Op::Init(_) => reply.error(libc::EIO),
        Op::Destroy => reply.ok(),
        Op::Unknown => reply.error(libc::ENOSYS),
        Op::Malformed => {
            log::error!("a malformed FUSE request (opcode {}): EIO", req.opcode);
            reply.error(libc::EIO)
        }
        op => handler.serve(req, op, reply),
    }
}

/// Runs `f` for a request that takes no reply.
fn no_reply(reply: Reply<'_>, f: impl FnOnce()) {
    reply.none();
    f();
}
