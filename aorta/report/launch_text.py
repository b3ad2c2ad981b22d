"""Text renderings of a multi-node launch: node outcomes, the dry-run table, version skew, the
Slurm batch script.

Pure functions returning strings; :mod:`aorta.launch` builds the data, the CLI prints.

Examples
--------
>>> format_skew({"torch.version": {"node0": "2.4.0", "node1": "2.3.1"}})
['nodes differ in 1 setting(s):', '  torch.version: node0=2.4.0  node1=2.3.1']
>>> last_words("loss nan\\nTraceback (most recent call last):\\n  torch.distributed.elastic ...\\n===")
'loss nan'
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aorta.envvars import control_problem
from aorta.errors import UsageError
from aorta.store.secrets import redact_env, redact_secret_shapes

if TYPE_CHECKING:  # typing only: launch/ sits above report/
    from aorta.launch import LaunchResult, NodeOutcome

__all__ = [
    "cause_lines",
    "describe_kill",
    "describe_outcome",
    "dry_run_lines",
    "format_skew",
    "last_words",
    "on_login_node",
    "sbatch_script",
    "shorten",
    "summarize_outcomes",
    "version_rows",
]

_VERBS = {
    "ok": "finished",
    "stopped": "was stopped",
    "not_started": "was not started",
    "interrupted": "was interrupted",
}


def describe_outcome(outcome: NodeOutcome) -> str:
    """``node1 10.0.0.2 exited with code 1 (...)``: one node, one line, for error messages."""
    verb = _VERBS.get(outcome.status)
    what = verb if verb and not outcome.message else (outcome.message or outcome.status)
    if outcome.status == "stopped" and outcome.message:
        what = f"was stopped ({outcome.message})"
    return f"{outcome.node.label} {what}"


def summarize_outcomes(culprits: Iterable[NodeOutcome], others: Iterable[NodeOutcome]) -> str:
    """The nodes that caused a launch's status first, then the ones stopped because of them."""
    parts = [describe_outcome(o) for o in culprits]
    parts += [describe_outcome(o) for o in others if o.status in ("stopped", "not_started")]
    return "; ".join(parts)


def describe_kill(report: Mapping[str, Any], before: str = "") -> str:
    """What a node's teardown found, from the node helper's ``kill`` report."""
    if report.get("fallback"):
        return "the node's Python could not run the cleanup: killed the pid file's session only"
    if report.get("left"):
        return f"{len(report['left'])} process(es) still running after SIGKILL: {report['left']}"
    n = int(report.get("terminated", 0))
    now = f"stopped {n} leftover process(es)" if n else "nothing left"
    return f"{before}; {now}" if before else now


