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
pub struct Request {
    /// The request's number, which its reply carries.
    pub unique: u64,
    /// The FUSE opcode (`FUSE_LOOKUP`, ...), as the kernel sent it.
    pub opcode: u32,
    /// The node the request is about (the parent directory for a name).
    pub nodeid: u64,
    /// The caller's file-system user id (mapped on an idmapped mount).
    pub uid: u32,
    /// The caller's file-system group id.
    pub gid: u32,
    /// The caller's thread-group id (0 for the kernel's own requests).
    pub pid: u32,
}

/// A time a setattr sets: now, or seconds (before 1970: negative) and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    /// The time of the request (`FATTR_*TIME_NOW`).
    Now,
    /// Seconds since 1970 and nanoseconds.
    At(i64, u32),
}

/// What a setattr changes (`None`: left alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct Setattr {
    /// The mode (`chmod`).
    pub mode: Option<u32>,
    /// The owner (`chown`).
    pub uid: Option<u32>,
    /// The group (`chown`).
    pub gid: Option<u32>,
    /// The size (`truncate`).
    pub size: Option<u64>,
    /// The access time (`utimensat`).
    pub atime: Option<TimeOrNow>,
    /// The modification time.
    pub mtime: Option<TimeOrNow>,
    /// The change time (the writeback cache's own update).
    pub ctime: Option<(i64, u32)>,
    /// The open file the change came through (`FATTR_FH`): an `ftruncate`, or the
    /// writeback cache's own time update.
    pub fh: Option<u64>,
}

