//! The on-disk structures on a [`Device`]: `mkfs`, and reading and writing superblocks,
//! the descriptor table and bitmaps at the places the layout (`format/mod.rs`) gives them.
//! Every read checks what it decodes (crc32c, ranges) and says which structure failed.
//!
//! Data structures: none of its own (the structures are `mod.rs`'s). Locks: none; the
//! caller serialises writes of one structure (the store, under its `commit_lock`).

use super::layout::{
    bitmap_summary, bitmap_used, corrupt, initial_bitmap, GroupDesc, Replaced, Superblock,
    DESC_BITMAP_UNINIT, DESC_BYTES, SUPERBLOCK_BYTES, SUPERBLOCK_READ,
};
use crate::disk::device::Device;
use crate::error::{Corrupted, Error, Result};
use crate::geometry::Geometry;

/// Writes a fresh file system: every block free but the metadata. Returns the superblock.
pub fn mkfs(
    dev: &dyn Device,
    geometry: &Geometry,
    journal_blocks: u64,
    uuid: [u8; 16],
) -> Result<Superblock> {
    let bs = u64::from(geometry.block_size);
    let needed = geometry.blocks_count.saturating_mul(bs);
    if dev.size() < needed {
        return Err(Error::DeviceTooSmall {
            needed,
            size: dev.size(),
        });
    }
    let sb = Superblock::layout(geometry, journal_blocks, uuid)?;
    // The layout's metadata lies inside the device, the journal after the tables.
    debug_assert!(sb.journal_start + sb.journal_blocks <= sb.metadata_end());
    debug_assert!(sb.metadata_end() <= geometry.blocks_count);
    // An empty journal: the whole area zeroed. Zeroing only its first block left a former
    // volume's records after it, whose sequence numbers (from 1, as the new journal's) read
    // as committed records behind an unreadable first one: the next open refused the new
    // volume as a journal damaged in the middle (fstests generic/570, mkfs over a device
    // whose first page mkswap had written).
    let zeros = vec![0u8; (bs * sb.journal_blocks).min(1 << 20) as usize];
    let (start, end) = (
        sb.journal_start * bs,
        (sb.journal_start + sb.journal_blocks) * bs,
    );
    let mut at = start;
    while at < end {
        let n = (end - at).min(zeros.len() as u64) as usize;
        dev.write_at(&zeros[..n], at)?;
        at += n as u64;
    }
    // No bitmap is written: every group starts uninitialised (its initial bitmap follows
    // from the layout), so making a 16 TiB device writes its descriptors only.
    let mut descs = vec![0u8; ((sb.groups() * DESC_BYTES as u64).div_ceil(bs) * bs) as usize];
    let mut plain: Option<GroupDesc> = None;
    for g in 0..sb.groups() {
        let special = g * sb.group_blocks < sb.metadata_end()
            || sb.backup_block() / sb.group_blocks == g
            || geometry.group_len(g) < sb.group_blocks;
        // Groups with nothing in them but free blocks all look alike: summarise one.
        let desc = match plain {
            Some(d) if !special => d,
            _ => {
                let mut d = GroupDesc::for_bitmap(&sb, g, &initial_bitmap(&sb, g), 0);
                d.flags = DESC_BITMAP_UNINIT;
                d.bitmap_crc = 0;
                if !special {
                    plain = Some(d);
                }
                d
            }
        };
        let at = (g * DESC_BYTES as u64) as usize;
        descs[at..at + DESC_BYTES].copy_from_slice(&desc.encode(g));
        // Paired with `read_descriptors`: what is written decodes as this group's.
        debug_assert!(GroupDesc::decode(&descs[at..at + DESC_BYTES], g).is_ok_and(|d| d == desc));
    }
    dev.write_at(&descs, sb.desc_start * bs)?;
    write_superblock(dev, &sb)?;
    // No owner: whatever a former user of the device left after the root goes.
    super::owner::clear_owner(dev)?;
    dev.flush()?;
    Ok(sb)
}

