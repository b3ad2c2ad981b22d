"""``aorta bisect --recipe R [-- CMD]``: the first bad value of the recipe's ``bisect`` list,
each step an adaptive A/B sweep against the first value."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aorta.errors import ExitCode, UsageError
from aorta.recipe import load_recipe
from aorta.run import RunOptions

from ._options import Command, Json, Output, RecipeFile, Verbose


def bisect(
    command: Command = None,
    recipe: RecipeFile = None,
    output: Output = Path("triage_results"),
    as_json: Json = False,
    verbose: Verbose = False,
) -> int:
    """Find the first bad value of the recipe's bisect: {variable: NAME, values: [v0, …, vN]}
    (v0 good, vN bad; each trial gets NAME=value): each step runs the midpoint against v0 under
    the adaptive engine, stopping as soon as settled. Exit 0 with the first bad value, 3 when a
    step stayed undecided at its cap (the range still open is named)."""
    # aorta.run.bisect past the face: a face name `bisect` would be shadowed by the module
    from aorta.run.bisect import Step
    from aorta.run.bisect import bisect as run_bisect

    if recipe is None:
        raise UsageError("give --recipe FILE with a bisect: {variable: NAME, values: [...]} block")
    loaded = load_recipe(recipe, command=list(command) if command else None)
    if loaded.bisect is None:
        raise UsageError(f"{recipe}: no bisect: {{variable: NAME, values: [...]}} block")

    def said(step: Step) -> None:
        ratio = f" ×{step.ratio:.3g}" if step.ratio is not None else ""
        print(
            f"step: {loaded.bisect.variable if loaded.bisect else ''}={step.value}: {step.verdict}"
            f"{ratio}, {step.failures}/{step.trials} failed — {step.reason}",
            file=sys.stderr,
        )

    options = RunOptions(output=output, progress="lines" if verbose else "none")
    result = run_bisect(loaded, options=options, on_step=said)
    doc = result.to_json()
    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    elif result.first_bad is not None:
        print(
            f"first bad {result.variable}={result.first_bad} (last good {result.last_good}) "
            f"after {len(result.steps)} steps, {result.trials} trials; record: {result.record}"
        )
    else:
        lo, hi = result.open_range
        print(
            f"undecided: the first bad {result.variable} lies after {lo} and at or before {hi} "
            f"({len(result.steps)} steps, {result.trials} trials); record: {result.record}"
        )
    return ExitCode.OK if result.first_bad is not None else ExitCode.INCOMPLETE
