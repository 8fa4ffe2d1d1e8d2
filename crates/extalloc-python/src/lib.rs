//! The Python package `extalloc` (PyO3, abi3): a [`Volume`] of blobs on a file, and the
//! in-memory [`Allocator`]; `docs/python.md` is the guide, `extalloc.pyi` the types.
//!
//! Data structures: [`Volume`] holds the open `extalloc::volume::Volume` in a lock, `None`
//! once closed; [`Allocator`] holds an `::extalloc::Allocator`. Both are boxed: Python
//! allocates a class's object 16-byte aligned, and the library's types hold cache-padded
//! fields aligned to 128 bytes, which inline would sit misaligned (undefined behaviour;
//! pyo3 checks it with debug assertions on). Errors become exceptions
//! named after the library's error kinds (`to_py`), all subclasses of `extalloc.Error`,
//! defined in `exceptions.rs` (which `lab.rs` uses too).
//!
//! Invariant: a closed volume answers every call with `extalloc.Closed`, and nothing of it
//! stays open (its device lock is let go at `close`). Every call that touches the device
//! lets go of the GIL first, so Python threads use the volume side by side.
//!
//! Lock order: the GIL is released before the volume's lock is taken (never the other way
//! round); the volume's lock is read by every call but `close`, which takes it for writing
//! (it waits for calls in flight), then the library's own locks.

mod exceptions;
mod lab;

use ::extalloc::volume::Volume as Vol;
use ::extalloc::{AllocRequest, Error as E, Extent, Geometry, Policy};
use exceptions::{
    to_py, Aborted, Closed, Corrupt, DeviceInUse, Error, Exists, FileTooBig, InvalidRequest,
    IoError, NoSpace, NoSuchFile, WrongState,
};
use parking_lot::RwLock;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::PathBuf;

/// A volume of blobs on a file (`docs/python.md`). Made by `Volume.create` or
/// `Volume.open`; a context manager that closes it. Safe to share between threads.
#[pyclass(frozen, module = "extalloc")]
pub struct Volume {
    vol: RwLock<Option<Box<Vol>>>,
    path: PathBuf,
}

/// The bytes of a bytes-like argument (`bytes`, `bytearray`, `memoryview`, a sequence of
/// ints); a `str` is a `TypeError` that says to encode it (pyo3's own message names Rust's
/// types).
fn bytes_of(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u8>> {
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be bytes-like (bytes, bytearray, memoryview), not str: encode it \
             first, e.g. {name}.encode()"
        )));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<pyo3::types::PyByteArray>() {
        return Ok(b.to_vec());
    }
    // Any other object with the buffer protocol (memoryview, array.array, mmap, NumPy's
    // arrays) through a memoryview's `tobytes()`: the stable ABI of 3.9 has no buffer API.
    // A list or tuple of small ints has none: not bytes-like, though it would convert.
    if let Ok(view) = pyo3::types::PyMemoryView::from(obj) {
        let bytes = view.call_method0("tobytes")?;
        return Ok(bytes.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "{name} must be bytes-like (bytes, bytearray, memoryview), not {}",
        obj.get_type()
            .name()
            .map_or_else(|_| "this type".into(), |n| n.to_string())
    )))
}

// What the boxes above are for: a class Python allocates needs no more than its 16 bytes.
const _: () =
    assert!(std::mem::align_of::<Volume>() <= 16 && std::mem::align_of::<Allocator>() <= 16);

impl Volume {
    /// Runs `f` on the open volume without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Vol) -> Result<T, E> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let guard = self.vol.read();
            let vol = guard
                .as_ref()
                .ok_or_else(|| Closed::new_err(format!("{} is closed", self.path.display())))?;
            f(vol).map_err(to_py)
        })
    }

    fn opened(vol: Vol, path: PathBuf) -> Volume {
        Volume {
            vol: RwLock::new(Some(Box::new(vol))),
            path,
        }
    }
}

