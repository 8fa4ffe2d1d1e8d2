//! One-call volumes on a file or block device: [`Volume::mkfs_file`] makes one with
//! defaults scaled to the device, [`Volume::open_file`] opens it, [`Volume::open_read_only`]
//! opens it for reading without ever writing the device. For the programs that want
//! a volume of files (a blob store, an image format) and not the geometry's knobs; the
//! knobs stay in [`Volume::mkfs`] and [`Volume::open`].
//!
//! Defaults: 4 KiB blocks, groups of [`GROUP_BLOCKS_DEFAULT`] blocks (one shorter group at
//! the end), the journal [`default_journal_blocks`] gives (4 MiB to 64 MiB, as ext4's), the
//! default [`Policy`].
//!
//! Data structures: none of their own. Invariant: a volume made here opens with
//! [`Volume::open_file`] and with `extalloc` on the command line; a volume opened by
//! [`Volume::open_read_only`] never writes its device (its writes stay in an overlay in
//! memory). Locks: none.

use super::state::Volume;
use crate::alloc::Policy;
use crate::disk::device::{all_holes, Device, FileDevice, OverlayDevice};
use crate::disk::format::default_journal_blocks;
use crate::error::{Error, Result};
use crate::geometry::{Geometry, GROUP_BLOCKS_DEFAULT};
use std::path::Path;
use std::sync::Arc;

/// Bytes per block of a volume made by [`Volume::mkfs_file`].
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;

/// The default geometry and journal for a device of `bytes`.
fn layout(bytes: u64) -> Result<(Geometry, u64)> {
    let blocks = bytes / u64::from(DEFAULT_BLOCK_SIZE);
    let geometry = Geometry::new(DEFAULT_BLOCK_SIZE, GROUP_BLOCKS_DEFAULT, blocks)?;
    Ok((geometry, default_journal_blocks(bytes, DEFAULT_BLOCK_SIZE)))
}

/// `e`, a refusal of a volume of `size` bytes at `path`: [`Error::VolumeTooSmall`] with
/// the least size when `size` is below it (a geometry of too few blocks, a journal too
/// small), `e` itself otherwise.
fn too_small(path: &Path, size: u64, e: Error) -> Error {
    let size_refused = matches!(
        e,
        Error::InvalidGeometry(_) | Error::JournalTooSmall { .. } | Error::ZeroLength
    );
    match Volume::least_size(DEFAULT_BLOCK_SIZE, GROUP_BLOCKS_DEFAULT, None) {
        Some(least) if size_refused && size < least => Error::VolumeTooSmall {
            path: path.display().to_string(),
            size,
            least,
        },
        _ => e,
    }
}

/// What `path` holds that a new volume would destroy: an extalloc volume, a file of data,
/// data in a device's first MiB; `None` for a new path, an empty device, or a file empty or
/// of holes only.
fn occupied(path: &Path) -> Result<Option<String>> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    // An empty file, or one of holes only (made by `truncate -s`): nothing to lose.
    let holes_only = || std::fs::File::open(path).is_ok_and(|f| all_holes(&f));
    if meta.is_file() && (meta.len() == 0 || holes_only()) {
        return Ok(None);
    }
    let dev = FileDevice::open_read_only(path)?;
    if crate::disk::format::read_superblock(&dev).is_ok() {
        return Ok(Some("an extalloc volume".into()));
    }
    if meta.is_file() {
        return Ok(Some(format!("a file of {} bytes", meta.len())));
    }
    let mut head = vec![0u8; dev.size().min(1 << 20) as usize];
    dev.read_at(&mut head, 0)?;
    Ok(head
        .iter()
        .any(|&b| b != 0)
        .then(|| "data in its first MiB".to_string()))
}

