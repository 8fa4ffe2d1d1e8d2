//! An inode's attributes as the volume keeps them: the attribute blob of the inode's
//! volume file.
//!
//! Data structures: [`Inode`] (kind, permission bits, owner, link count, device number,
//! three timestamps, the `chattr` flags whose bits, [`KEPT`], are defined here and
//! enforced by `fs/flags.rs`, and the birth time) and its encoding: a fixed 64-byte head
//! that starts with [`MAGIC`] and a version byte (so that a volume made by `extalloc put`,
//! whose blobs hold file names, is told apart from a file system), then for an inode with a
//! birth time a 16-byte birth-time block ([`BTIME_BYTES`]: seconds `i64`, nanoseconds
//! `u32`, 4 reserved bytes that are zero), then a tail: where the inode's extended
//! attributes are (`xattr.rs`). The versions:
//!
//! | version | bytes                     | birth time | tail |
//! | ------- | ------------------------- | ---------- | ---- |
//! | 1       | 64                        | none       | none |
//! | 2       | 64 + tail                 | none       | yes  |
//! | 3       | 64 + 16                   | yes        | none |
//! | 4       | 64 + 16 + tail            | yes        | yes  |
//!
//! Versions 1 and 2 are what volumes made before birth times hold; an inode read from
//! one has no birth time (`btime == None`) and is written back in the same version, so an
//! old volume keeps its format. An inode without attributes has no tail (version 1 or 3).
//!
//! Invariant: `decode(encode_with_tail(i, t)) == i` and [`tail`] gives `t` back, for every
//! inode (with or without a birth time) and tail; a blob of version 1 or 3 that is not
//! exactly its head, of version 2 or 4 without a tail, with nanoseconds of 1e9 or more,
//! nonzero reserved bytes, or that does not start with the magic or names an unknown kind
//! or version is refused, never guessed. Whoever rewrites an inode keeps its tail
//! ([`rewrite`]); nothing changes a birth time once the inode is made.
//!
//! Lock order: none (plain values).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// First bytes of every inode blob.
pub const MAGIC: &[u8; 4] = b"EXFS";
/// The encoding's version without a birth time or a tail.
const VERSION: u8 = 1;
/// The encoding's version with a tail (extended attributes), no birth time.
const VERSION_TAIL: u8 = 2;
/// The encoding's version with a birth time, no tail.
const VERSION_BTIME: u8 = 3;
/// The encoding's version with a birth time and a tail.
const VERSION_BTIME_TAIL: u8 = 4;
/// Bytes of an encoded inode's fixed head (all of a version 1 blob).
pub const INODE_BYTES: usize = 64;
/// Bytes of the birth-time block after the head (versions 3 and 4).
pub const BTIME_BYTES: usize = 16;
/// Bytes of the largest head: the fixed head and the birth-time block.
pub const INODE_MAX_BYTES: usize = INODE_BYTES + BTIME_BYTES;

// The `chattr` flags an inode keeps (`Inode::flags`), enforced by `fs/flags.rs`, which
// re-exports them.
/// `FS_SYNC_FL`.
pub const SYNC: u32 = 0x08;
/// `FS_IMMUTABLE_FL`.
pub const IMMUTABLE: u32 = 0x10;
/// `FS_APPEND_FL`.
pub const APPEND: u32 = 0x20;
/// `FS_NODUMP_FL`.
pub const NODUMP: u32 = 0x40;
/// `FS_NOATIME_FL`.
pub const NOATIME: u32 = 0x80;
/// The flags an inode keeps; `FS_IOC_SETFLAGS` with any other is `EOPNOTSUPP`.
pub const KEPT: u32 = SYNC | IMMUTABLE | APPEND | NODUMP | NOATIME;

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file: its data is the volume file's.
    File,
    /// A directory: its volume file holds its entry log (`dir.rs`).
    Dir,
    /// A symbolic link: its volume file holds the target.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A socket.
    Socket,
    /// A character device (only its number is kept).
    CharDevice,
    /// A block device (only its number is kept).
    BlockDevice,
}

