//! The kernel's FUSE protocol as bytes: the request and reply structures the daemon reads
//! and writes on `/dev/fuse`, their opcodes and flags (Linux's `include/uapi/linux/fuse.h`,
//! protocol 7.x; what this daemon speaks, no more).
//!
//! Data structures: `#[repr(C)]` structures laid out as the kernel's, read from a request's
//! bytes and written into a reply's with `zerocopy` (no `unsafe` here). Invariant: each
//! structure's size is the kernel's (asserted below at compile time); a field this daemon
//! never sets is zero. Lock order: none (plain values).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! abi {
    ($($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* } = $size:expr;)*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            #[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
            // The fields are the kernel's, named and ordered as in its structure of the same
            // name (`include/uapi/linux/fuse.h`), which documents them.
            #[allow(missing_docs)]
            pub struct $name { $($(#[$fm])* pub $f: $t,)* }
            const _: () = assert!(std::mem::size_of::<$name>() == $size);
        )*
    };
}

abi! {
    /// Every request starts with it.
    pub struct InHeader { pub len: u32, pub opcode: u32, pub unique: u64, pub nodeid: u64,
        pub uid: u32, pub gid: u32, pub pid: u32, pub total_extlen: u16, pub padding: u16, } = 40;
    /// Every reply and notification starts with it.
    pub struct OutHeader { pub len: u32, pub error: i32, pub unique: u64, } = 16;
    /// `FUSE_INIT`'s request (`flags2` only with `FUSE_INIT_EXT`).
    pub struct InitIn { pub major: u32, pub minor: u32, pub max_readahead: u32, pub flags: u32,
        pub flags2: u32, pub unused: [u32; 11], } = 64;
    /// `FUSE_INIT`'s reply.
    pub struct InitOut { pub major: u32, pub minor: u32, pub max_readahead: u32, pub flags: u32,
        pub max_background: u16, pub congestion_threshold: u16, pub max_write: u32,
        pub time_gran: u32, pub max_pages: u16, pub map_alignment: u16, pub flags2: u32,
        pub max_stack_depth: u32, pub unused: [u32; 6], } = 64;
    /// An inode's attributes in a reply.
    pub struct Attr { pub ino: u64, pub size: u64, pub blocks: u64, pub atime: u64,
        pub mtime: u64, pub ctime: u64, pub atimensec: u32, pub mtimensec: u32,
        pub ctimensec: u32, pub mode: u32, pub nlink: u32, pub uid: u32, pub gid: u32,
        pub rdev: u32, pub blksize: u32, pub flags: u32, } = 88;
    /// A lookup's (and a make's) reply.
    pub struct EntryOut { pub nodeid: u64, pub generation: u64, pub entry_valid: u64,
        pub attr_valid: u64, pub entry_valid_nsec: u32, pub attr_valid_nsec: u32,
        pub attr: Attr, } = 128;
    /// `FUSE_GETATTR`'s and `FUSE_SETATTR`'s reply.
    pub struct AttrOut { pub attr_valid: u64, pub attr_valid_nsec: u32, pub dummy: u32,
        pub attr: Attr, } = 104;
    /// A time in a statx reply.
    pub struct SxTime { pub tv_sec: i64, pub tv_nsec: u32, pub reserved: i32, } = 16;
    /// The attributes of a statx reply.
    pub struct Statx { pub mask: u32, pub blksize: u32, pub attributes: u64, pub nlink: u32,
        pub uid: u32, pub gid: u32, pub mode: u16, pub spare0: u16, pub ino: u64, pub size: u64,
        pub blocks: u64, pub attributes_mask: u64, pub atime: SxTime, pub btime: SxTime,
        pub ctime: SxTime, pub mtime: SxTime, pub rdev_major: u32, pub rdev_minor: u32,
        pub dev_major: u32, pub dev_minor: u32, pub spare2: [u64; 14], } = 256;
    /// `FUSE_GETATTR`'s request.
    pub struct GetattrIn { pub getattr_flags: u32, pub dummy: u32, pub fh: u64, } = 16;
    /// `FUSE_STATX`'s request.
    pub struct StatxIn { pub getattr_flags: u32, pub reserved: u32, pub fh: u64,
        pub sx_flags: u32, pub sx_mask: u32, } = 24;
    /// `FUSE_STATX`'s reply.
    pub struct StatxOut { pub attr_valid: u64, pub attr_valid_nsec: u32, pub flags: u32,
        pub spare: [u64; 2], pub stat: Statx, } = 288;
    /// `FUSE_FORGET`'s request.
    pub struct ForgetIn { pub nlookup: u64, } = 8;
    /// One node of `FUSE_BATCH_FORGET`.
    pub struct ForgetOne { pub nodeid: u64, pub nlookup: u64, } = 16;
    /// `FUSE_BATCH_FORGET`'s request, followed by `count` [`ForgetOne`].
    pub struct BatchForgetIn { pub count: u32, pub dummy: u32, } = 8;
    /// `FUSE_SETATTR`'s request.
    pub struct SetattrIn { pub valid: u32, pub padding: u32, pub fh: u64, pub size: u64,
        pub lock_owner: u64, pub atime: u64, pub mtime: u64, pub ctime: u64,
        pub atimensec: u32, pub mtimensec: u32, pub ctimensec: u32, pub mode: u32,
        pub unused4: u32, pub uid: u32, pub gid: u32, pub unused5: u32, } = 88;
    /// `FUSE_MKNOD`'s request, followed by the name.
    pub struct MknodIn { pub mode: u32, pub rdev: u32, pub umask: u32, pub padding: u32, } = 16;
    /// `FUSE_MKDIR`'s request, followed by the name.
    pub struct MkdirIn { pub mode: u32, pub umask: u32, } = 8;
    /// `FUSE_RENAME`'s request, followed by both names.
    pub struct RenameIn { pub newdir: u64, } = 8;
    /// `FUSE_RENAME2`'s request, followed by both names.
    pub struct Rename2In { pub newdir: u64, pub flags: u32, pub padding: u32, } = 16;
    /// `FUSE_LINK`'s request, followed by the new name.
    pub struct LinkIn { pub oldnodeid: u64, } = 8;
    /// `FUSE_OPEN`'s and `FUSE_OPENDIR`'s request.
    pub struct OpenIn { pub flags: u32, pub open_flags: u32, } = 8;
    /// `FUSE_CREATE`'s and `FUSE_TMPFILE`'s request, followed by the name.
    pub struct CreateIn { pub flags: u32, pub mode: u32, pub umask: u32, pub open_flags: u32, } = 16;
    /// An open's reply.
    pub struct OpenOut { pub fh: u64, pub open_flags: u32, pub backing_id: i32, } = 16;
    /// `FUSE_READ`'s, `FUSE_READDIR`'s and `FUSE_READDIRPLUS`'s request.
    pub struct ReadIn { pub fh: u64, pub offset: u64, pub size: u32, pub read_flags: u32,
        pub lock_owner: u64, pub flags: u32, pub padding: u32, } = 40;
    /// `FUSE_WRITE`'s request, followed by the data.
    pub struct WriteIn { pub fh: u64, pub offset: u64, pub size: u32, pub write_flags: u32,
        pub lock_owner: u64, pub flags: u32, pub padding: u32, } = 40;
    /// A write's (and a copy's) reply.
    pub struct WriteOut { pub size: u32, pub padding: u32, } = 8;
    /// `FUSE_STATFS`'s reply.
    pub struct StatfsOut { pub blocks: u64, pub bfree: u64, pub bavail: u64, pub files: u64,
        pub ffree: u64, pub bsize: u32, pub namelen: u32, pub frsize: u32, pub padding: u32,
        pub spare: [u32; 6], } = 80;
    /// `FUSE_RELEASE`'s and `FUSE_RELEASEDIR`'s request.
    pub struct ReleaseIn { pub fh: u64, pub flags: u32, pub release_flags: u32,
        pub lock_owner: u64, } = 24;
    /// `FUSE_FSYNC`'s and `FUSE_FSYNCDIR`'s request.
    pub struct FsyncIn { pub fh: u64, pub fsync_flags: u32, pub padding: u32, } = 16;
    /// `FUSE_SETXATTR`'s request (without `FUSE_SETXATTR_EXT`), then the name and value.
    pub struct SetxattrIn { pub size: u32, pub flags: u32, } = 8;
    /// `FUSE_GETXATTR`'s and `FUSE_LISTXATTR`'s request.
    pub struct GetxattrIn { pub size: u32, pub padding: u32, } = 8;
    /// Their reply when the caller asked for the size only.
    pub struct GetxattrOut { pub size: u32, pub padding: u32, } = 8;
    /// `FUSE_IOCTL`'s request, followed by `in_size` bytes.
    pub struct IoctlIn { pub fh: u64, pub flags: u32, pub cmd: u32, pub arg: u64,
        pub in_size: u32, pub out_size: u32, } = 32;
    /// `FUSE_IOCTL`'s reply, followed by the bytes copied out.
    pub struct IoctlOut { pub result: i32, pub flags: u32, pub in_iovs: u32,
        pub out_iovs: u32, } = 16;
    /// `FUSE_FALLOCATE`'s request.
    pub struct FallocateIn { pub fh: u64, pub offset: u64, pub length: u64, pub mode: u32,
        pub padding: u32, } = 32;
    /// `FUSE_COPY_FILE_RANGE`'s request.
    pub struct CopyFileRangeIn { pub fh_in: u64, pub off_in: u64, pub nodeid_out: u64,
        pub fh_out: u64, pub off_out: u64, pub len: u64, pub flags: u64, } = 56;
    /// A listing's entry, followed by its name, padded to 8 bytes.
    pub struct Dirent { pub ino: u64, pub off: u64, pub namelen: u32, pub kind: u32, } = 24;
    /// An io_uring entry's own part of its header buffer (at [`RING_ENT_IN_OUT`]).
    pub struct RingEntInOut { pub flags: u64, pub commit_id: u64, pub payload_sz: u32,
        pub padding: u32, pub reserved: u64, } = 32;
    /// The FUSE part of an io_uring command (`fuse_uring_cmd_req`, in the entry's cmd area).
    pub struct RingCmdReq { pub flags: u64, pub commit_id: u64, pub qid: u16,
        pub padding: [u8; 6], } = 24;
    /// `FUSE_NOTIFY_INVAL_INODE`'s notification.
    pub struct NotifyInvalInode { pub ino: u64, pub off: i64, pub len: i64, } = 24;
}

