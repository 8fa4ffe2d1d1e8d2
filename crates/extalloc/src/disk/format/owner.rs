//! The owner record: who has the device open read-write, in the primary superblock's block
//! after the caller's root (bytes 392 .. 504 of block 0, in its first sector), as ext4's
//! multi-mount protection block. `docs/format.md` has the byte table.
//!
//! Data structure: [`OwnerRecord`], a plain value with `encode`/`decode`, and
//! [`OwnerRecord::here`], which fills in this process's identity (host name, boot id, pid
//! namespace, pid and start time, read from `/proc`). Invariant: what decodes passed its
//! magic and crc32c; decoding never panics on any bytes.
//!
//! Only the primary superblock's block holds it: superblock writes leave these bytes alone
//! ([`super::write_superblock`] writes the first [`super::SUPERBLOCK_READ`] bytes of block
//! 0), and the heartbeat writes only these bytes. Locks: none; its one writer is the store
//! that owns the device (its heartbeat thread, or the open and close themselves).

use super::layout::{get_u32, get_u64, SUPERBLOCK_READ};
use crate::disk::device::Device;
use crate::error::Result;

/// "XOWN" as a little-endian u32.
const OWNER_MAGIC: u32 = u32::from_le_bytes(*b"XOWN");
/// Where the record sits in block 0 (right after the superblock and the largest root).
pub const OWNER_OFFSET: u64 = SUPERBLOCK_READ as u64;
/// Bytes of the record (it ends at byte 504, inside the first 512-byte sector).
pub const OWNER_BYTES: usize = 112;
/// Bytes of the host name kept (longer names are cut).
const HOST_BYTES: usize = 40;

/// Who holds the device, and its heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerRecord {
    /// Milliseconds between two heartbeats (0: the owner does not beat, e.g. a device in
    /// memory, which no other machine can see).
    pub interval_ms: u32,
    /// Bumped by every heartbeat.
    pub sequence: u64,
    /// The superblock's owner number of this open (drawn at each read-write open).
    pub nonce: u64,
    /// The owner's boot id (`/proc/sys/kernel/random/boot_id`, 16 bytes; zero: unknown).
    pub boot_id: [u8; 16],
    /// The inode of the owner's pid namespace (`/proc/self/ns/pid`; 0: unknown).
    pub pid_ns: u64,
    /// The owner's process id in that namespace.
    pub pid: u32,
    /// The owner's start time (clock ticks after boot, `/proc/PID/stat` field 22; 0:
    /// unknown): tells a reused pid from the owner.
    pub start_time: u64,
    /// The owner's host name (`/proc/sys/kernel/hostname`), at most 40 bytes.
    pub host: String,
}

impl OwnerRecord {
    /// This process as owner, with open number `nonce` and heartbeat `interval_ms`.
    pub fn here(nonce: u64, interval_ms: u32) -> Self {
        let pid = std::process::id();
        OwnerRecord {
            interval_ms,
            sequence: 0,
            nonce,
            boot_id: boot_id(),
            pid_ns: pid_namespace(),
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
            host: host_name(),
        }
    }

    /// The record's bytes, checksum included.
    pub fn encode(&self) -> [u8; OWNER_BYTES] {
        let mut b = [0u8; OWNER_BYTES];
        b[0..4].copy_from_slice(&OWNER_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.interval_ms.to_le_bytes());
        b[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        b[16..24].copy_from_slice(&self.nonce.to_le_bytes());
        b[24..40].copy_from_slice(&self.boot_id);
        b[40..48].copy_from_slice(&self.pid_ns.to_le_bytes());
        b[48..52].copy_from_slice(&self.pid.to_le_bytes());
        b[56..64].copy_from_slice(&self.start_time.to_le_bytes());
        let host = self.host.as_bytes();
        let n = host.len().min(HOST_BYTES);
        b[64..64 + n].copy_from_slice(&host[..n]);
        let crc = crc32c::crc32c(&b[..108]);
        b[108..112].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a record (any bytes: never panics); `None` without the magic or with a bad
    /// checksum (no owner recorded, or a damaged record).
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < OWNER_BYTES || get_u32(b, 0) != OWNER_MAGIC {
            return None;
        }
        if crc32c::crc32c(&b[..108]) != get_u32(b, 108) {
            return None;
        }
        let host = &b[64..64 + HOST_BYTES];
        let end = host.iter().position(|&c| c == 0).unwrap_or(HOST_BYTES);
        Some(OwnerRecord {
            interval_ms: get_u32(b, 4),
            sequence: get_u64(b, 8),
            nonce: get_u64(b, 16),
            boot_id: b[24..40].try_into().expect("16 bytes"),
            pid_ns: get_u64(b, 40),
            pid: get_u32(b, 48),
            start_time: get_u64(b, 56),
            host: String::from_utf8_lossy(&host[..end]).into_owned(),
        })
    }

    /// Words naming the owner, for errors and reports.
    pub fn describe(&self) -> String {
        let boot: String = self.boot_id.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "host {:?}, boot {boot}, pid {} (pid namespace {}), heartbeat {} every {} ms",
            self.host, self.pid, self.pid_ns, self.sequence, self.interval_ms
        )
    }
}

