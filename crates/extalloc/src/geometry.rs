//! Device geometry and extents.
//!
//! A device is `blocks_count` blocks of `block_size` bytes, cut into groups of `group_blocks`
//! blocks (a power of two). The last group may be shorter; its missing tail does not exist and
//! is never free. All arithmetic on block numbers is checked: devices of up to 2^48 blocks are
//! supported and a malformed extent is an error, never an overflow. [`parse_size`] reads a
//! size in bytes as the command line, the lab and the Python package write it (`64M`).

use crate::error::{Error, Result};

/// Largest device supported, in blocks (2^48 blocks of 4 KiB = 1 EiB).
pub const DEVICE_BLOCKS_MAX: u64 = 1 << 48;
/// Smallest group: one bitmap word.
pub const GROUP_BLOCKS_MIN: u64 = 64;
/// Largest group: 2^20 blocks keeps every in-group offset in a `u32` and a bitmap at 128 KiB.
pub const GROUP_BLOCKS_MAX: u64 = 1 << 20;
/// Default group size: 32768 blocks = 128 MiB at 4 KiB, as in ext4.
pub const GROUP_BLOCKS_DEFAULT: u64 = 32768;

const _: () = assert!(GROUP_BLOCKS_MIN.is_power_of_two());
const _: () = assert!(GROUP_BLOCKS_MAX.is_power_of_two());
const _: () = assert!(GROUP_BLOCKS_MAX <= u32::MAX as u64);
const _: () = assert!(DEVICE_BLOCKS_MAX < u64::MAX / 2);

/// Physically contiguous blocks `start .. start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Extent {
    /// First block.
    pub start: u64,
    /// Length in blocks.
    pub len: u64,
}

impl Extent {
    /// Blocks `start .. start + len`, unchecked ([`Geometry::validate`] checks).
    pub const fn new(start: u64, len: u64) -> Self {
        Extent { start, len }
    }

    /// One past the last block; `None` if it would overflow.
    pub fn checked_end(&self) -> Option<u64> {
        self.start.checked_add(self.len)
    }

    /// One past the last block. Only for extents already validated against a geometry.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// `extents` sorted by start, adjacent ones joined (for extents that do not overlap).
    pub fn join_adjacent(mut extents: Vec<Extent>) -> Vec<Extent> {
        extents.sort_unstable_by_key(|e| e.start);
        let mut joined: Vec<Extent> = Vec::with_capacity(extents.len());
        for e in extents {
            match joined.last_mut() {
                Some(last) if last.end() == e.start => last.len += e.len,
                _ => joined.push(e),
            }
        }
        debug_assert!(joined
            .windows(2)
            .all(|w| w[0].end() < w[1].start || w[0].end() > w[1].start));
        joined
    }
}

impl std::fmt::Display for Extent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}+{}", self.start, self.len)
    }
}

/// The shape of a device: block size, group size and number of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Geometry {
    /// Bytes per block: a power of two from 512 to 65536.
    pub block_size: u32,
    /// Blocks per group: a power of two from 64 to 2^20.
    pub group_blocks: u64,
    /// Blocks on the device, 1 to [`DEVICE_BLOCKS_MAX`].
    pub blocks_count: u64,
}

