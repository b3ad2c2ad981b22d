"""The matrix as data: trial records → :class:`xarray.Dataset`, and netCDF I/O (``results.nc``).

Reading run directories is :mod:`aorta.matrix.load`; this module reads no run directory.

One Dataset per run, dims ``cell`` × ``trial`` (× ``step`` for the per-step series,
× ``metric`` for the workload's metrics, × ``info_key`` for its text facts), in the plan's cell
order. Trials that have no record (an interrupted run, a cell with fewer trials) are padded:
``status`` ``missing``, ``NaN`` numbers, ``""`` text.

========================  ==========================  ==========================================
variable                  dims                        meaning
========================  ==========================  ==========================================
``step_time_ms``          cell, trial, step           every executed step, warm-up included;
                                                      NaN past ``n_steps``
``n_steps``               cell, trial                 recorded steps
``warmup_steps``          cell, trial                 leading warm-up steps
``wall_clock_s``          cell, trial                 the engine's clock around the whole trial
``elapsed_s``             cell, trial                 the workload's own clock of its main work
``executed_iterations``   cell, trial                 iterations the workload ran (-1: unknown)
``status``                cell, trial                 ``ok``, ``workload_failed``, …, ``missing``
``outcome``               cell, trial                 ``passed``, ``failed``, ``errored``,
                                                      ``did_not_run`` or ``missing``
``failure_kind``          cell, trial                 ``workload``, ``hang``, ``crash``; ``""``
``run_order``             cell, trial                 position in the run's execution order
                                                      (-1: not recorded)
``passed``                cell, trial                 the workload's verdict
``error``                 cell, trial                 why the trial did not end ``ok``
``signature``             cell, trial                 the failure signature matched, ``""`` if none
``hang_kind``             cell, trial                 a hung trial's incident (its record's
                                                      ``forensics``, :class:`~aorta.hang.HangReport`):
                                                      its kind (``missing``, ``device``…); ``""``
                                                      where nothing was captured
``hang_culprit_ranks``    cell, trial, culprit        its culprit ranks, -1 past the last
``hang_culprit_hosts``    cell, trial, culprit        their hosts, ``""`` where unknown
``hang_device_line``      cell, trial, culprit        the device line of its own logs the
                                                      summary cites for that culprit (a
                                                      ``device`` one: CUDA/HIP error, Xid,
                                                      amdgpu; :func:`aorta.hang.render.cited_lines`),
                                                      ``""`` where it cites none
``hang_op``               cell, trial                 the collective the others wait in, ``""``
``hang_seq``              cell, trial                 its sequence number (-1: none)
``hang_group``            cell, trial                 its process group (``default_pg, ranks 0-3``)
``hang_frame``            cell, trial                 where the first culprit is (``train.py:41
                                                      in step``), ``""`` if unknown
``hang_summary``          cell, trial                 the incident in one line
``hang_node_hosts``       cell, trial, node           each node's host that gave GPU evidence
                                                      (``gpu_<host>.txt``), ``""`` past the last
``hang_node_line``        cell, trial, node           that node's latest device line, ``""``
                                                      where it had none
``hang_node_cited``       cell, trial, node           whether the summary cites that line (a
                                                      ``device`` culprit on that node:
                                                      :func:`aorta.hang.render.cited_nodes`)
``oom``                   cell, trial                 each rank's out-of-memory figures, as JSON
                                                      (``world_size``, ``events``); ``""`` if none
``numerics``              cell, trial                 each rank's first non-finite module output,
                                                      as JSON (as ``oom``); ``""`` if none
``seed``                  cell, trial                 the trial's seed (-1 where missing)
``metrics``               cell, trial, metric         workload metrics (NaN where absent)
``info``                  cell, trial, info_key       workload facts as text
``compute_ms``,           cell, trial, rank           each rank's own split of its mean step
``comm_wait_ms``                                      (:data:`RANK_METRICS`; only when a record
                                                      holds several ranks that report it)
========================  ==========================  ==========================================

Coordinates: ``mitigations`` (``+``-joined), ``environment``, ``cell_id``,
``planned_trials`` per cell; the overlay as ``env_value(cell, env_var)`` (``""`` where
``env_set`` is False); one ``config_<key>`` per ``workload_config`` key whose value differs
between cells (the keys all cells share are in ``attrs["workload_config"]``).

The hang variables are the report's fields a reader compares across trials (the per-group
detail and the culprits' stacks stay in the records). Culprits are a dimension of their own,
``culprit`` (as long as the most culprits of any trial), padded with -1: a numeric array reads
as ranks in xarray (``(ds.hang_culprit_ranks == 5).any("culprit")``) and round-trips netCDF,
which a list per trial would not, and a text of joined ranks would have to be parsed again.
A culprit's own device line is over ``culprit`` too, not one per trial: the summary cites
one line per ``device`` group, and a trial with two such groups (two culprits, each its own
fault) cites two; by culprit, each line stays beside the rank whose logs said it.
The nodes' GPU evidence is a dimension ``node`` the same way (one entry per host, padded
``""``): its device lines stay in the records, its latest here, the one a summary cites.

``attrs`` hold the run: the manifest's fields, ``baseline`` and ``threshold`` (from the
recipe); dicts, lists and booleans as JSON text, null fields left out. Text is stored as
object arrays of ``str``; a NUL character, which netCDF cannot store, is replaced by ``␀``.

Examples
--------
>>> from aorta.store.record import TrialRecord
>>> cells = [{"name": "base", "mitigations": ["none"], "trials": 2},
...          {"name": "x", "mitigations": ["xnack"], "env": {"HSA_XNACK": "1"}, "trials": 2}]
>>> recs = [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True,
...                     step_times_ms=[5.0, 1.0 + t, 2.0 + t], warmup_steps=1)
...         for c in ("base", "x") for t in range(2)]
>>> ds = build_dataset(cells, recs, attrs={"baseline": "base", "threshold": 1.15})
>>> dict(ds.sizes)
{'cell': 2, 'trial': 2, 'step': 3, 'culprit': 0, 'node': 0, 'metric': 0, 'info_key': 0, 'env_var': 1}
>>> ds.step_time_ms.sel(cell="x", trial=1).values.tolist()
[5.0, 2.0, 3.0]
>>> ds.env_value.sel(cell="x", env_var="HSA_XNACK").item(), ds.status.dtype
('1', dtype('O'))
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from pydantic import BaseModel

from aorta.hang.model import HangReport
from aorta.hang.render import cited_lines, cited_nodes, node_line
from aorta.matrix.select import reduce_ranks, trial_values
from aorta.store.record import TrialRecord, readable_forensics

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DATASET_VERSION",
    "MISSING",
    "RANK_METRICS",
    "build_dataset",
    "text_array",
    "trials_frame",
    "typed_hangs",
]

#: Version of the Dataset layout (``attrs["aorta_dataset_version"]``). 2: a hang's incident as
#: the typed ``hang_*`` variables (1 kept it as JSON text, ``forensics`` and ``hang_culprit``:
#: :func:`typed_hangs` reads those). 3: its nodes' GPU evidence, ``hang_node_*`` over ``node``
#: (:func:`typed_hangs` gives a version 2 Dataset none). 4: the culprits' own device lines,
#: ``hang_device_line`` over ``culprit`` (a version 3 Dataset kept them only in
#: ``hang_summary``: :func:`typed_hangs` gives it none, so its cells read as it wrote them).
DATASET_VERSION = 4
#: The ``hang_*`` variables of the nodes' GPU evidence (version 3).
_NODE_VARS = ("hang_node_hosts", "hang_node_line", "hang_node_cited")
#: ``status`` of a trial that has no (readable) record.
MISSING = "missing"

#: The workload metrics each rank of a distributed trial reports for itself
#: (:mod:`aorta.run.comm_wait`) that the Dataset keeps per rank, dims cell × trial ×
#: rank — ``metrics`` holds rank 0's, as for every metric — with their attributes.
RANK_METRICS: dict[str, dict[str, str]] = {
    "compute_ms": {
        "long_name": "compute time per step (workload timing)",
        "units": "ms",
        "rank_reduction": "max",
        "description": "the rank's mean post-warm-up step less its time in collectives, "
        "by the workload's own clocks; NaN where the rank did not report it",
    },
    "comm_wait_ms": {
        "long_name": "time in collectives per step (workload timing)",
        "units": "ms",
        "rank_reduction": "max",
        "description": "the rank's mean post-warm-up time per step in collectives (moving "
        "data and waiting for later ranks), by the workload's own clocks",
    },
}

_VAR_ATTRS: dict[str, dict[str, str]] = {
    "step_time_ms": {
        "long_name": "step time",
        "units": "ms",
        "description": "every executed step, warm-up included (see warmup_steps); NaN past n_steps",
    },
    "n_steps": {"long_name": "recorded steps"},
    "warmup_steps": {"long_name": "warm-up steps", "description": "leading steps that are warm-up"},
    "wall_clock_s": {
        "long_name": "trial wall clock",
        "units": "s",
        "description": "measured by the engine around the whole trial, setup and cleanup included",
    },
    "elapsed_s": {
        "long_name": "workload elapsed time",
        "units": "s",
        "description": "the workload's own clock of its main work",
    },
    "executed_iterations": {
        "long_name": "executed iterations",
        "description": "iterations the workload reports it ran; -1 where unknown",
    },
    "status": {
        "long_name": "trial status",
        "description": "ok, workload_failed, setup_failed, infrastructure_failed, timeout, "
        "did_not_run, or missing (no readable record)",
    },
    "outcome": {
        "long_name": "trial outcome",
        "description": "passed, failed, errored, did_not_run, or missing (aorta.store.record.outcome_of)",
    },
    "failure_kind": {
        "long_name": "failure kind",
        "description": "workload, hang (timeout) or crash (after the main work started); '' otherwise",
    },
    "run_order": {
        "long_name": "run order",
        "description": "position of the trial in the run's execution order; -1 where not recorded",
    },
    "passed": {"long_name": "workload verdict"},
    "error": {"long_name": "why the trial did not end ok"},
    "signature": {
        "long_name": "failure signature",
        "description": "the signature its output matched (aorta.run.signatures); '' where none",
    },
    "hang_kind": {
        "long_name": "hang kind",
        "description": "a hung trial's incident kind (aorta.hang: missing, behind, device, ...); "
        "'' where nothing was captured",
    },
    "hang_culprit_ranks": {
        "long_name": "hang culprit ranks",
        "description": "the ranks a hung trial's other ranks waited for (aorta.hang); -1 past "
        "the last (and where none was found or nothing was captured)",
    },
    "hang_culprit_hosts": {
        "long_name": "hang culprit hosts",
        "description": "the culprit ranks' hosts, in the same order; '' where unknown",
    },
    "hang_device_line": {
        "long_name": "hang culprit device line",
        "description": "the device line (CUDA/HIP error, Xid, amdgpu) of the culprit's own logs "
        "that the hang summary cites; '' where it cites none",
    },
    "hang_op": {"long_name": "hang collective", "description": "the op the others wait in"},
    "hang_seq": {
        "long_name": "hang sequence number",
        "description": "the collective's sequence number in its group; -1 where none",
    },
    "hang_group": {"long_name": "hang process group", "description": "the collective's group"},
    "hang_frame": {
        "long_name": "hang culprit frame",
        "description": "where the first culprit is (file:line in function); '' where unknown",
    },
    "hang_summary": {"long_name": "hang summary", "description": "who hung and where, one line"},
    "hang_node_hosts": {
        "long_name": "hang node hosts",
        "description": "the hosts whose GPU tools and kernel log were read at the capture "
        "(gpu_<host>.txt); '' past the last",
    },
    "hang_node_line": {
        "long_name": "hang node device line",
        "description": "the node's latest device line (Xid, amdgpu, ...); '' where it had none",
    },
    "hang_node_cited": {
        "long_name": "hang node line cited",
        "description": "whether the hang summary cites the node's line (a device culprit on "
        "that node whose own logs had none)",
    },
    "oom": {
        "long_name": "out of memory per rank",
        "description": "JSON: world_size and each rank's OOM figures in bytes (aorta.run.oom); "
        "'' where no rank ran out",
    },
    "numerics": {
        "long_name": "first non-finite output per rank",
        "description": "JSON: world_size and each rank's first module whose output was NaN/Inf "
        "(check_numerics); '' where none was found",
    },
    "seed": {"long_name": "trial seed", "description": "-1 where the trial has no record"},
    "metrics": {"long_name": "workload metric"},
    "info": {"long_name": "workload info"},
}
_COORD_ATTRS: dict[str, dict[str, str]] = {
    "cell": {"long_name": "cell"},
    "trial": {"long_name": "trial"},
    "step": {"long_name": "step", "description": "index of the executed step, warm-up included"},
    "metric": {"long_name": "metric"},
    "info_key": {"long_name": "info key"},
    "env_var": {"long_name": "environment variable"},
    "mitigations": {"long_name": "mitigations", "description": "'+'-joined, in stacking order"},
    "environment": {"long_name": "environment"},
    "cell_id": {"long_name": "cell id"},
    "planned_trials": {"long_name": "planned trials"},
    "env_value": {
        "long_name": "overlay value",
        "description": "the cell's environment overlay; '' where env_set is False",
    },
    "env_set": {"long_name": "overlay sets the variable"},
}


# --- building --------------------------------------------------------------------------------


def _text(value: Any) -> str:
    s = value if isinstance(value, str) else str(value)
    if "\x00" in s:
        s = s.replace("\x00", "\u2400")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _attr(value: Any) -> Any:
    """A netCDF-safe attribute value: text and numbers stay, the rest becomes JSON text."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, bool | np.bool_):
        return _json(bool(value))
    if isinstance(value, int | float | np.integer | np.floating):
        return value
    return _text(_json(value))


