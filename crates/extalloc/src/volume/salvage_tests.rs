//! Salvage of damaged file tables and map segments: a damaged table entry costs at most its
//! file, a damaged map segment only the maps in it, and a version 2 table still opens.

use super::load::volume_root;
use super::*;
use crate::disk::device::MemDevice;
use crate::geometry::Extent;
use std::collections::BTreeMap;
use std::ops::Range;

pub(super) const BS: u64 = 4096;

/// A file's attribute, size and bytes.
pub(super) type Model = BTreeMap<u64, (Vec<u8>, u64, Vec<u8>)>;

pub(super) fn bytes_of(id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (id as usize * 7 + i * 13) as u8 | 1)
        .collect()
}

/// ~50 files, every fifth with a long map (written every other block: a map segment),
/// checkpointed and closed. Returns the device and what each file holds.
pub(super) fn build() -> (Arc<MemDevice>, Model) {
    let dev = Arc::new(MemDevice::new(8192 * BS));
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let mut ids = Vec::new();
    for i in 0..50u64 {
        let attr = format!("attr {i:03} {}", "x".repeat(90)).into_bytes();
        let id = vol.create(&attr).unwrap();
        if i % 5 == 0 {
            for k in 0..8 {
                vol.write(id, 2 * k * BS, &bytes_of(id + k, 3000)).unwrap();
            }
        } else {
            vol.write(id, 100, &bytes_of(id, 5000 + 37 * i as usize))
                .unwrap();
        }
        ids.push(id);
    }
    vol.close().unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let model = ids
        .iter()
        .map(|&id| {
            let size = vol.size(id).unwrap();
            (
                id,
                (vol.attr(id).unwrap(), size, vol.read(id, 0, size).unwrap()),
            )
        })
        .collect();
    drop(vol);
    (dev, model)
}

fn places(dev: &Arc<MemDevice>) -> Vec<FilePlace> {
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    let p = vol.places().unwrap();
    drop(vol);
    p
}

pub(super) fn poke(dev: &MemDevice, at: u64, f: impl Fn(u8) -> u8) {
    let mut b = [0u8];
    dev.read_at(&mut b, at).unwrap();
    dev.write_at(&[f(b[0])], at).unwrap();
}

/// Every file of `model` but `except` reads as it was.
pub(super) fn assert_intact(vol: &Volume, model: &Model, except: &[u64]) {
    for (&id, (attr, size, data)) in model {
        if except.contains(&id) {
            continue;
        }
        assert_eq!(&vol.attr(id).unwrap(), attr, "file {id}");
        assert_eq!(vol.size(id).unwrap(), *size, "file {id}");
        assert_eq!(&vol.read(id, 0, *size).unwrap(), data, "file {id}");
    }
}

/// Checkpoints and closes the salvaged volume; a plain open then works.
pub(super) fn settle(dev: &Arc<MemDevice>, vol: Volume) -> Volume {
    vol.checkpoint().unwrap();
    vol.close().unwrap();
    Volume::open(dev.clone(), Policy::default()).unwrap()
}

#[test]
fn a_flipped_attr_byte_is_refused_then_recovered() {
    let (dev, model) = build();
    let places = places(&dev);
    let hit = &places[7];
    // Frame header, id, size, blob length, then the attribute's bytes.
    poke(&dev, hit.table.start + 12 + 20 + 3, |b| b ^ 0x20);
    let err = Volume::open(dev.clone(), Policy::default()).err().unwrap();
    let text = err.to_string();
    assert!(text.contains("1 damaged file entries"), "{text}");
    assert!(text.contains(&format!("[{}]", hit.id)), "{text}");
    assert!(text.contains("extalloc fsck --repair"), "{text}");
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert_eq!(report.damaged_entries, 1, "{report:?}");
    assert_eq!(report.recovered, vec![(hit.id, hit.id)]);
    assert!(report.lost.is_empty() && report.maps_cleared.is_empty());
    assert_intact(&vol, &model, &[hit.id]);
    let (attr, size, data) = &model[&hit.id];
    let got = vol.attr(hit.id).unwrap();
    assert_eq!(got.len(), attr.len());
    assert_eq!(got.iter().zip(attr).filter(|(a, b)| a != b).count(), 1);
    assert_eq!(&vol.read(hit.id, 0, *size).unwrap(), data);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &[hit.id]);
    assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
    drop(vol);
    let (_, again) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert!(again.clean(), "{again:?}");
}