impl Geometry {
    /// Validates and builds a geometry.
    pub fn new(block_size: u32, group_blocks: u64, blocks_count: u64) -> Result<Self> {
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(Error::InvalidGeometry(format!(
                "block size {block_size} must be a power of two from 512 to 65536"
            )));
        }
        if !group_blocks.is_power_of_two()
            || !(GROUP_BLOCKS_MIN..=GROUP_BLOCKS_MAX).contains(&group_blocks)
        {
            return Err(Error::InvalidGeometry(format!(
                "blocks per group {group_blocks} must be a power of two from {GROUP_BLOCKS_MIN} to {GROUP_BLOCKS_MAX}"
            )));
        }
        if blocks_count == 0 || blocks_count > DEVICE_BLOCKS_MAX {
            return Err(Error::InvalidGeometry(format!(
                "device of {blocks_count} blocks: must hold 1 to 2^48 blocks"
            )));
        }
        Ok(Geometry {
            block_size,
            group_blocks,
            blocks_count,
        })
    }

    /// A geometry for a device of `device_bytes` bytes (rounded down to whole blocks).
    pub fn from_bytes(block_size: u32, group_blocks: u64, device_bytes: u64) -> Result<Self> {
        if block_size == 0 {
            return Err(Error::InvalidGeometry("block size 0".into()));
        }
        Geometry::new(
            block_size,
            group_blocks,
            device_bytes / u64::from(block_size),
        )
    }

    /// Number of groups, the last one possibly short.
    pub fn groups_count(&self) -> u64 {
        self.blocks_count.div_ceil(self.group_blocks)
    }

    /// log2 of `group_blocks`: the highest buddy order a group can have.
    pub fn group_order(&self) -> u32 {
        self.group_blocks.trailing_zeros()
    }

    /// The group holding `block`. The block must be in range.
    pub fn group_of(&self, block: u64) -> u64 {
        block >> self.group_order()
    }

    /// First block of `group`.
    pub fn group_start(&self, group: u64) -> u64 {
        group << self.group_order()
    }

    /// Number of blocks that exist in `group` (the last group may be short).
    pub fn group_len(&self, group: u64) -> u64 {
        let start = self.group_start(group);
        self.group_blocks.min(self.blocks_count - start)
    }

    /// Checks that `extent` is non-empty and lies inside the device.
    pub fn validate(&self, extent: Extent) -> Result<()> {
        if extent.len == 0 {
            return Err(Error::ZeroLength);
        }
        match extent.checked_end() {
            Some(end) if end <= self.blocks_count => Ok(()),
            _ => Err(Error::OutOfRange {
                start: extent.start,
                len: extent.len,
                device_blocks: self.blocks_count,
            }),
        }
    }

    /// Splits a validated extent into its per-group pieces: `(group, offset_in_group, len)`.
    pub fn split(&self, extent: Extent) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        let mut at = extent.start;
        let end = extent.end();
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let group = self.group_of(at);
            let offset = at - self.group_start(group);
            let len = (self.group_blocks - offset).min(end - at);
            at += len;
            Some((group, offset as u32, len as u32))
        })
    }
}

/// The end of `start .. start + len` in a file counted in `unit` ("bytes" or "logical
/// blocks"): refused past `max` (the largest file in that unit) or on overflow, with the
/// range named ([`Error::PastLargestFile`]).
pub(crate) fn file_range_end(start: u64, len: u64, max: u64, unit: &'static str) -> Result<u64> {
    start
        .checked_add(len)
        .filter(|&end| end <= max)
        .ok_or(Error::PastLargestFile {
            unit,
            start,
            len,
            max,
        })
}

