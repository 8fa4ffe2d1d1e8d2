//! A volume of blobs on a file: create, open, put (with an attribute: a key), get, attr,
//! delete, list, statfs, sync, close. A blob is one of the volume's files
//! (`extalloc::volume::Volume`), named by its 64-bit id, written whole by one atomic put,
//! and carries the caller's attribute bytes (a key) if it was put with some.
//!
//! Data structures: [`extalloc_volume`], the opaque handle (a boxed `Volume` and its path);
//! [`extalloc_statfs`], the figures `extalloc_volume_statfs` fills in.
//!
//! Invariant: a handle is live from the `_create`/`_open` that returned it to its
//! `extalloc_volume_close`, which frees it whatever it returns. Durability is the volume's
//! (`docs/volume.md`): what was put or deleted before a successful `extalloc_volume_sync`
//! (or close) survives a crash; later puts may be lost, each blob whole or absent.
//!
//! Lock order: none here; each call takes the volume's locks in its order. `Volume` is
//! `Send + Sync`, so calls on one handle from many threads run concurrently.

use crate::error::extalloc_code::{self, *};
use crate::error::{buffer_arg, c_str, deref, fits, guard, out_ref, Failure};
use extalloc::volume::Volume;
use std::ffi::{c_char, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Largest attribute of a blob, in bytes (`extalloc_volume_put_attr`).
pub const EXTALLOC_MAX_ATTR_BYTES: usize = 1024;
const _: () = assert!(EXTALLOC_MAX_ATTR_BYTES == extalloc::volume::MAX_ATTR_BYTES);

/// An open volume (opaque). Made by `extalloc_volume_create` or `extalloc_volume_open`,
/// freed by `extalloc_volume_close`.
pub struct extalloc_volume {
    pub(crate) vol: Volume,
}

/// A volume's figures, in blocks of `block_size` bytes: a snapshot, exact when no other
/// call runs.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct extalloc_statfs {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks of the device.
    pub blocks: u64,
    /// The volume's own blocks (superblocks, journal, descriptors, bitmaps).
    pub metadata_blocks: u64,
    /// Free now.
    pub free_blocks: u64,
    /// What puts can still get: the free blocks and `prealloc_blocks`, less the 5 % kept
    /// for a superuser (`f_bavail`; the C API does not enforce that share).
    pub available_blocks: u64,
    /// Freed by deletes since the last sync: free once it commits.
    pub pending_blocks: u64,
    /// Blobs and files on the volume (a put under way counts; counted without a pass over
    /// every blob: `Volume::file_count`).
    pub blobs: u64,
    /// Blocks held in preallocations (space kept ahead of a growing file; a put leaves
    /// none held, so this is 0 on a volume only puts wrote).
    pub prealloc_blocks: u64,
}

fn path_of(path: *const c_char) -> Result<PathBuf, Failure> {
    // SAFETY: the C caller's promise: NULL or a NUL-terminated string.
    let path = unsafe { c_str(path, "path") }?;
    if path.is_empty() {
        return Err(Failure::invalid("path is empty"));
    }
    Ok(PathBuf::from(OsStr::from_bytes(path.to_bytes())))
}

