//! The allocator in memory: new, allocate, free, commit, free blocks, check, destroy. Blocks
//! are numbers `0 .. device_blocks`; nothing is written anywhere, so nothing is durable.
//!
//! Data structures: [`extalloc_allocator`], the opaque handle (a boxed `Allocator`);
//! [`extalloc_extent`], a run of blocks.
//!
//! Invariant: a handle is live from `extalloc_allocator_new` to `extalloc_allocator_destroy`.
//! The allocator's accounting holds between calls: blocks marked used = allocated +
//! pending (freed, reusable after the next commit); `extalloc_allocator_check` verifies it.
//!
//! Lock order: none here; each call takes the allocator's locks in its order (group locks,
//! then the global one). `Allocator` is `Send + Sync`: allocate, free and commit run
//! concurrently from many threads, as the library is meant to be used.

use crate::error::extalloc_code;
use crate::error::{c_str, deref, guard, out_ref, Failure};
use extalloc::{AllocRequest, Allocator, Extent, Geometry, Policy};
use std::ffi::c_char;

/// The `goal` of `extalloc_allocator_allocate` that names no block: the allocator picks
/// one from the owner's stream.
pub const EXTALLOC_NO_GOAL: u64 = u64::MAX;

/// An allocator over a device of blocks, in memory (opaque). Made by
/// `extalloc_allocator_new`, freed by `extalloc_allocator_destroy`.
pub struct extalloc_allocator {
    alloc: Allocator,
}

/// A run of `len` blocks from block `start`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct extalloc_extent {
    /// First block.
    pub start: u64,
    /// Blocks, at least 1.
    pub len: u64,
}

/// Makes an allocator for a device of `device_blocks` blocks of `block_size` bytes (a power
/// of two from 512 to 65536), in groups of `group_blocks` (a power of two; 32768 is the
/// default), every block free, under the policy `policy` (a preset such as "extalloc" or
/// "ext4-2025", with `key=value` overrides after a comma; NULL for the default). Stores it
/// in `*out`.
///
/// Fails with `EXTALLOC_INVALID_ARGUMENT` for a bad geometry or policy (the message lists
/// what is valid). On failure `*out` is NULL.
///
/// Thread safety: any thread.
///
/// # Safety
/// `policy` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_new(
    block_size: u32,
    group_blocks: u64,
    device_blocks: u64,
    policy: *const c_char,
    out: *mut *mut extalloc_allocator,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or writable.
        let slot = unsafe { out_ref(out, "out") }?;
        *slot = std::ptr::null_mut();
        let policy = if policy.is_null() {
            Policy::default()
        } else {
            // SAFETY: non-NULL, and the caller's promise: NUL-terminated.
            let spec = unsafe { c_str(policy, "policy") }?;
            let spec = spec
                .to_str()
                .map_err(|_| Failure::invalid("policy is not UTF-8"))?;
            Policy::parse(spec)?
        };
        let geometry = Geometry::new(block_size, group_blocks, device_blocks)?;
        let alloc = Allocator::new(geometry, policy)?;
        *slot = Box::into_raw(Box::new(extalloc_allocator { alloc }));
        Ok(())
    })
}

/// Allocates a run of at most `len` blocks and at least `min_len` (1 to `len`; 0 means all
/// of `len`) for `owner` (a file or object id: an owner's runs are kept near each other),
/// starting at `goal` when that is free, else near it (`EXTALLOC_NO_GOAL`: anywhere).
/// Stores the run in `*out`.
///
/// Fails with `EXTALLOC_NO_SPACE` when no free run of `min_len` exists (blocks freed since
/// the last commit are not yet reusable), `EXTALLOC_INVALID_ARGUMENT` for `len` 0,
/// `min_len > len` or a `goal` past the device. A failed call changes nothing.
///
/// Thread safety: any thread, concurrently with every call on `alloc` but destroy.
///
/// # Safety
/// `alloc` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_allocate(
    alloc: *const extalloc_allocator,
    owner: u64,
    goal: u64,
    len: u64,
    min_len: u64,
    out: *mut extalloc_extent,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (a, slot) = unsafe { (&deref(alloc, "alloc")?.alloc, out_ref(out, "out")?) };
        let min_len = if min_len == 0 { len } else { min_len };
        if min_len > len {
            return Err(Failure::invalid(format!(
                "min_len {min_len} is more than len {len}"
            )));
        }
        let mut req = AllocRequest::new(owner, len).min_len(min_len);
        if goal != EXTALLOC_NO_GOAL {
            req = req.goal(goal);
        }
        let e = a.allocate(&req)?;
        *slot = extalloc_extent {
            start: e.start,
            len: e.len,
        };
        Ok(())
    })
}

