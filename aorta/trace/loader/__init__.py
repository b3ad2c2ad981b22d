"""``load``: trace files → :class:`~aorta.trace.model.Trace` (through the parse cache)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from aorta.errors import TraceError

from ..classify import Rules
from ..model import RankInfo, Trace
from ._parallel import PARALLEL_MIN_BYTES, available_workers, parse_file_parallel
from ._parse import COMM_COLUMNS, COMM_INT_COLUMNS, RankTable, note_problem, parse_file
from ._scan import BLOCK_SIZE
from .cache import CACHE_SUFFIX, read_cache, write_cache

__all__ = ["TRACE_SUFFIXES", "load", "trace_files", "trace_paths"]

PathLike = str | os.PathLike[str]
CacheMode = Literal["use", "refresh", "off"]
#: The endings of the trace files :func:`trace_files` finds (``rank0.pt.trace.json.gz`` too).
TRACE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz")


def trace_files(directory: PathLike) -> list[Path]:
    """The Kineto trace files (``*.json``, ``*.json.gz``) directly inside ``directory``, sorted.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("rank1.json.gz", "rank0.json", "notes.txt", "rank0.json.aorta-cache"):
    ...     _ = (folder / name).write_bytes(b"")
    >>> [p.name for p in trace_files(folder)]
    ['rank0.json', 'rank1.json.gz']
    """
    directory = Path(directory)
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and not p.name.endswith(CACHE_SUFFIX)
    )


def load(
    source: PathLike | Sequence[PathLike],
    *,
    python_functions: bool = False,
    cache: CacheMode = "use",
    rules: Rules | None = None,
    align: Literal["base_time", "none"] = "base_time",
    block_size: int = BLOCK_SIZE,
    workers: int | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
) -> Trace:
    """Load Kineto Chrome-trace files (``.json`` or ``.json.gz``, CUDA or ROCm) into a :class:`Trace`.

    Parameters
    ----------
    source
        One trace file, a directory of them, or a list of files — one per rank. The rank comes
        from each file's ``distributedInfo.rank``; files without one (or with a rank already
        taken) get their position in the list.
    python_functions
        Keep ``python_function`` events (skipped by default: they are most of a ``with_stack``
        trace and no analysis here uses them).
    cache
        ``"use"`` reads ``<file>.aorta-cache`` when it matches the file's size and mtime and
        writes it otherwise; ``"refresh"`` always parses and rewrites it; ``"off"`` neither
        reads nor writes. A directory that cannot be written is not an error: ``info().cache``
        says ``"not written: <why>"``.
    rules
        Classification rules (default :func:`~aorta.trace.classify.default_rules`).
    align
        ``"base_time"`` shifts each rank by its ``baseTimeNanoseconds`` relative to the
        earliest, so ranks share one clock; ``"none"`` keeps the files' timestamps. See
        :meth:`Trace.align` for alignment on collective end times.
    block_size
        Bytes read from a file at a time while parsing (default 8 MiB; an event larger than
        that grows the buffer). Smaller blocks mean more, smaller chunks; no effect on a cache
        hit.
    workers
        Processes that decode one file at once: a plain (not gzip) file of at least
        ``parallel_min_bytes`` is cut into that many byte ranges at event boundaries, decoded in
        parallel and merged — the same tables as a serial parse. Default: the CPUs this process
        may use (``os.sched_getaffinity``), or 1 in a process started by ``multiprocessing``
        (already one of several); ``1`` parses serially. Files are still loaded one after the
        other.
    parallel_min_bytes
        Smaller files are parsed serially (default 64 MiB: below that, starting workers costs
        more than it saves).

    Returns
    -------
    Trace

    Raises
    ------
    TraceError
        A file is missing, unreadable, truncated or corrupt; the message names the file and
        the byte offset.

    Examples
    --------
    >>> import aorta.trace, pathlib, tempfile
    >>> from aorta.trace.testing import kineto_json
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> path = folder / "rank0.json"
    >>> _ = path.write_bytes(kineto_json([("kernel", "gemm_kernel", 0, 10)]))
    >>> trace = aorta.trace.load(path)
    >>> trace.info().cache, len(trace.gpu_ops)
    ('written', 1)
    >>> aorta.trace.load(path).info().cache
    'hit'
    """
    paths = trace_paths(source)
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    parallel = (available_workers() if workers is None else workers, parallel_min_bytes)
    loaded = [
        _load_one(
            p,
            python_functions=python_functions,
            cache=cache,
            block_size=block_size,
            parallel=parallel,
        )
        for p in paths
    ]
    trace = build_trace(loaded, rules=rules)
    if align == "base_time":
        bases = {
            r: i.base_time_ns
            for r, i in ((r, trace.info(r)) for r in trace.ranks)
            if i.base_time_ns is not None
        }
        if len(bases) > 1 and len(set(bases.values())) > 1:
            first = min(bases.values())
            trace = trace.shifted({r: b - first for r, b in bases.items()})
    return trace


def trace_paths(source: PathLike | Sequence[PathLike]) -> list[Path]:
    """The files ``source`` names, one per rank: a file, a directory's :func:`trace_files`, or
    a list of both, in order.

    Raises
    ------
    TraceError
        Nothing given, a file that does not exist, or a directory without trace files.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("rank1.json.gz", "rank0.json"):
    ...     _ = (folder / name).write_bytes(b"")
    >>> [p.name for p in trace_paths([folder / "rank1.json.gz", folder])]
    ['rank1.json.gz', 'rank0.json', 'rank1.json.gz']
    """
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    if not items:
        raise TraceError("no trace files given")
    paths: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = trace_files(path)
            if not found:
                patterns = " or ".join(f"*{suffix}" for suffix in TRACE_SUFFIXES)
                raise TraceError(f"{path}: no {patterns} trace files in this directory")
            paths.extend(found)
        elif not path.exists():
            raise TraceError(f"{path}: no such file")
        else:
            paths.append(path)
    return paths


def _load_one(
    path: Path,
    *,
    python_functions: bool,
    cache: str,
    block_size: int,
    parallel: tuple[int, int] = (1, 0),
) -> tuple[Path, RankTable, str]:
    if cache == "use":
        table = read_cache(path, python_functions=python_functions)
        if table is not None:
            return path, table, "hit"
    workers, min_bytes = parallel
    table = None
    if workers > 1 and path.stat().st_size >= min_bytes:
        table = parse_file_parallel(
            path, workers=workers, python_functions=python_functions, block_size=block_size
        )
    if table is None:
        table = parse_file(path, python_functions=python_functions, block_size=block_size)
    status = (
        "off" if cache == "off" else write_cache(table, path, python_functions=python_functions)
    )
    return path, table, status


def build_trace(
    loaded: Sequence[tuple[Path | None, RankTable, str]], *, rules: Rules | None = None
) -> Trace:
    """Assemble parsed files into one :class:`Trace`, one rank each (ranks from the headers)."""
    infos: list[RankInfo] = []
    taken: set[int] = set()
    for position, (path, table, status) in enumerate(loaded):
        info = rank_info(table, path=path, cache=status)
        given = "rank" in _dist(table.header) and "rank" not in info.stats.get("problems", {})
        if info.rank in taken or (len(loaded) > 1 and not given):
            info = replace(info, rank=position)
        taken.add(info.rank)
        infos.append(info)
    events, comms = _assemble(
        [(info.rank, table) for info, (_, table, _) in zip(infos, loaded, strict=True)]
    )
    return Trace(events, {info.rank: info for info in infos}, comms, rules=rules)


def _dist(header: dict[str, Any]) -> dict[str, Any]:
    dist = header.get("distributedInfo")
    return dist if isinstance(dist, dict) else {}


def _stack(header: dict[str, Any], table: RankTable) -> str:
    keys = " ".join(header)
    if any(k in keys for k in ("hip_runtime_version", "roctracer_version", "rocprofiler")):
        return "rocm"
    if any(k in keys for k in ("cuda_runtime_version", "cupti_version", "cuda_driver_version")):
        return "cuda"
    if any(c in table.cats for c in ("kernel", "gpu_memcpy", "gpu_memset")):
        names = " ".join(n for n in table.names if n.startswith(("hip", "cuda")))
        return "rocm" if "hip" in names else "cuda" if "cuda" in names else "unknown"
    return "cpu"


def _header_int(
    value: Any, lo: int, hi: int, kind: str, problems: dict[str, dict[str, Any]]
) -> int | None:
    """``value`` if it is an integer in ``[lo, hi)``; else None, noted under ``kind``."""
    if isinstance(value, int) and not isinstance(value, bool) and lo <= value < hi:
        return value
    text = repr(value)
    note_problem(problems, kind, 1, text if len(text) <= 60 else text[:57] + "...")
    return None


def rank_info(table: RankTable, *, path: Path | None = None, cache: str = "off") -> RankInfo:
    """The :class:`RankInfo` of one parsed file.

    A ``distributedInfo.rank`` that is not a 32-bit integer, or a ``baseTimeNanoseconds`` that
    is not an integer in ``[-2^62, 2^62)``, is ignored and noted in ``stats["problems"]``.
    """
    header, dist = table.header, _dist(table.header)
    problems = {kind: dict(entry) for kind, entry in table.stats.get("problems", {}).items()}
    rank = _header_int(dist["rank"], -(2**31), 2**31, "rank", problems) if "rank" in dist else 0
    base = header.get("baseTimeNanoseconds")
    if base is not None:
        base = _header_int(base, -(2**62), 2**62, "base_time", problems)
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for ev in table.meta_events:
        if not isinstance(ev["pid"], int) or not isinstance(ev["value"], str):
            continue
        if ev["name"] == "process_name":
            processes[ev["pid"]] = ev["value"]
        elif ev["name"] == "thread_name" and isinstance(ev["tid"], int):
            threads[(ev["pid"], ev["tid"])] = ev["value"]
    devices = header.get("deviceProperties")
    pg_config = dist.get("pg_config")
    return RankInfo(
        rank=rank if rank is not None else 0,
        path=str(path) if path is not None else None,
        world_size=dist.get("world_size") if isinstance(dist.get("world_size"), int) else None,
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        pg_config=tuple(pg_config) if isinstance(pg_config, list) else (),
        device_properties=tuple(devices) if isinstance(devices, list) else (),
        versions={
            k: v for k, v in header.items() if "version" in k.lower() and k != "schemaVersion"
        }
        | ({"nccl_version": dist["nccl_version"]} if "nccl_version" in dist else {}),
        stack=_stack(header, table),  # type: ignore[arg-type]
        base_time_ns=base,
        processes=processes,
        threads=threads,
        labels=tuple(table.labels),
        header=header,
        stats=table.stats | ({"problems": problems} if problems else {}),
        cache=cache,
    )


def _categorical(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(
        codes, categories=pd.Index(categories, dtype=object), validate=False
    )


def _assemble(tables: Sequence[tuple[int, RankTable]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Concatenate the ranks' columns, unifying the dictionaries of the categorical columns."""
    dictionaries: dict[str, dict[str, int]] = {
        "cat": {},
        "name": {},
        "input_dims": {},
        "input_type": {},
        "concrete": {},
        "input_strides": {},
    }
    source = {
        "cat": "cats",
        "name": "names",
        "input_dims": "input_dims",
        "input_type": "input_types",
        "concrete": "concrete",
        "input_strides": "input_strides",
    }
    parts: dict[str, list[np.ndarray]] = {}
    comm_frames: list[pd.DataFrame] = []
    offset = 0
    for rank, table in tables:
        for column, values in table.columns.items():
            if column in dictionaries:
                index = dictionaries[column]
                remap = np.array(
                    [index.setdefault(v, len(index)) for v in getattr(table, source[column])]
                    + [-1],
                    dtype=np.int32,
                )
                values = remap[values]  # code -1 (absent) picks the trailing -1
            parts.setdefault(column, []).append(values)
        parts.setdefault("rank", []).append(np.full(table.n, rank, dtype=np.int32))
        if table.comms:
            frame = pd.DataFrame(table.comms)
            frame["row"] += offset
            comm_frames.append(frame)
        offset += table.n
    data: dict[str, Any] = {}
    for column in (
        "rank",
        "cat",
        "name",
        "ts",
        "dur",
        "pid",
        "tid",
        "correlation",
        "external_id",
        "stream",
        "device",
        "input_dims",
        "input_type",
        "concrete",
        "input_strides",
        "seq",
    ):
        values = parts[column][0] if len(parts[column]) == 1 else np.concatenate(parts[column])
        data[column] = (
            _categorical(values, list(dictionaries[column])) if column in dictionaries else values
        )
    events = pd.DataFrame(data, copy=False)
    if comm_frames:
        comms = pd.concat(comm_frames, ignore_index=True)[list(COMM_COLUMNS)]
    else:
        comms = pd.DataFrame(
            {
                c: pd.Series(dtype=np.int64 if c in COMM_INT_COLUMNS else object)
                for c in COMM_COLUMNS
            }
        )
    comms["row"] = comms["row"].astype(np.int64)
    return events, comms