#[test]
fn a_flipped_map_byte_costs_only_its_file() {
    let (dev, model) = build();
    let places = places(&dev);
    // An inline map (its file's places have no segment range): its first extent's start,
    // high byte, far off the device. The entry: frame header, id, size, blob, placement,
    // map kind, count, logical, then the extent.
    let hit = places.iter().find(|p| p.map.is_none()).unwrap();
    let attr_len = model[&hit.id].0.len() as u64;
    let extent_at = hit.table.start + 12 + 8 + 8 + 4 + attr_len + 9 + 1 + 8 + 8;
    poke(&dev, extent_at + 6, |b| b ^ 0x10);
    assert!(Volume::open(dev.clone(), Policy::default()).is_err());
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert_eq!(report.lost.len(), 1, "{report:?}");
    assert_eq!(report.lost[0].id, Some(hit.id));
    assert!(report.lost[0].bytes.contains(&extent_at));
    assert!(vol.size(hit.id).is_err(), "a lost file is gone");
    assert_intact(&vol, &model, &[hit.id]);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &[hit.id]);
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
    assert!(c.leaked > 0, "the lost file's blocks stay allocated: {c:?}");
}

#[test]
fn a_zeroed_table_block_costs_only_the_entries_in_it() {
    let (dev, model) = build();
    let places = places(&dev);
    let first = places.iter().map(|p| p.table.start).min().unwrap();
    let block = (first / BS + 1) * BS;
    dev.write_at(&[0u8; BS as usize], block).unwrap();
    let touched: Vec<u64> = places
        .iter()
        .filter(|p| p.table.start < block + BS && block < p.table.end)
        .map(|p| p.id)
        .collect();
    assert!(touched.len() > 5, "{touched:?}");
    let err = Volume::open(dev.clone(), Policy::default()).err().unwrap();
    assert!(err.to_string().contains("fsck --repair"), "{err}");
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert_eq!(report.damaged_entries, touched.len() as u64, "{report:?}");
    assert!(report.table_damaged);
    for &id in &touched {
        let recovered = report.recovered.iter().any(|&(now, _)| now == id);
        assert!(recovered || vol.size(id).is_err(), "file {id}: {report:?}");
    }
    assert_intact(&vol, &model, &touched);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &touched);
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
}

#[test]
fn a_flipped_segment_byte_clears_only_the_maps_it_holds() {
    let (dev, model) = build();
    let places = places(&dev);
    let hit = places.iter().find(|p| p.map.is_some()).unwrap();
    let at = hit.map.as_ref().unwrap().start + 20;
    poke(&dev, at, |b| b ^ 0x01);
    let owners: Vec<u64> = places
        .iter()
        .filter(|p| p.map.as_ref().is_some_and(|m| m.contains(&at)))
        .map(|p| p.id)
        .collect();
    assert_eq!(owners, vec![hit.id]);
    // A plain open reads no map: it opens, and the hit file's map is refused when read.
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    assert!(vol.read(hit.id, 0, 10).is_err());
    drop(vol);
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    let cleared: Vec<u64> = report.maps_cleared.iter().map(|c| c.id).collect();
    assert_eq!(cleared, owners, "{report:?}");
    assert_eq!(report.damaged_entries, 0);
    assert!(!report.table_damaged);
    assert_intact(&vol, &model, &owners);
    let (attr, size, _) = &model[&hit.id];
    assert_eq!(&vol.attr(hit.id).unwrap(), attr);
    assert_eq!(vol.read(hit.id, 0, *size).unwrap(), vec![0; *size as usize]);
    let vol = settle(&dev, vol);
    assert_intact(&vol, &model, &owners);
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
}

