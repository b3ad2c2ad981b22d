"""``aorta trace summarize|diff|memory|merge``."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

import typer

from aorta import envvars
from aorta.errors import ExitCode, TraceError, UsageError

from ._options import Json, option

app = typer.Typer(
    help="Analyse torch.profiler (Kineto) traces: tables, differences, merging ranks.",
    no_args_is_help=True,
)


def _api() -> ModuleType:
    """``aorta.trace`` (with its summaries): imported when a command runs, not for ``--help``.
    Its modules ``summary`` and ``devices``, not names of the face: ``summary`` is named after
    its function, which a face attribute would shadow once the module loads."""
    import aorta.trace.summary

    return aorta.trace


def _device(text: str | None) -> str | dict[str, Any] | None:
    """``--device``: None, a known device name, or a TraceLens arch JSON file (read here)."""
    if text is None:
        return None
    path = Path(text)
    if path.suffix == ".json" or path.is_file():
        try:
            arch = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"--device {text}: cannot read the arch file: {exc}") from None
        if not isinstance(arch, dict) or not {"mem_bw_gbps", "max_achievable_tflops"} <= set(arch):
            raise UsageError(
                f"--device {text}: an arch file needs mem_bw_gbps and max_achievable_tflops"
            )
        return arch
    try:
        _api().devices.get_device(text)
    except ValueError as exc:
        raise UsageError(f"--device: {exc}") from None
    return text


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An output the user named (``--csv``, ``--plot``) that cannot be written: one
    ``Error: <path>: cannot write: …`` line, as ``trace merge`` says it, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise TraceError(f"{path}: cannot write: {exc.strerror or exc}") from None


Paths = Annotated[
    list[Path],
    typer.Argument(
        help="Trace files (.json / .json.gz) or directories of them, one per rank.",
        show_default=False,
    ),
]
Cache = Annotated[
    Literal["use", "refresh", "off"],
    option(
        "--cache",
        envvars.TRACE_CACHE,
        "Parse cache beside each trace: use it, rebuild it, or neither.",
    ),
]
Workers = Annotated[
    int | None,
    option(
        "--workers",
        envvars.TRACE_WORKERS,
        "Processes decoding one large uncompressed trace (default: the usable CPUs).",
        min=1,
        show_default=False,
    ),
]
Top = Annotated[
    int,
    option(
        "--top",
        envvars.TRACE_TOP,
        "Rows kept in the kernel, op and GEMM tables (diff: items shown).",
        min=1,
    ),
]


@app.command()
def summarize(
    paths: Paths,
    as_json: Json = False,
    csv: Annotated[
        Path | None,
        option("--csv", None, "Write every table as DIR/<table>.csv.", file_okay=False),
    ] = None,
    top: Top = 15,
    cache: Cache = "use",
    workers: Workers = None,
    device: Annotated[
        str | None,
        option(
            "--device",
            envvars.TRACE_DEVICE,
            "Roofline device: a name (H100, MI300X, ...) or a TraceLens arch JSON file; "
            "default: the trace's own GPU.",
        ),
    ] = None,
) -> int:
    """GPU time breakdown, steps, kernels, ops, GEMMs, collectives (and stragglers across ranks),
    and against the hardware: perf-model coverage, TFLOP/s, TB/s, share of the roofline."""
    api = _api()
    if as_json and csv is not None:
        raise UsageError("give --json or --csv DIR, not both")
    trace = api.load(paths, cache=cache, workers=workers)
    tables = api.summary.summary(trace, top=top, device=_device(device))
    if csv is not None:
        with _writing(csv):
            csv.mkdir(parents=True, exist_ok=True)
            for name, frame in tables.items():
                frame.to_csv(csv / f"{name}.csv", index=False)
        print(f"wrote {len(tables)} tables to {csv}/")
    elif as_json:
        print(json.dumps(api.summary.summary_json(trace, tables), indent=2))
    else:
        print(api.summary.summary_text(trace, tables))
    return ExitCode.OK


@app.command()
def diff(
    a: Annotated[
        Path, typer.Argument(help="Trace A (the reference): a file or a directory of rank files.")
    ],
    b: Annotated[Path, typer.Argument(help="Trace B: a file or a directory of rank files.")],
    by: Annotated[
        Literal["kernel", "op", "class", "collective"],
        option(
            "--by",
            envvars.TRACE_DIFF_BY,
            "Items compared: kernels (normalised names), CPU ops, GPU classes, collectives.",
        ),
    ] = "kernel",
    per_step: Annotated[
        bool,
        option("--per-step", envvars.TRACE_PER_STEP, "Compare time per ProfilerStep, not totals."),
    ] = False,
    top: Top = 15,
    as_json: Json = False,
    csv: Annotated[
        Path | None,
        option("--csv", None, "Write every item to this CSV file.", dir_okay=False),
    ] = None,
    cache: Cache = "use",
    workers: Workers = None,
) -> int:
    """Where B's time differs from A's: per item, counts and times side by side, and the breakdown."""
    api = _api()
    if as_json and csv is not None:
        raise UsageError("give --json or --csv PATH, not both")
    sides = [api.load(p, cache=cache, workers=workers) for p in (a, b)]
    table = api.diff(*sides, by=by, per_step=per_step)
    if csv is not None:
        with _writing(csv):
            rows = table.assign(raw_names=["; ".join(n) for n in table["raw_names"]])
            rows.to_csv(csv, index=False)
        print(f"wrote {len(table)} rows to {csv}")
    elif as_json:
        print(json.dumps(api.summary.diff_json(table, top=top), indent=2))
    else:
        print(api.summary.diff_text(table, top=top))
    return ExitCode.OK


@app.command()
def memory(
    path: Annotated[Path, typer.Argument(help="One rank's trace file (.json / .json.gz).")],
    as_json: Json = False,
    plot: Annotated[
        Path | None,
        option(
            "--plot",
            None,
            "Write allocated and reserved memory over time (steps marked) to this PNG.",
            dir_okay=False,
        ),
    ] = None,
) -> int:
    """Memory per device from the trace's [memory] events (profile_memory=True): peaks
    allocated and reserved, allocations and frees, the op running at the peak."""
    from aorta.trace import memory_report

    if path.is_dir():  # the other trace commands take a folder of ranks; this one, one rank
        raise UsageError(f"{path}: a folder: give one rank's trace file (.json or .json.gz)")
    report = memory_report(path)  # a missing or unreadable file: TraceError, as they say it
    if plot is not None:
        from aorta.plot import memory_timeline

        with _writing(plot):
            memory_timeline(report).savefig(plot, dpi=120)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(_memory_text(report))
    if plot is not None and not as_json:
        print(f"wrote {plot}")
    return ExitCode.OK


def _memory_text(report: Any) -> str:
    if report.devices.empty:
        return (
            f"{report.path}: no [memory] events — profile with "
            "torch.profiler.profile(profile_memory=True) to record allocations"
        )
    from aorta.matrix import format_bytes

    def size(n: float) -> str:
        # NaN: no event of the device gave that total (not zero bytes, not -1 bytes).
        return "unknown" if math.isnan(n) else format_bytes(n)

    lines = [f"{report.path}: {len(report.steps)} profiled step(s)"]
    for row in report.devices.to_dict("records"):
        at = f" during {row['peak_step']}" if row["peak_step"] else ""
        where = (
            f"; peak in {row['peak_stack'] or 'no op'}{at}"
            if not math.isnan(row["peak_allocated_bytes"])
            else ""
        )
        lines.append(
            f"  {row['device']}: peak allocated {size(row['peak_allocated_bytes'])}, "
            f"peak reserved {size(row['peak_reserved_bytes'])}; "
            f"{row['allocations']} allocations ({format_bytes(row['allocated_bytes'])}), "
            f"{row['frees']} frees ({format_bytes(row['freed_bytes'])}){where}"
        )
    return "\n".join(lines)


@app.command()
def merge(
    paths: Paths,
    output: Annotated[
        Path,
        option("--output -o", None, "The merged trace (.json or .json.gz).", dir_okay=False),
    ],
    align: Annotated[
        Literal["base-time", "collective-end", "none"],
        option(
            "--align",
            envvars.TRACE_ALIGN,
            "Clock alignment: baseTimeNanoseconds, then optionally collective end times.",
        ),
    ] = "base-time",
    cache: Cache = "use",
) -> int:
    """Merge per-rank traces into one Perfetto-loadable trace (ranks labelled, clocks aligned)."""
    report = _api().merge(paths, output, align=align.replace("-", "_"), cache=cache)
    shifts = ", ".join(f"rank {r}: {off / 1e3:+.3f} us" for r, off in report.offsets_ns.items())
    print(
        f"wrote {report.output}: {len(report.ranks)} ranks, {report.events} events, {report.bytes_written} bytes ({shifts})"
    )
    return ExitCode.OK
