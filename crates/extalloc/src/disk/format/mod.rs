//! The on-disk format (version 4; byte-level tables in `docs/format.md`).
//!
//! ```text
//! block 0                      superblock (primary)
//! blocks 1 .. 1+J              journal area (J = journal_blocks)
//! next D blocks                group descriptor table (32 bytes per group)
//! next G x P blocks            one bitmap per group (P blocks each, 1 bit per block)
//! last block of the device     superblock (backup)
//! ```
//!
//! Block 0 also holds, after the superblock and the caller's root, the owner record
//! (`owner.rs`): who has the device open read-write and its heartbeat.
//!
//! All integers little-endian; every structure carries a crc32c. Metadata blocks are marked
//! used in their groups' bitmaps, so an allocator loaded from the device never hands them out.
//! Decoding never panics on any bytes: it returns `NotExtalloc`, `Corrupt`,
//! `UnsupportedVersion` or `DeviceTooSmall`.
//!
//! Data structures: [`Superblock`] and [`GroupDesc`], plain values with `encode`/`decode`;
//! bitmaps are byte vectors, one bit per block. Invariant: what decodes passed its crc32c
//! and its range checks; `mkfs` leaves every metadata block and the backup superblock
//! marked used.
//!
//! `layout.rs` holds the layout and the structures' encoding, pure; `io.rs` puts them on a
//! [`Device`](crate::disk::device::Device) (mkfs, reads and writes); this file only
//! declares and re-exports them. Locks: none; whoever
//! writes a structure serialises the writes of it (the store, under its `commit_lock`).

mod io;
mod layout;
mod owner;

#[cfg(test)]
pub(crate) use io::write_group;
pub use io::{
    mkfs, read_bitmap, read_bitmap_raw, read_bitmap_which, read_descriptors, read_descriptors_each,
    read_descriptors_range, read_group, read_superblock, write_bitmap, write_superblock,
};
pub use layout::*;
pub use owner::{
    boot_id, clear_owner, host_name, pid_namespace, process_start_time, read_owner, write_owner,
    OwnerRecord, OWNER_BYTES, OWNER_OFFSET,
};

#[cfg(test)]
mod tests {
    use super::layout::*;
    use super::*;
    use crate::disk::device::{Device, MemDevice};
    use crate::error::{Corrupted, Error};
    use crate::geometry::Geometry;
    use proptest::prelude::*;

    fn small() -> (MemDevice, Geometry) {
        let g = Geometry::new(4096, 4096, 10_000).unwrap();
        (MemDevice::new(10_000 * 4096), g)
    }

    #[test]
    fn mkfs_round_trips_and_marks_metadata_used() {
        let (dev, g) = small();
        let sb = mkfs(&dev, &g, 64, [7; 16]).unwrap();
        assert_eq!(read_superblock(&dev).unwrap(), sb);
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        let mut free = 0u64;
        for grp in 0..sb.groups() {
            let (desc, bitmap) = read_group(&dev, &sb, grp).unwrap();
            free += u64::from(desc.free_blocks);
            if grp == 0 {
                // Superblock, 64 journal blocks, 1 descriptor block, 3 bitmap blocks.
                assert_eq!(sb.metadata_end(), 1 + 64 + 1 + 3);
                assert!(
                    (0..sb.metadata_end()).all(|i| bitmap[(i / 8) as usize] & (1 << (i % 8)) != 0)
                );
            }
        }
        assert_eq!(
            free,
            10_000 - sb.metadata_end() - 1,
            "all but metadata and the backup"
        );
    }

