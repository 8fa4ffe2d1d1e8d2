//! A file or block device through positional I/O, held under an advisory lock (`flock`):
//! one writer, or any number of readers, at a time.
//!
//! Data structure: the open file and its size, fixed at open. Invariant: an access outside
//! the size is refused before any I/O; `flush` is `fdatasync`, so what it says is durable
//! is on the media. Every error names the device, the operation and the offset.
//!
//! Locks: none in memory (positional I/O needs no shared cursor); the `flock` is held for
//! the device's lifetime against other processes.

use super::{check_range, Device};
use crate::error::{Error, IoSource, Result};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A file (sparse is fine) or a block device.
pub struct FileDevice {
    file: File,
    size: u64,
    /// For errors: which device failed.
    path: String,
}

fn io(path: &Path, op: &'static str, offset: u64, e: std::io::Error) -> Error {
    Error::Io {
        device: path.display().to_string(),
        op,
        offset,
        source: IoSource::new(e),
    }
}

impl FileDevice {
    /// Opens an existing file or block device; its size is the device's.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, true)
    }

    /// Opens an existing file or block device for reading only (fsck, info): any write
    /// fails with an I/O error naming the device.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, write: bool) -> Result<Self> {
        let op = if write { "open" } else { "open (read-only)" };
        let mut file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(|e| io(path, op, 0, e))?;
        lock(&file, path, write)?;
        // A block device's metadata length is 0: ask where its end is.
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| io(path, "seek", 0, e))?;
        let path = path.display().to_string();
        Ok(FileDevice { file, size, path })
    }

    /// Creates (or truncates) a file of `size` bytes, sparse.
    pub fn create(path: &Path, size: u64) -> Result<Self> {
        // Truncated only once the lock is held: a device in use is never touched.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io(path, "create", 0, e))?;
        lock(&file, path, true)?;
        file.set_len(0)
            .and_then(|()| file.set_len(size))
            .map_err(|e| io(path, "set_len", size, e))?;
        let path = path.display().to_string();
        Ok(FileDevice { file, size, path })
    }
}

/// Takes the device's advisory lock: exclusive for a writer, shared for a reader. The lock
/// belongs to this open file, so a second open fails whether it comes from this process or
/// another; it goes with the file (close, exit, crash).
fn lock(file: &File, path: &Path, exclusive: bool) -> Result<()> {
    use rustix::fs::{flock, FlockOperation};
    let op = if exclusive {
        FlockOperation::NonBlockingLockExclusive
    } else {
        FlockOperation::NonBlockingLockShared
    };
    match flock(file, op) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(Error::DeviceBusy {
            device: path.display().to_string(),
            wanted: if exclusive { "write" } else { "read" },
        }),
        Err(e) => Err(io(
            path,
            "flock",
            0,
            std::io::Error::from_raw_os_error(e.raw_os_error()),
        )),
    }
}

impl FileDevice {
    fn err(&self, op: &'static str, offset: u64, e: std::io::Error) -> Error {
        io(Path::new(&self.path), op, offset, e)
    }
}

impl Device for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size)?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| self.err("read", offset, e))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(offset, buf.len(), self.size)?;
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| self.err("write", offset, e))
    }

    fn flush(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| self.err("flush", 0, e))
    }

    fn drop_cache(&self) -> Result<()> {
        rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::DontNeed).map_err(|e| {
            self.err(
                "posix_fadvise(DONTNEED)",
                0,
                std::io::Error::from_raw_os_error(e.raw_os_error()),
            )
        })
    }
}
