//! The file table's bytes: round trips, version 2, and salvage of damaged tables.

use super::*;
use crate::volume::record::{encode_map, MapEntry, SegRef};

fn table(n: u64) -> Table {
    let map: Vec<MapEntry> = (0..9)
        .map(|i| (i * 3, Extent::new(100 + i * 7, 2), i % 2 == 0))
        .collect();
    let bytes = encode_map(&map);
    let files = (1..=n)
        .map(|id| TableFile {
            id,
            size: id * 1000,
            attr: format!("attr of {id}").into_bytes(),
            placement: (id % 3 == 0).then_some(id * 11),
            map: if id % 2 == 0 {
                MapRef::Inline(vec![(0, Extent::new(1000 + id, 1), false)])
            } else {
                MapRef::Segment(SegRef {
                    seg: Extent::new(40, 1),
                    offset: 8,
                    len: bytes.len() as u32,
                    crc: crc32c::crc32c(&bytes),
                    extents: 9,
                    blocks: 18,
                })
            },
        })
        .collect();
    Table {
        files,
        retired: vec![Extent::new(30, 2)],
    }
}

#[test]
fn tables_round_trip_and_garbage_is_refused() {
    for t in [table(0), table(2), table(7)] {
        let encoded = encode_table(&t);
        assert_eq!(decode_table(&encoded).unwrap(), t);
        let salvaged = salvage_table(&encoded);
        assert_eq!(salvaged.table, t, "an undamaged table salvages whole");
        assert!(salvaged.damaged.is_empty() && !salvaged.retired_lost);
        for cut in 0..encoded.len() {
            assert!(decode_table(&encoded[..cut]).is_err());
        }
        let mut huge = encoded.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_table(&huge).is_err(), "a damaged count is refused");
        let (_, places) = decode_placed(&encoded, true).unwrap();
        for (f, p) in t.files.iter().zip(&places) {
            let piece = &encoded[p.start as usize..p.end as usize];
            assert_eq!(guess_file(piece).as_ref(), Some(f));
        }
    }
}

#[test]
fn version_2_tables_are_still_read() {
    let t = table(5);
    let v2 = encode_table_v2(&t);
    assert_eq!(decode_table(&v2).unwrap(), t);
    for cut in 0..v2.len() {
        assert!(decode_table(&v2[..cut]).is_err());
    }
    let mut bad = v2.clone();
    bad[30] ^= 1;
    let s = salvage_table(&bad);
    assert!(s.table.files.is_empty() && s.damaged.len() == 1 && s.retired_lost);
}

/// One flipped byte anywhere costs at most the entry it falls in; every other entry is
/// read intact.
#[test]
fn a_flipped_byte_costs_only_its_entry() {
    let t = table(7);
    let encoded = encode_table(&t);
    let (_, places) = decode_placed(&encoded, true).unwrap();
    for at in 0..encoded.len() {
        let mut bad = encoded.clone();
        bad[at] ^= 0x40;
        let s = salvage_table(&bad);
        let hit = places.iter().position(|p| p.contains(&(at as u64)));
        for (i, f) in t.files.iter().enumerate() {
            if Some(i) != hit {
                assert!(s.table.files.contains(f), "byte {at}: file {} lost", f.id);
            }
        }
        if let Some(i) = hit {
            assert!(!s.table.files.contains(&t.files[i]), "byte {at}");
            assert_eq!(s.damaged.len(), 1, "byte {at}: {:?}", s.damaged);
            assert!(s.damaged[0].bytes.contains(&(at as u64)));
            assert!(!s.retired_lost);
        } else if at >= HEADER_BYTES {
            // The retired frame (a flipped magic makes its stretch look like an entry).
            assert!(s.retired_lost && s.damaged.len() <= 1, "byte {at}");
        } else {
            assert!(s.damaged.is_empty() && !s.retired_lost, "byte {at}");
        }
    }
}

