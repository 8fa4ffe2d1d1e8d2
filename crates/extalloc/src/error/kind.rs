//! The kinds of [`Error`](enum@Error): the one table from an error to what a caller does
//! about it, and to the `errno` a file system returns for it. The FUSE layer's errno, the C
//! API's `extalloc_code` and the Python package's exception classes all go through
//! [`Error::kind`].

use super::cause::Error;

/// What kind of failure an [`Error`](enum@Error) is: one per remedy a caller has. The list
/// is stable: a kind is added only with a new remedy (and the C codes and Python exceptions
/// that follow it), never renumbered or merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A bad argument: a zero length, a range outside the device, fields that contradict
    /// each other, a bad hint, geometry, policy or setting, a double free. Fix the call.
    InvalidArgument,
    /// A file offset or size past the largest file. The only kind that is `EFBIG`.
    FileTooBig,
    /// A call not valid in the state it found (an open transaction, work under way, a
    /// store used another way): make it at another time, or through the layer that owns
    /// the state.
    WrongState,
    /// No file with that id (never made, or unlinked).
    NotFound,
    /// A file with that id exists already.
    Exists,
    /// No free extent long enough, or no room in the journal until a checkpoint.
    NoSpace,
    /// One operation or atomic group needs a larger journal record than the journal holds:
    /// commit first, split it, or make the device with a larger journal.
    TransactionTooLarge,
    /// The device is open elsewhere (this process or another).
    Busy,
    /// The device (or the operating system) failed an operation.
    Io,
    /// On-disk metadata, or state in memory, that fails its checks: run `extalloc fsck`.
    Corrupt,
    /// The device holds nothing this build reads: not extalloc, another format version, a
    /// store without a volume.
    Unrecognized,
    /// The volume stopped committing after a change was left half made: close it and open
    /// it again.
    Aborted,
}

impl ErrorKind {
    /// Every kind, in the order of the list.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::InvalidArgument,
        ErrorKind::FileTooBig,
        ErrorKind::WrongState,
        ErrorKind::NotFound,
        ErrorKind::Exists,
        ErrorKind::NoSpace,
        ErrorKind::TransactionTooLarge,
        ErrorKind::Busy,
        ErrorKind::Io,
        ErrorKind::Corrupt,
        ErrorKind::Unrecognized,
        ErrorKind::Aborted,
    ];

    /// The Linux `errno` a file system returns for this kind, as ext4 gives them: `EINVAL`
    /// for a bad argument, a call in the wrong state and a format it does not read (as its
    /// mount does), `EFBIG` only past the largest file, `ENOSPC` for no space and for a
    /// transaction too large for the journal (as jbd2 does), `EUCLEAN` for corruption
    /// (ext4's `EFSCORRUPTED`), `EIO` for a failed device and an aborted volume.
    pub fn errno(self) -> i32 {
        use rustix::io::Errno as E;
        match self {
            ErrorKind::InvalidArgument | ErrorKind::WrongState | ErrorKind::Unrecognized => {
                E::INVAL
            }
            ErrorKind::FileTooBig => E::FBIG,
            ErrorKind::NotFound => E::NOENT,
            ErrorKind::Exists => E::EXIST,
            ErrorKind::NoSpace | ErrorKind::TransactionTooLarge => E::NOSPC,
            ErrorKind::Busy => E::BUSY,
            ErrorKind::Io | ErrorKind::Aborted => E::IO,
            ErrorKind::Corrupt => E::UCLEAN,
        }
        .raw_os_error()
    }
}