impl Kind {
    /// The kind of a `st_mode` (its `S_IFMT` bits); `None` for an unknown type.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDevice,
            libc::S_IFBLK => Kind::BlockDevice,
            _ => return None,
        })
    }

    /// The kind's byte in an inode blob (1 to 7; 0 is no kind).
    pub(crate) fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
            Kind::Fifo => 4,
            Kind::Socket => 5,
            Kind::CharDevice => 6,
            Kind::BlockDevice => 7,
        }
    }

    /// The kind of a byte [`Kind::code`] gave; `None` for any other byte.
    pub(crate) fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDevice,
            7 => Kind::BlockDevice,
            _ => return None,
        })
    }

    /// The kind's `S_IFMT` bits (`st_mode`'s file type).
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDevice => libc::S_IFCHR,
            Kind::BlockDevice => libc::S_IFBLK,
        }
    }

    /// The kind as a directory entry's type (`DT_*`: the `S_IFMT` bits shifted down).
    pub fn dirent_type(self) -> u32 {
        self.mode_bits() >> 12
    }
}

/// A timestamp as seconds and nanoseconds since the epoch (negative seconds are before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time {
    /// Seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds within the second (below 1e9).
    pub nanos: u32,
}

impl Time {
    /// The current time, from the clock the kernel stamps inodes with
    /// (`CLOCK_REALTIME_COARSE`, ticks of a jiffy): a time the daemon sets is never later
    /// than one the kernel sets after it (fstests generic/423 compares them).
    pub fn now() -> Time {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        // The kernel keeps nanoseconds below a second.
        debug_assert!((0..1_000_000_000).contains(&ts.tv_nsec));
        Time {
            secs: ts.tv_sec,
            nanos: ts.tv_nsec as u32,
        }
    }

    /// From a `SystemTime`.
    pub fn from_system(t: SystemTime) -> Time {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Time {
                secs: d.as_secs() as i64,
                nanos: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (secs, nanos) = (d.as_secs() as i64, d.subsec_nanos());
                if nanos == 0 {
                    Time { secs: -secs, nanos }
                } else {
                    Time {
                        secs: -secs - 1,
                        nanos: 1_000_000_000 - nanos,
                    }
                }
            }
        }
    }

    /// As a `SystemTime`.
    pub fn to_system(self) -> SystemTime {
        if self.secs >= 0 {
            UNIX_EPOCH + Duration::new(self.secs as u64, self.nanos)
        } else {
            UNIX_EPOCH - Duration::from_secs(self.secs.unsigned_abs())
                + Duration::from_nanos(u64::from(self.nanos))
        }
    }
}

/// An inode's attributes (everything but its size, which the volume keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inode {
    /// What it is.
    pub kind: Kind,
    /// Permission bits with set-user-id, set-group-id and sticky (`mode & 0o7777`).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links: names for a file; 2 plus subdirectories for a directory.
    pub nlink: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Last access.
    pub atime: Time,
    /// Last change of the data.
    pub mtime: Time,
    /// Last change of the inode.
    pub ctime: Time,
    /// The `chattr` flags kept ([`KEPT`]: synchronous, immutable, append-only,
    /// no-dump, no-atime); the bytes were zero before flags existed, so older inodes read
    /// as having none.
    pub flags: u32,
    /// When it was made (`statx`'s `stx_btime`); `None` for an inode made before birth
    /// times were kept (a blob of version 1 or 2). Set by [`Inode::new`], never changed.
    pub btime: Option<Time>,
}

impl Inode {
    /// A new inode of `kind` made now.
    pub fn new(kind: Kind, perm: u16, uid: u32, gid: u32, rdev: u32) -> Inode {
        let now = Time::now();
        Inode {
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            rdev,
            atime: now,
            mtime: now,
            ctime: now,
            flags: 0,
            btime: Some(now),
        }
    }

