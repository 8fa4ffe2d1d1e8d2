//! Bad input: every error value, and nothing changed after any of them.

use extalloc::{AllocRequest, Allocator, Error, Extent, Geometry, Policy, PRESETS};

fn fresh(spec: &str) -> Allocator {
    Allocator::new(
        Geometry::new(4096, 64, 200).unwrap(),
        Policy::parse(spec).unwrap(),
    )
    .unwrap()
}

fn unchanged(a: &Allocator, before: (u64, u64)) {
    assert_eq!((a.free_blocks(), a.pending_free_blocks()), before);
    a.check().unwrap();
}

#[test]
#[allow(clippy::too_many_lines, reason = "a test scenario, read top to bottom")]
fn every_error_changes_nothing() {
    for spec in PRESETS {
        let a = fresh(spec);
        let held = a
            .allocate(&AllocRequest::new(1, 10).goal(0).exact())
            .unwrap();
        let other = a
            .allocate(&AllocRequest::new(2, 64).goal(64).exact())
            .unwrap();
        assert_eq!((held.start, other.start), (0, 64));
        a.free(Extent::new(held.start, 2)).unwrap();
        let before = (a.free_blocks(), a.pending_free_blocks());

        assert_eq!(a.allocate(&AllocRequest::new(1, 0)), Err(Error::ZeroLength));
        assert_eq!(a.free(Extent::new(3, 0)), Err(Error::ZeroLength));
        assert_eq!(
            a.allocate(&AllocRequest::new(1, 65)),
            Err(Error::ExtentTooLong {
                len: 65,
                group_blocks: 64
            })
        );
        assert_eq!(
            a.allocate(&AllocRequest::new(1, 4).min_len(5)),
            Err(Error::InvalidMinLen { min_len: 5, len: 4 })
        );
        assert_eq!(
            a.allocate(&AllocRequest::new(1, 4).min_len(0)),
            Err(Error::InvalidMinLen { min_len: 0, len: 4 })
        );
        assert_eq!(
            a.allocate(&AllocRequest::new(1, 4).min_len(2).goal_min_len(1)),
            Err(Error::InvalidGoalMinLen {
                goal_min_len: 1,
                min_len: 2,
                len: 4
            })
        );
        assert!(matches!(
            a.allocate(&AllocRequest::new(1, 4).goal_min_len(5)),
            Err(Error::InvalidGoalMinLen {
                goal_min_len: 5,
                ..
            })
        ));
        assert_eq!(
            a.allocate(&AllocRequest::new(1, 4).goal(200)),
            Err(Error::OutOfRange {
                start: 200,
                len: 1,
                device_blocks: 200
            })
        );
        assert!(matches!(
            a.free(Extent::new(199, 2)),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            a.free(Extent::new(u64::MAX, 2)),
            Err(Error::OutOfRange { .. })
        ));
        // Already pending: double free.
        assert_eq!(
            a.free(Extent::new(held.start, 1)),
            Err(Error::DoubleFree {
                start: held.start,
                len: 1
            })
        );
        assert!(matches!(
            a.free(Extent::new(held.start + 1, 4)),
            Err(Error::DoubleFree { .. })
        ));
        // Never allocated.
        assert!(matches!(
            a.free(Extent::new(150, 3)),
            Err(Error::NotAllocated { .. })
        ));
        // Spanning two groups, the second piece bad: the first piece must not be freed.
        assert!(a.is_free(128).unwrap());
        assert_eq!(
            a.free(Extent::new(64, 66)),
            Err(Error::NotAllocated { start: 128, len: 2 })
        );
        unchanged(&a, before);
        assert!(!a.is_free(other.start).unwrap());

        // After commit, the freed blocks are free again and a second free is "not allocated".
        assert_eq!(a.commit(), 2);
        assert_eq!(
            a.free(Extent::new(held.start, 2)),
            Err(Error::NotAllocated {
                start: held.start,
                len: 2
            })
        );
        a.check().unwrap();
    }
}

#[test]
fn no_space_says_what_waits_and_only_the_owner_commits() {
    for spec in PRESETS {
        let a = fresh(spec);
        let mut held = Vec::new();
        while let Ok(e) = a.allocate(&AllocRequest::new(3, 64)) {
            held.push(e);
        }
        assert_eq!(a.free_blocks(), 0);
        let before = (a.free_blocks(), a.pending_free_blocks());
        assert!(matches!(
            a.allocate(&AllocRequest::new(3, 1)),
            Err(Error::NoSpace { .. })
        ));
        unchanged(&a, before);
        // The core reports what waits for a commit and commits nothing on its own.
        a.free(held[0]).unwrap();
        assert_eq!(
            a.allocate(&AllocRequest::new(3, 8).exact()),
            Err(Error::NoSpace {
                requested: 8,
                min_len: 8,
                free_blocks: 0,
                pending_blocks: 64,
                reserved_blocks: 0
            })
        );
        assert_eq!(a.pending_free_blocks(), 64);
        // The owner of the commits commits and retries.
        let e = a
            .allocate_committing(&AllocRequest::new(3, 8).exact())
            .unwrap();
        assert_eq!(a.stats().forced_commits, 1);
        assert_eq!(
            a.geometry().group_of(e.start),
            a.geometry().group_of(held[0].start)
        );
        a.check().unwrap();
    }
}

