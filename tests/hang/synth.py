"""Flight-recorder dumps built in the shape torch 2.13 writes them, for cases no CPU run can
record (NCCL's states and ``pg_config``, point-to-point ops, wrapped ring buffers, 64 ranks).

The fields and their forms follow the recorded gloo dumps in ``tests/data/hang/`` (one of
their entries is the template) and torch's ``FlightRecorderDetail.hpp`` for NCCL: JSON
dumps write ``pg_status`` numbers as strings and an unset time as ``0``; NCCL entries go
``scheduled`` → ``started`` → ``completed`` and ``pg_config`` is keyed by the group's name
with its ranks as the string ``"[0, 1]"``; gloo keys ``pg_config`` by ``''`` and leaves every
``state`` at ``scheduled`` (``retired`` says it finished).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

HANG_DATA = Path(__file__).resolve().parents[1] / "data" / "hang"
#: One real entry of a recorded gloo dump (rank 0 of the ``sleep`` fault, ``all_reduce`` #1).
TEMPLATE: dict[str, Any] = json.loads((HANG_DATA / "sleep" / "hang" / "fr_0.json").read_text())[
    "entries"
][0]

Backend = Literal["gloo", "nccl"]
State = Literal["completed", "started", "scheduled"]


def entry(
    seq: int,
    *,
    name: str = "0",
    desc: str = "default_pg",
    pg_id: int = 0,
    op: str = "all_reduce",
    sizes: Sequence[Sequence[int]] = ((4,),),
    dtypes: Sequence[str] = ("Float",),
    state: State = "completed",
    backend: Backend = "gloo",
    p2p: tuple[str, int, int] | None = None,
    p2p_seq: int = 0,
    record_id: int = 0,
) -> dict[str, Any]:
    """One entry as torch writes it; ``p2p`` = (``send``/``recv``, group-local src, dst)."""
    e = copy.deepcopy(TEMPLATE)
    t0 = 1_796_277_354_628_426_347 + 1_000_000 * record_id
    profiling = f"{backend}:{op}"
    if p2p is not None:
        kind, src, dst = p2p
        profiling = (
            f"{backend}:send {src}->{dst}" if kind == "send" else f"{backend}:recv {dst}<-{src}"
        )
    e.update(
        collective_seq_id=seq,
        op_id=seq,
        record_id=record_id,
        pg_id=pg_id,
        process_group=[name, desc],
        profiling_name=profiling,
        input_sizes=[list(s) for s in sizes],
        output_sizes=[list(s) for s in sizes],
        input_dtypes=list(dtypes),
        output_dtypes=list(dtypes),
        is_p2p=p2p is not None,
        p2p_seq_id=p2p_seq,
        time_created_ns=t0,
    )
    if backend == "gloo":
        e.update(state="scheduled", retired=state == "completed")
        e.update(time_discovered_started_ns=0, time_discovered_completed_ns=0)
    else:
        e.update(state=state, retired=state == "completed")
        e["time_discovered_started_ns"] = t0 + 10 if state != "scheduled" else 0
        e["time_discovered_completed_ns"] = t0 + 20 if state == "completed" else 0
    return e


def run(
    enqueued: int, completed: int, *, first: int = 1, started: bool = False, **kw: Any
) -> list[dict[str, Any]]:
    """Entries ``first``..``enqueued`` of one group, those up to ``completed`` done (NCCL:
    the pending ones ``started`` when asked, else ``scheduled``)."""
    pending: State = "started" if started else "scheduled"
    return [
        entry(s, state="completed" if s <= completed else pending, **kw)
        for s in range(first, enqueued + 1)
    ]


def dump(
    entries: Iterable[dict[str, Any]],
    *,
    status: dict[int, tuple[int, int]] | None = None,
    config: dict[str, tuple[str, Sequence[int]]] | None = None,
    gloo_ranks: Sequence[int] | None = None,
    backend: Backend = "gloo",
) -> dict[str, Any]:
    """A whole dump: ``status`` maps pg_id → (last enqueued, last completed) (default: from
    the entries); ``config`` name → (desc, ranks) as NCCL writes it, or gloo's one ``''``
    key holding ``gloo_ranks``."""
    items = list(entries)
    for i, e in enumerate(items):
        e["record_id"] = i
    if status is None:
        status = {}
        for e in items:
            if e["is_p2p"]:
                continue
            enq, done = status.get(e["pg_id"], (0, 0))
            finished = e["retired"] or e["state"] == "completed"
            seq = e["collective_seq_id"]
            status[e["pg_id"]] = (max(enq, seq), max(done, seq) if finished else done)
    pg_status = {
        str(pg): {
            "last_completed_collective": str(done),
            "last_enqueued_collective": str(enq),
            "last_started_collective": "-1" if backend == "gloo" else str(enq),
        }
        for pg, (enq, done) in status.items()
    }
    if config is not None:
        pg_config = {
            name: {"desc": desc, "name": name, "ranks": str(list(ranks))}
            for name, (desc, ranks) in config.items()
        }
    else:
        pg_config = {"": {"desc": "", "name": "", "ranks": str(list(gloo_ranks or []))}}
    out: dict[str, Any] = {
        "comm_lib_version": "" if backend == "gloo" else "2.21.5",
        "nccl_comm_state": {},
        "pg_config": pg_config,
        "pg_status": pg_status,
        "version": "2.10",
    }
    if items:
        out["entries"] = items
    return out
