"""Many runs on disk: finding run directories under folders, reading each one's trial values
fast, its hosts' snapshots, and the blessed run of a series (``aorta history``).

A *series* is the runs of one recipe over time: the run directories of one
``<ticket>/<workload>/`` folder, the layout :class:`~aorta.store.rundir.RunDir` makes. The
blessed run of a series (``aorta history bless RUN``) is kept beside its runs, in that folder's
:data:`BLESSED` file, so a CI artifact store carries it with the runs.

Reading is the cost of a history over a month of nightly runs: a complete run's
``results.nc`` is read with h5py, only the variables history needs (~1 ms a run, where
opening it as a Dataset costs ~150 ms); a run without one is read from its records.

Examples
--------
>>> import tempfile
>>> from aorta.store.rundir import RunDir
>>> root = tempfile.mkdtemp()
>>> rd = RunDir.create(root, ticket="NIGHTLY", workload="matmul")
>>> _ = rd.update_manifest(status="complete", started_at="2026-01-01T00:00:00Z")
>>> [(r.series, r.status) for r in find_runs([root])]
[('NIGHTLY/matmul', 'complete')]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aorta.errors import UsageError
from aorta.store.rundir import (
    COMBINED_TRACES,
    HOST_ENV,
    HOST_ENV_DIR,
    MANIFEST,
    RESULTS,
    RunDir,
    utc_now,
)

__all__ = [
    "BLESSED",
    "HISTORY_HTML",
    "RunInfo",
    "bless",
    "blessed_run",
    "find_runs",
    "read_results",
    "run_snapshots",
    "series_folders",
]

#: The blessed run of a series, in the series folder (``<ticket>/<workload>/``).
BLESSED = "aorta_blessed.json"
#: The page ``aorta history --html`` writes into its first folder.
HISTORY_HTML = "history.html"
#: Folders a run directory holds that never hold another run (not walked into).
_INSIDE_RUN = {"cells", "report", "combined_traces", HOST_ENV_DIR, "environments"}


@dataclass(frozen=True)
class RunInfo:
    """One run directory as a history sees it: where, which series, when, how it ended."""

    path: Path
    #: ``<ticket>/<workload>`` (the folders above the run directory).
    series: str
    started_at: str
    status: str
    recipe_sha256: str
    manifest: dict[str, Any]


def find_runs(roots: Sequence[str | Path]) -> list[RunInfo]:
    """Every run directory at any depth under ``roots`` (or a root that is one), by series
    and start time.

    Raises
    ------
    UsageError
        A root that does not exist; a manifest that is unreadable is skipped (a history
        over a CI store must not stop at one broken run).
    """
    seen: dict[Path, RunInfo] = {}
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            raise UsageError(f"{root}: no such folder (a folder holding aorta run directories)")
        for folder, dirs, files in os.walk(base):
            if MANIFEST in files:
                dirs[:] = []  # a run directory holds no other run
                info = _info(Path(folder))
                if info is not None:
                    seen.setdefault(info.path, info)
            else:
                dirs[:] = sorted(d for d in dirs if d not in _INSIDE_RUN and not d.startswith("."))
    return sorted(seen.values(), key=lambda r: (r.series, r.started_at, str(r.path)))


def _info(path: Path) -> RunInfo | None:
    try:
        manifest = RunDir.open(path).manifest()
    except UsageError:
        return None
    path = path.absolute()
    ticket = str(manifest.get("ticket") or path.parent.parent.name)
    workload = str(manifest.get("workload") or path.parent.name)
    return RunInfo(
        path=path,
        series=f"{ticket}/{workload}",
        started_at=str(manifest.get("started_at") or ""),
        status=str(manifest.get("status") or ""),
        recipe_sha256=str(manifest.get("recipe_sha256") or ""),
        manifest=manifest,
    )


#: The variables of ``results.nc`` a history reads.
_VARIABLES = ("cell", "step_time_ms", "warmup_steps", "wall_clock_s", "outcome")


def read_results(
    path: str | Path, *, variables: Sequence[str] = _VARIABLES
) -> dict[str, np.ndarray] | None:
    """``variables`` of a run's ``results.nc`` (default those a history needs: ``cell``,
    ``step_time_ms``, ``warmup_steps``, ``wall_clock_s``, ``outcome``; text, such as
    ``status``, as ``str`` arrays), read with h5py; ``None`` when the run has no readable
    ``results.nc`` holding them."""
    import h5py

    nc = Path(path) / RESULTS
    if not nc.is_file():
        return None
    try:
        with h5py.File(nc, "r") as fh:
            out = {name: fh[name][...] for name in variables}
    except (OSError, KeyError, ValueError):
        return None
    for name in [n for n, v in out.items() if v.dtype.kind in "OS"]:
        # Text (cell, outcome, status): a few distinct words per file: decode those, not
        # every element.
        raw = out[name]
        words, inverse = np.unique(raw.astype(bytes), return_inverse=True)
        decoded = np.array([w.decode("utf-8", "replace") for w in words], dtype=str)
        out[name] = decoded[inverse].reshape(raw.shape)
    return out


def run_snapshots(path: str | Path) -> dict[str, dict[str, Any]]:
    """The run's environment snapshots by node: a launch's per-node snapshots
    (``combined_traces/node_<k>/host_env.json``, as ``node_<k>``) when it has them, else
    ``host_env.json`` (the head) and ``host_env/<host>.json`` (the other hosts) by host name;
    unreadable ones are left out."""
    rd = RunDir(path)
    out: dict[str, dict[str, Any]] = {}
    for file in sorted((rd.path / COMBINED_TRACES).glob(f"node_*/{HOST_ENV}")):
        try:
            snap = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(snap, dict):
            out[file.parent.name] = snap
    if out:
        return out
    for file in [rd.host_env_path, *sorted((rd.path / HOST_ENV_DIR).glob("*.json"))]:
        try:
            snap = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(snap, dict):
            name = str(snap.get("host") or (file.stem if file.name != HOST_ENV else "head"))
            out.setdefault(name, snap)
    return out


def _series_folder(run: Path) -> Path:
    return Path(run).absolute().parent


def bless(run: str | Path, *, note: str = "") -> Path:
    """Mark ``run`` as its series' reference (the file :data:`BLESSED` beside it); returns the
    file. ``aorta history --fail-on-regression`` compares the newest run with it too.

    Raises ``UsageError`` when ``run`` is not a run directory.

    >>> import tempfile
    >>> rd = RunDir.create(tempfile.mkdtemp(), ticket="T", workload="w")
    >>> _ = rd.update_manifest(status="complete")
    >>> blessed_run(bless(rd.path).parent) == rd.path
    True
    """
    rd = RunDir.open(run)
    target = _series_folder(rd.path) / BLESSED
    data = {"run": rd.path.name, "blessed_at": utc_now(), "note": note}
    target.write_text(json.dumps(data, indent=1) + "\n")
    return target


def blessed_run(series_folder: str | Path) -> Path | None:
    """The blessed run of the series whose runs live in ``series_folder``, or ``None``."""
    try:
        data = json.loads((Path(series_folder) / BLESSED).read_text())
    except (OSError, ValueError):
        return None
    name = data.get("run") if isinstance(data, dict) else None
    if not isinstance(name, str) or "/" in name or not name:
        return None
    path = Path(series_folder).absolute() / name
    return path if (path / MANIFEST).is_file() else None


def series_folders(runs: Iterable[RunInfo]) -> dict[str, Path]:
    """Each series' folder (the parent of its runs; the newest run's when they differ)."""
    out: dict[str, Path] = {}
    for r in runs:
        out[r.series] = _series_folder(r.path)
    return out
