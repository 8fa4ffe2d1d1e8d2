//! A request as read from `/dev/fuse`: its header ([`Request`]) and its arguments decoded
//! by opcode ([`Op`]), borrowing the read buffer (a write's data and every name are never
//! copied).
//!
//! Data structures: [`Request`], [`Op`]. Invariant: a request whose arguments are shorter
//! than its opcode's structure, or whose names are not NUL-terminated, decodes to
//! [`Op::Malformed`] (answered `EIO`), never to a guess; an opcode this daemon does not
//! serve decodes to [`Op::Unknown`] (answered `ENOSYS`, which tells the kernel not to send
//! it again where it can do without). Lock order: none.

use super::abi;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use zerocopy::FromBytes;

/// Who asks and about what: the request's header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub(crate) unique: u64,
    pub(crate) opcode: u32,
    /// The node the request is about (the parent directory for a name).
    pub(crate) nodeid: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

/// A time a setattr sets: now, or seconds (before 1970: negative) and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeOrNow {
    Now,
    At(i64, u32),
}

/// What a setattr changes (`None`: left alone).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Setattr {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<TimeOrNow>,
    pub(crate) mtime: Option<TimeOrNow>,
    pub(crate) ctime: Option<(i64, u32)>,
    /// The open file the change came through (`FATTR_FH`): an `ftruncate`, or the
    /// writeback cache's own time update.
    pub(crate) fh: Option<u64>,
}

