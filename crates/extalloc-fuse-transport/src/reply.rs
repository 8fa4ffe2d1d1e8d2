//! Replies written to `/dev/fuse`: a header and the opcode's structures in one `writev`
//! ([`Reply`]), listings gathered into the size the kernel asked for ([`DirBuf`]), and the
//! notifications the daemon sends on its own ([`Notifier`]).
//!
//! Data structures: [`Reply`] (the descriptor the request was read from, since a cloned
//! descriptor takes only the replies to its own requests, and the request's id); [`DirBuf`].
//! Invariant: a request gets exactly one reply: each answering method takes the [`Reply`],
//! and one dropped unanswered (a panic in a handler) answers `EIO`, so no caller waits for
//! ever. Lock order: none (each write is one system call).

use super::abi;
use std::fs::File;
use std::io;
use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;
use zerocopy::IntoBytes;

/// Where a reply goes: the descriptor the request was read from, or the io_uring entry
/// it came in (`uring.rs`), whose commit sends it.
pub enum Sink<'a> {
    Dev(&'a File),
    Ring(&'a dyn Put),
}

/// A place a reply is written into whole (an io_uring entry).
pub trait Put {
    /// The reply of `unique`: `error` (negative) or `parts`, one after the other.
    fn put(&self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()>;
}

impl Sink<'_> {
    fn send(&self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        match self {
            Sink::Dev(dev) => send(dev, unique, error, parts),
            Sink::Ring(slot) => slot.put(unique, error, parts),
        }
    }
}

/// The one reply to a request.
pub struct Reply<'a> {
    sink: Sink<'a>,
    unique: u64,
    sent: bool,
}

/// The header and at most two parts (a structure and the bytes after it): no allocation
/// per reply.
const MAX_PARTS: usize = 3;

/// Writes `parts` after a header of `unique` and `error` as one message.
fn send(dev: &File, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
    let len =
        abi::OutHeader::default().as_bytes().len() + parts.iter().map(|p| p.len()).sum::<usize>();
    let header = abi::OutHeader {
        len: len as u32,
        error,
        unique,
    };
    assert!(
        parts.len() < MAX_PARTS,
        "a reply has at most {} parts",
        MAX_PARTS - 1
    );
    let mut iov = [IoSlice::new(&[]); MAX_PARTS];
    let whole = std::iter::once(header.as_bytes()).chain(parts.iter().copied());
    for (v, p) in iov.iter_mut().zip(whole) {
        *v = IoSlice::new(p);
    }
    let n = rustix::io::writev(dev, &iov[..parts.len() + 1])?;
    debug_assert_eq!(n, len, "/dev/fuse takes a message whole or not at all");
    Ok(())
}

/// The header of a reply of `parts`.
pub fn out_header(unique: u64, error: i32, parts: &[&[u8]]) -> abi::OutHeader {
    let len = std::mem::size_of::<abi::OutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
    abi::OutHeader {
        len: len as u32,
        error,
        unique,
    }
}

