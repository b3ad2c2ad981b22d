"""Sweeps under torchrun: how ranks agree, exchange outcomes and meet for each trial.

The launch contract is upstream AORTA's: the same command on every rank, the launcher
providing ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``::

    torchrun --nproc-per-node=N $(which aorta) sweep run --recipe R

Every rank runs every trial (so collectives complete); only rank 0 writes the run directory.
The engines talk through a key-value store:

* **torchrun's agent store** when there is one (``TORCHELASTIC_USE_AGENT_STORE=True``): every
  rank connects to it as a client at ``MASTER_ADDR:MASTER_PORT``;
* otherwise (srun, static launchers) rank 0 hosts one at ``AORTA_TRIAL_MASTER_PORT_BASE``, and
  the launcher must export that variable: the base and the next 999 ports are reserved for
  aorta — the base for the engines, ``base + 1 + (trial % 999)`` for each trial's rendezvous.

Each trial gets a fresh rendezvous: rank 0 names an endpoint (a free port on its host, shared
through the agent store — or the port above from the reserved range), every rank's trial
(a worker process or an in-process workload) uses it as ``MASTER_ADDR:MASTER_PORT``, and rank 0's
trial hosts the trial's store. A plain ``torch.distributed.init_process_group()`` in a
workload therefore works unchanged; :func:`init_process_group` is the helper aorta's own
workloads use.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aorta import envvars
from aorta.errors import AortaError, UsageError
from aorta.run.ports import rendezvous_port
from aorta.run.workload import TrialContext

__all__ = [
    "DistEnv",
    "LocalCoordinator",
    "StoreCoordinator",
    "TrialPeers",
    "choose_backend",
    "coordinator_for",
    "init_process_group",
    "launcher_of",
    "trial_env",
]


@dataclass(frozen=True)
class DistEnv:
    """The launcher's view of this process: rank, world size and where rank 0 is."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    agent_store: bool = False
    #: A token that is the same on every rank of this job (keys in a shared store use it).
    job_id: str = "local"
    port_base: int | None = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> DistEnv:
        """Read ``RANK``/``WORLD_SIZE``/… (raises :class:`UsageError` on malformed values)."""
        env = os.environ if environ is None else environ

        def number(name: str, default: int | None) -> int | None:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            try:
                return int(raw)
            except ValueError:
                raise UsageError(f"{name}={raw!r} is not a number (set by the launcher)") from None

        world = number("WORLD_SIZE", 1) or 1
        rank = number("RANK", 0) or 0
        if not 0 <= rank < world:
            raise UsageError(f"RANK={rank} is outside WORLD_SIZE={world}")
        job = (
            env.get("TORCHELASTIC_RUN_ID")
            or env.get(envvars.RUN_ID)
            or env.get("SLURM_JOB_ID")
            or "job"
        )
        job += f".{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return cls(
            rank=rank,
            world_size=world,
            local_rank=number("LOCAL_RANK", 0) or 0,
            master_addr=env.get("MASTER_ADDR"),
            master_port=number("MASTER_PORT", None),
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
            job_id=job,
            port_base=number(envvars.TRIAL_MASTER_PORT_BASE, None),
        )