/// A zeroed stretch costs the entries it touches; the others are read whole; nothing
/// panics on any stretch.
#[test]
fn a_zeroed_stretch_costs_the_entries_it_touches() {
    let t = table(9);
    let encoded = encode_table(&t);
    let (_, places) = decode_placed(&encoded, true).unwrap();
    for from in (0..encoded.len()).step_by(7) {
        for len in [1, 13, 60, 150] {
            let end = (from + len).min(encoded.len());
            let mut bad = encoded.clone();
            bad[from..end].fill(0);
            let s = salvage_table(&bad);
            let (s0, e0) = (from as u64, end as u64);
            // Touched and changed (zeros over zeros change nothing).
            let touched = |p: &Range<u64>| {
                p.start < e0
                    && s0 < p.end
                    && encoded[p.start.max(s0) as usize..p.end.min(e0) as usize]
                        .iter()
                        .any(|&b| b != 0)
            };
            for (f, p) in t.files.iter().zip(&places) {
                if !touched(p) {
                    assert!(s.table.files.contains(f), "{from}+{len}: {} lost", f.id);
                }
            }
            let lost = places.iter().filter(|p| touched(p)).count() as u64;
            let reported = s.damaged.len() as u64 + s.uncounted;
            assert!(
                from < HEADER_BYTES || reported >= lost,
                "{from}+{len}: {lost} lost, {reported} reported"
            );
        }
    }
}

#[test]
fn salvage_never_panics_on_garbage() {
    let encoded = encode_table(&table(4));
    let mut seed = 7u64;
    for round in 0..2000 {
        let mut bad = encoded.clone();
        for _ in 0..(round % 9 + 1) {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (seed >> 33) as usize % bad.len();
            bad[at] = (seed >> 20) as u8;
        }
        let cut = (seed >> 40) as usize % (bad.len() + 1);
        let _ = salvage_table(&bad[..cut]);
        let _ = decode_table(&bad[..cut]);
    }
    for junk in [
        &b""[..],
        b"XVTB",
        b"\xF1XVF\xff\xff\xff\xff",
        b"\xF1XVF\x00\x00\x00\x00\x00",
    ] {
        let _ = salvage_table(junk);
    }
}

/// A leaf's one entry found in place gives the body `frames` gives; a missing id gives
/// `None`; ids out of order are damage; only the match's own crc is computed (the node's
/// covers the rest when it is read).
#[test]
fn find_frame_gives_one_entry_of_a_leaf_as_frames_does() {
    let bodies: Vec<Vec<u8>> = [3u64, 8, 21, 400]
        .iter()
        .map(|&id| {
            [
                id.to_le_bytes().as_slice(),
                format!("entry {id}").as_bytes(),
            ]
            .concat()
        })
        .collect();
    let mut leaf = Vec::new();
    for b in &bodies {
        put_file_frame(&mut leaf, b);
    }
    let all = frames(&leaf).unwrap();
    for (b, f) in bodies.iter().zip(&all) {
        let id = frame_id(b).unwrap();
        assert_eq!(find_frame(&leaf, id).unwrap(), Some(*f), "entry {id}");
    }
    for missing in [0, 4, 22, 401, u64::MAX] {
        assert_eq!(find_frame(&leaf, missing).unwrap(), None, "{missing}");
    }
    assert_eq!(find_frame(&[], 3).unwrap(), None, "an empty leaf");
    // The second entry's last byte flipped: its own crc fails when it is the one asked
    // for, not when another is.
    let second_end = 2 * 12 + bodies[0].len() + bodies[1].len();
    let mut hit = leaf.clone();
    hit[second_end - 1] ^= 1;
    assert!(find_frame(&hit, 8).is_err());
    assert_eq!(find_frame(&hit, 21).unwrap(), Some(all[2]));
    // Two entries swapped: out of order, whichever is asked for.
    let mut swapped = Vec::new();
    for b in [&bodies[0], &bodies[2], &bodies[1], &bodies[3]] {
        put_file_frame(&mut swapped, b);
    }
    assert!(find_frame(&swapped, 3).is_err() && find_frame(&swapped, 400).is_err());
}