#[pymethods]
impl Volume {
    /// Makes a new volume of `size` bytes in a new file at `path`, with a journal and
    /// groups scaled to it, and opens it. Raises Exists when something is at `path` (it
    /// never overwrites), InvalidRequest for a size too small (the message says the least);
    /// on failure no file is left.
    #[staticmethod]
    fn create(py: Python<'_>, path: PathBuf, size: u64) -> PyResult<Volume> {
        let p = path.clone();
        let vol = py.detach(move || {
            // Made here with O_EXCL, so a file that appears meanwhile is not overwritten.
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(Exists::new_err(format!(
                        "{} exists: Volume.create never overwrites a file (open it with \
                         Volume.open, or remove it first)",
                        p.display()
                    )));
                }
                Err(e) => return Err(IoError::new_err(format!("{}: {e}", p.display()))),
            }
            Vol::mkfs_file(&p, size).map_err(|e| {
                let _ = std::fs::remove_file(&p);
                to_py(e)
            })
        })?;
        Ok(Volume::opened(vol, path))
    }

    /// Opens the volume in the file at `path`, replaying its journal. Raises DeviceInUse
    /// when it is open already, Corrupt when it is not a volume or is damaged.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Volume> {
        let p = path.clone();
        let vol = py.detach(move || Vol::open_file(&p)).map_err(to_py)?;
        Ok(Volume::opened(vol, path))
    }

    /// Stores `data` (any bytes-like object) as a new blob with `attr` (a key, up to 1,024
    /// bytes: `list()` gives it back) and returns its id. Atomic: after a crash the blob is
    /// there whole with its `attr`, or not at all. Durable at the next `sync` or `close`.
    /// On failure (NoSpace) no blob is left.
    #[pyo3(signature = (data, attr = None))]
    fn put(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        attr: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let data = bytes_of(data, "data")?;
        let attr = attr.map_or(Ok(Vec::new()), |a| bytes_of(a, "attr"))?;
        self.with(py, |vol| vol.put(&attr, &data))
    }

    /// Stores `data` as a new blob under `key` (1 to 1,024 bytes; bytes-like) and returns
    /// its id; the blob `key` named before is replaced in the same atomic step and deleted.
    /// After a crash the key names the old blob or the new one, each whole: never neither,
    /// never both. Durable at the next `sync` or `close`. Raises InvalidRequest for an
    /// empty or oversized key (nothing changed); on NoSpace or IoError the new blob is
    /// deleted again and the old one stands.
    fn put_key(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let key = bytes_of(key, "key")?;
        let data = bytes_of(data, "data")?;
        self.with(py, |vol| vol.put_keyed(&key, &data))
    }

    /// The bytes of the blob `key` names, whole (one blob's, even while another thread
    /// replaces it), or `default` when the key names none. Raises InvalidRequest for an
    /// empty or oversized key.
    #[pyo3(signature = (key, default = None))]
    fn get_key<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = bytes_of(key, "key")?;
        Ok(match self.with(py, |vol| vol.get_keyed(&key))? {
            Some(bytes) => Some(PyBytes::new(py, &bytes).into_any()),
            None => default,
        })
    }

    /// The id of the blob `key` names, or None. Raises InvalidRequest for an empty or
    /// oversized key.
    fn find_key(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let key = bytes_of(key, "key")?;
        self.with(py, |vol| vol.find_key(&key))
    }

    /// Deletes the blob `key` names and returns its id, or None when the key names none
    /// (nothing changed). Its space is free once the delete is durable (the next `sync`).
    /// Raises InvalidRequest for an empty or oversized key. A delete that fails (IoError)
    /// leaves the key naming the whole blob, or, when only the removal failed, naming
    /// nothing with the blob hidden until the next open removes it.
    fn delete_key(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let key = bytes_of(key, "key")?;
        self.with(py, |vol| vol.delete_keyed(&key))
    }

    /// The bytes of blob `id`. Raises NoSuchFile for an unknown id.
    fn get<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Bound<'py, PyBytes>> {
        // One read under the file's lock: the blob as it is, whole.
        let bytes = self.with(py, |vol| vol.read(id, 0, vol.size(id)?))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The size in bytes of blob or file `id`.
    fn size(&self, py: Python<'_>, id: u64) -> PyResult<u64> {
        self.with(py, |vol| vol.size(id))
    }

    /// Deletes blob or file `id`: its space is free once the delete is durable (the next
    /// `sync`). Raises NoSuchFile for an unknown id; a failed delete leaves it whole.
    fn delete(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        self.with(py, |vol| vol.unlink(id))
    }

    /// Every blob's and file's id, in increasing order.
    fn ids(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |vol| Ok(vol.try_list()?.iter().map(|f| f.id).collect()))
    }

    /// Every blob and file as `(id, size, attr)`, in id order, in one pass (to rebuild an
    /// index of keys kept in the attribute bytes).
    fn list<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u64, u64, Bound<'py, PyBytes>)>> {
        let files = self.with(py, |vol| vol.try_list_with_attrs())?;
        Ok(files
            .into_iter()
            .map(|(f, attr)| (f.id, f.size, PyBytes::new(py, &attr)))
            .collect())
    }

    /// Every blob and file as `(id, size, attr)`, in id order, as `list()` gives them, but
    /// read `page_size` at a time as the iteration goes: memory stays one page whatever
    /// the blob count (`list()` and `ids()` build the whole list). A blob put while the
    /// iteration runs comes out if its id (ids only grow) is past the page under way; one
    /// deleted before its page is read does not. Raises InvalidRequest for a page_size of
    /// 0; a page that cannot be read raises from `next()` (IoError, Corrupt), and Closed
    /// once the volume is closed.
    #[pyo3(signature = (page_size = 4096))]
    fn iter_list(slf: Py<Self>, page_size: usize) -> PyResult<Listing> {
        if page_size == 0 {
            return Err(InvalidRequest::new_err(
                "page_size is 0: a page holds at least one blob",
            ));
        }
        Ok(Listing {
            vol: slf,
            page: std::collections::VecDeque::new(),
            after: None,
            done: false,
            page_size,
        })
    }

    /// The volume's figures as a dict: block_size, blocks, metadata_blocks, free_blocks,
    /// available_blocks, pending_blocks (freed, free at the next sync) and blobs.
    fn statfs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // The count without a pass over every blob (a put under way counts).
        let (s, blobs) = self.with(py, |vol| Ok((vol.statfs(), vol.file_count()?)))?;
        let d = PyDict::new(py);
        d.set_item("block_size", s.block_size)?;
        d.set_item("blocks", s.blocks)?;
        d.set_item("metadata_blocks", s.metadata_blocks)?;
        d.set_item("free_blocks", s.free_blocks)?;
        d.set_item("available_blocks", s.available_blocks)?;
        d.set_item("pending_blocks", s.pending_blocks)?;
        d.set_item("blobs", blobs)?;
        d.set_item("prealloc_blocks", s.prealloc_reserved_blocks)?;
        Ok(d)
    }

    /// Makes every put, write and delete before it durable (one journal commit).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |vol| vol.sync())
    }

    /// A new empty file with the attribute bytes `attr` (the caller's own metadata, up to
    /// a block); returns its id. For files written in place: `write`, `read`, `truncate`.
    #[pyo3(signature = (attr = None))]
    fn create_file(&self, py: Python<'_>, attr: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let attr = attr.map_or(Ok(Vec::new()), |a| bytes_of(a, "attr"))?;
        self.with(py, |vol| vol.create(&attr))
    }

    /// Writes `data` into file `id` at `offset` (growing it). A write that fails part way
    /// may leave part of it written, never beyond the file's old size plus `data`.
    fn write(&self, py: Python<'_>, id: u64, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_of(data, "data")?;
        self.with(py, |vol| vol.write(id, offset, &data))
    }

    /// Up to `length` bytes of file `id` from `offset` (fewer at its end).
    fn read<'py>(
        &self,
        py: Python<'py>,
        id: u64,
        offset: u64,
        length: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with(py, |vol| vol.read(id, offset, length))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Sets file `id`'s size (cutting or extending with zeros).
    fn truncate(&self, py: Python<'_>, id: u64, size: u64) -> PyResult<()> {
        self.with(py, |vol| vol.truncate(id, size))
    }

    /// File `id`'s attribute bytes.
    fn attr<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with(py, |vol| vol.attr(id))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Replaces file `id`'s attribute bytes.
    fn set_attr(&self, py: Python<'_>, id: u64, attr: &Bound<'_, PyAny>) -> PyResult<()> {
        let attr = bytes_of(attr, "attr")?;
        self.with(py, |vol| vol.set_attr(id, &attr))
    }

    /// Makes file `id` durable (and every change before it: one journal).
    fn fsync(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        self.with(py, |vol| vol.fsync(id))
    }

    /// Done writing file `id` for now: the space kept ahead of its end for appends goes back
    /// (call it when a file is complete, or free space sits in those reservations).
    fn close_file(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        self.with(py, |vol| vol.close_file(id))
    }

    /// Writes everything, closes the volume and lets go of its file. Idempotent. Every
    /// later call raises Closed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| match self.vol.write().take() {
            Some(vol) => vol.close().map_err(to_py),
            None => Ok(()),
        })
    }

    /// Whether `close` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.vol.read().is_none()
    }

    /// The file the volume lives in.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the volume, whether the block raised or not; never swallows the exception.
    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: Option<Bound<'_, PyAny>>,
        _value: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<extalloc.Volume {} ({state})>", self.path.display())
    }
}

