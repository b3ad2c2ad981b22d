"""The run directory: layout, atomic writes, the manifest, the lock, and what "trial done" means.

Layout (compatible with upstream AORTA)::

    <output>/<ticket or _no_ticket_>/<workload>/<UTC YYYY-MM-DDTHH-MM-SS>[-N]/
      manifest.json           status (running|complete|interrupted), recipe sha256, host, …
      recipe.resolved.yaml    every field explicit; `aorta sweep run --recipe` accepts it as-is
                              (0600: its extra_env may hold secrets)
      secret_hashes.json      salted hashes of the run's secret values (0600, never bundled)
      host_env.json           environment snapshot
      matrix.md, matrix.json  rewritten atomically as cells or rounds end, and at the end
      results.nc              the xarray Dataset, written when the run ends
      cells/<cell>/cell.json            the planned cell (overlay, config, …)
      cells/<cell>/trial_0007.json      one TrialRecord per trial
      cells/<cell>/trial_0007/          the trial's artifacts: stdout.log, stderr.log, trace/

Every write goes to a temporary file in the same folder and is moved into place with
``os.replace``, so a reader (or a resumed run) never sees half a file.

Examples
--------
>>> import tempfile
>>> rd = RunDir.create(tempfile.mkdtemp(), ticket=None, workload="matmul")
>>> rd.path.parent.name, rd.path.parent.parent.name
('matmul', '_no_ticket_')
>>> rd.trial_path("baseline", 7).name
'trial_0007.json'
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import errno
import fcntl
import json
import os
import shlex
import shutil
import socket
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from aorta.errors import AortaError, UsageError
from aorta.hang.model import NODE_FILE, HangReport, is_evidence_rank_dir
from aorta.hang.stacks import position, read_stacks
from aorta.store.record import TrialRecord, TrialStatus

__all__ = [
    "GPU_EVIDENCE_FILE",
    "WARMUP_TRIAL",
    "RunDir",
    "RunLocked",
    "aorta_command",
    "atomic_write",
    "evidence_name",
    "evidence_rank_dir",
    "gpu_evidence_name",
    "is_evidence_rank_dir",
    "trace_file_name",
    "trial_file_name",
    "trial_relpath",
    "utc_now",
]

NO_TICKET = "_no_ticket_"


def aorta_command(args: str, launcher: Mapping[str, Any] | None = None) -> str:
    """The line that runs ``aorta <args>`` as the run it acts on was started: alone, or under
    the same launcher (``launcher``, as the manifest records it) — a distributed run resumes
    and grows only with all its ranks.

    >>> aorta_command("sweep resume runs/r")
    'aorta sweep resume runs/r'
    >>> aorta_command("sweep resume runs/r", {"kind": "torchrun", "nnodes": 1, "nproc_per_node": 2})
    'torchrun --standalone --nproc-per-node=2 $(command -v aorta) sweep resume runs/r'
    >>> print(aorta_command("sweep resume r", {"kind": "torchrun", "nnodes": 2,
    ...       "nproc_per_node": 8, "rdzv_endpoint": "head:29500"}))
    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=head:29500 $(command -v aorta) sweep resume r  # on every node
    """
    info: Mapping[str, Any] = launcher or {}
    kind = info.get("kind")
    if kind == "torchrun":
        nproc = int(info.get("nproc_per_node") or 1)
        nnodes = int(info.get("nnodes") or 1)
        if nnodes <= 1:
            return f"torchrun --standalone --nproc-per-node={nproc} $(command -v aorta) {args}"
        endpoint = shlex.quote(str(info.get("rdzv_endpoint") or "HEAD:29500"))
        return (
            f"torchrun --nnodes={nnodes} --nproc-per-node={nproc} --rdzv-backend=c10d "
            f"--rdzv-endpoint={endpoint} $(command -v aorta) {args}  # on every node"
        )
    if kind == "srun":
        nodes = int(info.get("nodes") or 1)
        tasks = int(info.get("ntasks_per_node") or 1)
        base = int(info.get("port_base") or 30000)
        inner = (
            "RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
            "MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -1) MASTER_PORT=29500 "
            f"aorta {args}"
        )
        return (
            f"AORTA_TRIAL_MASTER_PORT_BASE={base} srun --kill-on-bad-exit=1 --nodes={nodes} "
            f"--ntasks-per-node={tasks} bash -c {shlex.quote(inner)}"
        )
    if kind == "other":
        return f"aorta {args}  # on every rank, under the launcher that started the run"
    return f"aorta {args}"


# Every file name of the run directory, here and nowhere else.
MANIFEST = "manifest.json"
LOCK = "run.lock"
RECIPE = "recipe.resolved.yaml"
#: The run's knowledge of its secrets (``aorta.store.redact``): a salt and keyed hashes of the
#: secret values, never the values; 0600 and never bundled.
SECRET_HASHES = "secret_hashes.json"
HOST_ENV = "host_env.json"
#: What ``aorta launch`` records: every node's outcome, commands, the cross-node differences.
LAUNCH_JSON = "launch.json"
MATRIX_MD = "matrix.md"
MATRIX_JSON = "matrix.json"
RESULTS = "results.nc"
REPORT_DIR = "report"
CELLS = "cells"
CELL_JSON = "cell.json"
#: A trial's profiler traces, inside its artifact folder.
TRACE_DIR = "trace"
#: Suffix of a Kineto trace written by aorta's profiler (TraceLens and HTA read it as is).
TRACE_SUFFIX = ".pt.trace.json.gz"
#: Other host snapshots (``host_env/<host>.json``) and cell environments (``environments/``).
HOST_ENV_DIR = "host_env"
ENVIRONMENTS_DIR = "environments"
#: The manifest inside a bundle (``aorta bundle``): what went in, redaction counts, what was
#: left out and why.
BUNDLE_MANIFEST = "bundle_manifest.json"
#: The HTML report ``aorta report`` writes, when present.
REPORT_HTML = "report.html"
#: What ``aorta launch`` gathers (:mod:`aorta.store.gather`): each node's log and outputs in
#: ``combined_traces/node_<rank>/``, staged in ``.aorta-launch-<run id>/`` under the output
#: until the launch ends; without a run directory from the head, ``_launch_/<run id>/``.
COMBINED_TRACES = "combined_traces"
LAUNCH_LOG = "launch.log"
LAUNCH_STAGING = ".aorta-launch-"
NO_RUN_DIR = "_launch_"
#: The Slurm backend's job (``slurm.json``: the spec, the job id, the hosts), its batch script
#: and each node's shipped files (``slurm/node_<k>/``), in the staging folder.
SLURM_JOB = "slurm.json"
SBATCH_SCRIPT = "aorta.sbatch"
SLURM_DIR = "slurm"
#: A hung trial's evidence, inside its artifact folder (:mod:`aorta.run.forensics`): per rank
#: the flight-recorder dump, the Python stacks and what the capture saw (:func:`evidence_name`);
#: per host the GPU tools' answers and the kernel log's GPU lines. Each aorta rank writes only
#: into its own subfolder (:func:`evidence_rank_dir`: ``hang/rank3/``), so ranks of one node
#: never remove or rename what another uses; runs before that wrote into ``hang/`` itself.
HANG_DIR = "hang"
EVIDENCE_KINDS = ("fr", "stacks", "capture")
#: Where PyTorch's own dump-on-timeout (NCCL's watchdog) writes, one file per rank
#: (``TORCH_FR_DUMP_TEMP_FILE`` + rank), inside the trial's evidence folder.
NCCL_DUMP_PREFIX = "nccl_trace_rank_"
#: ``aorta bisect``'s record of the search so far, in each step's run directory.
BISECT_JSON = "bisect.json"
#: Where a trial's numerics locator (``check_numerics``) writes its findings while the trial
#: runs, inside its artifact folder; read into the record and removed (:mod:`aorta.run.numerics`).
NUMERICS_DIR = ".numerics"
RunStatus = Literal["running", "complete", "interrupted"]


def trace_file_name(rank: int, cycle: int = 0) -> str:
    """The trace file of ``rank`` (``rank0.pt.trace.json.gz``; later profiler cycles
    ``rank0.1.pt.trace.json.gz``).

    >>> trace_file_name(3), trace_file_name(0, cycle=2)
    ('rank3.pt.trace.json.gz', 'rank0.2.pt.trace.json.gz')
    """
    return f"rank{rank}{f'.{cycle}' if cycle else ''}{TRACE_SUFFIX}"


def evidence_name(kind: Literal["fr", "stacks", "capture"], rank: int) -> str:
    """A rank's evidence file in a hung trial's ``hang/`` folder; the rank is the trailing
    number, as in PyTorch's own dump names.

    >>> evidence_name("fr", 3), evidence_name("stacks", 0)
    ('fr_3.json', 'stacks_0.json')
    """
    return f"{kind}_{rank}.json"


def evidence_rank_dir(rank: int) -> str:
    """The subfolder of a trial's ``hang/`` that aorta rank ``rank`` owns (it alone creates,
    writes and removes it). Its readers tell one by :func:`is_evidence_rank_dir` (the hang
    loader's rule, which lives in ``hang``, below ``store``).

    >>> evidence_rank_dir(3), is_evidence_rank_dir(evidence_rank_dir(3))
    ('rank3', True)
    """
    return f"rank{int(rank)}"


def gpu_evidence_name(host: str) -> str:
    """The GPU tools' answers and the kernel log's GPU lines of ``host`` at the capture.

    >>> gpu_evidence_name("gpu-r3")
    'gpu_gpu-r3.txt'
    >>> GPU_EVIDENCE_FILE.fullmatch(gpu_evidence_name("gpu-r3.local")).group(1)
    'gpu-r3.local'
    """
    return f"gpu_{host}.txt"


#: What :func:`gpu_evidence_name` writes, as the readers match it (its host the group): the
#: hang loader's own pattern (:data:`aorta.hang.model.NODE_FILE`), since ``hang`` is below
#: ``store`` and cannot import it from here; the bundle reads it from here.
GPU_EVIDENCE_FILE = NODE_FILE


#: The trial number of a run's discarded warm-up trial (``recipe.warmup``): its record is
#: ``warmup.json`` beside the cell's trials, which no reader of ``trial_*.json`` counts.
WARMUP_TRIAL = -1


#: The most of a version-1 record's stacks file read for its frames (py-spy's JSON of one
#: process is a few hundred kB; a larger file is not one, and is left unread).
_V1_STACKS_BYTES = 16 * 2**20


def _v1_stacks_file(trial_dir: Path, rank: int) -> Path | None:
    """The stacks file of ``rank`` in a version-1 record's trial folder, wherever the rank put
    it: in ``hang/rank<rank>/`` first, then ``hang/`` itself (runs before per-rank folders),
    then any rank's subfolder (one aorta rank may capture a whole job's ranks). Links are
    never followed; ``None`` when there is none. (Only that reader looks for one: version 2
    keeps the stacks in the record.)
    """
    hang = Path(trial_dir) / HANG_DIR
    if not hang.is_dir() or hang.is_symlink():
        return None
    name = evidence_name("stacks", rank)
    try:
        subs = sorted(
            e.name
            for e in os.scandir(hang)
            if is_evidence_rank_dir(e.name) and e.is_dir(follow_symlinks=False)
        )
    except OSError:
        subs = []
    for path in [
        hang / evidence_rank_dir(rank) / name,
        hang / name,
        *(hang / sub / name for sub in subs),
    ]:
        if path.is_file() and not path.is_symlink() and not path.parent.is_symlink():
            return path
    return None


def _main_stack(path: Path) -> tuple[str, ...]:
    """The main thread's frames in a py-spy stacks file (``()`` when it does not read)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(_V1_STACKS_BYTES + 1)
        threads = json.loads(data) if len(data) <= _V1_STACKS_BYTES else None
    except (OSError, ValueError):
        return ()
    where = position(read_stacks(threads)) if isinstance(threads, list) else None
    return where.stack if where is not None else ()


