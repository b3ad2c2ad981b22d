"""Retention: how much of a trial's artifact folder is kept once its outcome is known.

A recipe's ``retain:`` block (upstream's) names a level per outcome — ``on_pass``,
``on_fail``, ``on_error`` — and :func:`retain_trial` applies it to the trial's folder
(``cells/<cell>/trial_NNNN/``) just before the record is written:

``full``
    everything stays (the default).
``log``
    the logs (``*.log``) and a hung trial's evidence (``hang/``: a few kB a rank, what its
    record's ``forensics`` points to) stay; traces, collected files and the rest go.
``summary``
    each log is cut to its last :data:`SUMMARY_TAIL_BYTES` (the lines that say how it ended);
    the evidence stays; everything else goes.
``none``
    the folder goes.

The trial record itself is always kept: it drops the artifacts that are gone and says in
``info["retained"]`` which level applied, so a reader knows why a trace is missing. Folders of
earlier, killed attempts (``trial_NNNN.attempt-K``) are left alone.

Examples
--------
>>> level_for(TrialRecord(cell="a", cell_id="x", trial=0, status="ok", passed=True),
...           {"on_pass": "summary", "on_fail": "full", "on_error": "log"})
'summary'
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aorta.store.record import TrialRecord
from aorta.store.rundir import HANG_DIR, RunDir, atomic_write

__all__ = ["LEVELS", "SUMMARY_TAIL_BYTES", "level_for", "retain_trial"]

#: The retention levels, from keeping most to keeping least.
LEVELS = ("full", "log", "summary", "none")
#: How much of each log a ``summary`` keeps: its last 64 KiB.
SUMMARY_TAIL_BYTES = 64 * 1024
_LOG_SUFFIX = ".log"


def level_for(record: TrialRecord, retain: Any) -> str:
    """The level that applies to ``record``: ``on_pass`` for a passed trial, ``on_fail`` for a
    failed one (a workload failure, a hang or a crash after the work started), ``on_error``
    for the rest. ``retain`` is a
    recipe's :class:`~aorta.recipe.blocks.Retain`, a mapping of the same keys, or ``None``
    (``full``)."""
    if retain is None:
        return "full"
    key = "on_pass" if record.passed else "on_fail" if record.is_failure else "on_error"
    value = retain.get(key) if isinstance(retain, Mapping) else getattr(retain, key)
    if value not in LEVELS:
        raise ValueError(f"retain.{key}: expected one of {', '.join(LEVELS)}, got {value!r}")
    return str(value)


def _tail(path: Path, limit: int) -> None:
    size = path.stat().st_size
    if size <= limit:
        return
    with path.open("rb") as fh:
        fh.seek(size - limit)
        data = fh.read()
    cut = data.find(b"\n")
    if 0 <= cut < len(data) - 1:
        data = data[cut + 1 :]  # start at a line boundary
    note = f"[aorta retain: summary — the first {size - len(data):,} bytes were removed]\n"
    atomic_write(path, note.encode() + data)


def _prune(folder: Path, level: str) -> None:
    if level == "none":
        shutil.rmtree(folder, ignore_errors=True)
        return
    evidence = folder / HANG_DIR
    for root, dirs, files in os.walk(folder, topdown=False):
        if Path(root) == evidence or evidence in Path(root).parents:
            continue  # hang/ and each rank's hang/rank<N>/
        for name in files:
            path = Path(root) / name
            if not name.endswith(_LOG_SUFFIX) or path.is_symlink():
                path.unlink(missing_ok=True)
            elif level == "summary":
                _tail(path, SUMMARY_TAIL_BYTES)
        for name in dirs:
            sub = Path(root) / name
            if sub.is_symlink():
                sub.unlink(missing_ok=True)
            elif sub == evidence or evidence in sub.parents:
                continue
            else:
                with contextlib.suppress(OSError):
                    sub.rmdir()  # only folders left empty


def retain_trial(rd: RunDir, record: TrialRecord, retain: Any) -> TrialRecord:
    """Prune the trial's artifact folder to the level ``retain`` sets for its outcome.

    Returns the record to write: its ``artifacts`` without the files that are gone, and
    ``info["retained"]`` naming the level (unchanged for ``full``).
    """
    level = level_for(record, retain)
    if level == "full":
        return record
    folder = rd.artifact_dir(record.cell, record.trial)
    if folder.is_dir():
        _prune(folder, level)
    kept = {}
    for name, rel in record.artifacts.items():
        path = Path(rel) if Path(rel).is_absolute() else rd.path / rel
        if not path.exists():
            path = folder / rel  # names relative to the trial's own folder
        if path.exists():
            kept[name] = rel
    info = {**record.info, "retained": level}
    return record.model_copy(update={"artifacts": kept, "info": info})
