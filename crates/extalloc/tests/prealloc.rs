//! Preallocation properties, against a model of which logical blocks each file has mapped:
//! PAs never overlap a file's extents or each other, a PA's blocks are never handed to
//! another file, discard returns exactly the unused blocks, no block leaks (free + pending +
//! mapped + reserved = device), and `check()` holds after every step.

use extalloc::{
    AllocRequest, Allocator, DataRequest, Error, Extent, FileAlloc, Files, Geometry, Lifetime,
    Policy,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Blocks in a list of freed extents.
fn blocks(freed: Vec<Extent>) -> u64 {
    freed.iter().map(|e| e.len).sum()
}

const FILES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Write {
        file: usize,
        logical: u64,
        len: u64,
        life: u8,
    },
    Append {
        file: usize,
        len: u64,
    },
    Shrink {
        file: usize,
        frac: u8,
    },
    Grow {
        file: usize,
        by: u64,
    },
    Release {
        file: usize,
    },
    Punch {
        file: usize,
        logical: u64,
        len: u64,
    },
    Commit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..FILES, 0u64..3000, 1u64..24, 0u8..3).prop_map(|(file, logical, len, life)| Op::Write { file, logical, len, life }),
        4 => (0..FILES, 1u64..40).prop_map(|(file, len)| Op::Append { file, len }),
        1 => (0..FILES, 0u8..=255).prop_map(|(file, frac)| Op::Shrink { file, frac }),
        1 => (0..FILES, 1u64..2000).prop_map(|(file, by)| Op::Grow { file, by }),
        1 => (0..FILES).prop_map(|file| Op::Release { file }),
        2 => (0..FILES, 0u64..3000, 1u64..200).prop_map(|(file, logical, len)| Op::Punch { file, logical, len }),
        1 => Just(Op::Commit),
    ]
}

/// Every physical extent some file holds (mapped or preallocated), tagged with its owner.
fn owned(files: &[Arc<FileAlloc>]) -> Vec<(Extent, usize, &'static str)> {
    let mut v = Vec::new();
    for (i, f) in files.iter().enumerate() {
        v.extend(f.extents().into_iter().map(|(_, e)| (e, i, "mapped")));
        v.extend(
            f.prealloc_unused_extents()
                .into_iter()
                .map(|e| (e, i, "prealloc")),
        );
    }
    v.sort_by_key(|(e, _, _)| e.start);
    v
}

#[allow(clippy::too_many_lines, reason = "a test scenario, read top to bottom")]
fn run(spec: &str, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let geometry = Geometry::new(4096, 512, 3000).unwrap();
    let alloc = Allocator::new(geometry, Policy::parse(spec).unwrap()).unwrap();
    let fl = Files::new(alloc);
    let alloc = fl.allocator();
    let files: Vec<Arc<FileAlloc>> = (0..FILES as u64).map(|id| fl.create_file(id)).collect();
    // Model: per file, logical block -> physical block.
    let mut model: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); FILES];
    for op in ops {
        match op {
            Op::Write {
                file,
                logical,
                len,
                life,
            } => {
                write(
                    &fl,
                    &files,
                    &mut model,
                    file,
                    logical,
                    len,
                    Lifetime::try_from(life).unwrap(),
                )?;
            }
            Op::Append { file, len } => {
                let logical = files[file].size_blocks();
                write(&fl, &files, &mut model, file, logical, len, Lifetime::Long)?;
            }
            Op::Shrink { file, frac } => {
                let size = files[file].size_blocks() * u64::from(frac) / 256;
                let expected: u64 = model[file].range(size..).count() as u64;
                prop_assert_eq!(
                    blocks(fl.set_file_size(&files[file], size).unwrap()),
                    expected
                );
                model[file].retain(|&l, _| l < size);
                prop_assert_eq!(files[file].prealloc_count(), 0);
            }
            Op::Grow { file, by } => {
                let size = files[file].size_blocks() + by;
                prop_assert_eq!(blocks(fl.set_file_size(&files[file], size).unwrap()), 0);
            }
            Op::Release { file } => {
                let unused = files[file].prealloc_unused_blocks();
                let free_before = alloc.free_blocks();
                prop_assert_eq!(fl.release_prealloc(&files[file]).unwrap(), unused);
                prop_assert_eq!(
                    alloc.free_blocks(),
                    free_before + unused,
                    "discard returned other than the unused blocks"
                );
                prop_assert_eq!(files[file].prealloc_count(), 0);
            }
            Op::Punch { file, logical, len } => {
                let expected = model[file].range(logical..logical + len).count() as u64;
                let pending = alloc.pending_free_blocks();
                prop_assert_eq!(
                    blocks(fl.free_data(&files[file], logical, len).unwrap()),
                    expected
                );
                prop_assert_eq!(alloc.pending_free_blocks(), pending + expected);
                model[file].retain(|&l, _| l < logical || l >= logical + len);
                if expected > 0 {
                    prop_assert_eq!(files[file].prealloc_count(), 0);
                }
            }
            Op::Commit => {
                alloc.commit();
            }
        }
        fl.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for f in &files {
            fl.check_file(f)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        // Nothing overlaps anything else, across files and kinds.
        let all = owned(&files);
        for pair in all.windows(2) {
            prop_assert!(
                pair[0].0.end() <= pair[1].0.start,
                "{:?} overlaps {:?}",
                pair[0],
                pair[1]
            );
        }
        // Nothing leaks.
        let mapped: u64 = model.iter().map(|m| m.len() as u64).sum();
        prop_assert_eq!(
            alloc.free_blocks()
                + alloc.pending_free_blocks()
                + mapped
                + fl.prealloc_reserved_blocks(),
            geometry.blocks_count
        );
        // The file layer's split is exact, whatever the core has yet to hear of.
        prop_assert_eq!(fl.allocated_blocks(), mapped);
        prop_assert_eq!(fl.reserved_blocks(), fl.prealloc_reserved_blocks());
        // The model agrees with the files' maps.
        for (i, f) in files.iter().enumerate() {
            let mut got = BTreeMap::new();
            for (l, e) in f.extents() {
                for k in 0..e.len {
                    got.insert(l + k, e.start + k);
                }
            }
            prop_assert_eq!(&got, &model[i]);
        }
    }
    Ok(())
}

