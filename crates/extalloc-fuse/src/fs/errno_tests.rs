//! The errno the kernel gets for each kind of volume error: `EFBIG` only for a file too
//! big, `EIO` for the volume's own state (never `EINVAL`), the rest as ext4 gives them.

use super::Errno;
use extalloc::{Error, ErrorKind, IoSource};

/// One error of each kind, with the errno the kernel must get for it.
fn one_of_each() -> Vec<(Error, i32)> {
    let mut all = callers_errors();
    all.extend(volumes_errors());
    all
}

/// The kinds a caller's request causes.
fn callers_errors() -> Vec<(Error, i32)> {
    vec![
        (Error::ZeroLength, libc::EINVAL),
        (
            Error::OutOfRange {
                start: 9,
                len: 1,
                device_blocks: 8,
            },
            libc::EINVAL,
        ),
        (
            Error::ExtentTooLong {
                len: 40_000,
                group_blocks: 32_768,
            },
            libc::EINVAL,
        ),
        (
            Error::AttrTooLarge {
                bytes: 2000,
                max: 1024,
            },
            libc::EINVAL,
        ),
        (
            Error::PastLargestFile {
                unit: "bytes",
                start: i64::MAX as u64,
                len: 2,
                max: i64::MAX as u64,
            },
            libc::EFBIG,
        ),
        (
            Error::SizePastLargestFile {
                unit: "blocks",
                size: u64::MAX,
                max: 1 << 51,
            },
            libc::EFBIG,
        ),
        (Error::NoSuchFile { id: 7 }, libc::ENOENT),
    ]
}

/// The kinds the volume's space, device or state causes.
fn volumes_errors() -> Vec<(Error, i32)> {
    let io = || IoSource::new(std::io::Error::from_raw_os_error(libc::EIO));
    vec![
        (Error::FileExists { id: 7 }, libc::EEXIST),
        (
            Error::NoSpace {
                requested: 8,
                min_len: 1,
                free_blocks: 0,
                pending_blocks: 0,
                reserved_blocks: 0,
            },
            libc::ENOSPC,
        ),
        (Error::JournalFull { needed: 4096 }, libc::ENOSPC),
        // A writeback failure is its cause's kind.
        (
            Error::Writeback {
                id: 3,
                source: Box::new(Error::JournalFull { needed: 1 }),
            },
            libc::ENOSPC,
        ),
        (
            Error::TransactionTooLarge {
                bytes: 1 << 20,
                max: 1 << 16,
            },
            libc::ENOSPC,
        ),
        (
            Error::DeviceBusy {
                device: "d".into(),
                wanted: "write",
            },
            libc::EBUSY,
        ),
        (
            Error::Io {
                device: "d".into(),
                op: "write",
                offset: 0,
                source: io(),
            },
            libc::EIO,
        ),
        (
            Error::Corrupt {
                what: extalloc::Corrupted::Group { group: 3 },
                detail: "bad checksum".into(),
            },
            libc::EUCLEAN,
        ),
        // The volume's own state is never the caller's argument: EIO, not EINVAL.
        (Error::NoVolume { root_bytes: 0 }, libc::EIO),
        (Error::TransactionOpen { op: "checkpoint" }, libc::EIO),
        (
            Error::IoLatched {
                device: "d".into(),
                cause: "injected flush failure".into(),
            },
            libc::EIO,
        ),
        (
            Error::Occupied {
                path: "p".into(),
                holds: "a volume".into(),
            },
            libc::EEXIST,
        ),
        (
            Error::Aborted {
                reason: "a write failed".into(),
            },
            libc::EIO,
        ),
    ]
}

#[test]
fn each_kind_has_its_errno_and_only_too_big_is_efbig() {
    let cases = one_of_each();
    for kind in ErrorKind::ALL {
        assert!(
            cases.iter().any(|(e, _)| e.kind() == kind),
            "no case of kind {kind:?}"
        );
    }
    for (e, want) in cases {
        let kind = e.kind();
        let text = e.to_string();
        assert_eq!(Errno::from(e), Errno(want), "{kind:?}: {text}");
        assert_eq!(want == libc::EFBIG, kind == ErrorKind::FileTooBig, "{text}");
    }
}
