"""The parse cache beside a trace read while another writer replaces it
(aorta/trace/loader/cache.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from aorta.trace.loader._parse import parse_file
from aorta.trace.loader.cache import read_cache, write_cache
from aorta.trace.testing import kineto_json
from tests.threads import switching_often


def test_a_cache_read_while_another_load_replaces_it_is_one_files(tmp_path: Path) -> None:
    # Two loads of one trace with different options (python_functions) each replace the other's
    # cache. A read checked the key in the file it opened first and took the columns from the
    # file it opened second: the other load's columns under this load's names and labels. A
    # switch interval of a microsecond lands a replace between the two opens (some of the
    # 2,000 reads in every run before the read opened the file once).
    ops = [("kernel", f"k{i}", 10 * i, 5) for i in range(1, 40)]
    ops += [("python_function", f"f{i}", 10 * i, 3) for i in range(1, 200)]
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_bytes(kineto_json(ops))
    plain = parse_file(trace, python_functions=False)
    full = parse_file(trace, python_functions=True)
    assert len(plain.columns["ts"]) < len(full.columns["ts"])  # the two caches differ
    stop = threading.Event()
    mixed: list[int] = []
    reads = 0

    def replace() -> None:
        while not stop.is_set():
            write_cache(full, trace, python_functions=True)
            write_cache(plain, trace, python_functions=False)

    def read() -> None:
        nonlocal reads
        for _ in range(2000):
            table = read_cache(trace, python_functions=False)
            reads += 1
            if table is not None and len(table.columns["ts"]) != len(plain.columns["ts"]):
                mixed.append(len(table.columns["ts"]))

    with switching_often():
        writer = threading.Thread(target=replace)
        # One reader: numpy parses each column's header with ast.literal_eval, and CPython
        # 3.11's compile() in two threads at once can raise SystemError ("AST constructor
        # recursion depth mismatch", python/cpython#106905), which is not this race.
        reader = threading.Thread(target=read)
        writer.start()
        reader.start()
        try:
            reader.join()
        finally:
            stop.set()
            writer.join()
    assert reads == 2000  # the reader did not die on the way
    assert mixed == [], f"{len(mixed)} of 2000 reads mixed the two caches"
