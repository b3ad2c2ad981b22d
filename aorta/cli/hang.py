"""``aorta hang analyze``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from aorta import envvars, hang
from aorta.errors import ExitCode, UsageError
from aorta.hang import MAX_MEMORY, MAX_RANK, paused_gc
from aorta.store import HANG_DIR, RunDir

from ._options import Json, option, say_warnings

app = typer.Typer(
    help="Hang forensics: who the other ranks wait for, and where.", no_args_is_help=True
)


@app.command()
def analyze(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Flight-recorder dumps (JSON or pickle), py-spy JSON, capture files and logs, "
            "or folders of them: a folder of per-rank dumps (the rank is the trailing number "
            "of each name, as PyTorch writes them), a trial folder, or a run directory (each "
            "of its trials that left evidence).",
            show_default=False,
        ),
    ],
    as_json: Json = False,
    world_size: Annotated[
        int | None,
        option(
            "--world-size",
            envvars.HANG_WORLD_SIZE,
            "The job's number of ranks (default: one more than the highest rank seen); "
            "ranks without evidence count as such.",
            min=1,
            max=MAX_RANK + 1,
            show_default=False,
        ),
    ] = None,
    max_memory: Annotated[
        float,
        option(
            "--max-memory",
            envvars.HANG_MAX_MEMORY,
            "GiB the evidence may take in memory: each file is charged the most it can take "
            "before it is read, and a folder that needs more is refused, naming the file.",
            min=0.001,
            max=2**20,
        ),
    ] = MAX_MEMORY / 2**30,
) -> int:
    """Match the ranks' dumps, stacks and logs of one hang: the collective where they diverge,
    who waits, who never came, and each culprit's frame. A run directory: each of its trials
    that left evidence, one after another."""
    budget = int(max_memory * 2**30)
    if len(paths) == 1 and RunDir(paths[0]).manifest_path.is_file():
        return _run(RunDir(paths[0]), as_json=as_json, world_size=world_size, budget=budget)
    # The dumps are millions of acyclic objects: with the collector paused until they are
    # freed (when analyze returns), no collection ever walks them (~0.7 CPU-s for 64 ranks).
    with paused_gc():
        evidence, nodes = hang.load_incident(paths, max_memory=budget)
        report = _analyze(evidence, world_size, nodes)
    if as_json:
        print(json.dumps(hang.json_ready(report), indent=2))
    else:
        print(hang.text(report))
    return ExitCode.OK


def _run(rd: RunDir, *, as_json: bool, world_size: int | None, budget: int) -> int:
    trials = sorted(p.parent for p in rd.cells_dir.glob(f"*/*/{HANG_DIR}") if p.is_dir())
    if not trials:
        raise UsageError(f"{rd.path}: no trial of this run left hang evidence ({HANG_DIR}/)")
    found: list[tuple[str, hang.HangReport]] = []
    failed: list[tuple[str, str]] = []
    for folder in trials:
        where = folder.relative_to(rd.path).as_posix()
        # One trial's evidence that does not read (empty, truncated, hostile) is that trial's
        # answer, not the run's: the other trials' hangs are still analysed and shown.
        try:
            with paused_gc():
                evidence, nodes = hang.load_incident([folder], max_memory=budget)
                report = _analyze(evidence, world_size, nodes)
        except hang.HangEvidenceError as exc:
            failed.append((where, str(exc)))
            continue
        found.append((where, report))
    if not found:
        raise UsageError("; ".join(f"{t}: {why}" for t, why in failed))
    say_warnings(f"{where}: left out: {why}" for where, why in failed)
    if as_json:
        reports: list[dict[str, Any]] = [{"trial": t, **hang.json_ready(r)} for t, r in found]
        reports += [{"trial": t, "error": why} for t, why in failed]
        print(json.dumps({"trials": reports}, indent=2))
    else:
        print("\n\n".join(f"{t}\n{hang.text(r)}" for t, r in found))
    return ExitCode.OK


def _analyze(
    evidence: list[hang.RankEvidence],
    world_size: int | None,
    nodes: tuple[hang.NodeEvidence, ...],
) -> hang.HangReport:
    # A world smaller than the evidence would hide the ranks past it (a culprit among them):
    # the user's number contradicts the files, bad input. (The library keeps taking it: a
    # capture's aorta world may be smaller than the job its ranks launched.)
    top = max((e.rank for e in evidence), default=-1)
    if world_size is not None and top >= world_size:
        raise UsageError(f"--world-size {world_size}: the evidence names rank {top}, past it")
    return hang.analyze(evidence, world_size=world_size, nodes=nodes)