/// Makes a volume on a new file at `path` of `size_bytes` bytes (sparse), with 4 KiB
/// blocks, groups of 32768 blocks and a journal scaled to the size as `extalloc mkfs`
/// scales it (4 MiB up to 128 MiB, 16 MiB up to 1 GiB, 32 MiB up to 2 GiB, 64 MiB above,
/// at most an eighth of the file), and stores it open in `*out`.
///
/// Fails with `EXTALLOC_EXISTS` when `path` exists (nothing is touched),
/// `EXTALLOC_INVALID_ARGUMENT` for a size too small for a volume (a few MiB at least) or a
/// NULL argument, `EXTALLOC_IO` when the file cannot be made. On failure `*out` is NULL
/// and no file is left at `path`.
///
/// Thread safety: any thread; two calls on one path: one makes it, the other fails.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_create(
    path: *const c_char,
    size_bytes: u64,
    out: *mut *mut extalloc_volume,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or writable.
        let slot = unsafe { out_ref(out, "out") }?;
        *slot = std::ptr::null_mut();
        let path = path_of(path)?;
        if path.symlink_metadata().is_ok() {
            return Err(Failure::new(
                EXTALLOC_EXISTS,
                format!("{} exists: a volume is made on a new file", path.display()),
            ));
        }
        if size_bytes == 0 {
            // The library reads 0 as "a device's own size"; here a file is always new.
            let least = Volume::least_size(
                extalloc::volume::DEFAULT_BLOCK_SIZE,
                extalloc::GROUP_BLOCKS_DEFAULT,
                None,
            );
            return Err(Failure::new(
                EXTALLOC_INVALID_ARGUMENT,
                format!(
                    "size_bytes is 0: give the new file's size (at least {} bytes)",
                    least.unwrap_or(0)
                ),
            ));
        }
        // Checks the size before the file is made, removes a file it made on failure.
        let vol = Volume::mkfs_file(&path, size_bytes)?;
        *slot = Box::into_raw(Box::new(extalloc_volume { vol }));
        Ok(())
    })
}

/// Opens the volume on the file at `path` (made by `extalloc_volume_create` or `extalloc
/// mkfs`) read-write, replaying its journal: every blob synced before the last close or
/// crash is there. Stores the handle in `*out`.
///
/// Fails with `EXTALLOC_BUSY` when the file is open elsewhere (one handle per file, in any
/// process), `EXTALLOC_CORRUPT` when it holds no volume or damaged metadata, `EXTALLOC_IO`
/// when it cannot be read, `EXTALLOC_INVALID_ARGUMENT` for a NULL or empty argument. On
/// failure `*out` is NULL; the open may have replayed the journal onto the file (as any
/// open does), nothing else. A file system made by `extalloc mount` is not refused: do not
/// put blobs there.
///
/// Thread safety: any thread.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_open(
    path: *const c_char,
    out: *mut *mut extalloc_volume,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or writable.
        let slot = unsafe { out_ref(out, "out") }?;
        *slot = std::ptr::null_mut();
        let path = path_of(path)?;
        let vol = Volume::open_file(&path)?;
        *slot = Box::into_raw(Box::new(extalloc_volume { vol }));
        Ok(())
    })
}

/// Puts a blob: a new file holding the `len` bytes at `data` (`data` may be NULL when `len`
/// is 0), with no attribute (see `extalloc_volume_put_attr` to store a key with it).
/// Stores its id in `*id`. Durable at the next sync or close. Atomic: the blob is listed
/// only once written whole, and a crash never leaves part of one (the volume's publish: a
/// pending file, removed at the next open if the crash came first). Its space is
/// allocated at once (one extent where the free space allows) and nothing is held beyond
/// it.
///
/// Fails with `EXTALLOC_NO_SPACE` when the volume is full (after committing pending
/// deletes and trying again), `EXTALLOC_IO`, `EXTALLOC_INVALID_ARGUMENT` for a NULL
/// argument. A failed put leaves no blob: what it wrote is deleted again (its blocks are
/// free after the next sync).
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `data` is NULL or holds `len` readable bytes; `id` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_put(
    vol: *const extalloc_volume,
    data: *const u8,
    len: usize,
    id: *mut u64,
) -> extalloc_code {
    // SAFETY: the caller's promises, passed on with an empty attribute.
    unsafe { extalloc_volume_put_attr(vol, std::ptr::null(), 0, data, len, id) }
}