/// An extent allocator in memory (`docs/python.md`): runs of blocks for owners, frees that
/// become reusable at `commit`. Safe to share between threads.
#[pyclass(frozen, module = "extalloc")]
pub struct Allocator {
    alloc: Box<::extalloc::Allocator>,
}

#[pymethods]
impl Allocator {
    /// An allocator for a device of `device_blocks` blocks of `block_size` bytes (a power
    /// of two from 512 to 65536) in groups of `group_blocks`, every block free, under
    /// `policy` (a preset such as "extalloc" or "ext4-2025", `key=value` overrides after a
    /// comma). Raises InvalidRequest for a bad geometry or policy.
    #[new]
    #[pyo3(signature = (device_blocks, block_size = 4096, group_blocks = 32768, policy = None))]
    fn new(
        device_blocks: u64,
        block_size: u32,
        group_blocks: u64,
        policy: Option<&str>,
    ) -> PyResult<Allocator> {
        let policy = match policy {
            Some(spec) => Policy::parse(spec).map_err(to_py)?,
            None => Policy::default(),
        };
        let geometry = Geometry::new(block_size, group_blocks, device_blocks).map_err(to_py)?;
        let alloc = ::extalloc::Allocator::new(geometry, policy).map_err(to_py)?;
        Ok(Allocator {
            alloc: Box::new(alloc),
        })
    }