#[test]
fn policy_errors_are_precise() {
    assert!(matches!(
        Policy::parse("extalloc:nope=1"),
        Err(Error::UnknownPolicyKey { .. })
    ));
    assert!(matches!(
        Policy::parse("ext5"),
        Err(Error::UnknownPreset { .. })
    ));
    // A window below the smallest bucket (16 KiB) is refused; 0 means a group.
    assert!(matches!(
        Policy::parse("extalloc:append_window_kib=8"),
        Err(Error::InvalidPolicyValue { .. })
    ));
    assert_eq!(
        Policy::parse("extalloc:append_window_kib=0")
            .unwrap()
            .append_window_kib,
        0
    );
    assert_eq!(Policy::parse("ext4-2025").unwrap().append_window_kib, 8192);
    assert!(Geometry::new(4096, 100, 1000).is_err());
}

#[test]
fn goal_is_honoured_and_streams_stay_apart() {
    let a = Allocator::new(
        Geometry::new(4096, 32768, 1 << 20).unwrap(),
        Policy::default(),
    )
    .unwrap();
    let first = a.allocate(&AllocRequest::new(9, 2).logical(0)).unwrap();
    let next = a
        .allocate(&AllocRequest::new(9, 2).logical(2).goal(first.end()))
        .unwrap();
    assert_eq!(next.start, first.end());
    assert_eq!(a.stats().pass_hits[0], 1);
    a.check().unwrap();
}

/// `goal_min_len`: the free run at the goal is taken when it holds that many blocks, even
/// if shorter than the request; shorter than that, the goal is passed over.
#[test]
fn a_goal_run_at_least_goal_min_len_is_taken() {
    let a = Allocator::new(
        Geometry::new(4096, 32768, 1 << 20).unwrap(),
        Policy::default(),
    )
    .unwrap();
    // Free run 100 .. 164 between two used extents.
    let low = a
        .allocate(&AllocRequest::new(1, 100).goal(0).exact())
        .unwrap();
    let high = a
        .allocate(&AllocRequest::new(2, 8).goal(164).exact())
        .unwrap();
    assert_eq!((low.start, high.start), (0, 164));
    let got = a
        .allocate(&AllocRequest::new(3, 256).goal(100).goal_min_len(64))
        .unwrap();
    assert_eq!((got.start, got.len), (100, 64), "the whole run at the goal");
    a.free(got).unwrap();
    a.commit();
    let got = a
        .allocate(&AllocRequest::new(3, 256).goal(100).goal_min_len(65))
        .unwrap();
    assert_ne!(
        got.start, 100,
        "a run shorter than goal_min_len is passed over"
    );
    assert_eq!(got.len, 256);
    a.check().unwrap();
}

/// A device that cannot be opened: the error names the file and the operation, and keeps
/// the operating system's error (kind and all) as its source.
#[test]
fn io_errors_name_the_file_and_keep_their_source() {
    use extalloc::disk::device::FileDevice;
    use std::error::Error as _;
    let path = std::path::Path::new("/nonexistent-extalloc-dir/device.img");
    let err = match FileDevice::open(path) {
        Err(e) => e,
        Ok(_) => panic!("a missing file opened"),
    };
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent-extalloc-dir/device.img"),
        "{text}"
    );
    assert!(text.contains("open"), "{text}");
    match &err {
        extalloc::Error::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("not an I/O error: {other:?}"),
    }
    let os = err.source().expect("an I/O error has a source");
    assert!(
        os.source().is_some(),
        "the source chain reaches std::io::Error"
    );
}

/// A device opened read-only (fsck, info) reads, and refuses any write with an I/O error
/// that names it, even for root.
#[test]
fn a_read_only_device_refuses_writes() {
    use extalloc::disk::device::{Device, FileDevice};
    let path = std::env::temp_dir().join(format!("extalloc-ro-{}.img", std::process::id()));
    FileDevice::create(&path, 1 << 20)
        .unwrap()
        .write_at(b"hello", 0)
        .unwrap();
    let dev = FileDevice::open_read_only(&path).unwrap();
    let mut buf = [0u8; 5];
    dev.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"hello");
    match dev.write_at(b"bye", 0) {
        Err(Error::Io { device, op, .. }) => {
            assert_eq!(op, "write");
            assert!(device.contains("extalloc-ro-"), "{device}");
        }
        other => panic!("a write to a read-only device: {other:?}"),
    }
    std::fs::remove_file(&path).unwrap();
}

/// One writer or any number of readers: a second open of the same device in this process
/// is refused with `DeviceBusy` naming it, readers share, a reader keeps writers out, and
/// closing lets the next user in. (Another process meets the same lock: it is `flock`'s.)
#[test]
fn a_device_opens_once_for_writing() {
    use extalloc::disk::device::FileDevice;
    let path = std::env::temp_dir().join(format!("extalloc-busy-{}.img", std::process::id()));
    let writer = FileDevice::create(&path, 1 << 20).unwrap();
    use extalloc::disk::device::Device;
    writer.write_at(b"in use", 4096).unwrap();
    for second in [FileDevice::open(&path), FileDevice::open_read_only(&path)] {
        match second {
            Err(Error::DeviceBusy { device, .. }) => {
                assert!(device.contains("extalloc-busy-"), "{device}")
            }
            Err(e) => panic!("not DeviceBusy: {e}"),
            Ok(_) => panic!("a second open of a device open for writing"),
        }
    }
    assert!(
        matches!(
            FileDevice::create(&path, 1 << 20),
            Err(Error::DeviceBusy { .. })
        ),
        "create over a device in use"
    );
    let mut buf = [0u8; 6];
    writer.read_at(&mut buf, 4096).unwrap();
    assert_eq!(&buf, b"in use", "the refused create truncated nothing");
    drop(writer);
    let r1 = FileDevice::open_read_only(&path).unwrap();
    let r2 = FileDevice::open_read_only(&path).unwrap();
    assert!(matches!(
        FileDevice::open(&path),
        Err(Error::DeviceBusy {
            wanted: "write",
            ..
        })
    ));
    drop((r1, r2));
    FileDevice::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
}