/// Puts a blob with an attribute: as `extalloc_volume_put`, and the `attr_len` bytes at
/// `attr` (a key, a name, metadata of the caller's; at most `EXTALLOC_MAX_ATTR_BYTES`)
/// become the blob's attribute in the same atomic publish: after a crash the blob is there
/// with its attribute, or not at all. `extalloc_volume_attr` reads it back; an index of
/// keys is rebuilt at open from `extalloc_volume_list` and it.
///
/// Fails as `extalloc_volume_put` does, and with `EXTALLOC_INVALID_ARGUMENT` for an
/// attribute over the limit or `attr` NULL with `attr_len` not 0 (nothing changed).
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `attr` is NULL or holds `attr_len` readable bytes; `data` is
/// NULL or holds `len` readable bytes; `id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_put_attr(
    vol: *const extalloc_volume,
    attr: *const u8,
    attr_len: usize,
    data: *const u8,
    len: usize,
    id: *mut u64,
) -> extalloc_code {
    // SAFETY: the caller's promises, as the doc states.
    unsafe { put_with(vol, (attr, attr_len, "attr"), data, len, id, Volume::put) }
}

/// A put's body: the handle, the attribute or key (`what` names it in messages), the data
/// and the out-parameter checked, then `put(volume, attr, data)` stores the new id in `*id`.
///
/// # Safety
/// As `extalloc_volume_put_attr`'s, with `attr.0` holding `attr.1` readable bytes.
pub(crate) unsafe fn put_with(
    vol: *const extalloc_volume,
    (attr, attr_len, what): (*const u8, usize, &str),
    data: *const u8,
    len: usize,
    id: *mut u64,
    put: impl FnOnce(&Volume, &[u8], &[u8]) -> extalloc::Result<u64>,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, id) = unsafe { (&deref(vol, "vol")?.vol, out_ref(id, "id")?) };
        // SAFETY: the caller's promises: `attr_len` and `len` readable bytes.
        let (attr, bytes) = unsafe {
            (
                bytes_arg(attr, attr_len, what)?,
                bytes_arg(data, len, "data")?,
            )
        };
        *id = put(vol, attr, bytes)?;
        Ok(())
    })
}

/// The `len` bytes at `p` (`p` may be NULL when `len` is 0).
///
/// # Safety
/// `p` is NULL or holds `len` readable bytes that outlive the slice.
pub(crate) unsafe fn bytes_arg<'a>(
    p: *const u8,
    len: usize,
    what: &str,
) -> Result<&'a [u8], Failure> {
    match (p.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Failure::invalid(format!(
            "{what} is NULL and its length is not 0"
        ))),
        // SAFETY: non-NULL and `len` readable bytes (the caller's promise).
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(p, len) }),
    }
}

/// Copies blob `id`'s attribute (the bytes `extalloc_volume_put_attr` stored; none for
/// `extalloc_volume_put`) into `buf`, which holds `cap` bytes, and stores its length in
/// `*len`. With a `cap` smaller than the attribute (a size query: `buf` NULL, `cap` 0) it
/// copies nothing, stores the attribute's length in `*len` and returns
/// `EXTALLOC_BUFFER_TOO_SMALL`.
///
/// Fails with `EXTALLOC_NOT_FOUND` for an id not on the volume. Changes nothing.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `buf` is NULL or holds `cap` writable bytes; `len` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_attr(
    vol: *const extalloc_volume,
    id: u64,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, len) = unsafe { (&deref(vol, "vol")?.vol, out_ref(len, "len")?) };
        buffer_arg(buf, cap, "buf")?;
        let attr = vol.attr(id)?;
        // SAFETY: the caller's promise: `buf` holds `cap` writable bytes (or is NULL, cap 0).
        unsafe { copy_out(&attr, buf, cap, len, || format!("blob {id}'s attribute")) }
    })
}

/// Copies `bytes` into `buf` and stores their length in `*len`; when they do not fit its
/// `cap` bytes, copies nothing and answers as a size query (`fits`, naming `what`).
///
/// # Safety
/// `buf` holds `cap` writable bytes, or is NULL with `cap` 0 (`buffer_arg` checked that).
pub(crate) unsafe fn copy_out(
    bytes: &[u8],
    buf: *mut u8,
    cap: usize,
    len: &mut usize,
    what: impl FnOnce() -> String,
) -> Result<(), Failure> {
    fits(bytes.len() as u64, cap, len, what)?;
    if !bytes.is_empty() {
        // SAFETY: `cap >= bytes.len() > 0` writable bytes at `buf` (non-NULL: cap > 0).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    }
    Ok(())
}

/// Stores blob `id`'s size in bytes in `*size`.
///
/// Fails with `EXTALLOC_NOT_FOUND` for an id not on the volume. Changes nothing.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_size(
    vol: *const extalloc_volume,
    id: u64,
    size: *mut u64,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, size) = unsafe { (&deref(vol, "vol")?.vol, out_ref(size, "size")?) };
        *size = vol.size(id)?;
        Ok(())
    })
}