fn write(
    fl: &Files,
    files: &[Arc<FileAlloc>],
    model: &mut [BTreeMap<u64, u64>],
    file: usize,
    logical: u64,
    len: u64,
    life: Lifetime,
) -> Result<(), TestCaseError> {
    let alloc = fl.allocator();
    let others: Vec<Extent> = files
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != file)
        .flat_map(|(_, f)| f.prealloc_unused_extents())
        .collect();
    let before = (
        alloc.free_blocks(),
        alloc.pending_free_blocks(),
        files[file].extents(),
    );
    let result = fl.allocate_data(&files[file], &DataRequest::new(logical, len).lifetime(life));
    let overlaps = model[file].range(logical..logical + len).next().is_some();
    match result {
        Err(Error::LogicalOverlap { .. }) => {
            prop_assert!(overlaps, "overlap reported for a hole");
            prop_assert_eq!(
                (
                    alloc.free_blocks(),
                    alloc.pending_free_blocks(),
                    files[file].extents()
                ),
                before
            );
        }
        Err(Error::NoSpace { .. }) => {
            prop_assert!(!overlaps);
            let mapped: u64 = model.iter().map(|m| m.len() as u64).sum();
            prop_assert_eq!(alloc.free_blocks(), 0, "no space with free blocks");
            prop_assert_eq!(alloc.pending_free_blocks(), 0);
            prop_assert!(mapped + fl.prealloc_reserved_blocks() == alloc.geometry().blocks_count);
        }
        Err(e) => prop_assert!(false, "unexpected {e}"),
        Ok(e) => {
            prop_assert!(!overlaps, "mapped over existing blocks");
            prop_assert!(e.len >= 1 && e.len <= len);
            // Another file's PA may have been discarded under space pressure meanwhile; what it
            // still holds must not have been handed out.
            let still_held: Vec<Extent> = files
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != file)
                .flat_map(|(_, f)| f.prealloc_unused_extents())
                .collect();
            for o in others.iter().filter(|o| still_held.contains(o)) {
                prop_assert!(
                    e.end() <= o.start || o.end() <= e.start,
                    "{e:?} taken from another file's PA {o:?}"
                );
            }
            for k in 0..e.len {
                model[file].insert(logical + k, e.start + k);
            }
        }
    }
    Ok(())
}

