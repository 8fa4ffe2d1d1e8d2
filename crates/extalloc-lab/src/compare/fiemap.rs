//! A file's extents through the FIEMAP ioctl (`FS_IOC_FIEMAP`).

use anyhow::{Context, Result};
use rustix::ioctl::{ioctl, opcode, Updater};
use std::os::fd::AsFd;

/// `struct fiemap_extent` (linux/fiemap.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

/// `struct fiemap`: the header the opcode is sized by.
#[repr(C)]
struct FiemapHeader {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
}

const BATCH: usize = 512;

/// The header followed by room for `BATCH` extents, as the kernel expects.
#[repr(C)]
struct Fiemap {
    header: FiemapHeader,
    extents: [FiemapExtent; BATCH],
}

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: rustix::ioctl::Opcode = opcode::read_write::<FiemapHeader>(b'f', 11);
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;

/// One mapped range of a file, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapped {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
}

/// Every extent of the file, in logical order (the file is synced first).
pub fn extents(fd: impl AsFd) -> Result<Vec<Mapped>> {
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut buf = Box::new(Fiemap {
            header: FiemapHeader {
                fm_start: start,
                fm_length: u64::MAX - start,
                fm_flags: FIEMAP_FLAG_SYNC,
                fm_mapped_extents: 0,
                fm_extent_count: BATCH as u32,
                fm_reserved: 0,
            },
            extents: [FiemapExtent::default(); BATCH],
        });
        // SAFETY: the opcode is FS_IOC_FIEMAP and the buffer is a `struct fiemap` followed
        // by `fm_extent_count` extents, as the kernel expects.
        unsafe {
            let request: Updater<'_, FS_IOC_FIEMAP, Fiemap> = Updater::new(&mut buf);
            ioctl(fd.as_fd(), request).context("FIEMAP ioctl")?;
        }
        let n = buf.header.fm_mapped_extents as usize;
        if n == 0 {
            return Ok(out);
        }
        let mut last = false;
        for e in &buf.extents[..n] {
            out.push(Mapped {
                logical: e.fe_logical,
                physical: e.fe_physical,
                length: e.fe_length,
            });
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last {
            return Ok(out);
        }
        let tail = &buf.extents[n - 1];
        start = tail.fe_logical + tail.fe_length;
    }
}

/// Extents in blocks of `block_size`, physically contiguous neighbours merged (as the
/// lab's `extents_per_file` counts them).
pub fn to_block_extents(mapped: &[Mapped], block_size: u64) -> Vec<extalloc::Extent> {
    let mut out: Vec<extalloc::Extent> = Vec::new();
    for m in mapped {
        let start = m.physical / block_size;
        let len = m.length.div_ceil(block_size);
        match out.last_mut() {
            Some(last) if last.end() == start => last.len += len,
            _ => out.push(extalloc::Extent::new(start, len)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_extents_merge() {
        let m = [
            Mapped {
                logical: 0,
                physical: 4096 * 10,
                length: 8192,
            },
            Mapped {
                logical: 8192,
                physical: 4096 * 12,
                length: 4096,
            },
            Mapped {
                logical: 12288,
                physical: 4096 * 20,
                length: 4096,
            },
        ];
        let e = to_block_extents(&m, 4096);
        assert_eq!(
            e,
            vec![extalloc::Extent::new(10, 3), extalloc::Extent::new(20, 1)]
        );
        assert_eq!(std::mem::size_of::<FiemapHeader>(), 32);
        assert_eq!(std::mem::size_of::<FiemapExtent>(), 56);
    }

    /// FIEMAP on a real file of the file system the tests run on (tmpfs has no FIEMAP,
    /// so the test says so instead of passing silently).
    #[test]
    fn fiemap_reads_a_real_file() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("extalloc-fiemap-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, 1 << 20).unwrap();
        match extents(&file) {
            Ok(m) => {
                let total: u64 = m.iter().map(|e| e.length).sum();
                assert_eq!(total, 1 << 20, "{m:?}");
            }
            Err(e) => eprintln!("skipped: {} has no FIEMAP ({e:#})", dir.display()),
        }
        std::fs::remove_file(&path).unwrap();
    }
}
