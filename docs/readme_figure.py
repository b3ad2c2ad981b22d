"""The README's figure, from a real CPU sweep: ``recipes/cpu-smoke.yaml`` with fewer steps.

    .venv/bin/python docs/readme_figure.py docs/readme_matrix.png   # what `make docs` runs

Runs the sweep into a temporary folder (3 cells × 5 trials, each trial in its own worker
process, ~1 minute on a laptop), loads it and draws every trial's step time per cell beside
the ratios to the baseline with their CIs — the two figures ``report.html`` opens with.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml
from matplotlib.figure import Figure

import aorta
from aorta.recipe import load_recipe_text

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "readme_matrix.png"
    doc = yaml.safe_load((ROOT / "recipes" / "cpu-smoke.yaml").read_text())
    doc.update(trials=5, steps=6)
    doc["workload_config"].update(warmup_steps=2)
    with tempfile.TemporaryDirectory() as tmp:
        result = aorta.sweep(load_recipe_text(yaml.safe_dump(doc)), output=tmp, progress="none")
        ds = aorta.load_run(result.run_dir)
    df = aorta.compare(ds)

    with aorta.plot.aorta_style():
        fig = Figure(figsize=(11.5, 2.6), layout="constrained")
        left, right = fig.subplots(1, 2, width_ratios=[1.15, 1])
        aorta.plot.step_distributions(ds, ax=left)
        aorta.plot.ratio_forest(df, ax=right)
        left.set_title("step time per trial (cpu-smoke, 5 trials per cell)")
        right.set_title("ratio to the baseline, 95% CI, verdict")
        fig.savefig(out, format="png", dpi=110, metadata={"Software": None})
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