impl Error {
    /// The kind of this error (a writeback failure has its cause's kind).
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::ZeroLength
            | Error::OutOfRange { .. }
            | Error::DoubleFree { .. }
            | Error::MetadataBlocks { .. }
            | Error::NotAllocated { .. }
            | Error::InvalidHint { .. }
            | Error::LogicalOverlap { .. }
            | Error::ExtentTooLong { .. }
            | Error::InvalidMinLen { .. }
            | Error::InvalidGoalMinLen { .. }
            | Error::InvalidSetting { .. }
            | Error::SummaryCount { .. }
            | Error::NoSuchGroup { .. }
            | Error::Unsorted { .. }
            | Error::NotADiscard { .. }
            | Error::AttrTooLarge { .. }
            | Error::RootTooLarge { .. }
            | Error::JournalTooSmall { .. }
            | Error::FileIdNeverHandedOut { .. }
            | Error::AttrReserved
            | Error::EmptyKey
            | Error::InvalidGeometry(_)
            | Error::VolumeTooSmall { .. }
            | Error::UnknownPolicyKey { .. }
            | Error::UnknownPreset { .. }
            | Error::InvalidPolicyValue { .. }
            | Error::DeviceTooSmall { .. } => K::InvalidArgument,
            Error::PastLargestFile { .. } | Error::SizePastLargestFile { .. } => K::FileTooBig,
            Error::TransactionOpen { .. }
            | Error::NotAtRest { .. }
            | Error::OwnedByTransaction { .. }
            | Error::StoreInUse
            | Error::CheckpointOutsideVolume
            | Error::Pending { .. }
            | Error::Closed => K::WrongState,
            Error::NoSuchFile { .. } => K::NotFound,
            Error::FileExists { .. } | Error::Occupied { .. } => K::Exists,
            Error::NoSpace { .. } | Error::JournalFull { .. } => K::NoSpace,
            Error::TransactionTooLarge { .. } | Error::AtomicGroupTooLarge { .. } => {
                K::TransactionTooLarge
            }
            Error::DeviceBusy { .. } | Error::DeviceInUse { .. } => K::Busy,
            Error::Io { .. } | Error::DeviceRange { .. } | Error::Spawn { .. } => K::Io,
            Error::Invariant(_)
            | Error::Corrupt { .. }
            | Error::JournalDamaged { .. }
            | Error::JournalLossUnrepaired => K::Corrupt,
            Error::NotExtalloc(_)
            | Error::UnsupportedVersion { .. }
            | Error::UnsupportedVolumeVersion { .. }
            | Error::NoVolume { .. } => K::Unrecognized,
            Error::Aborted { .. } | Error::IoLatched { .. } => K::Aborted,
            Error::Writeback { source, .. } => source.kind(),
        }
    }

    /// The Linux `errno` for this error: its kind's ([`ErrorKind::errno`]).
    pub fn errno(&self) -> i32 {
        self.kind().errno()
    }
}

#[cfg(test)]
mod tests {
    /// `ALL` holds every kind once: the exhaustive match below (the library's own; other
    /// crates see `ErrorKind` as non-exhaustive) fails the build when a kind is added, and
    /// the positions it gives must be `ALL`'s.
    #[test]
    fn all_lists_every_kind_once() {
        use super::ErrorKind as K;
        let position = |k: K| match k {
            K::InvalidArgument => 0,
            K::FileTooBig => 1,
            K::WrongState => 2,
            K::NotFound => 3,
            K::Exists => 4,
            K::NoSpace => 5,
            K::TransactionTooLarge => 6,
            K::Busy => 7,
            K::Io => 8,
            K::Corrupt => 9,
            K::Unrecognized => 10,
            K::Aborted => 11,
        };
        for (i, &k) in K::ALL.iter().enumerate() {
            assert_eq!(position(k), i, "{k:?}");
        }
    }

    use super::*;

    #[test]
    fn only_a_file_too_big_is_efbig() {
        let efbig = rustix::io::Errno::FBIG.raw_os_error();
        for k in ErrorKind::ALL {
            assert_eq!(k.errno() == efbig, k == ErrorKind::FileTooBig, "{k:?}");
        }
    }

    #[test]
    fn a_writeback_failure_has_its_causes_kind() {
        let e = Error::Writeback {
            id: 3,
            source: Box::new(Error::NoSpace {
                requested: 1,
                min_len: 1,
                free_blocks: 0,
                pending_blocks: 0,
                reserved_blocks: 0,
            }),
        };
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        assert_eq!(e.errno(), rustix::io::Errno::NOSPC.raw_os_error());
    }
}