const SPECS: [&str; 6] = [
    "ext4-base",
    "ext4-2025",
    "extalloc",
    "extalloc:locality_prealloc=false",
    "extalloc:prealloc_index=list:size_classes=false",
    "extalloc:normalise_holes=request",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn preallocation_bookkeeping_holds(ops in prop::collection::vec(op(), 1..120)) {
        for spec in SPECS {
            run(spec, ops.clone())?;
        }
    }
}

#[test]
fn list_is_capped_and_tree_is_not() {
    for (spec, capped) in [("extalloc:prealloc_index=list", true), ("extalloc", false)] {
        let alloc = Allocator::new(
            Geometry::new(4096, 32768, 1 << 22).unwrap(),
            Policy::parse(spec).unwrap(),
        )
        .unwrap();
        let fl = Files::new(alloc);
        let file = fl.create_file(1);
        fl.set_file_size(&file, 1000 * 2048).unwrap();
        // One block in every 8 MiB window of a big sparse file: one PA each.
        for i in 0..1000u64 {
            fl.allocate_data(&file, &DataRequest::new(i * 2048, 1))
                .unwrap();
        }
        let n = file.prealloc_count();
        if capped {
            assert!(n <= 512 + 129, "{spec}: {n} PAs");
        } else {
            assert_eq!(n, 1000, "{spec}");
        }
        fl.check().unwrap();
        fl.check_file(&file).unwrap();
        let unused = file.prealloc_unused_blocks();
        assert_eq!(fl.release_prealloc(&file).unwrap(), unused);
        fl.check().unwrap();
    }
}