    #[test]
    fn every_checksum_failure_is_detected() {
        let (dev, g) = small();
        let sb = mkfs(&dev, &g, 16, [1; 16]).unwrap();
        // A damaged primary superblock: the backup is used.
        dev.write_at(&[0xAA], 40).unwrap();
        assert_eq!(read_superblock(&dev).unwrap(), sb);
        // Both damaged: a precise error.
        dev.write_at(&[0xAA], sb.backup_block() * 4096 + 40)
            .unwrap();
        assert!(matches!(read_superblock(&dev), Err(Error::Corrupt { .. })));
        write_superblock(&dev, &sb).unwrap();
        // A descriptor, then a bitmap.
        dev.write_at(&[0x55], sb.desc_start * 4096 + DESC_BYTES as u64 + 1)
            .unwrap();
        assert!(matches!(
            read_group(&dev, &sb, 1),
            Err(Error::Corrupt {
                what: Corrupted::Descriptor { group: 1 },
                ..
            })
        ));
        assert!(read_group(&dev, &sb, 0).is_ok(), "the others still read");
        // mkfs writes no bitmap; write group 2's home, then damage it.
        let mut descs = vec![0u8; 4096];
        dev.read_at(&mut descs, sb.desc_start * 4096).unwrap();
        let (_, bm2) = read_group(&dev, &sb, 2).unwrap();
        write_group(&dev, &sb, 2, &bm2, 0, &mut descs, 0).unwrap();
        dev.write_at(&descs[64..96], sb.desc_start * 4096 + 64)
            .unwrap();
        assert!(read_group(&dev, &sb, 2).is_ok());
        dev.write_at(
            &[0x01],
            (sb.bitmap_start + 2 * u64::from(sb.bitmap_blocks)) * 4096 + 100,
        )
        .unwrap();
        assert!(matches!(
            read_group(&dev, &sb, 2),
            Err(Error::Corrupt {
                what: Corrupted::Bitmap { group: 2 },
                ..
            })
        ));
        // A descriptor whose orders disagree with its bitmap (checksum valid).
        let mut d0 = [0u8; DESC_BYTES];
        dev.read_at(&mut d0, sb.desc_start * 4096).unwrap();
        let mut desc3 = GroupDesc::decode(&d0, 0).unwrap();
        desc3.largest_order = Some(3);
        dev.write_at(&desc3.encode(0), sb.desc_start * 4096)
            .unwrap();
        assert!(
            matches!(read_group(&dev, &sb, 0), Err(Error::Corrupt { detail, .. }) if detail.contains("orders"))
        );
        // Unknown flags and impossible orders are refused by the decoder.
        let mut odd = desc3;
        odd.flags = 0x10;
        assert!(GroupDesc::decode(&odd.encode(0), 0).is_err());
        let mut odd = desc3;
        odd.avg_order = Some(40);
        assert!(GroupDesc::decode(&odd.encode(0), 0).is_err());
        // A descriptor copied into another group's slot fails too.
        let mut d0 = [0u8; DESC_BYTES];
        dev.read_at(&mut d0, sb.desc_start * 4096).unwrap();
        assert!(GroupDesc::decode(&d0, 0).is_ok());
        assert!(GroupDesc::decode(&d0, 3).is_err());
    }

    #[test]
    fn bad_devices_get_clear_errors() {
        let (dev, g) = small();
        assert!(matches!(read_superblock(&dev), Err(Error::NotExtalloc(_))));
        assert!(matches!(
            mkfs(&MemDevice::new(4096 * 100), &g, 16, [0; 16]),
            Err(Error::DeviceTooSmall { .. })
        ));
        let sb = mkfs(&dev, &g, 16, [0; 16]).unwrap();
        // The same superblock on a smaller device.
        let short = MemDevice::new(5_000 * 4096);
        let mut block = vec![0u8; 4096];
        block[..SUPERBLOCK_BYTES].copy_from_slice(&sb.encode());
        short.write_at(&block, 0).unwrap();
        assert!(matches!(
            read_superblock(&short),
            Err(Error::DeviceTooSmall { .. })
        ));
        // A future version and an old one (with a valid checksum).
        for other in [VERSION + 1, 3, 1] {
            let mut future = sb.encode();
            future[8..12].copy_from_slice(&other.to_le_bytes());
            let crc = crc32c::crc32c(&future[..124]);
            future[124..128].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(
                Superblock::decode(&future),
                Err(Error::UnsupportedVersion {
                    found: other,
                    supported: VERSION
                })
            );
        }
        // Layout fields that point elsewhere (with a valid checksum).
        let mut moved = sb.encode();
        moved[56..64].copy_from_slice(&5u64.to_le_bytes());
        let crc = crc32c::crc32c(&moved[..124]);
        moved[124..128].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Superblock::decode(&moved),
            Err(Error::Corrupt { .. })
        ));
    }

    proptest! {
        /// Random bytes never panic the parsers.
        #[test]
        fn parsers_take_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300), g in any::<u64>()) {
            let _ = Superblock::decode(&bytes);
            let _ = GroupDesc::decode(&bytes, g);
            // With the magic and a valid checksum, the fields themselves are random.
            if bytes.len() >= SUPERBLOCK_BYTES {
                let mut b = bytes.clone();
                b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
                b[8..12].copy_from_slice(&VERSION.to_le_bytes());
                b[12..16].copy_from_slice(&0u32.to_le_bytes());
                let crc = crc32c::crc32c(&b[..124]);
                b[124..128].copy_from_slice(&crc.to_le_bytes());
                let _ = Superblock::decode(&b);
            }
        }
    }
}
