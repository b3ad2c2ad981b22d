"""Merging ranks into one Perfetto-loadable trace."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter

import pytest

import aorta.trace
from aorta.errors import TraceError
from aorta.trace.testing import kineto_events, kineto_json
from tests.trace_helpers import DATA


@pytest.fixture
def pair(tmp_path):
    paths = []
    for r in (0, 1):
        path = tmp_path / f"a100_rank{r}.json.gz"
        shutil.copy(DATA / f"a100_nccl_sampled_rank-{r}.json.gz", path)
        paths.append(path)
    return paths


def test_merge_two_real_ranks(pair, tmp_path):
    out = tmp_path / "merged.json.gz"
    report = aorta.trace.merge(pair, out)
    merged = json.loads(gzip.decompress(out.read_bytes()))
    events = merged["traceEvents"]
    originals = [json.loads(gzip.decompress(p.read_bytes()))["traceEvents"] for p in pair]
    assert report.ranks == (0, 1) and report.events == len(events)
    assert len(events) >= sum(map(len, originals))  # nothing dropped (a few process names added)
    # GPU pid 0 of rank 0 and GPU pid 1 of rank 1 end up in different, labelled processes
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    kernel_pids = {e["pid"] for e in events if e.get("cat") == "kernel"}
    assert len(kernel_pids) == 2 and all(names[p].startswith("[rank ") for p in kernel_pids)
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in events)
    # a thread (pid, tid) never spans two ranks
    owners = {}
    for e in events:
        owners.setdefault((e["pid"], e["tid"]), set()).add(names.get(e["pid"], "")[:8])
    assert all(len(v) == 1 for v in owners.values())
    assert merged["aorta_merge"]["ranks"] == [0, 1]


def test_flow_ids_are_unique_per_rank(tmp_path):
    ops = [("kernel", "k", 10, 5)]
    paths = []
    for r in (0, 1):
        events = kineto_events(ops)
        events += [
            {"ph": "s", "id": 1, "pid": 100, "tid": 100, "ts": 8, "cat": "ac2g", "name": "ac2g"},
            {
                "ph": "f",
                "id": 1,
                "pid": 0,
                "tid": 7,
                "ts": 10,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            },
        ]
        path = tmp_path / f"r{r}.json"
        path.write_text(json.dumps({"distributedInfo": {"rank": r}, "traceEvents": events}))
        paths.append(path)
    aorta.trace.merge(paths, tmp_path / "m.json")
    events = json.loads((tmp_path / "m.json").read_text())["traceEvents"]
    flow_ids = Counter(e["id"] for e in events if e.get("ph") in ("s", "f"))
    assert len(flow_ids) == 2 and set(flow_ids.values()) == {2}


def test_clocks_are_aligned_by_base_time_then_collective_ends(tmp_path):
    paths = []
    for r, (base, start) in enumerate(((1_000_000_000, 0), (1_000_002_000, 1_030))):
        header = {"distributedInfo": {"rank": r}, "baseTimeNanoseconds": base}
        path = tmp_path / f"r{r}.json"
        path.write_bytes(
            kineto_json([("kernel", "ncclKernel_AllReduce", start, 100 - 30 * r)], header=header)
        )
        paths.append(path)
    by_base = aorta.trace.merge(paths, tmp_path / "base.json")
    assert by_base.offsets_ns == {0: 0, 1: 2_000}
    by_end = aorta.trace.merge(paths, tmp_path / "end.json", align="collective_end")
    # rank 1 ends at 1100 µs on its own clock, rank 0 at 100 µs
    assert by_end.offsets_ns[1] == -1_000_000
    merged = json.loads((tmp_path / "end.json").read_text())
    assert merged["baseTimeNanoseconds"] == 1_000_000_000
    ends = sorted(e["ts"] + e["dur"] for e in merged["traceEvents"] if e.get("cat") == "kernel")
    assert ends[0] == pytest.approx(ends[1])
    none = aorta.trace.merge(paths, tmp_path / "none.json", align="none")
    assert none.offsets_ns == {0: 0, 1: 0}


def test_merged_trace_loads_back(pair, tmp_path):
    out = tmp_path / "merged.json"
    aorta.trace.merge(pair, out, cache="off")
    back = aorta.trace.load(out, cache="off")
    originals = aorta.trace.load(pair, cache="off")
    assert len(back.gpu_ops) == len(originals.gpu_ops)


def test_unwritable_output_is_an_error(pair, tmp_path):
    with pytest.raises(TraceError, match="cannot write"):
        aorta.trace.merge(pair, tmp_path / "missing-dir" / "m.json")
