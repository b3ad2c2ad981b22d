"""``aorta sweep run|resume|status``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.models import OptionInfo

from aorta import envvars
from aorta.errors import ExitCode, UsageError
from aorta.recipe import Recipe, load_recipe_pending_command, recipe_from_flags, split_axis
from aorta.run import IsolationChoice, RunOptions
from aorta.store import RunDir

from ._options import (
    Command,
    Json,
    MitigationsFiles,
    Output,
    RecipeFile,
    Strict,
    Ticket,
    Verbose,
    option,
    redact_secrets_of,
)

app = typer.Typer(
    help="Run a recipe's matrix of cells × trials (run, resume, extend, status).",
    no_args_is_help=True,
)


# -- options (each with its AORTA_* twin; those a launch shares are in _options) -------------

DryRun = Annotated[bool, option("--dry-run", None, "Print the plan and check it; run nothing.")]
Timeout = Annotated[
    float | None,
    option(
        "--timeout",
        envvars.TIMEOUT,
        "Deadline per trial in seconds (overrides the recipe).",
        min=0.001,
    ),
]
Isolation = Annotated[
    IsolationChoice | None,
    option("--isolation", envvars.ISOLATION, "Override the recipe's trial_isolation."),
]
Resume = Annotated[
    Path | None,
    option(
        "--resume",
        None,
        "Resume this run directory instead of starting a new one.",
        file_okay=False,
    ),
]
Backend = Annotated[
    str | None,
    option("--backend", envvars.BACKEND, "torch.distributed backend: auto, gloo or nccl."),
]
CheckNumerics = Annotated[
    bool,
    option(
        "--check-numerics",
        envvars.CHECK_NUMERICS,
        "Name each rank's first module whose output is NaN/Inf (the recipe's check_numerics).",
    ),
]

# -- flag mode: a recipe from the command line (aorta.recipe.flags) -----------------------------


def _flag_mode(flags: str, twin: str, help: str, **typer_options: Any) -> OptionInfo:
    """An option of flag mode: in its own help panel, its help saying so."""
    return option(flags, twin, f"Flag mode: {help}", rich_help_panel="Flag mode", **typer_options)


Workload = Annotated[
    str | None,
    _flag_mode("--workload", envvars.WORKLOAD, "the workload every cell runs (no --recipe)."),
]
MitigationAxis = Annotated[
    list[str] | None,
    _flag_mode(
        "--mitigation-axis",
        envvars.MITIGATION_AXIS,
        "mitigations, comma-separated (a+b stacks two); include none.",
    ),
]
EnvironmentAxis = Annotated[
    list[str] | None,
    _flag_mode(
        "--environment-axis",
        envvars.ENVIRONMENT_AXIS,
        "environments, comma-separated: local, a registered name or image:<ref> (default local).",
    ),
]
Trials = Annotated[
    int | None, _flag_mode("--trials", envvars.TRIALS, "trials per cell (default 1).", min=1)
]
Steps = Annotated[int | None, _flag_mode("--steps", envvars.STEPS, "steps per trial.", min=1)]
FlagBaseline = Annotated[
    str | None,
    _flag_mode("--baseline", envvars.BASELINE, "the baseline cell (<mitigation>-<environment>)."),
]
Adaptive = Annotated[
    bool,
    _flag_mode(
        "--adaptive",
        envvars.ADAPTIVE,
        "schedule: adaptive — stop each cell once its verdict is settled "
        "(--trials is then the most per cell, ≥ 5; default 30).",
    ),
]


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Command = None,
    recipe: RecipeFile = None,
    dry_run: DryRun = False,
    output: Output = Path("triage_results"),
    ticket: Ticket = None,
    timeout: Timeout = None,
    isolation: Isolation = None,
    resume: Resume = None,
    mitigations_file: MitigationsFiles = None,
    verbose: Verbose = False,
    as_json: Json = False,
    strict: Strict = False,
    backend: Backend = None,
    workload: Workload = None,
    mitigation_axis: MitigationAxis = None,
    environment_axis: EnvironmentAxis = None,
    trials: Trials = None,
    steps: Steps = None,
    baseline: FlagBaseline = None,
    adaptive: Adaptive = False,
    check_numerics: CheckNumerics = False,
) -> int:
    """Run every cell × trial of a recipe (or print the plan with --dry-run).

    Without --recipe, flag mode builds the recipe from --workload, --mitigation-axis,
    --environment-axis, --trials and --steps. Under torchrun, run the same command on every
    rank: only rank 0 writes and reports.
    """
    return _sweep_or_plan(
        recipe,
        resume=resume,
        dry_run=dry_run,
        strict=strict,
        as_json=as_json,
        flags={
            "workload": workload,
            "mitigation_axis": mitigation_axis,
            "environment_axis": environment_axis,
            "trials": trials,
            "steps": steps,
            "baseline": baseline,
            "adaptive": adaptive or None,
        },
        options=RunOptions(
            command=command or None,
            output=output,
            ticket=ticket,
            timeout_s=timeout,
            isolation=isolation,
            mitigations_files=mitigations_file or (),
            verbose=verbose,
            backend=backend,
            check_numerics=check_numerics or None,
        ),
    )


def _sweep_or_plan(
    recipe: Path | None,
    *,
    resume: Path | None,
    dry_run: bool,
    strict: bool,
    as_json: bool,
    flags: dict[str, Any],
    options: RunOptions,
) -> int:
    """``aorta sweep run``: the recipe from its file or from ``flags`` (flag mode, those not
    ``None``), then the sweep or, with ``dry_run``, its plan."""
    redact_secrets_of(recipe, resume, *options.mitigations_files)
    given = {name: value for name, value in flags.items() if value not in (None, [])}
    if given and (recipe is not None or resume is not None):
        names = ", ".join(f"--{name.replace('_', '-')}" for name in given)
        raise UsageError(f"{names} build a recipe (flag mode): give them without --recipe/--resume")
    source: Path | Recipe | None = recipe  # the file, or flag mode's recipe
    if given:
        source = _flag_recipe(ticket=options.ticket, command=options.command, **flags)
    if source is None and resume is None:
        raise UsageError("give --recipe FILE (or --resume RUN_DIR)")
    if not dry_run:
        return _run(source, resume=resume, options=options, strict=strict, as_json=as_json)
    if source is None:
        raise UsageError(
            "--dry-run needs --recipe or flag mode (a resumed run's plan is in its recipe.resolved.yaml)"
        )
    return _plan(source, options=options, as_json=as_json)


def _plan(source: Path | Recipe, *, options: RunOptions, as_json: bool) -> int:
    """``--dry-run``: the plan as text or JSON, with what the run would warn about."""
    from aorta.report import COMMAND_PENDING, format_plan, plan_to_dict

    # Not the face: aorta.run.prepare is a module named after its function, which an attribute
    # of aorta.run would shadow once the module loads (and vice versa).
    from aorta.run import prepare as preparing

    if not isinstance(source, Recipe):
        # The problems `recipe validate` lists, all of them, not the first stage's.
        preparing.check_recipe_file(source, options=options, pending_ok=True)
    # A probe recipe's plan can be shown before its command is known (it comes after '--').
    shown, pending = (
        (source, False)
        if isinstance(source, Recipe)
        else load_recipe_pending_command(source, command=list(options.command or ()) or None)
    )
    prepared = preparing.prepare(shown, options=options)
    warnings = prepared.warnings
    if as_json:
        # The text plan says so in its command line; JSON's command is null, with the reason.
        notes = [*warnings, *([f"command: {COMMAND_PENDING}"] if pending else [])]
        print(
            json.dumps(
                plan_to_dict(prepared.plan, isolation=prepared.isolation, warnings=notes),
                indent=2,
            )
        )
    else:
        print(format_plan(prepared.plan, isolation=prepared.isolation, warnings=warnings))
    return ExitCode.OK


def _flag_recipe(
    *,
    mitigation_axis: list[str] | None,
    environment_axis: list[str] | None,
    trials: int | None,
    adaptive: bool | None,
    **options: Any,
) -> Recipe:
    """Flag mode: the recipe the axes describe (:func:`aorta.recipe.flags.recipe_from_flags`)."""
    return recipe_from_flags(
        mitigation_axis=split_axis(mitigation_axis),
        environment_axis=split_axis(environment_axis) or ["local"],
        trials=trials or 1,
        adaptive=bool(adaptive),
        **options,
    )


def _run(
    recipe: Path | Recipe | None,
    *,
    options: RunOptions,
    strict: bool,
    as_json: bool = False,
    resume: Path | None = None,
    extend: tuple[int, list[str] | None] | None = None,
) -> int:
    """Run the sweep (``options`` are :func:`aorta.sweep`'s), print the summary (or, with
    ``as_json``, the summary as JSON), map the code."""
    from aorta import sweep
    from aorta.report import format_summary, summary_to_dict

    redact_secrets_of(resume)
    extend_to, extend_cells = extend if extend is not None else (None, None)
    result = sweep(
        recipe, resume=resume, extend_to=extend_to, extend_cells=extend_cells, options=options
    )
    code = result.exit_code  # on every rank: what rank 0 decided
    if code == ExitCode.OK and strict and result.has_findings:
        code = ExitCode.GATE
    if result.rank != 0:
        return code
    redact_secrets_of(result.run_dir)  # the secrets its trials saw (secret_hashes.json)
    if as_json:
        print(json.dumps(summary_to_dict(result, exit_code=code), indent=2))
    else:
        print(format_summary(result))
    return code


@app.command()
def resume(
    run_dir: Annotated[
        Path, typer.Argument(help="The run directory to finish.", file_okay=False, exists=True)
    ],
    mitigations_file: MitigationsFiles = None,
    verbose: Verbose = False,
    strict: Strict = False,
    as_json: Json = False,
) -> int:
    """Finish an interrupted run: run only its missing or unreadable trials."""
    return _run(
        None,
        resume=run_dir,
        options=RunOptions(mitigations_files=mitigations_file or (), verbose=verbose),
        strict=strict,
        as_json=as_json,
    )


@app.command()
def extend(
    run_dir: Annotated[
        Path, typer.Argument(help="The run directory to grow.", file_okay=False, exists=True)
    ],
    trials: Annotated[
        int,
        option(
            "--trials",
            envvars.EXTEND_TRIALS,
            "The trial count per cell to grow to (above the current).",
            min=1,
        ),
    ],
    cells: Annotated[
        list[str] | None,
        option("--cells", envvars.EXTEND_CELLS, "Only these cells (repeat, or comma-separate)."),
    ] = None,
    mitigations_file: MitigationsFiles = None,
    verbose: Verbose = False,
    strict: Strict = False,
) -> int:
    """Grow a finished run in place: more trials per cell, same run directory (resumable).

    The extension is recorded in the manifest and matrix.md says the run was extended. Adding
    trials after seeing results makes p-values optimistic (optional stopping): see
    docs/statistics.md. On an adaptive run it raises the cap: undecided cells run on under the
    same anytime-valid rule, decided ones stay stopped (docs/recipes.md).
    """
    chosen = [c.strip() for item in cells or [] for c in item.split(",") if c.strip()]
    return _run(
        None,
        resume=run_dir,
        extend=(trials, chosen or None),
        options=RunOptions(mitigations_files=mitigations_file or (), verbose=verbose),
        strict=strict,
    )


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.", file_okay=False, exists=True)],
    as_json: Json = False,
) -> int:
    """Show how far a run got (from its manifest, its lock and its trial records).

    A run whose manifest says ``running`` but whose sweep is gone (``kill -9``, a lost node)
    shows as ``interrupted``, with the command that resumes it. A ``complete`` run with a
    trial record missing since (deleted, truncated) shows as ``incomplete``, naming the
    missing trials and the resume command that runs them.
    """
    rd = RunDir.open(run_dir)
    redact_secrets_of(rd.path)
    manifest = rd.manifest()
    state, owner = rd.live_status()
    # The manifest says complete when the loop ended; a record lost since (deleted, truncated,
    # a copy cut short) makes the run incomplete again, and a resume reruns exactly those.
    missing = rd.missing_trials() if state == "complete" else {}
    if missing:
        state = "incomplete"
    counts: dict[str, int] = {}
    for rec in rd.trial_records():
        counts[rec.status.value] = counts.get(rec.status.value, 0) + 1
    info = {
        "run_dir": str(rd.path),
        "status": state,
        "manifest_status": manifest.get("status"),
        "owner": owner,
        "n_trials": manifest.get("n_trials"),
        "recorded": sum(counts.values()),
        "statuses": counts,
        "missing": missing,
    }
    if as_json:
        print(json.dumps(info, indent=2))
        return ExitCode.OK
    done = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
    why = ""
    pid = (owner or {}).get("pid", manifest.get("pid"))
    if state == "running" and owner and owner.get("alive") is None:
        why = f" (pid {pid} on {owner.get('host')}; not checkable from this host)"
    elif state == "running":
        why = f" (pid {pid})"
    elif state == "interrupted" and manifest.get("status") == "running":
        why = f" (owner pid {pid} gone)"
    line = (
        f"{rd.path}: {state}{why} — {info['recorded']}/{info['n_trials']} trials recorded ({done})"
    )
    resume = rd.command(f"sweep resume {shlex.quote(str(rd.path))}")
    if missing:
        line += f" — missing: {_trial_list(missing)} — run them with: {resume}"
    elif state == "interrupted":
        line += f" — resume with: {resume}"
    print(line)
    return ExitCode.OK


def _trial_list(missing: dict[str, list[int]], *, at_most: int = 8) -> str:
    """``cell trial 1, other trials 0, 3`` — the first ``at_most`` cells, then a count."""
    parts = [
        f"{cell} trial{'s' if len(trials) > 1 else ''} {', '.join(map(str, trials))}"
        for cell, trials in list(missing.items())[:at_most]
    ]
    if len(missing) > at_most:
        parts.append(f"and {len(missing) - at_most} more cell(s)")
    return "; ".join(parts)
