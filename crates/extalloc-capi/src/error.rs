//! Error codes, the per-thread last error, and the guard every entry point runs in.
//!
//! Data structures: [`extalloc_code`], the code every call returns; `LAST`, the calling
//! thread's last error (its code and message); `Failure`, what a call body returns when
//! it fails.
//!
//! Invariant: after any call but `extalloc_last_error`, `extalloc_last_error_code` and
//! `extalloc_code_name`, `LAST` describes that call: `EXTALLOC_OK` and an empty message
//! after a success. A message holds no NUL byte (they are dropped), so it is a C string.
//!
//! Lock order: `LAST` is a thread-local `RefCell`, borrowed briefly and never across a call
//! into the library.

use extalloc::{Error, ErrorKind};
use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call returns: `EXTALLOC_OK` (0) or why it failed. The calling thread's last error
/// (`extalloc_last_error`) then holds the message.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum extalloc_code {
    /// Success.
    EXTALLOC_OK = 0,
    /// A NULL pointer, a bad path, size, geometry, policy or extent, a double free, a free
    /// of blocks not allocated: the call changed nothing.
    EXTALLOC_INVALID_ARGUMENT = 1,
    /// No free run long enough (the device or the allocator is full), or no room in the
    /// journal for the change.
    EXTALLOC_NO_SPACE = 2,
    /// No blob with that id (never put, or deleted), or none under that key.
    EXTALLOC_NOT_FOUND = 3,
    /// The operating system failed a read, write, flush or open of the volume's file.
    EXTALLOC_IO = 4,
    /// The file holds no extalloc volume, another format version, or damaged metadata
    /// (run `extalloc fsck`).
    EXTALLOC_CORRUPT = 5,
    /// The volume's file is open elsewhere (this process or another).
    EXTALLOC_BUSY = 6,
    /// The caller's buffer is too small: the call reported the size it needs.
    EXTALLOC_BUFFER_TOO_SMALL = 7,
    /// `extalloc_volume_create` on a path that exists: nothing was touched.
    EXTALLOC_EXISTS = 8,
    /// The volume stopped committing after a change was left half made: close it and
    /// open it again (recovery keeps every synced change).
    EXTALLOC_ABORTED = 9,
    /// A bug in extalloc (a panic, caught at the boundary). The handle's state is
    /// unknown: close it; reopening a volume recovers to its last sync.
    EXTALLOC_PANIC = 10,
    /// An offset or size past the largest blob (2^63 - 1 bytes, the library's largest
    /// file): the call changed nothing.
    EXTALLOC_FILE_TOO_BIG = 11,
    /// A call not valid in the state the volume is in (work under way, a store used
    /// another way): the call changed nothing; make it at another time.
    EXTALLOC_WRONG_STATE = 12,
}

use extalloc_code::*;

/// Why a call failed: its code and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: extalloc_code,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: extalloc_code, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Failure::new(EXTALLOC_INVALID_ARGUMENT, message)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::new(code_of(&e), e.to_string())
    }
}

/// The code of a library error: its kind's ([`code_of_kind`]).
pub(crate) fn code_of(e: &Error) -> extalloc_code {
    code_of_kind(e.kind())
}

/// The code of each kind of library error. `ErrorKind` is `#[non_exhaustive]`: a kind the
/// library adds later is `EXTALLOC_IO` until it is given its own code here, and this
/// crate's test of every kind of `ErrorKind::ALL` fails until then.
pub(crate) fn code_of_kind(kind: ErrorKind) -> extalloc_code {
    match kind {
        ErrorKind::InvalidArgument => EXTALLOC_INVALID_ARGUMENT,
        ErrorKind::FileTooBig => EXTALLOC_FILE_TOO_BIG,
        ErrorKind::WrongState => EXTALLOC_WRONG_STATE,
        ErrorKind::NotFound => EXTALLOC_NOT_FOUND,
        ErrorKind::Exists => EXTALLOC_EXISTS,
        ErrorKind::NoSpace | ErrorKind::TransactionTooLarge => EXTALLOC_NO_SPACE,
        ErrorKind::Busy => EXTALLOC_BUSY,
        ErrorKind::Io => EXTALLOC_IO,
        ErrorKind::Corrupt | ErrorKind::Unrecognized => EXTALLOC_CORRUPT,
        ErrorKind::Aborted => EXTALLOC_ABORTED,
        _ => EXTALLOC_IO,
    }
}

