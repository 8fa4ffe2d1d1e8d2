//! extalloc's own FUSE transport: it mounts a connection (`mnt.rs`), reads the kernel's
//! requests from `/dev/fuse` or from FUSE over io_uring's entries (`uring.rs`), decodes
//! them (`request.rs`, over the protocol's structures in `abi.rs`), hands each to a
//! [`Handler`] (`handler.rs`) with its [`Reply`] (`reply.rs`) and answers `FUSE_INIT` as
//! the handler asks. It speaks what the kernel of this machine offers and the `fuser`
//! crate did not: `FUSE_TMPFILE` (`O_TMPFILE`), `FUSE_STATX` (birth times) and FUSE over
//! io_uring, and it reads a write's data in place from the request buffer.
//!
//! The seam: a file system implements [`Handler`] (one call per decoded [`Request`], its
//! [`Op`] and a [`Reply`] to answer with exactly once; [`Handler::init`] says which
//! [`flags`] it wants), mounts a [`Session`] with a [`MountSpec`] and runs it with a
//! [`Serving`]. The crate knows nothing of extalloc's volume: `extalloc-fuse` is its one
//! handler. [`mountinfo`] reads the kernel's table of mounts (the transport finds its own
//! mount there; `extalloc umount` finds a mount's device).
//!
//! Data structures: [`Session`] (the connection's descriptor and the mount); [`Serving`]
//! (threads, transport, polling); one buffer and one poller (`poll.rs`) per serving
//! thread, each thread reading from its own clone of the descriptor
//! (`FUSE_DEV_IOC_CLONE`), which takes the replies to the requests it read, the threads
//! taking turns to read (`gate.rs`: one reads, polling then sleeping, while the others
//! wait for the turn, which its holder keeps across requests served from memory and
//! passes on before one that may wait); with io_uring, one
//! queue per CPU (`uring.rs`) and one thread on the descriptor for forgets and
//! interrupts.
//!
//! Invariant: `FUSE_INIT` is read and answered before any other request is read; every
//! request but FORGET, BATCH_FORGET, INTERRUPT and NOTIFY_REPLY gets exactly one reply
//! (`reply.rs`); the session ends when the kernel says the connection is gone (`ENODEV`:
//! unmounted or aborted), and the mount it made is unmounted at the end if still there.
//!
//! Lock order: the gate's mutex is a leaf, never held across a read or a request (the
//! handler has its own).
//!
//! System calls go through `rustix` (the two ioctls it has no wrapper for through its typed
//! `ioctl`; io_uring's entry through the `io-uring` crate's setters); what stays on `libc`
//! is errno constants, which a reply carries negated as a plain `i32`.

#![warn(missing_docs)]

mod abi;
mod dev;
#[doc(hidden)]
pub mod fuzz;
mod gate;
mod handler;
mod mnt;
pub mod mountinfo;
mod poll;
mod reply;
mod request;
mod serve;
#[cfg(test)]
mod tests;
mod uring;

pub use abi::{Attr, CreateIn, StatfsOut};
pub use abi::{Statx, SxTime};
pub use abi::{FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE, STATX_BASIC_STATS, STATX_BTIME};
use dev::{buf_len, clone_dev, read_request};
use gate::Gate;
pub use handler::{Handler, Init};
pub use mnt::MountSpec;
use poll::Poller;
pub use reply::{DirBuf, Notifier, Reply};
pub use request::{Op, Request, Setattr, TimeOrNow};
use serve::serve_loop;

/// Init flags a handler may ask for (`Init::want`).
pub mod flags {
    pub use super::abi::{
        ALLOW_IDMAP, DIRECT_IO_ALLOW_MMAP, DONT_MASK, DO_READDIRPLUS, EXPORT_SUPPORT,
        HANDLE_KILLPRIV_V2, PARALLEL_DIROPS, POSIX_ACL, READDIRPLUS_AUTO, WRITEBACK_CACHE,
    };
    pub use super::abi::{WRITE_CACHE, WRITE_KILL_SUIDGID};
}

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use zerocopy::IntoBytes;

