"""The statistics options of a matrix: one frozen value, its defaults defined here once.

:class:`StatsOptions` says how a run's trials become verdicts — the significance level, the
band, which trials and ranks count, each trial's statistic and the bootstrap. Every function
of :mod:`aorta.matrix` and :mod:`aorta.report` that computes statistics takes one as
``options=``, the CLI builds one from its flags, and the public functions keep their
keywords (``alpha=``, ``resamples=`` …) as overrides of it (:func:`stats_options`).
``docs/statistics.md`` documents each field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from aorta.keywords import with_keywords
from aorta.matrix import stats

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.select import RankReduction, StepStat, TrialSelection

__all__ = ["StatsKeywords", "StatsOptions", "stats_options"]


@dataclass(frozen=True, kw_only=True)
class StatsOptions:
    """How a matrix's statistics are computed: what :func:`aorta.compare`, the matrix, the
    reports and ``aorta compare`` / ``aorta report`` share.

    Frozen: build one, pass it along, derive another with :func:`dataclasses.replace` or
    :func:`stats_options`. Nothing is checked here; :func:`aorta.compare` refuses an ``alpha``
    outside (0, 1), a ``threshold`` ≤ 1 or ``resamples`` < 1 with a ``ValueError``.

    Parameters
    ----------
    alpha
        Significance level of the tests (Holm-adjusted); the CIs are at ``1 - alpha``, the
        band's at ``1 - alpha / m`` for ``m`` compared cells. Default 0.05.
    threshold
        The band of practical equivalence is ``[1/threshold, threshold]``. Default ``None``:
        the recipe's ``confound.threshold`` (``ds.attrs["threshold"]``), else 1.15.
    trials
        Which trials' values count for timing: ``ok`` (default), ``ran`` or ``all``.
    ranks
        How a per-rank trace metric becomes one value per trial: ``worst`` (default: max over
        ranks for times, min for rates), ``max``, ``min``, ``mean``, ``median`` or a rank
        number. :func:`aorta.explain` has its own (the mean over ranks).
    stat
        For ``step_time_ms``, which statistic of a trial's post-warm-up steps is its value:
        ``median`` (default), ``mean`` or ``p95`` (the tail: stalls). The warm-up steps
        themselves are each trial's own (``warmup_steps``, from the workload), not an option.
    seed
        The bootstrap's seed, mixed with each group's data (default 0).
    resamples
        Bootstrap resamples per group (default 10,000).

    See Also
    --------
    stats_options : an options value with some fields replaced, as the public keywords do.

    Examples
    --------
    >>> from aorta.matrix.options import StatsOptions
    >>> opts = StatsOptions(resamples=2_000)
    >>> opts.alpha, opts.seed, opts.resamples, opts.stat
    (0.05, 0, 2000, 'median')
    >>> import dataclasses
    >>> dataclasses.replace(opts, alpha=0.01).alpha
    0.01
    >>> opts.alpha = 0.1
    Traceback (most recent call last):
    ...
    dataclasses.FrozenInstanceError: cannot assign to field 'alpha'
    """

    alpha: float = stats.DEFAULT_ALPHA
    threshold: float | None = None
    trials: TrialSelection = "ok"
    ranks: RankReduction = "worst"
    stat: StepStat = "median"
    seed: int = stats.DEFAULT_SEED
    resamples: int = stats.DEFAULT_RESAMPLES


class StatsKeywords(TypedDict, total=False):
    """The fields of :class:`StatsOptions` as keywords (``**overrides`` of the public
    functions); ``None`` leaves the options' value."""

    alpha: float | None
    threshold: float | None
    trials: TrialSelection | None
    ranks: RankReduction | None
    stat: StepStat | None
    seed: int | None
    resamples: int | None


def stats_options(
    options: StatsOptions | None = None, /, **overrides: Unpack[StatsKeywords]
) -> StatsOptions:
    """``options`` (default :class:`StatsOptions`'s defaults) with the keywords that are not
    ``None`` replacing its fields: how a public function's ``alpha=``, ``resamples=`` …
    combine with its ``options=``.

    Raises ``TypeError`` for a keyword that is not a field.

    Examples
    --------
    >>> stats_options(resamples=500).resamples
    500
    >>> o = stats_options(StatsOptions(alpha=0.01), alpha=None, seed=3)
    >>> o.alpha, o.seed
    (0.01, 3)
    >>> stats_options(alpah=0.1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: unexpected keyword argument 'alpah' (the statistics options are alpha, ranks, ...)
    """
    base = options if options is not None else StatsOptions()
    return with_keywords(base, overrides, what="the statistics options", none_leaves=True)