// Opcodes.
pub const LOOKUP: u32 = 1;
pub const FORGET: u32 = 2;
pub const GETATTR: u32 = 3;
pub const SETATTR: u32 = 4;
pub const READLINK: u32 = 5;
pub const SYMLINK: u32 = 6;
pub const MKNOD: u32 = 8;
pub const MKDIR: u32 = 9;
pub const UNLINK: u32 = 10;
pub const RMDIR: u32 = 11;
pub const RENAME: u32 = 12;
pub const LINK: u32 = 13;
pub const OPEN: u32 = 14;
pub const READ: u32 = 15;
pub const WRITE: u32 = 16;
pub const STATFS: u32 = 17;
pub const RELEASE: u32 = 18;
pub const FSYNC: u32 = 20;
pub const SETXATTR: u32 = 21;
pub const GETXATTR: u32 = 22;
pub const LISTXATTR: u32 = 23;
pub const REMOVEXATTR: u32 = 24;
pub const FLUSH: u32 = 25;
pub const INIT: u32 = 26;
pub const OPENDIR: u32 = 27;
pub const READDIR: u32 = 28;
pub const RELEASEDIR: u32 = 29;
pub const FSYNCDIR: u32 = 30;
pub const CREATE: u32 = 35;
pub const INTERRUPT: u32 = 36;
pub const DESTROY: u32 = 38;
pub const IOCTL: u32 = 39;
pub const NOTIFY_REPLY: u32 = 41;
pub const BATCH_FORGET: u32 = 42;
pub const FALLOCATE: u32 = 43;
pub const READDIRPLUS: u32 = 44;
pub const RENAME2: u32 = 45;
pub const COPY_FILE_RANGE: u32 = 47;
pub const TMPFILE: u32 = 51;
pub const STATX: u32 = 52;