def last_words(text: str) -> str:
    """The line of a failed node's output most likely to say why.

    torchrun ends a failure with its own traceback and a ``ChildFailedError`` box; the line
    before that traceback (the worker's last words) says more. Lines without a letter or digit
    (``=====``) never do.
    """
    lines = [line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    tail = lines[starts[-1] :] if starts and starts[-1] > 0 else []
    if any("torch" in line and "distributed" in line for line in tail):
        lines = lines[: starts[-1]]
    return lines[-1] if lines else ""


#: A line of a failed command's output that says why (docker's ``Error response from daemon``,
#: ``No such file``, a Python exception), not what to do next (``Run 'docker run --help'``).
_CAUSE = re.compile(
    r"(?i)error|fatal|fail|denied|refused|cannot|can't|could not|unable|no such|not found"
    r"|invalid|unknown|permission|exception|killed|timed? ?out|no space|missing"
)


def cause_lines(text: str, *, most: int = 3, width: int = 200) -> str:
    """The lines of a failed command's output that say why, for a one-line message: the last
    ``most`` lines that look like a cause, else the last line; each cut to ``width``
    characters, joined with `` | ``, credential shapes masked (``""``: no output).

    >>> cause_lines("docker: Error response from daemon: no such device --password pw1.\\n"
    ...             "Run 'docker run --help' for more information")
    'docker: Error response from daemon: no such device --password <redacted>'
    >>> cause_lines("step 1\\nstep 2"), cause_lines("")
    ('step 2', '')
    """
    lines = [s for s in map(str.strip, text.splitlines()) if s]
    picked = [s for s in lines if _CAUSE.search(s)][-most:] or lines[-1:]
    cut = [s if len(s) <= width else s[: width - 1] + "…" for s in picked]
    return redact_secret_shapes(" | ".join(cut))


def format_skew(skew: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Lines for :func:`aorta.launch.env_diff`'s result (none when the nodes agree)."""
    if not skew:
        return []
    lines = [f"nodes differ in {len(skew)} setting(s):"]
    for key, values in skew.items():
        lines.append(f"  {key}: " + "  ".join(f"{n}={v}" for n, v in values.items()))
    return lines


def _or_none(value: Any) -> str:
    return "-" if value in (None, "", {}) else str(value)


def version_rows(snapshot: Mapping[str, Any] | None) -> dict[str, str]:
    """The versions ``--dry-run`` shows for one node (``-`` when found none)."""
    if not snapshot:
        return {}
    torch, libs = snapshot.get("torch") or {}, snapshot.get("libraries") or {}
    drivers = snapshot.get("drivers") or {}
    return {
        "python": _or_none(snapshot.get("python")),
        "aorta": _or_none(snapshot.get("aorta")),
        "torch": _or_none(torch.get("version")),
        "cuda/hip": _or_none(torch.get("cuda") or torch.get("hip")),
        "nccl/rccl": _or_none(libs.get("nccl_wheel") or libs.get("nccl") or libs.get("rccl")),
        "driver": _or_none(drivers.get("nvidia") or drivers.get("amdgpu") or drivers.get("rocm")),
    }


def dry_run_lines(report: LaunchResult) -> list[str]:
    """``aorta launch --dry-run``: each node's reachability, versions, environment (secret values
    redacted), command and remote line, then the settings that differ between nodes."""
    port = report.master_port or "? (the head could not probe one)"
    lines = [f"rendezvous: {report.master_addr}:{port}"]
    for name, out in report.outcomes.items():
        state = "reachable" if out.status == "ok" else f"NOT READY: {out.message}"
        lines += ["", f"{out.node.label}: {state}"]
        versions = version_rows(out.snapshot)
        if versions:
            lines.append("  " + "  ".join(f"{k} {v}" for k, v in versions.items()))
        cmd = report.commands.get(name)
        if cmd is not None:
            lines += ["  env:", *(f"    {k}={v}" for k, v in redact_env(cmd.env).items())]
            lines += [f"  unset: {' '.join(cmd.unset)}", *(f"  {c}" for c in cmd.container)]
            lines.append(f"  command: {cmd.describe().splitlines()[-1]}")
            lines.append(f"  remote line: {shorten(cmd.remote)}")
    return lines + format_skew(report.skew)


#: A node's per-launch folder as its sweep prints it: ``<workdir>/.aorta-launch/<run id>/node_<k>/``
#: (``aorta.launch.node_command.node_dir``), whose ``out/`` is the node's output root.
_NODE_OUT = re.compile(r"(?:[^\s'\"`]*/)?\.aorta-launch/[^/\s'\"`]+/node_\d+/out(?=/|\s|$)")


def on_login_node(text: str, output: str) -> str:
    """A node's output line with the paths under the node's own output root (where its sweep
    wrote) shown where they are once the launch has gathered them on the login node: under
    ``output``, the launch's output folder. A command a node prints (``aorta sweep resume
    RUN``) then names the run directory the user has.

    >>> on_login_node("resume with: aorta sweep resume /home/u/.aorta-launch/r1/node_0/out/T/w/2026", "runs")
    'resume with: aorta sweep resume runs/T/w/2026'
    """
    return _NODE_OUT.sub(lambda _: output.rstrip("/") or "/", text)


def shorten(line: str, *, most: int = 240) -> str:
    """A long line as its head and tail around how much was left out (a dry-run's remote
    line is kilobytes of quoted bootstrap).

    >>> shorten("x" * 1000, most=40)
    'xxxxxxxxxxxxxxxxxxxxxxxxxx … (+961 characters) … xxxxxxxxxxxxx'
    """
    if len(line) <= most:
        return line
    head, tail = most * 2 // 3, most // 3
    return f"{line[:head]} … (+{len(line) - head - tail} characters) … {line[-tail:]}"


def sbatch_script(options: Sequence[str], step: Sequence[str], *, run_id: str, cwd: str) -> str:
    """The batch script ``aorta launch --slurm`` submits (and ``--dry-run`` prints): ``#SBATCH``
    options, then ``step`` run from ``cwd``. It carries no environment values. An option with a
    control character is refused (:class:`~aorta.errors.UsageError`): a line break would end
    its ``#SBATCH`` line and make the rest a shell line.

    >>> print(sbatch_script(["--nodes=2"], ["python", "-m", "aorta"], run_id="r1", cwd="/w"), end="")
    #!/bin/bash
    #SBATCH --nodes=2
    # aorta launch --slurm, run r1: one srun step runs every node's command
    # (slurm/node_<k>/run.sh); the spec is in slurm.json, the environment in slurm/node_<k>/env.sh.
    cd /w || exit 1
    exec python -m aorta
    """
    for option in options:  # one #SBATCH line each: a line break would start a shell line
        if problem := control_problem(option):
            raise UsageError(f"sbatch option {option!r}: {problem}")
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {shlex.quote(o)}" for o in options),
            f"# aorta launch --slurm, run {run_id}: one srun step runs every node's command",
            "# (slurm/node_<k>/run.sh); the spec is in slurm.json, the environment in"
            " slurm/node_<k>/env.sh.",
            f"cd {shlex.quote(cwd)} || exit 1",
            f"exec {shlex.join(step)}",
            "",
        ]
    )
