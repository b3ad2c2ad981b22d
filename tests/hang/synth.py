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


# --- whole NCCL jobs: TP × PP × DP × EP groups, with devices that fault ----------------------

#: One training step's collectives, in program order: (parallelism, op, input sizes, dtype).
STEP = (
    ("tp", "_all_gather_base", ((1024, 8),), "BFloat16"),
    ("ep", "all_to_all", ((4096,),), "BFloat16"),
    ("tp", "_reduce_scatter_base", ((2048, 8),), "BFloat16"),
    ("pp", "all_reduce", ((1,),), "Float"),
    ("dp", "all_reduce", ((1024, 1024),), "Float"),
)
DESCS = {
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
    "dp": "DATA_PARALLEL_GROUP",
    "ep": "EXPERT_MODEL_PARALLEL_GROUP",
}
#: NCCL's default collective timeout.
TIMEOUT_MS = 600_000
#: The fields NCCL's pickles write as strings (``'31'``, ``'None'``, ``'False'``, ``"[[1, 2]]"``).
STRING_FIELDS = (
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "record_id",
    "pg_id",
    "time_created_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "timeout_ms",
    "retired",
    "is_p2p",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
)
OP_TYPES = {
    "_all_gather_base": "_ALLGATHER_BASE",
    "all_to_all": "ALLTOALL_BASE",
    "_reduce_scatter_base": "_REDUCE_SCATTER_BASE",
    "all_reduce": "ALLREDUCE",
    "barrier": "BARRIER",
}


def layout(tp: int, pp: int, dp: int, ep: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Megatron's groups (rank = pp·dp·tp + dp·tp + tp index), named as NCCL names them (by
    creation order; ``0`` is the default group): name → (desc, ranks). ``ep`` splits each
    data-parallel group into expert groups of that size. Groups of one rank are left out."""
    world = tp * pp * dp
    out: dict[str, tuple[str, tuple[int, ...]]] = {"0": ("default_pg", tuple(range(world)))}

    def rank(p: int, d: int, t: int) -> int:
        return p * dp * tp + d * tp + t

    found: list[tuple[str, tuple[int, ...]]] = []
    found += [("tp", tuple(rank(p, d, t) for t in range(tp))) for p in range(pp) for d in range(dp)]
    found += [("dp", tuple(rank(p, d, t) for d in range(dp))) for p in range(pp) for t in range(tp)]
    found += [("pp", tuple(rank(p, d, t) for p in range(pp))) for d in range(dp) for t in range(tp)]
    for p in range(pp):
        for t in range(tp):
            for lo in range(0, dp, ep):
                found.append(("ep", tuple(rank(p, d, t) for d in range(lo, min(lo + ep, dp)))))
    for kind, ranks in found:
        if len(ranks) > 1:
            out[str(len(out))] = (DESCS[kind], ranks)
    return out


def _program(rank: int, groups: dict[str, tuple[str, tuple[int, ...]]], steps: int) -> list[Any]:
    mine = {desc: name for name, (desc, ranks) in groups.items() if rank in ranks}
    prog: list[tuple[str, str, Any, str]] = [("0", "barrier", ((1,),), "Float")]
    for _ in range(steps):
        for kind, op, sizes, dtype in STEP:
            if DESCS[kind] in mine:
                prog.append((mine[DESCS[kind]], op, sizes, dtype))
    return prog


def simulate(
    groups: dict[str, tuple[str, tuple[int, ...]]],
    *,
    steps: int,
    faults: dict[int, int],
    launch: bool = False,
    lookahead: int = 6,
) -> dict[str, Any]:
    """Run every rank's program: CPUs enqueue up to ``lookahead`` collectives past their first
    unfinished one; each rank's device runs its collectives in order, and one completes when
    every member's device reached it. A rank in ``faults`` (rank → index in its program)
    has its device die there: it reached that collective (its peers complete it) but never
    finishes it — or, with ``launch``, never reaches it at all (everyone waits).

    Returns ``ops`` (rank → program), ``enq`` (rank → collectives enqueued), ``state`` and
    ``start``/``end`` (rank → index → state, tick), and ``faulted`` (the ranks whose device
    died: a rank held up before its fault is not one)."""
    world = len(groups["0"][1])
    ops = {r: _program(r, groups, steps) for r in range(world)}
    seqs: dict[int, list[int]] = {}
    where: dict[tuple[str, int], dict[int, int]] = {}  # (group, seq) → rank → index
    for r, prog in ops.items():
        count: dict[str, int] = {}
        seqs[r] = []
        for i, (name, *_rest) in enumerate(prog):
            count[name] = count.get(name, 0) + 1
            seqs[r].append(count[name])
            where.setdefault((name, count[name]), {})[r] = i
    enq = dict.fromkeys(range(world), 0)
    dev = dict.fromkeys(range(world), 0)  # the index each device is at
    state: dict[int, dict[int, str]] = {r: {} for r in range(world)}
    start: dict[int, dict[int, int]] = {r: {} for r in range(world)}
    end: dict[int, dict[int, int]] = {r: {} for r in range(world)}
    dead: set[int] = set()
    tick, changed = 0, True
    while changed:
        changed = False
        tick += 1
        for r in range(world):
            while enq[r] < len(ops[r]) and enq[r] < dev[r] + lookahead:
                state[r][enq[r]] = "scheduled"
                enq[r] += 1
                changed = True
            i = dev[r]
            if r in dead or i >= enq[r] or state[r][i] != "scheduled":
                continue
            if launch and faults.get(r) == i:
                dead.add(r)
                continue
            state[r][i], start[r][i] = "started", tick
            changed = True
        for r in range(world):
            i = dev[r]
            if r in dead or i >= enq[r] or state[r][i] != "started":
                continue
            peers = where[(ops[r][i][0], seqs[r][i])]
            if all(state[m].get(j) in ("started", "completed") for m, j in peers.items()):
                for m, j in peers.items():
                    if faults.get(m) == j and not launch:
                        dead.add(m)  # its part ran; it never sees it finish
                        continue
                    if state[m][j] == "started":
                        state[m][j], end[m][j] = "completed", tick
                        dev[m] += 1
                changed = True
    return {
        "ops": ops,
        "seqs": seqs,
        "enq": enq,
        "state": state,
        "start": start,
        "end": end,
        "faulted": sorted(dead),
        "tick": tick,
    }


def job_dumps(
    groups: dict[str, tuple[str, tuple[int, ...]]],
    sim: dict[str, Any],
    *,
    strings: bool = False,
) -> dict[int, dict[str, Any]]:
    """Every rank's NCCL dump of a :func:`simulate`\\ d job (``strings``: entry fields as
    strings, as NCCL's pickles write them)."""
    return {r: rank_dump(groups, sim, r, strings=strings) for r in sim["ops"]}


