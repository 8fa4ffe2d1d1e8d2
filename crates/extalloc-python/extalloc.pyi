"""Type stubs of the extalloc package (the Rust module in src/lib.rs; docs/python.md)."""

from os import PathLike
from pathlib import Path
from typing import Any, Optional, Sequence, TypeVar, Union, overload

__version__: str

_Path = Union[str, "PathLike[str]"]
_Bytes = Union[bytes, bytearray, memoryview]
_T = TypeVar("_T")

class Error(Exception):
    """Every error extalloc raises."""

class NoSpace(Error):
    """No free run was big enough (the device or its journal is full)."""

class NoSuchFile(Error):
    """No blob or file has this id (never made, or deleted)."""

class InvalidRequest(Error):
    """A bad argument: a size, geometry, policy, range or path the library refuses."""

class FileTooBig(InvalidRequest):
    """An offset or size past the largest file (2^63 - 1 bytes)."""

class WrongState(InvalidRequest):
    """A call not valid in the state it found (work under way): make it at another time."""

class Corrupt(Error):
    """The device holds damage the library will not serve (run `extalloc fsck`)."""

class DeviceInUse(Error):
    """The device is open already, in this process or another."""

class IoError(Error):
    """The device failed a read, write or flush."""

class Aborted(IoError):
    """The volume stopped committing after a change was left half made: close it and open it again."""

class Exists(Error):
    """Volume.create found a file at the path: it never overwrites one."""

class Closed(Error):
    """The volume was closed: open it again."""

class Volume:
    """A volume of blobs on a file; a context manager that closes it; thread-safe."""

    @staticmethod
    def create(path: _Path, size: int) -> "Volume": ...
    @staticmethod
    def open(path: _Path) -> "Volume": ...
    def put(self, data: _Bytes, attr: _Bytes = ...) -> int: ...
    def get(self, id: int) -> bytes: ...
    def put_key(self, key: _Bytes, data: _Bytes) -> int: ...
    @overload
    def get_key(self, key: _Bytes) -> Optional[bytes]: ...
    @overload
    def get_key(self, key: _Bytes, default: _T) -> Union[bytes, _T]: ...
    def find_key(self, key: _Bytes) -> Optional[int]: ...
    def delete_key(self, key: _Bytes) -> Optional[int]: ...
    def size(self, id: int) -> int: ...
    def delete(self, id: int) -> None: ...
    def ids(self) -> list[int]: ...
    def list(self) -> list[tuple[int, int, bytes]]: ...
    def statfs(self) -> dict[str, int]: ...
    def sync(self) -> None: ...
    def create_file(self, attr: _Bytes = ...) -> int: ...
    def write(self, id: int, offset: int, data: _Bytes) -> None: ...
    def read(self, id: int, offset: int, length: int) -> bytes: ...
    def truncate(self, id: int, size: int) -> None: ...
    def attr(self, id: int) -> bytes: ...
    def set_attr(self, id: int, attr: _Bytes) -> None: ...
    def fsync(self, id: int) -> None: ...
    def close_file(self, id: int) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> Path: ...
    def __enter__(self) -> "Volume": ...
    def __exit__(self, *exc_info: object) -> bool: ...

class Allocator:
    """An extent allocator in memory; thread-safe."""

    def __init__(
        self,
        device_blocks: int,
        block_size: int = 4096,
        group_blocks: int = 32768,
        policy: Optional[str] = None,
    ) -> None: ...
    def allocate(
        self,
        owner: int,
        length: int,
        min_length: Optional[int] = None,
        goal: Optional[int] = None,
    ) -> tuple[int, int]: ...
    def free(self, start: int, length: int) -> None: ...
    def commit(self) -> int: ...
    def free_blocks(self) -> int: ...
    def check(self) -> None: ...
    def __enter__(self) -> "Allocator": ...
    def __exit__(self, *exc_info: object) -> bool: ...

class _Lab:
    """The allocation lab (`extalloc.lab`): records are dicts, one per policy x threads run."""

    def workloads(self) -> list[str]: ...
    def run(
        self,
        workload: str,
        *,
        policies: Union[str, Sequence[str], None] = None,
        threads: Union[int, str, Sequence[int], None] = None,
        seconds: Optional[float] = None,
        repeat: Optional[int] = None,
        device_size: Optional[str] = None,
        file_size: Optional[str] = None,
        seed: Optional[int] = None,
    ) -> list[dict[str, Any]]: ...
    def replay(
        self, trace: _Path, *, policies: Union[str, Sequence[str], None] = None
    ) -> list[dict[str, Any]]: ...

lab: _Lab