/// The protocol's major version; the minor this daemon answers with at most.
pub const KERNEL_MAJOR: u32 = 7;
#[allow(missing_docs)] // documented with KERNEL_MAJOR
pub const KERNEL_MINOR: u32 = 40;

// `FUSE_INIT` flags (bits 32 and up travel in `flags2`).
pub const ASYNC_READ: u64 = 1 << 0;
/// `FUSE_EXPORT_SUPPORT`: lookups of `.` and `..` are answered (file handles, NFS export).
pub const EXPORT_SUPPORT: u64 = 1 << 4;
pub const BIG_WRITES: u64 = 1 << 5;
/// `FUSE_DONT_MASK`: the kernel leaves the umask to the file system (POSIX ACLs' defaults).
pub const DONT_MASK: u64 = 1 << 6;
/// `FUSE_DO_READDIRPLUS`: listings may carry each entry's attributes.
pub const DO_READDIRPLUS: u64 = 1 << 13;
/// `FUSE_READDIRPLUS_AUTO`: the kernel chooses between plain and plus listings.
pub const READDIRPLUS_AUTO: u64 = 1 << 14;
/// `FUSE_WRITEBACK_CACHE`: buffered writes go to the kernel's page cache, written back later.
pub const WRITEBACK_CACHE: u64 = 1 << 16;
/// `FUSE_PARALLEL_DIROPS`: lookups and listings of one directory may run at once.
pub const PARALLEL_DIROPS: u64 = 1 << 18;
/// `FUSE_POSIX_ACL`: the kernel enforces the ACLs the file system stores.
pub const POSIX_ACL: u64 = 1 << 20;
pub const MAX_PAGES: u64 = 1 << 22;
/// `FUSE_HANDLE_KILLPRIV_V2`: the file system drops set-id bits on write and truncate.
pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
pub const INIT_EXT: u64 = 1 << 30;
/// `FUSE_DIRECT_IO_ALLOW_MMAP`: files opened with `FOPEN_DIRECT_IO` may still be mapped shared.
pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
/// `FUSE_ALLOW_IDMAP`: the mount may be idmapped (the kernel maps ids in requests).
pub const ALLOW_IDMAP: u64 = 1 << 40;

