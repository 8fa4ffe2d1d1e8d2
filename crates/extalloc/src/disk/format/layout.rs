//! The layout and the structures' encoding, pure: [`Superblock`], [`GroupDesc`], the
//! bitmaps' helpers and the constants of the format (see the parent module for the map of
//! the device). `io.rs` and `owner.rs` read and write these; this file reads neither.

use crate::error::{Corrupted, Error, Result};
use crate::geometry::Geometry;

/// "EXTALLOC" as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"EXTALLOC");
/// The version this code writes and reads.
pub const VERSION: u32 = 4;
/// Bytes of the superblock that are meaningful (the rest of its block is zero).
pub const SUPERBLOCK_BYTES: usize = 128;
/// Bytes per group descriptor.
pub const DESC_BYTES: usize = 32;
/// The largest caller root the superblock's block holds (after the superblock).
pub const ROOT_MAX: usize = 256;
/// Bytes of a superblock copy a reader reads: the superblock, the root's header and room.
pub const SUPERBLOCK_READ: usize = SUPERBLOCK_BYTES + 8 + ROOT_MAX;

/// The superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Bytes per block.
    pub block_size: u32,
    /// Feature flags a reader must understand: [`INCOMPAT_CRASH_PENDING`] (a reader that
    /// knows none of a set bit refuses the device).
    pub incompat: u32,
    /// Blocks on the device.
    pub blocks_count: u64,
    /// Blocks per group (a power of two).
    pub group_blocks: u64,
    /// First block of the journal area (always 1).
    pub journal_start: u64,
    /// Blocks in the journal area.
    pub journal_blocks: u64,
    /// First block of the group descriptor table.
    pub desc_start: u64,
    /// First block of the group bitmaps: group `g`'s starts at `bitmap_start + g *
    /// bitmap_blocks`.
    pub bitmap_start: u64,
    /// Blocks per group bitmap.
    pub bitmap_blocks: u32,
    /// Journal position where replay starts (byte offset inside the journal area).
    pub journal_tail: u64,
    /// Sequence number of the record expected at `journal_tail`.
    pub journal_tail_seq: u64,
    /// The file system's identity, given to `mkfs` by its caller.
    pub uuid: [u8; 16],
    /// Bumped on every superblock write; the newer of two valid copies wins.
    pub generation: u64,
    /// `STATE_CHECKPOINTING` while a checkpoint writes groups home; `STATE_IN_USE` while a
    /// store has the device open; `STATE_UNCHECKED` from an open that found it not closed
    /// cleanly until a caller marks it checked.
    pub state: u32,
    /// Who last opened the device read-write (a number drawn at each open): with
    /// `STATE_IN_USE` still set at the next open, that owner did not close it.
    pub owner: u64,
    /// The caller's durable root (at most [`ROOT_MAX`] bytes), written with the journal
    /// tail in the same block, so both change together.
    pub root: Vec<u8>,
}

/// A checkpoint was writing groups home: some may hold a mix of old and new bits (or fail
/// their checksums); replaying the journal from the tail repairs them.
pub const STATE_CHECKPOINTING: u32 = 1;
/// A store has the device open read-write (set at open, cleared at a clean close): found
/// set at open, the last owner crashed (or has it open on another machine).
pub const STATE_IN_USE: u32 = 2;
/// An open found the device not closed cleanly (`STATE_IN_USE` set), and no caller has
/// said since that it checked what a crash leaves in its own state
/// ([`Store::mark_checked`](crate::store::Store::mark_checked)): kept across clean closes
/// until then, so a tool that opens and closes the device in between does not hide the
/// crash from the layer above (a file system's inodes unlinked while open).
pub const STATE_UNCHECKED: u32 = 4;
/// The caller met damage in its own state (set with `STATE_UNCHECKED`,
/// [`Store::mark_damaged`](crate::store::Store::mark_damaged)): its next check must be
/// whole, whatever [`INCOMPAT_CRASH_PENDING`] promises about a crash. Cleared with
/// `STATE_UNCHECKED`.
pub const STATE_DAMAGED: u32 = 8;
/// An open accepted the loss of a damaged journal's later records
/// ([`Store::open_accepting_journal_loss`](crate::store::Store::open_accepting_journal_loss))
/// and wiped them: set on the device before the wipe, cleared with `STATE_UNCHECKED` once
/// a repair has finished ([`Store::mark_checked`](crate::store::Store::mark_checked)).
/// Until then a plain open refuses the device and `fsck` reports the loss, as before the
/// wipe (a repair cut short would otherwise leave a journal that reads clean and a loss
/// no one reports).
pub const STATE_JOURNAL_LOST: u32 = 16;