def trial_file_name(trial: int, *, record: bool = True) -> str:
    """A trial's record (``trial_0007.json``) or, with ``record=False``, its artifact folder
    (``trial_0007``), inside its cell's folder; the warm-up trial's are ``warmup(.json)``.

    >>> trial_file_name(7), trial_file_name(7, record=False), trial_file_name(WARMUP_TRIAL)
    ('trial_0007.json', 'trial_0007', 'warmup.json')
    """
    stem = "warmup" if trial == WARMUP_TRIAL else f"trial_{trial:04d}"
    return f"{stem}{'.json' if record else ''}"


def trial_relpath(cell: str, trial: int | None = None) -> str:
    """A cell's folder (``cells/<cell>``), or with ``trial`` the trial's record in it,
    relative to the run directory (``/``-separated, as shown to a user or in matrix.json).

    >>> trial_relpath("base"), trial_relpath("base", 7)
    ('cells/base', 'cells/base/trial_0007.json')
    """
    folder = f"{CELLS}/{cell}"
    return folder if trial is None else f"{folder}/{trial_file_name(trial)}"


def utc_now() -> str:
    """ISO 8601 UTC timestamp with milliseconds (``2026-11-30T04:55:38.123Z``)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def atomic_write(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    ``mode`` sets the permissions before the file becomes visible (``0o600`` for secrets).
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    # The writer's own name, thread included: a sweep's watchdog thread writes what its main
    # thread writes (a stuck trial's record), and one shared name lost one writer's rename.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_native_id()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(tmp, flags, 0o600 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        if mode is None:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class RunLocked(UsageError):
    """Another live sweep holds the run directory."""


class RunDir:
    """One run's directory. Cheap to build; nothing is written until a method says so."""

    def __init__(self, path: str | Path) -> None:
        # Absolute: the path methods return paths under it, and writing one of them back
        # through write_json(rd.host_env_path) must not nest a relative path inside itself.
        self.path = Path(path).absolute()

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        output: str | Path,
        *,
        ticket: str | None,
        workload: str,
        now: _dt.datetime | None = None,
        name: str | None = None,
    ) -> RunDir:
        """Make a new run directory ``<output>/<ticket>/<workload>/<UTC time>[-N]``.

        Runs started in the same second get ``-2``, ``-3``… (``mkdir`` is atomic, so two
        processes never share one). ``name`` (``AORTA_RUN_ID``, set by ``aorta launch``) names
        the folder exactly instead; it must not exist yet.
        """
        stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H-%M-%S")
        parent = Path(output) / _safe(ticket or NO_TICKET) / _safe(workload)
        parent.mkdir(parents=True, exist_ok=True)
        if name is not None:
            path = parent / _safe(name)
            try:
                path.mkdir()
            except FileExistsError:
                raise UsageError(
                    f"{path} exists already: resume it with "
                    f"`{RunDir(path).command(f'sweep resume {shlex.quote(str(path))}')}`"
                ) from None
            (path / CELLS).mkdir()
            return cls(path)
        for n in range(1, 10_000):
            candidate = parent / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            (candidate / CELLS).mkdir()
            return cls(candidate)
        raise AortaError(f"cannot create a run directory under {parent}")

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """An existing run directory (raises :class:`~aorta.errors.UsageError` if it is not one)."""
        rd = cls(path)
        if not (rd.path / MANIFEST).is_file():
            raise UsageError(f"{rd.path}: not an aorta run directory (no {MANIFEST})")
        return rd

    # -- paths ---------------------------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def recipe_path(self) -> Path:
        """``recipe.resolved.yaml``: the recipe as run, every field explicit."""
        return self.path / RECIPE

    @property
    def secret_hashes_path(self) -> Path:
        """``secret_hashes.json``: what redaction looks for, as salted hashes (0600)."""
        return self.path / SECRET_HASHES

    @property
    def host_env_path(self) -> Path:
        return self.path / HOST_ENV

    @property
    def launch_json(self) -> Path:
        """``launch.json``: the launch's record (``aorta launch`` runs only)."""
        return self.path / LAUNCH_JSON

    def host_env_of(self, host: str) -> Path:
        """Another host's snapshot, when ranks ran on several hosts."""
        return self.path / HOST_ENV_DIR / f"{_safe(host)}.json"

    def environment_json(self, name: str) -> Path:
        """A cell environment's definition (``local``, a docker image, …)."""
        return self.path / ENVIRONMENTS_DIR / _safe(name) / "env.json"

    @property
    def matrix_json(self) -> Path:
        return self.path / MATRIX_JSON

    @property
    def results_path(self) -> Path:
        """``results.nc``: the run's Dataset."""
        return self.path / RESULTS

    @property
    def report_dir(self) -> Path:
        """``report/``: what ``aorta report`` writes."""
        return self.path / REPORT_DIR

    @property
    def cells_dir(self) -> Path:
        return self.path / CELLS

    def cell_dir(self, cell: str) -> Path:
        return self.cells_dir / cell

    def cell_json(self, cell: str) -> Path:
        """The planned cell as run (overlay, config, …)."""
        return self.cell_dir(cell) / CELL_JSON

    def trial_path(self, cell: str, trial: int) -> Path:
        return self.cell_dir(cell) / trial_file_name(trial)

    def artifact_dir(self, cell: str, trial: int) -> Path:
        """The trial's own folder (``AORTA_ARTIFACT_DIR``): logs, traces, collected files."""
        return self.cell_dir(cell) / trial_file_name(trial, record=False)

    def set_aside(self, cell: str, trial: int) -> Path | None:
        """Move an earlier attempt's artifact folder (a killed trial's logs and traces) to
        ``trial_NNNN.attempt-K`` beside it, so the next attempt starts from clean files.
        Returns where it went (``None`` when there was nothing)."""
        art = self.artifact_dir(cell, trial)
        if not art.is_dir():
            return None
        for k in range(1, 10_000):
            dest = art.with_name(f"{art.name}.attempt-{k}")
            if not dest.exists():
                art.rename(dest)
                return dest
        raise AortaError(f"{art}: too many earlier attempts")

    def drop_warmup(self) -> None:
        """Remove an earlier warm-up's record and folder (a resumed run warms up again)."""
        for rec in self.warmup_records():
            self.trial_path(rec.cell, WARMUP_TRIAL).unlink(missing_ok=True)
            shutil.rmtree(self.artifact_dir(rec.cell, WARMUP_TRIAL), ignore_errors=True)

    def warmup_records(self) -> list[TrialRecord]:
        """The run's discarded warm-up trial(s): ``cells/<cell>/warmup.json`` (none in a run
        of an aorta before warm-ups, or with ``warmup: false``)."""
        cells = self.cells_dir
        out = []
        for f in sorted(cells.glob(f"*/{trial_file_name(WARMUP_TRIAL)}")) if cells.is_dir() else []:
            try:
                out.append(TrialRecord.model_validate_json(f.read_bytes()))
            except (OSError, ValidationError, ValueError):
                continue
        return out

    def trace_dir(self, cell: str, trial: int) -> Path:
        """The trial's profiler traces (one :func:`trace_file_name` per rank)."""
        return self.artifact_dir(cell, trial) / TRACE_DIR

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use on the run directory's file system."""
        try:
            st = os.statvfs(self.path)
        except OSError:
            return 1 << 62
        return st.f_bavail * st.f_frsize

    def relative(self, path: str | Path) -> str:
        return Path(path).resolve().relative_to(self.path.resolve()).as_posix()

    # -- writes --------------------------------------------------------------------------------

    def write_json(self, rel: str | Path, data: Any) -> Path:
        """Write JSON atomically at ``rel`` (relative to the run directory, or one of its paths)."""
        path = self.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
        return path

    def write_text(self, rel: str | Path, text: str, *, mode: int | None = None) -> Path:
        """Write text atomically at ``rel``; ``mode=0o600`` for a file that may hold secrets."""
        path = self.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text, mode=mode)
        return path

    def write_trial(self, record: TrialRecord) -> Path:
        path = self.trial_path(record.cell, record.trial)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, record.to_json())
        return path

    # -- reads ---------------------------------------------------------------------------------

    def command(self, args: str) -> str:
        """:func:`aorta_command` for this run: ``args`` run as the run was launched (its
        manifest's ``launcher``; alone when it has none or cannot be read).

        >>> import tempfile
        >>> RunDir(tempfile.mkdtemp()).command("sweep status .")
        'aorta sweep status .'
        """
        try:
            launcher = json.loads((self.path / MANIFEST).read_text()).get("launcher")
        except (OSError, ValueError, AttributeError):
            launcher = None
        return aorta_command(args, launcher if isinstance(launcher, Mapping) else None)

    def manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self.path / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{self.path / MANIFEST}: unreadable manifest: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError(
                f"{self.path / MANIFEST}: not an aorta manifest (a JSON object), "
                f"got {type(data).__name__}"
            )
        return data

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        try:
            data = json.loads((self.path / MANIFEST).read_text())
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        data.update(fields)
        try:
            self.write_json(MANIFEST, data)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # A full disk: no room for the temporary copy, but the manifest's own blocks are
            # freed by the truncation and hold the new text (about the same size).
            with open(self.manifest_path, "r+") as fh:
                fh.truncate(0)
                fh.write(json.dumps(data, indent=1, default=str) + "\n")
        return data

    def trial_records(self, *, unreadable: list[Path] | None = None) -> Iterator[TrialRecord]:
        """Every readable trial record, cell folder by cell folder, in trial order.

        A record that cannot be read (truncated, not a record) is skipped; its path is added
        to ``unreadable`` when given, so the caller can say so.
        """
        cells = self.cells_dir
        if not cells.is_dir():
            return
        for cell_dir in sorted(p for p in cells.iterdir() if p.is_dir()):
            for f in sorted(cell_dir.glob("trial_*.json")):
                try:
                    record = TrialRecord.model_validate_json(f.read_bytes())
                except (OSError, ValidationError, ValueError):
                    if unreadable is not None:
                        unreadable.append(f)
                    continue
                yield self._with_v1_stacks(record)

    def _with_v1_stacks(self, record: TrialRecord) -> TrialRecord:
        if record.schema_version != 1 or record.forensics is None:
            return record
        report = self.forensics_of_version(1, record.cell, record.trial, record.forensics)
        return record.model_copy(update={"forensics": report})

    def forensics_of_version(
        self, version: int, cell: str, trial: int, report: HangReport
    ) -> HangReport:
        """A trial's forensics as the current record version holds them: a version-1
        record's culprit frames get their stacks, read here from the trial's stacks files
        once (version 2 writes them into the record, and no renderer opens an evidence file);
        any other version's are returned as they are.

        >>> from aorta.hang import HangReport
        >>> r = HangReport(summary="s", kind="none")
        >>> RunDir(Path("/nonexistent-run")).forensics_of_version(1, "c", 0, r) == r
        True
        """
        if version != 1:
            return report
        folder = self.artifact_dir(cell, trial)
        frames = []
        for frame in report.frames:
            path = None
            if frame.source == "stacks" and not frame.stack:
                path = _v1_stacks_file(folder, frame.rank)
            stack = _main_stack(path) if path is not None else ()
            if stack and path is not None:
                rel = path.relative_to(folder).as_posix()
                frame = dataclasses.replace(frame, stack=stack, stack_file=rel)
            frames.append(frame)
        return dataclasses.replace(report, frames=tuple(frames))

    def completed(self, expected: Mapping[str, str]) -> dict[tuple[str, int], TrialRecord]:
        """Trials a resumed run may skip: a valid record whose ``cell_id`` matches ``expected``
        (cell name → id). A missing, truncated or foreign record is not done."""
        done = {}
        for rec in self.trial_records():
            if expected.get(rec.cell) == rec.cell_id:
                done[(rec.cell, rec.trial)] = rec
        return done

    def missing_trials(self) -> dict[str, list[int]]:
        """Planned trials of this run with no readable record: cell name → trial numbers.

        The plan is each cell's ``cell.json`` (``trials``, which an extend raises); a record
        counts when it is readable and its ``cell_id`` is the manifest's (what a resume skips,
        :meth:`completed`). A ``did_not_run`` record stands for the trials it names as not run
        (``info["not_run"]``). An adaptive schedule stops cells early by design, so there only
        a gap below a cell's last record is missing. ``aorta sweep resume`` runs what is
        listed here; the manifest's ``complete`` alone does not say every record is on disk.

        >>> import tempfile
        >>> rd = RunDir.create(tempfile.mkdtemp(), ticket=None, workload="matmul")
        >>> _ = rd.update_manifest(cells={"base": "c0"})
        >>> _ = rd.write_json(rd.cell_json("base"), {"name": "base", "trials": 2})
        >>> rd.missing_trials()
        {'base': [0, 1]}
        """
        manifest = self.manifest()
        cells = manifest.get("cells") or {}
        adaptive = manifest.get("schedule") == "adaptive"
        have: dict[str, set[int]] = {}
        for rec in self.trial_records():
            if cells.get(rec.cell) != rec.cell_id:
                continue  # a foreign record (another plan's cell) is rerun by a resume
            seen = have.setdefault(rec.cell, set())
            seen.add(rec.trial)
            if rec.status is TrialStatus.DID_NOT_RUN:
                not_run = str(rec.info.get("not_run", "1"))
                seen.update(
                    range(rec.trial, rec.trial + (int(not_run) if not_run.isdigit() else 1))
                )
        missing: dict[str, list[int]] = {}
        for name in cells:
            try:
                planned = int(json.loads(self.cell_json(name).read_text()).get("trials") or 0)
            except (OSError, ValueError, AttributeError):
                continue  # no readable plan for the cell: nothing to compare against
            seen = have.get(name, set())
            if adaptive:
                planned = min(planned, max(seen, default=-1) + 1)
            gone = [t for t in range(planned) if t not in seen]
            if gone:
                missing[name] = gone
        return missing

    def has_traces(self) -> bool:
        """Whether any trial left a profiler trace (a file in ``cells/*/trial_*/trace/``)."""
        return any(p.is_file() for p in self.cells_dir.glob(f"*/trial_*/{TRACE_DIR}/*"))

    def collects_traces(self) -> bool:
        """Whether any planned cell asked for ``torch_profiler`` (its ``cell.json``)."""
        for path in self.cells_dir.glob(f"*/{CELL_JSON}"):
            try:
                collect = json.loads(path.read_text()).get("collect") or []
            except (OSError, ValueError, AttributeError):
                continue
            names = [c.get("name") if isinstance(c, dict) else c for c in collect]
            if "torch_profiler" in names:
                return True
        return False

    # -- the lock ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run directory: a second sweep on it fails with :class:`RunLocked`.

        The lock is the kernel's (``flock`` on ``run.lock``), so it is released when its holder
        dies however it dies, and taking it is atomic: of several resumes started at once after
        a crash exactly one wins. The file names its holder for the error message; a holder
        named on another host (a shared file system whose locks do not reach this host) is
        respected until the file is removed.
        """
        path = self.path / LOCK
        me = {"host": socket.gethostname(), "pid": os.getpid(), "since": utc_now()}
        fd = _lock_file(path)
        try:
            holder = _read_lock(path)
            if holder and holder.get("host") not in (None, me["host"]):
                raise RunLocked(
                    f"{self.path} is in use by {_holder(path)} (remove {path} if that process "
                    "is gone)"
                )
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
            try:
                yield
            finally:
                # Unlinked while still locked: whoever opened this inode meanwhile finds it
                # gone from the path after locking it, and retries (see _lock_file).
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        finally:
            os.close(fd)  # releases the flock

    def live_status(self) -> tuple[str, dict[str, Any] | None]:
        """The run's status as it is now, and its lock holder (:meth:`owner`).

        The manifest says ``running`` from the start to the end of a sweep; a sweep killed with
        ``kill -9`` (or a lost node) never rewrites it. Here such a run is ``interrupted`` when
        its holder is gone, or when no process holds the lock at all.

        >>> import tempfile
        >>> rd = RunDir.create(tempfile.mkdtemp(), ticket=None, workload="matmul")
        >>> _ = rd.update_manifest(status="running", pid=-1)
        >>> rd.live_status()
        ('interrupted', None)
        """
        status = str(self.manifest().get("status"))
        owner = self.owner()
        if status == "running" and (owner is None or owner["alive"] is False):
            status = "interrupted"
        return status, owner

    def owner(self) -> dict[str, Any] | None:
        """Who holds the run directory, from ``run.lock``: ``{host, pid, since, alive}``, or
        ``None`` when no process ever held it or the holder let go (the file is removed then).

        ``alive`` is ``True`` while a live process on this host holds the lock, ``False`` when
        the holder is gone (a ``kill -9`` leaves the file behind; a resume takes it over), and
        ``None`` for a holder on another host, which this host cannot check. Nothing is
        written; the lock is probed with a shared ``flock`` only when the named pid still
        exists (a recycled pid holds no lock).

        >>> import tempfile
        >>> rd = RunDir.create(tempfile.mkdtemp(), ticket=None, workload="matmul")
        >>> rd.owner() is None
        True
        >>> with rd.lock():
        ...     rd.owner()["alive"]
        True
        """
        path = self.path / LOCK
        if not path.is_file():
            return None
        holder = _read_lock(path) or {}
        if holder.get("host") not in (None, socket.gethostname()):
            return {**holder, "alive": None}
        return {**holder, "alive": _pid_exists(holder.get("pid")) and _is_locked(path)}


def _pid_exists(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _is_locked(path: Path) -> bool:
    """Whether some process holds ``path``'s ``flock`` (probed with a shared lock, let go at once)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def _lock_file(path: Path) -> int:
    """An open, exclusively ``flock``-ed descriptor of ``path`` (the file the path names now)."""
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLocked(f"{path.parent} is in use by {_holder(path)}") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed it after we opened it: lock the new file instead
    raise RunLocked(f"{path.parent}: could not take the lock {path}")


def _holder(path: Path) -> str:
    holder = _read_lock(path)
    return f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process"


def _read_lock(path: Path) -> dict[str, Any] | None:
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _safe(part: str) -> str:
    # A ticket like "JIRA/123" must not create nested folders.
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in part).strip(".")
    return cleaned or "_"
