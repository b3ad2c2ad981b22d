"""Where ``aorta launch`` gathers the nodes' artifacts into one run directory here (not the
sweep's ``collect``): the folders, and the final name. The launch's backends fill them.

A launch stages everything in ``<output>/.aorta-launch-<run id>/``, each node's log, snapshot
and pulled output folder in ``combined_traces/node_<rank>/``. :func:`finalize` names it after
the head's run directory (its files hard-linked to the top level: one matrix; only traces and
logs stay under ``node_0``), else ``<output>/_launch_/<run id>``.

>>> is_artifact("cells/a/trial_0001/trace/rank0.json"), is_artifact("cells/a/trial_0001.json")
(True, False)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import secrets
import shutil
from pathlib import Path

from aorta.errors import AortaError
from aorta.store.rundir import (
    COMBINED_TRACES,
    LAUNCH_LOG,
    LAUNCH_STAGING,
    MANIFEST,
    NO_RUN_DIR,
    SLURM_DIR,
    TRACE_SUFFIX,
)

__all__ = [
    "finalize",
    "is_artifact",
    "new_run_id",
    "node_folder",
    "node_log",
    "slurm_node_dir",
    "staging_dir",
    "staging_run_id",
]


def new_run_id(now: _dt.datetime | None = None) -> str:
    """``2026-11-30T05-12-33-a1b2c3``: UTC time plus 24 random bits — a launch's staging
    folder, its ``_launch_`` run directory and every node's ``AORTA_RUN_ID``.

    >>> new_run_id(_dt.datetime(2026, 1, 2, 3, 4, 5))[:20]
    '2026-01-02T03-04-05-'
    """
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H-%M-%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def staging_dir(output: str | Path, run_id: str) -> Path:
    """Where a launch keeps its results until :func:`finalize` names them."""
    return Path(output) / f"{LAUNCH_STAGING}{run_id}"


def staging_run_id(staging: Path) -> str:
    """The run id of a :func:`staging_dir`."""
    return staging.name.removeprefix(LAUNCH_STAGING)


def node_folder(run_dir: Path, rank: int) -> Path:
    """``<run_dir>/combined_traces/node_<rank>``."""
    return run_dir / COMBINED_TRACES / f"node_{rank}"


def node_log(run_dir: Path, rank: int) -> Path:
    """The node's whole output: ``<run_dir>/combined_traces/node_<rank>/launch.log``."""
    return node_folder(run_dir, rank) / LAUNCH_LOG


def slurm_node_dir(staging: Path, rank: int) -> Path:
    """The Slurm backend's folder of a node's shipped files and task marks in the staging."""
    return staging / SLURM_DIR / f"node_{rank}"


#: Folder names and file suffixes that make a file a per-node artifact (traces and logs).
ARTIFACT_DIRS = frozenset({"trace", "traces", "profiler", "torch_profiler"})
ARTIFACT_SUFFIXES = (".log", ".pt.trace.json", TRACE_SUFFIX, ".trace.json", ".trace.json.gz")


def is_artifact(relative: str | Path) -> bool:
    """True for a trace or log file (by a folder it is in, or by its name)."""
    path = Path(relative)
    return bool(ARTIFACT_DIRS & set(path.parts[:-1])) or path.name.endswith(ARTIFACT_SUFFIXES)


def _keep_only_artifacts(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty
        elif not is_artifact(path.relative_to(folder)):
            path.unlink()


def _unique(path: Path) -> Path:
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.name}-{n}")
        if not candidate.exists():
            return candidate
    raise AortaError(f"cannot find a free name next to {path}")


def _link_tree(src: Path, dst: Path) -> None:
    # Hard links: the head's run directory appears at the top level without a second copy.
    for entry in src.iterdir():
        target = dst / entry.name
        if target.exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, copy_function=_link_or_copy, symlinks=True)
        else:
            _link_or_copy(str(entry), str(target))


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def head_run_dir(staging: Path) -> Path | None:
    """The run directory the head's rank 0 wrote (one with a ``manifest.json``), if any."""
    head = node_folder(staging, 0)
    found = sorted(head.glob(f"*/*/*/{MANIFEST}"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def finalize(staging: Path, output: str | Path, run_id: str) -> Path:
    """Give the staging folder its final name (see the module docstring) and return it."""
    output = Path(output)
    run = head_run_dir(staging)
    if run is not None:
        rel = run.relative_to(node_folder(staging, 0))
        target = _unique(output / rel)
    else:
        target = _unique(output / NO_RUN_DIR / run_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, target)
    if run is not None:
        head_copy = node_folder(target, 0) / rel
        _link_tree(head_copy, target)
        _keep_only_artifacts(head_copy)
    return target