def launcher_of(dist: DistEnv, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """How this job's ranks were started, as the manifest records it (``launcher``) for the
    commands aorta prints to resume or grow the run (:func:`aorta.store.rundir.aorta_command`):
    ``none`` (one process), ``torchrun`` (nodes, processes per node, the rendezvous endpoint
    across nodes), ``srun`` (nodes, tasks per node, the trial port base) or ``other``.

    >>> launcher_of(DistEnv())
    {'kind': 'none'}
    >>> env = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2"}
    >>> launcher_of(DistEnv(rank=0, world_size=2), env)
    {'kind': 'torchrun', 'nnodes': 1, 'nproc_per_node': 2}
    """
    env = os.environ if environ is None else environ
    if not dist.distributed:
        return {"kind": "none"}
    raw_local = env.get("LOCAL_WORLD_SIZE", "")
    local = int(raw_local) if raw_local.isdigit() else 0
    if "TORCHELASTIC_RUN_ID" in env:
        nproc = local or dist.world_size
        nnodes = max(1, dist.world_size // nproc)
        out: dict[str, Any] = {"kind": "torchrun", "nnodes": nnodes, "nproc_per_node": nproc}
        if nnodes > 1:
            out["rdzv_endpoint"] = f"{dist.master_addr or 'HEAD'}:{dist.master_port or 29500}"
        return out
    if "SLURM_JOB_ID" in env:
        raw = env.get("SLURM_NNODES", "1")
        nodes = int(raw) if raw.isdigit() and int(raw) > 0 else 1
        return {
            "kind": "srun",
            "nodes": nodes,
            "ntasks_per_node": max(1, dist.world_size // nodes),
            "port_base": dist.port_base,
        }
    return {"kind": "other", "world_size": dist.world_size}


def choose_backend(requested: str | None = None) -> str:
    """``nccl`` when a GPU is visible (RCCL on ROCm answers to the same name), else ``gloo``;
    ``requested`` or ``AORTA_BACKEND`` overrides."""
    choice = requested or os.environ.get(envvars.BACKEND) or "auto"
    if choice != "auto":
        return choice
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


class LocalCoordinator:
    """One process, no peers: every exchange is local."""

    rank = 0
    world_size = 1
    distributed = False

    def share(self, key: str, produce: Callable[[], Any], *, timeout_s: float) -> Any:
        return produce()

    def gather(self, key: str, value: Any, *, timeout_s: float) -> list[Any] | None:
        return [value]

    def raise_abort(self, key: str, reason: str) -> None:
        pass

    def abort_reason(self, key: str) -> str | None:
        return None

    def finish(self, *, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class StoreCoordinator:
    """Ranks coordinating through a torch ``TCPStore`` (see the module docstring)."""

    distributed = True

    def __init__(self, env: DistEnv, *, connect_timeout_s: float = 300.0) -> None:
        self.env = env
        self.rank = env.rank
        self.world_size = env.world_size
        self.prefix = f"aorta/{env.job_id}/"
        timeout = timedelta(seconds=connect_timeout_s)
        # The launcher's mistakes are told before torch is imported (~1.5 s a rank).
        if env.master_addr is None:
            raise UsageError(
                "WORLD_SIZE > 1 but MASTER_ADDR is not set: start aorta under torchrun or srun"
            )
        if env.agent_store:
            port, unset = (
                env.master_port,
                "TORCHELASTIC_USE_AGENT_STORE is set but MASTER_PORT is not",
            )
        else:
            port, unset = (
                env.port_base,
                (
                    f"WORLD_SIZE={env.world_size} without torchrun's agent store: export "
                    f"{envvars.TRIAL_MASTER_PORT_BASE} (the first of 1000 free ports reserved for aorta, e.g. 30000) "
                    "on every rank"
                ),
            )
        if port is None:
            raise UsageError(unset)
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # re-exported, no __all__

        if env.agent_store:
            self.store = TCPStore(
                env.master_addr, port, None, False, timeout, wait_for_workers=False
            )
        else:
            try:
                self.store = TCPStore(
                    env.master_addr,
                    port,
                    env.world_size,
                    env.rank == 0,
                    timeout,
                    wait_for_workers=False,
                )
            except RuntimeError as exc:  # torch's DistNetworkError: in use, refused, timed out
                where = f"{env.master_addr}:{port} ({envvars.TRIAL_MASTER_PORT_BASE})"
                if "EADDRINUSE" in str(exc):
                    raise AortaError(
                        f"rank {env.rank}: port {where} is held by another process: pick a base "
                        "whose 1000 ports are free, below the kernel's ephemeral port range "
                        "(net.ipv4.ip_local_port_range)"
                    ) from None
                raise AortaError(f"rank {env.rank}: the engines' store at {where}: {exc}") from None

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _get(self, key: str, timeout_s: float) -> Any:
        # Polled, not torch's blocking store.wait: a signal's Python handler (torchrun's or
        # Slurm's SIGTERM, Ctrl-C) runs only between calls, so a rank inside a wait ignored
        # them for as long as the wait lasted (up to a trial's deadline) and torchrun killed it
        # 30 s later. The pause grows to 50 ms (a quick answer stays quick), and to 250 ms
        # after 10 s (ranks that wait out a straggler's trial ask the store 4 times a second).
        full = self._key(key)
        start = time.monotonic()
        deadline = start + max(1.0, timeout_s)
        pause, why = 0.001, ""
        try:
            while not self.store.check([full]):
                now = time.monotonic()
                if now >= deadline:
                    break
                time.sleep(pause)
                pause = min(2 * pause, 0.05 if now - start < 10 else 0.25)
            else:
                return json.loads(self.store.get(full))
        except RuntimeError as exc:  # torch's DistError: the store went away
            why = f" ({exc})"
        raise AortaError(
            f"rank {self.rank}: no answer for {key!r} from the other ranks within {timeout_s:.0f} s{why}"
        )

    def _set(self, key: str, value: Any) -> None:
        self.store.set(self._key(key), json.dumps(value, default=str))

    def share(self, key: str, produce: Callable[[], Any], *, timeout_s: float) -> Any:
        """Rank 0 computes ``produce()`` and publishes it; every rank returns the value."""
        if self.rank == 0:
            value = produce()
            self._set(key, value)
            return value
        return self._get(key, timeout_s)

    def gather(self, key: str, value: Any, *, timeout_s: float) -> list[Any] | None:
        """Rank 0 receives every rank's ``value`` (``None`` for a rank that never answered);
        other ranks get ``None``."""
        self._set(f"{key}/{self.rank}", value)
        if self.rank != 0:
            return None
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        for r in range(self.world_size):
            try:
                out.append(self._get(f"{key}/{r}", max(1.0, deadline - time.monotonic())))
            except AortaError:
                out.append(None)
        return out

    def raise_abort(self, key: str, reason: str) -> None:
        """Tell the other ranks to stop their part of trial ``key`` (this rank's trial died)."""
        with contextlib.suppress(Exception):
            self.store.set(self._key(f"abort/{key}"), reason)

    def abort_reason(self, key: str) -> str | None:
        full = self._key(f"abort/{key}")
        try:
            if self.store.check([full]):
                return self.store.get(full).decode()
        except Exception:
            return None
        return None

    def post(self, key: str) -> None:
        """Mark ``key`` as done by this rank (see :meth:`all_posted`)."""
        with contextlib.suppress(Exception):
            self._set(f"{key}/{self.rank}", True)

    def all_posted(self, key: str) -> bool:
        """Whether every rank has posted ``key``."""
        try:
            return bool(self.store.check([self._key(f"{key}/{r}") for r in range(self.world_size)]))
        except Exception:
            return True  # the store went away: nobody is left to wait for

    def finish(self, *, timeout_s: float) -> None:
        """Everyone is done; rank 0 (which may host the store) leaves last."""
        self._set(f"finished/{self.rank}", True)
        if self.rank == 0:
            for r in range(1, self.world_size):
                with contextlib.suppress(AortaError):
                    self._get(f"finished/{r}", timeout_s)

    def close(self) -> None:
        self.store = None  # type: ignore[assignment]


class TrialPeers:
    """The other ranks of trial ``seq``, as a hang capture sees them
    (:class:`aorta.run.forensics.Peers`): a rank that finds the trial stuck stops theirs
    through the trial's abort key, so every rank takes its evidence at once, and no rank kills
    before the others are done (a killed peer ends the collective the others are read in)."""

    def __init__(self, coord: StoreCoordinator, seq: int) -> None:
        self.coord, self.seq = coord, seq

    def announce(self, why: str) -> None:
        what = "hung" if why == "hang" else "reached its deadline"
        self.coord.raise_abort(
            str(self.seq),
            f"timeout|rank {self.coord.rank}'s trial {what}; this rank was stopped to take its evidence",
        )

    def captured(self) -> None:
        self.coord.post(f"trial/{self.seq}/captured")

    def wait_captured(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while not self.coord.all_posted(f"trial/{self.seq}/captured") and time.monotonic() < end:
            time.sleep(0.05)


def coordinator_for(env: DistEnv) -> LocalCoordinator | StoreCoordinator:
    return StoreCoordinator(env) if env.distributed else LocalCoordinator()


def trial_endpoint(
    coord: LocalCoordinator | StoreCoordinator, env: DistEnv, seq: int, *, timeout_s: float
) -> dict[str, Any]:
    """Where trial ``seq`` meets: ``{"addr", "port"}`` — the same answer on every rank."""

    def pick() -> dict[str, Any]:
        if env.agent_store or env.port_base is None:
            return {"addr": env.master_addr or "127.0.0.1", "port": rendezvous_port()}
        return {"addr": env.master_addr, "port": env.port_base + 1 + seq % 999}

    endpoint: dict[str, Any] = coord.share(f"trial/{seq}/endpoint", pick, timeout_s=timeout_s)
    return endpoint


def trial_env(endpoint: dict[str, Any]) -> dict[str, str]:
    """Variables that point a trial's ``init_process_group()`` at its own rendezvous: rank 0's
    trial hosts a fresh store there (so no key of an earlier trial can interfere)."""
    return {
        "MASTER_ADDR": str(endpoint["addr"]),
        "MASTER_PORT": str(endpoint["port"]),
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    }


def init_process_group(ctx: TrialContext, *, backend: str | None = None) -> Any:
    """Join this trial's process group; returns ``torch.distributed``.

    Uses the trial's rendezvous (``MASTER_ADDR``/``MASTER_PORT`` as the engine set them), the
    backend the engine chose (``ctx.backend``: gloo on CPU, nccl on GPUs), and the time left
    before the trial's deadline as the collective timeout — a peer that died makes the
    others fail instead of hang.
    """
    import torch.distributed as dist

    remaining = ctx.remaining()
    timeout = timedelta(seconds=max(5.0, remaining if remaining is not None else 1800.0))
    kind = backend or ctx.backend or choose_backend()
    if kind == "nccl":
        import torch

        torch.cuda.set_device(ctx.local_rank)
    dist.init_process_group(
        kind, init_method="env://", rank=ctx.rank, world_size=ctx.world_size, timeout=timeout
    )
    return dist


def destroy_process_group() -> None:
    """Leave the trial's process group if one is up (safe to call twice).

    Objects that hold the group (DDP, FSDP modules) must be dropped first; garbage that still
    refers to it is collected here, so no destructor runs against a destroyed group later.
    """
    import gc

    gc.collect()
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