/// Incompatible feature: the caller promised that a crash leaves nothing in its own state
/// for it to check, only pending files, which the volume's open removes (a file system
/// makes an inode no name reaches pending in the atomic group that removes its last name:
/// [`Store::promise_crash_pending`](crate::store::Store::promise_crash_pending)). Set
/// once, never cleared: a reader that does not know it (an older build, which would leave
/// such an inode published) refuses the device.
pub const INCOMPAT_CRASH_PENDING: u32 = 1;
/// Incompatible feature: the file system's directory logs may hold adds that carry their
/// entry's kind in the record's tag (`docs/format.md`, "Directory logs"), which a build
/// that does not know them would take for damage, and its repair would drop the names
/// ([`Store::promise_typed_entries`](crate::store::Store::promise_typed_entries)). Set
/// once, never cleared.
pub const INCOMPAT_TYPED_ENTRIES: u32 = 2;
/// Incompatible feature: the file system's directory logs may hold runs, a large
/// directory's entries sorted and indexed in chunks (`docs/format.md`, "Directory runs"),
/// which a build that does not know them would take for damage
/// ([`Store::promise_dir_runs`](crate::store::Store::promise_dir_runs)). Set once, never
/// cleared.
pub const INCOMPAT_DIR_RUNS: u32 = 4;
/// Every incompatible feature this build knows.
pub const INCOMPAT_KNOWN: u32 = INCOMPAT_CRASH_PENDING | INCOMPAT_TYPED_ENTRIES | INCOMPAT_DIR_RUNS;

pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(super) fn corrupt(what: Corrupted, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        what,
        detail: detail.into(),
    }
}

/// The smallest journal `mkfs` makes: one block for records, one to wrap into.
pub const JOURNAL_MIN_BLOCKS: u64 = 2;

/// The journal size for a device of `device_bytes` when the caller does not choose one,
/// in blocks of `block_size` bytes, scaled as ext4's `mke2fs` scales its journal: 4 MiB up
/// to a 128 MiB device, 16 MiB up to 1 GiB, 32 MiB up to 2 GiB, 64 MiB above (ext4 goes
/// on to 1 GiB; a commit here writes one record, so 64 MiB holds thousands). Never more
/// than an eighth of the device, never fewer than [`JOURNAL_MIN_BLOCKS`].
pub fn default_journal_blocks(device_bytes: u64, block_size: u32) -> u64 {
    const MIB: u64 = 1 << 20;
    let bytes = match device_bytes {
        b if b <= 128 * MIB => 4 * MIB,
        b if b <= 1024 * MIB => 16 * MIB,
        b if b <= 2048 * MIB => 32 * MIB,
        _ => 64 * MIB,
    };
    let bytes = bytes.min(device_bytes / 8);
    let blocks = (bytes / u64::from(block_size.max(1))).max(JOURNAL_MIN_BLOCKS);
    debug_assert!(blocks >= JOURNAL_MIN_BLOCKS);
    blocks
}