/// Reads blob `id` whole into `buf`, which holds `cap` bytes, and stores its length in
/// `*len`. With a `cap` smaller than the blob (a size query: `buf` NULL, `cap` 0) it reads
/// nothing, stores the blob's size in `*len` and returns `EXTALLOC_BUFFER_TOO_SMALL`.
///
/// Fails with `EXTALLOC_NOT_FOUND` for an id not on the volume, `EXTALLOC_IO`. Changes
/// nothing on the volume; on failure `buf` may hold part of the blob.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close. A blob
/// deleted meanwhile may read in part (`*len` says how much) or fail with NOT_FOUND.
///
/// # Safety
/// `vol` is NULL or live; `buf` is NULL or holds `cap` writable bytes; `len` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_get(
    vol: *const extalloc_volume,
    id: u64,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, len) = unsafe { (&deref(vol, "vol")?.vol, out_ref(len, "len")?) };
        buffer_arg(buf, cap, "buf")?;
        let size = vol.size(id)?;
        fits(size, cap, len, || format!("blob {id}"))?;
        let n = if size == 0 {
            0
        } else {
            // SAFETY: `cap >= size > 0` writable bytes at `buf` (non-NULL: cap > 0), the
            // caller's promise.
            let out = unsafe { std::slice::from_raw_parts_mut(buf, size as usize) };
            vol.read_into(id, 0, out)?
        };
        *len = n;
        Ok(())
    })
}

/// Deletes blob `id`: its blocks are free once the next sync commits.
///
/// Fails with `EXTALLOC_NOT_FOUND` for an id not on the volume, `EXTALLOC_IO`. A delete
/// that fails in the middle (an I/O error) may have freed part of the blob's blocks: the
/// blob is then still listed, shorter; delete it again.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_delete(
    vol: *const extalloc_volume,
    id: u64,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or live.
        let vol = unsafe { &deref(vol, "vol")?.vol };
        vol.unlink(id)?;
        Ok(())
    })
}

/// Lists the blobs' ids in increasing order: stores their number in `*count` and the first
/// `min(count, cap)` ids in `ids`. With fewer than `count` places (a count query: `ids`
/// NULL, `cap` 0) it returns `EXTALLOC_BUFFER_TOO_SMALL` after filling what fits.
///
/// Changes nothing. Thread safety: any thread, concurrently with every call on `vol` but
/// close; a put or delete meanwhile may change the count between a query and the list.
///
/// # Safety
/// `vol` is NULL or live; `ids` is NULL or holds `cap` writable ids; `count` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_list(
    vol: *const extalloc_volume,
    ids: *mut u64,
    cap: usize,
    count: *mut usize,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, count) = unsafe { (&deref(vol, "vol")?.vol, out_ref(count, "count")?) };
        buffer_arg(ids, cap, "ids")?;
        let files = vol.try_list()?;
        *count = files.len();
        for (i, f) in files.iter().take(cap).enumerate() {
            // SAFETY: `i < cap` places of `ids` (non-NULL: cap > 0).
            unsafe { *ids.add(i) = f.id };
        }
        if files.len() > cap {
            return Err(Failure::new(
                EXTALLOC_BUFFER_TOO_SMALL,
                format!("{} blobs, room for {cap}", files.len()),
            ));
        }
        Ok(())
    })
}

