"""The Python package against what docs/python.md promises: blobs put, read, deleted and
kept across close and reopen (a hypothesis model against a dict), across kill -9 of the
process (what was synced reads back exactly), a full volume that leaves no partial blob,
errors named after their kind, threads sharing one volume, and the allocator."""

import os

import pytest
from helpers import run_in_threads, run_killed
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import extalloc

MiB = 1 << 20


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "vol.img")


def test_put_under_a_key_and_the_index_rebuilt_after_a_reopen(path):
    blobs = {f"photos/{i:03}.jpg".encode(): os.urandom(1000 + 3000 * i) for i in range(20)}
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        for key, data in blobs.items():
            vol.put(data, attr=key)
        plain = vol.put(b"no key")
        with pytest.raises(extalloc.InvalidRequest, match="1025"):
            vol.put(b"x", attr=b"k" * 1025)
    with extalloc.Volume.open(path) as vol:
        index = {attr: id for id, size, attr in vol.list() if id != plain}
        assert sorted(index) == sorted(blobs)
        for key, id in index.items():
            assert vol.get(id) == blobs[key]
            assert vol.attr(id) == key
        assert vol.attr(plain) == b""
        s = vol.statfs()
        assert s["blobs"] == 21 and s["prealloc_blocks"] == 0


def test_put_get_delete_and_reopen(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        a = vol.put(b"hello")
        b = vol.put(bytearray(b"x" * 100_000))
        c = vol.put(memoryview(b""))
        assert vol.get(a) == b"hello"
        assert vol.size(b) == 100_000
        assert vol.get(c) == b""
        vol.delete(c)
        assert vol.ids() == [a, b]
        assert vol.statfs()["blobs"] == 2
    assert vol.closed
    with extalloc.Volume.open(path) as vol:
        assert vol.ids() == [a, b]
        assert vol.get(b) == b"x" * 100_000


def test_iter_list_pages_through_what_list_gives(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        ids = [vol.put(bytes([i]) * i, attr=b"k%d" % i) for i in range(50)]
        vol.delete(ids.pop(10))
        whole = vol.list()
        for page_size in (1, 7, 49, 50, 4096):
            assert list(vol.iter_list(page_size)) == whole, page_size
        # A blob put during the iteration comes out after the ones before it.
        it = vol.iter_list(page_size=4)
        first = [next(it) for _ in range(5)]
        late = vol.put(b"late")
        rest = list(it)
        assert [e[0] for e in first + rest] == ids + [late]
        with pytest.raises(extalloc.InvalidRequest, match="page_size is 0"):
            vol.iter_list(0)
        it = vol.iter_list(page_size=2)
        next(it)
    with pytest.raises(extalloc.Closed):
        list(it)


def test_files_written_in_place_with_attributes(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        f = vol.create_file(b"meta")
        assert vol.list() == [(f, 0, b"meta")]
        vol.write(f, 0, b"abcdef")
        vol.write(f, 3, b"XY")
        assert vol.read(f, 0, 100) == b"abcXYf"
        vol.truncate(f, 2)
        assert vol.read(f, 0, 100) == b"ab"
        vol.set_attr(f, b"other")
        vol.fsync(f)
        vol.close_file(f)
        assert vol.attr(f) == b"other"


def test_errors_are_named_after_their_kind(path, tmp_path):
    with pytest.raises(extalloc.InvalidRequest):
        extalloc.Volume.create(path, 4096)
    assert not os.path.exists(path), "a refused create leaves no file"
    vol = extalloc.Volume.create(path, 64 * MiB)
    with pytest.raises(extalloc.Exists):
        extalloc.Volume.create(path, 64 * MiB)
    with pytest.raises(extalloc.NoSuchFile) as e:
        vol.get(12345)
    assert isinstance(e.value, extalloc.Error)
    with pytest.raises(extalloc.DeviceInUse):
        extalloc.Volume.open(path)
    vol.close()
    vol.close()  # idempotent
    with pytest.raises(extalloc.Closed):
        vol.put(b"x")
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x01" * (8 * MiB))
    with pytest.raises(extalloc.Corrupt):
        extalloc.Volume.open(str(junk))
    with pytest.raises(extalloc.InvalidRequest):
        extalloc.Allocator(1024, block_size=1000)
    with pytest.raises(extalloc.InvalidRequest):
        extalloc.Allocator(1024, policy="no-such-preset")


def test_a_file_too_big_and_an_attribute_too_large_name_their_cause(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        f = vol.create_file(b"")
        largest = (1 << 63) - 1
        with pytest.raises(extalloc.FileTooBig) as e:
            vol.write(f, largest - 1, b"xy")
        assert isinstance(e.value, extalloc.InvalidRequest), "a subclass: old handlers catch it"
        assert "past the largest file" in str(e.value)
        with pytest.raises(extalloc.FileTooBig):
            vol.truncate(f, largest + 1)
        with pytest.raises(extalloc.InvalidRequest) as e:
            vol.set_attr(f, b"a" * 4096)
        assert not isinstance(e.value, extalloc.FileTooBig)
        assert vol.size(f) == 0 and vol.attr(f) == b""


def test_text_where_bytes_are_wanted_says_to_encode_it(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        with pytest.raises(TypeError, match=r"data must be bytes-like .* not str: encode"):
            vol.put("some text")
        with pytest.raises(TypeError, match=r"attr must be bytes-like"):
            vol.put(b"x", "key")
        with pytest.raises(TypeError, match=r"not int"):
            vol.put(42)
        for not_bytes in ([1, 2], (1, 2), range(3)):  # sequences of ints are not bytes-like
            with pytest.raises(TypeError, match=r"must be bytes-like"):
                vol.put_key(b"k", not_bytes)
        assert vol.ids() == []
        assert vol.get(vol.put(memoryview(b"abcdef")[2:4])) == b"cd"
        import array
        assert vol.get(vol.put(array.array("B", [1, 2, 3]))) == b"\x01\x02\x03"
        f = vol.create_file(bytearray(b"k"))
        vol.write(f, 0, memoryview(b"abc"))
        assert vol.attr(f) == b"k" and f in vol.ids()


def test_a_full_volume_refuses_a_put_and_leaves_no_part_of_it(path):
    with extalloc.Volume.create(path, 32 * MiB) as vol:
        kept = []
        with pytest.raises(extalloc.NoSpace):
            for _ in range(100):
                kept.append(vol.put(os.urandom(MiB)))
        assert vol.ids() == kept, "the failed put left no blob"
        for i in kept[:3]:
            assert vol.size(i) == MiB
        for i in kept:
            vol.delete(i)
        vol.sync()
        vol.put(os.urandom(MiB))


def test_the_context_manager_closes_when_the_block_raises(path):
    with pytest.raises(RuntimeError):
        with extalloc.Volume.create(path, 64 * MiB) as vol:
            vol.put(b"kept")
            raise RuntimeError("boom")
    assert vol.closed
    with extalloc.Volume.open(path) as again:
        assert len(again.ids()) == 1


def test_threads_share_one_volume(path):
    with extalloc.Volume.create(path, 128 * MiB) as vol:

        def work(t):
            for i in range(50):
                data = bytes([t]) * (1000 + i)
                blob = vol.put(data)
                assert vol.get(blob) == data

        assert run_in_threads(work) == []
        assert len(vol.ids()) == 200


CRASHER = """
import os, signal, sys, extalloc
vol = extalloc.Volume.open(sys.argv[1])
n = int(sys.argv[2])
for i in range(n):
    vol.put(bytes([i % 251]) * (4096 * (i % 7) + i))
vol.sync()
print(" ".join(map(str, vol.ids())), flush=True)
for i in range(n):
    vol.put(b"after the sync" * 1000)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("n", [1, 10, 40])
def test_kill_9_keeps_every_synced_blob(path, n):
    extalloc.Volume.create(path, 64 * MiB).close()
    synced = [int(x) for x in run_killed(CRASHER, path, n).split()]
    assert len(synced) == n
    with extalloc.Volume.open(path) as vol:
        for i, blob in enumerate(synced):
            assert vol.get(blob) == bytes([i % 251]) * (4096 * (i % 7) + i)


def test_the_allocator(path):
    with extalloc.Allocator(1 << 16, group_blocks=8192) as a:
        free = a.free_blocks()
        start, length = a.allocate(owner=7, length=100)
        assert length == 100
        assert a.free_blocks() == free - 100
        a.free(start, length)
        with pytest.raises(extalloc.InvalidRequest):
            a.free(start, length)  # a double free changes nothing
        assert a.commit() == 100
        assert a.free_blocks() == free
        s2, l2 = a.allocate(owner=1, length=64, min_length=8, goal=start + 5000)
        assert 8 <= l2 <= 64
        with pytest.raises(extalloc.InvalidRequest):
            a.allocate(owner=2, length=1 << 20)  # more than a group holds
        runs = []
        with pytest.raises(extalloc.NoSpace):
            for _ in range(9):
                runs.append(a.allocate(owner=2, length=8192))
        assert len(runs) <= 7, "one group holds the run allocated above"
        for s, l in runs:
            a.free(s, l)
        a.commit()
        with pytest.raises(extalloc.InvalidRequest):
            a.allocate(owner=2, length=4, min_length=5)
        a.check()


class VolumeModel(RuleBasedStateMachine):
    """Puts, deletes, syncs and reopens against a dict of what each blob holds."""

    def __init__(self):
        super().__init__()
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "vol.img")
        self.vol = extalloc.Volume.create(self.path, 32 * MiB)
        self.model = {}

    @rule(data=st.binary(max_size=20_000))
    def put(self, data):
        self.model[self.vol.put(data)] = data

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(min_value=0))
    def get(self, pick):
        blob = sorted(self.model)[pick % len(self.model)]
        assert self.vol.get(blob) == self.model[blob]

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(min_value=0))
    def delete(self, pick):
        blob = sorted(self.model)[pick % len(self.model)]
        self.vol.delete(blob)
        del self.model[blob]
        with pytest.raises(extalloc.NoSuchFile):
            self.vol.get(blob)

    @rule()
    def sync(self):
        self.vol.sync()

    @rule()
    def reopen(self):
        self.vol.close()
        self.vol = extalloc.Volume.open(self.path)

    @invariant()
    def same_blobs(self):
        assert self.vol.ids() == sorted(self.model)

    def teardown(self):
        self.vol.close()
        self.dir.cleanup()


TestVolumeModel = VolumeModel.TestCase
TestVolumeModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
