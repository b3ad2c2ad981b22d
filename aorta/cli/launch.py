"""``aorta launch``: ``aorta sweep run`` under torchrun on every node of a cluster file."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aorta import envvars
from aorta.errors import AortaError, ExitCode, UsageError

from ._options import Command, Output, RecipeFile, Ticket, option, redact_secrets_of

if TYPE_CHECKING:
    from aorta.launch import LaunchResult, Node

CONTEXT = {"allow_interspersed_args": False}


class _Printer:
    """Prints node lines (stdout, ``[node1 host] ...``) and launch events (stderr) from many threads."""

    def __init__(self, *, quiet: bool, output: Path | None = None) -> None:
        self.quiet = quiet
        self.output = output
        self.lock = threading.Lock()

    def line(self, node: Node, text: str) -> None:
        if self.quiet:
            return
        with self.lock:
            if self.output is not None:  # the node's paths as the login node will have them
                from aorta.report import on_login_node

                text = on_login_node(text, str(self.output))
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


# -- options (each with its AORTA_* twin; those a sweep shares are in _options) ----------------

ClusterFile = Annotated[
    Path,
    option(
        "--cluster -c", envvars.CLUSTER, "cluster.json (CVS format) or a hostfile.", dir_okay=False
    ),
]
NprocPerNode = Annotated[
    str | None,
    option(
        "--nproc-per-node",
        envvars.NPROC_PER_NODE,
        "Processes per node: N, 'gpu' or 'auto' (default: the cluster's nproc_per_node/slots, else 1).",
    ),
]
DryRun = Annotated[
    bool,
    option("--dry-run", None, "Check every node and print each node's command; start nothing."),
]
MasterAddr = Annotated[
    str | None,
    option(
        "--master-addr",
        envvars.MASTER_ADDR_OVERRIDE,
        "Rendezvous address (default: the head's vpc_ip).",
    ),
]
MasterPort = Annotated[
    int | None,
    option(
        "--master-port",
        envvars.MASTER_PORT_OVERRIDE,
        "Rendezvous port (default: a free port on the head).",
        min=1,
        max=65535,
    ),
]
Override = Annotated[
    list[str] | None,
    option(
        "--override",
        envvars.LAUNCH_OVERRIDE,
        "KEY=VALUE for the training command; repeatable, passed as one group.",
    ),
]
SetupTimeout = Annotated[
    float,
    option("--setup-timeout", envvars.LAUNCH_SETUP_TIMEOUT, "Seconds to set every node up.", min=1),
]
RunTimeout = Annotated[
    float | None,
    option(
        "--run-timeout",
        envvars.LAUNCH_RUN_TIMEOUT,
        "Seconds the run may take (default: the CVS config's timeout_seconds, else 24 h).",
        min=1,
        show_default=False,
    ),
]
CollectTimeout = Annotated[
    float,
    option(
        "--collect-timeout", envvars.LAUNCH_COLLECT_TIMEOUT, "Seconds to pull artifacts.", min=1
    ),
]
ContainerImage = Annotated[
    str | None,
    option(
        "--container",
        envvars.CONTAINER,
        "Run in a container of this image on every node (the cluster file's "
        "container: block, with this image; see docs/launch.md).",
    ),
]
CvsConfig = Annotated[
    Path | None,
    option(
        "--cvs-config",
        envvars.CVS_CONFIG,
        "A CVS Aorta config (cvs run --config_file): its multi_node: block, base_config, "
        "training_overrides and timeout_seconds as launch options (see docs/launch.md).",
        dir_okay=False,
    ),
]
Quiet = Annotated[
    bool,
    option(
        "--quiet -q", envvars.QUIET, "Do not stream node output (each node's launch.log keeps it)."
    ),
]

# -- Slurm (see docs/launch.md, "Slurm") ---------------------------------------------------------
Slurm = Annotated[
    bool,
    option(
        "--slurm",
        envvars.SLURM,
        "Launch through Slurm: srun inside an allocation, else sbatch (needs --nodes).",
    ),
]
Nodes = Annotated[
    int | None,
    option("--nodes", envvars.SLURM_NODES, "Nodes to sbatch (login node).", min=1),
]
Partition = Annotated[
    str | None,
    option("--partition", envvars.SLURM_PARTITION, "Slurm partition."),
]
TimeLimit = Annotated[
    str | None,
    option("--time", envvars.SLURM_TIME, "Job time limit (MM, HH:MM:SS, D-HH:MM, ...)."),
]
GpusPerNode = Annotated[
    int | None,
    option("--gpus-per-node", envvars.SLURM_GPUS_PER_NODE, "GPUs per node.", min=0),
]
Account = Annotated[str | None, option("--account", envvars.SLURM_ACCOUNT, "Slurm account.")]
SbatchArg = Annotated[
    list[str] | None,
    option("--sbatch-arg", envvars.SLURM_SBATCH_ARGS, "Extra sbatch option; repeatable."),
]
SrunRanks = Annotated[
    bool,
    option(
        "--srun-ranks",
        envvars.SLURM_SRUN_RANKS,
        "One srun task per rank (no torchrun): RANK etc. from SLURM_PROCID.",
    ),
]
NoWait = Annotated[
    bool,
    option(
        "--no-wait", envvars.SLURM_NO_WAIT, "Submit, print the job id and return (see --attach)."
    ),
]
Attach = Annotated[str | None, option("--attach", None, "Follow a job submitted with --no-wait.")]
InJob = Annotated[Path | None, typer.Option("--in-job", hidden=True)]


def launch(
    ctx: typer.Context,
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
    run_timeout: RunTimeout = None,
    collect_timeout: CollectTimeout = 600.0,
    quiet: Quiet = False,
    container: ContainerImage = None,
    cvs_config: CvsConfig = None,
    slurm: Slurm = False,
    nodes: Nodes = None,
    partition: Partition = None,
    time: TimeLimit = None,
    gpus_per_node: GpusPerNode = None,
    account: Account = None,
    sbatch_arg: SbatchArg = None,
    srun_ranks: SrunRanks = False,
    no_wait: NoWait = False,
    attach: Attach = None,
    in_job: InJob = None,
) -> int:
    """Run a recipe's sweep on every node of a cluster (torchrun, rendezvous on the head) and
    gather the results into one run directory."""
    from aorta.launch import LaunchOptions, run

    redact_secrets_of(cluster if cluster.is_file() else None, recipe, cvs_config)
    if slurm:
        named = {"--partition": partition, "--time": time, "--account": account, "--output": output}
        _refuse_control_characters(ctx, named, sbatch_arg or ())
    options = LaunchOptions(
        cluster=cluster,
        recipe=recipe,
        command=command or (),
        overrides=override or (),
        ticket=ticket,
        cvs_config=cvs_config,
        nproc_per_node=nproc_per_node,
        master_addr=master_addr,
        master_port=master_port,
        output=output,
        dry_run=dry_run,
        setup_timeout=setup_timeout,
        run_timeout=run_timeout,
        collect_timeout=collect_timeout,
        container=container,
        slurm=slurm,
        nodes=nodes,
        partition=partition,
        time_limit=time,
        gpus_per_node=gpus_per_node,
        account=account,
        sbatch_args=sbatch_arg or (),
        srun_ranks=srun_ranks,
        no_wait=no_wait,
        attach=attach,
        in_job=in_job,
    )
    printer = _Printer(quiet=quiet, output=output)
    # SIGTERM (a scheduler's or CI job's timeout) tears the nodes down like Ctrl-C; a batch
    # job's own step (--in-job) keeps the default: srun's, in its session, stops with the job.
    with _sigterm_as_interrupt() if in_job is None else contextlib.nullcontext():
        launched = run(options, on_line=printer.line, on_event=printer.event)
    if launched.result is None:  # a batch step's exit code, a Slurm dry run's script, a job id
        print(launched.text, end="")
        return launched.exit_code
    if dry_run and not slurm:
        return _dry_run(launched.result)
    print(f"Wrote results of {len(launched.result.outcomes)} node(s) to {launched.result.run_dir}")
    return ExitCode.OK


def _refuse_control_characters(
    ctx: typer.Context, named: Mapping[str, object], sbatch_args: Sequence[str]
) -> None:
    """Each value goes into an ``#SBATCH`` line of ``aorta.sbatch``: refuse control characters,
    naming the flag and its ``AORTA_*`` twin (a twin's value is where a stray newline hides),
    as the option that declares the flag gives it."""
    twins = {flag: p.envvar for p in ctx.command.params for flag in p.opts if p.envvar}
    given = [(flag, str(v)) for flag, v in named.items() if v is not None]
    given += [("--sbatch-arg", a) for a in sbatch_args]
    for flag, value in given:
        if problem := envvars.control_problem(value):
            twin = twins.get(flag)
            name = f"{flag} (or {twin})" if twin else flag
            raise UsageError(f"{name} {value!r}: {problem}")


def _dry_run(report: LaunchResult) -> int:
    from aorta.report import dry_run_lines

    print("\n".join(dry_run_lines(report)))
    if report.status != "complete":
        bad = [o.describe() for o in report.outcomes.values() if o.status != "ok"]
        raise AortaError(f"dry run: {len(bad)} node(s) not ready: {'; '.join(bad)}")
    return ExitCode.OK
