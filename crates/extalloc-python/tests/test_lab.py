"""extalloc.lab: a workload's matrix and a trace's replay from Python, as flat records."""

from pathlib import Path

import pytest

import extalloc
from extalloc import lab

REPO = Path(__file__).resolve().parents[3]


def test_a_workload_runs_and_returns_flat_records():
    assert "frag" in lab.workloads() and "writeback" not in lab.workloads()
    runs = lab.run(
        "fallocate2",
        policies=["ext4-2025", "extalloc"],
        threads=[1, 2],
        seconds=0.05,
        repeat=1,
        device_size="256MiB",
    )
    assert [(r["policy"], r["threads"]) for r in runs] == [
        ("ext4-2025", 1),
        ("ext4-2025", 2),
        ("extalloc", 1),
        ("extalloc", 2),
    ]
    for r in runs:
        assert r["workload"] == "fallocate2"
        assert r["ops"] > 0 and r["ops_per_sec"] > 0
        assert r["layout.extents_per_file"] >= 0
        assert not any(isinstance(v, dict) for v in r.values()), "flat"


def test_bad_workloads_and_options_raise_with_what_to_do():
    with pytest.raises(extalloc.Error, match="frag"):
        lab.run("no-such-workload")
    with pytest.raises(extalloc.Error, match="repeat"):
        lab.run("frag", repeat=0)
    with pytest.raises(extalloc.Error):
        lab.run("frag", policies="no-such-preset", seconds=0.05, repeat=1)


def test_a_trace_replays_beside_the_kernel():
    trace = REPO / "traces" / "dbench.trace.txt.gz"
    runs = lab.replay(trace, policies="extalloc")
    policies = {r["policy"] for r in runs}
    assert policies == {"kernel", "extalloc"}, policies
    for r in runs:
        assert r["workload"] == "replay dbench.trace.txt.gz" and r["ops"] > 0
        assert r["free_space.free_blocks"] > 0