/// Seconds and nanoseconds of a timeout.
fn split(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

impl<'a> Reply<'a> {
    /// The reply to request `unique`, written to `/dev/fuse` descriptor `dev`.
    pub fn new(dev: &'a File, unique: u64) -> Reply<'a> {
        Reply::to(Sink::Dev(dev), unique)
    }

    /// The reply to request `unique`, written to `sink`.
    pub fn to(sink: Sink<'a>, unique: u64) -> Reply<'a> {
        Reply {
            sink,
            unique,
            sent: false,
        }
    }

    /// Sends the reply; `false` when it did not reach the kernel (the request was
    /// interrupted and is gone, or the send failed: logged), so a reply that hands out a
    /// handle can be undone.
    fn finish(mut self, error: i32, parts: &[&[u8]]) -> bool {
        self.sent = true;
        match self.sink.send(self.unique, error, parts) {
            Ok(()) => true,
            // The request was interrupted and is gone: nobody waits for the answer.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => false,
            Err(e) => {
                log::warn!("cannot answer FUSE request {}: {e}", self.unique);
                false
            }
        }
    }

    /// No reply: the request takes none (FORGET, INTERRUPT). One that came through an
    /// io_uring entry is committed all the same (empty), or the entry would be lost.
    pub fn none(mut self) {
        match self.sink {
            Sink::Dev(_) => self.sent = true,
            Sink::Ring(_) => {
                self.finish(0, &[]);
            }
        }
    }

    /// The error `errno` (positive).
    pub fn error(self, errno: i32) {
        debug_assert!(errno > 0 && errno < 512, "an errno is positive: {errno}");
        // The kernel refuses a reply whose error is out of range before it finds the
        // request, whose caller would then wait until the connection ends.
        let errno = if errno > 0 && errno < 512 {
            errno
        } else {
            libc::EIO
        };
        self.finish(-errno, &[]);
    }

    /// Success with nothing to say.
    pub fn ok(self) {
        self.finish(0, &[]);
    }

    /// Bytes; `false` when the reply did not reach the kernel.
    pub fn data(self, d: &[u8]) -> bool {
        self.finish(0, &[d])
    }

    /// The structure `s` and the bytes `tail` after it; `false` when the reply did not
    /// reach the kernel.
    pub fn with<T: IntoBytes + zerocopy::Immutable>(self, s: &T, tail: &[u8]) -> bool {
        self.finish(0, &[s.as_bytes(), tail])
    }

    /// A name's node, attributes and how long the kernel may keep them; `false` when the
    /// reply did not reach the kernel (an interrupted request: the kernel counts no lookup
    /// of the node, so the caller forgets the one it counted).
    pub fn entry(self, ttl: Duration, attr: &abi::Attr, generation: u64) -> bool {
        self.with(&entry_out(ttl, attr, generation), &[])
    }

    /// Attributes and how long the kernel may keep them.
    pub fn attr(self, ttl: Duration, attr: &abi::Attr) {
        let (secs, nanos) = split(ttl);
        let out = abi::AttrOut {
            attr_valid: secs,
            attr_valid_nsec: nanos,
            dummy: 0,
            attr: *attr,
        };
        self.with(&out, &[]);
    }

    /// An open handle and the open's flags (`FOPEN_*`); `false` when the reply did not
    /// reach the kernel (an interrupted open: no release will come for the handle).
    pub fn opened(self, fh: u64, flags: u32) -> bool {
        self.with(&open_out(fh, flags), &[])
    }

    /// A made and opened file (`CREATE`, `TMPFILE`); `false` when the reply did not reach
    /// the kernel (no lookup counted, no release coming: the caller undoes both).
    pub fn created(self, ttl: Duration, attr: &abi::Attr, fh: u64, flags: u32) -> bool {
        let entry = entry_out(ttl, attr, 0);
        let open = open_out(fh, flags);
        self.finish(0, &[entry.as_bytes(), open.as_bytes()])
    }

    /// A statx's attributes and how long the kernel may keep them.
    pub fn statx(self, ttl: Duration, stat: &abi::Statx) {
        let (secs, nanos) = split(ttl);
        let out = abi::StatxOut {
            attr_valid: secs,
            attr_valid_nsec: nanos,
            flags: 0,
            spare: [0; 2],
            stat: *stat,
        };
        self.with(&out, &[]);
    }

    /// Bytes written (or copied).
    pub fn written(self, n: u32) {
        self.with(
            &abi::WriteOut {
                size: n,
                padding: 0,
            },
            &[],
        );
    }

    /// The size of an extended attribute's value or listing.
    pub fn xattr_size(self, n: u32) {
        self.with(
            &abi::GetxattrOut {
                size: n,
                padding: 0,
            },
            &[],
        );
    }

    /// An ioctl's result and the bytes it copies out.
    pub fn ioctl(self, result: i32, out: &[u8]) {
        let head = abi::IoctlOut {
            result,
            ..Default::default()
        };
        self.with(&head, out);
    }
}

impl Drop for Reply<'_> {
    fn drop(&mut self) {
        if !self.sent {
            self.sent = true;
            log::error!(
                "FUSE request {} left unanswered: answering EIO",
                self.unique
            );
            let _ = self.sink.send(self.unique, -libc::EIO, &[]);
        }
    }
}

fn entry_out(ttl: Duration, attr: &abi::Attr, generation: u64) -> abi::EntryOut {
    let (secs, nanos) = split(ttl);
    abi::EntryOut {
        nodeid: attr.ino,
        generation,
        entry_valid: secs,
        attr_valid: secs,
        entry_valid_nsec: nanos,
        attr_valid_nsec: nanos,
        attr: *attr,
    }
}

fn open_out(fh: u64, flags: u32) -> abi::OpenOut {
    abi::OpenOut {
        fh,
        open_flags: flags,
        backing_id: 0,
    }
}

/// A listing's entries, up to the size the kernel asked for.
pub struct DirBuf {
    buf: Vec<u8>,
    max: usize,
}

impl DirBuf {
    /// An empty listing of at most `max` bytes (the request's size).
    pub fn new(max: u32) -> DirBuf {
        DirBuf {
            buf: Vec::with_capacity(max as usize),
            max: max as usize,
        }
    }

    /// Adds an entry (`entry`: READDIRPLUS's node and attributes); `next` is the offset the
    /// listing goes on from after it. True when it does not fit (nothing added: the
    /// listing is full).
    pub fn add(
        &mut self,
        ino: u64,
        next: u64,
        kind: u32,
        name: &[u8],
        entry: Option<&abi::EntryOut>,
    ) -> bool {
        let plus = entry.map_or(0, |e| e.as_bytes().len());
        let dirent = abi::Dirent {
            ino,
            off: next,
            namelen: name.len() as u32,
            kind,
        };
        let len = plus + dirent.as_bytes().len() + name.len();
        let padded = len.next_multiple_of(8);
        if self.buf.len() + padded > self.max {
            return true;
        }
        if let Some(e) = entry {
            self.buf.extend_from_slice(e.as_bytes());
        }
        self.buf.extend_from_slice(dirent.as_bytes());
        self.buf.extend_from_slice(name);
        self.buf.resize(self.buf.len() + padded - len, 0);
        debug_assert_eq!(self.buf.len() % 8, 0);
        false
    }

    /// The entry READDIRPLUS carries for a node.
    pub fn entry(ttl: Duration, attr: &abi::Attr) -> abi::EntryOut {
        entry_out(ttl, attr, 0)
    }

    /// The entry READDIRPLUS carries for a name whose inode could not be read: node 0,
    /// which the kernel takes as "no attributes" (it lists the name and makes no dentry).
    pub fn unread() -> abi::EntryOut {
        abi::EntryOut {
            nodeid: 0,
            generation: 0,
            entry_valid: 0,
            attr_valid: 0,
            entry_valid_nsec: 0,
            attr_valid_nsec: 0,
            attr: abi::Attr::default(),
        }
    }

    /// Sends the entries gathered.
    pub fn send(self, reply: Reply<'_>) -> bool {
        reply.data(&self.buf)
    }
}

/// Tells the kernel what the daemon changed on its own.
#[derive(Clone)]
pub struct Notifier {
    dev: Arc<File>,
}

impl Notifier {
    /// Notifications written to the session's descriptor `dev`.
    pub fn new(dev: Arc<File>) -> Notifier {
        Notifier { dev }
    }

    /// Drops the kernel's cached attributes of `ino` and, from `off` (negative: none), `len`
    /// bytes of its pages (0: to the end). `ENOENT`: the kernel does not hold the node.
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> io::Result<()> {
        let n = abi::NotifyInvalInode { ino, off, len };
        send(&self.dev, 0, abi::NOTIFY_INVAL_INODE, &[n.as_bytes()])
    }
}
