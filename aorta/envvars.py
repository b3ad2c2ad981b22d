"""Every environment variable aorta reads or sets, in one place.

Each CLI flag has an ``AORTA_*`` twin (typer's ``envvar=``); the variables aorta hands to a
workload are listed too, as are the launcher identity variables that a cell can never set.
"""

from __future__ import annotations

__all__ = [
    "CLI_TWINS",
    "ENGINE_PROVIDED",
    "LAUNCHER_IDENTITY",
    "LAUNCHER_IDENTITY_PREFIXES",
    "LAUNCH_PROVIDED",
    "is_reserved_env_name",
]

# --- twins of CLI flags -----------------------------------------------------------------------
RECIPE = "AORTA_RECIPE"
OUTPUT = "AORTA_OUTPUT"
TICKET = "AORTA_TICKET"
TIMEOUT = "AORTA_TIMEOUT"
MITIGATIONS_FILE = "AORTA_MITIGATIONS_FILE"
ISOLATION = "AORTA_ISOLATION"
VERBOSE = "AORTA_VERBOSE"
BACKEND = "AORTA_BACKEND"
CLUSTER = "AORTA_CLUSTER"
NPROC_PER_NODE = "AORTA_NPROC_PER_NODE"
MASTER_ADDR_OVERRIDE = "AORTA_MASTER_ADDR"
MASTER_PORT_OVERRIDE = "AORTA_MASTER_PORT"
BASELINE = "AORTA_BASELINE"
ALPHA = "AORTA_ALPHA"
METRIC = "AORTA_METRIC"
FAIL_ON_REGRESSION = "AORTA_FAIL_ON_REGRESSION"
#: Not AORTA_SEED: that one is the per-trial seed handed to workloads.
BOOTSTRAP_SEED = "AORTA_BOOTSTRAP_SEED"
BOOTSTRAP_RESAMPLES = "AORTA_BOOTSTRAP_RESAMPLES"
JSON_OUTPUT = "AORTA_JSON"
LAUNCH_SETUP_TIMEOUT = "AORTA_LAUNCH_SETUP_TIMEOUT"
LAUNCH_RUN_TIMEOUT = "AORTA_LAUNCH_RUN_TIMEOUT"
LAUNCH_COLLECT_TIMEOUT = "AORTA_LAUNCH_COLLECT_TIMEOUT"
LAUNCH_OVERRIDE = "AORTA_LAUNCH_OVERRIDE"
TRACES = "AORTA_TRACES"
RANKS = "AORTA_RANKS"
TRACE_TOP = "AORTA_TRACE_TOP"
TRACE_CACHE = "AORTA_TRACE_CACHE"
TRACE_ALIGN = "AORTA_TRACE_ALIGN"

CLI_TWINS: dict[str, str] = {
    "--recipe": RECIPE,
    "--output": OUTPUT,
    "--ticket": TICKET,
    "--timeout": TIMEOUT,
    "--mitigations-file": MITIGATIONS_FILE,
    "--isolation": ISOLATION,
    "--verbose": VERBOSE,
    "--backend": BACKEND,
    "--cluster": CLUSTER,
    "--nproc-per-node": NPROC_PER_NODE,
    "--master-addr": MASTER_ADDR_OVERRIDE,
    "--master-port": MASTER_PORT_OVERRIDE,
    "--baseline": BASELINE,
    "--alpha": ALPHA,
    "--metric": METRIC,
    "--fail-on-regression": FAIL_ON_REGRESSION,
    "--seed": BOOTSTRAP_SEED,
    "--resamples": BOOTSTRAP_RESAMPLES,
    "--json": JSON_OUTPUT,
    # `aorta launch` (its --output shares AORTA_OUTPUT with `sweep run`: both name the root of
    # the run directories on this machine)
    "--setup-timeout": LAUNCH_SETUP_TIMEOUT,
    "--run-timeout": LAUNCH_RUN_TIMEOUT,
    "--collect-timeout": LAUNCH_COLLECT_TIMEOUT,
    "--override": LAUNCH_OVERRIDE,
    "--traces": TRACES,
    # `aorta trace summarize|merge`
    "--top": TRACE_TOP,
    "--cache": TRACE_CACHE,
    "--align": TRACE_ALIGN,
    "--ranks": RANKS,
}

# --- what the engine hands to every trial -----------------------------------------------------
RUN_DIR = "AORTA_RUN_DIR"
CELL = "AORTA_CELL"
TRIAL = "AORTA_TRIAL"
SEED = "AORTA_SEED"
ARTIFACT_DIR = "AORTA_ARTIFACT_DIR"
ENV_FILE = "AORTA_ENV_FILE"
#: Set by a launcher without an elastic agent store: the first of 1000 ports reserved for
#: per-trial rendezvous of process-isolated distributed trials.
TRIAL_MASTER_PORT_BASE = "AORTA_TRIAL_MASTER_PORT_BASE"
#: Set by ``aorta launch`` so every rank on every node writes into one run directory.
RUN_ID = "AORTA_RUN_ID"

ENGINE_PROVIDED: frozenset[str] = frozenset(
    {RUN_DIR, CELL, TRIAL, SEED, ARTIFACT_DIR, ENV_FILE, TRIAL_MASTER_PORT_BASE, RUN_ID}
)

# --- what `aorta launch` hands to every process on every node --------------------------------
#: The launcher's node rank (0 = the head) of the node a process runs on.
NODE_RANK = "AORTA_NODE_RANK"
#: A per-run, per-node folder; everything written under it is collected into
#: ``<run_dir>/combined_traces/node_<rank>/``.
LAUNCH_OUTPUT_DIR = "AORTA_LAUNCH_OUTPUT"

LAUNCH_PROVIDED: frozenset[str] = frozenset({RUN_ID, NODE_RANK, LAUNCH_OUTPUT_DIR})

# --- owned by torchrun / srun / mpirun: never settable by a cell ------------------------------
LAUNCHER_IDENTITY: frozenset[str] = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    }
)
LAUNCHER_IDENTITY_PREFIXES: tuple[str, ...] = (
    "TORCHELASTIC_",
    "SLURM_",
    "OMPI_COMM_WORLD_",
    "PMI_",
    "PMIX_",
)


def is_reserved_env_name(name: str) -> bool:
    """True for names a recipe may not set: launcher identity and aorta's own trial variables."""
    return (
        name in LAUNCHER_IDENTITY
        or name in ENGINE_PROVIDED
        or name in LAUNCH_PROVIDED
        or name.startswith(LAUNCHER_IDENTITY_PREFIXES)
    )
