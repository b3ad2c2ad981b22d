"""``aorta trace summarize|merge``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from aorta import envvars
from aorta.errors import ExitCode, UsageError

from ._options import Json

app = typer.Typer(
    help="Analyse torch.profiler (Kineto) traces: tables, merging ranks.", no_args_is_help=True
)


Paths = Annotated[
    list[Path],
    typer.Argument(
        help="Trace files (.json / .json.gz) or directories of them, one per rank.",
        show_default=False,
    ),
]
Cache = Annotated[
    Literal["use", "refresh", "off"],
    typer.Option(
        "--cache",
        envvar=envvars.TRACE_CACHE,
        help="Parse cache beside each trace: use it, rebuild it, or neither.",
    ),
]


@app.command()
def summarize(
    paths: Paths,
    as_json: Json = False,
    csv: Annotated[
        Path | None,
        typer.Option("--csv", help="Write every table as DIR/<table>.csv.", file_okay=False),
    ] = None,
    top: Annotated[
        int,
        typer.Option(
            "--top",
            envvar=envvars.TRACE_TOP,
            min=1,
            help="Rows kept in the kernel, op and GEMM tables.",
        ),
    ] = 15,
    cache: Cache = "use",
) -> int:
    """GPU time breakdown, steps, kernels, ops, GEMMs, collectives (and stragglers across ranks)."""
    from aorta.trace import load
    from aorta.trace.summary import summary, summary_json, summary_text

    if as_json and csv is not None:
        raise UsageError("give --json or --csv DIR, not both")
    trace = load(paths, cache=cache)
    tables = summary(trace, top=top)
    if csv is not None:
        csv.mkdir(parents=True, exist_ok=True)
        for name, frame in tables.items():
            frame.to_csv(csv / f"{name}.csv", index=False)
        print(f"wrote {len(tables)} tables to {csv}/")
    elif as_json:
        print(json.dumps(summary_json(trace, tables), indent=2))
    else:
        print(summary_text(trace, tables))
    return ExitCode.OK


@app.command()
def merge(
    paths: Paths,
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="The merged trace (.json or .json.gz).", dir_okay=False
        ),
    ],
    align: Annotated[
        Literal["base-time", "collective-end", "none"],
        typer.Option(
            "--align",
            envvar=envvars.TRACE_ALIGN,
            help="Clock alignment: baseTimeNanoseconds, then optionally collective end times.",
        ),
    ] = "base-time",
    cache: Cache = "use",
) -> int:
    """Merge per-rank traces into one Perfetto-loadable trace (ranks labelled, clocks aligned)."""
    from aorta.trace import merge as merge_traces

    report = merge_traces(paths, output, align=align.replace("-", "_"), cache=cache)  # type: ignore[arg-type]
    shifts = ", ".join(f"rank {r}: {off / 1e3:+.3f} us" for r, off in report.offsets_ns.items())
    print(
        f"wrote {report.output}: {len(report.ranks)} ranks, {report.events} events, {report.bytes_written} bytes ({shifts})"
    )
    return ExitCode.OK
