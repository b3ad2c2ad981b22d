"""TraceLens perf reports (the CSV directory of ``--output_csvs_dir``) as aorta's tables.

TraceLens (AMD-AGI/TraceLens, ``TraceLens_generate_perf_report_pytorch``) writes one CSV per
sheet. :func:`read_tracelens` reads the four that aorta has tables for, into the shapes of
:class:`~aorta.trace.Trace`'s own tables, so the per-rank metrics
(:func:`~aorta.trace.metrics.table_metrics`) and a sweep's Dataset
(:func:`aorta.load_tracelens`) come out the same as from a trace:

==================  ==========================================================================
sheet (file)        columns relied on (TraceLens' names, ``docs/perf_report_columns.md``)
==================  ==========================================================================
``gpu_timeline``    ``type``, ``time ms`` (``percent`` recomputed when absent); split idle rows
                    (``micro_idle_time`` + ``macro_idle_time``) are summed into ``idle_time``
``ops_summary``     ``name``, ``Count``, ``total_direct_kernel_time_sum`` (µs)
``GEMM``            ``name``, ``param: M``/``N``/``K`` (``param: B`` for batched ops),
                    ``param: dtype_A_B``, ``GFLOPS_first`` (per call), ``Kernel Time (µs)_sum``,
                    ``name_count`` (calls; ``operation_count`` in some versions)
``coll_analysis``   ``Collective name``, ``dtype``, ``In msg nelems``, ``Out msg nelems``,
                    ``Group size``, ``dur_sum`` (µs), ``operation_count``, ``Process Group
                    Name``; ``In``/``Out msg size (MB)_first`` (MiB) when the dtype is unknown
==================  ==========================================================================

Files are ``<sheet>.csv`` or ``<prefix><sep><sheet>.csv`` (sep ``.``, ``_`` or ``-``), e.g.
``rank0.gpu_timeline.csv``. A sheet that is absent is ``None`` and listed in ``missing``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from aorta.errors import TraceError

from .breakdown import BREAKDOWN_TYPES
from .collectives import bus_factor, canonical_collective, dtype_size
from .metrics import table_metrics

__all__ = ["SHEETS", "TraceLensReport", "read_tracelens"]

#: The TraceLens sheets read, by file stem.
SHEETS: tuple[str, ...] = ("gpu_timeline", "ops_summary", "GEMM", "coll_analysis")
_MIB = 1024 * 1024


@dataclass(frozen=True)
class TraceLensReport:
    """One TraceLens perf report (one rank), as aorta's tables; ``None`` for absent sheets.

    ``gpu_timeline``: the columns of :meth:`~aorta.trace.Trace.gpu_timeline` (``type``,
    ``time ms``, ``percent``); ``ops``: ``name``, ``count``, ``gpu_total``, ``gpu_mean`` (µs);
    ``gemms``: the columns of ``gemms(by="shape")`` (``kernel``/``family`` empty);
    ``collectives``: those of :meth:`~aorta.trace.Trace.collectives` that TraceLens has, one
    row per (collective, size) group with its ``count`` and the mean ``dur`` per call.
    """

    path: Path
    gpu_timeline: pd.DataFrame | None = None
    ops: pd.DataFrame | None = None
    gemms: pd.DataFrame | None = None
    collectives: pd.DataFrame | None = None
    missing: tuple[str, ...] = field(default=())

    def metrics(self) -> pd.DataFrame:
        """The per-rank metrics of :func:`~aorta.trace.metrics.table_metrics` (one row, rank 0,
        ``source`` ``tracelens``); NaN where a sheet is missing."""
        timeline = self.gpu_timeline
        if timeline is None:
            timeline = pd.DataFrame({"type": pd.Series(dtype=object), "time ms": []})
        timeline = timeline.assign(rank=0, source="tracelens")
        frame = table_metrics(timeline, gemms=self.gemms, collectives=self.collectives, ranks=[0])
        frame["source"] = "tracelens"
        return frame


def _sheet_files(folder: Path, prefix: str | None) -> dict[str, Path]:
    """The CSV of each sheet; a ``ValueError`` naming the prefixes when there are several."""
    found: dict[str, dict[str, Path]] = {}
    pattern = re.compile(r"^(?P<prefix>.*?)[._-]?(?P<sheet>" + "|".join(SHEETS) + r")\.csv$")
    for path in sorted(folder.glob("*.csv")):
        match = pattern.match(path.name)
        if match:
            found.setdefault(match.group("prefix"), {})[match.group("sheet")] = path
    if prefix is not None:
        if prefix not in found:
            raise TraceError(
                f"{folder}: no TraceLens CSVs with prefix {prefix!r} (found: {sorted(found)})"
            )
        return found[prefix]
    if len(found) > 1:
        names = ", ".join(repr(p) for p in sorted(found))
        raise TraceError(
            f"{folder}: TraceLens CSVs of several reports (prefixes {names}); say which with prefix="
        )
    return next(iter(found.values()), {})


def _timeline(frame: pd.DataFrame) -> pd.DataFrame:
    times = dict(zip(frame["type"].astype(str), frame["time ms"].astype(float), strict=True))
    if "idle_time" not in times and {"micro_idle_time", "macro_idle_time"} & set(times):
        times["idle_time"] = times.get("micro_idle_time", 0.0) + times.get("macro_idle_time", 0.0)
    total = times.get("total_time", math.nan)
    rows = [t for t in BREAKDOWN_TYPES if t in times]
    return pd.DataFrame(
        {
            "type": rows,
            "time ms": [times[t] for t in rows],
            "percent": [100.0 * times[t] / total if total else math.nan for t in rows],
        }
    )


def _column(frame: pd.DataFrame, *names: str, default: Any = math.nan) -> pd.Series:
    for name in names:
        if name in frame:
            return frame[name]
    return pd.Series(default, index=frame.index)


def _ops(frame: pd.DataFrame) -> pd.DataFrame:
    count = _column(frame, "Count", "count").astype(float)
    total = _column(frame, "total_direct_kernel_time_sum").astype(float)
    return pd.DataFrame(
        {"name": frame["name"].astype(str), "count": count, "gpu_total": total}
    ).assign(gpu_mean=lambda f: f["gpu_total"] / f["count"])


def _gemms(frame: pd.DataFrame) -> pd.DataFrame:
    count = _column(frame, "name_count", "operation_count", "count", default=1).astype(float)
    flops = _column(frame, "GFLOPS_first", "GFLOPS").astype(float) * 1e9
    gpu_time = _column(frame, "Kernel Time (µs)_sum", "Kernel Time (us)_sum").astype(float)
    out = pd.DataFrame(
        {
            "op": frame["name"].astype(str),
            "batch": _column(frame, "param: B", default=1),
            "M": _column(frame, "param: M"),
            "N": _column(frame, "param: N"),
            "K": _column(frame, "param: K"),
            "dtype": _column(frame, "param: dtype_A_B", default="").astype(str),
            "count": count,
            "flops": flops,
            "gpu_time": gpu_time,
        }
    )
    out["tflops"] = out["flops"] * out["count"] / (out["gpu_time"] * 1e-6) / 1e12
    out["kernel"], out["family"] = "", ""
    out.attrs["units"] = {"gpu_time": "us", "tflops": "TFLOP/s"}
    return out


def _collectives(frame: pd.DataFrame) -> pd.DataFrame:
    count = _column(frame, "operation_count", "count", default=1).astype(float)
    in_n = _column(frame, "In msg nelems").astype(float)
    out_n = _column(frame, "Out msg nelems").astype(float)
    dtype = _column(frame, "dtype", default="").fillna("").astype(str)
    itemsize = np.array([dtype_size(d) if d else math.nan for d in dtype], dtype=float)
    mib = np.fmax(
        _column(frame, "In msg size (MB)_first", "In msg size (MB)").astype(float),
        _column(frame, "Out msg size (MB)_first", "Out msg size (MB)").astype(float),
    )
    nbytes = np.where(np.isfinite(itemsize), np.fmax(in_n, out_n) * itemsize, mib * _MIB)
    out = pd.DataFrame(
        {
            "rank": 0,
            "pg": _column(frame, "Process Group Name", default="").fillna("").astype(str),
            "collective": [canonical_collective(str(c)) for c in frame["Collective name"]],
            "dtype": dtype,
            "in_nelems": in_n,
            "out_nelems": out_n,
            "group_size": _column(frame, "Group size").astype(float),
            "bytes": nbytes,
            "count": count,
            "dur": _column(frame, "dur_sum").astype(float) / count,
        }
    )
    seconds = out["dur"] / 1e6
    out["algbw"] = out["bytes"] / seconds.where(seconds > 0) / 1e9
    out["busbw"] = out["algbw"] * [
        bus_factor(c, n) for c, n in zip(out["collective"], out["group_size"], strict=True)
    ]
    out.attrs["units"] = {
        "bytes": "B",
        "dur": "us",
        "algbw": "GB/s (1e9 B/s)",
        "busbw": "GB/s (1e9 B/s)",
    }
    return out


_READERS = {
    "gpu_timeline": _timeline,
    "ops_summary": _ops,
    "GEMM": _gemms,
    "coll_analysis": _collectives,
}
_FIELDS = {
    "gpu_timeline": "gpu_timeline",
    "ops_summary": "ops",
    "GEMM": "gemms",
    "coll_analysis": "collectives",
}


def read_tracelens(directory: str | Path, *, prefix: str | None = None) -> TraceLensReport:
    """Read a TraceLens perf-report CSV directory into aorta's tables.

    Parameters
    ----------
    directory
        The folder TraceLens wrote with ``--output_csvs_dir`` (one report: one rank).
    prefix
        Which report, when the folder holds several (``rank0`` for ``rank0.gpu_timeline.csv``).

    Returns
    -------
    TraceLensReport
        The tables; ``report.metrics()`` gives the per-rank numbers a Dataset keeps.

    Raises
    ------
    TraceError
        No such folder, no TraceLens CSV in it, several reports and no ``prefix``, or a sheet
        without the columns listed in the module docstring (the message names the file).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "gpu_timeline.csv").write_text(
    ...     "type,time ms,percent\\ncomputation_time,6,60\\nexposed_comm_time,3,30\\n"
    ...     "exposed_memcpy_time,0,0\\nbusy_time,9,90\\nidle_time,1,10\\ntotal_time,10,100\\n")
    >>> report = read_tracelens(folder)
    >>> report.missing
    ('ops_summary', 'GEMM', 'coll_analysis')
    >>> report.metrics()[["source", "computation_ms", "exposed_comm_ms", "idle_ms"]].to_dict("records")
    [{'source': 'tracelens', 'computation_ms': 6.0, 'exposed_comm_ms': 3.0, 'idle_ms': 1.0}]
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise TraceError(f"{folder}: no such directory")
    files = _sheet_files(folder, prefix)
    if not files:
        raise TraceError(f"{folder}: no TraceLens CSVs ({', '.join(f'{s}.csv' for s in SHEETS)})")
    tables: dict[str, Any] = {}
    for sheet, path in files.items():
        try:
            tables[_FIELDS[sheet]] = _READERS[sheet](pd.read_csv(path))
        except (KeyError, ValueError, pd.errors.ParserError) as exc:
            raise TraceError(
                f"{path}: not a TraceLens {sheet} sheet ({type(exc).__name__}: {exc})"
            ) from None
    missing = tuple(s for s in SHEETS if s not in files)
    return TraceLensReport(path=folder, missing=missing, **tables)
