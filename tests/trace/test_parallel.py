"""Parallel decode of one file (``load(workers=...)``): the serial tables, bit for bit."""

from __future__ import annotations

import gzip
import itertools
import json
import multiprocessing

import numpy as np
import pandas as pd
import pytest

import aorta.trace
from aorta.trace.loader._parallel import available_workers, event_ranges
from tests.trace_helpers import ALL_TRACES, DATA


def _plain(tmp_path, name: str):
    """The shipped trace as an uncompressed file (ranges need random access)."""
    raw = (DATA / name).read_bytes()
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress(raw) if name.endswith(".gz") else raw)
    return path


def _assert_same(serial, parallel):
    pd.testing.assert_frame_equal(serial.events, parallel.events, check_exact=True)
    for column in serial.events:
        a, b = serial.events[column], parallel.events[column]
        if isinstance(a.dtype, pd.CategoricalDtype):  # same dictionary, same codes
            assert list(a.cat.categories) == list(b.cat.categories)
            np.testing.assert_array_equal(a.cat.codes, b.cat.codes)
    pd.testing.assert_frame_equal(serial.comm_args, parallel.comm_args, check_exact=True)
    a, b = serial.info(), parallel.info()
    assert (a.header, a.processes, a.threads, a.labels) == (
        b.header,
        b.processes,
        b.threads,
        b.labels,
    )
    keys = ("events_seen", "events_kept", "python_functions_skipped", "bytes")
    assert {k: a.stats[k] for k in keys} == {k: b.stats[k] for k in keys}


@pytest.mark.parametrize("name", [n for n in ALL_TRACES if "gloo" not in n])
@pytest.mark.parametrize("workers", [2, 3])
def test_parallel_decode_gives_the_serial_tables(tmp_path, name, workers):
    path = _plain(tmp_path, name)
    serial = aorta.trace.load(path, cache="off", workers=1)
    parallel = aorta.trace.load(
        path, cache="off", workers=workers, parallel_min_bytes=0, block_size=4096
    )
    assert parallel.info().stats["parts"] == workers
    assert serial.info().stats["parts"] == 1
    _assert_same(serial, parallel)


def test_python_functions_kept_in_parallel_too(tmp_path):
    path = _plain(tmp_path, "h100_bert_small.json.gz")
    serial = aorta.trace.load(path, cache="off", workers=1, python_functions=True)
    parallel = aorta.trace.load(
        path, cache="off", workers=2, parallel_min_bytes=0, python_functions=True
    )
    _assert_same(serial, parallel)


def test_a_bare_array_of_events(tmp_path):
    doc = json.loads(gzip.decompress((DATA / "h100_bert_small.json.gz").read_bytes()))
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(doc["traceEvents"], indent=1))
    serial = aorta.trace.load(path, cache="off", workers=1)
    _assert_same(serial, aorta.trace.load(path, cache="off", workers=4, parallel_min_bytes=0))


def test_gzip_and_small_files_stay_serial(tmp_path):
    gz = aorta.trace.load(
        DATA / "h100_bert_small.json.gz", cache="off", workers=2, parallel_min_bytes=0
    )
    assert gz.info().stats["parts"] == 1
    small = aorta.trace.load(_plain(tmp_path, "h100_bert_small.json.gz"), cache="off", workers=2)
    assert small.info().stats["parts"] == 1  # below the default threshold


def test_a_cut_inside_a_string_falls_back_to_serial(tmp_path):
    # one event's name spans most of the file and holds the boundary pattern "},{" at ~60%:
    # the cut is sought inside that name, so the ranges cannot decode
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(10)
    ]
    events[5]["name"] = "x" * 6000 + "},{" + "y" * 3500
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps({"traceEvents": events}))
    serial = aorta.trace.load(path, cache="off", workers=1)
    parallel = aorta.trace.load(path, cache="off", workers=2, parallel_min_bytes=0)
    assert parallel.info().stats["parts"] == 1  # the ranges failed to decode: parsed serially
    _assert_same(serial, parallel)


def test_event_ranges_cover_the_array(tmp_path):
    path = _plain(tmp_path, "mi300_rccl_resnet_rank0.json.gz")
    data = path.read_bytes()
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    ranges = event_ranges(path, start, len(data), 4)
    assert len(ranges) == 4 and ranges[0][0] == start and ranges[-1][1] == len(data)
    for (_, hi), (lo, _) in itertools.pairwise(ranges):
        assert data[hi - 1 : hi] == b"}" and data[lo : lo + 1] == b"{"
        assert data[hi:lo].strip() == b","


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers"):
        aorta.trace.load(DATA / "h100_bert_small.json.gz", workers=0)


@pytest.mark.slow
def test_a_worker_process_defaults_to_one_worker():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(available_workers) == 1