#[test]
fn bad_data_requests_change_nothing() {
    let alloc =
        Allocator::new(Geometry::new(4096, 1024, 8192).unwrap(), Policy::default()).unwrap();
    let fl = Files::new(alloc);
    let alloc = fl.allocator();
    let file = fl.create_file(5);
    let e = fl.allocate_data(&file, &DataRequest::new(10, 4)).unwrap();
    let before = (
        alloc.free_blocks(),
        file.extents(),
        file.prealloc_unused_blocks(),
    );
    assert!(matches!(
        fl.allocate_data(&file, &DataRequest::new(12, 4)),
        Err(Error::LogicalOverlap { file: 5, .. })
    ));
    assert!(matches!(
        fl.allocate_data(&file, &DataRequest::new(0, 11)),
        Err(Error::LogicalOverlap { .. })
    ));
    assert_eq!(
        fl.allocate_data(&file, &DataRequest::new(20, 0)),
        Err(Error::ZeroLength)
    );
    assert!(matches!(
        fl.allocate_data(&file, &DataRequest::new(u64::MAX - 1, 4)),
        Err(Error::PastLargestFile {
            start: 18446744073709551614,
            len: 4,
            ..
        })
    ));
    assert!(matches!(
        fl.allocate_data(&file, &DataRequest::new(30, 1).goal(8192)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        Lifetime::try_from(3),
        Err(Error::InvalidHint { value: 3, .. })
    ));
    assert!(matches!(
        fl.set_file_size(&file, u64::MAX),
        Err(Error::SizePastLargestFile { size: u64::MAX, .. })
    ));
    assert_eq!(fl.free_data(&file, 10, 0), Err(Error::ZeroLength));
    assert!(matches!(
        fl.free_data(&file, u64::MAX - 1, 4),
        Err(Error::PastLargestFile {
            unit: "logical blocks",
            len: 4,
            ..
        })
    ));
    // A hole over unmapped blocks frees nothing and changes nothing.
    assert_eq!(fl.free_data(&file, 100, 50), Ok(Vec::new()));
    assert_eq!(
        (
            alloc.free_blocks(),
            file.extents(),
            file.prealloc_unused_blocks()
        ),
        before
    );
    assert_eq!(file.extents(), vec![(10, e)]);
    fl.check().unwrap();
}

#[test]
fn appends_land_contiguously_and_small_files_sit_together() {
    let alloc = Allocator::new(
        Geometry::new(4096, 32768, 1 << 18).unwrap(),
        Policy::default(),
    )
    .unwrap();
    let fl = Files::new(alloc);
    let big = fl.create_file(1);
    for i in 0..512u64 {
        fl.allocate_data(&big, &DataRequest::new(i * 2, 2)).unwrap();
    }
    // The first 64 KiB come from the locality chunk (a small file), the rest from PAs.
    assert!(big.extents().len() <= 2, "{:?}", big.extents());
    // Small files written by one thread come from one locality chunk, back to back.
    let mut ends = Vec::new();
    for id in 100..110 {
        let f = fl.create_file(id);
        let e = fl.allocate_data(&f, &DataRequest::new(0, 1)).unwrap();
        ends.push(e);
    }
    for pair in ends.windows(2) {
        assert_eq!(pair[0].end(), pair[1].start);
    }
    fl.check().unwrap();
}

/// Locality carves reach the core in batches; the file layer's figures and its no-space
/// error are exact between batches, and a discard settles the core's figures too.
#[test]
fn small_files_are_counted_exactly_between_claim_batches() {
    let alloc =
        Allocator::new(Geometry::new(4096, 4096, 4096).unwrap(), Policy::default()).unwrap();
    let fl = Files::new(alloc);
    let mut n = 0u64;
    while let Ok(e) = fl.allocate_data(&fl.create_file(n), &DataRequest::new(0, 1)) {
        assert_eq!(e.len, 1);
        n += 1;
        if n == 3 {
            // Mid-chunk: three small files carved, the rest of the chunk reserved.
            assert_eq!(fl.allocated_blocks(), 3);
            assert_eq!(fl.reserved_blocks(), fl.prealloc_reserved_blocks());
            assert!(fl.reserved_blocks() > 0);
            assert_eq!(
                fl.allocated_blocks() + fl.reserved_blocks() + fl.allocator().free_blocks(),
                4096
            );
            fl.check().unwrap();
        }
    }
    assert_eq!(n, 4096, "every block went to a small file");
    assert_eq!(fl.allocated_blocks(), 4096);
    assert_eq!(fl.reserved_blocks(), 0);
    match fl.allocate_data(&fl.create_file(n), &DataRequest::new(0, 1)) {
        Err(Error::NoSpace {
            free_blocks: 0,
            reserved_blocks: 0,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    fl.discard_preallocations();
    assert_eq!(fl.allocator().allocated_blocks(), 4096, "the core agrees");
    assert_eq!(fl.allocator().reserved_blocks(), 0);
    fl.check().unwrap();
}

#[test]
fn size_classes_keep_small_and_large_apart() {
    use extalloc::AllocRequest;
    let groups_with_both = |spec: &str| {
        let g = Geometry::new(4096, 8192, 8192 * 16).unwrap();
        let alloc = Allocator::new(g, Policy::parse(spec).unwrap()).unwrap();
        let fl = Files::new(alloc);
        let alloc = fl.allocator();
        let mut small = std::collections::BTreeSet::new();
        let mut large = std::collections::BTreeSet::new();
        for i in 0..64u64 {
            // Same stream goal for both kinds: file ids differ by the number of goals.
            let s = alloc
                .allocate(&AllocRequest::new(2 * i, 2).logical(64).exact())
                .unwrap();
            small.insert(g.group_of(s.start));
            if i % 8 == 0 {
                let l = alloc
                    .allocate(&AllocRequest::new(2 * i, 2048).logical(64).exact())
                    .unwrap();
                large.insert(g.group_of(l.start));
            }
        }
        fl.check().unwrap();
        small.intersection(&large).count()
    };
    assert_eq!(groups_with_both("extalloc:stream_goals=1"), 0);
    assert!(groups_with_both("extalloc:stream_goals=1:size_classes=false") > 0);
}

#[test]
fn no_prealloc_maps_exactly_what_was_asked() {
    let alloc = Allocator::new(
        Geometry::new(4096, 1024, 8192).unwrap(),
        Policy::parse("extalloc").unwrap(),
    )
    .unwrap();
    let fl = Files::new(alloc);
    let alloc = fl.allocator();
    let file = fl.create_file(9);
    let free = alloc.free_blocks();
    let mut last: Option<Extent> = None;
    for l in 0..40 {
        let e = fl
            .allocate_data(&file, &DataRequest::new(l, 1).no_prealloc())
            .unwrap();
        assert_eq!(e.len, 1);
        if let Some(prev) = last {
            assert_eq!(
                e.start,
                prev.end(),
                "each append follows the file's last block"
            );
        }
        last = Some(e);
    }
    assert_eq!(file.prealloc_count(), 0);
    assert_eq!(
        alloc.free_blocks(),
        free - 40,
        "nothing reserved beyond the request"
    );
    fl.check().unwrap();
}

/// No space is one mechanism: the core reports what is pending and what is reserved and
/// changes nothing; the file layer discards preallocations; only the owner of the commits
/// commits. Reserved blocks are counted apart from allocated ones throughout.
#[test]
fn no_space_reports_pending_and_reserved_and_each_layer_applies_its_remedy() {
    let alloc =
        Allocator::new(Geometry::new(4096, 1024, 8192).unwrap(), Policy::default()).unwrap();
    let fl = Files::new(alloc);
    let alloc = fl.allocator();
    // Files that each map one block of a 64-block window: the rest is reserved.
    let mut files = Vec::new();
    while alloc.free_blocks() > 0 {
        let f = fl.create_file(files.len() as u64 + 100);
        // Sized as a large file (past the locality threshold) so the window is a PA.
        fl.allocate_data(&f, &DataRequest::new(1000, 1)).unwrap();
        files.push(f);
    }
    let reserved = alloc.reserved_blocks();
    assert!(reserved > 0);
    let mapped: u64 = files.iter().map(|f| f.size_blocks().min(1)).sum();
    assert_eq!(alloc.allocated_blocks(), mapped);
    assert_eq!(
        alloc.allocated_blocks() + reserved,
        8192,
        "every block accounted for"
    );
    fl.check().unwrap();

    // The core: no remedy, nothing changes, the error says what is reserved.
    let before = (
        alloc.free_blocks(),
        alloc.reserved_blocks(),
        alloc.allocated_blocks(),
    );
    match alloc.allocate(&AllocRequest::new(1, 8)) {
        Err(Error::NoSpace {
            free_blocks: 0,
            pending_blocks: 0,
            reserved_blocks,
            ..
        }) => assert_eq!(reserved_blocks, reserved),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        before,
        (
            alloc.free_blocks(),
            alloc.reserved_blocks(),
            alloc.allocated_blocks()
        )
    );

    // The file layer: discards what it can lock and retries.
    let e = fl.allocate(&AllocRequest::new(1, 8)).unwrap();
    assert_eq!(e.len, 8);
    assert_eq!(alloc.reserved_blocks(), 0, "every PA was discarded");
    assert_eq!(alloc.allocated_blocks(), mapped + 8);
    fl.check().unwrap();

    // Fill up with plain extents, free one: it waits for a commit.
    let mut held = Vec::new();
    while let Ok(x) = fl.allocate(&AllocRequest::new(2, 64)) {
        held.push(x);
    }
    alloc.free(held[0]).unwrap();
    let pending = held[0].len;
    let f = fl.create_file(1);
    match fl.allocate_data(&f, &DataRequest::new(0, 1)) {
        Err(Error::NoSpace {
            pending_blocks,
            reserved_blocks: 0,
            ..
        }) => assert_eq!(pending_blocks, pending),
        other => panic!("the file layer must not commit: {other:?}"),
    }
    assert_eq!(alloc.pending_free_blocks(), pending);
    assert!(!f.is_mapped(0), "a failed request maps nothing");
    // The owner of the commits commits first.
    fl.allocate_data_committing(&f, &DataRequest::new(0, 1))
        .unwrap();
    assert_eq!(alloc.pending_free_blocks(), 0);
    assert_eq!(alloc.stats().forced_commits, 1);
    fl.check().unwrap();
}

#[test]
fn a_stream_that_outgrew_its_class_grows_next_to_its_file() {
    use extalloc::AllocRequest;
    // 16 groups; the large class's stream goals start spread over the device.
    let g = Geometry::new(4096, 8192, 8192 * 16).unwrap();
    let alloc = Allocator::new(g, Policy::parse("extalloc:stream_goals=1").unwrap()).unwrap();
    // A small file in group 3, far from the large class's goal: its group takes the small
    // class's tag.
    let small = alloc
        .allocate(&AllocRequest::new(7, 4).goal(3 * 8192).exact())
        .unwrap();
    assert_eq!(g.group_of(small.start), 3);
    // The file turns into a stream of the large class; its goal (its own first block) is
    // taken, so the allocation scans.
    let large = alloc
        .allocate(
            &AllocRequest::new(7, 2048)
                .logical(4096)
                .goal(small.start)
                .exact(),
        )
        .unwrap();
    let group = g.group_of(large.start);
    assert!(
        group.abs_diff(3) == 1,
        "the stream took group {group}, not the nearest group of its class to its file"
    );
    alloc.check().unwrap();
}