    /// Bytes of its encoding before the tail: the fixed head, and the birth-time block
    /// when it has a birth time.
    pub fn head_bytes(&self) -> usize {
        if self.btime.is_some() {
            INODE_MAX_BYTES
        } else {
            INODE_BYTES
        }
    }

    /// The blob with `tail` after the head (version 2 or 4), or without one (version 1 or
    /// 3: an empty tail).
    pub fn encode_with_tail(&self, tail: &[u8]) -> Vec<u8> {
        let mut out = self.encode();
        if !tail.is_empty() {
            out[4] = if self.btime.is_some() {
                VERSION_BTIME_TAIL
            } else {
                VERSION_TAIL
            };
            out.extend_from_slice(tail);
        }
        out
    }

    /// The head alone (no tail: no extended attributes): 64 bytes of version 1, or with a
    /// birth time 80 bytes of version 3.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(INODE_MAX_BYTES);
        out.extend_from_slice(MAGIC);
        out.push(if self.btime.is_some() {
            VERSION_BTIME
        } else {
            VERSION
        });
        out.push(self.kind.code());
        out.extend_from_slice(&self.perm.to_le_bytes());
        for v in [self.uid, self.gid, self.nlink, self.rdev] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for t in [self.atime, self.mtime, self.ctime] {
            out.extend_from_slice(&t.secs.to_le_bytes());
            out.extend_from_slice(&t.nanos.to_le_bytes());
        }
        out.extend_from_slice(&self.flags.to_le_bytes());
        debug_assert_eq!(out.len(), INODE_BYTES);
        if let Some(b) = self.btime {
            out.extend_from_slice(&b.secs.to_le_bytes());
            out.extend_from_slice(&b.nanos.to_le_bytes());
            out.extend_from_slice(&[0; 4]);
        }
        debug_assert_eq!(out.len(), self.head_bytes());
        out
    }

    /// Reads a blob (its head; [`tail`] gives the rest); `None` when it is not an inode of
    /// a known version.
    pub fn decode(b: &[u8]) -> Option<Inode> {
        let whole = match b.get(4) {
            Some(&VERSION) => b.len() == INODE_BYTES,
            Some(&VERSION_TAIL) => b.len() > INODE_BYTES,
            Some(&VERSION_BTIME) => b.len() == INODE_MAX_BYTES,
            Some(&VERSION_BTIME_TAIL) => b.len() > INODE_MAX_BYTES,
            _ => false,
        };
        if !whole || &b[..4] != MAGIC {
            return None;
        }
        let kind = Kind::from_code(b[5])?;
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let time_at = |o: usize| Time {
            secs: i64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes")),
            nanos: u32_at(o + 8),
        };
        let has_btime = matches!(b[4], VERSION_BTIME | VERSION_BTIME_TAIL);
        let inode = Inode {
            kind,
            perm: u16::from_le_bytes([b[6], b[7]]),
            uid: u32_at(8),
            gid: u32_at(12),
            nlink: u32_at(16),
            rdev: u32_at(20),
            atime: time_at(24),
            mtime: time_at(36),
            ctime: time_at(48),
            flags: u32_at(60),
            btime: has_btime.then(|| time_at(INODE_BYTES)),
        };
        let reserved_ok = !has_btime || u32_at(INODE_BYTES + 12) == 0;
        let times_ok = [inode.atime, inode.mtime, inode.ctime]
            .iter()
            .chain(inode.btime.iter())
            .all(|t| t.nanos < 1_000_000_000);
        let flags_ok = inode.flags & !KEPT == 0;
        (times_ok && flags_ok && reserved_ok && inode.perm <= 0o7777).then_some(inode)
    }
}