/// How a session serves: its threads and transport.
#[derive(Debug, Clone, Copy)]
pub struct Serving {
    /// Threads reading `/dev/fuse` (at least one).
    pub threads: usize,
    /// Serve through FUSE over io_uring with entries of this depth per CPU, if the kernel
    /// offers it (else through `/dev/fuse` as without).
    pub uring: Option<usize>,
    /// The rings were asked for by name: a kernel that does not offer them is said (a
    /// warning); else it is only logged at the debug level.
    pub uring_said: bool,
    /// How long a `/dev/fuse` thread polls for the next request before it sleeps (`poll.rs`);
    /// zero: it sleeps at once.
    pub poll: std::time::Duration,
}

/// A mounted connection, not yet served.
pub struct Session {
    dev: Arc<File>,
    mounted: mnt::Mounted,
}

impl Session {
    /// Mounts a connection on `mountpoint` (canonical) as `spec` says.
    pub fn mount(mountpoint: &Path, spec: &MountSpec) -> io::Result<Session> {
        let (dev, mounted) = mnt::mount(mountpoint, spec)?;
        Ok(Session {
            dev: Arc::new(dev),
            mounted,
        })
    }

    /// Where the handler sends notifications.
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.dev.clone())
    }

    /// Unmounts without serving (a start that failed after the mount).
    pub fn unmount(&mut self) -> io::Result<()> {
        self.mounted.unmount()
    }

    /// Serves requests as `serving` says until the connection is gone, then unmounts if
    /// the mount is still there.
    pub fn run<H: Handler>(
        mut self,
        handler: Arc<H>,
        serving: Serving,
        ready: impl FnOnce(),
    ) -> io::Result<()> {
        let mut buf = vec![0u8; buf_len()];
        let uring = serving.uring.map(|depth| (depth, serving.uring_said));
        let served = handshake(&self.dev, &*handler, &mut buf, uring).and_then(|queues| {
            // Through the rings, the descriptor carries only forgets and interrupts: one
            // thread, which never polls and lets forgets gather (`poll.rs`).
            let queues_empty = queues.is_empty();
            let (readers, poll) = if queues_empty {
                (serving.threads.max(1), serving.poll)
            } else {
                (1, std::time::Duration::ZERO)
            };
            let rings: io::Result<Vec<_>> = queues
                .into_iter()
                .map(|q| {
                    let (h, dev) = (handler.clone(), self.dev.clone());
                    std::thread::Builder::new()
                        .name("extalloc-fuse-ring".into())
                        .spawn(move || q.run(&*h, &dev))
                })
                .collect();
            let rings = rings?;
            let gate = Arc::new(Gate::new());
            let mut devs = Vec::with_capacity(readers);
            for _ in 1..readers {
                devs.push(clone_dev(&self.dev)?);
            }
            // Through /dev/fuse, the readers' descriptors stay non-blocking: a poll reads
            // without flipping them and a thread with nothing to read sleeps in poll(2)
            // (`poll.rs`). The rings' descriptor is left as it was.
            if queues_empty {
                for d in std::iter::once(&*self.dev).chain(&devs) {
                    poll::set_nonblocking(d.as_fd())?;
                }
            }
            let spawned: io::Result<Vec<_>> = devs
                .into_iter()
                .enumerate()
                .map(|(i, dev)| {
                    let (h, gate) = (handler.clone(), gate.clone());
                    std::thread::Builder::new()
                        .name(format!("extalloc-fuse-{}", i + 1))
                        .spawn(move || {
                            let mut poller = Poller::new(poll);
                            let buf = &mut vec![0; buf_len()];
                            serve_loop(&dev, &*h, buf, &mut poller, &gate)
                        })
                })
                .collect();
            let spawned = spawned?;
            // Init is answered and every thread started: the mount serves.
            ready();
            let mut poller = if queues_empty {
                Poller::new(poll)
            } else {
                Poller::for_forgets(poll::FORGET_PAUSE)
            };
            let mine = serve_loop(&self.dev, &*handler, &mut buf, &mut poller, &gate);
            let mut first = mine;
            for t in spawned.into_iter().chain(rings) {
                let r = t
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a FUSE thread panicked")));
                first = first.and(r);
            }
            first
        });
        let unmounted = self.mounted.unmount();
        served.and(unmounted)
    }
}