impl Volume {
    /// Makes a volume of `size` bytes in the file at `path` (created, or a file empty or of
    /// holes only made `size` long) or on the block device there (`size` 0: the device's own size), with
    /// the defaults of the module documentation and a random identity, and returns it
    /// open. A file that holds data, or a device that holds a volume or any data in its
    /// first MiB, is refused with [`Error::Occupied`](crate::error::Error::Occupied) and
    /// left as it was ([`Volume::mkfs_file_replacing`] discards it). A size that cannot hold a
    /// volume is refused with [`Error::VolumeTooSmall`](crate::error::Error::VolumeTooSmall),
    /// which names the least size, before the file is touched; on a later failure a file it created is removed, and a device or file that
    /// existed may have been written in part (make it again).
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("extalloc-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let path = dir.join("blobs.img");
    /// use extalloc::volume::Volume;
    /// let vol = Volume::mkfs_file(&path, 64 << 20)?;
    /// // A key (up to 1 KiB) names one blob: a put is atomic and replaces the key's blob.
    /// let a = vol.put_keyed(b"greeting", b"hello")?;
    /// vol.put_keyed(b"scratch", &[7; 100_000])?;
    /// assert_eq!(vol.get_keyed(b"greeting")?.as_deref(), Some(&b"hello"[..]));
    /// vol.delete_keyed(b"scratch")?; // its blocks free once the next sync commits
    /// vol.sync()?; // durable from here on
    /// vol.close()?; // commits, checkpoints and lets the device go
    /// let vol = Volume::open_file(&path)?;
    /// // Every key, in one pass: (FileInfo { id, size, .. }, key).
    /// let index: Vec<_> = vol.list_with_attrs();
    /// assert_eq!(index.len(), 1);
    /// let (info, key) = &index[0];
    /// assert_eq!((info.id, key.as_slice()), (a, &b"greeting"[..]));
    /// assert_eq!(vol.read(a, 0, info.size)?, b"hello");
    /// # vol.close()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), extalloc::Error>(())
    /// ```
    pub fn mkfs_file(path: impl AsRef<Path>, size: u64) -> Result<Volume> {
        let path = path.as_ref();
        if let Some(holds) = occupied(path)? {
            return Err(crate::error::Error::Occupied {
                path: path.display().to_string(),
                holds,
            });
        }
        Self::mkfs_file_replacing(path, size)
    }

    /// [`Volume::mkfs_file`] over whatever `path` holds (a volume, a file of data, a
    /// device in use by nothing that locks it): all of it is lost.
    pub fn mkfs_file_replacing(path: impl AsRef<Path>, size: u64) -> Result<Volume> {
        let path = path.as_ref();
        // A file of `size` is checked before it is touched; a device's size is its own.
        if size > 0 {
            layout(size)
                .and_then(|(geometry, journal)| {
                    crate::disk::format::Superblock::layout(&geometry, journal, [0; 16])
                })
                .map_err(|e| too_small(path, size, e))?;
        }
        let existed = path.exists();
        if size == 0 && !existed {
            // No device or file whose own size to take: a new file needs a size.
            return Err(too_small(path, 0, Error::ZeroLength));
        }
        let made = match size {
            0 => FileDevice::open(path),
            _ => FileDevice::create(path, size),
        }
        .and_then(|dev| {
            let bytes = dev.size();
            let (geometry, journal) = layout(bytes).map_err(|e| too_small(path, bytes, e))?;
            let dev: Arc<dyn Device> = Arc::new(dev);
            // A fresh identity each volume, as `extalloc mkfs` gives.
            crate::disk::format::mkfs(dev.as_ref(), &geometry, journal, rand::random())
                .and_then(|_| Volume::format(dev, Policy::default()))
                .map_err(|e| too_small(path, bytes, e))
        });
        if made.is_err() && !existed {
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Opens the volume in the file or block device at `path` with the default [`Policy`]
    /// (recovering what a crash left: see [`Volume::open`]). A device in use by another
    /// process is [`Error::DeviceBusy`](crate::Error::DeviceBusy); on failure nothing was
    /// written.
    pub fn open_file(path: impl AsRef<Path>) -> Result<Volume> {
        let dev: Arc<dyn Device> = Arc::new(FileDevice::open(path.as_ref())?);
        Volume::open(dev, Policy::default())
    }

    /// Opens the volume in the file or block device at `path` to read it, with the default
    /// [`Policy`], without ever writing the device: it is opened read-only under an
    /// [`OverlayDevice`], so what the open writes (the journal's replay after a crash, the
    /// in-use mark) and any later change stay in memory and are gone at close. What
    /// `extalloc ls`, `get`, `info --files` and `fsck` read through. Any number of readers
    /// may open a device at once; one open elsewhere to write is
    /// [`Error::DeviceBusy`](crate::Error::DeviceBusy), one whose owner record names a live
    /// owner [`Error::DeviceInUse`](crate::Error::DeviceInUse).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Volume> {
        let dev = FileDevice::open_read_only(path.as_ref())?;
        let view: Arc<dyn Device> = Arc::new(OverlayDevice::new(Arc::new(dev)));
        Volume::open(view, Policy::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_made_by_path_opens_by_path_with_a_scaled_journal() {
        let dir = std::env::temp_dir().join(format!("extalloc-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v.img");
        let vol = Volume::mkfs_file(&path, 32 << 20).unwrap();
        let sb_journal = vol.store().statfs().journal_bytes;
        assert_eq!(sb_journal, 4 << 20, "a 32 MiB device gets a 4 MiB journal");
        let id = vol.create(b"k").unwrap();
        vol.write(id, 0, &[7u8; 10_000]).unwrap();
        vol.close().unwrap();
        let vol = Volume::open_file(&path).unwrap();
        assert_eq!(vol.read(id, 0, 10_000).unwrap(), vec![7u8; 10_000]);
        assert!(
            matches!(
                Volume::open_file(&path),
                Err(crate::Error::DeviceBusy { .. })
            ),
            "a second open of the same file is refused"
        );
        vol.close().unwrap();
        // A read-only open sees the files and leaves the device's bytes as they were.
        let before = std::fs::read(&path).unwrap();
        let ro = Volume::open_read_only(&path).unwrap();
        assert_eq!(ro.read(id, 0, 10_000).unwrap(), vec![7u8; 10_000]);
        ro.close().unwrap();
        assert!(
            std::fs::read(&path).unwrap() == before,
            "a read-only open wrote the device"
        );
        // Each volume its own identity.
        let other = dir.join("w.img");
        Volume::mkfs_file(&other, 32 << 20)
            .unwrap()
            .close()
            .unwrap();
        let uuid = |p: &Path| {
            let dev = FileDevice::open_read_only(p).unwrap();
            crate::disk::format::read_superblock(&dev).unwrap().uuid
        };
        assert_ne!(uuid(&path), uuid(&other));
        assert_ne!(uuid(&path), [0; 16]);
        // Too small to hold a volume: refused, and the file it would have made is gone.
        let tiny = dir.join("tiny.img");
        let least = Volume::least_size(DEFAULT_BLOCK_SIZE, GROUP_BLOCKS_DEFAULT, None).unwrap();
        for size in [100, 64 << 10, least - u64::from(DEFAULT_BLOCK_SIZE)] {
            let e = Volume::mkfs_file(&tiny, size).err().expect("too small");
            assert_eq!(
                e,
                Error::VolumeTooSmall {
                    path: tiny.display().to_string(),
                    size,
                    least
                }
            );
            assert!(!tiny.exists());
        }
        // Size 0 on an empty file: its own size, 0 bytes, named as such.
        std::fs::write(&tiny, b"").unwrap();
        let e = Volume::mkfs_file(&tiny, 0).err().expect("an empty file");
        assert!(
            e.to_string().contains("0 bytes cannot hold a volume"),
            "{e}"
        );
        std::fs::remove_file(&tiny).unwrap();
        Volume::mkfs_file(&tiny, least).unwrap().close().unwrap();
        // A file of holes only (`truncate -s`) holds nothing: made at its own size.
        let sparse = dir.join("sparse.img");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        let vol = Volume::mkfs_file(&sparse, 0).unwrap();
        assert_eq!(vol.statfs().blocks, (32 << 20) / 4096);
        vol.close().unwrap();
        assert!(
            matches!(Volume::mkfs_file(&sparse, 0), Err(Error::Occupied { .. })),
            "once made it holds a volume"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
