"""``aorta bisect --recipe R [-- CMD]``: the first bad value of the recipe's ``bisect`` list,
each step an adaptive A/B sweep against the first value."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

from aorta import envvars
from aorta.errors import ExitCode, UsageError
from aorta.recipe import load_recipe
from aorta.run import RunOptions

from ._options import Command, Json, Output, RecipeFile, Verbose, option


def bisect(
    command: Command = None,
    recipe: RecipeFile = None,
    output: Output = Path("triage_results"),
    as_json: Json = False,
    verbose: Verbose = False,
    remeasure: Annotated[
        bool,
        option(
            "--remeasure",
            envvars.BISECT_REMEASURE,
            "Run v0 and vN again beside every midpoint (one adaptive sweep per step) instead of reusing their trials measured once: immune to a machine drifting between steps, at about twice the trials.",
        ),
    ] = False,
) -> int:
    """Find the first bad value of the recipe's bisect: {variable: NAME, values: [v0, …, vN]}
    (v0 good, vN bad; each trial gets NAME=value). Step 0 measures v0 and vN until vN is
    settled against v0; each step then runs only the midpoint, compared with those trials
    (anytime-valid, stopping as soon as settled). Exit 0 with the first bad value, 3 when vN
    is not worse than v0 or a step stayed undecided at its cap (the range still open is
    named)."""
    # aorta.run.bisect past the face: a face name `bisect` would be shadowed by the module
    from aorta.run.bisect import Step
    from aorta.run.bisect import bisect as run_bisect

    if recipe is None:
        raise UsageError("give --recipe FILE with a bisect: {variable: NAME, values: [...]} block")
    loaded = load_recipe(recipe, command=list(command) if command else None)
    if loaded.bisect is None:
        raise UsageError(f"{recipe}: no bisect: {{variable: NAME, values: [...]}} block")

    variable, values = loaded.bisect.variable, loaded.bisect.values

    def said(step: Step) -> None:
        ratio = f" ×{step.ratio:.3g}" if step.ratio is not None else ""
        what = (
            f"endpoints: {variable}={step.value} against {values[0]}"
            if step.endpoints
            else (f"step: {variable}={step.value}")
        )
        vs_bad = ""
        if step.vs_bad is not None and step.vs_bad.ratio is not None:
            vs_bad = f"; ×{step.vs_bad.ratio:.3g} against {step.vs_bad.against}"
        print(
            f"{what}: {step.verdict}{ratio}{vs_bad}, {step.failures}/{step.trials} failed — "
            f"{step.reason}",
            file=sys.stderr,
        )

    options = RunOptions(output=output, progress="lines" if verbose else "none")
    result = run_bisect(loaded, options=options, on_step=said, remeasure=remeasure)
    doc = result.to_json()
    ends = result.endpoints
    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    elif ends is not None and ends.verdict != "bad":
        print(
            f"nothing to bisect: {variable}={values[-1]} is not measurably worse than "
            f"{values[0]} ({ends.verdict}: {ends.reason}); check the band "
            f"(confound.threshold) against the change you look for; record: {result.record}"
        )
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