#[test]
fn tables_of_versions_2_and_3_open_and_the_next_checkpoint_builds_the_tree() {
    for v2 in [true, false] {
        let dev = Arc::new(MemDevice::new(8192 * BS));
        let geometry = Geometry::new(4096, 1024, 8192).unwrap();
        let vol = Volume::mkfs(dev.clone(), &geometry, 64, Policy::default()).unwrap();
        let a = vol.create(b"a").unwrap();
        vol.write(a, 0, &bytes_of(1, 9000)).unwrap();
        let area = write_legacy(&vol, v2);
        drop(vol);
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(
            volume_root(vol.store()).unwrap().tree.is_none(),
            "a table area"
        );
        assert_eq!(vol.read(a, 0, 9000).unwrap(), bytes_of(1, 9000));
        assert_eq!(vol.places().unwrap()[0].id, a);
        assert!(vol.check().unwrap().clean(), "{:?}", vol.check());
        vol.close().unwrap();
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(
            volume_root(vol.store()).unwrap().tree.is_some(),
            "the tree built"
        );
        assert_eq!(vol.read(a, 0, 9000).unwrap(), bytes_of(1, 9000));
        assert!(vol.check().unwrap().clean());
        vol.close().unwrap();
        // The area was retired by the upgrade and freed by the checkpoint after it.
        let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
        assert!(
            vol.store().allocator().check_held(area).is_err(),
            "{area:?}"
        );
        assert!(vol.check().unwrap().clean());
    }
}

/// Changes the journal holds for a file whose entry is lost are skipped and counted; the
/// other files' changes apply.
#[test]
fn journal_changes_naming_a_lost_file_are_skipped() {
    let (dev, model) = build();
    let places = places(&dev);
    let hit = places.iter().find(|p| p.map.is_none()).unwrap();
    let other = *model.keys().find(|&&id| id != hit.id).unwrap();
    let vol = Volume::open(dev.clone(), Policy::default()).unwrap();
    vol.write(hit.id, 50_000, &[7; 5000]).unwrap();
    vol.set_attr(hit.id, b"new").unwrap();
    vol.write(other, 0, b"changed").unwrap();
    vol.sync().unwrap();
    // Dropped without close: the changes stay in the journal, after the table.
    drop(vol);
    let attr_len = model[&hit.id].0.len() as u64;
    let extent_at = hit.table.start + 12 + 8 + 8 + 4 + attr_len + 9 + 1 + 8 + 8;
    poke(&dev, extent_at + 6, |b| b ^ 0x10);
    let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
    assert_eq!(report.lost.len(), 1, "{report:?}");
    assert_eq!(report.lost[0].id, Some(hit.id));
    assert!(report.changes_skipped >= 2, "{report:?}");
    assert!(vol.size(hit.id).is_err());
    assert_eq!(vol.read(other, 0, 7).unwrap(), b"changed");
    assert_intact(&vol, &model, &[hit.id, other]);
    let vol = settle(&dev, vol);
    assert_eq!(vol.read(other, 0, 7).unwrap(), b"changed");
    let c = vol.check().unwrap();
    assert_eq!((c.mapped_free, c.mapped_twice), (0, 0), "{c:?}");
}