/// Writes group `g`'s bitmap home and encodes its descriptor (with `class_tag`) into
/// `descs`, a slice of the descriptor table starting at group `first`, which the caller
/// writes. Tests use it to put a group home by hand; a checkpoint flushes bitmaps before it
/// writes descriptors, so it uses [`write_bitmap`] and [`GroupDesc::for_bitmap`] itself.
#[cfg(test)]
pub(crate) fn write_group(
    dev: &dyn Device,
    sb: &Superblock,
    g: u64,
    bitmap: &[u8],
    class_tag: u8,
    descs: &mut [u8],
    first: u64,
) -> Result<()> {
    write_bitmap(dev, sb, g, bitmap)?;
    let desc = GroupDesc::for_bitmap(sb, g, bitmap, class_tag);
    let at = ((g - first) * DESC_BYTES as u64) as usize;
    descs[at..at + DESC_BYTES].copy_from_slice(&desc.encode(g));
    Ok(())
}

/// Writes group `g`'s bitmap home (its descriptor is the caller's).
pub fn write_bitmap(dev: &dyn Device, sb: &Superblock, g: u64, bitmap: &[u8]) -> Result<()> {
    let bs = u64::from(sb.block_size);
    debug_assert!(g < sb.groups(), "group {g} of {}", sb.groups());
    debug_assert_eq!(
        bitmap.len() as u64,
        u64::from(sb.bitmap_blocks) * bs,
        "a whole bitmap"
    );
    dev.write_at(
        bitmap,
        (sb.bitmap_start + g * u64::from(sb.bitmap_blocks)) * bs,
    )
}

/// Reads every descriptor (one read of the table). A descriptor that fails its checks is
/// returned as its error; the others still decode.
pub fn read_descriptors(dev: &dyn Device, sb: &Superblock) -> Result<Vec<Result<GroupDesc>>> {
    let mut out = Vec::with_capacity(sb.groups() as usize);
    read_descriptors_each(dev, sb, |_, d| out.push(d))?;
    Ok(out)
}

/// Descriptors read per device read by [`read_descriptors_each`] (1 MiB of them).
const DESC_READ_GROUPS: u64 = (1 << 20) / DESC_BYTES as u64;

/// Reads every descriptor in group order, 1 MiB of the table at a time, and hands each to
/// `each` with its group (a descriptor that fails its checks as its error): memory stays
/// one read's worth whatever the group count. Fails only on a read error, after handing
/// over the groups before the failed read.
pub fn read_descriptors_each(
    dev: &dyn Device,
    sb: &Superblock,
    each: impl FnMut(u64, Result<GroupDesc>),
) -> Result<()> {
    read_descriptors_range(dev, sb, 0..sb.groups(), each)
}

/// [`read_descriptors_each`] for the groups of `range` only (within the device's).
pub fn read_descriptors_range(
    dev: &dyn Device,
    sb: &Superblock,
    range: std::ops::Range<u64>,
    mut each: impl FnMut(u64, Result<GroupDesc>),
) -> Result<()> {
    assert!(
        range.end <= sb.groups(),
        "descriptors {range:?} of {}",
        sb.groups()
    );
    let bs = u64::from(sb.block_size);
    let groups = range.end;
    let span = groups.saturating_sub(range.start);
    let mut buf = vec![0u8; (DESC_READ_GROUPS.min(span) * DESC_BYTES as u64) as usize];
    let mut first = range.start;
    while first < groups {
        let n = DESC_READ_GROUPS.min(groups - first);
        let bytes = &mut buf[..(n * DESC_BYTES as u64) as usize];
        dev.read_at(bytes, sb.desc_start * bs + first * DESC_BYTES as u64)?;
        for (i, d) in bytes.chunks_exact(DESC_BYTES).enumerate() {
            let g = first + i as u64;
            each(g, GroupDesc::decode(d, g));
        }
        first += n;
    }
    debug_assert!(
        span == 0 || first == groups,
        "every descriptor handed over once"
    );
    Ok(())
}

