"""Peak memory and time of ``aorta.compare`` at large trial counts (issue 24: the bootstrap's
index matrix was drawn in one piece, 37 GiB at 500,000 trials per cell).

Each row runs in a fresh interpreter: a two-cell Dataset of ``n`` one-value trials per cell
(built with ``build_dataset``), then ``aorta.compare`` with 10,000 resamples. Peak RSS
(``resource.getrusage``) is read after the Dataset is built and again after the comparison;
the difference is what the statistics cost, and ``tracemalloc``'s peak during a second run
of the same comparison is its own allocation (numpy's arrays included) when the Dataset's
high-water mark hides it. The peer, in the same run, is the bootstrap as it
was — one ``(resamples, n)`` index matrix, sorted — on the same values, where it fits in
``--peer-limit`` GiB (else its size is printed, not run).

    .venv/bin/python benchmarks/bootstrap_memory.py --trials 1000 20000 500000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np
n, resamples, peer = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "peer"
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
rng = np.random.default_rng(0)
a, b = rng.normal(10.0, 0.3, n), rng.normal(10.5, 0.3, n)
if peer:
    before = rss(); t0 = time.perf_counter()
    for x, seed in ((a, 1), (b, 2)):
        x = np.sort(x)
        idx = np.random.default_rng(seed).integers(
            0, n, size=(resamples, n), dtype=np.int16 if n < 2**15 else np.int64)
        idx.sort(axis=1)
        m = (x[idx[:, (n - 1) // 2]] + x[idx[:, n // 2]]) / 2
        del idx
else:
    import aorta
    from aorta.matrix.dataset import build_dataset
    from aorta.store.record import TrialRecord
    recs = [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[float(v)])
            for c, vs in (("base", a), ("fix", b)) for t, v in enumerate(vs)]
    ds = build_dataset([{"name": "base", "trials": n}, {"name": "fix", "trials": n}], recs,
                       attrs={"baseline": "base", "threshold": 1.15})
    del recs
    before = rss(); t0 = time.perf_counter()
    df = aorta.compare(ds, resamples=resamples)
    assert df.loc["fix", "difference"] == "slower", df.loc["fix"]
s = time.perf_counter() - t0
after = rss()
import tracemalloc  # the comparison's own peak, below the Dataset's high-water mark
tracemalloc.start()
if peer:
    idx = np.random.default_rng(1).integers(
        0, n, size=(resamples, n), dtype=np.int16 if n < 2**15 else np.int64)
    idx.sort(axis=1)
    del idx
else:
    aorta.compare(ds, resamples=resamples)
traced = tracemalloc.get_traced_memory()[1] / 2**20
print(json.dumps({"before_mib": before, "after_mib": after, "s": s, "traced_mib": traced}))
"""


def _run(n: int, resamples: int, peer: bool) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), str(resamples), "peer" if peer else "aorta"],
        capture_output=True,
        text=True,
        check=True,
    )
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, nargs="+", default=[1000, 20000, 500000])
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--peer-limit", type=float, default=2.0, help="GiB the peer may draw")
    args = ap.parse_args()
    print(
        "| trials per cell | aorta compare: peak RSS added, traced peak, time | one index matrix (peer) |"
    )
    print("|---|---|---|")
    for n in args.trials:
        mine = _run(n, args.resamples, peer=False)
        width = 2 if n < 2**15 else 8
        need = args.resamples * n * width / 2**30
        if need <= args.peer_limit:
            p = _run(n, args.resamples, peer=True)
            peer = (
                f"+{p['after_mib'] - p['before_mib']:.0f} MiB, traced {p['traced_mib']:.0f} MiB"
                f" (one group), {p['s']:.1f} s"
            )
        else:
            peer = f"not run: its index matrix alone is {need:.1f} GiB"
        print(
            f"| {n:,} | +{mine['after_mib'] - mine['before_mib']:.0f} MiB "
            f"(Dataset: {mine['before_mib']:.0f} MiB), traced {mine['traced_mib']:.0f} MiB, "
            f"{mine['s']:.1f} s | {peer} |"
        )


if __name__ == "__main__":
    main()
