"""What a rank's log says about its collectives when there is no dump.

PyTorch's NCCL watchdog and its dump path print a rank's position in one line each, and
gloo's errors say a collective timed out or lost its peer:

- ``[PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective operation timeout:
  WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran
  for 600015 milliseconds before timing out.`` — the rank waits in collective 1234.
- ``... Exception (either an error or timeout) detected by watchdog at work: 32, last
  enqueued NCCL work: 32, last completed NCCL work: 31.``, ``Received a dump signal ...
  Last enqueued NCCL work: 56118, last completed NCCL work: 56118.``, ``NCCL Work update
  periodically: last enqueued NCCL work: …`` — its last enqueued and completed collective.
- gloo: ``Timed out waiting 25000ms for recv operation to complete``, ``Connection closed
  by peer [127.0.0.1]:2345``, ``Read error [...]: Connection reset by peer`` — the
  collective failed (no sequence number).

A line may start with ``[rank3]:`` (torch prefixes each rank's lines, so one combined log
splits by rank) and name its group by ``PG GUID <name>(<desc>)``; older lines say only
``[Rank 3]``. Lines are matched at most :data:`MAX_LINE` characters long, with patterns
that never backtrack far.

Examples
--------
>>> [s] = read_log(["[rank3]:[E1203 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3(ep) Rank 1] "
...     "Exception (either an error or timeout) detected by watchdog at work: 32, "
...     "last enqueued NCCL work: 32, last completed NCCL work: 31."])
>>> s.kind, s.rank, s.group, s.desc, s.enqueued, s.completed
('position', 3, '3', 'ep', 32, 31)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .model import MAX_RANK

__all__ = ["MAX_LINE", "Signal", "SignalKind", "nccl_op", "rank_prefix", "read_log"]

#: Characters of a log line looked at (a watchdog line is under 400).
MAX_LINE = 2000

SignalKind = Literal["timeout", "position", "failed"]

_RANK_PREFIX = re.compile(r"^\[rank(\d{1,7})\]:")
# Numbers are at most 18 digits (a signed 64-bit value): a longer one is no number, and
# the line is no evidence (int() of 5,000 digits raises; a log line is up to MAX_LINE).
_PG = re.compile(r"\[PG ID (\d{1,18}) PG GUID ([^\s()\]]+)(?:\(([^()\]]*)\))? Rank (\d{1,18})\]")
_OLD_RANK = re.compile(r"\[Rank (\d{1,7})\]")
_TIMEOUT = re.compile(
    r"WorkNCCL\(SeqNum=(\d{1,18}), OpType=(\w+)"
    r"(?:, NumelIn=(-?\d{1,18}), NumelOut=(-?\d{1,18}))?"
)
_RAN_FOR = re.compile(r"ran for (\d{1,15}) milliseconds")
_POSITION = re.compile(
    r"[Ll]ast enqueued (?:NCCL )?work: (-?\d{1,18}), "
    r"last completed (?:NCCL )?work: (-?\d{1,18})\b"
)
_GLOO_FAILED = re.compile(
    r"(Timed out waiting \d+ms for (?:recv|send) operation to complete"
    r"|Connection closed by peer|Connection reset by peer"
    r"|Received data size doesn't match expected size)"
)

#: Words one of the patterns needs (a cheap test before the searches).
_WORDS = ("WorkNCCL", "ork: ", "peer", "Timed out", "expected size")

#: WorkNCCL's OpType names as the ops of a dump's ``profiling_name``.
_NCCL_OPS = {
    "ALLREDUCE": "all_reduce",
    "ALLGATHER": "all_gather",
    "_ALLGATHER_BASE": "_all_gather_base",
    "ALLGATHER_COALESCED": "allgather_coalesced",
    "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "_reduce_scatter_base",
    "ALLTOALL": "all_to_all",
    "ALLTOALL_BASE": "all_to_all",
    "BROADCAST": "broadcast",
    "REDUCE": "reduce",
    "BARRIER": "barrier",
    "GATHER": "gather",
    "SCATTER": "scatter",
    "SEND": "send",
    "RECV": "recv",
    "COALESCED": "coalesced",
}


def nccl_op(op_type: str) -> str:
    """A WorkNCCL ``OpType`` as a dump's op name.

    >>> nccl_op("ALLREDUCE"), nccl_op("ALLTOALL_BASE"), nccl_op("SOMETHING_NEW")
    ('all_reduce', 'all_to_all', 'something_new')
    """
    return _NCCL_OPS.get(op_type, op_type.lower())


@dataclass(frozen=True)
class Signal:
    """One line's evidence: a timeout (the rank waits in ``seq``), a position (last
    enqueued/completed), or a failed collective (gloo: no sequence number)."""

    kind: SignalKind
    #: The global rank from the ``[rankN]:`` prefix (``None`` without one).
    rank: int | None
    #: The group's name (``PG GUID``) and description, when the line names them.
    group: str | None
    desc: str | None
    #: The rank within the group (``Rank N`` of the prefix).
    group_rank: int | None
    seq: int | None = None
    op: str | None = None
    numel: int | None = None
    enqueued: int | None = None
    completed: int | None = None
    #: What the line says, shortened (for the report's notes).
    text: str = ""
    #: How long the timed-out collective had run (``ran for N milliseconds``).
    ran_ms: int | None = None


def rank_prefix(line: str) -> int | None:
    """The global rank of a ``[rankN]:`` line (torch's prefix), else ``None`` (also for a
    rank above :data:`~aorta.hang.model.MAX_RANK`: no job has it).

    >>> rank_prefix("[rank12]: Traceback"), rank_prefix("plain"), rank_prefix("[rank9999999]: x")
    (12, None, None)
    """
    m = _RANK_PREFIX.match(line)
    rank = int(m.group(1)) if m else None
    return rank if rank is not None and rank <= MAX_RANK else None


def _where(line: str) -> tuple[int | None, str | None, str | None, int | None]:
    rank = rank_prefix(line)
    m = _PG.search(line)
    if m:
        return rank, m.group(2), m.group(3), int(m.group(4))
    old = _OLD_RANK.search(line)
    return rank, None, None, int(old.group(1)) if old else None


def _signal(line: str) -> Signal | None:
    if not any(word in line for word in _WORDS):
        return None  # most lines: one scan instead of three searches
    rank, group, desc, group_rank = _where(line)
    text = line.strip()[:240]
    if m := _TIMEOUT.search(line):
        numel = int(m.group(3)) if m.group(3) is not None else None
        op = nccl_op(m.group(2))
        ran = _RAN_FOR.search(line)
        return Signal(
            "timeout",
            rank,
            group,
            desc,
            group_rank,
            int(m.group(1)),
            op,
            numel,
            text=text,
            ran_ms=int(ran.group(1)) if ran else None,
        )
    if m := _POSITION.search(line):
        enq, done = int(m.group(1)), int(m.group(2))
        return Signal(
            "position", rank, group, desc, group_rank, enqueued=enq, completed=done, text=text
        )
    if m := _GLOO_FAILED.search(line):
        return Signal("failed", rank, group, desc, group_rank, text=m.group(1))
    return None


def read_log(lines: Iterable[str]) -> list[Signal]:
    """Every watchdog or gloo line of a log, in order, as :class:`Signal`\\ s.

    >>> [s.kind for s in read_log(["[rank0]: RuntimeError: [pair.cc:537] Read error "
    ...     "[127.0.0.1]:26507: Connection reset by peer.", "step 4 loss 0.1"])]
    ['failed']
    """
    out = []
    for line in lines:
        found = _signal(line[:MAX_LINE])
        if found is not None:
            out.append(found)
    return out