    /// A run of at most `length` blocks and at least `min_length` (default: all of
    /// `length`) for `owner` (runs of one owner are kept near each other), at `goal` when
    /// free, else near it. Returns `(start, length)`. Raises NoSpace when no run of
    /// `min_length` is free; a failed call changes nothing.
    #[pyo3(signature = (owner, length, min_length = None, goal = None))]
    fn allocate(
        &self,
        py: Python<'_>,
        owner: u64,
        length: u64,
        min_length: Option<u64>,
        goal: Option<u64>,
    ) -> PyResult<(u64, u64)> {
        let min = min_length.unwrap_or(length);
        if min == 0 || min > length {
            return Err(InvalidRequest::new_err(format!(
                "min_length {min} must be from 1 to length {length}"
            )));
        }
        let mut req = AllocRequest::new(owner, length).min_len(min);
        if let Some(g) = goal {
            req = req.goal(g);
        }
        let e = py.detach(|| self.alloc.allocate(&req)).map_err(to_py)?;
        Ok((e.start, e.len))
    }

    /// Frees `length` blocks from `start` (allocated before): reusable after `commit`.
    /// Raises InvalidRequest for a double free or blocks not allocated; changes nothing then.
    fn free(&self, py: Python<'_>, start: u64, length: u64) -> PyResult<()> {
        py.detach(|| self.alloc.free(Extent::new(start, length)))
            .map_err(to_py)
    }

    /// Makes the frees before it reusable; returns the blocks they freed.
    fn commit(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.alloc.commit())
    }

    /// Blocks free now (frees not yet committed are not).
    fn free_blocks(&self) -> u64 {
        self.alloc.free_blocks()
    }

    /// Checks the allocator's invariants (bitmaps against counters and indexes); raises
    /// Corrupt or IoError naming the first that fails.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.alloc.check()).map_err(to_py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _ty: Option<Bound<'_, PyAny>>,
        _value: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        false
    }
}

/// The module: the two classes, the exceptions and the `lab` submodule.
/// An iteration over a volume's blobs a page at a time (`Volume.iter_list`): yields
/// `(id, size, attr)` in id order. Data structures: the page read and not yet yielded, and
/// where the next page starts; invariant: every id yielded is above every id yielded
/// before it (the pages' own promise, `Volume::list_page`).
#[pyclass(module = "extalloc")]
pub struct Listing {
    vol: Py<Volume>,
    page: std::collections::VecDeque<(u64, u64, Vec<u8>)>,
    /// The `after` of the next page (`None`: from the first id).
    after: Option<u64>,
    /// The last page said that none follows.
    done: bool,
    page_size: usize,
}

#[pymethods]
impl Listing {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<Option<(u64, u64, Bound<'py, PyBytes>)>> {
        while self.page.is_empty() {
            if self.done {
                return Ok(None);
            }
            let (after, size) = (self.after, self.page_size);
            let page = self.vol.get().with(py, |vol| vol.list_page(after, size))?;
            // What it relies on: pages move forward (a page may be empty before the end).
            debug_assert!(
                page.next.is_none_or(|n| after.is_none_or(|a| n > a)),
                "the next page starts past {after:?}"
            );
            self.done = page.next.is_none();
            self.after = page.next;
            (self.page).extend(page.files.into_iter().map(|(f, a)| (f.id, f.size, a)));
        }
        let (id, size, attr) = self.page.pop_front().expect("a page read");
        Ok(Some((id, size, PyBytes::new(py, &attr))))
    }
}

#[pymodule(name = "extalloc")]
fn extalloc_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Volume>()?;
    m.add_class::<Allocator>()?;
    m.add_class::<Listing>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("NoSpace", py.get_type::<NoSpace>())?;
    m.add("NoSuchFile", py.get_type::<NoSuchFile>())?;
    m.add("InvalidRequest", py.get_type::<InvalidRequest>())?;
    m.add("FileTooBig", py.get_type::<FileTooBig>())?;
    m.add("WrongState", py.get_type::<WrongState>())?;
    m.add("Corrupt", py.get_type::<Corrupt>())?;
    m.add("DeviceInUse", py.get_type::<DeviceInUse>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("Aborted", py.get_type::<Aborted>())?;
    m.add("Exists", py.get_type::<Exists>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    lab::add(m)?;
    Ok(())
}
