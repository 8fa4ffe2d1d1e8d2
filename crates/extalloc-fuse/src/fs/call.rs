//! What a call of the file system takes and gives, apart from the file system itself:
//! who makes it ([`Caller`]), the attributes it reports ([`Attr`]), and its errors
//! ([`Errno`], [`FsResult`], and how a volume error becomes an `errno`). `core.rs`
//! re-exports them, so every module under `fs/` names them from there.
//!
//! Data structures: plain values only. Invariant: none kept. Lock order: none.

use crate::inode::Inode;

/// An error for the kernel: an `errno` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

/// A volume error as the kernel sees it: its kind's errno ([`extalloc::ErrorKind::errno`]:
/// `EFBIG` only past the largest file, `ENOSPC`, `EINVAL`, `EUCLEAN`, `EIO`, ...), except
/// that the volume's own state (`WrongState`: shut down, not at rest; `Unrecognized`) is
/// `EIO`: the file system checked the request, so no such error is the caller's, and
/// `EINVAL` would tell the caller to fix an argument. Errors of the device or the
/// volume's state (not the caller's) are logged too.
impl From<extalloc::Error> for Errno {
    fn from(e: extalloc::Error) -> Errno {
        use extalloc::ErrorKind as K;
        // A caller's own limits (no space, no such file, too big) are not the volume's
        // trouble; anything else is logged.
        if !matches!(
            e.kind(),
            K::NoSpace | K::NotFound | K::FileTooBig | K::TransactionTooLarge
        ) {
            log::error!("volume error: {e}");
        }
        match e.kind() {
            K::WrongState | K::Unrecognized => Errno(libc::EIO),
            _ => Errno(e.errno()),
        }
    }
}

/// The result of a file system call.
pub type FsResult<T> = Result<T, Errno>;

/// Who makes a call (the kernel's request credentials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Caller {
    /// Root, for calls made by the project's own tools and tests.
    pub const ROOT: Caller = Caller { uid: 0, gid: 0 };
    /// No one: unprivileged and in no group (`u32::MAX`, which names no user), for a
    /// caller the daemon could not learn and for calls that do not ask who calls.
    pub const NOBODY: Caller = Caller {
        uid: u32::MAX,
        gid: u32::MAX,
    };

    /// Whose share of the device the caller's data may take (`extalloc::volume::Privilege`,
    /// ext4's reserved blocks): root's all of it, anyone else's all but the blocks kept for
    /// root, so an unprivileged writer gets `ENOSPC` where `statfs`'s available figure
    /// reaches 0. The daemon knows the caller's ids, not its capabilities: root is uid 0
    /// (ext4 also lets `CAP_SYS_RESOURCE` and its `resuid`/`resgid` in).
    pub fn privilege(self) -> extalloc::volume::Privilege {
        match self.uid {
            0 => extalloc::volume::Privilege::Superuser,
            _ => extalloc::volume::Privilege::User,
        }
    }
}

/// An inode as `stat` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// The attributes kept on the volume.
    pub inode: Inode,
    /// Size in bytes.
    pub size: u64,
    /// Bytes of blocks mapped.
    pub allocated: u64,
}
