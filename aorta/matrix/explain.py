"""Where the time went: a cell's step-time difference from its baseline, item by item.

:func:`explain` reads, per trial and rank, the time per step of each kernel, host op or class
(:func:`aorta.trace.items.step_items`, kept in each trial's metrics cache by
:func:`aorta.matrix.trace_metrics.analyse_trial`, so no trace is parsed twice) and decomposes
the difference of the mean profiled step between a cell and its baseline:

``step(cell) − step(baseline) = Σ_items [item(cell) − item(baseline)] + residual``

Every term is a difference of means over trials (means, not medians, so that the terms add
up), with a percentile bootstrap CI that resamples the trials of each group — the same
resamples for every item, so the CIs of the items, the step and the residual are drawn from
one joint bootstrap. Items come out ranked by the size of their contribution.

:func:`decompose` is the pure arithmetic on per-trial tables; :func:`explain` gathers them.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from aorta.matrix import stats
from aorta.matrix.load import TraceCache, load_run
from aorta.matrix.options import StatsOptions, stats_options
from aorta.matrix.select import RankReduction, TrialSelection, check_dims, trial_values
from aorta.matrix.trace_metrics import trial_results
from aorta.store.record import RAN
from aorta.trace.items import ITEMS_BY

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = ["EXPLAIN_BY", "TrialItems", "decompose", "explain"]

ExplainBy = Literal["kernel", "op", "class"]
#: The values ``explain(by=...)`` takes.
EXPLAIN_BY: tuple[str, ...] = ITEMS_BY
_COLUMNS = (
    "item",
    "class",
    "baseline",
    "cell",
    "delta",
    "ci_low",
    "ci_high",
    "share",
    "calls_baseline",
    "calls_cell",
    "only_in",
)


@dataclass
class TrialItems:
    """One group's per-trial tables: ms per step of each item, and of the whole step.

    ``items`` maps each trial to ``{item: (class, ms per step, calls per step)}``; ``step``
    maps each trial to its mean profiled step (ms). Trials in ``step`` only count.
    """

    name: str
    step: dict[int, float] = field(default_factory=dict)
    items: dict[int, dict[str, tuple[str, float, float]]] = field(default_factory=dict)


def _stream(seed: int, key: str) -> np.random.Generator:
    # as aorta.matrix.stats: one stream per group, keyed by its name (adding a cell or
    # swapping the two changes nothing else; a group against itself resamples identically)
    return np.random.default_rng([int(seed), zlib.crc32(key.encode())])


def _resampled_means(x: np.ndarray, *, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Column means of ``resamples`` bootstrap resamples of the rows of ``x`` (trials × columns)."""
    n = x.shape[0]
    idx = rng.integers(0, n, size=(resamples, n))
    flat = (np.arange(resamples)[:, None] * n + idx).ravel()
    weights = np.bincount(flat, minlength=resamples * n).reshape(resamples, n)
    means: np.ndarray = weights @ x / n
    return means


