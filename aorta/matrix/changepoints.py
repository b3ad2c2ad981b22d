"""Change points of a series of runs, pure: where did a cell's level change, with a bounded
false-alarm rate (``aorta history``; docs/statistics.md, "Change points across runs").

The unit of exchange is the **run**, the evidence is the **trials**. A series is a list of runs
in time order, each a set of trial values (step times, or 0/1 for failed). All trials of the
series are ranked together (mid-ranks); at every split ``k`` (runs ``< k`` against runs
``≥ k``) the rank sum of the earlier side is standardised by its permutation variance — the
Mann–Whitney statistic of the split (:func:`split_statistics`) — and so is every *half split*,
one run counted half on each side with at least four whole runs either side of it; the series'
statistic is the largest of them all. The half split is for the night between two levels (a
noisy or shared night the day before a change): it makes the whole splits on either side of
it tie, which doubles their p, while the half split through it is larger than both and rare.
The change lies at the first run of the later side, a night at the boundary going with the
level its median is nearer. Its null distribution comes from permuting the **order of
the runs** (each run's trials stay together, :func:`permutation_p`): the test is exact under
the hypothesis that the runs are exchangeable, so run-to-run noise that has nothing to do with
time (another node, a busy night) raises no alarm, however many trials each run has.

Binary segmentation (:func:`segment`) tests the whole series at ``level``; if the split is
significant it is a change point and both sides are tested again, at the same level. Under
"nothing changed" the first test is the only one that can report, so **the probability of any
change point in a series of N exchangeable runs is at most ``level``**, whatever N;
:func:`aorta.matrix.history.detect` uses ``level = alpha / m`` for m series × metrics that
:func:`can_change` (a constant series has p = 1 under every run order: it cannot raise an
alarm, so it takes no share of ``alpha``), so a whole history's false-alarm rate is at most
``alpha``. Up to :data:`EXACT_MAX_RUNS` runs the p is exact — the share of all ``N!`` run
orders whose statistic reaches the observed one, counted over subsets of runs
(:func:`_exact_p`) — so a clean step whose smallest p is under the level is always found;
above it p-values come from seeded permutations, drawn in batches and stopped early once a p
is clearly large (Besag & Clifford's sequential p, still valid).

The price of exchangeable runs: a change is a change point once enough runs sit on each side
for their arrangement to be rare — ``2 / C(N, k)`` is the smallest p of a clean step with ``k``
runs after the change (a night between the levels before them: ``2 / (C(N, k + 1) (k + 1))``)
— about 4 runs on the new level in a month of nightlies at ``alpha = 0.05``. At the level
0.025 of one cell's two metrics the fewest nights that can show a clean step are 9 (``2 /
C(9, 3) = 0.024``, ``2 / C(9, 4) = 0.016``; 8 nights give at best ``2 / C(8, 4) = 0.029``,
and 3 + 3 nights ``2 / C(6, 3) = 0.1``, never under 0.05 either). The gate
(:func:`aorta.matrix.history.gate`) does not wait: it compares the newest run's trials with
the runs before it.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> runs = [rng.normal(100 if i < 12 else 110, 1, 20) for i in range(20)]
>>> segment(runs, level=0.05, seed=0)
[(12, 0.0...)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from aorta.matrix.rank_tests import rankdata

__all__ = [
    "DEFAULT_RESAMPLES",
    "EXACT_MAX_RUNS",
    "MAX_CHANGES",
    "can_change",
    "min_p",
    "permutation_p",
    "segment",
    "split_statistics",
]

#: Run-order permutations per test at most (fewer when the p is clearly large).
DEFAULT_RESAMPLES = 4_999
#: Change points per series at most (binary segmentation stops there).
MAX_CHANGES = 16
#: Permutations per batch, and the hits after which a test stops early.
_BATCH = 250
_HITS = 25
#: Whole runs on each side of a half split's run (:func:`_max_stat`): the fewest a change point
#: has on its new level at 9 nights anyway, and enough that a lone night at either end of a
#: series, with a neighbour or two leaning its way by chance, is never a "new level".
HALF_SIDE = 4
#: Up to this many runs a test's p is exact (:func:`_exact_p`, every run order counted); above
#: it, seeded permutations. Where it matters most — 9 to 13 nights, a clean step's smallest p
#: within a small factor of the level — the Monte Carlo p (stopped at 25 hits, ~20% error)
#: missed a few percent of steps. The exact count costs ``J 2^J``: 0.6 ms at 9 runs, 2.9 ms
#: at 13, 12.6 ms at 14, 20 ms at 15, against 1.2, 8.5, 12.4 and 12.4 ms for the
#: permutations of a significant step (the case that draws them all; a p clearly large stops
#: after 250, ~0.5 ms), on 2 busy cores; command and table in docs/statistics.md.
EXACT_MAX_RUNS = 13


def _prepare(runs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, float, float, int]:
    values = [np.asarray(r, dtype=float) for r in runs]
    values = [v[np.isfinite(v)] for v in values]
    counts = np.array([v.size for v in values], dtype=float)
    total = int(counts.sum())
    if total < 2:
        return np.zeros(len(values)), counts, 0.0, 0.0, total
    ranks = rankdata(np.concatenate(values))
    # Each run's rank sum by its index (reduceat read past the end when the last run had no
    # finite trial: a night whose every trial failed crashed the history).
    owner = np.repeat(np.arange(len(values)), counts.astype(int))
    sums = np.bincount(owner, weights=ranks, minlength=len(values))
    centre = (total + 1) / 2
    spread = float(np.sum((ranks - centre) ** 2))
    return sums, counts, centre, spread, total


def _split_z(
    cs: np.ndarray, w: np.ndarray, w2: np.ndarray, centre: float, spread: float, total: int
) -> np.ndarray:
    """The standardised weighted rank sum ``cs`` of the trials with weights summing to ``w``
    (their squares to ``w2``; 1 each for a whole split): its permutation variance is
    ``(N w2 - w²) spread / (N (N - 1))``. 0 where that is 0 (a side with no trial)."""
    var = (total * w2 - w**2) * spread / (total * (total - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, np.abs(cs - w * centre) / np.sqrt(var), 0.0)


def _max_stat(
    sums: np.ndarray,
    counts: np.ndarray,
    centre: float,
    spread: float,
    total: int,
    *,
    half_side: int = HALF_SIDE,
) -> tuple[np.ndarray, np.ndarray]:
    """The series' statistic of each row and where it lies (the first run of the later side),
    rows of runs in some order: ``sums`` and ``counts`` are ``(B, J)``.

    The statistic is the largest of every split's standardised rank sum and every *half
    split*'s: run ``r`` counted half on each side, runs before it whole on the earlier side,
    with at least :data:`HALF_SIDE` runs on each side of ``r``. A night between the two levels
    — a noisy or shared night the day before a change — makes the splits on either side of it
    equally extreme, so the largest single split is reached by twice as many run orders as a
    clean step (``4 / C(N, k)``, not ``2 / C(N, k)``: the shift after it missed at 9 nights);
    the half split through that night is larger than both, and reached only by the orders
    that put a night between the two levels. On a clean step the whole split stays the
    larger (its boundary run counted half weakens it), so nothing is lost there. A half split
    reports the run after ``r`` (:func:`_locate` places ``r`` itself)."""
    cs = np.cumsum(sums, axis=-1)[..., :-1]
    cn = np.cumsum(counts, axis=-1)[..., :-1]
    z = _split_z(cs, cn, cn, centre, spread, total)
    best, where = z.max(axis=-1), z.argmax(axis=-1) + 1
    runs = sums.shape[-1]
    if runs < 2 * half_side + 1:
        return best, where
    r = np.arange(half_side, runs - half_side)
    weight = cn[..., r - 1] + 0.5 * counts[..., r]
    squares = cn[..., r - 1] + 0.25 * counts[..., r]
    half = _split_z(cs[..., r - 1] + 0.5 * sums[..., r], weight, squares, centre, spread, total)
    larger = half.max(axis=-1) > best
    where = np.where(larger, r[half.argmax(axis=-1)] + 1, where)
    return np.maximum(best, half.max(axis=-1)), where


def _nearer(runs: Sequence[np.ndarray], r: int) -> str:
    """``early`` or ``late``: the level (the runs before ``r``, the runs after) whose median run
    ``r``'s median is strictly nearer; ``""`` on a tie or where a side has no trial."""
    early = np.concatenate([np.zeros(0), *runs[:r]])
    late = np.concatenate([np.zeros(0), *runs[r + 1 :]])
    if not (runs[r].size and early.size and late.size):
        return ""
    mine = float(np.median(runs[r]))
    gap_early, gap_late = abs(mine - np.median(early)), abs(mine - np.median(late))
    return "early" if gap_early < gap_late else "late" if gap_late < gap_early else ""


