//! Blobs by key: a put that replaces the key's blob atomically, a get, a lookup and a delete
//! by key (the library's `Volume::put_keyed`, `get_keyed`, `find_key` and `delete_keyed`). A key is the blob's
//! attribute (`extalloc_volume_attr` reads it), so `extalloc_volume_list` and
//! `extalloc_volume_attr` see keyed blobs as any other.
//!
//! Data structures: none; the handle is `volume`'s. Invariant: among keyed puts a key names
//! at most one blob, after any crash too: the old one or the new one, never neither, never
//! both. Lock order: none here; the library takes its key lock before its other locks.

use crate::error::extalloc_code::{self, *};
use crate::error::{buffer_arg, deref, guard, out_ref, Failure};
use crate::volume::{bytes_arg, copy_out, extalloc_volume, put_with};
use extalloc::volume::Volume;

/// NOT_FOUND for a key that names no blob.
fn no_blob(key: &[u8]) -> Failure {
    Failure::new(
        EXTALLOC_NOT_FOUND,
        format!("no blob under the key \"{}\"", key.escape_ascii()),
    )
}

/// The id `call` gives for the `key_len` bytes at `key` on `vol`, stored in `*id`;
/// `EXTALLOC_NOT_FOUND` when it gives none.
///
/// # Safety
/// As each caller's: `vol` NULL or live, `key` NULL or `key_len` readable bytes, `id` NULL
/// or writable.
unsafe fn id_by_key(
    vol: *const extalloc_volume,
    key: *const u8,
    key_len: usize,
    id: *mut u64,
    call: fn(&Volume, &[u8]) -> extalloc::Result<Option<u64>>,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, id) = unsafe { (&deref(vol, "vol")?.vol, out_ref(id, "id")?) };
        // SAFETY: the caller's promise: `key_len` readable bytes.
        let key = unsafe { bytes_arg(key, key_len, "key") }?;
        *id = call(vol, key)?.ok_or_else(|| no_blob(key))?;
        Ok(())
    })
}

/// Puts a blob under a key, replacing the blob the key named: the `len` bytes at `data`
/// (`data` may be NULL when `len` is 0) become a new blob whose attribute is the
/// `key_len` bytes at `key` (1 to `EXTALLOC_MAX_ATTR_BYTES`); the key's old blob, if any,
/// is replaced in the same atomic step and deleted. Stores the new blob's id in `*id`.
/// Durable at the next sync or close. After a crash the key names the old blob or the new
/// one, each whole: never neither, never both.
///
/// Fails with `EXTALLOC_INVALID_ARGUMENT` for an empty key, a key over
/// `EXTALLOC_MAX_ATTR_BYTES`, a NULL argument (nothing changed); `EXTALLOC_NO_SPACE` when
/// the volume is full; `EXTALLOC_IO`. On those failures the new blob is deleted again and
/// the old one is untouched. If only the last step, deleting the old blob, fails, the
/// replacement stands (`extalloc_volume_find_key` gives the new id) and its error is
/// returned; the old blob is hidden and the next open deletes it.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close; keyed puts
/// of one key from many threads leave one blob under it (the last one published).
///
/// # Safety
/// `vol` is NULL or live; `key` is NULL or holds `key_len` readable bytes; `data` is NULL
/// or holds `len` readable bytes; `id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_put_key(
    vol: *const extalloc_volume,
    key: *const u8,
    key_len: usize,
    data: *const u8,
    len: usize,
    id: *mut u64,
) -> extalloc_code {
    // SAFETY: the caller's promises, as the doc states.
    unsafe { put_with(vol, (key, key_len, "key"), data, len, id, Volume::put_keyed) }
}

/// Stores in `*id` the id of the blob the `key_len` bytes at `key` name (the newest blob
/// whose attribute is that key).
///
/// Fails with `EXTALLOC_NOT_FOUND` when the key names no blob, `EXTALLOC_INVALID_ARGUMENT`
/// for an empty key, a key over `EXTALLOC_MAX_ATTR_BYTES` or a NULL argument. Changes
/// nothing. The first lookup on an open volume visits every blob to build the volume's
/// key index (about 40 bytes a blob); later ones read only the blobs whose key hashes
/// alike (a few microseconds).
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `key` is NULL or holds `key_len` readable bytes; `id` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_find_key(
    vol: *const extalloc_volume,
    key: *const u8,
    key_len: usize,
    id: *mut u64,
) -> extalloc_code {
    // SAFETY: the caller's promises, as the doc states.
    unsafe { id_by_key(vol, key, key_len, id, Volume::find_key) }
}

/// Reads the blob the `key_len` bytes at `key` name, whole, into `buf`, which holds `cap`
/// bytes, and stores its length in `*len`. The bytes are one blob's, never part of one,
/// even while a keyed put replaces it. With a `cap` smaller than the blob (a size query:
/// `buf` NULL, `cap` 0) it copies nothing, stores the blob's size in `*len` and returns
/// `EXTALLOC_BUFFER_TOO_SMALL` (a put between the query and the read may change the size:
/// the read then answers `EXTALLOC_BUFFER_TOO_SMALL` again with the new one).
///
/// Fails with `EXTALLOC_NOT_FOUND` when the key names no blob, `EXTALLOC_INVALID_ARGUMENT`
/// for an empty key, a key over `EXTALLOC_MAX_ATTR_BYTES` or a NULL argument,
/// `EXTALLOC_IO`. Changes nothing on the volume.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `key` is NULL or holds `key_len` readable bytes; `buf` is NULL or
/// holds `cap` writable bytes; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_get_key(
    vol: *const extalloc_volume,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (vol, len) = unsafe { (&deref(vol, "vol")?.vol, out_ref(len, "len")?) };
        // SAFETY: the caller's promise: `key_len` readable bytes.
        let key = unsafe { bytes_arg(key, key_len, "key") }?;
        buffer_arg(buf, cap, "buf")?;
        let blob = vol.get_keyed(key)?.ok_or_else(|| no_blob(key))?;
        let what = || format!("the blob under the key \"{}\"", key.escape_ascii());
        // SAFETY: the caller's promise: `buf` holds `cap` writable bytes (or is NULL, cap 0).
        unsafe { copy_out(&blob, buf, cap, len, what) }
    })
}

/// Deletes the blob the `key_len` bytes at `key` name and stores its id in `*id`: its space
/// is free once the delete is durable (the next sync or close). A keyed put of the same
/// key meanwhile is held back until the delete is done. Among keyed puts a key names one
/// blob, so afterwards it names none.
///
/// Fails with `EXTALLOC_NOT_FOUND` when the key names no blob (nothing changed),
/// `EXTALLOC_INVALID_ARGUMENT` for an empty key, a key over `EXTALLOC_MAX_ATTR_BYTES` or a
/// NULL argument (nothing changed), `EXTALLOC_IO`: if the blob was not yet taken from the
/// key nothing changed; if its removal failed after, the key names nothing and the blob,
/// hidden, is removed by the next open.
///
/// Thread safety: any thread, concurrently with every call on `vol` but close.
///
/// # Safety
/// `vol` is NULL or live; `key` is NULL or holds `key_len` readable bytes; `id` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_volume_delete_key(
    vol: *const extalloc_volume,
    key: *const u8,
    key_len: usize,
    id: *mut u64,
) -> extalloc_code {
    // SAFETY: the caller's promises, as the doc states.
    unsafe { id_by_key(vol, key, key_len, id, Volume::delete_keyed) }
}
