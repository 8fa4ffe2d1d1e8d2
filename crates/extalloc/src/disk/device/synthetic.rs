//! A synthetic device ([`SyntheticDevice`]): an extalloc device of any size up to 2^48
//! blocks, already filled, that exists only as a seed. Every read of a metadata block is
//! generated on demand, deterministically; writes are kept in memory. It opens through the
//! same store path as a real device (lazy loading, read-ahead, idle drops), so a 1 PiB
//! device 70 % full can be measured on a machine with neither the disk nor the time to
//! fill one.
//!
//! - **Bitmaps** come from a pool of [`TEMPLATES`] template bitmaps made from the seed at
//!   construction: each alternates used and free runs, free runs log-uniform in
//!   `free_extent_blocks`, used runs sized so that the template's fill is the spec's fill
//!   jittered by +-10 %. Group `g` takes template `hash(seed, g) % TEMPLATES`, so its bitmap
//!   and its descriptor (free count, orders, crc32c: the template's) cost a lookup.
//! - **Groups holding metadata**, the backup superblock's group and a short last group are
//!   as `mkfs` leaves them (uninitialised, their initial bitmap).
//! - **The descriptor table** is generated from the same choice, so it agrees with the
//!   bitmaps: `fsck` of a synthetic device is clean.
//! - The superblock (primary and backup) is written at construction into the overlay of
//!   written blocks; every other unwritten block reads as zeros (an empty journal).
//!
//! Data structures: the layout ([`Superblock`]) and its special groups, the templates
//! (bitmap bytes and their [`GroupDesc`]), the overlay (`block -> bytes`, under a
//! read-write lock).
//!
//! Invariant: a block reads as its last write, else as generated; what is generated for a
//! block never changes.
//!
//! Lock order: the overlay's lock only, never held across a call out.

use super::contract::{check_range, Device};
use crate::disk::format::{
    initial_bitmap, write_superblock, GroupDesc, Superblock, DESC_BITMAP_UNINIT, DESC_BYTES,
};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use parking_lot::RwLock;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// Template bitmaps in the pool.
pub const TEMPLATES: usize = 1024;

/// What a synthetic device looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// Block size, group size and block count.
    pub geometry: Geometry,
    /// Journal blocks (as `mkfs --journal-size`).
    pub journal_blocks: u64,
    /// Fraction of each ordinary group in use, 0 to 0.95 (each template jitters it by
    /// +-10 %).
    pub fill: f64,
    /// Free runs' lengths in blocks, log-uniform between the two (inclusive).
    pub free_extent_blocks: (u64, u64),
    /// Seed of the templates and of each group's choice among them.
    pub seed: u64,
}

impl SyntheticSpec {
    fn validate(&self) -> Result<()> {
        if !(0.0..=0.95).contains(&self.fill) {
            return Err(Error::InvalidSetting {
                setting: "synthetic device fill",
                value: self.fill.to_string(),
                expected: "give a fraction from 0 to 0.95".into(),
            });
        }
        let (lo, hi) = self.free_extent_blocks;
        if lo == 0 || lo > hi || hi > self.geometry.group_blocks {
            return Err(Error::InvalidSetting {
                setting: "synthetic device free extent lengths",
                value: format!("{lo}..{hi} blocks"),
                expected: format!(
                    "need 1 <= min <= max <= a group ({} blocks)",
                    self.geometry.group_blocks
                ),
            });
        }
        Ok(())
    }
}

/// The groups a synthetic device leaves as `mkfs` does (see [`SyntheticDevice::special`]).
struct SpecialGroups {
    metadata_end: u64,
    backup: u64,
    whole_end: u64,
}

/// One template: a group's bitmap bytes and their descriptor.
struct Template {
    bitmap: Vec<u8>,
    desc: GroupDesc,
}