def _locate(runs: Sequence[np.ndarray], k: int, *, half: bool) -> tuple[int, int | None]:
    """The first run of the new level, given the statistic's split ``k`` (a half split: through
    run ``k - 1``), and the night between the two levels if there is one. A night at the
    boundary goes with the level its median is nearer: a noisy night between the levels is the
    first of the new one only when nearer it (a half split's night, on a tie, stays with the
    old), and a night of the new level that leans toward the old — enough for the half split
    through it to win — is not left out of it."""
    between = k - 1 if half else None
    if half and _nearer(runs, k - 1) == "late":
        k -= 1
    if k >= 2 and _nearer(runs, k - 1) == "late":
        return k - 1, k - 1
    if k + 1 < len(runs) and _nearer(runs, k) == "early":
        return k + 1, k
    return k, between


def _exact_p(
    sums: np.ndarray,
    counts: np.ndarray,
    centre: float,
    spread: float,
    total: int,
    obs: float,
    *,
    half_side: int = HALF_SIDE,
) -> float:
    """The share of all ``J!`` run orders whose statistic (:func:`_max_stat`) reaches ``obs``,
    counted exactly over the subsets of runs, not the orders (``J 2^J`` steps, not ``J!``).

    A whole split's statistic depends only on the *set* of runs on its earlier side, and a
    half split's on that set and the run counted half. So an order stays below ``obs`` exactly
    when every prefix set of it does, and every step from one prefix to the next through a half
    split's run does: the orders of a set that stay below are the sum, over its last run, of
    those of the set without it (when that step stays below too). Counted in int64 — ``20!``
    fits — and divided once, so the p is exact up to the one rounding of that division."""
    runs = sums.size
    size = 1 << runs
    # Every subset's trial-rank sum, trial count and size, built bit by bit (subset = bitmask).
    s, n = np.zeros(size), np.zeros(size)
    pop = np.zeros(size, dtype=np.int64)
    for i in range(runs):
        s[1 << i : 2 << i] = s[: 1 << i] + sums[i]
        n[1 << i : 2 << i] = n[: 1 << i] + counts[i]
        pop[1 << i : 2 << i] = pop[: 1 << i] + 1
    below = _split_z(s, n, n, centre, spread, total) < obs
    below[0] = below[-1] = True  # nothing, or everything, on the earlier side: no split
    masks = np.argsort(pop, kind="stable")
    levels = np.split(masks, np.cumsum(np.bincount(pop, minlength=runs + 1))[:-1])
    halves = range(half_side, runs - half_side) if runs >= 2 * half_side + 1 else range(0)
    ways = np.zeros(size, dtype=np.int64)  # orders of the set's runs staying below obs
    ways[0] = 1
    for k in range(1, runs + 1):
        level = levels[k]
        acc = np.zeros(level.size, dtype=np.int64)
        for i in range(runs):
            has = (level >> i) & 1 == 1
            prev = level[has] ^ (1 << i)
            w = ways[prev]
            if k - 1 in halves:  # run i counted half, the set before it whole
                z = _split_z(
                    s[prev] + 0.5 * sums[i], n[prev] + 0.5 * counts[i],
                    n[prev] + 0.25 * counts[i], centre, spread, total,
                )  # fmt: skip
                w = np.where(z < obs, w, 0)
            acc[has] += w
        ways[level] = np.where(below[level], acc, 0)
    orders = math.factorial(runs)
    return (orders - int(ways[-1])) / orders