/// A size in bytes as a person writes it: a number with an optional binary unit, `4096`,
/// `64K`, `512MiB`, `1.5GiB`, `16GiB`, `1PiB` (K, M, G, T, P, with or without `iB` or
/// `B`, any case; every unit is a power of 1024; a decimal fraction when it makes whole
/// bytes). A malformed size, an unknown unit, a fraction of a byte or a size past `u64`
/// is [`Error::InvalidSetting`].
///
/// ```
/// assert_eq!(extalloc::parse_size("64M")?, 64 << 20);
/// assert_eq!(extalloc::parse_size("1.5GiB")?, 3 << 29);
/// assert!(extalloc::parse_size("12 parsecs").is_err());
/// # Ok::<(), extalloc::Error>(())
/// ```
pub fn parse_size(s: &str) -> Result<u64> {
    const UNITS: &str = "K, M, G, T, P or KiB, MiB, GiB, TiB, PiB";
    let s = s.trim();
    let invalid = |expected: String| Error::InvalidSetting {
        setting: "size",
        value: format!("'{s}'"),
        expected,
    };
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let malformed = || invalid(format!("expected a number with an optional unit ({UNITS})"));
    let n: u64 = whole.parse().map_err(|_| malformed())?;
    if !fraction.bytes().all(|c| c.is_ascii_digit()) || fraction.len() > 18 {
        return Err(malformed());
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        "t" | "tib" | "tb" => 40,
        "p" | "pib" | "pb" => 50,
        other => return Err(invalid(format!("unknown unit '{other}' (use {UNITS})"))),
    };
    // The fraction's bytes: digits / 10^len of the unit, whole or refused.
    let (digits, scale) = match fraction {
        "" => (0u128, 1u128),
        f => (
            f.parse::<u128>().map_err(|_| malformed())?,
            10u128.pow(f.len() as u32),
        ),
    };
    let part = (digits << shift) / scale;
    if part * scale != digits << shift {
        return Err(invalid(format!(
            "not a whole number of bytes (use a smaller unit than '{unit}')"
        )));
    }
    let bytes = u128::from(n) * (1u128 << shift) + part;
    u64::try_from(bytes).map_err(|_| invalid("overflows 64 bits of bytes".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("16GiB").unwrap(), 16 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size(" 64kb ").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        let unknown = parse_size("12 parsecs").unwrap_err().to_string();
        assert!(unknown.contains("unknown unit 'parsecs'"), "{unknown}");
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("0.25k").unwrap(), 256);
        assert_eq!(parse_size("2.0M").unwrap(), 2 << 20);
        let part = parse_size("1.1b").unwrap_err().to_string();
        assert!(part.contains("not a whole number of bytes"), "{part}");
        assert!(parse_size("1.2.3G").is_err() && parse_size(".G").is_err());
        assert!(
            parse_size("16383.99999999999999999P").is_err(),
            "past u64 or a fraction"
        );
        assert!(matches!(
            parse_size("1X"),
            Err(Error::InvalidSetting {
                setting: "size",
                ..
            })
        ));
    }

    #[test]
    fn geometry_rejects_bad_shapes() {
        assert!(Geometry::new(4096, 32768, 0).is_err());
        assert!(Geometry::new(4096, 1000, 100).is_err());
        assert!(Geometry::new(4096, 32, 100).is_err());
        assert!(Geometry::new(3000, 32768, 100).is_err());
        assert!(Geometry::new(4096, 32768, DEVICE_BLOCKS_MAX + 1).is_err());
        assert!(Geometry::new(4096, 32768, DEVICE_BLOCKS_MAX).is_ok());
    }

    #[test]
    fn short_last_group() {
        let g = Geometry::new(4096, 64, 130).unwrap();
        assert_eq!(g.groups_count(), 3);
        assert_eq!(g.group_len(0), 64);
        assert_eq!(g.group_len(2), 2);
        assert_eq!(g.group_of(129), 2);
    }

    #[test]
    fn validate_checks_overflow_and_range() {
        let g = Geometry::new(4096, 64, DEVICE_BLOCKS_MAX).unwrap();
        assert_eq!(g.validate(Extent::new(5, 0)), Err(Error::ZeroLength));
        assert!(g.validate(Extent::new(u64::MAX, 2)).is_err());
        assert!(g.validate(Extent::new(DEVICE_BLOCKS_MAX - 1, 1)).is_ok());
        assert!(g.validate(Extent::new(DEVICE_BLOCKS_MAX - 1, 2)).is_err());
    }

    #[test]
    fn split_crosses_groups() {
        let g = Geometry::new(4096, 64, 200).unwrap();
        let parts: Vec<_> = g.split(Extent::new(60, 80)).collect();
        assert_eq!(parts, vec![(0, 60, 4), (1, 0, 64), (2, 0, 12)]);
    }
}