/// The encoding version of `blob` when it is an inode written by a newer extalloc (the
/// magic, then a version above the ones this one reads): such a volume is refused whole,
/// never taken for damage and repaired.
pub fn newer_version(blob: &[u8]) -> Option<u8> {
    let v = *blob.get(4)?;
    (blob.starts_with(MAGIC) && v > VERSION_BTIME_TAIL).then_some(v)
}

/// Why volume file `id`, whose blob is an inode of encoding version `v` (from
/// [`newer_version`]), makes mount, check and repair refuse the volume.
pub fn newer_refusal(id: u64, v: u8) -> String {
    format!(
        "volume file {id} holds an inode written by a newer extalloc (encoding version {v}; \
         this one reads 1 to {VERSION_BTIME_TAIL}): mount, check or repair it with that version"
    )
}

/// The tail of an inode's blob (the bytes after its head, which its version byte says
/// how long is; empty for versions 1 and 3).
pub fn tail(blob: &[u8]) -> &[u8] {
    let head = match blob.get(4) {
        Some(&VERSION_BTIME | &VERSION_BTIME_TAIL) => INODE_MAX_BYTES,
        _ => INODE_BYTES,
    };
    blob.get(head..).unwrap_or_default()
}

/// `blob` with its inode replaced by `inode` and its tail kept: how every repair that
/// changes an inode's fields writes it back, so its extended attributes stay. A repair
/// passes the inode it decoded from `blob`, so its birth time (or its lack: an old
/// version stays old) stays too.
pub fn rewrite(blob: &[u8], inode: &Inode) -> Vec<u8> {
    debug_assert!(
        Inode::decode(blob).is_none_or(|old| old.btime == inode.btime),
        "a rewrite keeps the birth time"
    );
    let out = inode.encode_with_tail(tail(blob));
    debug_assert_eq!(Inode::decode(&out).as_ref(), Some(inode));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TAIL: &[u8] = &[2, 7, 0, 0, 0, 0, 0, 0, 0];

    proptest! {
        #[test]
        fn an_inode_reads_back_as_written(kind in 1u8..8, perm in 0u16..0o10000, uid: u32, gid: u32,
                nlink: u32, rdev: u32, flags in 0u32..256, secs in proptest::array::uniform4(any::<i64>()),
                nanos in proptest::array::uniform4(0u32..1_000_000_000), born: bool) {
            let t = |i: usize| Time { secs: secs[i], nanos: nanos[i] };
            let i = Inode { kind: Kind::from_code(kind).unwrap(), perm, uid, gid, nlink, rdev,
                atime: t(0), mtime: t(1), ctime: t(2), flags: flags & KEPT,
                btime: born.then(|| t(3)) };
            let (head, plain, tailed) = if born { (80, 3, 4) } else { (64, 1, 2) };
            let b = i.encode();
            prop_assert_eq!(b.len(), head);
            prop_assert_eq!(b[4], plain);
            prop_assert_eq!(Inode::decode(&b), Some(i));
            prop_assert_eq!(tail(&b), &[] as &[u8]);
            prop_assert_eq!(&i.encode_with_tail(&[]), &b);
            let with = i.encode_with_tail(TAIL);
            prop_assert_eq!(with[4], tailed);
            prop_assert_eq!(with.len(), head + TAIL.len());
            prop_assert_eq!(Inode::decode(&with), Some(i));
            prop_assert_eq!(tail(&with), TAIL);
            let again = rewrite(&with, &i);
            prop_assert_eq!(&again, &with);
            prop_assert_eq!(&rewrite(&b, &i), &b);
        }

        #[test]
        fn random_blobs_never_panic(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Some(i) = Inode::decode(&b) {
                prop_assert_eq!(i.encode_with_tail(tail(&b)), b);
            }
        }

        #[test]
        fn blobs_with_a_known_head_never_panic(version in 0u8..6, kind in 0u8..9,
                rest in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[version, kind]);
            b.extend_from_slice(&rest);
            if let Some(i) = Inode::decode(&b) {
                prop_assert_eq!(i.encode_with_tail(tail(&b)), b);
            }
        }
    }

    #[test]
    fn a_newer_encoding_is_told_from_damage() {
        let mut b = Inode::new(Kind::File, 0o644, 0, 0, 0).encode();
        assert_eq!(newer_version(&b), None);
        b[4] = 9;
        assert_eq!(Inode::decode(&b), None);
        assert_eq!(newer_version(&b), Some(9));
        assert_eq!(newer_version(b"name=hello.txt"), None);
    }

    #[test]
    fn foreign_blobs_are_refused() {
        let mut old = Inode::new(Kind::File, 0o644, 0, 0, 0);
        old.btime = None;
        let good = old.encode();
        assert!(Inode::decode(&good).is_some());
        assert!(Inode::decode(b"name=hello.txt").is_none());
        let mut bad = good.clone();
        bad[4] = 2;
        assert!(Inode::decode(&bad).is_none(), "version 2 without its tail");
        let mut bad = good.clone();
        bad.push(0);
        assert!(Inode::decode(&bad).is_none(), "version 1 with a tail");
        let mut bad = good.clone();
        bad[4] = 9;
        assert!(Inode::decode(&bad).is_none(), "unknown version");
        let mut bad = good.clone();
        bad[5] = 0;
        assert!(Inode::decode(&bad).is_none(), "unknown kind");
        let mut bad = good;
        bad[32..36].copy_from_slice(&2_000_000_000u32.to_le_bytes());
        assert!(Inode::decode(&bad).is_none(), "nanoseconds out of range");
    }

    #[test]
    fn malformed_birth_times_are_refused() {
        let good = Inode::new(Kind::File, 0o644, 0, 0, 0).encode();
        assert_eq!(good.len(), INODE_MAX_BYTES);
        assert!(Inode::decode(&good).is_some());
        let mut bad = good.clone();
        bad[4] = 4;
        assert!(Inode::decode(&bad).is_none(), "version 4 without its tail");
        let mut bad = good.clone();
        bad.push(0);
        assert!(Inode::decode(&bad).is_none(), "version 3 with a tail");
        assert!(
            Inode::decode(&good[..INODE_BYTES + 8]).is_none(),
            "version 3 cut short"
        );
        let mut bad = good[..INODE_BYTES + 8].to_vec();
        bad[4] = 4;
        assert!(
            Inode::decode(&bad).is_none(),
            "version 4 whose birth time is cut short"
        );
        let mut bad = good.clone();
        bad[72..76].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        assert!(Inode::decode(&bad).is_none(), "birth nanoseconds of 1e9");
        let mut bad = good;
        bad[79] = 1;
        assert!(Inode::decode(&bad).is_none(), "reserved bytes not zero");
    }

    #[test]
    fn an_old_inode_keeps_its_version() {
        let mut i = Inode::new(Kind::Dir, 0o755, 1, 2, 0);
        assert!(i.btime.is_some(), "a new inode is born now");
        i.btime = None;
        let v1 = i.encode();
        let v2 = i.encode_with_tail(TAIL);
        let (r1, r2) = (Inode::decode(&v1).unwrap(), Inode::decode(&v2).unwrap());
        assert_eq!((r1.btime, r2.btime), (None, None));
        let mut changed = r2;
        changed.nlink = 9;
        let out = rewrite(&v2, &changed);
        assert_eq!(
            (out[4], out.len(), tail(&out)),
            (2, INODE_BYTES + TAIL.len(), TAIL)
        );
        let out = rewrite(&v1, &changed);
        assert_eq!((out[4], out.len()), (1, INODE_BYTES));
    }

    #[test]
    fn times_before_the_epoch_survive() {
        let t = UNIX_EPOCH - Duration::new(5, 250);
        assert_eq!(Time::from_system(t).to_system(), t);
        let t = UNIX_EPOCH + Duration::new(7, 3);
        assert_eq!(Time::from_system(t).to_system(), t);
    }
}