thread_local! {
    static LAST: RefCell<(extalloc_code, String)> = const { RefCell::new((EXTALLOC_OK, String::new())) };
}

fn set_last(code: extalloc_code, message: &str) {
    let clean: String = message.chars().filter(|&c| c != '\0').collect();
    LAST.with(|l| *l.borrow_mut() = (code, clean));
}

/// Runs a call's body: its result, or a caught panic, becomes the code returned and the
/// thread's last error.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> extalloc_code {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last(EXTALLOC_OK, "");
            return EXTALLOC_OK;
        }
        Ok(Err(f)) => f,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Failure::new(
                EXTALLOC_PANIC,
                format!("internal error (a bug in extalloc, please report it): {what}"),
            )
        }
    };
    set_last(failure.code, &failure.message);
    failure.code
}

/// `*p` for a pointer the caller passed, or `EXTALLOC_INVALID_ARGUMENT` naming `what`.
///
/// # Safety
/// `p` is NULL or points to a live `T` for the call's duration.
pub(crate) unsafe fn deref<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's promise: NULL or a live T.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// `&mut *p` for an out-parameter, or `EXTALLOC_INVALID_ARGUMENT` naming `what`.
///
/// # Safety
/// `p` is NULL or points to a writable `T` for the call's duration.
pub(crate) unsafe fn out_ref<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller's promise: NULL or a writable T.
    unsafe { p.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// Refuses a buffer `p` of `cap` places that is NULL though `cap` is not 0 (NULL with 0 is
/// a size or count query).
pub(crate) fn buffer_arg<T>(p: *const T, cap: usize, what: &str) -> Result<(), Failure> {
    if p.is_null() && cap > 0 {
        return Err(Failure::invalid(format!("{what} is NULL and cap is {cap}")));
    }
    Ok(())
}

/// The size query's answer: stores `need` (bytes) in `*len` and refuses with
/// `EXTALLOC_BUFFER_TOO_SMALL`, naming `what`, when it does not fit a buffer of `cap`.
pub(crate) fn fits(
    need: u64,
    cap: usize,
    len: &mut usize,
    what: impl FnOnce() -> String,
) -> Result<(), Failure> {
    *len = usize::try_from(need).unwrap_or(usize::MAX);
    if need > cap as u64 {
        return Err(Failure::new(
            EXTALLOC_BUFFER_TOO_SMALL,
            format!("{} holds {need} bytes, the buffer {cap}", what()),
        ));
    }
    Ok(())
}

/// The C string at `p` as UTF-8, or `EXTALLOC_INVALID_ARGUMENT` naming `what`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a CStr, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and the caller's promise: NUL-terminated.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// Copies the calling thread's last error message into `buf` (at most `cap - 1` bytes and
/// a NUL; nothing when `buf` is NULL or `cap` is 0) and returns the message's length in
/// bytes, without the NUL: a return `>= cap` means it was cut. The message is empty after
/// a call that succeeded.
///
/// Thread safety: any thread; each thread has its own last error.
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn extalloc_last_error(buf: *mut c_char, cap: usize) -> usize {
    let copy = |message: &str| {
        if !buf.is_null() && cap > 0 {
            let n = message.len().min(cap - 1);
            // SAFETY: `buf` holds `cap` bytes (the caller's promise) and `n < cap`.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        message.len()
    };
    catch_unwind(AssertUnwindSafe(|| LAST.with(|l| copy(&l.borrow().1)))).unwrap_or(0)
}

/// The code of the calling thread's last call (`EXTALLOC_OK` after a success).
///
/// Thread safety: any thread; each thread has its own last error.
#[no_mangle]
pub extern "C" fn extalloc_last_error_code() -> extalloc_code {
    catch_unwind(|| LAST.with(|l| l.borrow().0)).unwrap_or(EXTALLOC_PANIC)
}

/// The name of `code` ("EXTALLOC_NO_SPACE"), a static string the caller must not free.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn extalloc_code_name(code: extalloc_code) -> *const c_char {
    let name: &'static CStr = match code {
        EXTALLOC_OK => c"EXTALLOC_OK",
        EXTALLOC_INVALID_ARGUMENT => c"EXTALLOC_INVALID_ARGUMENT",
        EXTALLOC_NO_SPACE => c"EXTALLOC_NO_SPACE",
        EXTALLOC_NOT_FOUND => c"EXTALLOC_NOT_FOUND",
        EXTALLOC_IO => c"EXTALLOC_IO",
        EXTALLOC_CORRUPT => c"EXTALLOC_CORRUPT",
        EXTALLOC_BUSY => c"EXTALLOC_BUSY",
        EXTALLOC_BUFFER_TOO_SMALL => c"EXTALLOC_BUFFER_TOO_SMALL",
        EXTALLOC_EXISTS => c"EXTALLOC_EXISTS",
        EXTALLOC_ABORTED => c"EXTALLOC_ABORTED",
        EXTALLOC_PANIC => c"EXTALLOC_PANIC",
        EXTALLOC_FILE_TOO_BIG => c"EXTALLOC_FILE_TOO_BIG",
        EXTALLOC_WRONG_STATE => c"EXTALLOC_WRONG_STATE",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_code_and_a_message() {
        let code = guard(|| panic!("boom"));
        assert_eq!(code, EXTALLOC_PANIC);
        assert_eq!(extalloc_last_error_code(), EXTALLOC_PANIC);
        let mut buf = [0 as c_char; 128];
        // SAFETY: `buf` holds 128 bytes.
        let n = unsafe { extalloc_last_error(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: extalloc_last_error wrote a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(n, text.len());
        assert!(text.ends_with("boom"), "{text}");
        assert_eq!(guard(|| Ok(())), EXTALLOC_OK);
        // SAFETY: NULL with cap 0 is the length query.
        assert_eq!(unsafe { extalloc_last_error(std::ptr::null_mut(), 0) }, 0);
    }

    #[test]
    fn each_kind_has_its_code_and_old_codes_keep_their_values() {
        use ErrorKind as K;
        let want = [
            (K::InvalidArgument, EXTALLOC_INVALID_ARGUMENT),
            (K::FileTooBig, EXTALLOC_FILE_TOO_BIG),
            (K::WrongState, EXTALLOC_WRONG_STATE),
            (K::NotFound, EXTALLOC_NOT_FOUND),
            (K::Exists, EXTALLOC_EXISTS),
            (K::NoSpace, EXTALLOC_NO_SPACE),
            (K::TransactionTooLarge, EXTALLOC_NO_SPACE),
            (K::Busy, EXTALLOC_BUSY),
            (K::Io, EXTALLOC_IO),
            (K::Corrupt, EXTALLOC_CORRUPT),
            (K::Unrecognized, EXTALLOC_CORRUPT),
            (K::Aborted, EXTALLOC_ABORTED),
        ];
        assert_eq!(want.map(|(k, _)| k), K::ALL);
        for (k, code) in want {
            assert_eq!(code_of_kind(k), code, "{k:?}");
        }
        let values = [
            EXTALLOC_OK as i32,
            EXTALLOC_INVALID_ARGUMENT as i32,
            EXTALLOC_NO_SPACE as i32,
            EXTALLOC_NOT_FOUND as i32,
            EXTALLOC_IO as i32,
            EXTALLOC_CORRUPT as i32,
            EXTALLOC_BUSY as i32,
            EXTALLOC_BUFFER_TOO_SMALL as i32,
            EXTALLOC_EXISTS as i32,
            EXTALLOC_ABORTED as i32,
            EXTALLOC_PANIC as i32,
            EXTALLOC_FILE_TOO_BIG as i32,
            EXTALLOC_WRONG_STATE as i32,
        ];
        assert_eq!(values, std::array::from_fn(|i| i as i32));
    }

    #[test]
    fn a_cut_message_still_ends_with_nul() {
        guard(|| Err(Failure::invalid("0123456789")));
        let mut buf = [1 as c_char; 4];
        // SAFETY: `buf` holds 4 bytes.
        let n = unsafe { extalloc_last_error(buf.as_mut_ptr(), buf.len()) };
        assert_eq!(n, 10);
        assert_eq!(buf, [b'0' as c_char, b'1' as c_char, b'2' as c_char, 0]);
    }
}