/// A device generated from a [`SyntheticSpec`] (see the module documentation).
pub struct SyntheticDevice {
    sb: Superblock,
    block_size: u64,
    seed: u64,
    /// Groups below this one hold metadata; the backup superblock's group; the first
    /// group past the device's last whole one: the special groups, taken once from the
    /// layout (every descriptor read asks).
    special: SpecialGroups,
    templates: Vec<Template>,
    written: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl SyntheticDevice {
    /// Builds the device: the layout, the template pool and the superblocks. Fails on a
    /// spec out of range or a geometry that holds no file system.
    pub fn new(spec: &SyntheticSpec) -> Result<SyntheticDevice> {
        spec.validate()?;
        let sb = Superblock::layout(&spec.geometry, spec.journal_blocks, [0x5e; 16])?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
        let ordinary = sb.metadata_end().div_ceil(sb.group_blocks); // a group holding data only
        let templates = (0..TEMPLATES)
            .map(|_| {
                let bitmap = template_bitmap(&sb, spec, &mut rng);
                let desc = GroupDesc::for_bitmap(&sb, ordinary, &bitmap, 0);
                Template { bitmap, desc }
            })
            .collect();
        let special = SpecialGroups {
            metadata_end: sb.metadata_end().div_ceil(sb.group_blocks),
            backup: sb.backup_block() / sb.group_blocks,
            whole_end: sb.blocks_count / sb.group_blocks,
        };
        let dev = SyntheticDevice {
            special,
            block_size: u64::from(sb.block_size),
            sb,
            seed: spec.seed,
            templates,
            written: RwLock::new(HashMap::new()),
        };
        write_superblock(&dev, &dev.sb)?;
        Ok(dev)
    }

    /// The layout.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// Blocks written so far (kept in memory).
    pub fn written_blocks(&self) -> usize {
        self.written.read().len()
    }

    /// Is group `g` as `mkfs` leaves it (metadata, the backup superblock, a short tail)?
    fn special(&self, g: u64) -> bool {
        let s = &self.special;
        let special = g < s.metadata_end || g == s.backup || g >= s.whole_end;
        debug_assert_eq!(
            special,
            g * self.sb.group_blocks < self.sb.metadata_end()
                || self.sb.backup_block() / self.sb.group_blocks == g
                || (g + 1) * self.sb.group_blocks > self.sb.blocks_count,
            "group {g}: the special groups as the layout has them"
        );
        special
    }

    /// The template group `g` takes (`None`: a special group).
    fn template(&self, g: u64) -> Option<&Template> {
        if self.special(g) {
            return None;
        }
        let i = (splitmix(self.seed ^ g.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % TEMPLATES as u64)
            as usize;
        Some(&self.templates[i])
    }

    fn descriptor(&self, g: u64) -> GroupDesc {
        match self.template(g) {
            Some(t) => t.desc,
            None => {
                let mut d = GroupDesc::for_bitmap(&self.sb, g, &initial_bitmap(&self.sb, g), 0);
                d.flags = DESC_BITMAP_UNINIT;
                d.bitmap_crc = 0;
                d
            }
        }
    }

    /// Block `b` as generated.
    fn generate(&self, b: u64, out: &mut [u8]) {
        let sb = &self.sb;
        let bs = self.block_size;
        out.fill(0);
        let desc_blocks = sb.bitmap_start - sb.desc_start;
        if (sb.desc_start..sb.desc_start + desc_blocks).contains(&b) {
            let per_block = bs / DESC_BYTES as u64;
            let first = (b - sb.desc_start) * per_block;
            for g in first..(first + per_block).min(sb.groups()) {
                let at = ((g - first) * DESC_BYTES as u64) as usize;
                out[at..at + DESC_BYTES].copy_from_slice(&self.descriptor(g).encode(g));
            }
        } else if (sb.bitmap_start..sb.metadata_end()).contains(&b) {
            let per_group = u64::from(sb.bitmap_blocks);
            let g = (b - sb.bitmap_start) / per_group;
            if let Some(t) = self.template(g) {
                let part = ((b - sb.bitmap_start) % per_group * bs) as usize;
                out.copy_from_slice(&t.bitmap[part..part + bs as usize]);
            }
        }
    }
}

/// One template bitmap: used and free runs alternating from a random start.
fn template_bitmap(sb: &Superblock, spec: &SyntheticSpec, rng: &mut impl Rng) -> Vec<u8> {
    let bits = sb.group_blocks;
    let mut bitmap = vec![0u8; (u64::from(sb.bitmap_blocks) * u64::from(sb.block_size)) as usize];
    let fill = (spec.fill * rng.gen_range(0.9..=1.1)).clamp(0.0, 0.99);
    if fill <= 0.0 {
        return bitmap;
    }
    let (lo, hi) = spec.free_extent_blocks;
    let (ln_lo, ln_hi) = ((lo as f64).ln(), (hi as f64).ln());
    // The mean of a log-uniform length: (hi - lo) / ln(hi / lo).
    let mean_free = if hi > lo {
        (hi - lo) as f64 / (ln_hi - ln_lo)
    } else {
        lo as f64
    };
    let mean_used = mean_free * fill / (1.0 - fill);
    let mut pos = 0u64;
    let mut used = rng.gen_bool(fill);
    while pos < bits {
        let len = if used {
            (mean_used * rng.gen_range(0.5..1.5)).round().max(1.0) as u64
        } else {
            rng.gen_range(ln_lo..=ln_hi).exp().round().max(1.0) as u64
        };
        let end = (pos + len).min(bits);
        if used {
            for i in pos..end {
                bitmap[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
        pos = end;
        used = !used;
    }
    bitmap
}

/// The blocks `len` bytes from `offset` touch: (block, offset in it, bytes before it in
/// the buffer, bytes in it).
fn pieces(offset: u64, len: usize, bs: u64) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let at = offset + done as u64;
        let within = (at % bs) as usize;
        let n = (bs as usize - within).min(len - done);
        let piece = (at / bs, within, done, n);
        done += n;
        Some(piece)
    })
}

/// SplitMix64: a well-mixed hash of a 64-bit value.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Device for SyntheticDevice {
    fn size(&self) -> u64 {
        self.sb.blocks_count * self.block_size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        let written = self.written.read();
        let mut block = vec![0u8; self.block_size as usize];
        for (b, within, done, n) in pieces(offset, buf.len(), self.block_size) {
            match written.get(&b) {
                Some(data) => buf[done..done + n].copy_from_slice(&data[within..within + n]),
                None => {
                    self.generate(b, &mut block);
                    buf[done..done + n].copy_from_slice(&block[within..within + n]);
                }
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size())?;
        let mut written = self.written.write();
        for (b, within, done, n) in pieces(offset, buf.len(), self.block_size) {
            let data = written.entry(b).or_insert_with(|| {
                let mut block = vec![0u8; self.block_size as usize].into_boxed_slice();
                self.generate(b, &mut block);
                block
            });
            data[within..within + n].copy_from_slice(&buf[done..done + n]);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Policy;
    use crate::store::Store;
    use std::sync::Arc;

    fn spec(blocks: u64, fill: f64) -> SyntheticSpec {
        SyntheticSpec {
            geometry: Geometry::new(4096, 32768, blocks).unwrap(),
            journal_blocks: 1024,
            fill,
            free_extent_blocks: (1, 1024),
            seed: 7,
        }
    }

    /// A synthetic device opens, fsck is clean, its groups are as full as asked, and what
    /// it hands out was free: allocate until full, then check.
    #[test]
    fn a_synthetic_device_opens_checks_clean_and_fills() {
        let dev = Arc::new(SyntheticDevice::new(&spec(64 * 32768 + 100, 0.7)).unwrap());
        let report = crate::store::fsck::check(dev.as_ref()).unwrap();
        assert!(report.clean(), "{:?}", report.problems);
        let (store, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        let s = store.statfs();
        let data_blocks = s.blocks - s.metadata_blocks;
        let used = 1.0 - s.free_blocks as f64 / data_blocks as f64;
        assert!((0.6..0.8).contains(&used), "used {used}");
        let mut got = 0u64;
        while let Ok(e) = store.allocate(&crate::AllocRequest::new(1, 64)) {
            got += e.len;
        }
        assert!(got > 0);
        store.commit(b"").unwrap();
        store.allocator().check().unwrap();
        drop(store);
        let (store, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        assert!(
            store.statfs().free_blocks < 64,
            "the fill survives a reopen"
        );
    }

    #[test]
    fn generation_is_deterministic_and_bad_specs_are_refused() {
        let a = SyntheticDevice::new(&spec(40 * 32768, 0.5)).unwrap();
        let b = SyntheticDevice::new(&spec(40 * 32768, 0.5)).unwrap();
        let mut x = vec![0u8; 1 << 20];
        let mut y = vec![0u8; 1 << 20];
        a.read_at(&mut x, 4096).unwrap();
        b.read_at(&mut y, 4096).unwrap();
        assert_eq!(x, y);
        let mut s = spec(40 * 32768, 0.97);
        assert!(SyntheticDevice::new(&s).is_err());
        s.fill = 0.5;
        s.free_extent_blocks = (0, 4);
        assert!(SyntheticDevice::new(&s).is_err());
        s.free_extent_blocks = (8, 4);
        assert!(SyntheticDevice::new(&s).is_err());
        let mut buf = [0u8; 8];
        assert!(a.read_at(&mut buf, a.size() - 4).is_err());
    }

    /// A device of more groups than open reads on one thread (its descriptors in parts on
    /// several threads, its indexes filled on two): every group in the sets its figures
    /// say, the accounting whole, and an allocation anywhere is from free space.
    #[test]
    fn a_device_opened_in_parallel_parts_checks_clean() {
        let groups = crate::alloc::PARALLEL_INDEX_GROUPS + 1000;
        let mut s = spec(groups * 4096, 0.6);
        s.geometry = Geometry::new(4096, 4096, groups * 4096).unwrap();
        s.free_extent_blocks = (1, 256);
        let dev = Arc::new(SyntheticDevice::new(&s).unwrap());
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        store.allocator().check().unwrap();
        for goal in [0, groups / 2, groups - 2] {
            let mut req = crate::AllocRequest::new(goal, 8);
            req.goal = Some(goal * 4096);
            let e = store.allocate(&req).unwrap();
            assert!(e.len > 0);
        }
        store.commit(b"").unwrap();
        store.allocator().check().unwrap();
    }

    /// 1 PiB: made in well under a second (nothing but the layout and the templates).
    #[test]
    fn a_petabyte_is_cheap_to_make() {
        let blocks = (1u64 << 50) / 4096;
        let dev = SyntheticDevice::new(&spec(blocks, 0.7)).unwrap();
        assert_eq!(dev.size(), 1 << 50);
        let mut d = vec![0u8; 4096];
        dev.read_at(&mut d, dev.superblock().desc_start * 4096 + (1 << 20))
            .unwrap();
    }
}
