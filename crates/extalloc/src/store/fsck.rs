//! `fsck`: checks a device's on-disk state without changing it.
//!
//! - the superblock: which copy is valid, the state (an interrupted checkpoint);
//! - every group: descriptor and bitmap checksums, free count against the bitmap, metadata
//!   blocks and the backup superblock marked used;
//! - the journal: the records after the tail, and whether each applies to the home state
//!   (an allocation of free blocks, a free of used ones).
//!
//! `check` runs these as three steps, in this order, each adding to the [`Report`].
//!
//! Data structures: the [`Report`], and the home bitmaps as read (`Home`), to which the
//! journal's records are applied in memory only. Invariant: nothing is written to the
//! device, and `Report::clean` holds exactly when no problem was found (an interrupted
//! checkpoint is not one: open repairs it). It uses `disk/` only, never a `Store`: it
//! checks a device no store has open.
//!
//! Locks: none. Nothing may write the device meanwhile: the CLI opens it read-only, under a
//! shared `flock`.

use crate::disk::device::Device;
use crate::disk::format::{self, Superblock, SUPERBLOCK_READ};
use crate::disk::journal::{self, Area, Op, Record};
use crate::error::{Error, Result};

/// What `fsck` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Report {
    /// Blocks of the device (from the superblock used).
    pub blocks: u64,
    /// Block groups of the device.
    pub groups: u64,
    /// The superblock at block 0 decodes.
    pub primary_superblock_ok: bool,
    /// The backup superblock in the device's last block decodes.
    pub backup_superblock_ok: bool,
    /// A checkpoint was interrupted: journal changes may already be home, and open repairs
    /// it on the next open.
    pub checkpoint_interrupted: bool,
    /// The device is marked in use: a store has it open, or the last one did not close it
    /// (a crash; opening it read-write recovers). Not a problem by itself.
    pub in_use: bool,
    /// Who the owner record says holds it (host, boot id, pid, heartbeat), when in use.
    pub owner: Option<String>,
    /// When in use: this machine can tell the owner is gone (this boot, its process no
    /// longer running), so an open takes the device over at once. False when the owner
    /// may be live, or only a watch of its heartbeat can tell (an open then waits up to two
    /// heartbeats and a second before it takes the device over or refuses).
    pub owner_gone: bool,
    /// Free blocks the groups that passed their checks hold at home (before the journal).
    pub free_blocks: u64,
    /// Groups whose descriptor or bitmap fails its checksum or disagrees with the other.
    pub corrupt_groups: Vec<u64>,
    /// Metadata blocks (or the backup superblock) marked free.
    pub metadata_marked_free: u64,
    /// Intact records after the journal's tail.
    pub journal_records: u64,
    /// Records whose changes do not apply to the home state (counted per operation).
    pub journal_conflicts: u64,
    /// Committed records stranded after damage in the middle of the journal (0: none).
    pub journal_records_lost: u64,
    /// An earlier open accepted the loss of a damaged journal's records, and the repair
    /// that should follow did not finish (`STATE_JOURNAL_LOST`): a problem until
    /// `fsck --repair` ends.
    pub journal_loss_unrepaired: bool,
    /// Every problem found, in words; empty on a clean device.
    pub problems: Vec<String>,
}