impl Superblock {
    /// The layout for a device of `geometry` with a journal of `journal_blocks` blocks.
    pub fn layout(geometry: &Geometry, journal_blocks: u64, uuid: [u8; 16]) -> Result<Self> {
        let bs = u64::from(geometry.block_size);
        let groups = geometry.groups_count();
        let desc_blocks = (groups * DESC_BYTES as u64).div_ceil(bs);
        let bitmap_blocks = geometry.group_blocks.div_ceil(8).div_ceil(bs);
        let journal_start = 1u64;
        if journal_blocks < JOURNAL_MIN_BLOCKS {
            return Err(Error::InvalidGeometry(format!(
                "a journal of {journal_blocks} blocks holds no transaction: give at least \
                 {JOURNAL_MIN_BLOCKS} blocks ({} bytes)",
                JOURNAL_MIN_BLOCKS * bs
            )));
        }
        let too_big = || {
            Error::InvalidGeometry(format!(
                "{} blocks cannot hold a {journal_blocks}-block journal, the other metadata \
                 and a backup superblock",
                geometry.blocks_count
            ))
        };
        let desc_start = journal_start
            .checked_add(journal_blocks)
            .ok_or_else(too_big)?;
        let bitmap_start = desc_start.checked_add(desc_blocks).ok_or_else(too_big)?;
        let meta_end = groups
            .checked_mul(bitmap_blocks)
            .and_then(|b| b.checked_add(bitmap_start))
            .ok_or_else(too_big)?;
        // The metadata and the backup superblock must leave room for data.
        if meta_end.saturating_add(1) >= geometry.blocks_count {
            return Err(too_big());
        }
        Ok(Superblock {
            block_size: geometry.block_size,
            incompat: 0,
            blocks_count: geometry.blocks_count,
            group_blocks: geometry.group_blocks,
            journal_start,
            journal_blocks,
            desc_start,
            bitmap_start,
            bitmap_blocks: u32::try_from(bitmap_blocks)
                .map_err(|_| Error::InvalidGeometry("bitmap too large".into()))?,
            journal_tail: 0,
            journal_tail_seq: 1,
            uuid,
            generation: 1,
            state: 0,
            owner: 0,
            root: Vec::new(),
        })
    }

    /// The geometry the superblock describes; `InvalidGeometry` if its figures make none.
    pub fn geometry(&self) -> Result<Geometry> {
        Geometry::new(self.block_size, self.group_blocks, self.blocks_count)
    }

    /// Blocks `0 .. metadata_end()` hold the superblock, journal, descriptors and bitmaps.
    pub fn metadata_end(&self) -> u64 {
        self.bitmap_start + self.groups() * u64::from(self.bitmap_blocks)
    }

    /// Number of groups, the last one possibly short.
    pub fn groups(&self) -> u64 {
        self.blocks_count.div_ceil(self.group_blocks)
    }

    /// The backup superblock's block.
    pub fn backup_block(&self) -> u64 {
        self.blocks_count - 1
    }

