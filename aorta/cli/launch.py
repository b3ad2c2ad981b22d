"""``aorta launch``: ``aorta sweep run`` under torchrun on every node of a cluster file."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aorta import envvars
from aorta.errors import AortaError, ExitCode, UsageError

if TYPE_CHECKING:
    from aorta.launch import Cluster, Deadlines, LaunchSpec, Node

CONTEXT = {"allow_interspersed_args": False}


def _nproc(value: str | None) -> int | str | None:
    from aorta.launch import parse_nproc

    try:
        return None if value is None else parse_nproc(value)
    except ValueError as exc:
        raise UsageError(f"--nproc-per-node: {exc}") from None


class _Printer:
    """Prints node lines (stdout, ``[node1 host] ...``) and launch events (stderr) from many threads."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.lock = threading.Lock()

    def line(self, node: Node, text: str) -> None:
        if self.quiet:
            return
        with self.lock:
            print(f"[{node.label}] {text}", flush=True)

    def event(self, text: str) -> None:
        with self.lock:
            print(f"launch: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler or CI job timeout stopping us) tears the nodes down like Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- options (each with its AORTA_* twin) -------------------------------------------------------

Command = Annotated[
    list[str] | None,
    typer.Argument(
        help="Probe mode: the command every trial runs, after '--'.", show_default=False
    ),
]
ClusterFile = Annotated[
    Path,
    typer.Option(
        "--cluster",
        "-c",
        envvar=envvars.CLUSTER,
        help="cluster.json (CVS format) or a hostfile.",
        dir_okay=False,
    ),
]
RecipeFile = Annotated[
    Path | None,
    typer.Option(
        "--recipe", "-r", envvar=envvars.RECIPE, help="The recipe to sweep.", dir_okay=False
    ),
]
NprocPerNode = Annotated[
    str | None,
    typer.Option(
        "--nproc-per-node",
        envvar=envvars.NPROC_PER_NODE,
        help="Processes per node: N, 'gpu' or 'auto' (default: the cluster's nproc_per_node/slots, else 1).",
    ),
]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Check every node and print each node's command; start nothing."
    ),
]
Output = Annotated[
    Path,
    typer.Option("--output", "-o", envvar=envvars.OUTPUT, help="Root of the run directories here."),
]
Ticket = Annotated[
    str | None,
    typer.Option("--ticket", envvar=envvars.TICKET, help="Override the recipe's ticket."),
]
MasterAddr = Annotated[
    str | None,
    typer.Option(
        "--master-addr",
        envvar=envvars.MASTER_ADDR_OVERRIDE,
        help="Rendezvous address (default: the head's vpc_ip).",
    ),
]
MasterPort = Annotated[
    int | None,
    typer.Option(
        "--master-port",
        envvar=envvars.MASTER_PORT_OVERRIDE,
        help="Rendezvous port (default: a free port on the head).",
        min=1,
        max=65535,
    ),
]
Override = Annotated[
    list[str] | None,
    typer.Option(
        "--override",
        envvar=envvars.LAUNCH_OVERRIDE,
        help="KEY=VALUE for the training command; repeatable, passed as one group.",
    ),
]
SetupTimeout = Annotated[
    float,
    typer.Option(
        "--setup-timeout",
        envvar=envvars.LAUNCH_SETUP_TIMEOUT,
        help="Seconds to set every node up.",
        min=1,
    ),
]
RunTimeout = Annotated[
    float,
    typer.Option(
        "--run-timeout", envvar=envvars.LAUNCH_RUN_TIMEOUT, help="Seconds the run may take.", min=1
    ),
]
CollectTimeout = Annotated[
    float,
    typer.Option(
        "--collect-timeout",
        envvar=envvars.LAUNCH_COLLECT_TIMEOUT,
        help="Seconds to pull artifacts.",
        min=1,
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Do not stream node output (each node's launch.log keeps it)."
    ),
]


def launch(
    command: Command = None,
    cluster: ClusterFile = Path("cluster.json"),
    recipe: RecipeFile = None,
    nproc_per_node: NprocPerNode = None,
    dry_run: DryRun = False,
    output: Output = Path("triage_results"),
    ticket: Ticket = None,
    master_addr: MasterAddr = None,
    master_port: MasterPort = None,
    override: Override = None,
    setup_timeout: SetupTimeout = 120.0,
    run_timeout: RunTimeout = 24 * 3600.0,
    collect_timeout: CollectTimeout = 600.0,
    quiet: Quiet = False,
) -> int:
    """Run a recipe's sweep on every node of a cluster (torchrun, rendezvous on the head) and
    gather the results into one run directory."""
    from aorta.launch import Deadlines, load_cluster, sweep_spec

    if recipe is None:
        raise UsageError("give --recipe FILE (the recipe every node sweeps)")
    the_cluster = load_cluster(cluster)
    spec = sweep_spec(
        recipe,
        command=command or (),
        overrides=override or (),
        nproc_per_node=_nproc(nproc_per_node),
        master_addr=master_addr,
        master_port=master_port,
        ticket=ticket,
    )
    printer = _Printer(quiet=quiet)
    for warning in the_cluster.warnings:
        printer.event(f"warning: {cluster}: {warning}")
    deadlines = Deadlines(setup=setup_timeout, run=run_timeout, collect=collect_timeout)
    if dry_run:
        return _dry_run(the_cluster, spec, deadlines=deadlines)
    return _launch(the_cluster, spec, output=output, deadlines=deadlines, printer=printer)


def _dry_run(cluster: Cluster, spec: LaunchSpec, *, deadlines: Deadlines) -> int:
    from aorta.launch import dry_run
    from aorta.report.launch import dry_run_lines

    report = dry_run(cluster, spec, deadlines=deadlines)
    print("\n".join(dry_run_lines(report)))
    if not report.ok:
        bad = [o.describe() for o in report.outcomes.values() if o.status != "ok"]
        raise AortaError(f"dry run: {len(bad)} node(s) not ready: {'; '.join(bad)}")
    return ExitCode.OK


def _launch(
    cluster: Cluster, spec: LaunchSpec, *, output: Path, deadlines: Deadlines, printer: _Printer
) -> int:
    from aorta.launch import launch

    # A failed node raises LaunchFailed (exit code ERROR) after teardown and collection.
    with _sigterm_as_interrupt():
        result = launch(
            cluster,
            spec,
            output=output,
            deadlines=deadlines,
            on_line=printer.line,
            on_event=printer.event,
        )
    print(f"Wrote results of {len(result.outcomes)} node(s) to {result.run_dir}")
    return ExitCode.OK
