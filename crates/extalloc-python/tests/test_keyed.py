"""Blobs by key (docs/python.md, "Blobs by key"): put_key replaces the key's blob, get_key
and find_key find it, delete_key deletes it, bad keys raise, a key names one blob across
reopens, threads and kill -9 in the middle of replacing puts."""

import pytest
from helpers import run_in_threads, run_killed

import extalloc

MiB = 1 << 20


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "vol.img")


def under(vol, key):
    return [id for id, size, attr in vol.list() if attr == key]


def test_put_key_replaces_and_the_key_names_one_blob_across_reopens(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:
        assert vol.get_key(b"a") is None and vol.find_key(b"a") is None
        assert vol.get_key(b"a", b"missing") == b"missing"
        first = vol.put_key(b"a", b"x" * 100_000)
        plain = vol.put(b"no key")
        second = vol.put_key(bytearray(b"a"), memoryview(b"second"))
        assert second != first and vol.find_key(b"a") == second
        assert vol.get_key(b"a") == b"second"
        with pytest.raises(extalloc.NoSuchFile):
            vol.get(first)
        vol.put_key(b"empty", b"")
        assert vol.get_key(b"empty") == b""
    with extalloc.Volume.open(path) as vol:
        assert under(vol, b"a") == [second]
        third = vol.put_key(b"a", b"third")
        assert under(vol, b"a") == [third] and vol.get_key(b"a") == b"third"
        assert vol.get(plain) == b"no key" and vol.attr(third) == b"a"
        assert vol.delete_key(b"a") == third and vol.find_key(b"a") is None
        assert vol.delete_key(b"a") is None and under(vol, b"a") == []
        with pytest.raises(extalloc.NoSuchFile):
            vol.get(third)


def test_bad_keys_raise_and_change_nothing(path):
    with extalloc.Volume.create(path, 16 * MiB) as vol:
        with pytest.raises(extalloc.InvalidRequest, match="key is empty"):
            vol.put_key(b"", b"x")
        with pytest.raises(extalloc.InvalidRequest, match="1025"):
            vol.put_key(b"k" * 1025, b"x")
        with pytest.raises(extalloc.InvalidRequest, match="key is empty"):
            vol.get_key(b"")
        with pytest.raises(extalloc.InvalidRequest):
            vol.find_key(b"k" * 1025)
        with pytest.raises(TypeError, match="encode"):
            vol.put_key("text", b"x")
        assert vol.ids() == []
        id = vol.put_key(b"k" * 1024, b"x")
        assert vol.find_key(b"k" * 1024) == id


def test_threads_putting_one_key_leave_one_blob_and_read_whole_ones(path):
    with extalloc.Volume.create(path, 64 * MiB) as vol:

        def work(t):
            for i in range(30):
                vol.put_key(b"shared", bytes([t * 30 + i]) * (5000 + i))
                got = vol.get_key(b"shared")
                assert got is not None and got == bytes([got[0]]) * len(got)

        assert run_in_threads(work) == []
        assert len(under(vol, b"shared")) == 1 and len(vol.ids()) == 1


REPLACER = """
import os, signal, sys, extalloc
vol = extalloc.Volume.open(sys.argv[1])
n = int(sys.argv[2])
for i in range(n):
    vol.put_key(b"key", bytes([i % 251]) * (4096 * (i % 5) + 100 + i))
vol.sync()
print(n - 1, flush=True)
for i in range(n, 2 * n):
    vol.put_key(b"key", bytes([i % 251]) * (4096 * (i % 5) + 100 + i))
    if i % 3 == 0:
        vol.sync()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("n", [1, 7, 30])
def test_kill_9_amid_replacing_puts_leaves_exactly_one_whole_blob(path, n):
    extalloc.Volume.create(path, 64 * MiB).close()
    synced = int(run_killed(REPLACER, path, n).split()[0])
    with extalloc.Volume.open(path) as vol:
        assert len(under(vol, b"key")) == 1, vol.list()
        got = vol.get_key(b"key")
        # One of the versions put at or after the last one synced before the kill, whole.
        versions = [bytes([j % 251]) * (4096 * (j % 5) + 100 + j) for j in range(synced, 2 * n)]
        assert got in versions, len(got)