/// Random bytes of the table and the map segments changed: `open_salvaging` never panics,
/// the other files read as they were, and after its checkpoint a plain open works and no
/// block is mapped twice or mapped while free.
#[test]
fn random_damage_is_salvaged_and_never_amplified() {
    let (dev, model) = build();
    let places = places(&dev);
    let mut image = vec![0u8; (8192 * BS) as usize];
    dev.read_at(&mut image, 0).unwrap();
    let mut targets: Vec<Range<u64>> = places.iter().map(|p| p.table.clone()).collect();
    targets.extend(places.iter().filter_map(|p| p.map.clone()));
    let mut seed = 0xfeed_u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 17
    };
    for round in 0..120 {
        let dev = Arc::new(MemDevice::new(8192 * BS));
        dev.write_at(&image, 0).unwrap();
        let mut hit_bytes: Vec<Range<u64>> = Vec::new();
        for _ in 0..(round % 4 + 1) {
            let t = &targets[next() as usize % targets.len()];
            let at = t.start + next() % (t.end - t.start);
            let v = next() as u8;
            if round % 7 == 3 {
                // A zeroed block.
                let block = at / BS * BS;
                dev.write_at(&[0u8; BS as usize], block).unwrap();
                hit_bytes.push(block..block + BS);
                continue;
            }
            poke(&dev, at, |b| {
                if round % 2 == 0 {
                    b ^ (1 << (round % 8))
                } else {
                    v
                }
            });
            hit_bytes.push(at..at + 1);
        }
        let (vol, report) = Volume::open_salvaging(dev.clone(), Policy::default()).unwrap();
        let hit: Vec<u64> = places
            .iter()
            .filter(|p| {
                hit_bytes.iter().any(|b| {
                    let meets = |r: &Range<u64>| r.start < b.end && b.start < r.end;
                    meets(&p.table) || p.map.as_ref().is_some_and(meets)
                })
            })
            .map(|p| p.id)
            .collect();
        assert_intact(&vol, &model, &hit);
        let vol = settle(&dev, vol);
        assert_intact(&vol, &model, &hit);
        let c = vol.check().unwrap();
        assert_eq!(
            (c.mapped_free, c.mapped_twice),
            (0, 0),
            "round {round}: {c:?} {report:?}"
        );
    }
}

/// Checkpoints the volume as a version 3 root names a table (of version 2 if `v2`): one
/// area of one extent, the files' maps inline, the tree's nodes and the retired blocks
/// listed retired. The volume must then be dropped, not closed. Returns the area.
fn write_legacy(vol: &Volume, v2: bool) -> Extent {
    use super::record::{MapRef, SideRef};
    use super::root::Root;
    use super::table::{encode_table, encode_table_v2, Table};
    let _closed = vol.gate.write();
    vol.commit_locked().unwrap();
    let files = vol.files.read().values().cloned().collect::<Vec<_>>();
    let mut table = Table::default();
    for f in files {
        let f = vol.lock_loaded(&f).unwrap();
        let entries = f.entries();
        assert!(entries.len() <= super::record::INLINE_EXTENTS);
        table.files.push(f.table_file(MapRef::Inline(entries)));
    }
    let meta = vol.meta.lock().clone();
    let nb = super::node::node_blocks(BS);
    let nodes = meta.tree.as_ref().unwrap().nodes();
    table.retired = nodes.iter().map(|n| Extent::new(n.block, nb)).collect();
    table.retired.extend(vol.segs.lock().all());
    let bytes = match v2 {
        true => encode_table_v2(&table),
        false => encode_table(&table),
    };
    let blocks = (bytes.len() as u64).div_ceil(BS);
    let req = crate::alloc::AllocRequest::new(super::state::TABLE_OWNER, blocks).min_len(blocks);
    let area = vol.store.allocate(&req).unwrap();
    let mut padded = bytes.clone();
    padded.resize((blocks * BS) as usize, 0);
    vol.dev.write_at(&padded, area.start * BS).unwrap();
    vol.commit_locked().unwrap();
    let root = Root {
        sides: [SideRef::legacy(area), SideRef::legacy(Extent::new(0, 0))],
        active: 0,
        table_bytes: bytes.len() as u64,
        table_crc: crc32c::crc32c(&bytes),
        next_id: meta.next_id,
        tree: None,
    };
    *vol.prepared_root.lock() = Some(root.encode());
    vol.store.checkpoint().unwrap();
    area
}