/// A request's arguments, by opcode.
#[derive(Debug)]
pub enum Op<'a> {
    /// `FUSE_INIT`: the kernel's protocol version and what it offers.
    Init(abi::InitIn),
    /// `FUSE_LOOKUP`: a name in the directory `nodeid`.
    Lookup(&'a OsStr),
    /// `FUSE_FORGET`: the kernel drops this many references to `nodeid` (no reply).
    Forget(u64),
    /// `FUSE_BATCH_FORGET`: forgets of several nodes (no reply).
    BatchForget(Vec<abi::ForgetOne>),
    /// Attributes, through the open file `fh` when the kernel names one (a cached write
    /// or read, `lseek`: `FUSE_GETATTR_FH`).
    Getattr(Option<u64>),
    /// The statx flags and mask are not read: every reply carries all a statx can.
    /// As `Getattr`.
    Statx(Option<u64>),
    /// `FUSE_SETATTR`.
    Setattr(Setattr),
    /// `FUSE_READLINK`.
    Readlink,
    /// `FUSE_SYMLINK`: `name` in directory `nodeid`, pointing at `target`.
    Symlink {
        /// The new link's name.
        name: &'a OsStr,
        /// What it points at.
        target: &'a OsStr,
    },
    /// `FUSE_MKNOD`: a special file or regular file `name` in directory `nodeid`.
    Mknod {
        /// The new name.
        name: &'a OsStr,
        /// Type and permission bits.
        mode: u32,
        /// The caller's umask (applied by the file system under `DONT_MASK`).
        umask: u32,
        /// The device number of a device node.
        rdev: u32,
    },
    /// `FUSE_MKDIR`: directory `name` in directory `nodeid`.
    Mkdir {
        /// The new name.
        name: &'a OsStr,
        /// Permission bits.
        mode: u32,
        /// The caller's umask.
        umask: u32,
    },
    /// `FUSE_UNLINK`: a name in directory `nodeid`.
    Unlink(&'a OsStr),
    /// `FUSE_RMDIR`: a name in directory `nodeid`.
    Rmdir(&'a OsStr),
    /// `FUSE_RENAME` and `FUSE_RENAME2`: `name` in directory `nodeid` to `newname` in `newdir`.
    Rename {
        /// The name moved.
        name: &'a OsStr,
        /// The directory it moves to.
        newdir: u64,
        /// Its new name.
        newname: &'a OsStr,
        /// `RENAME_NOREPLACE`, `RENAME_EXCHANGE`, `RENAME_WHITEOUT` (0 for `FUSE_RENAME`).
        flags: u32,
    },
    /// `FUSE_LINK`: a new name in directory `nodeid` for node `ino`.
    Link {
        /// The node linked.
        ino: u64,
        /// The new name.
        newname: &'a OsStr,
    },
    /// `FUSE_OPEN`.
    Open {
        /// The `open(2)` flags.
        flags: i32,
    },
    /// `FUSE_READ`.
    Read {
        /// Where it starts.
        offset: u64,
        /// At most this many bytes.
        size: u32,
    },
    /// `FUSE_WRITE`.
    Write {
        /// Where it starts.
        offset: u64,
        /// The bytes, in place in the request buffer.
        data: &'a [u8],
        /// `WRITE_CACHE`, `WRITE_KILL_SUIDGID`.
        flags: u32,
    },
    /// `FUSE_STATFS`.
    Statfs,
    /// `FUSE_RELEASE`: the last close of an open file.
    Release,
    /// `FUSE_FSYNC`.
    Fsync,
    /// `FUSE_SETXATTR`.
    Setxattr {
        /// The attribute's name.
        name: &'a OsStr,
        /// Its value.
        value: &'a [u8],
        /// `XATTR_CREATE`, `XATTR_REPLACE`.
        flags: i32,
    },
    /// `FUSE_GETXATTR`.
    Getxattr {
        /// The attribute's name.
        name: &'a OsStr,
        /// The caller's buffer (0: it asks for the size).
        size: u32,
    },
    /// `FUSE_LISTXATTR`.
    Listxattr {
        /// The caller's buffer (0: it asks for the size).
        size: u32,
    },
    /// `FUSE_REMOVEXATTR`.
    Removexattr(&'a OsStr),
    /// `FUSE_FLUSH`: a `close(2)` of an open file.
    Flush,
    /// `FUSE_OPENDIR`.
    Opendir,
    /// `FUSE_READDIR` and `FUSE_READDIRPLUS`.
    Readdir {
        /// The open directory.
        fh: u64,
        /// Where the listing resumes (an offset a reply gave).
        offset: u64,
        /// At most this many bytes.
        size: u32,
        /// `FUSE_READDIRPLUS`: each entry with its attributes.
        plus: bool,
    },
    /// `FUSE_RELEASEDIR`.
    Releasedir {
        /// The open directory.
        fh: u64,
    },
    /// `FUSE_FSYNCDIR`.
    Fsyncdir,
    /// `FUSE_CREATE`: a regular file `name` in directory `nodeid`, made and opened.
    Create {
        /// The new name.
        name: &'a OsStr,
        /// Flags, mode and umask.
        create: abi::CreateIn,
    },
    /// `FUSE_TMPFILE`: an unnamed regular file in directory `nodeid` (`O_TMPFILE`).
    Tmpfile {
        /// Flags, mode and umask.
        create: abi::CreateIn,
    },
    /// `FUSE_INTERRUPT` (no reply).
    Interrupt,
    /// `FUSE_DESTROY`: the connection ends (unmount).
    Destroy,
    /// `FUSE_IOCTL` (the restricted form: the argument's bytes as sent).
    Ioctl {
        /// The ioctl's command.
        cmd: u32,
        /// Its input bytes.
        data: &'a [u8],
    },
    /// `FUSE_FALLOCATE`.
    Fallocate {
        /// Where the range starts.
        offset: u64,
        /// Its length.
        length: u64,
        /// `FALLOC_FL_*`.
        mode: i32,
    },
    /// `FUSE_COPY_FILE_RANGE`: from node `nodeid` to `ino_out`.
    CopyFileRange {
        /// Where the source range starts.
        off_in: u64,
        /// The destination node.
        ino_out: u64,
        /// Where the destination range starts.
        off_out: u64,
        /// The range's length.
        len: u64,
    },
    /// A reply to a notification (none is asked for).
    NotifyReply,
    /// An opcode this transport does not decode (answered `ENOSYS`).
    Unknown,
    /// A request shorter than its opcode's structure, or a name without its NUL
    /// (answered `EIO`).
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
pub fn parse(buf: &[u8]) -> Option<(Request, Op<'_>)> {
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