// `SETATTR`'s `valid` bits.
pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;
pub const FATTR_SIZE: u32 = 1 << 3;
pub const FATTR_ATIME: u32 = 1 << 4;
pub const FATTR_MTIME: u32 = 1 << 5;
pub const FATTR_FH: u32 = 1 << 6;
pub const FATTR_ATIME_NOW: u32 = 1 << 7;
pub const FATTR_MTIME_NOW: u32 = 1 << 8;
pub const FATTR_CTIME: u32 = 1 << 10;

// `GETATTR`'s and `STATX`'s flags: `fh` names the open file the call came through.
pub const GETATTR_FH: u32 = 1 << 0;

// An open's reply flags.
/// `FOPEN_DIRECT_IO`: the open's reads and writes bypass the page cache, each a request.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `FOPEN_KEEP_CACHE`: the open keeps the file's cached pages.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;

// A write's flags.
/// `FUSE_WRITE_CACHE`: the write is the page cache's write back, not a caller's `write(2)`.
pub const WRITE_CACHE: u32 = 1 << 0;
/// `FUSE_WRITE_KILL_SUIDGID`: the write must drop the file's set-id bits.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// FUSE over io_uring (bit 9 of `flags2`).
pub const OVER_IO_URING: u64 = 1 << 41;

// An io_uring entry's header buffer (`fuse_uring_req_header`): the request's header (and
// the reply's) at 0, the opcode's structure at [`RING_OP`] (at most [`RING_OP_IN`] bytes),
// [`RingEntInOut`] at [`RING_ENT_IN_OUT`], its `payload_sz` [`RING_PAYLOAD_SZ`] into it.
pub const RING_HEADER: usize = 288;
pub const RING_OP: usize = 128;
pub const RING_OP_IN: usize = 128;
pub const RING_ENT_IN_OUT: usize = 256;
pub const RING_PAYLOAD_SZ: usize = 16;
const _: () = assert!(RING_ENT_IN_OUT + std::mem::size_of::<RingEntInOut>() == RING_HEADER);

/// `FUSE_NOTIFY_INVAL_INODE`, in a notification's `error` field.
pub const NOTIFY_INVAL_INODE: i32 = 2;

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`; a fresh `/dev/fuse` descriptor joins
/// the session whose descriptor the u32 names.
pub const DEV_IOC_CLONE: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u32>(229, 0);
const _: () = assert!(DEV_IOC_CLONE == 0x8004_e500);

/// `statx` mask bits a reply sets (`STATX_BASIC_STATS` and `STATX_BTIME`).
pub const STATX_BASIC_STATS: u32 = 0x7ff;
/// `STATX_BTIME`: the reply carries the birth time.
pub const STATX_BTIME: u32 = 0x800;

/// Bytes of a request buffer beyond the largest write (headers and names).
pub const BUFFER_HEADROOM: usize = 4096;