/// Reads the owner record of block 0 (`None`: none, or damaged).
pub fn read_owner(dev: &dyn Device) -> Result<Option<OwnerRecord>> {
    let mut b = [0u8; OWNER_BYTES];
    dev.read_at(&mut b, OWNER_OFFSET)?;
    Ok(OwnerRecord::decode(&b))
}

/// Writes the owner record into block 0 (the caller flushes).
pub fn write_owner(dev: &dyn Device, rec: &OwnerRecord) -> Result<()> {
    let bytes = rec.encode();
    // Paired with `read_owner`: a record written reads back as itself, never as none.
    debug_assert_eq!(
        OwnerRecord::decode(&bytes).as_ref(),
        Some(rec),
        "owner record round trip"
    );
    dev.write_at(&bytes, OWNER_OFFSET)
}

/// Clears the owner record (zeros; the caller flushes).
pub fn clear_owner(dev: &dyn Device) -> Result<()> {
    let zeros = [0u8; OWNER_BYTES];
    debug_assert!(OwnerRecord::decode(&zeros).is_none(), "zeros are no owner");
    dev.write_at(&zeros, OWNER_OFFSET)
}

/// This boot's id, as 16 bytes (zero if `/proc` does not say).
pub fn boot_id() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: Vec<u8> = text
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .map(|c| (c as char).to_digit(16).expect("a hex digit") as u8)
        .collect();
    let mut id = [0u8; 16];
    if hex.len() == 32 {
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            id[i] = pair[0] << 4 | pair[1];
        }
    }
    id
}

/// The inode of this process's pid namespace (0 if `/proc` does not say).
pub fn pid_namespace() -> u64 {
    rustix::fs::stat("/proc/self/ns/pid").map_or(0, |st| st.st_ino)
}

/// This machine's host name (as this UTS namespace sees it; empty if `/proc` does not say).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Process `pid`'s start time in clock ticks after boot (`/proc/PID/stat` field 22), in
/// this process's pid namespace; `None` if there is no such process (or no `/proc`), or it
/// has exited (a zombie, state `Z` or `X`: its files, and its locks, are gone).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after its end.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next()?, "Z" | "X") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_record_round_trips_and_names_its_owner() {
        let rec = OwnerRecord::here(42, 5000);
        assert_eq!(rec.pid, std::process::id());
        assert_ne!(rec.boot_id, [0; 16], "Linux gives a boot id");
        assert!(rec.start_time > 0, "our own start time is readable");
        assert_eq!(OwnerRecord::decode(&rec.encode()), Some(rec.clone()));
        assert!(rec.describe().contains(&format!("pid {}", rec.pid)));
        let mut bad = rec.encode();
        bad[9] ^= 1;
        assert_eq!(OwnerRecord::decode(&bad), None, "a damaged record is none");
        assert_eq!(OwnerRecord::decode(&[0u8; OWNER_BYTES]), None);
        let long = OwnerRecord {
            host: "h".repeat(100),
            ..OwnerRecord::default()
        };
        assert_eq!(OwnerRecord::decode(&long.encode()).unwrap().host.len(), 40);
        assert_eq!(OWNER_OFFSET as usize + OWNER_BYTES, 504, "inside sector 0");
    }

    proptest! {
        /// Random bytes never panic the decoder.
        #[test]
        fn the_decoder_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = OwnerRecord::decode(&bytes);
            if bytes.len() >= OWNER_BYTES {
                let mut b = bytes.clone();
                b[0..4].copy_from_slice(&OWNER_MAGIC.to_le_bytes());
                let crc = crc32c::crc32c(&b[..108]);
                b[108..112].copy_from_slice(&crc.to_le_bytes());
                prop_assert!(OwnerRecord::decode(&b).is_some());
            }
        }
    }
}