/// Frees `extent` (allocated before, whole or in part): its blocks become reusable at the
/// next `extalloc_allocator_commit`.
///
/// Fails with `EXTALLOC_INVALID_ARGUMENT` for an extent of 0 blocks or past the device, a
/// double free (blocks freed and not yet committed) or blocks that are not allocated. A
/// failed call changes nothing.
///
/// Thread safety: any thread, concurrently with every call on `alloc` but destroy.
///
/// # Safety
/// `alloc` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_free(
    alloc: *const extalloc_allocator,
    extent: extalloc_extent,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or live.
        let a = unsafe { &deref(alloc, "alloc")?.alloc };
        a.free(Extent::new(extent.start, extent.len))?;
        Ok(())
    })
}

/// Makes every block freed so far reusable, and stores how many in `*freed` (`freed` may be
/// NULL). Never fails on a live handle.
///
/// Thread safety: any thread, concurrently with every call on `alloc` but destroy.
///
/// # Safety
/// `alloc` is NULL or live; `freed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_commit(
    alloc: *const extalloc_allocator,
    freed: *mut u64,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or live.
        let a = unsafe { &deref(alloc, "alloc")?.alloc };
        let n = a.commit();
        // SAFETY: the caller's promise: NULL or writable.
        if let Some(freed) = unsafe { freed.as_mut() } {
            *freed = n;
        }
        Ok(())
    })
}

/// Stores the number of free blocks (not counting those freed since the last commit) in
/// `*free_blocks`. Changes nothing.
///
/// Thread safety: any thread, concurrently with every call on `alloc` but destroy (a
/// figure taken while others allocate is approximate).
///
/// # Safety
/// `alloc` is NULL or live; `free_blocks` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_free_blocks(
    alloc: *const extalloc_allocator,
    free_blocks: *mut u64,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promises, as the doc states.
        let (a, slot) = unsafe {
            (
                &deref(alloc, "alloc")?.alloc,
                out_ref(free_blocks, "free_blocks")?,
            )
        };
        *slot = a.free_blocks();
        Ok(())
    })
}

/// Recomputes every cached figure and checks the accounting (blocks marked used =
/// allocated + pending). Fails with `EXTALLOC_CORRUPT` when they disagree (a bug). Changes
/// nothing.
///
/// Thread safety: any thread, but exact only when no other call on `alloc` runs.
///
/// # Safety
/// `alloc` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_check(
    alloc: *const extalloc_allocator,
) -> extalloc_code {
    guard(|| {
        // SAFETY: the caller's promise: NULL or live.
        let a = unsafe { &deref(alloc, "alloc")?.alloc };
        a.check()?;
        Ok(())
    })
}

/// Frees the allocator. NULL is accepted and does nothing. Returns `EXTALLOC_OK`.
///
/// Thread safety: after every other call on `alloc` has returned, and none after.
///
/// # Safety
/// `alloc` is NULL or live, and not used again.
#[no_mangle]
pub unsafe extern "C" fn extalloc_allocator_destroy(
    alloc: *mut extalloc_allocator,
) -> extalloc_code {
    guard(|| {
        if !alloc.is_null() {
            // SAFETY: live and made by Box::into_raw here (the caller's promise); taken once.
            drop(unsafe { Box::from_raw(alloc) });
        }
        Ok(())
    })
}
