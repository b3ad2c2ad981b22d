"""``aorta launch``: ``aorta sweep run`` under torchrun on every node of a cluster file."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aorta import envvars
from aorta.errors import AortaError, ExitCode, UsageError

from ._options import Command, Output, RecipeFile, Ticket, option, redact_secrets_of

if TYPE_CHECKING:
    from aorta.launch import Cluster, Deadlines, LaunchSpec, Node
    from aorta.recipe.cluster import NprocPerNode as Nproc

CONTEXT = {"allow_interspersed_args": False}


def _nproc(value: str | None) -> Nproc | None:
    from aorta.launch import parse_nproc

    try:
        return None if value is None else parse_nproc(value)
    except ValueError as exc:
        raise UsageError(f"--nproc-per-node: {exc}") from None


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
                from aorta.report.launch_text import on_login_node

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
    from aorta.launch import Deadlines, load_cluster
    from aorta.recipe.launch_spec import sweep_spec

    def load() -> Cluster:
        the_cluster = load_cluster(cluster)
        return the_cluster if container is None else the_cluster.with_image(container)

    redact_secrets_of(cluster if cluster.is_file() else None, recipe, cvs_config)
    printer = _Printer(quiet=quiet, output=output)
    if slurm and in_job is not None:
        from aorta.launch.slurm import run_in_job

        return run_in_job(in_job, printer.event)
    # The CVS config's train_script runs with the cluster's interpreter: read the cluster first.
    the_cluster = None if slurm or cvs_config is None else load()
    spec: LaunchSpec | None
    if cvs_config is not None:
        spec, run_timeout = _cvs_spec(
            cvs_config,
            the_cluster,
            recipe=recipe,
            command=command or (),
            overrides=override or (),
            nproc_per_node=_nproc(nproc_per_node),
            master_addr=master_addr,
            master_port=master_port,
            ticket=ticket,
            run_timeout=run_timeout,
            printer=printer,
        )
    elif recipe is None and not (slurm and attach):
        raise UsageError("give --recipe FILE (the recipe every node sweeps)")
    else:
        spec = None
        if recipe is not None:
            spec = sweep_spec(
                recipe,
                command=command or (),
                overrides=override or (),
                nproc_per_node=_nproc(nproc_per_node),
                master_addr=master_addr,
                master_port=master_port,
                ticket=ticket,
            )
    run_timeout = run_timeout or 24 * 3600.0
    if slurm and container is not None:
        raise UsageError("--container runs over SSH (the cluster file's nodes), not with --slurm")
    if slurm:
        named = {"partition": partition, "time": time, "gpus-per-node": gpus_per_node}
        named["account"] = account
        _refuse_control_characters(
            ctx,
            {"--partition": partition, "--time": time, "--account": account, "--output": output},
            sbatch_arg or (),
        )
        options = [f"--{k}={v}" for k, v in named.items() if v is not None]
        return _slurm_launch(
            spec if attach is None else None,
            nodes=nodes,
            partition=partition,
            time_limit=time,
            options=[*options, *(sbatch_arg or ())],
            output=output,
            srun_ranks=srun_ranks,
            dry_run=dry_run,
            no_wait=no_wait,
            attach=attach,
            run_timeout=run_timeout,
            printer=printer,
        )
    assert spec is not None
    the_cluster = the_cluster or load()
    for warning in the_cluster.warnings:
        printer.event(f"warning: {cluster}: {warning}")
    deadlines = Deadlines(setup=setup_timeout, run=run_timeout, collect=collect_timeout)
    if dry_run:
        return _dry_run(the_cluster, spec, deadlines=deadlines)
    return _launch(the_cluster, spec, output=output, deadlines=deadlines, printer=printer)


def _cvs_spec(
    path: Path,
    cluster: Cluster | None,
    *,
    command: Sequence[str],
    printer: _Printer,
    run_timeout: float | None,
    **options: Any,
) -> tuple[LaunchSpec, float | None]:
    """:func:`aorta.recipe.launch_spec.cvs_spec`, this command line's options winning."""
    from aorta.recipe.launch_spec import cvs_spec

    if command:
        raise UsageError(f"--cvs-config {path} gives the training command: drop the one after '--'")
    job = cvs_spec(path, cluster, **options)
    for warning in job.warnings:
        printer.event(f"warning: {path}: {warning}")
    return job.spec, run_timeout or job.run_timeout


def _refuse_control_characters(
    ctx: typer.Context, named: dict[str, object], sbatch_args: Sequence[str]
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


def _dry_run(cluster: Cluster, spec: LaunchSpec, *, deadlines: Deadlines) -> int:
    from aorta.launch import dry_run
    from aorta.report.launch_text import dry_run_lines

    report = dry_run(cluster, spec, deadlines=deadlines)
    print("\n".join(dry_run_lines(report)))
    if report.status != "complete":
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


def _slurm_launch(
    spec: LaunchSpec | None,
    *,
    nodes: int | None,
    partition: str | None,
    time_limit: str | None,
    options: Sequence[str],
    output: Path,
    srun_ranks: bool,
    dry_run: bool,
    no_wait: bool,
    attach: str | None,
    run_timeout: float,
    printer: _Printer,
) -> int:
    """``--attach``: follow that job; inside an allocation: the srun step from here; else
    submit the batch job (``--dry-run``: print its script) and follow it (not ``--no-wait``)."""
    from aorta.launch import new_run_id
    from aorta.launch.slurm import SlurmJob, check_request
    from aorta.store.rundir import SBATCH_SCRIPT

    if spec is None:
        job = SlurmJob.attach(str(attach), output=output)
    else:
        if srun_ranks and not isinstance(spec.nproc_per_node or 1, int):
            raise UsageError("--srun-ranks needs a number for --nproc-per-node")
        if nodes is None and dry_run:
            raise UsageError("--dry-run with --slurm shows the sbatch script: give --nodes")
        check_request(nodes=nodes, partition=partition, time_limit=time_limit, dry_run=dry_run)
        job = SlurmJob(output, new_run_id(), srun_ranks=srun_ranks, spec=spec, nodes=nodes)
        if nodes is not None and dry_run:
            print(job.script(spec, nodes=nodes, options=options), end="")
            return ExitCode.OK
    with _sigterm_as_interrupt():
        if spec is not None and nodes is not None:
            job.submit(spec, nodes=nodes, options=options)
            printer.event(f"submitted job {job.job_id} (script {job.staging / SBATCH_SCRIPT})")
            if no_wait:
                print(job.job_id)
                return ExitCode.OK
        result = job.follow(on_line=printer.line, emit=printer.event, timeout=run_timeout)
    print(f"Wrote results of {len(result.outcomes)} node(s) to {result.run_dir}")
    return ExitCode.OK