/// A request's arguments, by opcode.
#[derive(Debug)]
pub(crate) enum Op<'a> {
    Init(abi::InitIn),
    Lookup(&'a OsStr),
    Forget(u64),
    BatchForget(Vec<abi::ForgetOne>),
    /// Attributes, through the open file `fh` when the kernel names one (a cached write
    /// or read, `lseek`: `FUSE_GETATTR_FH`).
    Getattr(Option<u64>),
    /// The statx flags and mask are not read: every reply carries all a statx can.
    /// As `Getattr`.
    Statx(Option<u64>),
    Setattr(Setattr),
    Readlink,
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Mknod {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    },
    Mkdir {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
    },
    Unlink(&'a OsStr),
    Rmdir(&'a OsStr),
    Rename {
        name: &'a OsStr,
        newdir: u64,
        newname: &'a OsStr,
        flags: u32,
    },
    Link {
        ino: u64,
        newname: &'a OsStr,
    },
    Open {
        flags: i32,
    },
    Read {
        offset: u64,
        size: u32,
    },
    Write {
        offset: u64,
        data: &'a [u8],
        flags: u32,
    },
    Statfs,
    Release,
    Fsync,
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: i32,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr(&'a OsStr),
    Flush,
    Opendir,
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir,
    Create {
        name: &'a OsStr,
        create: abi::CreateIn,
    },
    Tmpfile {
        create: abi::CreateIn,
    },
    Interrupt,
    Destroy,
    Ioctl {
        cmd: u32,
        data: &'a [u8],
    },
    Fallocate {
        offset: u64,
        length: u64,
        mode: i32,
    },
    CopyFileRange {
        off_in: u64,
        ino_out: u64,
        off_out: u64,
        len: u64,
    },
    /// A reply to a notification (none is asked for).
    NotifyReply,
    Unknown,
    Malformed,
}

/// Reads a request's arguments in order.
struct Args<'a>(&'a [u8]);

impl<'a> Args<'a> {
    fn fixed<T: FromBytes>(&mut self) -> Option<T> {
        let (v, rest) = T::read_from_prefix(self.0).ok()?;
        debug_assert_eq!(
            self.0.len() - rest.len(),
            std::mem::size_of::<T>(),
            "one argument read"
        );
        self.0 = rest;
        Some(v)
    }

    fn name(&mut self) -> Option<&'a OsStr> {
        let end = self.0.iter().position(|&b| b == 0)?;
        let (name, rest) = self.0.split_at(end);
        debug_assert_eq!(rest.first(), Some(&0), "a name ends at its NUL");
        self.0 = &rest[1..];
        Some(OsStr::from_bytes(name))
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

/// The header and arguments of one request of `buf` (as read: the header's length is the
/// buffer's); `None` when the buffer is shorter than a header says.
pub(crate) fn parse(buf: &[u8]) -> Option<(Request, Op<'_>)> {
    let (h, args) = abi::InHeader::read_from_prefix(buf).ok()?;
    if h.len as usize != buf.len() {
        return None;
    }
    let req = Request {
        unique: h.unique,
        opcode: h.opcode,
        nodeid: h.nodeid,
        uid: h.uid,
        gid: h.gid,
        pid: h.pid,
    };
    // Extensions the kernel appends (a security context, supplementary groups) come only
    // when asked for at init; none are.
    let ext = usize::from(h.total_extlen) * 8;
    let args = &args[..args.len().saturating_sub(ext)];
    let op = decode(h.opcode, &mut Args(args)).unwrap_or(Op::Malformed);
    Some((req, op))
}

/// The arguments of `opcode`; `None` when they are malformed.
fn decode<'a>(opcode: u32, a: &mut Args<'a>) -> Option<Op<'a>> {
    use abi::*;
    match opcode {
        INIT | LOOKUP | FORGET | BATCH_FORGET | GETATTR | STATX | SETATTR | READLINK | SYMLINK
        | MKNOD | MKDIR | UNLINK | RMDIR | RENAME | RENAME2 | LINK | CREATE | TMPFILE => {
            nodes(opcode, a)
        }
        SETXATTR | GETXATTR | LISTXATTR | REMOVEXATTR => xattrs(opcode, a),
        _ => data(opcode, a),
    }
}

/// [`decode`] of the requests about nodes and names.
fn nodes<'a>(opcode: u32, a: &mut Args<'a>) -> Option<Op<'a>> {
    use abi::*;
    Some(match opcode {
        INIT => Op::Init(init(a)?),
        LOOKUP => Op::Lookup(a.name()?),
        FORGET => Op::Forget(a.fixed::<ForgetIn>()?.nlookup),
        BATCH_FORGET => batch_forget(a)?,
        // Kernels before protocol 7.9 send no arguments.
        GETATTR => Op::Getattr(
            a.fixed::<GetattrIn>()
                .filter(|g| g.getattr_flags & GETATTR_FH != 0)
                .map(|g| g.fh),
        ),
        STATX => {
            let s = a.fixed::<StatxIn>()?;
            Op::Statx((s.getattr_flags & GETATTR_FH != 0).then_some(s.fh))
        }
        SETATTR => Op::Setattr(setattr(a.fixed()?)),
        READLINK => Op::Readlink,
        SYMLINK => Op::Symlink {
            name: a.name()?,
            target: a.name()?,
        },
        MKNOD => {
            let m: MknodIn = a.fixed()?;
            Op::Mknod {
                mode: m.mode,
                umask: m.umask,
                rdev: m.rdev,
                name: a.name()?,
            }
        }
        MKDIR => {
            let m: MkdirIn = a.fixed()?;
            Op::Mkdir {
                mode: m.mode,
                umask: m.umask,
                name: a.name()?,
            }
        }
        UNLINK => Op::Unlink(a.name()?),
        RMDIR => Op::Rmdir(a.name()?),
        RENAME => {
            let r: RenameIn = a.fixed()?;
            Op::Rename {
                newdir: r.newdir,
                flags: 0,
                name: a.name()?,
                newname: a.name()?,
            }
        }
        RENAME2 => {
            let r: Rename2In = a.fixed()?;
            Op::Rename {
                newdir: r.newdir,
                flags: r.flags,
                name: a.name()?,
                newname: a.name()?,
            }
        }
        LINK => Op::Link {
            ino: a.fixed::<LinkIn>()?.oldnodeid,
            newname: a.name()?,
        },
        CREATE => Op::Create {
            create: a.fixed()?,
            name: a.name()?,
        },
        TMPFILE => Op::Tmpfile { create: a.fixed()? },
        _ => unreachable!("opcode {opcode} is not a node request"),
    })
}

/// [`decode`] of the extended attribute requests.
fn xattrs<'a>(opcode: u32, a: &mut Args<'a>) -> Option<Op<'a>> {
    use abi::*;
    Some(match opcode {
        SETXATTR => {
            let s: SetxattrIn = a.fixed()?;
            let name = a.name()?;
            let value = a.rest().get(..s.size as usize)?;
            Op::Setxattr {
                name,
                value,
                flags: s.flags as i32,
            }
        }
        GETXATTR => {
            let g: GetxattrIn = a.fixed()?;
            Op::Getxattr {
                size: g.size,
                name: a.name()?,
            }
        }
        LISTXATTR => Op::Listxattr {
            size: a.fixed::<GetxattrIn>()?.size,
        },
        REMOVEXATTR => Op::Removexattr(a.name()?),
        _ => unreachable!("opcode {opcode} is not an extended attribute request"),
    })
}