def _test(
    runs: Sequence[np.ndarray], *, resamples: int, seed: int
) -> tuple[float, int, int | None]:
    """:func:`permutation_p` and the night between the two levels (:func:`_locate`)."""
    sums, counts, centre, spread, total = _prepare(runs)
    if not _can_change(counts, spread):
        return 1.0, 0, None
    observed, where = _max_stat(sums, counts, centre, spread, total)
    half = float(observed) > float(np.max(split_statistics(runs), initial=0.0))
    finite = [np.asarray(v, dtype=float) for v in runs]
    k, between = _locate([v[np.isfinite(v)] for v in finite], int(where), half=half)
    obs = float(observed) * (1 - 1e-9)
    if len(runs) <= EXACT_MAX_RUNS:
        return _exact_p(sums, counts, centre, spread, total, obs), k, between
    rng = np.random.default_rng(seed)
    order = np.arange(len(runs))
    hits = drawn = 0
    while drawn < resamples:
        batch = min(_BATCH, resamples - drawn)
        perm = rng.permuted(np.broadcast_to(order, (batch, order.size)), axis=1)
        stats, _ = _max_stat(sums[perm], counts[perm], centre, spread, total)
        hits += int(np.sum(stats >= obs))
        drawn += batch
        if hits >= _HITS:
            return hits / drawn, k, between
    return (hits + 1) / (drawn + 1), k, between