def _matrix(group: TrialItems, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    trials = sorted(group.step)
    col = {name: j for j, name in enumerate(names)}
    times = np.zeros((len(trials), len(names)))
    calls = np.zeros((len(trials), len(names)))
    for i, trial in enumerate(trials):
        for name, (_, ms, n) in group.items.get(trial, {}).items():
            times[i, col[name]], calls[i, col[name]] = ms, n
    return times, calls


def decompose(
    baseline: TrialItems,
    cell: TrialItems,
    *,
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> pd.DataFrame:
    """The per-item decomposition of ``cell``'s mean step minus ``baseline``'s (pure).

    Returns the table of :func:`explain` without the run-specific ``attrs`` (``trials``,
    ``ranks``, ``step_time_ms``, ``notes``). Of the statistics options
    (:class:`~aorta.matrix.options.StatsOptions`, a keyword overriding a field) the
    bootstrap's ``alpha``, ``resamples`` and ``seed`` apply.

    Examples
    --------
    >>> base = TrialItems("a", step={0: 10.0, 1: 12.0},
    ...                   items={0: {"mm": ("compute", 6.0, 1.0)}, 1: {"mm": ("compute", 7.0, 1.0)}})
    >>> slow = TrialItems("b", step={0: 15.0, 1: 17.0},
    ...                   items={0: {"mm": ("compute", 6.0, 1.0), "sleep": ("other", 5.0, 1.0)},
    ...                          1: {"mm": ("compute", 7.0, 1.0), "sleep": ("other", 5.0, 1.0)}})
    >>> d = decompose(base, slow, resamples=200)
    >>> d[["item", "delta", "ci_low", "ci_high", "share", "only_in"]].to_dict("records")[0]
    {'item': 'sleep', 'delta': 5.0, 'ci_low': 5.0, 'ci_high': 5.0, 'share': 1.0, 'only_in': 'cell'}
    >>> d.attrs["step"]["delta"], d.attrs["residual"]["delta"]
    (5.0, 0.0)
    """
    classes, seen = _catalogue(baseline, cell)
    names = sorted(classes)
    k = len(names)
    sides = {"baseline": _side(baseline, names), "cell": _side(cell, names)}
    mean = {
        label: full.mean(axis=0) if full is not None else np.full(k + 2, np.nan)
        for label, (full, _) in sides.items()
    }
    delta = mean["cell"] - mean["baseline"]
    opts = stats_options(options, **overrides)
    low, high = _intervals(
        sides["baseline"][0],
        sides["cell"][0],
        keys=(baseline.name, cell.name),
        opts=opts,
        width=k + 2,
    )
    # Each measure over the items, then the step and the residual (k + 2 columns).
    cols = {
        "baseline": mean["baseline"],
        "cell": mean["cell"],
        "delta": delta,
        "ci_low": low,
        "ci_high": high,
    }
    mean_calls = {
        label: c.mean(axis=0) if c.shape[0] else np.full(k, np.nan)
        for label, (_, c) in sides.items()
    }
    out = _table(names, classes, seen, cols, _shares(delta, mean, k), mean_calls)
    out.attrs = {
        "cell": cell.name,
        "baseline": baseline.name,
        "units": dict.fromkeys(("baseline", "cell", "delta", "ci_low", "ci_high"), "ms"),
        "n": {"baseline": len(baseline.step), "cell": len(cell.step)},
        "alpha": opts.alpha,
        "resamples": opts.resamples,
        "seed": opts.seed,
        "step": _term(cols, k, "mean profiled step (ProfilerStep#N), ms"),
        "residual": _term(cols, k + 1, "step − Σ items: time no item explains"),
    }
    return out


def _table(
    names: list[str],
    classes: Mapping[str, str],
    seen: Mapping[str, set[str]],
    cols: Mapping[str, np.ndarray],
    share: np.ndarray,
    mean_calls: Mapping[str, np.ndarray],
) -> pd.DataFrame:
    """The items' rows, the largest change first (ties by name)."""
    k = len(names)
    out = pd.DataFrame(
        {
            "item": pd.Series(names, dtype=object),
            "class": pd.Series([classes[n] for n in names], dtype=object),
            **{key: col[:k] for key, col in cols.items()},
            "share": share,
            "calls_baseline": mean_calls["baseline"],
            "calls_cell": mean_calls["cell"],
            "only_in": pd.Series(
                ["" if len(seen[n]) == 2 else next(iter(seen[n])) for n in names],
                dtype=object,
            ),
        },
        columns=list(_COLUMNS),
    )
    order = np.lexsort((out["item"].to_numpy(), -np.abs(out["delta"].to_numpy())))
    return out.iloc[order].reset_index(drop=True)


def _term(cols: Mapping[str, np.ndarray], j: int, what: str) -> dict[str, Any]:
    """Column ``j`` (the step or the residual) of every measure, with what it is."""
    return {**{key: float(col[j]) for key, col in cols.items()}, "what": what}


def _catalogue(
    baseline: TrialItems, cell: TrialItems
) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Every item either side timed: its class, and the sides (``baseline``/``cell``) it is on."""
    classes: dict[str, str] = {}
    seen: dict[str, set[str]] = {}
    for label, group in (("baseline", baseline), ("cell", cell)):
        for trial in group.step:
            for name, (cls, _, _) in group.items.get(trial, {}).items():
                classes.setdefault(name, cls)
                seen.setdefault(name, set()).add(label)
    return classes, seen


def _side(group: TrialItems, names: Sequence[str]) -> tuple[np.ndarray | None, np.ndarray]:
    """One side's trials × (the items, the step, the residual step − Σ items), and its calls."""
    times, calls = _matrix(group, names)
    step = np.array([group.step[t] for t in sorted(group.step)], dtype=float)
    full = np.column_stack([times, step, step - times.sum(axis=1)]) if step.size else None
    return full, calls


def _shares(delta: np.ndarray, mean: Mapping[str, np.ndarray], k: int) -> np.ndarray:
    """Each item's share of the step's change (0 when the step did not change)."""
    step_delta = float(delta[k])
    # A step change within rounding of the step times is no change: dividing by it gave shares
    # of -1.8e16 to two groups whose mean steps differ in the last bit only.
    scale = max(abs(float(mean["baseline"][k])), abs(float(mean["cell"][k])))
    if abs(step_delta) <= 16 * np.finfo(float).eps * scale:
        step_delta = 0.0
    with np.errstate(over="ignore"):  # beyond a float (subnormal steps): inf says so
        share: np.ndarray = delta[:k] / step_delta if step_delta else np.zeros(k)
    return share


def _intervals(
    base: np.ndarray | None,
    cell: np.ndarray | None,
    *,
    keys: tuple[str, str],
    opts: StatsOptions,
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each column's bootstrap CI of the difference of means, cell − base (both trials ×
    columns; NaN with fewer than 2 trials on a side)."""
    nan = np.full(width, np.nan)
    if base is None or cell is None or base.shape[0] < 2 or cell.shape[0] < 2:
        return nan, nan.copy()
    n = opts.resamples
    samples = _resampled_means(cell, resamples=n, rng=_stream(opts.seed, keys[1]))
    samples -= _resampled_means(base, resamples=n, rng=_stream(opts.seed, keys[0]))
    bounds = [stats.percentile_interval(samples[:, j], alpha=opts.alpha) for j in range(width)]
    return np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])


# --- from a run ------------------------------------------------------------------------------


def _dataset(source: xr.Dataset | str | Path) -> tuple[xr.Dataset, Path]:
    if isinstance(source, xr.Dataset):
        check_dims(source)
        run_dir = source.attrs.get("trace_run_dir")
        if not run_dir:
            raise ValueError(
                "explain needs the run directory: pass the run's path, or a Dataset from "
                "aorta.load_run(run, traces=True) (it has attrs['trace_run_dir'])"
            )
        return source, Path(str(run_dir))
    path = Path(source)
    ds = load_run(path)
    return ds, (path.parent if path.is_file() else path)


def _group(
    name: str,
    results: Mapping[tuple[str, int], Mapping[str, Any]],
    keep: Sequence[int],
    *,
    by: str,
    ranks: RankReduction,
    world_size: int,
    notes: list[str],
) -> TrialItems:
    """The trials of one cell whose every wanted rank has steps and an item table."""
    group = TrialItems(name)
    wanted = list(range(world_size)) if ranks == "mean" else [int(ranks)]
    for trial in keep:
        result = results.get((name, trial)) or {}
        steps = result.get("steps") or {}
        tables = (result.get("items") or {}).get(by) or {}
        lacking = [r for r in wanted if str(r) not in steps]
        if lacking:
            notes.append(
                f"{name} trial {trial}: left out, no profiled steps for rank(s) "
                f"{', '.join(map(str, lacking))}"
            )
            continue
        total: dict[str, list[Any]] = {}
        for r in wanted:
            for item, cls, per_step, calls in tables.get(str(r), []):
                entry = total.setdefault(item, [cls, 0.0, 0.0])
                entry[1] += per_step / 1e3 / len(wanted)
                entry[2] += calls / len(wanted)
        group.items[trial] = {item: (c, ms, n) for item, (c, ms, n) in total.items()}
        group.step[trial] = sum(steps[str(r)]["step_us"] for r in wanted) / 1e3 / len(wanted)
    return group


def explain(
    source: xr.Dataset | str | Path,
    cell: str,
    baseline: str | None = None,
    *,
    by: ExplainBy = "kernel",
    ranks: Literal["mean"] | int = "mean",
    options: StatsOptions | None = None,
    trials: TrialSelection | None = None,
    alpha: float | None = None,
    resamples: int | None = None,
    seed: int | None = None,
    trace_cache: TraceCache = "use",
    trace_workers: int | None = None,
    executor: Executor | None = None,
) -> pd.DataFrame:
    """Where a cell's step time went, against the baseline: per item, with a bootstrap CI.

    For each trial and rank, the time per profiled step of each kernel, host op or class
    (:func:`aorta.trace.items.step_items`); per trial the mean over ranks (or one rank); then
    for each item the difference of its mean over the cell's trials and over the baseline's,
    with a percentile bootstrap CI over trials. The differences add up to the difference of
    the mean profiled step (``ProfilerStep#N``) with the ``residual`` that no item explains.
    Read from each trial's metrics cache (``trace/metrics.aorta-cache``): traces are parsed
    once, on the first :func:`aorta.load_run` ``(traces=True)`` or ``explain``.

    Parameters
    ----------
    source
        A run directory (or its ``results.nc``), or a Dataset from
        ``aorta.load_run(run, traces=True)``.
    cell
        The cell to explain.
    baseline
        The reference cell (default: the run's baseline). ``cell == baseline`` gives zeros.
    by
        ``"kernel"``: GPU kernels by normalised name (:func:`aorta.trace.normalize_kernel_name`);
        ``"op"``: host ops and annotations (``cpu_op``, ``user_annotation`` — a
        ``record_function`` block, ``gloo:*`` work), self time; ``"class"``: the GPU classes
        (compute, communication, memcpy, memset), or for a rank without GPU ops the host
        classes (compute, communication, other).
    ranks
        ``"mean"``: the mean over the ranks (it keeps the decomposition additive; a trial
        needs every rank's trace); a rank number: that rank only.
    options
        The statistics options (:class:`~aorta.matrix.options.StatsOptions`); ``trials``,
        ``alpha``, ``resamples`` and ``seed`` apply, ``ranks`` is the argument above.
    trials, alpha, resamples, seed
        Override the options' field when given. ``trials``: ``"ok"`` (default) or ``"ran"``
        (adds ``workload_failed`` trials), as in :func:`aorta.compare`; trials without a
        usable trace are left out (``attrs["notes"]``). The CIs are at level ``1 − alpha``;
        the bootstrap is seeded per group as in :func:`aorta.compare` (the same run gives the
        same CIs).
    trace_cache, trace_workers, executor
        As in :func:`aorta.load_run`: how trials whose metrics are not cached yet are analysed.

    Returns
    -------
    pandas.DataFrame
        One row per item, largest ``|delta|`` first: ``item``, ``class``, ``baseline`` and
        ``cell`` (mean ms per step), ``delta`` (cell − baseline), ``ci_low``/``ci_high``
        (NaN with fewer than 2 trials in a group), ``share`` (``delta`` / the step's delta; 0
        when that is 0), ``calls_baseline``/``calls_cell`` (per step), ``only_in``
        (``"cell"``/``"baseline"`` for an item one group never ran, else ``""``).
        ``attrs``: ``step`` and ``residual`` (each ``baseline``, ``cell``, ``delta``,
        ``ci_low``, ``ci_high``), ``cell``, ``baseline``, ``by``, ``ranks``, ``units`` (ms),
        ``n`` and ``trials`` (the trials used per group), ``alpha``, ``resamples``, ``seed``,
        ``step_time_ms`` (each group's median of the workload's own step times, what the
        verdict compares, for reference) and ``notes``.

    Raises
    ------
    ValueError
        ``by`` or ``ranks`` is not allowed, a cell is not in the run, or a Dataset without
        ``trace_run_dir`` (not from ``load_run(..., traces=True)``).
    UsageError
        ``source`` is not a run.

    See Also
    --------
    aorta.trace.diff : the same question for two traces.
    aorta.plot.waterfall : the decomposition as a waterfall.

    Examples
    --------
    >>> import aorta
    >>> aorta.explain("no/such/run", "slow")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    aorta.errors.UsageError: .../no/such/run: not an aorta run directory (no manifest.json)

    On a profiled run (``collect: [torch_profiler]``)::

        d = aorta.explain(run, "slow", by="op")
        d.head(5)                                # largest contributions first, ms per step
        d.attrs["step"], d.attrs["residual"]     # the whole step's change, and what is left
        aorta.plot.waterfall(d)
    """
    _check_choices(by, ranks)
    opts = stats_options(options, trials=trials, alpha=alpha, resamples=resamples, seed=seed)
    ds, run_dir = _dataset(source)
    base = _cells_of(ds, cell, baseline)
    results, problems, notes, world_size = trial_results(
        ds, run_dir, cache=trace_cache, workers=trace_workers, executor=executor
    )
    if ranks != "mean" and not 0 <= int(ranks) < world_size:
        raise ValueError(f"ranks={ranks}: the run has ranks 0..{world_size - 1}")
    notes = [*problems, *notes]
    groups = {
        name: _cell_group(
            ds, name, results, opts, by=by, ranks=ranks, world_size=world_size, notes=notes
        )
        for name in dict.fromkeys((base, cell))
    }
    out = decompose(groups[base], groups[cell], options=opts)
    medians = trial_values(ds, trials=opts.trials) if "step_time_ms" in ds else None
    out.attrs |= {
        "by": by,
        "ranks": ranks,
        "trials": {"baseline": sorted(groups[base].step), "cell": sorted(groups[cell].step)},
        "step_time_ms": {
            label: _median(medians, name) for label, name in (("baseline", base), ("cell", cell))
        },
        "notes": notes,
    }
    if out.empty:
        out.attrs["notes"].append(f"no {by} items in the traces" + _hint(by))
    return out


def _check_choices(by: object, ranks: object) -> None:
    """Refuse a ``by`` or ``ranks`` that :func:`explain` does not offer."""
    if by not in EXPLAIN_BY:
        raise ValueError(f"by must be one of {', '.join(EXPLAIN_BY)}, not {by!r}")
    if ranks != "mean" and (isinstance(ranks, bool) or not isinstance(ranks, int)):
        raise ValueError(f"ranks must be 'mean' or a rank number, not {ranks!r}")


def _cells_of(ds: xr.Dataset, cell: str, baseline: str | None) -> str:
    """The baseline's name (the run's unless given), once both cells are known to the run."""
    base = str(baseline or ds.attrs.get("baseline") or ds.cell.values[0])
    names = [str(c) for c in ds.cell.values.tolist()]
    for name in (cell, base):
        if name not in names:
            raise ValueError(f"no cell {name!r} in the run; cells: {', '.join(names)}")
    return base


def _cell_group(
    ds: xr.Dataset,
    name: str,
    results: Mapping[tuple[str, int], Mapping[str, Any]],
    opts: StatsOptions,
    *,
    by: str,
    ranks: RankReduction,
    world_size: int,
    notes: list[str],
) -> TrialItems:
    """One cell's items per trial, from the trials the options keep (``ok``, or every trial
    that ran); a cell with fewer than two such trials gets a note (no CI)."""
    allowed = ("ok",) if opts.trials == "ok" else tuple(RAN)
    status = ds.status.sel(cell=name).values.tolist()
    keep = [int(t) for t, s in zip(ds.trial.values.tolist(), status, strict=True) if s in allowed]
    group = _group(name, results, keep, by=by, ranks=ranks, world_size=world_size, notes=notes)
    if len(group.step) < 2:
        notes.append(f"{name}: {len(group.step)} trial(s) with traces, no CI")
    return group


def _median(values: xr.DataArray | None, cell: str) -> float:
    if values is None:
        return math.nan
    v = values.sel(cell=cell).values
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else math.nan


def _hint(by: str) -> str:
    return " (a CPU-only trace has no GPU kernels: try by='op')" if by == "kernel" else ""