def _clean_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _attr(v) for k, v in attrs.items() if v is not None}


def text_array(values: Sequence[str], shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` as an object array of netCDF-safe ``str`` (NUL → ``␀``), the way every text
    variable of a run's Dataset is stored; reshaped to ``shape`` when given.

    >>> text_array(["a", "b" + chr(0)]).tolist()
    ['a', 'b␀']
    """
    out = np.empty(len(values), dtype=object)
    out[:] = [_text(v) for v in values]
    return out if shape is None else out.reshape(shape)


def _config_name(key: str, taken: set[str]) -> str:
    base = "config_" + (re.sub(r"[^0-9A-Za-z_.-]", "_", key) or "_")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


_ABSENT = object()


def _config_values(values: list[Any]) -> np.ndarray:
    present = [v for v in values if v is not _ABSENT]
    numbers = all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in present if v is not None
    )
    if present and len(present) == len(values) and all(isinstance(v, bool) for v in present):
        return np.array(present, dtype=bool)
    if present and len(present) == len(values) and all(type(v) is int for v in present):
        return np.array(present, dtype=np.int64)
    if present and numbers:
        return np.array(
            [math.nan if v is _ABSENT or v is None else float(v) for v in values], dtype=float
        )
    if present and len(present) == len(values) and all(isinstance(v, str) for v in present):
        return text_array(present)
    return text_array([_json(None if v is _ABSENT else v) for v in values])


def _config_coords(
    cells: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, tuple[tuple[str], np.ndarray, dict[str, str]]], dict[str, Any]]:
    configs = [dict(c.get("workload_config") or {}) for c in cells]
    keys = sorted({k for cfg in configs for k in cfg})
    coords: dict[str, tuple[tuple[str], np.ndarray, dict[str, str]]] = {}
    common: dict[str, Any] = {}
    taken: set[str] = set()
    for key in keys:
        values = [cfg.get(key, _ABSENT) for cfg in configs]
        texts = {_json(v) if v is not _ABSENT else "\x00absent" for v in values}
        if len(texts) == 1:
            common[key] = values[0]
            continue
        coords[_config_name(key, taken)] = (
            ("cell",),
            _config_values(values),
            {"long_name": f"workload_config.{key}", "config_key": _text(key)},
        )
    return coords, common


def build_dataset(
    cells: Sequence[Mapping[str, Any]],
    records: Iterable[TrialRecord],
    *,
    attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """The Dataset of ``records``, with one cell per entry of ``cells`` (``cell.json`` dicts,
    in plan order; cells that only appear in ``records`` follow, by name).

    ``attrs`` become the Dataset's attributes (made netCDF-safe: dicts, lists and booleans as
    JSON text, ``None`` left out). Pure: reads no file.

    Returns
    -------
    xarray.Dataset
        See the module docstring for every variable.

    See Also
    --------
    aorta.matrix.load.load_run : the same from a run directory.
    """
    cells = [dict(c) for c in cells]
    records = list(records)
    names = [str(c["name"]) for c in cells]
    for extra in sorted({r.cell for r in records} - set(names)):
        cells.append({"name": extra})
        names.append(extra)
    planned = [int(c.get("trials") or 0) for c in cells]
    # Sized by the trials recorded, not planned: a flake hunt plans up to a million trials
    # per cell and stops after a few (``planned_trials`` keeps the plan).
    n_trials = max([*(r.trial + 1 for r in records), 1])
    data, dim_coords = _trial_variables(records, names, n_trials)
    coords = {**dim_coords, **_cell_coords(cells, names, planned)}
    ds: xr.Dataset = xr.Dataset(
        {k: (*v, _VAR_ATTRS[k]) for k, v in data.items()},
        coords={k: (*v, _COORD_ATTRS[k]) for k, v in coords.items()},
    )
    config_coords, common_config = _config_coords(cells)
    ds = ds.assign_coords({k: xr.Variable(*v) for k, v in config_coords.items()})
    per_rank = _rank_variables(records, names, n_trials)
    if per_rank:
        n_ranks = next(iter(per_rank.values())).shape[2]
        ds = ds.assign(
            {k: (("cell", "trial", "rank"), v, RANK_METRICS[k]) for k, v in per_rank.items()}
        ).assign_coords(rank=("rank", np.arange(n_ranks, dtype=np.int64), {"long_name": "rank"}))
    run = {"aorta_dataset_version": DATASET_VERSION, **dict(attrs or {})}
    hints = {r.signature: r.signature_hint for r in records if r.signature and r.signature_hint}
    if hints:
        run["signature_hints"] = dict(sorted(hints.items()))
    if common_config:
        run["workload_config"] = common_config
    ds.attrs = _clean_attrs(run)
    return ds


def _per_rank_json(world_size: int, events: Sequence[BaseModel]) -> str:
    """A trial's per-rank events as the Dataset keeps them; ``""`` when there are none."""
    if not events:
        return ""
    payload = {"world_size": world_size, "events": [e.model_dump() for e in events]}
    return _text(json.dumps(payload, default=str))


def _hang_variables(
    hung: Sequence[tuple[int, int, HangReport]], shape: tuple[int, int]
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Each trial's :class:`~aorta.hang.HangReport` (by cell and trial index) as the
    ``hang_*`` variables."""
    width = max([0, *(len(f.culprit_ranks) for _, _, f in hung)])
    hosts_of = {(i, j): list(dict.fromkeys(n.host for n in f.nodes)) for i, j, f in hung}
    n_nodes = max([0, *(len(h) for h in hosts_of.values())])
    size = shape[0] * shape[1]
    ranks = np.full((*shape, width), -1, dtype=np.int64)
    hosts = text_array([""] * (size * width), (*shape, width))
    device = text_array([""] * (size * width), (*shape, width))
    node_hosts = text_array([""] * (size * n_nodes), (*shape, n_nodes))
    node_lines = text_array([""] * (size * n_nodes), (*shape, n_nodes))
    cited = np.zeros((*shape, n_nodes), dtype=bool)
    seq = np.full(shape, -1, dtype=np.int64)
    text = {k: text_array([""] * size, shape) for k in ("kind", "op", "group", "frame", "summary")}
    for i, j, f in hung:
        n = len(f.culprit_ranks)
        ranks[i, j, :n] = f.culprit_ranks
        for k, host in enumerate(f.culprit_hosts[:n]):
            hosts[i, j, k] = _text(host or "")
        own = cited_lines(f)
        for k, rank in enumerate(f.culprit_ranks):
            device[i, j, k] = _text(own.get(rank, ""))
        cites = cited_nodes(f)
        for k, host in enumerate(hosts_of[i, j]):
            node_hosts[i, j, k] = _text(host)
            node_lines[i, j, k] = _text(node_line(f.nodes, host) or "")
            cited[i, j, k] = host in cites
        seq[i, j] = -1 if f.seq is None else f.seq
        first = next((fr for fr in f.frames if fr.rank == f.culprit_ranks[0]), None) if n else None
        for key, value in (
            ("kind", f.kind),
            ("op", f.op),
            # Named as the summary names it (members too): one phrase in every output.
            ("group", f.group_label),
            ("frame", first.where if first else None),
            ("summary", f.summary),
        ):
            text[key][i, j] = _text(value or "")
    ct = ("cell", "trial")
    return {
        "hang_kind": (ct, text["kind"]),
        "hang_culprit_ranks": ((*ct, "culprit"), ranks),
        "hang_culprit_hosts": ((*ct, "culprit"), hosts),
        "hang_device_line": ((*ct, "culprit"), device),
        "hang_op": (ct, text["op"]),
        "hang_seq": (ct, seq),
        "hang_group": (ct, text["group"]),
        "hang_frame": (ct, text["frame"]),
        "hang_summary": (ct, text["summary"]),
        "hang_node_hosts": ((*ct, "node"), node_hosts),
        "hang_node_line": ((*ct, "node"), node_lines),
        "hang_node_cited": ((*ct, "node"), cited),
    }


def _later_hang_variables(ds: xr.Dataset) -> xr.Dataset:
    """A typed Dataset (version 2 or later) with the ``hang_*`` variables later versions added,
    empty where it has none: a version 2 one has no nodes' evidence (an empty ``node``), a
    version 3 one no culprit's own device line (``""`` for each culprit: its summary still
    says the line, but which culprit's it is was not kept apart from it)."""
    out = ds
    if "hang_node_hosts" not in out.data_vars:
        nodes = _hang_variables([], (ds.sizes["cell"], ds.sizes["trial"]))
        out = out.assign({k: (*nodes[k], _VAR_ATTRS[k]) for k in _NODE_VARS})
    if "hang_device_line" not in out.data_vars:
        like = out.hang_culprit_hosts
        none = text_array([""] * like.size, like.shape)
        out = out.assign(hang_device_line=(like.dims, none, _VAR_ATTRS["hang_device_line"]))
    return out


def typed_hangs(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with a hang's incident as the ``hang_*`` variables: a Dataset of version 1 (a
    ``results.nc`` written before them) kept it as JSON text in ``forensics`` (and the
    culprits joined in ``hang_culprit``), read here once; any other Dataset is returned as is.

    >>> old = xr.Dataset({"forensics": (("cell", "trial"), text_array(['{"summary": "s", '
    ...     '"kind": "missing", "culprit_ranks": [2], "culprit_hosts": [null], "op": "all_reduce", '
    ...     '"seq": 5, "process_group": "pg", "where": {"2": "t.py:4 in f"}}', ""], (1, 2)))})
    >>> new = typed_hangs(old)
    >>> new.hang_culprit_ranks.values.tolist(), new.hang_seq.values.tolist(), new.hang_frame.values.tolist()
    ([[[2], [-1]]], [[5, -1]], [['t.py:4 in f', '']])
    """
    if "hang_kind" in ds.data_vars:
        return _later_hang_variables(ds)
    if "forensics" not in ds.data_vars or "hang_kind" in ds.data_vars:
        return ds
    text = ds.forensics.transpose("cell", "trial").values.astype(str)
    hung = []
    for (i, j), raw in np.ndenumerate(text):
        try:
            old = json.loads(raw) if raw else None
        except ValueError:
            continue
        if not isinstance(old, dict):
            continue
        where = old.get("where")
        frames = [
            {"rank": int(rank), "where": w, "source": "stacks"}
            for rank, w in (where.items() if isinstance(where, dict) else ())
            if str(rank).isdigit() and isinstance(w, str)
        ]
        report, _ = readable_forensics({**old, "frames": frames})
        if report is not None:
            hung.append((i, j, report))
    shape = (ds.sizes["cell"], ds.sizes["trial"])
    typed = {k: (*v, _VAR_ATTRS[k]) for k, v in _hang_variables(hung, shape).items()}
    out: xr.Dataset = ds.drop_vars(["forensics", "hang_culprit"], errors="ignore").assign(typed)
    return out


def _trial_variables(
    records: Sequence[TrialRecord], names: Sequence[str], n_trials: int
) -> tuple[dict[str, tuple[tuple[str, ...], np.ndarray]], dict[str, tuple[str, np.ndarray]]]:
    """The per-trial variables (padded as missing trials) and the trial/step/metric/info axes."""
    index = {name: i for i, name in enumerate(names)}
    n_steps_max = max([0, *(len(r.step_times_ms) for r in records)])
    metric_names = sorted({k for r in records for k in r.metrics})
    info_keys = sorted({k for r in records for k in r.info})
    m_index = {k: i for i, k in enumerate(metric_names)}
    i_index = {k: i for i, k in enumerate(info_keys)}
    shape = (len(names), n_trials)
    size = shape[0] * shape[1]
    step = np.full((*shape, n_steps_max), np.nan)
    n_steps = np.zeros(shape, dtype=np.int64)
    warmup = np.zeros(shape, dtype=np.int64)
    wall = np.full(shape, np.nan)
    elapsed = np.full(shape, np.nan)
    iterations = np.full(shape, -1, dtype=np.int64)
    status = text_array([MISSING] * size, shape)
    outcome = text_array([MISSING] * size, shape)
    kind = text_array([""] * size, shape)
    run_order = np.full(shape, -1, dtype=np.int64)
    error = text_array([""] * size, shape)
    signature = text_array([""] * size, shape)
    oom = text_array([""] * size, shape)
    nonfinite = text_array([""] * size, shape)
    passed = np.zeros(shape, dtype=bool)
    seed = np.full(shape, -1, dtype=np.int64)
    metrics = np.full((*shape, len(metric_names)), np.nan)
    info = text_array([""] * (size * len(info_keys)), (*shape, len(info_keys)))
    for rec in records:
        if rec.trial < 0:
            continue
        i, j = index[rec.cell], rec.trial
        times = rec.step_times_ms
        if times:
            step[i, j, : len(times)] = times
        n_steps[i, j] = len(times)
        warmup[i, j] = rec.warmup_steps
        wall[i, j] = math.nan if rec.wall_clock_s is None else rec.wall_clock_s
        elapsed[i, j] = math.nan if rec.elapsed_sec is None else rec.elapsed_sec
        iterations[i, j] = -1 if rec.executed_iterations is None else rec.executed_iterations
        status[i, j] = rec.status.value
        outcome[i, j], kind[i, j] = rec.outcome, rec.failure_kind or ""
        run_order[i, j] = -1 if rec.run_order is None else rec.run_order
        error[i, j] = _text(rec.error or "")
        signature[i, j] = _text(rec.signature or "")
        oom[i, j] = _per_rank_json(rec.world_size, rec.oom)
        nonfinite[i, j] = _per_rank_json(rec.world_size, rec.numerics)
        passed[i, j] = rec.passed
        seed[i, j] = rec.seed
        for k, v in rec.metrics.items():
            metrics[i, j, m_index[k]] = math.nan if v is None else v
        for key, text in rec.info.items():
            info[i, j, i_index[key]] = _text(text)
    ct = ("cell", "trial")
    data = {
        "step_time_ms": ((*ct, "step"), step),
        "n_steps": (ct, n_steps),
        "warmup_steps": (ct, warmup),
        "wall_clock_s": (ct, wall),
        "elapsed_s": (ct, elapsed),
        "executed_iterations": (ct, iterations),
        "status": (ct, status),
        "outcome": (ct, outcome),
        "failure_kind": (ct, kind),
        "run_order": (ct, run_order),
        "passed": (ct, passed),
        "error": (ct, error),
        "signature": (ct, signature),
        **_hang_variables(
            [
                (index[r.cell], r.trial, r.forensics)
                for r in records
                if r.forensics and r.trial >= 0
            ],
            shape,
        ),
        "oom": (ct, oom),
        "numerics": (ct, nonfinite),
        "seed": (ct, seed),
        "metrics": ((*ct, "metric"), metrics),
        "info": ((*ct, "info_key"), info),
    }
    axes = {
        "trial": ("trial", np.arange(n_trials, dtype=np.int64)),
        "step": ("step", np.arange(n_steps_max, dtype=np.int64)),
        "metric": ("metric", text_array(metric_names)),
        "info_key": ("info_key", text_array(info_keys)),
    }
    return data, axes


def _rank_variables(
    records: Sequence[TrialRecord], names: Sequence[str], n_trials: int
) -> dict[str, np.ndarray]:
    """The :data:`RANK_METRICS` of every rank of the records that hold several ranks (none
    when no such record reports one)."""
    index = {name: i for i, name in enumerate(names)}
    multi = [r for r in records if len(r.ranks) > 1 and r.trial >= 0]
    found = sorted({k for r in multi for o in r.ranks for k in o.metrics if k in RANK_METRICS})
    if not found:
        return {}
    n_ranks = max(o.rank + 1 for r in multi for o in r.ranks)
    out = {k: np.full((len(names), n_trials, n_ranks), np.nan) for k in found}
    for rec in multi:
        for outcome in rec.ranks:
            for key in found:
                value = outcome.metrics.get(key)
                if value is not None and outcome.rank >= 0:
                    out[key][index[rec.cell], rec.trial, outcome.rank] = value
    return out


def _cell_coords(
    cells: Sequence[Mapping[str, Any]], names: Sequence[str], planned: Sequence[int]
) -> dict[str, tuple[Any, np.ndarray]]:
    """Per-cell coordinates: names, mitigations, environment, ids, the env overlay."""
    env_vars = sorted({k for c in cells for k in (c.get("env") or {})})
    overlays = [dict(c.get("env") or {}) for c in cells]
    n = len(cells)
    env_value = text_array([o.get(v, "") for o in overlays for v in env_vars], (n, len(env_vars)))
    env_set = np.array([[v in o for v in env_vars] for o in overlays], dtype=bool)

    def env_name(c: Mapping[str, Any]) -> str:
        env = c.get("environment")
        return str(env.get("name", "")) if isinstance(env, Mapping) else str(env or "")

    return {
        "cell": ("cell", text_array(names)),
        "env_var": ("env_var", text_array(env_vars)),
        "mitigations": ("cell", text_array(["+".join(c.get("mitigations") or []) for c in cells])),
        "environment": ("cell", text_array([env_name(c) for c in cells])),
        "cell_id": ("cell", text_array([str(c.get("cell_id") or "") for c in cells])),
        "planned_trials": ("cell", np.array(planned, dtype=np.int64)),
        "env_value": (("cell", "env_var"), env_value),
        "env_set": (("cell", "env_var"), env_set.reshape(n, len(env_vars))),
    }


# --- tidy view -------------------------------------------------------------------------------


def trials_frame(ds: xr.Dataset) -> pd.DataFrame:
    """One row per recorded trial (``status`` not ``missing``): the per-cell coordinates,
    status, outcome, failure kind and failure signature, run order, the trial value (``step_time_ms``: median of
    post-warm-up steps; ``step_mean_ms`` and ``step_p95_ms`` beside it), clocks, one
    ``metric_<name>`` column per metric, and each trace metric (``load_run(traces=True)``)
    reduced to its worst rank.

    Examples
    --------
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": "x", "mitigations": ["none"], "trials": 2}],
    ...     [TrialRecord(cell="x", cell_id="", trial=0, status="ok", passed=True,
    ...                  step_times_ms=[9.0, 1.0, 3.0], warmup_steps=1, metrics={"tflops": 2.0})])
    >>> trials_frame(ds)[["cell", "trial", "status", "step_time_ms", "metric_tflops"]]
      cell  trial status  step_time_ms  metric_tflops
    0    x      0     ok           2.0            2.0
    """
    per_trial = ["status", "outcome", "failure_kind", "signature", "passed", "error", "seed"]
    per_trial += ["run_order"]
    per_trial += ["n_steps", "warmup_steps"]
    frame = xr.Dataset({k: ds[k] for k in per_trial if k in ds})
    frame["step_time_ms"] = trial_values(ds, metric="step_time_ms", trials="all")
    frame["step_mean_ms"] = trial_values(ds, metric="step_time_ms", trials="all", stat="mean")
    frame["step_p95_ms"] = trial_values(ds, metric="step_time_ms", trials="all", stat="p95")
    frame["wall_clock_s"] = ds.wall_clock_s
    frame["elapsed_s"] = ds.elapsed_s
    for name in ds.metric.values.tolist():
        frame[f"metric_{name}"] = ds.metrics.sel(metric=name, drop=True)
    per_rank = set(ds.status.dims) | {"rank"}
    for name in ds.data_vars:  # trace metrics (load_run(traces=True)): the worst rank's value
        if set(ds[name].dims) == per_rank and ds[name].dtype.kind == "f":
            frame[str(name)] = reduce_ranks(ds, str(name), "worst")
    keep = [c for c in frame.coords if set(frame[c].dims) <= set(frame.status.dims)]
    frame = frame.reset_coords([c for c in frame.coords if c not in keep], drop=True)
    df = frame.to_dataframe().reset_index()
    return df[df["status"] != MISSING].reset_index(drop=True)