def _can_change(counts: np.ndarray, spread: float) -> bool:
    # Fewer than two runs with a trial, or no two trials that differ: every run order gives
    # the same statistic, so p is 1 under every permutation.
    return bool(np.count_nonzero(counts) >= 2 and spread > 0)


def can_change(runs: Sequence[np.ndarray]) -> bool:
    """Whether a series can have a change point at all: two runs with a (finite) trial or
    more, and two trials that differ. A series that cannot (a failure rate 0 every night)
    has p = 1 under every run order, so it adds no false alarm to a family of tests
    (:func:`aorta.matrix.history.family_level` leaves it out of the Bonferroni count).

    >>> can_change([np.zeros(4)] * 9), can_change([np.zeros(4)] * 8 + [np.array([0.0, 1.0])])
    (False, True)
    """
    _, counts, _, spread, _ = _prepare(runs)
    return _can_change(counts, spread)


def split_statistics(runs: Sequence[np.ndarray]) -> np.ndarray:
    """The standardised rank-sum statistic of every split ``k = 1 … J-1`` of the runs (runs
    ``< k`` against ``≥ k``): ``|S_k - n_k (N+1)/2| / sd``; 0 where a side has no trial or no
    trial differs.

    >>> split_statistics([np.array([1.0, 2.0]), np.array([3.0, 4.0])]).round(3).tolist()
    [1.549]
    """
    sums, counts, centre, spread, total = _prepare(runs)
    if len(runs) < 2:
        return np.zeros(0)
    if spread == 0:
        return np.zeros(len(runs) - 1)
    cn = np.cumsum(counts)[:-1]
    return _split_z(np.cumsum(sums)[:-1], cn, cn, centre, spread, total)


def permutation_p(
    runs: Sequence[np.ndarray],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, int]:
    """``(p, k)``: the run-order permutation p of the largest split statistic, and the split
    ``k`` where it lies (the first run of the later side). ``(1.0, 0)`` for fewer than two
    runs with trials, or when no trial differs.

    Up to :data:`EXACT_MAX_RUNS` runs the p is exact: the share of every run order whose
    statistic reaches the observed one (``resamples`` and ``seed`` unused). Above, orders are
    drawn in batches from ``seed``; once 25 reach the observed statistic the test stops with
    Besag & Clifford's ``p = hits / drawn``, else ``p = (hits + 1) / (drawn + 1)``.

    >>> permutation_p([np.full(5, 1.0)] * 3 + [np.full(5, 2.0)] * 3)
    (0.1, 3)
    """
    p, k, _ = _test(runs, resamples=resamples, seed=seed)
    return p, k


def min_p(runs_before: int, runs_after: int) -> float:
    """The smallest p a split of ``runs_before`` against ``runs_after`` runs can get under
    run-order permutation: ``2 / C(N, k)`` (the split and its mirror), at most 1.

    >>> round(min_p(20, 3), 5), round(min_p(20, 1), 3)
    (0.00113, 0.095)
    """
    n = runs_before + runs_after
    return min(1.0, 2 / math.comb(n, runs_after)) if n else 1.0


def segment(
    runs: Sequence[np.ndarray],
    *,
    level: float,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    max_changes: int = MAX_CHANGES,
) -> list[tuple[int, float]]:
    """Binary segmentation of a series of runs: ``[(k, p), …]`` sorted by ``k``, each ``k`` the
    first run of a new level and ``p`` its test's permutation p (``≤ level``).

    Raises ``ValueError`` for ``level`` outside (0, 1).

    >>> segment([np.full(4, 1.0)] * 8, level=0.05)
    []
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    found: list[tuple[int, float]] = []
    todo = [(0, len(runs))]
    while todo and len(found) < max_changes:
        start, end = todo.pop(0)
        if end - start < 2:
            continue
        p, k, between = _test(runs[start:end], resamples=resamples, seed=seed + start)
        if k and p <= level:
            found.append((start + k, p))
            # A night between the two levels belongs to neither: left in, it would be an
            # outlier at the edge of the side tested next.
            cut = k if between is None else between
            todo += [(start, start + cut), (start + cut + (between is not None), end)]
    return sorted(found)
