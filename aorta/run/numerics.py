"""The numerics locator of a trial (``check_numerics: true``): arming it, reading what it found.

Arming (:func:`arming_env`) puts the flight recorder's shim folder (``frshim/``) first on the
trial's ``PYTHONPATH`` and ``AORTA_NUMERICS_DIR`` in its environment, so every Python process
of the trial — aorta's worker, the ranks a probe command's ``torchrun`` starts — loads
``frshim/aorta_numerics.py``: a global module forward hook that writes, per rank, the first
module whose output is not finite. An in-process trial is armed in this process
(:func:`armed`). After the trial :func:`collect` reads the findings into the rank's outcome
(:class:`aorta.store.record.NonFinite`), one per rank, the earliest step first. See
docs/memory.md; the cost is in docs/performance.md.

Examples
--------
>>> import tempfile, json, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> sorted(arming_env(d / "numerics", {"PYTHONPATH": "/x"}))
['AORTA_NUMERICS_DIR', 'PYTHONPATH']
>>> _ = (d / "numerics" / "nonfinite.1.77.json").write_text(json.dumps({"rank": 1, "step": 4,
...     "module": "layers.2", "cls": "Linear", "kind": "inf", "inputs_finite": True}))
>>> [(e.rank, e.step, e.module) for e in collect(d / "numerics")]
[(1, 4, 'layers.2')]
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from aorta import envvars
from aorta.run.forensics import SHIM_DIR
from aorta.store.record import NonFinite

__all__ = ["HOOK_FILE", "armed", "arming_env", "collect"]

#: The hook's module in the shim folder (standard library only at import).
HOOK_FILE = SHIM_DIR / "aorta_numerics.py"
#: Findings read per trial at most (one per process).
MAX_FILES = 4096


def arming_env(folder: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that arm a trial whose environment would be ``environ``: the shim first
    on ``PYTHONPATH`` (once), and ``AORTA_NUMERICS_DIR`` = ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = environ.get("PYTHONPATH", "")
    parts = path.split(os.pathsep) if path else []
    env = {envvars.NUMERICS_DIR: str(folder)}
    if str(SHIM_DIR) not in parts:
        env["PYTHONPATH"] = os.pathsep.join([str(SHIM_DIR), *parts])
    return env


def _hook_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aorta_numerics_inproc", HOOK_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def armed(folder: Path, *, rank: int) -> Iterator[None]:
    """The hooks installed in this process while the block runs (an in-process trial)."""
    import torch.nn.modules.module as nn_module

    folder.mkdir(parents=True, exist_ok=True)
    locator = _hook_module().install(nn_module, str(folder), rank)
    try:
        yield
    finally:
        locator.remove()


def collect(folder: Path, *, remove: bool = True) -> list[NonFinite]:
    """The findings the trial's processes wrote into ``folder``: per rank the earliest
    (lowest step, then the file's order), sorted by rank; unreadable files are skipped. The
    folder is removed afterwards unless ``remove`` is False."""
    best: dict[int, NonFinite] = {}
    if folder.is_dir():
        for path in sorted(folder.glob("nonfinite.*.json"))[:MAX_FILES]:
            try:
                data: Any = json.loads(path.read_text("utf-8"))
                event = NonFinite.model_validate(data)
            except (OSError, ValueError):
                continue
            rank = event.rank if event.rank is not None else -1
            held = best.get(rank)
            if held is None or event.step < held.step:
                best[rank] = event
        if remove:
            shutil.rmtree(folder, ignore_errors=True)
    return [best[r] for r in sorted(best)]