    /// The superblock's on-disk bytes, checksum included.
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.incompat.to_le_bytes());
        b[16..20].copy_from_slice(&self.block_size.to_le_bytes());
        b[20..24].copy_from_slice(&self.bitmap_blocks.to_le_bytes());
        b[24..32].copy_from_slice(&self.blocks_count.to_le_bytes());
        b[32..40].copy_from_slice(&self.group_blocks.to_le_bytes());
        b[40..48].copy_from_slice(&self.journal_start.to_le_bytes());
        b[48..56].copy_from_slice(&self.journal_blocks.to_le_bytes());
        b[56..64].copy_from_slice(&self.desc_start.to_le_bytes());
        b[64..72].copy_from_slice(&self.bitmap_start.to_le_bytes());
        b[72..80].copy_from_slice(&self.journal_tail.to_le_bytes());
        b[80..88].copy_from_slice(&self.journal_tail_seq.to_le_bytes());
        b[88..104].copy_from_slice(&self.uuid);
        b[104..112].copy_from_slice(&self.generation.to_le_bytes());
        b[112..116].copy_from_slice(&self.state.to_le_bytes());
        b[116..124].copy_from_slice(&self.owner.to_le_bytes());
        let crc = crc32c::crc32c(&b[..124]);
        b[124..128].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a superblock (any bytes: never panics).
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(corrupt(
                Corrupted::Superblock,
                format!("{} bytes, need {SUPERBLOCK_BYTES}", b.len()),
            ));
        }
        if get_u64(b, 0) != MAGIC {
            return Err(Error::NotExtalloc("no EXTALLOC magic".into()));
        }
        let crc = crc32c::crc32c(&b[..124]);
        if crc != get_u32(b, 124) {
            return Err(corrupt(Corrupted::Superblock, "checksum mismatch"));
        }
        let version = get_u32(b, 8);
        // Version 1 journals had no `durable_through`, version 3 had no owner record;
        // nothing before 1.0 is upgraded.
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let incompat = get_u32(b, 12);
        if incompat & !INCOMPAT_KNOWN != 0 {
            return Err(corrupt(
                Corrupted::Superblock,
                format!("unknown incompatible features {incompat:#x}"),
            ));
        }
        let sb = Superblock {
            block_size: get_u32(b, 16),
            incompat,
            bitmap_blocks: get_u32(b, 20),
            blocks_count: get_u64(b, 24),
            group_blocks: get_u64(b, 32),
            journal_start: get_u64(b, 40),
            journal_blocks: get_u64(b, 48),
            desc_start: get_u64(b, 56),
            bitmap_start: get_u64(b, 64),
            journal_tail: get_u64(b, 72),
            journal_tail_seq: get_u64(b, 80),
            uuid: b[88..104].try_into().expect("16 bytes"),
            generation: get_u64(b, 104),
            state: get_u32(b, 112),
            owner: get_u64(b, 116),
            root: Vec::new(),
        };
        sb.validate()?;
        Ok(sb)
    }

    /// The root's bytes at offset 128 of the superblock's block: length, crc32c over the
    /// generation, the length and the root, then the root.
    pub fn encode_root(&self) -> Vec<u8> {
        debug_assert!(self.root.len() <= ROOT_MAX);
        let len = (self.root.len() as u32).to_le_bytes();
        let mut crc = crc32c::crc32c(&self.generation.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &len);
        crc = crc32c::crc32c_append(crc, &self.root);
        let mut b = len.to_vec();
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&self.root);
        b
    }

    /// Decodes a superblock copy and the root after it (`b`: at least [`SUPERBLOCK_READ`]
    /// bytes from the block's start; any bytes: never panics). A root area of zeros (a
    /// device made before roots) is an empty root.
    pub fn decode_with_root(b: &[u8]) -> Result<Self> {
        let mut sb = Superblock::decode(b)?;
        if b.len() < SUPERBLOCK_READ {
            return Err(corrupt(Corrupted::SuperblockRoot, "block too short"));
        }
        let r = &b[SUPERBLOCK_BYTES..];
        let (len, crc) = (get_u32(r, 0) as usize, get_u32(r, 4));
        if len == 0 && crc == 0 {
            return Ok(sb);
        }
        if len > ROOT_MAX {
            return Err(corrupt(
                Corrupted::SuperblockRoot,
                format!("{len} bytes, at most {ROOT_MAX}"),
            ));
        }
        sb.root = r[8..8 + len].to_vec();
        if sb.encode_root()[4..8] != crc.to_le_bytes() {
            return Err(corrupt(Corrupted::SuperblockRoot, "checksum mismatch"));
        }
        Ok(sb)
    }

    /// The layout must be the one `layout` computes for its geometry (so no field can point
    /// metadata anywhere else), and the journal tail inside the journal.
    fn validate(&self) -> Result<()> {
        let geometry = self
            .geometry()
            .map_err(|e| corrupt(Corrupted::Superblock, format!("geometry: {e}")))?;
        let expected = Superblock::layout(&geometry, self.journal_blocks, self.uuid)
            .map_err(|e| corrupt(Corrupted::Superblock, format!("layout: {e}")))?;
        if (
            self.journal_start,
            self.desc_start,
            self.bitmap_start,
            self.bitmap_blocks,
        ) != (
            expected.journal_start,
            expected.desc_start,
            expected.bitmap_start,
            expected.bitmap_blocks,
        ) {
            return Err(corrupt(
                Corrupted::Superblock,
                "layout fields disagree with the geometry",
            ));
        }
        let journal_bytes = self
            .journal_blocks
            .saturating_mul(u64::from(self.block_size));
        if self.journal_tail > journal_bytes {
            return Err(corrupt(
                Corrupted::Superblock,
                "journal tail past the journal",
            ));
        }
        Ok(())
    }
}

/// Descriptor flag: the group's bitmap was never written; it is the group's initial state
/// (only metadata, the backup superblock and padding used), computed from the layout.
pub const DESC_BITMAP_UNINIT: u32 = 1;
/// Descriptor flag: a checkpoint was writing this group's bitmap when this descriptor was
/// written; the bitmap on the media is the new one (this descriptor's checksum and figures)
/// or the one it replaces ([`GroupDesc::replaces`]). Cleared when the checkpoint ends.
pub(super) const DESC_IN_FLIGHT: u32 = 2;
/// With `DESC_IN_FLIGHT`: the replaced bitmap is the group's initial state
/// (`BITMAP_UNINIT` before this checkpoint).
pub(super) const DESC_REPLACES_UNINIT: u32 = 4;
/// Every flag this version knows.
pub(super) const DESC_FLAGS_KNOWN: u32 = DESC_BITMAP_UNINIT | DESC_IN_FLIGHT | DESC_REPLACES_UNINIT;
/// "No order" in a descriptor's order bytes (the group has no free block).
pub(super) const ORDER_NONE: u8 = 0xff;

