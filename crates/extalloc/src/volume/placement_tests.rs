//! Placement tests: a placed file's first blocks go to the group its key picks, keys
//! wanting more than a group claim disjoint runs of free groups, and a key whose group runs
//! low moves on (`placement.rs`).

use super::tests::{device, geometry, pattern, reopen};
use super::*;
use crate::alloc::AllocRequest;

/// A placed file's first blocks land in the group its key picks, before and after a
/// reopen (the key is kept with the file); files of one key start in one group.
#[test]
fn placement_keys_pick_the_group_of_a_files_first_blocks() {
    let dev = device(20);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let g = geometry();
    let group_of = |key: u64| {
        let hash = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (hash * g.groups_count()) >> 32
    };
    let keys = [3u64, 4, 5, 3];
    let mut later = Vec::new();
    for (i, &key) in keys.iter().enumerate() {
        let id = vol.create_placed(b"", key).unwrap();
        if i == 3 {
            later.push((id, key));
            continue;
        }
        vol.write(id, 0, &pattern(i as u64, 256 * 1024)).unwrap();
        let first = vol.extents(id).unwrap()[0].extent.start;
        assert_eq!(g.group_of(first), group_of(key), "key {key}");
    }
    vol.sync().unwrap();
    let vol = reopen(&dev, vol, true);
    for (id, key) in later {
        vol.write(id, 0, &pattern(9, 256 * 1024)).unwrap();
        let first = vol.extents(id).unwrap()[0].extent.start;
        assert_eq!(g.group_of(first), group_of(key), "key {key} after a reopen");
    }
}

/// Files of one key wanting more than a group each claim a run of wholly free groups when
/// placed, so two placed before either allocates do not share one; a file that fits a
/// group starts in its key's group; the claim goes at close.
#[test]
fn large_placed_files_claim_disjoint_runs_of_groups() {
    let dev = device(21);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let g = geometry();
    let ids: Vec<u64> = (0..3).map(|_| vol.create_placed(b"", 5).unwrap()).collect();
    let goal = |id: u64, want: u64| {
        let f = vol.file(id).unwrap();
        let f = f.lock();
        g.group_of(vol.placement_goal(&f, want).unwrap())
    };
    let (a, b) = (
        goal(ids[0], 2 * g.group_blocks),
        goal(ids[1], 2 * g.group_blocks),
    );
    assert!(a + 2 <= b || b + 2 <= a, "runs {a} and {b} overlap");
    assert_eq!(goal(ids[0], 2 * g.group_blocks), a, "a claim is kept");
    let hash = 5u64.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    let home = (hash * g.groups_count()) >> 32;
    assert_eq!(
        goal(ids[2], 10),
        home,
        "a small file starts at its key's group"
    );
    vol.close_file(ids[0]).unwrap();
    assert_eq!(
        goal(ids[2], 2 * g.group_blocks),
        a,
        "the claim went at close"
    );
}

/// A key's group running low (under half the average free space) sends the key's next
/// file to the next roomy group, as Orlov keeps new directories out of crowded groups;
/// files of a key whose group has room stay there.
#[test]
fn a_placed_file_skips_its_keys_group_when_it_runs_low() {
    let dev = device(22);
    let vol = Volume::mkfs(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let g = geometry();
    let key = 1u64;
    let home = super::placement::key_group(key, g.groups_count());
    assert!(
        home + 1 < g.groups_count() - 1,
        "the test wants a middle group"
    );
    let first_group = |id: u64| g.group_of(vol.extents(id).unwrap()[0].extent.start);
    let a = vol.create_placed(b"", key).unwrap();
    vol.write(a, 0, &pattern(1, 256 * 1024)).unwrap();
    assert_eq!(first_group(a), home);
    // Someone else fills most of the key's group (the file's preallocation given back).
    vol.close_file(a).unwrap();
    let left = vol.store().group_free_blocks(home);
    let req = AllocRequest::new(u64::MAX - 1, left - 100)
        .min_len(left - 100)
        .goal(g.group_start(home) + 64)
        .exact();
    let taken = vol.store().allocate(&req).unwrap();
    assert_eq!(g.group_of(taken.start), home);
    let b = vol.create_placed(b"", key).unwrap();
    vol.write(b, 0, &pattern(2, 256 * 1024)).unwrap();
    assert_eq!(first_group(b), home + 1, "the crowded group is skipped");
    let c = vol.create_placed(b"", key).unwrap();
    vol.write(c, 0, &pattern(3, 256 * 1024)).unwrap();
    assert_eq!(
        first_group(c),
        home + 1,
        "and the key's files stay together there"
    );
}