/// Lists the blobs' ids a page at a time, in increasing order: the first `min(cap, n)`
/// of the `n` ids above `after` go to `ids`, their number to `*count`, and in `*next` the
/// `after` for the next page, or 0 once none follows. Start with `after` 0 (no id is 0) and
/// call again with `*next` until it is 0: memory stays one page, whatever the blob count
/// (`extalloc_volume_list` lists every id at once). A page may hold fewer than `cap` ids
/// before the end; only `*next` 0 ends the listing. A blob put during the listing is
/// listed if its id (ids only grow) comes after the page under way; one deleted before its
/// page comes is not.
///
/// Fails with `EXTALLOC_INVALID_ARGUMENT` for a NULL `vol`, `ids`, `count` or `next`, or
/// `cap` 0 (a page holds at least one id); `EXTALLOC_IO` or `EXTALLOC_CORRUPT` when part
/// of the volume's table cannot be read (the same call may be tried again). Changes
/// nothing; on failure `*count` and `*next` are untouched.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `ids` is NULL or holds `cap` writable ids; `count` and `next`
/// are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_list_page(
    vol: *const extalloc_volume,
    after: u64,
    ids: *mut u64,
    cap: usize,
    count: *mut usize,
    next: *mut u64,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, count, next) = unsafe {
            (
                &deref(vol, "vol")?.vol,
                out_ref(count, "count")?,
                out_ref(next, "next")?,
            )
        };
        if ids.is_null() || cap == 0 {
            return Err(Failure::invalid(
                "ids is NULL or cap is 0: a page holds at least one id",
            ));
        }
        let page = vol.list_page(Some(after), cap)?;
        debug_assert!(page.files.len() <= cap, "a page fits its buffer");
        for (i, (f, _)) in page.files.iter().enumerate() {
            // SAFETY: `i < cap` places of `ids` (non-NULL).
            unsafe { *ids.add(i) = f.id };
        }
        *count = page.files.len();
        *next = page.next.unwrap_or(0);
        Ok(())
    })
}

/// Fills `*out` with the volume's figures. Changes nothing.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_statfs(
    vol: *const extalloc_volume,
    out: *mut extalloc_statfs,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, slot) = unsafe { (&deref(vol, "vol")?.vol, out_ref(out, "out")?) };
        let s = vol.statfs();
        *slot = extalloc_statfs {
            block_size: s.block_size,
            blocks: s.blocks,
            metadata_blocks: s.metadata_blocks,
            free_blocks: s.free_blocks,
            available_blocks: s.available_blocks,
            pending_blocks: s.pending_blocks,
            blobs: vol.file_count()?,
            prealloc_blocks: s.prealloc_reserved_blocks,
        };
        Ok(())
    })
}

/// Makes every put and delete so far durable: the data is flushed, then one journal record
/// commits the changes (`docs/volume.md`, "Crash semantics").
///
/// Fails with `EXTALLOC_IO` (nothing is lost: the changes stay for the next sync, but a
/// crash before one succeeds loses them) or `EXTALLOC_ABORTED`.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close: it waits for
/// the puts and deletes under way to finish their current chunk.
///
/// # Safety
/// `vol` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_sync(vol: *const extalloc_volume) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or live.
        let vol = unsafe { &deref(vol, "vol")?.vol };
        vol.sync()?;
        Ok(())
    })
}

/// Syncs the volume, writes its table (so the next open replays nothing) and frees the
/// handle, which is gone whatever this returns. NULL is accepted and does nothing.
///
/// Fails with `EXTALLOC_IO` or `EXTALLOC_ABORTED`: then what was not synced before may be
/// lost, as in a crash, and the next open recovers to the last sync that succeeded. The
/// file is released either way: it can be opened again.
///
/// Thread safety: after every other call on `vol` has returned, and none after.
///
/// # Safety
/// `vol` is NULL or live, and not used again.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_close(vol: *mut extalloc_volume) -> extalloc_code {
    guard(|| {
        if vol.is_null() {
            return Ok(());
        }
        // SAFETY: live and made by Box::into_raw here (the caller's promise); taken once.
        let handle = unsafe { Box::from_raw(vol) };
        handle.vol.close()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<extalloc_volume>();
        assert_send_sync::<crate::allocator::extalloc_allocator>();
    }
}