/// One group's descriptor: its checksum, and the figures the allocator places it by while
/// its bitmap is not loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupDesc {
    /// Free blocks in the group's bitmap.
    pub free_blocks: u32,
    /// [`DESC_BITMAP_UNINIT`] or 0; the in-flight flags are carried by `replaces`.
    pub flags: u32,
    /// crc32c of the group's bitmap blocks (0 while `DESC_BITMAP_UNINIT`).
    pub bitmap_crc: u32,
    /// Largest order with a free aligned chunk (`None`: no free block).
    pub largest_order: Option<u32>,
    /// Order of the average free run, `floor(log2(free / runs))` (`None`: no free block).
    pub avg_order: Option<u32>,
    /// Size-class tag of the group (0: none).
    pub class_tag: u8,
    /// While a checkpoint writes the group's bitmap: the bitmap it replaces (`None` once
    /// the checkpoint has written the descriptor again, after the bitmap).
    pub replaces: Option<Replaced>,
}

/// The bitmap an in-flight checkpoint replaces: what a group's bitmap is if the new one
/// did not reach the media.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// The group's initial state (it was `BITMAP_UNINIT`): everything in it since is in
    /// the journal.
    Uninit,
    /// A bitmap with this crc32c and free count.
    Bitmap {
        /// crc32c of the replaced bitmap's blocks.
        crc: u32,
        /// Free blocks in the replaced bitmap.
        free_blocks: u32,
    },
}

/// Summary figures of an on-disk bitmap: `(free, largest order, average order)`.
pub fn bitmap_summary(sb: &Superblock, g: u64, bitmap: &[u8]) -> (u32, Option<u32>, Option<u32>) {
    let len = (sb.blocks_count - g * sb.group_blocks).min(sb.group_blocks);
    let b = crate::groups::GroupBitmap::from_used_bytes(sb.group_blocks as u32, len as u32, bitmap);
    (
        b.free_blocks(),
        b.largest_free_order(),
        b.avg_fragment_order(),
    )
}

impl GroupDesc {
    /// The descriptor of a group holding `bitmap`, summary included.
    pub fn for_bitmap(sb: &Superblock, g: u64, bitmap: &[u8], class_tag: u8) -> Self {
        let (free_blocks, largest_order, avg_order) = bitmap_summary(sb, g, bitmap);
        GroupDesc {
            free_blocks,
            flags: 0,
            bitmap_crc: crc32c::crc32c(bitmap),
            largest_order,
            avg_order,
            class_tag,
            replaces: None,
        }
    }