impl Report {
    /// No problem found (an interrupted checkpoint is not one: open repairs it).
    pub fn clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks `dev` without writing to it: the superblocks, every group, then the journal
/// against the home state. An I/O error, or a device with no superblock copy that decodes,
/// is an error; every problem found is in the report.
pub fn check(dev: &dyn Device) -> Result<Report> {
    let sb = format::read_superblock(dev)?;
    let mut r = Report {
        blocks: sb.blocks_count,
        groups: sb.groups(),
        checkpoint_interrupted: sb.state & format::STATE_CHECKPOINTING != 0,
        in_use: sb.state & format::STATE_IN_USE != 0,
        journal_loss_unrepaired: sb.state & format::STATE_JOURNAL_LOST != 0,
        ..Report::default()
    };
    if r.journal_loss_unrepaired {
        r.problems.push(
            "an earlier repair accepted the loss of journal records after damage and did \
             not finish (what was lost is no longer known; open refuses the device)"
                .into(),
        );
    }
    if r.in_use {
        let rec = format::read_owner(dev)?;
        r.owner = rec.as_ref().map(|o| o.describe());
        r.owner_gone = super::claim::owner_gone(rec.as_ref());
    }
    check_superblocks(dev, &sb, &mut r);
    let home = check_groups(dev, &sb, &mut r)?;
    check_journal(dev, &sb, home, &mut r)?;
    Ok(r)
}

/// The home state as `check_groups` read it.
struct Home {
    /// Each group's bitmap; `None` for a group that failed its checks.
    bitmaps: Vec<Option<Vec<u8>>>,
}

/// Both superblock copies: whether each decodes.
fn check_superblocks(dev: &dyn Device, sb: &Superblock, r: &mut Report) {
    let bs = u64::from(sb.block_size);
    let copy_ok = |at: u64| -> bool {
        let mut b = [0u8; SUPERBLOCK_READ];
        dev.read_at(&mut b, at).is_ok() && Superblock::decode_with_root(&b).is_ok()
    };
    r.primary_superblock_ok = copy_ok(0);
    r.backup_superblock_ok = copy_ok(sb.backup_block() * bs);
    if !r.primary_superblock_ok {
        r.problems
            .push("primary superblock damaged (the backup was used)".into());
    }
    if !r.backup_superblock_ok {
        r.problems.push("backup superblock damaged".into());
    }
    debug_assert!(r.primary_superblock_ok && r.backup_superblock_ok || !r.problems.is_empty());
}

/// Every group's descriptor and bitmap: checksums, free count, metadata blocks and the
/// backup superblock marked used. Returns the bitmaps read.
fn check_groups(dev: &dyn Device, sb: &Superblock, r: &mut Report) -> Result<Home> {
    let mut home = Home {
        bitmaps: Vec::new(),
    };
    for g in 0..sb.groups() {
        match format::read_group(dev, sb, g) {
            Ok((desc, bitmap)) => {
                r.free_blocks += u64::from(desc.free_blocks);
                r.metadata_marked_free += metadata_marked_free(sb, g, &bitmap);
                home.bitmaps.push(Some(bitmap));
            }
            // After an interrupted checkpoint too: the groups it was writing have
            // descriptors in flight, which accept either of their two bitmaps only.
            Err(Error::Corrupt { what, detail }) => {
                r.corrupt_groups.push(g);
                r.problems.push(format!("{what}: {detail}"));
                home.bitmaps.push(None);
            }
            Err(e) => return Err(e),
        }
    }
    if r.metadata_marked_free > 0 {
        r.problems.push(format!(
            "{} metadata blocks marked free",
            r.metadata_marked_free
        ));
    }
    // A bitmap per group, none for exactly the corrupt ones.
    debug_assert_eq!(home.bitmaps.len() as u64, sb.groups());
    debug_assert_eq!(
        home.bitmaps.iter().filter(|b| b.is_none()).count(),
        r.corrupt_groups.len()
    );
    Ok(home)
}

/// Metadata blocks (and the backup superblock) of group `g` that `bitmap` marks free.
fn metadata_marked_free(sb: &Superblock, g: u64, bitmap: &[u8]) -> u64 {
    let meta_end = sb.metadata_end();
    let start = g * sb.group_blocks;
    let len = (sb.blocks_count - start).min(sb.group_blocks);
    let mut free = 0;
    for i in 0..len {
        let b = start + i;
        let used = bitmap[(i / 8) as usize] & (1 << (i % 8)) != 0;
        if (b < meta_end || b == sb.backup_block()) && !used {
            free += 1;
        }
    }
    free
}

/// The journal: the records after the tail, damage in the middle, and whether each record
/// applies to the home state (after an interrupted checkpoint a group may already hold
/// them: conflicts are expected then).
fn check_journal(dev: &dyn Device, sb: &Superblock, mut home: Home, r: &mut Report) -> Result<()> {
    let bs = u64::from(sb.block_size);
    let area = Area {
        start: sb.journal_start * bs,
        len: sb.journal_blocks * bs,
    };
    let replayed = journal::replay(dev, area, sb.journal_tail, sb.journal_tail_seq)?;
    r.journal_records = replayed.records.len() as u64;
    if let Some(d) = &replayed.damage {
        r.journal_records_lost = d.stranded.len() as u64;
        r.problems.push(format!(
            "journal damaged at byte {}: record {} is unreadable and {} later committed \
             records after it would be lost by a replay (open refuses the device)",
            area.start + d.offset,
            d.lost_seq,
            d.stranded.len()
        ));
    }
    debug_assert!(
        replayed.damage.is_none() || !r.problems.is_empty(),
        "damage unreported"
    );
    r.journal_conflicts = apply_to_home(sb, &replayed.records, &mut home.bitmaps);
    if r.journal_conflicts > 0 && !r.checkpoint_interrupted {
        r.problems.push(format!(
            "{} journal changes do not apply to the home state",
            r.journal_conflicts
        ));
    }
    Ok(())
}

/// Applies `records` in order to the home `bitmaps` (groups that failed their checks are
/// skipped) and counts the block changes that do not apply: an allocation of a used block,
/// a free of a free one.
fn apply_to_home(sb: &Superblock, records: &[Record], bitmaps: &mut [Option<Vec<u8>>]) -> u64 {
    debug_assert_eq!(bitmaps.len() as u64, sb.groups(), "a bitmap slot per group");
    debug_assert!(
        records.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "records in order"
    );
    let mut conflicts = 0;
    for rec in records {
        for op in &rec.ops {
            let (e, want_used_before) = match *op {
                Op::Allocate(e) => (e, false),
                Op::Free(e) => (e, true),
            };
            for b in e.start..e.end().min(sb.blocks_count) {
                let g = b / sb.group_blocks;
                let i = b % sb.group_blocks;
                let Some(Some(bitmap)) = bitmaps.get_mut(g as usize) else {
                    continue;
                };
                let used = bitmap[(i / 8) as usize] & (1 << (i % 8)) != 0;
                if used != want_used_before {
                    conflicts += 1;
                }
                if want_used_before {
                    bitmap[(i / 8) as usize] &= !(1 << (i % 8));
                } else {
                    bitmap[(i / 8) as usize] |= 1 << (i % 8);
                }
            }
        }
    }
    conflicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{AllocRequest, Policy};
    use crate::disk::device::MemDevice;
    use crate::geometry::Geometry;
    use crate::store::Store;
    use std::sync::Arc;

    #[test]
    fn a_clean_device_and_each_kind_of_damage() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let g = Geometry::new(4096, 1024, 8192).unwrap();
        let s = Store::create(dev.clone(), &g, 8, Policy::default()).unwrap();
        s.allocate(&AllocRequest::new(1, 10)).unwrap();
        s.commit(b"one").unwrap();
        drop(s);
        let r = check(dev.as_ref()).unwrap();
        assert!(r.clean(), "{r:?}");
        assert_eq!(r.journal_records, 1);
        assert_eq!(
            r.free_blocks,
            8192 - (1 + 8 + 1 + 8) - 1,
            "home state: before the record"
        );
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        let mut descs = vec![0u8; 4096];
        dev.read_at(&mut descs, sb.desc_start * 4096).unwrap();
        // A damaged bitmap (of a group written home: mkfs writes none).
        let (_, bm3) = format::read_group(dev.as_ref(), &sb, 3).unwrap();
        format::write_group(dev.as_ref(), &sb, 3, &bm3, 0, &mut descs, 0).unwrap();
        dev.write_at(&[0xff], (sb.bitmap_start + 3) * 4096 + 10)
            .unwrap();
        // A metadata block marked free (with a consistent checksum, as a bug would write).
        let (_, mut bm) = format::read_group(dev.as_ref(), &sb, 0).unwrap();
        bm[0] &= !0b10; // block 1: the journal's first block
        format::write_group(dev.as_ref(), &sb, 0, &bm, 0, &mut descs, 0).unwrap();
        dev.write_at(&descs, sb.desc_start * 4096).unwrap();
        // A damaged primary superblock.
        dev.write_at(&[0x77], 30).unwrap();
        let r = check(dev.as_ref()).unwrap();
        assert!(!r.clean());
        assert_eq!(r.corrupt_groups, vec![3]);
        assert_eq!(r.metadata_marked_free, 1);
        assert!(!r.primary_superblock_ok && r.backup_superblock_ok);
    }
}