/// Reads group `g`'s bitmap as its descriptor `desc` says (the initial bitmap when
/// uninitialised), checking the checksum and the free count. A descriptor a checkpoint
/// left in flight accepts the new bitmap or the one it replaces, and nothing else.
pub fn read_bitmap(dev: &dyn Device, sb: &Superblock, g: u64, desc: &GroupDesc) -> Result<Vec<u8>> {
    Ok(read_bitmap_which(dev, sb, g, desc)?.0)
}

/// [`read_bitmap`], and whether the bitmap is the one `desc` describes (`false`: the one
/// an in-flight checkpoint replaces, whose figures `desc` does not hold).
pub fn read_bitmap_which(
    dev: &dyn Device,
    sb: &Superblock,
    g: u64,
    desc: &GroupDesc,
) -> Result<(Vec<u8>, bool)> {
    if desc.flags & DESC_BITMAP_UNINIT != 0 {
        let bitmap = initial_bitmap(sb, g);
        check_free_count(sb, g, &bitmap, desc.free_blocks)?;
        return Ok((bitmap, true));
    }
    let bitmap = read_bitmap_raw(dev, sb, g)?;
    let crc = crc32c::crc32c(&bitmap);
    if crc == desc.bitmap_crc {
        check_free_count(sb, g, &bitmap, desc.free_blocks)?;
        return Ok((bitmap, true));
    }
    match desc.replaces {
        None => Err(corrupt(Corrupted::Bitmap { group: g }, "checksum mismatch")),
        // Everything in the group since it was uninitialised is in the journal.
        Some(Replaced::Uninit) => Ok((initial_bitmap(sb, g), false)),
        Some(Replaced::Bitmap {
            crc: old,
            free_blocks,
        }) if old == crc => {
            check_free_count(sb, g, &bitmap, free_blocks)?;
            Ok((bitmap, false))
        }
        Some(Replaced::Bitmap { .. }) => Err(corrupt(
            Corrupted::Bitmap { group: g },
            "checksum matches neither the bitmap an interrupted checkpoint was writing nor \
             the one it replaces",
        )),
    }
}

/// The free count a descriptor gives against the bitmap.
fn check_free_count(sb: &Superblock, g: u64, bitmap: &[u8], free_blocks: u32) -> Result<()> {
    let used = bitmap_used(bitmap, sb.group_blocks);
    let len = (sb.blocks_count - g * sb.group_blocks).min(sb.group_blocks);
    let padding = sb.group_blocks - len;
    if u64::from(free_blocks) + used != len + padding {
        return Err(corrupt(
            Corrupted::Group { group: g },
            format!(
                "descriptor says {free_blocks} free, bitmap {}",
                len + padding - used
            ),
        ));
    }
    Ok(())
}

/// Writes both superblock copies (the caller flushes). Of the primary's block only the
/// first [`SUPERBLOCK_READ`] bytes (superblock and root): the owner record after them is
/// the owner's alone (`owner.rs`), written by its heartbeat.
pub fn write_superblock(dev: &dyn Device, sb: &Superblock) -> Result<()> {
    let bs = u64::from(sb.block_size);
    let mut block = vec![0u8; bs as usize];
    block[..SUPERBLOCK_BYTES].copy_from_slice(&sb.encode());
    let root = sb.encode_root();
    block[SUPERBLOCK_BYTES..SUPERBLOCK_BYTES + root.len()].copy_from_slice(&root);
    // Paired with `read_superblock`: the bytes written decode as this superblock.
    debug_assert!(
        Superblock::decode_with_root(&block[..SUPERBLOCK_READ]).is_ok_and(|d| d == *sb),
        "superblock generation {} does not read back",
        sb.generation
    );
    dev.write_at(&block[..SUPERBLOCK_READ], 0)?;
    dev.write_at(&block, sb.backup_block() * bs)
}

