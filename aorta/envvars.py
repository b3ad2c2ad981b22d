"""Every environment variable aorta reads or sets, in one place, and the one rule for which
names and values may be set.

Each CLI flag has an ``AORTA_*`` twin, named here and given to the option that declares the
flag (typer's ``envvar=``): the option is the one home of which flag a variable stands for, and
the flags without a twin are listed, with the reason, in ``aorta.cli._options.NO_TWIN``
(tests/cli/test_twins.py walks the command to hold both). The variables aorta hands to a
workload are listed too, as are the launcher identity variables that a cell can never set.
:func:`env_problems` is the only validator of a name/value pair: recipes, the mitigation
registry, cluster files and launch specs all call it, so they accept and refuse the same things.

>>> env_problems({"NCCL_DEBUG": "INFO", "RANK": "3", "BAD NAME": "x", "V": "a\\nb"})
[('RANK', 'RANK belongs to the launcher or to aorta; it cannot be set here'), ('BAD NAME', "'BAD NAME' is not a valid environment variable name (letters, digits and '_', not starting with a digit)"), ('V', 'contains a NUL or newline character, which a process environment cannot carry')]
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from aorta.errors import describe_value

__all__ = [
    "ENGINE_PROVIDED",
    "ENV_NAME_RE",
    "LAUNCHER_IDENTITY",
    "LAUNCHER_IDENTITY_PREFIXES",
    "LAUNCH_PROVIDED",
    "control_problem",
    "env_problems",
    "is_reserved_env_name",
    "name_problem",
    "slurm_trial_port_base",
    "value_problem",
]

# --- twins of CLI flags (one variable, one meaning: flags that share one are the same option) ---
RECIPE = "AORTA_RECIPE"
OUTPUT = "AORTA_OUTPUT"
TICKET = "AORTA_TICKET"
TIMEOUT = "AORTA_TIMEOUT"
MITIGATIONS_FILE = "AORTA_MITIGATIONS_FILE"
#: `sweep run|resume|extend --strict`: exit 4 when a cell has failing or erroring trials.
STRICT = "AORTA_STRICT"
#: `recipe show --resolved`.
RESOLVED = "AORTA_RESOLVED"
ISOLATION = "AORTA_ISOLATION"
VERBOSE = "AORTA_VERBOSE"
BACKEND = "AORTA_BACKEND"
#: `sweep run --check-numerics`: the recipe's ``check_numerics`` (docs/memory.md).
CHECK_NUMERICS = "AORTA_CHECK_NUMERICS"
CLUSTER = "AORTA_CLUSTER"
NPROC_PER_NODE = "AORTA_NPROC_PER_NODE"
MASTER_ADDR_OVERRIDE = "AORTA_MASTER_ADDR"
MASTER_PORT_OVERRIDE = "AORTA_MASTER_PORT"
BASELINE = "AORTA_BASELINE"
ALPHA = "AORTA_ALPHA"
METRIC = "AORTA_METRIC"
FAIL_ON_REGRESSION = "AORTA_FAIL_ON_REGRESSION"
# `aorta bisect --remeasure`: the endpoints run again beside every midpoint
BISECT_REMEASURE = "AORTA_BISECT_REMEASURE"
STAT = "AORTA_STAT"
EXTEND_TRIALS = "AORTA_EXTEND_TRIALS"
EXTEND_CELLS = "AORTA_EXTEND_CELLS"
#: Not AORTA_SEED: that one is the per-trial seed handed to workloads.
BOOTSTRAP_SEED = "AORTA_BOOTSTRAP_SEED"
BOOTSTRAP_RESAMPLES = "AORTA_BOOTSTRAP_RESAMPLES"
JSON_OUTPUT = "AORTA_JSON"
LAUNCH_SETUP_TIMEOUT = "AORTA_LAUNCH_SETUP_TIMEOUT"
LAUNCH_RUN_TIMEOUT = "AORTA_LAUNCH_RUN_TIMEOUT"
LAUNCH_COLLECT_TIMEOUT = "AORTA_LAUNCH_COLLECT_TIMEOUT"
LAUNCH_OVERRIDE = "AORTA_LAUNCH_OVERRIDE"
QUIET = "AORTA_QUIET"
CONTAINER = "AORTA_CONTAINER"
CVS_CONFIG = "AORTA_CVS_CONFIG"
SLURM = "AORTA_SLURM"
SLURM_NODES = "AORTA_SLURM_NODES"
SLURM_PARTITION = "AORTA_SLURM_PARTITION"
SLURM_TIME = "AORTA_SLURM_TIME"
SLURM_GPUS_PER_NODE = "AORTA_SLURM_GPUS_PER_NODE"
SLURM_ACCOUNT = "AORTA_SLURM_ACCOUNT"
SLURM_SBATCH_ARGS = "AORTA_SLURM_SBATCH_ARGS"
SLURM_SRUN_RANKS = "AORTA_SLURM_SRUN_RANKS"
SLURM_NO_WAIT = "AORTA_SLURM_NO_WAIT"
TRACES = "AORTA_TRACES"
RANKS = "AORTA_RANKS"
TRACE_TOP = "AORTA_TRACE_TOP"
TRACE_CACHE = "AORTA_TRACE_CACHE"
TRACE_ALIGN = "AORTA_TRACE_ALIGN"
#: `trace summarize --device`: the roofline's device.
TRACE_DEVICE = "AORTA_TRACE_DEVICE"
#: `trace diff --by` (its items: kernel, op, class, collective; not `compare --by`'s).
TRACE_DIFF_BY = "AORTA_TRACE_DIFF_BY"
TRACE_PER_STEP = "AORTA_TRACE_PER_STEP"
# `aorta bundle`
BUNDLE_OUTPUT = "AORTA_BUNDLE_OUTPUT"
BUNDLE_MAX_SIZE = "AORTA_BUNDLE_MAX_SIZE"
BUNDLE_TRACES = "AORTA_BUNDLE_TRACES"
SCRUB_ENV_KEYS = "AORTA_SCRUB_ENV_KEYS"
SCRUB_PATHS = "AORTA_SCRUB_PATHS"
SCRUB_IP_ADDRESSES = "AORTA_SCRUB_IP_ADDRESSES"
REVIEW = "AORTA_REVIEW"
# `aorta sweep run` flag mode (a recipe built from the command line)
WORKLOAD = "AORTA_WORKLOAD"
MITIGATION_AXIS = "AORTA_MITIGATION_AXIS"
ENVIRONMENT_AXIS = "AORTA_ENVIRONMENT_AXIS"
TRIALS = "AORTA_TRIALS"
STEPS = "AORTA_STEPS"
ADAPTIVE = "AORTA_ADAPTIVE"
HTML = "AORTA_HTML"
TRACE_WORKERS = "AORTA_TRACE_WORKERS"
# `aorta compare --explain CELL --by ITEMS`
EXPLAIN = "AORTA_EXPLAIN"
EXPLAIN_BY = "AORTA_EXPLAIN_BY"
# `aorta compare --signature NAME`
SIGNATURE = "AORTA_SIGNATURE"
# `aorta hang analyze --world-size N`
HANG_WORLD_SIZE = "AORTA_HANG_WORLD_SIZE"
# `aorta hang analyze --max-memory GIB`
HANG_MAX_MEMORY = "AORTA_HANG_MAX_MEMORY"

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
#: The windows a Slurm job's base is picked from: 10000-31999, below Linux's ephemeral port
#: range (32768-60999 by default), where a connection's source port or a bind to port 0 could
#: already hold a trial's port; 29000-29999 (torch's MASTER_PORT 29500) left out.
_PORT_WINDOWS = tuple(k * 1000 for k in range(10, 32) if k != 29)
#: Set by ``aorta launch`` so every rank on every node writes into one run directory.
RUN_ID = "AORTA_RUN_ID"
#: Markers every process of a sweep / of one trial inherits, so none outlives them
#: (:mod:`aorta.run.orphans`).
SWEEP_TOKEN = "AORTA_SWEEP_TOKEN"
TRIAL_TOKEN = "AORTA_TRIAL_TOKEN"
#: Set for a trial armed for hang forensics (:mod:`aorta.run.forensics`): the trial's token,
#: which names the flight-recorder listener of each of its Python processes.
FR_LISTEN = "AORTA_FR_LISTEN"
#: ... and the folder its listeners write their dumps into (the trial's ``hang/``).
FR_DIR = "AORTA_FR_DIR"
#: Set for a trial run with ``check_numerics``: where its numerics locator writes its findings
#: (:mod:`aorta.run.numerics`).
NUMERICS_DIR = "AORTA_NUMERICS_DIR"

ENGINE_PROVIDED: frozenset[str] = frozenset(
    {
        RUN_DIR,
        CELL,
        TRIAL,
        SEED,
        ARTIFACT_DIR,
        ENV_FILE,
        TRIAL_MASTER_PORT_BASE,
        RUN_ID,
        SWEEP_TOKEN,
        TRIAL_TOKEN,
        FR_LISTEN,
        FR_DIR,
        NUMERICS_DIR,
    }
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


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def name_problem(name: object, *, allow: Collection[str] = ()) -> str | None:
    """Why ``name`` cannot be set as an environment variable, or ``None`` when it can.

    ``allow`` lists reserved names this caller may set all the same (a launcher may set
    :data:`TRIAL_MASTER_PORT_BASE`).
    """
    if not isinstance(name, str) or not ENV_NAME_RE.match(name):
        return (
            f"{name!r} is not a valid environment variable name "
            "(letters, digits and '_', not starting with a digit)"
        )
    if is_reserved_env_name(name) and name not in allow:
        return f"{name} belongs to the launcher or to aorta; it cannot be set here"
    return None


_CONTROL_NAMES = {
    "\t": "a tab",
    "\n": "a line break",
    "\r": "a carriage return",
    "\x1b": "an escape",
}


def control_problem(value: str, *, allow: str = "") -> str | None:
    """Why ``value`` cannot be written into a shell script or a line-based file, or ``None``.

    A control character (U+0000–U+001F, U+007F) other than those in ``allow`` is refused: a
    line break in an ``#SBATCH`` option ends that line and starts a shell line of its own (and
    makes sbatch ignore every ``#SBATCH`` line after it); an escape sequence rewrites the
    terminal of whoever reads the script or the plan.

    >>> control_problem("gpu-team"), control_problem("a\\tb", allow="\\t")
    (None, None)
    >>> control_problem("acct\\nrm -rf ~")
    'contains a line break (U+000A), which would split the line it is written into and start a shell line of its own'
    """
    bad = next((c for c in value if (c < " " or c == "\x7f") and c not in allow), None)
    if bad is None:
        return None
    name = _CONTROL_NAMES.get(bad, "a control character")
    return (
        f"contains {name} (U+{ord(bad):04X}), which would split the line it is written into "
        "and start a shell line of its own"
        if bad in "\n\r"
        else f"contains {name} (U+{ord(bad):04X}); control characters are refused in anything "
        "written into a shell script or an env file"
    )


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be an environment variable's value, or ``None`` when it can.

    Values are strings (YAML's unquoted ``on``/``yes``/numbers are not), without NUL or line
    breaks: a process environment cannot carry a NUL, and a line break would split the
    ``env`` files and ``KEY=value`` lines aorta writes. Other control characters but a tab
    are refused too (:func:`control_problem`).
    """
    if isinstance(value, bool):
        return (
            f"must be a string, got {describe_value(value)} "
            "(YAML reads unquoted on/off/yes/no/true/false as booleans): quote the value"
        )
    if not isinstance(value, str):
        return f'must be a string, got {describe_value(value)}: quote the value ("{value}")'
    if "\x00" in value or "\n" in value or "\r" in value:
        return "contains a NUL or newline character, which a process environment cannot carry"
    # A value is written into env files (`export K='v'`, docker --env-file) and shown in plans.
    return control_problem(value, allow="\t")


def env_problems(
    env: Mapping[Any, object], *, allow: Collection[str] = ()
) -> list[tuple[str, str]]:
    """Every ``(name, message)`` problem of an environment overlay; empty when it can be set."""
    out: list[tuple[str, str]] = []
    for name, value in env.items():
        problem = name_problem(name, allow=allow) or value_problem(value)
        if problem:
            out.append((str(name), problem))
    return out


def slurm_trial_port_base(job_id: int) -> int:
    """:data:`TRIAL_MASTER_PORT_BASE` for a Slurm job: one of 21 windows of 1000 ports, picked
    by the job id (so jobs sharing nodes rarely meet), all below the ephemeral port range.

    >>> slurm_trial_port_base(4), slurm_trial_port_base(4 + 21), slurm_trial_port_base(19)
    (14000, 14000, 30000)
    """
    return _PORT_WINDOWS[job_id % len(_PORT_WINDOWS)]