/// Reads `FUSE_INIT`, asks the handler, answers; with `uring` (a depth, and whether the
/// rings were asked for by name), builds the io_uring queues first and asks for the rings
/// only if the kernel offers them and every queue was built (then returns them, to be
/// registered now that init is answered).
fn handshake<H: Handler>(
    dev: &File,
    handler: &H,
    buf: &mut [u8],
    uring: Option<(usize, bool)>,
) -> io::Result<Vec<uring::Queue>> {
    let Some(msg) = read_request(dev, buf)? else {
        return Err(io::Error::other("the connection ended before FUSE_INIT"));
    };
    let Some((req, Op::Init(init))) = request::parse(msg) else {
        return Err(io::Error::other(
            "the kernel's first request is not FUSE_INIT",
        ));
    };
    let reply = Reply::new(dev, req.unique);
    if init.major != abi::KERNEL_MAJOR || init.minor < 36 {
        reply.error(libc::EPROTO);
        return Err(io::Error::other(format!(
            "the kernel speaks FUSE {}.{}; this daemon needs 7.36 (Linux 5.17) or later",
            init.major, init.minor
        )));
    }
    let mut offered = u64::from(init.flags);
    if offered & abi::INIT_EXT != 0 {
        offered |= u64::from(init.flags2) << 32;
    }
    let mut ask = Init {
        offered,
        wanted: (abi::ASYNC_READ | abi::BIG_WRITES | abi::MAX_PAGES | abi::INIT_EXT) & offered,
        max_write: 128 << 10,
    };
    handler.init(&mut ask);
    let queues = match uring {
        Some((depth, said)) => rings(dev, &mut ask, depth, said),
        None => Vec::new(),
    };
    debug_assert_eq!(ask.wanted & !offered, 0, "only what the kernel offers");
    let out = abi::InitOut {
        major: abi::KERNEL_MAJOR,
        minor: init.minor.min(abi::KERNEL_MINOR),
        max_readahead: init.max_readahead,
        flags: ask.wanted as u32,
        flags2: (ask.wanted >> 32) as u32,
        max_background: 16,
        congestion_threshold: 12,
        max_write: ask.max_write,
        time_gran: 1,
        max_pages: ask.max_write.div_ceil(page_size()) as u16,
        ..Default::default()
    };
    reply.data(out.as_bytes());
    Ok(queues)
}

/// The io_uring queues, built and asked for, or none (and the reason logged: a warning
/// when the rings were asked for by name, `said`; a kernel that does not offer them is
/// only a debug message otherwise).
fn rings(dev: &File, ask: &mut Init, depth: usize, said: bool) -> Vec<uring::Queue> {
    if ask.want(abi::OVER_IO_URING).is_err() {
        let level = if said {
            log::Level::Warn
        } else {
            log::Level::Debug
        };
        log::log!(
            level,
            "the kernel does not offer FUSE over io_uring (as root, `echo 1 > \
             /sys/module/fuse/parameters/enable_uring` before mounting; Linux 6.14 or \
             later): serving through /dev/fuse"
        );
        return Vec::new();
    }
    // The payload takes the largest write and the largest reply (a listing or an
    // extended attribute's value, at most a write's size).
    let payload = ask.max_write as usize + abi::BUFFER_HEADROOM;
    match uring::build(dev, payload, depth) {
        Ok(q) => q,
        Err(e) => {
            ask.wanted &= !abi::OVER_IO_URING;
            log::warn!("cannot set up FUSE over io_uring ({e}): serving through /dev/fuse");
            Vec::new()
        }
    }
}

/// The machine's page size (`max_pages` counts pages).
fn page_size() -> u32 {
    u32::try_from(rustix::param::page_size()).unwrap_or(4096)
}