/// [`decode`] of the requests about data, listings and the rest.
fn data<'a>(opcode: u32, a: &mut Args<'a>) -> Option<Op<'a>> {
    use abi::*;
    Some(match opcode {
        OPEN => Op::Open {
            flags: a.fixed::<OpenIn>()?.flags as i32,
        },
        READ => {
            let r: ReadIn = a.fixed()?;
            Op::Read {
                offset: r.offset,
                size: r.size,
            }
        }
        WRITE => {
            let w: WriteIn = a.fixed()?;
            let data = a.rest().get(..w.size as usize)?;
            Op::Write {
                offset: w.offset,
                data,
                flags: w.write_flags,
            }
        }
        STATFS => Op::Statfs,
        RELEASE => Op::Release,
        FSYNC => Op::Fsync,
        FLUSH => Op::Flush,
        OPENDIR => Op::Opendir,
        READDIR | READDIRPLUS => {
            let r: ReadIn = a.fixed()?;
            let plus = opcode == READDIRPLUS;
            Op::Readdir {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
                plus,
            }
        }
        RELEASEDIR => Op::Releasedir {
            fh: a.fixed::<ReleaseIn>()?.fh,
        },
        FSYNCDIR => Op::Fsyncdir,
        INTERRUPT => Op::Interrupt,
        DESTROY => Op::Destroy,
        IOCTL => {
            let i: IoctlIn = a.fixed()?;
            let data = a.rest().get(..i.in_size as usize)?;
            Op::Ioctl { cmd: i.cmd, data }
        }
        FALLOCATE => {
            let f: FallocateIn = a.fixed()?;
            Op::Fallocate {
                offset: f.offset,
                length: f.length,
                mode: f.mode as i32,
            }
        }
        COPY_FILE_RANGE => {
            let c: CopyFileRangeIn = a.fixed()?;
            let (off_in, ino_out, off_out, len) = (c.off_in, c.nodeid_out, c.off_out, c.len);
            Op::CopyFileRange {
                off_in,
                ino_out,
                off_out,
                len,
            }
        }
        NOTIFY_REPLY => Op::NotifyReply,
        _ => Op::Unknown,
    })
}

/// `FUSE_INIT`'s request: 64 bytes since 7.36, 16 before (no `flags2`).
fn init(a: &mut Args<'_>) -> Option<abi::InitIn> {
    if let Some(i) = a.fixed::<abi::InitIn>() {
        return Some(i);
    }
    let [major, minor, max_readahead, flags] = a.fixed::<[u32; 4]>()?;
    Some(abi::InitIn {
        major,
        minor,
        max_readahead,
        flags,
        ..Default::default()
    })
}

fn batch_forget<'a>(a: &mut Args<'a>) -> Option<Op<'a>> {
    let b: abi::BatchForgetIn = a.fixed()?;
    let nodes = (0..b.count)
        .map(|_| a.fixed::<abi::ForgetOne>())
        .collect::<Option<Vec<_>>>()?;
    Some(Op::BatchForget(nodes))
}

fn setattr(s: abi::SetattrIn) -> Setattr {
    use abi::*;
    let on = |bit: u32| s.valid & bit != 0;
    // The kernel's times are signed seconds in an unsigned field.
    let at = |secs: u64, nanos: u32| (secs as i64, nanos);
    let time = |bit, now, secs, nanos| match (on(bit), on(now)) {
        (_, true) => Some(TimeOrNow::Now),
        (true, false) => {
            let (s, n) = at(secs, nanos);
            Some(TimeOrNow::At(s, n))
        }
        _ => None,
    };
    Setattr {
        mode: on(FATTR_MODE).then_some(s.mode),
        uid: on(FATTR_UID).then_some(s.uid),
        gid: on(FATTR_GID).then_some(s.gid),
        size: on(FATTR_SIZE).then_some(s.size),
        atime: time(FATTR_ATIME, FATTR_ATIME_NOW, s.atime, s.atimensec),
        mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, s.mtime, s.mtimensec),
        ctime: on(FATTR_CTIME).then(|| at(s.ctime, s.ctimensec)),
        fh: on(FATTR_FH).then_some(s.fh),
    }
}