    /// The descriptor's on-disk bytes in group `group`'s slot (the group number seeds the
    /// checksum).
    pub fn encode(&self, group: u64) -> [u8; DESC_BYTES] {
        let mut b = [0u8; DESC_BYTES];
        let order = |o: Option<u32>| o.map_or(ORDER_NONE, |o| o as u8);
        let mut flags = self.flags;
        match self.replaces {
            None => {}
            Some(Replaced::Uninit) => flags |= DESC_IN_FLIGHT | DESC_REPLACES_UNINIT,
            Some(Replaced::Bitmap { crc, free_blocks }) => {
                flags |= DESC_IN_FLIGHT;
                b[16..20].copy_from_slice(&crc.to_le_bytes());
                b[20..24].copy_from_slice(&free_blocks.to_le_bytes());
            }
        }
        b[0..4].copy_from_slice(&self.free_blocks.to_le_bytes());
        b[4..8].copy_from_slice(&flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.bitmap_crc.to_le_bytes());
        b[12] = order(self.largest_order);
        b[13] = order(self.avg_order);
        b[14] = self.class_tag;
        // The group number seeds the checksum: a descriptor written to the wrong slot fails.
        let crc = desc_crc(group, &b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks group `group`'s descriptor (any bytes: never panics); `Corrupt`
    /// for a bad checksum, unknown flags or an order out of range.
    pub fn decode(b: &[u8], group: u64) -> Result<Self> {
        let what = || Corrupted::Descriptor { group };
        if b.len() < DESC_BYTES {
            return Err(corrupt(
                what(),
                format!("{} bytes, need {DESC_BYTES}", b.len()),
            ));
        }
        let crc = desc_crc(group, &b[..28]);
        if crc != get_u32(b, 28) {
            return Err(corrupt(what(), "checksum mismatch"));
        }
        let flags = get_u32(b, 4);
        if flags & !DESC_FLAGS_KNOWN != 0 {
            return Err(corrupt(what(), format!("unknown flags {flags:#x}")));
        }
        let order = |v: u8| -> Result<Option<u32>> {
            match v {
                ORDER_NONE => Ok(None),
                o if usize::from(o) <= crate::groups::ORDER_MAX => Ok(Some(u32::from(o))),
                o => Err(corrupt(what(), format!("order {o} out of range"))),
            }
        };
        let replaces = match (flags & DESC_IN_FLIGHT, flags & DESC_REPLACES_UNINIT) {
            (0, 0) => None,
            (0, _) => return Err(corrupt(what(), "replaces-uninit flag without in-flight")),
            (_, 0) => Some(Replaced::Bitmap {
                crc: get_u32(b, 16),
                free_blocks: get_u32(b, 20),
            }),
            _ => Some(Replaced::Uninit),
        };
        if replaces.is_some() && flags & DESC_BITMAP_UNINIT != 0 {
            return Err(corrupt(what(), "in flight, yet uninitialised"));
        }
        Ok(GroupDesc {
            free_blocks: get_u32(b, 0),
            flags: flags & DESC_BITMAP_UNINIT,
            replaces,
            bitmap_crc: get_u32(b, 8),
            largest_order: order(b[12])?,
            avg_order: order(b[13])?,
            class_tag: b[14],
        })
    }
}

/// Group `g`'s bitmap as mkfs leaves it: metadata at the front of the device, the backup
/// superblock at the end, and the missing tail of a short last group marked used.
pub fn initial_bitmap(sb: &Superblock, g: u64) -> Vec<u8> {
    let bs = u64::from(sb.block_size);
    let mut bitmap = vec![0u8; (u64::from(sb.bitmap_blocks) * bs) as usize];
    let start = g * sb.group_blocks;
    let len = (sb.blocks_count - start).min(sb.group_blocks);
    let mut set = |i: u64| bitmap[(i / 8) as usize] |= 1 << (i % 8);
    for i in 0..sb.metadata_end().saturating_sub(start).min(sb.group_blocks) {
        set(i);
    }
    if sb.backup_block() / sb.group_blocks == g {
        set(sb.backup_block() - start);
    }
    for i in len..sb.group_blocks {
        set(i);
    }
    bitmap
}

/// Set bits among the first `bits` of an on-disk bitmap (used blocks of a group of `bits`).
pub fn bitmap_used(bitmap: &[u8], bits: u64) -> u64 {
    let whole = (bits / 8) as usize;
    let mut n: u64 = bitmap[..whole]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    if !bits.is_multiple_of(8) {
        n += u64::from((bitmap[whole] & ((1u8 << (bits % 8)) - 1)).count_ones());
    }
    n
}

/// A descriptor's checksum: crc32c of the group number (8 bytes, little-endian) followed
/// by the descriptor's first 28 bytes. One call over the 36 bytes, the same value as the
/// group's checksum continued over the body: at open every descriptor of the device is
/// checked, and a second call per descriptor was a fifth of a 1 PiB open.
fn desc_crc(group: u64, body: &[u8]) -> u32 {
    debug_assert_eq!(body.len(), 28, "a descriptor's checksummed bytes");
    let mut seeded = [0u8; 36];
    seeded[..8].copy_from_slice(&group.to_le_bytes());
    seeded[8..].copy_from_slice(body);
    crc32c::crc32c(&seeded)
}

#[cfg(test)]
mod desc_crc_tests {
    use super::*;

    /// The on-disk checksum is the group's crc32c continued over the body: one call over
    /// both bytes gives that same value, so images written before read as before.
    #[test]
    fn one_call_is_the_seeded_checksum_continued() {
        for group in [0u64, 1, 4095, 1 << 23, u64::MAX] {
            let body: Vec<u8> = (0..28u8)
                .map(|i| i.wrapping_mul(37) ^ group as u8)
                .collect();
            let two_calls = crc32c::crc32c_append(crc32c::crc32c(&group.to_le_bytes()), &body);
            assert_eq!(desc_crc(group, &body), two_calls, "group {group}");
        }
    }
}