def rank_dump(
    groups: dict[str, tuple[str, tuple[int, ...]]],
    sim: dict[str, Any],
    r: int,
    *,
    strings: bool = False,
    keep: int | None = None,
) -> dict[str, Any]:
    """One rank's NCCL dump of a simulated job; ``keep``: the ring buffer's size
    (the last ``keep`` entries; ``pg_status`` still counts every collective)."""
    t0 = 1_796_277_354_628_426_347
    prog = sim["ops"][r]
    local = {}
    for name, (_, ranks) in groups.items():
        if r in ranks:
            local[name] = len(local)
    entries, status = [], {}
    for i in range(sim["enq"][r]):
        name, op, sizes, dtype = prog[i]
        seq, st = sim["seqs"][r][i], sim["state"][r][i]
        e = entry(
            seq,
            name=name,
            desc=groups[name][0],
            pg_id=local[name],
            op=op,
            sizes=sizes,
            dtypes=(dtype,) * len(sizes),
            state=st,
            backend="nccl",
            record_id=i,
        )
        e["frames"] = []
        e["timeout_ms"] = TIMEOUT_MS
        e["time_created_ns"] = t0 + 1_000_000 * i
        began, ended = sim["start"][r].get(i), sim["end"][r].get(i)
        e["time_discovered_started_ns"] = t0 + 10**9 * began if began else None
        e["time_discovered_completed_ns"] = t0 + 10**9 * ended if ended else None
        enq, started, done = status.get(local[name], (0, 0, 0))
        status[local[name]] = (
            max(enq, seq),
            max(started, seq) if st != "scheduled" else started,
            max(done, seq) if st == "completed" else done,
        )
        if strings:
            for key in STRING_FIELDS:
                e[key] = str(e[key])
        entries.append(e)
    if keep is not None:
        entries = entries[-keep:]
    return {
        "version": "2.10",
        "comm_lib_version": "2.21.5",
        "nccl_comm_state": {},
        "pg_config": {
            name: {"name": name, "desc": desc, "ranks": str(list(ranks))}
            for name, (desc, ranks) in groups.items()
            if r in ranks
        },
        "pg_status": {
            str(pg): {
                "last_enqueued_collective": enq,
                "last_started_collective": started,
                "last_completed_collective": done,
            }
            for pg, (enq, started, done) in status.items()
        },
        "entries": entries,
    }


def watchdog_lines(
    groups: dict[str, tuple[str, tuple[int, ...]]], sim: dict[str, Any], rank: int
) -> list[str]:
    """What NCCL's watchdog prints on ``rank`` once its first unfinished collective times
    out: the ``Watchdog caught collective operation timeout`` line and the positions line."""
    prog, state = sim["ops"][rank], sim["state"][rank]
    pending = [i for i in range(sim["enq"][rank]) if state[i] != "completed"]
    if not pending or state[pending[0]] != "started":
        return []
    i = pending[0]
    name, op, sizes, _ = prog[i]
    desc, ranks = groups[name]
    seq = sim["seqs"][rank][i]
    numel = 1
    for d in sizes[0]:
        numel *= d
    done = max((sim["seqs"][rank][j] for j in range(i) if prog[j][0] == name), default=0)
    enq = max(sim["seqs"][rank][j] for j in range(sim["enq"][rank]) if prog[j][0] == name)
    head = (
        f"[rank{rank}]:[E1206 19:02:11.518000 ProcessGroupNCCL.cpp:632] [PG ID "
        f"{_local_id(groups, rank, name)} PG GUID {name}({desc}) Rank {ranks.index(rank)}]"
    )
    return [
        f"{head} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType={OP_TYPES[op]}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={TIMEOUT_MS})"
        f" ran for {TIMEOUT_MS + 15} milliseconds before timing out.",
        f"{head} Exception (either an error or timeout) detected by watchdog at work: {seq}, "
        f"last enqueued NCCL work: {enq}, last completed NCCL work: {done}.",
    ]


def _local_id(groups: dict[str, tuple[str, tuple[int, ...]]], rank: int, name: str) -> int:
    return [n for n, (_, ranks) in groups.items() if rank in ranks].index(name)


def fault_index(
    groups: dict[str, tuple[str, tuple[int, ...]]], rank: int, step: int, kind: str, *, steps: int
) -> int:
    """The index in ``rank``'s program of its ``kind`` collective (``tp``, ``ep``, ...) of
    step ``step`` (the first of that kind in the step)."""
    prog = _program(rank, groups, steps)
    desc = DESCS[kind]
    hits = [i for i, (name, *_r) in enumerate(prog) if groups[name][0] == desc]
    per_step = len(hits) // steps
    return hits[step * per_step]