/// Reads the superblock: the primary, or the backup when the primary is damaged; the newer
/// generation when both are valid. Checks the device is as large as it says.
pub fn read_superblock(dev: &dyn Device) -> Result<Superblock> {
    let mut head = [0u8; SUPERBLOCK_READ];
    if dev.size() < SUPERBLOCK_READ as u64 {
        return Err(Error::NotExtalloc(format!(
            "{} bytes is too small to hold a superblock",
            dev.size()
        )));
    }
    dev.read_at(&mut head, 0)?;
    let primary = Superblock::decode_with_root(&head);
    // Where the backup is depends on the size the primary records; if the primary is
    // unreadable, try the device's last block of each supported block size.
    let mut candidates: Vec<u64> = Vec::new();
    if let Ok(sb) = &primary {
        candidates.push(sb.backup_block() * u64::from(sb.block_size));
    }
    for bs in [4096u64, 512, 1024, 2048, 8192, 16384, 32768, 65536] {
        if dev.size() >= bs {
            candidates.push(dev.size() / bs * bs - bs);
        }
    }
    let mut backup: Option<Superblock> = None;
    for at in candidates {
        if at + SUPERBLOCK_READ as u64 > dev.size() {
            continue;
        }
        let mut b = [0u8; SUPERBLOCK_READ];
        dev.read_at(&mut b, at)?;
        if let Ok(sb) = Superblock::decode_with_root(&b) {
            if sb.backup_block() * u64::from(sb.block_size) == at {
                backup = Some(sb);
                break;
            }
        }
    }
    let sb = match (primary, backup) {
        (Ok(p), Some(b)) => {
            if b.generation > p.generation {
                b
            } else {
                p
            }
        }
        (Ok(p), None) => p,
        (Err(_), Some(b)) => b,
        (Err(e @ Error::UnsupportedVersion { .. }), None) => return Err(e),
        (Err(Error::NotExtalloc(m)), None) => return Err(Error::NotExtalloc(m)),
        (Err(e), None) => return Err(e),
    };
    let needed = sb.blocks_count.saturating_mul(u64::from(sb.block_size));
    if dev.size() < needed {
        return Err(Error::DeviceTooSmall {
            needed,
            size: dev.size(),
        });
    }
    Ok(sb)
}

/// Reads group `g`'s bitmap area as it is, without any check.
pub fn read_bitmap_raw(dev: &dyn Device, sb: &Superblock, g: u64) -> Result<Vec<u8>> {
    let bs = u64::from(sb.block_size);
    let mut bitmap = vec![0u8; (u64::from(sb.bitmap_blocks) * bs) as usize];
    dev.read_at(
        &mut bitmap,
        (sb.bitmap_start + g * u64::from(sb.bitmap_blocks)) * bs,
    )?;
    Ok(bitmap)
}

/// Reads group `g`'s descriptor and bitmap, checking both checksums, the free count and
/// the descriptor's summary against the bitmap.
pub fn read_group(dev: &dyn Device, sb: &Superblock, g: u64) -> Result<(GroupDesc, Vec<u8>)> {
    let bs = u64::from(sb.block_size);
    let mut d = [0u8; DESC_BYTES];
    dev.read_at(&mut d, sb.desc_start * bs + g * DESC_BYTES as u64)?;
    let desc = GroupDesc::decode(&d, g)?;
    let (bitmap, described) = read_bitmap_which(dev, sb, g, &desc)?;
    let (_, largest, avg) = bitmap_summary(sb, g, &bitmap);
    if !described {
        // The bitmap an interrupted checkpoint replaces: its own figures.
        return Ok((
            GroupDesc::for_bitmap(sb, g, &bitmap, desc.class_tag),
            bitmap,
        ));
    }
    if (largest, avg) != (desc.largest_order, desc.avg_order) {
        return Err(corrupt(
            Corrupted::Descriptor { group: g },
            format!(
                "orders {:?}/{:?}, bitmap {largest:?}/{avg:?}",
                desc.largest_order, desc.avg_order
            ),
        ));
    }
    Ok((desc, bitmap))
}
