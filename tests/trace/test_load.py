"""Loading Kineto traces: every shipped trace, gzip, cache, corruption, odd bytes, chunking."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time

import numpy as np
import pytest

import aorta.trace
from aorta.errors import TraceError
from aorta.trace.loader.cache import cache_path
from aorta.trace.testing import kineto_events, kineto_json
from tests.trace_helpers import ALL_TRACES, DATA, shipped

EXPECTED = {
    # file: (stack, rank, GPU ops)
    "a100_nccl_sampled_rank-0.json.gz": ("cuda", 0, 1204),
    "a100_nccl_sampled_rank-1.json.gz": ("cuda", 1, 1154),
    "cpu_only_gloo.pt.trace.json.gz": ("cpu", 34, 0),
    "cpu_perf_ops.pt.trace.json.gz": ("cpu", 0, 0),
    "h100_bert_small.json.gz": ("cuda", 0, 61),
    "mi250_rocm6_minitoy.json.gz": ("rocm", 0, 16),
    "mi300_bert_small.json.gz": ("rocm", 0, 61),
    "mi300_rccl_resnet_rank0.json.gz": ("rocm", 0, 3653),
    "mi300_normalization_layers.json.gz": ("rocm", 0, 173),
    "mi350x_rocm7_single.pt.trace.json": ("rocm", 0, 20),
}


@pytest.mark.parametrize("name", ALL_TRACES)
def test_every_shipped_trace_loads(name):
    trace = shipped(name)
    stack, rank, gpu_ops = EXPECTED[name]
    info = trace.info()
    assert (info.stack, info.rank, len(trace.gpu_ops)) == (stack, rank, gpu_ops)
    raw = json.loads((gzip.open if name.endswith(".gz") else open)(DATA / name, "rb").read())
    complete = [
        e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "python_function"
    ]
    assert len(trace.events) == len(complete)
    assert info.header == {k: v for k, v in raw.items() if k != "traceEvents"}
    assert trace.events["ts"].dtype == np.int64 and trace.events["name"].dtype == "category"


def test_metadata_of_a_distributed_rocm_trace():
    info = shipped("mi300_rccl_resnet_rank0.json.gz").info()
    assert info.world_size == 8 and info.backend == "nccl"
    assert info.pg_config[0]["ranks"] == list(range(8))
    assert info.device_properties[0]["name"] == "AMD Instinct MI300X"
    assert (
        info.versions["hip_runtime_version"] == 60443483
        and info.versions["nccl_version"] == "2.22.3"
    )
    assert info.base_time_ns == 1767189312000000000
    assert info.threads[(542, 639)] == "thread 639 (pt_autograd_0)"
    assert "Spans" in info.labels  # the string pid of the profiler span, kept as a label


def test_python_functions_are_skipped_unless_asked(tmp_path):
    name = "h100_bert_small.json.gz"
    default = shipped(name)
    with_py = aorta.trace.load(DATA / name, cache="off", python_functions=True)
    assert "python_function" not in default.categories("cat")
    assert len(with_py.events) - len(default.events) == 1385
    assert default.info().stats["python_functions_skipped"] == 1385


def test_gzip_and_plain_give_the_same_columns(tmp_path):
    plain = DATA / "mi350x_rocm7_single.pt.trace.json"
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = aorta.trace.load(plain, cache="off"), aorta.trace.load(packed, cache="off")
    assert b.info().stats["gzipped"] and not a.info().stats["gzipped"]
    assert a.events.equals(b.events)


def test_tiny_blocks_exercise_every_chunk_boundary():
    name = "mi300_rccl_resnet_rank0.json.gz"
    reference = shipped(name)
    # smaller than some events: the buffer must grow
    small = aorta.trace.load(DATA / name, cache="off", block_size=2048)
    assert small.info().stats["chunks"] > 1000
    assert small.events.equals(reference.events)
    assert small.comm_args.equals(reference.comm_args)


def test_timestamps_become_exact_integer_nanoseconds():
    ops = [("kernel", "k", 1682725898236567, 30669.0), ("kernel", "k", 1419247333430.849, 3.136)]
    trace = aorta.trace.testing.synthetic_trace(ops)
    gpu = trace.gpu_ops
    assert sorted(gpu.ts.tolist()) == [1419247333430849, 1682725898236567000]
    assert sorted((gpu.end - gpu.ts).tolist()) == [3136, 30669000]


def test_cache_is_written_then_hit_and_reloads_fast(tmp_path):
    path = tmp_path / "rank0.json.gz"
    shutil.copy(DATA / "mi300_rccl_resnet_rank0.json.gz", path)
    first = aorta.trace.load(path)
    assert first.info().cache == "written" and cache_path(path).exists()
    start = time.perf_counter()
    second = aorta.trace.load(path)
    elapsed = time.perf_counter() - start
    assert second.info().cache == "hit" and elapsed < 1.0
    assert second.events.equals(first.events) and second.comm_args.equals(first.comm_args)
    assert second.info().header == first.info().header
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # the trace changed: reparse
    assert aorta.trace.load(path).info().cache == "written"
    assert aorta.trace.load(path, cache="refresh").info().cache == "written"
    assert aorta.trace.load(path, cache="off").info().cache == "off"


def test_an_unwritable_cache_is_recorded_not_fatal(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(kineto_json([("kernel", "k", 0, 10)]))
    cache_path(path).mkdir()  # os.replace cannot put a file there
    trace = aorta.trace.load(path)
    assert trace.info().cache.startswith("not written")
    assert any("parse cache not written" in note for note in trace.diagnostics)
    assert len(trace.gpu_ops) == 1


def test_a_stale_or_foreign_cache_is_ignored(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(kineto_json([("kernel", "k", 0, 10)]))
    cache_path(path).write_bytes(b"not a zip")
    assert aorta.trace.load(path).info().cache == "written"
    assert (
        aorta.trace.load(path, python_functions=True).info().cache == "written"
    )  # other options: other key


def _write(tmp_path, data: bytes, name: str = "t.json"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_truncated_file_names_the_file_and_byte(tmp_path):
    data = kineto_json([("kernel", f"k{i}", i * 10, 5) for i in range(50)])
    path = _write(tmp_path, data[: len(data) // 2])
    with pytest.raises(
        TraceError,
        match=rf"{path}: truncated: traceEvents array not closed at byte {len(data) // 2}",
    ):
        aorta.trace.load(path, cache="off")


@pytest.mark.parametrize(
    ("good", "bad", "culprit"),
    [
        (b'"name":"k20"', b'"name":"k20"x', b"x"),  # a stray byte between tokens
        (b'"name":"k20"', b'"name":k20"', b"k"),  # a lost quote turns the rest inside out
    ],
)
def test_corrupt_event_names_the_byte_offset(tmp_path, good, bad, culprit):
    data = kineto_json([("kernel", f"k{i}", i * 10, 5) for i in range(50)])
    path = _write(tmp_path, data.replace(good, bad))
    with pytest.raises(TraceError) as info:
        aorta.trace.load(path, cache="off")
    message = str(info.value)
    assert message.startswith(f"{path}: malformed JSON")
    offset = int(message.rsplit("byte ", 1)[1])
    assert path.read_bytes()[offset : offset + 1] == culprit


def test_truncated_gzip_is_reported(tmp_path):
    packed = gzip.compress(kineto_json([("kernel", f"k{i}", i, 1) for i in range(2000)]))
    path = _write(tmp_path, packed[: len(packed) - 40], "t.json.gz")
    with pytest.raises(
        TraceError, match=r"t\.json\.gz: truncated gzip stream at compressed byte \d+"
    ):
        aorta.trace.load(path, cache="off")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no traceEvents array"),
        (b'{"schemaVersion": 1}', "no traceEvents array"),
        (b'{"traceEvents": {"a": 1}}', "traceEvents is not an array"),
        (b"hello", "not a JSON object"),
        (b'{"traceEvents": [{"ph": "X"}]', "truncated after the traceEvents array"),
    ],
)
def test_not_a_trace(tmp_path, data, message):
    with pytest.raises(TraceError, match=message):
        aorta.trace.load(_write(tmp_path, data), cache="off")


def test_missing_file():
    with pytest.raises(TraceError, match="no such file"):
        aorta.trace.load("/nonexistent/trace.json")


def test_control_characters_inside_strings_are_tolerated(tmp_path):
    events = kineto_events([("kernel", "good", 0, 10), ("cpu_op", "ok", 0, 5)])
    text = json.dumps({"traceEvents": events, "traceName": "x\u0001y"})
    text = text.replace('"good"', '"go\u0001o\nd\td"').replace("\\u0001", "\u0001")
    path = _write(tmp_path, text.encode())
    trace = aorta.trace.load(path, cache="off")
    assert trace.categories("name")[trace.gpu_ops.name[0]] == "go o d d"
    assert trace.info().stats["sanitized_bytes"] == 3
    assert trace.info().header["traceName"] == "x y"


def test_invalid_utf8_is_replaced(tmp_path):
    data = kineto_json([("kernel", "caf\u00e9", 0, 10)]).replace("é".encode(), b"\xff")
    path = _write(tmp_path, data)
    trace = aorta.trace.load(path, cache="off")
    assert trace.categories("name")[trace.gpu_ops.name[0]] == "caf\ufffd"
    # Said with the file and the byte offset of the first bad byte, serial or parallel.
    bad = data.index(b"\xff")
    note = (
        f"rank 0 ({path}): 1 event(s) with invalid UTF-8 in a value read, replaced by U+FFFD; "
        f"first: byte {bad}"
    )
    assert note in trace.diagnostics
    for kwargs in ({"block_size": 64}, {"workers": 2, "parallel_min_bytes": 1, "block_size": 64}):
        assert note in aorta.trace.load(path, cache="off", **kwargs).diagnostics


def test_invalid_utf8_in_a_key_no_decode_reads_is_the_same_whatever_the_chunk(tmp_path):
    """A key the typed decode skips may hold invalid UTF-8 unchecked; a neighbour in the same
    chunk with a value of an unexpected type used to send the whole chunk through a decode that
    checks every key, so whether the bytes were "replaced" depended on the chunking (the serial
    parse said so, the parallel one did not). Now each event decodes alone there."""
    first = b'{"ts":0.0,"name":{"":null,"x":{"":1e9,"y":1e16,"0":null}},"cat":[],"ph":"X","dur":1,"pid":0}'
    data = (
        b'{"traceEvents":['
        + first
        + b',\n{"cat":"kernel","ph":"i","name":"k","ts":0.0,"du\xffr":0.0},\n{}]}'
    )
    path = _write(tmp_path, data)
    seen = set()
    for kwargs in (
        {},
        {"block_size": 64},
        {"block_size": 512},
        {"workers": 2, "parallel_min_bytes": 1, "block_size": 64},
    ):
        trace = aorta.trace.load(path, cache="off", **kwargs)
        seen.add(repr((trace.events.to_dict("list"), trace.diagnostics)))
    assert len(seen) == 1
    assert "UTF-8" not in next(iter(seen))  # nothing read was replaced


def test_tricky_strings_do_not_confuse_the_scanner(tmp_path):
    names = ['a"},{"b', "c\\", 'x\\"}]', "{lambda()#1}::operator()", '"', "\\\\"]
    ops = [("kernel", n, i * 10, 5) for i, n in enumerate(names * 40)]
    trace = aorta.trace.load(_write(tmp_path, kineto_json(ops)), cache="off", block_size=256)
    got = [trace.categories("name")[c] for c in trace.gpu_ops.name]
    assert got == names * 40
    assert trace.info().stats["chunks"] > 1  # the small blocks were used


def test_keys_after_the_array_and_bare_arrays(tmp_path):
    events = kineto_events([("kernel", "k", 0, 10)])
    after = json.dumps(
        {"traceEvents": events, "distributedInfo": {"rank": 3, "pg_config": [{"a": 1}, {"b": 2}]}}
    )
    assert aorta.trace.load(_write(tmp_path, after.encode()), cache="off").ranks == [3]
    bare = aorta.trace.load(_write(tmp_path, json.dumps(events).encode(), "bare.json"), cache="off")
    assert len(bare.gpu_ops) == 1 and bare.info().header == {}


def test_a_byte_order_mark_is_skipped(tmp_path):
    data = b"\xef\xbb\xbf" + kineto_json(
        [("kernel", "k", 0, 10)], header={"distributedInfo": {"rank": 2}}
    )
    assert aorta.trace.load(_write(tmp_path, data), cache="off").ranks == [2]


def test_odd_value_types_fall_back_to_lenient_decoding(tmp_path):
    events = kineto_events([("kernel", "k", 0, 10), ("cpu_op", "op", 0, 5, {"External id": 3})])
    by_name = {e["name"]: e for e in events}
    by_name["k"]["args"]["device"] = "cuda:0"  # not an int
    by_name["op"]["args"]["External id"] = None
    events.append(42)  # not an event at all
    trace = aorta.trace.load(
        _write(tmp_path, json.dumps({"traceEvents": events}).encode()), cache="off"
    )
    assert len(trace.events) == 3
    assert trace.column("device")[trace.gpu_ops.row[0]] == -1
    assert trace.gpu_ops.device[0] == 0  # the pid stands in for the device
    assert (trace.column("external_id") == -1).all()


def test_several_files_become_ranks(tmp_path):
    for r, base in ((0, 1_000_000_000), (1, 1_000_005_000)):
        header = {"distributedInfo": {"rank": r, "world_size": 2}, "baseTimeNanoseconds": base}
        _write(tmp_path, kineto_json([("kernel", "k", 10, 5)], header=header), f"rank{r}.json")
    trace = aorta.trace.load(tmp_path, cache="off")  # a directory
    assert trace.ranks == [0, 1]
    starts = {r: int(trace.gpu_ops.ts[trace.gpu_ops.rank == r][0]) for r in (0, 1)}
    assert starts[1] - starts[0] == 5_000  # base times put both on one clock
    assert trace.info(1).offset_ns == 5_000
    unaligned = aorta.trace.load(tmp_path, cache="off", align="none")
    assert unaligned.gpu_ops.ts.tolist() == [10_000, 10_000]


def test_files_without_a_rank_get_their_position(tmp_path):
    paths = [_write(tmp_path, kineto_json([("kernel", "k", 0, 1)]), f"{i}.json") for i in range(3)]
    assert aorta.trace.load(paths, cache="off").ranks == [0, 1, 2]
    with pytest.raises(ValueError, match="say which one"):
        aorta.trace.load(paths, cache="off").info()
