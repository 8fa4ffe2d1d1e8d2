//! The exceptions the package raises, all subclasses of `extalloc.Error` (registered in
//! the `extalloc` module by `lib.rs`), and [`to_py`], which turns a library error into the
//! one named after its kind. `lib.rs` and `lab.rs` raise them.
//!
//! Data structures: one exception type per error kind (PyO3's `create_exception!`).
//! Invariant: every `extalloc::ErrorKind` maps to one exception ([`to_py`] names every
//! kind, so a new one fails the build here). Lock order: none.

use ::extalloc::{Error as E, ErrorKind as K};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(extalloc, Error, PyException, "Every error extalloc raises.");
create_exception!(
    extalloc,
    NoSpace,
    Error,
    "No free run was big enough (the device or its journal is full)."
);
create_exception!(
    extalloc,
    NoSuchFile,
    Error,
    "No blob or file has this id (never made, or deleted)."
);
create_exception!(
    extalloc,
    InvalidRequest,
    Error,
    "A bad argument: a size, geometry, policy, range or path the library refuses."
);
create_exception!(
    extalloc,
    FileTooBig,
    InvalidRequest,
    "An offset or size past the largest file (2^63 - 1 bytes)."
);
create_exception!(
    extalloc,
    WrongState,
    InvalidRequest,
    "A call not valid in the state it found (work under way): make it at another time."
);
create_exception!(
    extalloc,
    Corrupt,
    Error,
    "The device holds damage the library will not serve (run `extalloc fsck`)."
);
create_exception!(
    extalloc,
    DeviceInUse,
    Error,
    "The device is open already, in this process or another."
);
create_exception!(
    extalloc,
    IoError,
    Error,
    "The device failed a read, write or flush."
);
create_exception!(
    extalloc,
    Aborted,
    IoError,
    "The volume stopped committing after a change was left half made: close it and open it again."
);
create_exception!(
    extalloc,
    Exists,
    Error,
    "Volume.create found a file at the path: it never overwrites one."
);
create_exception!(
    extalloc,
    Closed,
    Error,
    "The volume was closed: open it again."
);

/// The exception for a library error: its kind's ([`E::kind`]), with its message, which
/// names what failed. Every kind is named, so a new one fails the build here.
pub(crate) fn to_py(e: E) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        K::InvalidArgument => InvalidRequest::new_err(msg),
        K::FileTooBig => FileTooBig::new_err(msg),
        K::WrongState => WrongState::new_err(msg),
        K::NotFound => NoSuchFile::new_err(msg),
        K::Exists => Exists::new_err(msg),
        K::NoSpace | K::TransactionTooLarge => NoSpace::new_err(msg),
        K::Busy => DeviceInUse::new_err(msg),
        K::Io => IoError::new_err(msg),
        K::Corrupt | K::Unrecognized => Corrupt::new_err(msg),
        K::Aborted => Aborted::new_err(msg),
        // A kind added to the library later (`ErrorKind` is non-exhaustive): the base
        // class, until it is given an exception of its own.
        _ => Error::new_err(msg),
    }
}
