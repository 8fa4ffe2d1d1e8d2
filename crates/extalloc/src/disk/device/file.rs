//! A file or block device through positional I/O, held under an advisory lock (`flock`):
//! one writer, or any number of readers, at a time.
//!
//! Data structure: the open file and its size, fixed at open. Invariant: an access outside
//! the size is refused before any I/O; `flush` is `fdatasync`, so what it says is durable
//! is on the media. Every error names the device, the operation and the offset.
//!
//! Locks: none in memory (positional I/O needs no shared cursor); the `flock` is held for
//! the device's lifetime against other processes.

use super::backing;
use super::contract::{check_range, Device};
use crate::error::{Error, IoSource, Result};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// Buffers one `pwritev` takes at most (the kernel's `IOV_MAX`).
const IOV_BATCH: usize = 1024;

/// How often a store on a file device beats by default (ext4's multi-mount protection
/// updates its block every 5 s too).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);

/// Whether `file` (a regular file) holds no data at all: every byte a hole, as a file just
/// made by `truncate -s SIZE` is (`lseek(SEEK_DATA)` finds none). `false` when that cannot
/// be told (a file system without `SEEK_DATA`): the safe answer for a caller that would
/// overwrite it.
pub fn all_holes(file: &File) -> bool {
    matches!(
        rustix::fs::seek(file, rustix::fs::SeekFrom::Data(0)),
        Err(rustix::io::Errno::NXIO)
    )
}

/// A file (sparse is fine) or a block device.
pub struct FileDevice {
    file: File,
    size: u64,
    /// For errors: which device failed.
    path: String,
    /// A loop device's backing file, held open for its lock.
    _backing: Option<File>,
    heartbeat: Duration,
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
        let block = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
        let mut options = OpenOptions::new();
        options.read(true).write(write);
        if write && block {
            // The kernel's exclusive claim: refused while mounted or claimed elsewhere.
            options.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
        }
        let mut file = options.open(path).map_err(|e| match e.raw_os_error() {
            Some(code) if code == rustix::io::Errno::BUSY.raw_os_error() => Error::DeviceBusy {
                device: format!(
                    "{} (a block device claimed by a mount or another exclusive opener)",
                    path.display()
                ),
                wanted: "write",
            },
            _ => io(path, op, 0, e),
        })?;
        lock(&file, path, write)?;
        let backing = lock_backing(&file, path, write)?;
        // A block device's metadata length is 0: ask where its end is.
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| io(path, "seek", 0, e))?;
        Ok(Self::held(file, size, path, backing))
    }

    /// The device over `file`, locked (with its loop device's `backing` file, if any).
    fn held(file: File, size: u64, path: &Path, backing: Option<File>) -> Self {
        FileDevice {
            file,
            size,
            path: path.display().to_string(),
            _backing: backing,
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }

    /// The same device, whose store beats every `interval` instead of
    /// [`DEFAULT_HEARTBEAT`] (a second opener waits up to two of them and a second to
    /// tell a live owner on another machine from a dead one).
    pub fn with_heartbeat(mut self, interval: Duration) -> Self {
        self.heartbeat = interval;
        self
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
        let backing = lock_backing(&file, path, true)?;
        file.set_len(0)
            .and_then(|()| file.set_len(size))
            .map_err(|e| io(path, "set_len", size, e))?;
        Ok(Self::held(file, size, path, backing))
    }
}

/// Locks the backing file of a loop device `file` as `lock` locks the device (nothing for
/// any other file): the image and a loop device over it are one device.
fn lock_backing(file: &File, path: &Path, exclusive: bool) -> Result<Option<File>> {
    let Some((backing, backing_path)) = backing::backing_file(file) else {
        return Ok(None);
    };
    let name = format!(
        "{} (the backing file of loop device {})",
        backing_path.display(),
        path.display()
    );
    lock(&backing, Path::new(&name), exclusive)?;
    Ok(Some(backing))
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

    /// `pwritev`, up to `IOV_BATCH` buffers a call; a short write finishes the batch one
    /// buffer at a time.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(offset, total, self.size)?;
        let mut at = offset;
        for batch in bufs.chunks(IOV_BATCH) {
            let slices: Vec<std::io::IoSlice<'_>> =
                batch.iter().map(|b| std::io::IoSlice::new(b)).collect();
            let want: usize = batch.iter().map(|b| b.len()).sum();
            let done = rustix::io::pwritev(&self.file, &slices, at)
                .map_err(|e| self.err("write", at, e.into()))?;
            // A short write: the rest one buffer at a time (`pos`: the batch's bytes
            // before `b`).
            let mut pos = 0;
            for b in batch {
                let end = pos + b.len();
                if end > done {
                    let skip = done.saturating_sub(pos);
                    let from = at + (pos + skip) as u64;
                    self.file
                        .write_all_at(&b[skip..], from)
                        .map_err(|e| self.err("write", from, e))?;
                }
                pos = end;
            }
            at += want as u64;
        }
        debug_assert_eq!(at, offset + total as u64);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| self.err("flush", 0, e))
    }

    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)`: a hole in an image file; on a block device the
    /// kernel's zero-out with unmapping (a discard where the device has one: a loop device
    /// punches its backing file). `Ok(false)` where neither is supported.
    fn discard(&self, offset: u64, len: u64) -> Result<bool> {
        check_range(offset, len as usize, self.size)?;
        use rustix::fs::FallocateFlags as F;
        match rustix::fs::fallocate(&self.file, F::PUNCH_HOLE | F::KEEP_SIZE, offset, len) {
            Ok(()) => Ok(true),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                Ok(false)
            }
            Err(e) => Err(self.err("discard", offset, e.into())),
        }
    }

    fn name(&self) -> String {
        self.path.clone()
    }

    fn heartbeat(&self) -> Option<Duration> {
        Some(self.heartbeat)
    }

    /// `posix_fadvise(WILLNEED)`: the kernel starts reading the range into the page cache
    /// (of the image file, or of the block device) and returns.
    fn will_need(&self, offset: u64, len: u64) -> Result<bool> {
        check_range(offset, len as usize, self.size)?;
        let len = std::num::NonZeroU64::new(len);
        rustix::fs::fadvise(&self.file, offset, len, rustix::fs::Advice::WillNeed).map_err(
            |e| {
                self.err(
                    "posix_fadvise(WILLNEED)",
                    offset,
                    std::io::Error::from_raw_os_error(e.raw_os_error()),
                )
            },
        )?;
        Ok(true)
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
